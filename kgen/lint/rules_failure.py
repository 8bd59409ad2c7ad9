"""What a training pod's failure or eviction costs: the failure policy of a multi-node Job (a default
backoffLimit retries one pod alone, which cannot rejoin the world the others formed: KG117) and the pods' QoS
(BestEffort training pods are evicted first under node pressure: KG118). Stream rules over the training
workloads of ``kgen.lint.model``; the launcher helpers are ``rules_launch``'s.
"""

from __future__ import annotations

from collections.abc import Iterator

from kgen import k8s
from kgen.findings import Severity
from kgen.lint.model import TRAINING_KINDS, Workload, workloads
from kgen.lint.registry import Context, rule
from kgen.lint.rules_launch import _elastic
from kgen.lint.rules_training import _int, _multi

E, W, INFO = Severity.ERROR, Severity.WARNING, Severity.INFO


# --- failure policy --------------------------------------------------------------------------------


@rule(
    "KG117",
    INFO,
    "A multi-node training Job retries one pod alone (restartPolicy: OnFailure, or backoffLimit > 0 / the "
    "default 6 / backoffLimitPerIndex with no podFailurePolicy rule that fails the Job on the trainer's exit "
    "codes -- one that only Ignores disruptions leaves every other failure to backoffLimit; a JobSet's child "
    "Jobs need backoffLimit: 0 and restartPolicy: Never, which JobSet defaults to OnFailure), whatever the "
    "launcher (torchrun, deepspeed, accelerate, python with env://): the replacement cannot rejoin the world "
    "the others formed, and the retries run out at a rate that depends on the node count.",
    "Set restartPolicy: Never and backoffLimit: 0, or a podFailurePolicy (FailJob on the trainer's exit codes, "
    "Ignore on disruptions), or restart the whole group (kgen's entrypoint, JobSet).",
    kinds=["Job", "JobSet"],
    scope="stream",
)
def failure_retries_one_pod(docs: list, ctx: Context) -> Iterator:
    for w in workloads(docs):
        job = w.tpl.job
        if job is None or not _multi(w) or _elastic(w):
            continue
        if w.facts.group_restart:
            yield from _child_fails_whole(w, job)
            continue
        if any(launch.form == "kgen" for _, _, launches in w.launches for launch in launches):
            continue  # kgen's entrypoint fail-stops every pod, so the Job re-forms the whole group
        jpath = w.tpl.job_path
        if w.spec.get("restartPolicy") == "OnFailure":
            yield (
                w.doc,
                w.base + ("restartPolicy",),
                "restartPolicy: OnFailure restarts a failed trainer alone, in its pod, and it cannot rejoin the "
                "world the other nodes formed; use restartPolicy: Never with backoffLimit: 0 or a podFailurePolicy",
            )
            continue
        pfp = job.get("podFailurePolicy")
        if pfp is not None and _fails_on_exit_codes(pfp):
            continue
        per_index = _int(job.get("backoffLimitPerIndex"))
        limit = job.get("backoffLimit")
        only = (
            " whose rules do not fail the Job on the trainer's exit codes (only " + ", ".join(_actions(pfp)) + ")"
            if isinstance(pfp, dict)
            else ""
        )
        what = "with a podFailurePolicy" + only if only else "without a podFailurePolicy"
        if per_index:
            yield (
                w.doc,
                jpath + ("backoffLimitPerIndex",),
                f"backoffLimitPerIndex: {per_index} {what} retries one index alone; its new pod cannot rejoin the "
                "running world. Use backoffLimit: 0 or a podFailurePolicy FailJob rule, or restart the whole group",
            )
        elif limit is None or (_int(limit) or 0) > 0:
            shown = f"backoffLimit: {limit}" if limit is not None else "the default backoffLimit (6)"
            fix = "add a FailJob rule on the trainer's exit codes" if only else "add a podFailurePolicy"
            yield (
                w.doc,
                jpath + ("backoffLimit",) if limit is not None else jpath,
                f"{shown} {what} replaces a failed pod alone; it cannot rejoin the world the other nodes formed. "
                f"Set backoffLimit: 0 or {fix}",
            )


def _fails_on_exit_codes(pfp: object) -> bool:
    """A podFailurePolicy with a rule that fails the Job (or index) on exit codes: a crashed trainer ends
    the Job instead of being replaced alone."""
    rules = pfp.get("rules") if isinstance(pfp, dict) else None
    return any(
        isinstance(r, dict) and r.get("action") in ("FailJob", "FailIndex") and isinstance(r.get("onExitCodes"), dict)
        for r in rules or []
    )


def _actions(pfp: dict) -> list[str]:
    rules = pfp.get("rules")
    got = []
    for r in rules if isinstance(rules, list) else []:
        if not isinstance(r, dict):
            continue
        on = "exit codes" if r.get("onExitCodes") is not None else "pod conditions"
        conds = r.get("onPodConditions")
        if isinstance(conds, list) and conds and isinstance(conds[0], dict) and conds[0].get("type"):
            on = str(conds[0]["type"])
        got.append(f"{r.get('action')} on {on}")
    return got or ["no rules"]


