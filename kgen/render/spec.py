"""Stage 3 of render, the typed training spec: every value kgen renders, and everything derived from it.

Values arrive as a nested mapping (see ``kgen.render.layering``); ``build_spec`` has them checked
(kgen.render.validate) and derives names, MASTER_ADDR, world size, the environment and label sets, so
templates only place values.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

from kgen import jobset as jobset_facts
from kgen.render.runsecret import JOB_UID_LABEL, SECRET_DIR, SECRET_FILE
from kgen.render.validate import Patch, validate_values
from kgen.versions import DEFAULT_K8S

NODE_LOST_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


class Features(NamedTuple):
    """Kubernetes features the output may use, from the oldest cluster it must run on."""

    minor: int

    @property
    def pod_failure_policy(self) -> bool:  # GA 1.31
        return self.minor >= 31

    @property
    def pod_replacement_policy(self) -> bool:  # GA 1.34
        return self.minor >= 34

    @property
    def backoff_limit_per_index(self) -> bool:  # GA 1.33: the pod-failure back-off is counted per index
        return self.minor >= 33


def kube_escape(text: str) -> str:
    """Escape a string for Kubernetes' $(VAR) expansion in command, args and env values.

    The kubelet turns "$$" into "$" and "$(NAME)" into NAME's value when NAME is defined earlier;
    doubling every "$" that precedes "$" or "(" makes the process see exactly ``text``."""
    return re.sub(r"\$(?=[$(])", "$$", text)


class EnvVar(NamedTuple):
    name: str
    value: str | None = None
    field_path: str | None = None  # downward API fieldRef (kgen's own variables)
    value_from: dict | None = None  # a user's valueFrom (secretKeyRef, configMapKeyRef, fieldRef, resourceFieldRef)


class TrainingSpec(NamedTuple):
    values: dict[str, Any]
    origins: dict[str, str]
    k8s: Features
    name: str
    namespace: str
    kind: str
    nodes: int
    gpus: int
    nproc_per_node: int
    image: str
    command: tuple[str, ...]
    port: int
    liveness_port: int
    env: tuple[EnvVar, ...] = ()
    resources: dict[str, dict[str, Any]] | None = None  # the trainer's requests/limits
    dns_policy: str = ""  # "" = leave Kubernetes' default
    patches: tuple[Patch, ...] = ()  # the checked `patches:`, each with its origin

    # ---- derived names --------------------------------------------------------------------
    @property
    def service_name(self) -> str:
        return self.name

    @property
    def configmap_name(self) -> str:
        return f"{self.name}-entrypoint"

    @property
    def master_addr(self) -> str:
        """Pod 0's own DNS name: <name>-0.<service> (Job subdomain / StatefulSet serviceName), or
        JobSet's <name>-<replicatedJob>-0-0.<subdomain>."""
        return _master_addr(self.kind, self.name)

    @property
    def world_size(self) -> int:
        return self.nodes * self.nproc_per_node

    @property
    def is_job(self) -> bool:
        return self.kind == "job"

    @property
    def selector_labels(self) -> dict[str, str]:
        return {"app.kubernetes.io/instance": self.name, "kgen.dev/role": "trainer"}

    @property
    def object_labels(self) -> dict[str, str]:
        labels = {
            "app.kubernetes.io/name": "kgen",
            "app.kubernetes.io/instance": self.name,
            "app.kubernetes.io/managed-by": "kgen",
        }
        labels.update(self.values["labels"])
        return labels

    @property
    def pod_labels(self) -> dict[str, str]:
        labels = dict(self.object_labels)
        labels.update(self.selector_labels)
        return labels

    @property
    def entrypoint_args(self) -> list[str]:
        """The trainer's args, escaped so that Kubernetes' $(VAR) expansion leaves them as given."""
        return ["--", *map(kube_escape, self.command)] if self.command else ["--smoke-test"]

    @property
    def container_command(self) -> list[str]:
        return [kube_escape(self.values["python"]), "/opt/kgen/kgen_entrypoint.py"]

    @property
    def shm_volume(self) -> bool:
        """The memory-backed /dev/shm volume; with hostIPC the node's /dev/shm is used instead."""
        return not self.values["hostIPC"]

    @property
    def pod_tolerations(self) -> list[dict[str, Any]]:
        """The user's tolerations, plus a short toleration of the node-lost taints (unless the user
        tolerates those keys already), so a dead node's pod is evicted and replaced in tens of seconds."""
        tolerations = list(self.values["tolerations"])
        seconds = self.values["reform.nodeLostTolerationSeconds"]
        if seconds is None:
            return tolerations
        have = {t.get("key") for t in tolerations if isinstance(t, dict)}
        for key in NODE_LOST_TAINTS:
            if key not in have:
                tolerations.append(
                    {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds}
                )
        return tolerations

    def v(self, key: str) -> Any:
        return self.values[key]

    # ---- run authentication and port fencing (kgen/render/runsecret.py) ---------------------
    @property
    def needs_secret(self) -> bool:
        """Multi-node runs authenticate their liveness channel; one node has none."""
        return self.nodes > 1

    @property
    def secret_from_job_uid(self) -> bool:
        """Job and JobSet pods derive the run's secret from their Job's UID (nothing rendered, nothing stored)."""
        return _secret_from_job_uid(self.values, self.kind, self.nodes)

    @property
    def mounts_secret(self) -> bool:
        """A Secret holds the run's secret: auth.secretName, or a StatefulSet's <name>-auth (Slurm: kgen submit
        writes a new secret into the run's folder; the script holds only its path)."""
        return self.needs_secret and not self.secret_from_job_uid and self.kind != "slurm"

    @property
    def secret_optional(self) -> bool:
        """kgen's own <name>-auth (made by kgen submit, or by hand): a missing one is the entrypoint's one-line
        error; a Secret the user names is waited for by the kubelet (a secret store may create it later)."""
        return self.mounts_secret and not self.values["auth.secretName"]

    @property
    def secret_name(self) -> str:
        return _secret_name(self.values, self.name)

    @property
    def secret_dir(self) -> str:
        return SECRET_DIR

    @property
    def renders_network_policy(self) -> bool:
        """NetworkPolicies do not apply to host-network pods: none is rendered for them."""
        return bool(self.values["networkPolicy.enabled"]) and not self.values["hostNetwork"]

    # ---- JobSet and Kueue (kgen/jobset.py has the naming facts) ----------------------------
    @property
    def is_jobset(self) -> bool:
        return self.kind == "jobset"

    @property
    def replicated_job(self) -> str:
        return jobset_facts.REPLICATED_JOB

    @property
    def subdomain(self) -> str:
        return self.name

    @property
    def workload_labels(self) -> dict[str, str]:
        """Labels of the Job/StatefulSet/JobSet itself: Kueue reads its queue and priority there."""
        labels = dict(self.object_labels)
        if self.values["queue"]:
            labels[jobset_facts.QUEUE_LABEL] = self.values["queue"]
        if self.values["workloadPriorityClass"]:
            labels[jobset_facts.PRIORITY_LABEL] = self.values["workloadPriorityClass"]
        return labels

    @property
    def pod_annotations(self) -> dict[str, str]:
        """Pod template annotations: the values' annotations plus Kueue's topology request."""
        annotations = dict(self.values["annotations"])
        if self.values["topology.required"]:
            annotations[jobset_facts.REQUIRED_TOPOLOGY] = self.values["topology.required"]
        if self.values["topology.preferred"]:
            annotations[jobset_facts.PREFERRED_TOPOLOGY] = self.values["topology.preferred"]
        return annotations

    @property
    def suspended(self) -> bool:
        """Created suspended: Kueue unsuspends a queued Job/JobSet when it admits it."""
        return bool(self.values["queue"]) and self.kind in ("job", "jobset")

    @property
    def jobset_failure_patterns(self) -> dict[str, str]:
        return {
            "disruption": jobset_facts.message_pattern(jobset_facts.PFP_DISRUPTION_INDEX),
            "not_retriable": jobset_facts.message_pattern(jobset_facts.PFP_NOT_RETRIABLE_INDEX),
        }

    @property
    def not_retriable_exit_codes(self) -> list[int]:
        return list(jobset_facts.NOT_RETRIABLE_EXIT_CODES)


