"""The views every adapter yields (pure data; no rules here)."""

from __future__ import annotations

from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from typing import Any

# Where a pod's node rank can come from: the sources a kind's pods have.
JOB_INDEX = "job-index"  # JOB_COMPLETION_INDEX env, batch.kubernetes.io/job-completion-index label/annotation
STS_INDEX = "sts-index"  # apps.kubernetes.io/pod-index label, statefulset.kubernetes.io/pod-name, HOSTNAME ordinal
VOLCANO_INDEX = "volcano-index"  # VC_TASK_INDEX / VK_TASK_INDEX (env plugin), volcano.sh/task-index annotation
LWS_INDEX = "lws-index"  # LWS_WORKER_INDEX env, leaderworkerset.sigs.k8s.io/worker-index label
RANK_ENV = "rank-env"  # RANK / PET_NODE_RANK injected by the operator


def get(data: Any, *path: Any) -> Any:
    for step in path:
        if isinstance(step, int):
            if not isinstance(data, list) or not -len(data) <= step < len(data):
                return None
            data = data[step]
        else:
            if not isinstance(data, dict):
                return None
            data = data.get(step)
    return data


def unknown_fields(
    mapping: dict, allowed: Collection[str], path: tuple, message: str, listed: Collection[str] | None = None
) -> Iterator[tuple[tuple, str]]:
    """The keys of ``mapping`` its API reference does not define: (``path`` + key, ``message`` formatted
    with ``key`` and ``allowed``, the defined keys -- or ``listed`` -- sorted and joined)."""
    names = ", ".join(sorted(allowed if listed is None else listed))
    for key in mapping:
        if key not in allowed:
            yield path + (key,), message.format(key=key, allowed=names)


def as_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass
class Template:
    """One pod template of a workload."""

    template: dict  # the pod template (metadata + spec)
    path: tuple  # its path in the document
    pods: int | None  # pods created from it in one run (replicas x completions); None if unknown
    role: str = ""  # replicatedJob / replica type / task name ("" for single-template kinds)
    restart_policy: str | None = None  # the pods' effective restartPolicy (None: the template's)
    restart_path: tuple = ()  # where that policy is written
    job: dict | None = None  # the batch/v1 Job spec this template belongs to (Job, JobSet child)
    job_path: tuple = ()
    injected_env: frozenset = frozenset()  # variables the controller adds to its containers
    rank_sources: frozenset = frozenset()
    trainer_container: str | None = None  # the container the operator wires (PyTorchJob "pytorch")
    operator_step: bool = True  # operator kinds: a trainer step (False: a TrainingRuntime's initializer)
    containers: list | None = None  # (container, path) when they are not at spec.containers (TrainJob's trainer)
    partial: bool = False  # only part of the pod is in this object (TrainJob: volumes live in the runtime)

    @property
    def spec(self) -> dict:
        spec = self.template.get("spec")
        return spec if isinstance(spec, dict) else {}

    @property
    def spec_path(self) -> tuple:
        return self.path + ("spec",)

    @property
    def labels(self) -> dict:
        labels = get(self.template, "metadata", "labels")
        return labels if isinstance(labels, dict) else {}


@dataclass
class Facts:
    """What the controller of a workload does around its pods."""

    kind: str  # what messages call it: "Job", "JobSet", "PyTorchJob" ...
    nodes: int | None  # pods of one training world
    count_what: str = "pods"  # how the manifest states that count ("completions", "replicas" ...)
    dns: str = "none"  # subdomain | serviceName | managed | none
    dns_name: str | None = None  # subdomain / serviceName the user wrote (user-wired kinds)
    dns_path: tuple = ()
    master_hosts: tuple = ()  # managed kinds: the hostnames of pod 0 (the first is the one to suggest)
    service_like: str | None = None  # managed kinds: the headless Service's name (resolves to any pod)
    managed_not_ready: tuple | None = None  # (path, message) when the managed Service hides not-ready pods
    dns_problems: list = field(default_factory=list)  # (path, message): pods get no usable DNS names
    runs_to_completion: bool = True  # exit 0 means "done" (Job-like); False: restarted (StatefulSet, LWS)
    suspend: bool | None = None
    suspend_path: tuple = ()
    queue_label_paths: list = field(default_factory=list)  # (path, where) of queue-name labels below metadata
    kueue_managed: bool = True  # Kueue reads this kind's own queue-name label
    resources_elsewhere: bool = False  # a template whose users give the pods their resources (TrainingRuntime)
    group_restart: bool = False  # the controller restarts the whole group when a child Job fails (JobSet)
    nproc_stated: tuple | None = None  # (value, path, field name) processes per node written in the spec
    # Managed kinds: the labels the controller gives every pod of the workload (its identity) and those
    # only pod 0 of the world carries (its index): a Service selecting pod 0's index labels, and else
    # only these or template labels, serves pod 0 alone -- a stable master address.
    pod_identity: dict = field(default_factory=dict)
    pod0_index: dict = field(default_factory=dict)
    # Operator kinds whose pods restart in place (restartPolicy OnFailure, ExitCode, Always) with nothing in
    # the object bounding those restarts: (what is missing, how to bound them); None when a limit is set or
    # the controller bounds them by default (a batch Job's backoffLimit, MPIJob's launcher Job).
    restarts_unbounded: tuple[str, str] | None = None


class Adapter:
    """Base adapter: subclasses set ``kind`` and ``groups`` and override what their kind has."""

    kind = ""
    groups: tuple[str, ...] = ()

    def templates(self, doc: Any) -> list[Template]:
        return []

    def facts(self, doc: Any) -> Facts | None:
        return None

    def structure(self, doc: Any, ctx: Any) -> Iterator[tuple[tuple, str]]:
        """Structural checks from the kind's API reference: (path, message)."""
        return iter(())

    def embedded(self, doc: Any) -> list[tuple[tuple, dict]]:
        """Objects this one carries inside (AppWrapper components): (path, object)."""
        return []