def _child_fails_whole(w: Workload, job: dict) -> Iterator:
    """A JobSet restarts the whole group when a child Job fails: the child Job must fail at its first
    failed pod (backoffLimit: 0, restartPolicy: Never; JobSet defaults an empty restartPolicy to
    OnFailure), or one pod is replaced alone and cannot rejoin the torch world."""
    bl = job.get("backoffLimit")
    if bl != 0:
        what = "not set (default 6)" if bl is None else f"{bl}"
        yield (
            w.doc,
            w.tpl.job_path + (("backoffLimit",) if bl is not None else ()),
            f"backoffLimit is {what}: a failed pod is replaced alone and cannot rejoin; set backoffLimit: 0 so the "
            f"{w.kind} restarts the whole group",
        )
    rp = w.spec.get("restartPolicy")
    if rp != "Never":
        what = f"not set ({w.kind} defaults it to OnFailure)" if rp is None else repr(rp)
        yield (
            w.doc,
            w.tpl.restart_path,
            f"restartPolicy is {what}: a crashed rank restarts alone in place; set restartPolicy: Never",
        )


# --- QoS ---------------------------------------------------------------------------------------------

_QOS_RESOURCES = ("cpu", "memory")


@rule(
    "KG118",
    INFO,
    "A training pod with no cpu or memory request or limit in any container is BestEffort: the first to be "
    "evicted or OOM-killed under node pressure (nvidia.com/gpu does not count for QoS).",
    "Set resources.requests.cpu and .memory on the trainer (limits.memory too, or requests = limits for Guaranteed).",
    kinds=TRAINING_KINDS,
    scope="stream",
)
def best_effort_training_pod(docs: list, ctx: Context) -> Iterator:
    for w in workloads(docs):
        if w.tpl.partial:
            yield from _trainjob_best_effort(w, docs)
            continue
        if w.facts.resources_elsewhere:
            continue  # a runtime: its TrainJobs give the trainer resourcesPerNode
        has_qos = False
        for c, _ in k8s.containers(w.spec, w.base):
            res = c.get("resources")
            for section in ("requests", "limits"):
                values = k8s.get(res, section)
                if isinstance(values, dict) and any(r in values for r in _QOS_RESOURCES):
                    has_qos = True
        if not has_qos:
            c0, cpath, _, _ = w.containers[0]
            yield (
                w.doc,
                cpath + ("resources",) if "resources" in c0 else cpath,
                "no container requests cpu or memory, so the pod is BestEffort (GPUs do not count): first to be "
                "evicted or OOM-killed (unless a mutating webhook adds requests); set resources.requests.cpu and "
                ".memory",
            )


# Kubeflow Trainer's own runtimes whose trainer step requests nothing (manifests/base/runtimes).
_BARE_RUNTIMES = {"torch-distributed", "deepspeed-distributed", "mlx-distributed"}


def _trainjob_best_effort(w: Workload, docs: list) -> Iterator:
    """A TrainJob whose resourcesPerNode asks for GPUs only, on a runtime whose trainer step requests no cpu
    or memory either (found among the linted files, or one of Kubeflow's bare runtimes): BestEffort pods."""
    res = k8s.get(w.doc.data, "spec", "trainer", "resourcesPerNode")
    if not isinstance(res, dict) or _has_qos(res):
        return
    ref = k8s.get(w.doc.data, "spec", "runtimeRef") or {}
    name, kind = ref.get("name"), ref.get("kind") or "ClusterTrainingRuntime"
    runtime = next(
        (
            d
            for d in docs
            if d.kind == kind
            and d.name == name
            and d.api_version.startswith("trainer.kubeflow.org/")
            and (kind == "ClusterTrainingRuntime" or not d.namespace or d.namespace == w.doc.namespace)
        ),
        None,
    )
    if runtime is not None:
        from kgen.lint import kinds

        steps = [t for t in kinds.templates(runtime) if t.injected_env]  # the trainer step
        if not steps or any(_has_qos(c.get("resources")) for t in steps for c, _ in k8s.containers(t.spec, ())):
            return
        where = f"runtime {name!r} requests none either"
    elif name in _BARE_RUNTIMES:
        where = f"Kubeflow's {name} runtime requests none either"
    else:
        return
    yield (
        w.doc,
        ("spec", "trainer", "resourcesPerNode"),
        f"resourcesPerNode requests no cpu or memory and {where}, so the trainer pods are BestEffort (GPUs do not "
        "count): first to be evicted or OOM-killed; add requests.cpu and .memory",
    )


def _has_qos(res: object) -> bool:
    for section in ("requests", "limits"):
        values = k8s.get(res, section)
        if isinstance(values, dict) and any(r in values for r in _QOS_RESOURCES):
            return True
    return False