def build_spec(values: dict[str, Any], origins: dict[str, str], k8s_minor: int = DEFAULT_K8S) -> TrainingSpec:
    """Check every value (kgen.render.validate, naming the option or file it came from) and derive the spec."""
    v = values
    c = validate_values(values, origins, k8s_minor)
    user_env = [
        EnvVar(key, kube_escape(val)) if isinstance(val, str) else EnvVar(key, value_from=val)
        for key, val in c.user_env
    ]
    features = Features(k8s_minor)
    env = _kgen_env(v, c.kind, c.name, c.nodes, c.nproc, c.port, c.liveness, _master_addr(c.kind, c.name)) + user_env
    return TrainingSpec(
        values=v,
        origins=origins,
        k8s=features,
        name=c.name,
        namespace=c.namespace,
        kind=c.kind,
        nodes=c.nodes,
        gpus=c.gpus,
        nproc_per_node=c.nproc,
        image=c.image,
        command=tuple(v["command"]),
        port=c.port,
        liveness_port=c.liveness,
        env=tuple(env),
        resources=c.resources,
        dns_policy=c.dns_policy,
        patches=c.patches,
    )


def _kgen_env(
    v: dict[str, Any], kind: str, name: str, nodes: int, nproc: int, port: int, liveness: int, master: str
) -> list[EnvVar]:
    env = [
        EnvVar("NNODES", str(nodes)),
        EnvVar("NPROC_PER_NODE", str(nproc)),
        EnvVar("MASTER_ADDR", master),
        EnvVar("MASTER_PORT", str(port)),
        EnvVar("KGEN_LIVENESS_PORT", str(liveness)),
        EnvVar("KGEN_JOB_NAME", name),
        EnvVar("KGEN_KIND", kind),
    ]
    if kind == "job":
        env.append(EnvVar("KGEN_RUN_ID", field_path="metadata.labels['batch.kubernetes.io/controller-uid']"))
    elif kind == "jobset":
        # The child Job's UID: JobSet recreates the child Job on every group restart, so every
        # attempt is a new run; the attempt number itself goes into the rendezvous id as well.
        env.append(EnvVar("KGEN_RUN_ID", field_path="metadata.labels['batch.kubernetes.io/controller-uid']"))
        env.append(
            EnvVar("KGEN_RESTART_ATTEMPT", field_path=f"metadata.labels['{jobset_facts.RESTART_ATTEMPT_LABEL}']")
        )
    else:
        env.append(EnvVar("KGEN_RUN_ID", field_path="metadata.labels['controller-revision-hash']"))
        env.append(EnvVar("KGEN_POD_INDEX", field_path="metadata.labels['apps.kubernetes.io/pod-index']"))
    env += [
        EnvVar("KGEN_MASTER_WAIT_TIMEOUT", str(v["timeouts.masterWait"])),
        EnvVar("KGEN_RDZV_TIMEOUT", str(v["timeouts.rendezvous"])),
        EnvVar("KGEN_HEARTBEAT_INTERVAL", str(v["timeouts.heartbeatInterval"])),
        EnvVar("KGEN_HEARTBEAT_TIMEOUT", str(v["timeouts.heartbeat"])),
        EnvVar("KGEN_MAX_RESTARTS", str(v["maxRestarts"])),
        # A JobSet restarts its whole group itself (jobset.maxRestarts): no re-formation in place there.
        EnvVar("KGEN_MAX_REFORMATIONS", "0" if kind == "jobset" else str(v["reform.maxReformations"])),
        EnvVar("KGEN_REPLACEMENT_TIMEOUT", str(v["reform.replacementTimeout"])),
        EnvVar("KGEN_ON_SCRIPT_ERROR", v["reform.onScriptError"]),
    ]
    if v["hang.timeout"]:  # the hang watchdog (off by default: not rendered)
        env.append(EnvVar("KGEN_HANG_TIMEOUT", str(v["hang.timeout"])))
    if v["health.gate"] != "warn":  # the health gate (the entrypoint's default, warn: not rendered)
        env.append(EnvVar("KGEN_HEALTH_GATE", v["health.gate"]))
    if v["nccl.debug"]:
        env.append(EnvVar("NCCL_DEBUG", v["nccl.debug"]))
    if v["nccl.socketIfname"]:
        env.append(EnvVar("NCCL_SOCKET_IFNAME", v["nccl.socketIfname"]))
    if v["gloo.socketIfname"]:
        env.append(EnvVar("GLOO_SOCKET_IFNAME", v["gloo.socketIfname"]))
    if v["nccl.ibDisable"] is not None:
        env.append(EnvVar("NCCL_IB_DISABLE", "1" if v["nccl.ibDisable"] else "0"))
    if nodes > 1 and _secret_from_job_uid(v, kind, nodes):  # the run's secret, derived from the Job's UID
        env.append(EnvVar("KGEN_JOB_UID", field_path=f"metadata.labels['{JOB_UID_LABEL}']"))
        env.append(EnvVar("KGEN_NAMESPACE", field_path="metadata.namespace"))
    elif nodes > 1:  # the run's secret, mounted read-only from a Secret (never an environment value)
        env.append(EnvVar("KGEN_SECRET_FILE", SECRET_FILE))
        env.append(EnvVar("KGEN_AUTH_NAME", _secret_name(v, name)))  # for the error when it is missing
        env.append(EnvVar("KGEN_NAMESPACE", field_path="metadata.namespace"))
    return env


def _secret_from_job_uid(v: dict[str, Any], kind: str, nodes: int) -> bool:
    return nodes > 1 and kind in ("job", "jobset") and not v["auth.secretName"]


def _secret_name(v: dict[str, Any], name: str) -> str:
    return v["auth.secretName"] or f"{name}-auth"


# ---- JobSet and Kueue ----------------------------------------------------------------------
def _master_addr(kind: str, name: str) -> str:
    if kind == "jobset":
        return jobset_facts.pod_fqdn(name, name, 0)
    return f"{name}-0.{name}"
