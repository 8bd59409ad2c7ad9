"""Kubeflow MPIJob (kubeflow.org/v2beta1, mpi-operator; kubeflow.org/v1 in training-operator 1.x):
``mpiReplicaSpecs`` Launcher (one pod, it runs ``mpirun``) and Worker (the ranks' pods, which run sshd for the
launcher); ``slotsPerWorker`` processes per worker. The operator makes a headless Service for the workers
(``<job>-worker-N.<job>-worker``), the hostfile (OMPI_MCA_orte_default_hostfile / I_MPI_HYDRA_HOST_FILE) and the
SSH keys, and runs the launcher as a batch Job (its backoffLimit, 6 unless runPolicy.backoffLimit says
otherwise, bounds its restarts). kubeflow.org/v1alpha1 and v1alpha2 (``spec.replicas`` + ``spec.template``) are
no longer served by any operator."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kgen.lint.kinds.base import Adapter, Facts, Template, as_int, get, unknown_fields

ROLES = ("Launcher", "Worker")
SERVED = ("kubeflow.org/v2beta1", "kubeflow.org/v1")
SPEC_KEYS = {
    "slotsPerWorker",
    "runLauncherAsWorker",
    "runPolicy",
    "mpiReplicaSpecs",
    "sshAuthMountPath",
    "launcherCreationPolicy",
    "mpiImplementation",
    "cleanPodPolicy",  # kubeflow.org/v1 (training-operator) keeps it in spec
    "mainContainer",
}
REPLICA_KEYS = {"replicas", "template", "restartPolicy"}
RESTART = ("Always", "OnFailure", "Never", "ExitCode")
INJECTED = frozenset(
    {
        "OMPI_MCA_orte_default_hostfile",
        "OMPI_MCA_plm_rsh_args",
        "OMPI_MCA_orte_keep_fqdn_hostnames",
        "OMPI_MCA_orte_set_default_slots",
        "I_MPI_HYDRA_HOST_FILE",
        "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS",
        "I_MPI_PERHOST",
        "K_MPI_JOB_ROLE",
    }
)


def _specs(doc: Any) -> dict:
    specs = get(doc.data, "spec", "mpiReplicaSpecs")
    return specs if isinstance(specs, dict) else {}


class MPIJobAdapter(Adapter):
    kind = "MPIJob"
    groups = ("kubeflow.org",)

    def templates(self, doc: Any) -> list[Template]:
        out = []
        for role in ROLES:
            rs = _specs(doc).get(role)
            tpl = get(rs, "template")
            if not isinstance(rs, dict) or not isinstance(tpl, dict):
                continue
            reps = as_int(rs.get("replicas"))
            rp = rs.get("restartPolicy")
            out.append(
                Template(
                    tpl,
                    ("spec", "mpiReplicaSpecs", role, "template"),
                    1 if reps is None else reps,
                    role=role,
                    restart_policy=rp if isinstance(rp, str) else None,
                    restart_path=("spec", "mpiReplicaSpecs", role, "restartPolicy") if rp else (),
                    injected_env=INJECTED,
                )
            )
        legacy = get(doc.data, "spec", "template")
        if not out and isinstance(legacy, dict):  # v1alpha1: one template for every pod
            reps = as_int(get(doc.data, "spec", "replicas"))
            out.append(Template(legacy, ("spec", "template"), reps, role="", injected_env=INJECTED))
        return out

    def facts(self, doc: Any) -> Facts:
        workers = as_int(get(_specs(doc).get("Worker"), "replicas"))
        if "Worker" in _specs(doc) and workers is None and get(_specs(doc), "Worker", "replicas") is None:
            workers = 1
        if get(doc.data, "spec", "runLauncherAsWorker") is True and workers is not None:
            workers += 1
        facts = Facts("MPIJob", workers, "Worker replicas", dns="managed")
        facts.pod_identity = {"training.kubeflow.org/job-name": doc.name}
        return facts

    def structure(self, doc: Any, ctx: Any) -> Iterator[tuple[tuple, str]]:
        if doc.api_version not in SERVED:
            yield (
                ("apiVersion",),
                f"MPIJob {doc.api_version} is served by no operator today (mpi-operator serves kubeflow.org/"
                "v2beta1): the API server rejects it (no matches for kind); rewrite it as v2beta1 with "
                "mpiReplicaSpecs Launcher and Worker",
            )
            return
        spec = doc.data.get("spec")
        if not isinstance(spec, dict):
            yield ("spec",), "spec must be a mapping with mpiReplicaSpecs"
            return
        yield from unknown_fields(spec, SPEC_KEYS, ("spec",), "unknown field spec.{key} (MPIJob has {allowed})")
        specs = spec.get("mpiReplicaSpecs")
        if not isinstance(specs, dict) or not specs:
            yield ("spec",), "mpiReplicaSpecs must map Launcher and Worker to replica specs"
            return
        if "Launcher" not in specs:
            yield ("spec", "mpiReplicaSpecs"), "mpiReplicaSpecs needs a Launcher (the pod that runs mpirun)"
        for role, rs in specs.items():
            path = ("spec", "mpiReplicaSpecs", role)
            if role not in ROLES:
                yield path, f"replica type {role!r} is not Launcher or Worker"
                continue
            if not isinstance(rs, dict):
                yield path, f"{role} must be a mapping with replicas and template"
                continue
            yield from unknown_fields(rs, REPLICA_KEYS, path, "unknown field {key!r} in a replica spec ({allowed})")
            reps = rs.get("replicas")
            if role == "Launcher" and reps is not None and reps != 1:
                yield path + ("replicas",), f"Launcher replicas must be 1, got {reps!r}"
            elif reps is not None and (as_int(reps) is None or reps < 0):
                yield path + ("replicas",), f"{role} replicas must be an integer >= 0, got {reps!r}"
            rp = rs.get("restartPolicy")
            if rp is not None and rp not in RESTART:
                yield path + ("restartPolicy",), f"restartPolicy {rp!r} must be one of {', '.join(RESTART)}"
            containers = get(rs, "template", "spec", "containers")
            if not isinstance(containers, list) or not containers:
                yield path + ("template",), f"{role} needs template.spec.containers"
        impl = spec.get("mpiImplementation")
        if impl is not None and impl not in ("OpenMPI", "Intel", "MPICH"):
            yield ("spec", "mpiImplementation"), f"mpiImplementation {impl!r} must be OpenMPI, Intel or MPICH"


ADAPTERS = [MPIJobAdapter()]
