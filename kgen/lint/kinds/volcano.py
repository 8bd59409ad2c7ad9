"""Volcano Job (batch.volcano.sh/v1alpha1): ``tasks[]`` of ``replicas`` pods each, gang-scheduled
by ``minAvailable`` (default: every pod); the ``svc`` plugin creates a headless Service named
after the job and hostnames ``<job>-<task>-<index>.<job>``; the ``env`` plugin sets
VC_TASK_INDEX/VK_TASK_INDEX; the ``pytorch`` plugin (``--master=master --worker=worker
--port=23456``) enables svc and sets MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kgen.lint.kinds.base import RANK_ENV, VOLCANO_INDEX, Adapter, Facts, Template, as_int, get, unknown_fields

SPEC_KEYS = {
    "schedulerName",
    "minAvailable",
    "volumes",
    "tasks",
    "policies",
    "plugins",
    "runningEstimate",
    "queue",
    "maxRetry",
    "ttlSecondsAfterFinished",
    "priorityClassName",
    "minSuccess",
    "networkTopology",
}
TASK_KEYS = {
    "name",
    "replicas",
    "minAvailable",
    "template",
    "policies",
    "topologyPolicy",
    "maxRetry",
    "dependsOn",
    "partitionPolicy",
}
POLICY_KEYS = {"event", "events", "action", "exitCode", "timeout"}
ACTIONS = (
    "AbortJob",
    "RestartJob",
    "RestartTask",
    "RestartPod",
    "RestartPartition",
    "TerminateJob",
    "CompleteJob",
    "ResumeJob",
)
EVENTS = (
    "*",
    "PodPending",
    "PodRunning",
    "PodFailed",
    "PodEvicted",
    "Unknown",
    "TaskCompleted",
    "OutOfSync",
    "CommandIssued",
    "JobUpdated",
    "TaskFailed",
    "JobUnknown",
)


def _tasks(doc: Any) -> list[tuple[int, dict]]:
    items = get(doc.data, "spec", "tasks")
    return [(i, t) for i, t in enumerate(items) if isinstance(t, dict)] if isinstance(items, list) else []


def _plugins(doc: Any) -> dict:
    plugins = get(doc.data, "spec", "plugins")
    return plugins if isinstance(plugins, dict) else {}


def _pytorch_roles(doc: Any) -> tuple[str, str]:
    master, worker = "master", "worker"
    for arg in _plugins(doc).get("pytorch") or []:
        if isinstance(arg, str) and arg.startswith("--master="):
            master = arg.split("=", 1)[1]
        elif isinstance(arg, str) and arg.startswith("--worker="):
            worker = arg.split("=", 1)[1]
    return master, worker


def total_pods(doc: Any) -> int | None:
    total = 0
    for _, task in _tasks(doc):
        reps = as_int(task.get("replicas"))
        if reps is None and "replicas" in task:
            return None
        total += 1 if reps is None else reps
    return total if _tasks(doc) else None


class VolcanoJobAdapter(Adapter):
    kind = "Job"
    groups = ("batch.volcano.sh",)

    def templates(self, doc: Any) -> list[Template]:
        plugins = _plugins(doc)
        injected: set[str] = set()
        sources = {VOLCANO_INDEX}
        if "pytorch" in plugins:
            injected |= {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK"}
            sources.add(RANK_ENV)
        if "env" in plugins:
            injected |= {"VC_TASK_INDEX", "VK_TASK_INDEX"}
        out = []
        for i, task in _tasks(doc):
            tpl = task.get("template")
            if not isinstance(tpl, dict):
                continue
            reps = as_int(task.get("replicas"))
            out.append(
                Template(
                    tpl,
                    ("spec", "tasks", i, "template"),
                    1 if reps is None else reps,
                    role=str(task.get("name", "")),
                    injected_env=frozenset(injected),
                    rank_sources=frozenset(sources),
                )
            )
        return out

    def facts(self, doc: Any) -> Facts:
        facts = Facts("Volcano Job", total_pods(doc), "replicas over all tasks")
        plugins = _plugins(doc)
        if "svc" in plugins or "pytorch" in plugins:
            facts.dns = "managed"
            facts.service_like = doc.name
            master, _ = _pytorch_roles(doc)
            names = [str(t.get("name")) for _, t in _tasks(doc)]
            first = master if master in names else (names[0] if names else master)
            facts.master_hosts = (f"{doc.name}-{first}-0.{doc.name}", f"{doc.name}-{first}-0")
            facts.pod_identity = {"volcano.sh/job-name": doc.name}
            facts.pod0_index = {"volcano.sh/task-spec": first, "volcano.sh/task-index": "0"}
        else:
            facts.dns = "none"
        facts.kueue_managed = False
        # maxRetry and the PodFailed/PodEvicted policies count failed pods; a container restarted in place
        # (OnFailure, Always) never fails its pod, so nothing of a Volcano Job bounds those restarts
        facts.restarts_unbounded = (
            "a Volcano Job bounds no in-place restarts (maxRetry and PodFailed policies see only failed pods)",
            "set restartPolicy: Never and let a PodFailed policy (action: RestartJob) with maxRetry restart the job",
        )
        return facts

    def structure(self, doc: Any, ctx: Any) -> Iterator[tuple[tuple, str]]:
        spec = doc.data.get("spec")
        if not isinstance(spec, dict):
            yield ("spec",), "spec must be a mapping with tasks"
            return
        yield from unknown_fields(spec, SPEC_KEYS, ("spec",), "unknown field spec.{key} (Volcano Job has {allowed})")
        tasks = spec.get("tasks")
        if not isinstance(tasks, list) or not tasks:
            yield ("spec", "tasks") if "tasks" in spec else ("spec",), "tasks must be a non-empty list"
            return
        seen: set = set()
        for i, task in enumerate(tasks):
            path = ("spec", "tasks", i)
            if not isinstance(task, dict):
                yield path, "each task must be a mapping with name, replicas and template"
                continue
            yield from unknown_fields(task, TASK_KEYS, path, "unknown field {key!r} in a task ({allowed})")
            name = task.get("name")
            if name in seen:
                yield path + ("name",), f"task name {name!r} is used twice"
            seen.add(name)
            reps = task.get("replicas")
            if reps is not None and (as_int(reps) is None or reps < 0):
                yield path + ("replicas",), f"replicas must be an integer >= 0, got {reps!r}"
            if not isinstance(get(task, "template", "spec"), dict):
                yield path, "a task needs template.spec (a pod template)"
            yield from _policies(task.get("policies"), path + ("policies",))
        yield from _policies(spec.get("policies"), ("spec", "policies"))
        ma = spec.get("minAvailable")
        if ma is not None and (as_int(ma) is None or ma < 0):
            yield ("spec", "minAvailable"), f"minAvailable must be an integer >= 0, got {ma!r}"
        total = total_pods(doc)
        if isinstance(ma, int) and as_int(ma) is not None and total is not None and ma > total:
            yield ("spec", "minAvailable"), f"minAvailable {ma} is more than the job's {total} pods: it never starts"
        for name in _plugins(doc):
            if name not in ("ssh", "svc", "env", "pytorch", "tensorflow", "mpi", "ray", "hcclrank"):
                yield ("spec", "plugins", name), f"unknown plugin {name!r}"


def _policies(policies: Any, path: tuple) -> Iterator[tuple[tuple, str]]:
    if policies is None:
        return
    if not isinstance(policies, list):
        yield path, "policies must be a list"
        return
    for j, pol in enumerate(policies):
        if not isinstance(pol, dict):
            yield path + (j,), "each policy must be a mapping with an action"
            continue
        yield from unknown_fields(pol, POLICY_KEYS, path + (j,), "unknown field {key!r} in a policy ({allowed})")
        if pol.get("action") not in ACTIONS:
            yield path + (j, "action"), f"action {pol.get('action')!r} must be one of {', '.join(ACTIONS)}"
        events = pol.get("events") or ([pol["event"]] if "event" in pol else [])
        for e in events if isinstance(events, list) else [events]:
            if e not in EVENTS:
                yield path + (j,), f"event {e!r} is not a Volcano event ({', '.join(EVENTS)})"
        if ("event" in pol or "events" in pol) and "exitCode" in pol:
            yield path + (j,), "a policy takes either events or exitCode, not both"


def min_available(doc: Any) -> tuple[int, tuple] | None:
    ma = as_int(get(doc.data, "spec", "minAvailable"))
    return (ma, ("spec", "minAvailable")) if ma is not None else None


ADAPTERS = [VolcanoJobAdapter()]
