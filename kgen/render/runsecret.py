"""Where a run's secret comes from on Kubernetes (README and docs/entrypoint.md, "Security").

Every node's entrypoint proves membership on the liveness channel with the run's secret. ``kgen render``
never puts a secret into its output (the output is a pure function of the command line, the values files
and the kgen version); the secret comes from the cluster:

* **Job and JobSet** (the default kinds): the API server makes a random UID for every Job it creates, and
  the Job controller labels each of the Job's pods with it (``batch.kubernetes.io/controller-uid``; a
  JobSet's child Job likewise). The downward API hands it to the entrypoint as ``KGEN_JOB_UID``, which
  derives the secret from it (HMAC-SHA256 keyed with the UID, over the namespace and the run's name). A
  new Job (a re-apply after ``kubectl delete``, a JobSet's restart) has a new UID and so a new secret; a
  replacement pod of the same Job has the same; nothing outlives the Job.
* **StatefulSet**: its pods carry no such UID. They mount the Secret ``<name>-auth`` (optional, so a missing
  one is a one-line error in the pod's log, not a pod stuck in ContainerCreating), which ``kgen submit``
  creates with a fresh random value and an owner reference to the StatefulSet (garbage-collected with it);
  ``kgen render`` says on stderr how to create it for ``kubectl apply``.
* **auth.secretName**: a Secret the user manages, mounted (not optional: the kubelet waits for it, as for
  one a secret store creates shortly after), for any kind.
"""

from __future__ import annotations

import base64
import shlex

SECRET_KEY = "secret"  # the data key in the run's Secret (<name>-auth or auth.secretName)
SECRET_DIR = "/var/run/secrets/kgen"  # where the pods mount it, read-only
SECRET_FILE = f"{SECRET_DIR}/{SECRET_KEY}"  # KGEN_SECRET_FILE in the pods
JOB_UID_LABEL = "batch.kubernetes.io/controller-uid"  # the Job controller's label on every pod of a Job (1.27+)
NEW_SECRET = "python3 -c 'import secrets; print(secrets.token_hex(32))'"


def create_secret_line(name: str, namespace: str, run: str) -> str:
    """The command that creates a run's Secret for `kgen render | kubectl apply -f -`, with the labels `kgen stop`
    finds a run's objects by (the entrypoint's one-line error about a missing Secret gives the same command)."""
    ns = f" -n {shlex.quote(namespace)}" if namespace else ""
    labels = " ".join(
        shlex.quote(f"{k}={v}")
        for k, v in (("app.kubernetes.io/instance", run), ("app.kubernetes.io/managed-by", "kgen"))
    )
    return (
        f'kubectl create secret generic {name}{ns} --from-literal={SECRET_KEY}="$({NEW_SECRET})" && '
        f"kubectl label secret {name}{ns} {labels}"
    )


def secret_object(name: str, labels: dict[str, str], value: str) -> dict:
    """The run's Secret as `kgen submit` creates it for a StatefulSet (``value``: fresh random, 64 hex)."""
    data = base64.b64encode(value.encode()).decode()
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "labels": dict(labels)},
        "type": "Opaque",
        "data": {SECRET_KEY: data},
    }


def owned_by(secret: dict, workload: dict) -> dict:
    """``secret`` with an owner reference to ``workload`` (as the API server answered it: with its uid)."""
    meta = workload["metadata"]
    ref = {"apiVersion": workload["apiVersion"], "kind": workload["kind"], "name": meta["name"], "uid": meta["uid"]}
    return {**secret, "metadata": {**secret["metadata"], "ownerReferences": [ref]}}
