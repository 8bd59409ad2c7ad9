"""Reviewer rules for multi-node training: failure policy, QoS, launcher modes, node-rank sources and
counts written twice. Stream rules over the training workloads of ``rules_training`` (a Job or
StatefulSet whose containers launch torchrun or kgen's entrypoint).

What torchrun does when a flag is absent (``torch/distributed/run.py``, torch 2.13): ``--nnodes``
defaults to ``1:1``, ``--rdzv-backend`` to ``static``, ``--master-addr`` to ``127.0.0.1``,
``--node-rank`` to 0, ``--rdzv-endpoint`` to empty (localhost for c10d); every flag can also come
from ``PET_<FLAG>`` in the environment, and torchrun does *not* read ``MASTER_ADDR``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from kgen import k8s
from kgen.findings import Severity
from kgen.launch.argv import Launch, resolve
from kgen.launch.command import Scripted
from kgen.lint.kinds.base import JOB_INDEX, LWS_INDEX, RANK_ENV, STS_INDEX, VOLCANO_INDEX
from kgen.lint.model import TRAINING_KINDS, Workload, workloads
from kgen.lint.registry import Context, rule
from kgen.lint.rules_training import (
    _env_path,
    _int,
    _launch_path,
    _multi,
    _nproc_values,
    _where_path,
)

E, W, INFO = Severity.ERROR, Severity.WARNING, Severity.INFO


def _flag(launch: Launch, env: dict, name: str) -> tuple[bool, str | None]:
    """(given?, value) of a torchrun flag, from the command line or from PET_<NAME>; "given" also when
    an expansion ($DISTRIBUTED_ARGS) may hold it."""
    if launch.has(name):
        return True, launch.flag(name)
    if launch.opaque:
        return True, None
    pet = env.get(f"PET_{name.upper()}")
    if pet is not None or any(e == f"PET_{name.upper()}" for e in env):
        return True, pet if isinstance(pet, str) else None
    return False, None


def _torchrun(w: Workload) -> Iterator[tuple[dict, tuple, Launch, dict]]:
    for c, cpath, launches in w.launches:
        env = w.env(c)
        for launch in launches:
            if launch.form == "torchrun":
                yield c, cpath, launch, env


def _backend(launch: Launch, env: dict) -> str:
    if launch.has("standalone"):
        return "standalone"
    _, value = _flag(launch, env, "rdzv_backend")
    return (value or "static").lower()


def _elastic(w: Workload) -> bool:
    """c10d/etcd rendezvous with --max-restarts >= 1: torchrun's agents re-form the world themselves."""
    found = False
    for _c, _p, launch, env in _torchrun(w):
        restarts = resolve(_flag(launch, env, "max_restarts")[1], env)
        if _backend(launch, env) not in ("c10d", "etcd", "etcd-v2") or not (restarts or "").isdigit():
            return False
        found = found or int(restarts or 0) >= 1
    return found


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


# --- launcher mode vs pod count ---------------------------------------------------------------------


@rule(
    "KG119",
    E,
    "torchrun's launch mode must fit a multi-pod workload: a training script (without one torchrun exits at "
    "once; a comment inside continued lines cuts it off), not --standalone, an explicit --nnodes (default 1), "
    "and for static rendezvous a --master-addr (default 127.0.0.1; torchrun ignores MASTER_ADDR) and a "
    "per-pod --node-rank (default 0; a number only in a template of one pod, such as a Master or an LWS "
    "leader), for c10d an --rdzv-endpoint.",
    "Launch with --nnodes=N and either --master-addr=<name>-0.<service> --node-rank=$(NODE_RANK) or "
    "--rdzv-backend=c10d --rdzv-endpoint=<name>-0.<service>:29400.",
    kinds=TRAINING_KINDS,
    scope="stream",
)
def launcher_mode(docs: list, ctx: Context) -> Iterator:
    for w in workloads(docs):
        if w.nodes is None or w.nodes <= 1:
            continue
        pods = f"{w.doc.kind} {w.name!r} runs {w.nodes} pods"
        for c, cpath, launch, env in _torchrun(w):
            if not launch.child and not launch.opaque:
                yield w.doc, _launch_path(cpath, launch), _no_script(launch, _scripted(w, c))
                continue  # its flags are not torchrun's either: one finding says why
            script = launch.child[1] if launch.child[:1] == ["python3"] and len(launch.child) > 1 else None
            if script is not None and not script.strip():
                yield w.doc, _launch_path(cpath, launch), _blank_script(script, _scripted(w, c))
                continue
            backend = _backend(launch, env)
            if backend == "standalone":
                yield (
                    w.doc,
                    _launch_path(cpath, launch, "standalone"),
                    f"--standalone makes every pod a one-node world of its own, but {pods}; drop it and "
                    "rendezvous on pod 0",
                )
                continue
            if not _flag(launch, env, "nnodes")[0]:
                yield (
                    w.doc,
                    _launch_path(cpath, launch),
                    f"torchrun has no --nnodes, so it defaults to 1 and every pod trains alone, but {pods}; "
                    f"add --nnodes={w.nodes}",
                )
            if backend == "static":
                if not _flag(launch, env, "master_addr")[0] and not _flag(launch, env, "rdzv_endpoint")[0]:
                    why = " (torchrun does not read MASTER_ADDR)" if "MASTER_ADDR" in env else ""
                    yield (
                        w.doc,
                        _launch_path(cpath, launch),
                        f"static rendezvous without --master-addr waits for a master at 127.0.0.1 in every "
                        f"pod{why}; add --master-addr={w.name}-0.<service> (or $(MASTER_ADDR))",
                    )
                given, raw = _flag(launch, env, "node_rank")
                value = resolve(raw, env)
                if not given:
                    yield (
                        w.doc,
                        _launch_path(cpath, launch),
                        f"static rendezvous without --node-rank makes every pod node 0, but {pods}; "
                        "pass the pod's index, e.g. --node-rank=$(NODE_RANK)",
                    )
                elif value is not None and value.isdigit() and not launch.branch and w.tpl.pods != 1:
                    # (if/else: per pod; a template of one pod -- a Master, an LWS leader -- is that pod's own rank)
                    yield (
                        w.doc,
                        _launch_path(cpath, launch, "node_rank"),
                        f"--node-rank={raw} is the same in every pod, but {pods}; pass the pod's index, "
                        "e.g. --node-rank=$(NODE_RANK)",
                    )
            elif backend in ("c10d", "etcd", "etcd-v2") and not _flag(launch, env, "rdzv_endpoint")[0]:
                yield (
                    w.doc,
                    _launch_path(cpath, launch, "rdzv_backend"),
                    f"{backend} rendezvous without --rdzv-endpoint rendezvouses on localhost in every pod, but "
                    f"{pods}; add --rdzv-endpoint={w.name}-0.<service>:29400",
                )


def _scripted(w: Workload, c: dict) -> Scripted | None:
    return next((scripted for x, _, scripted, _why in w.containers if x is c), None)


def _blank_script(script: str, scripted: Scripted | None) -> str:
    """``torchrun ... \\<space>  # comment``: the backslash escapes the space, so torchrun's script is a
    lone blank and the comment ends the command; the next line runs as a command of its own."""
    orphans = [argv[0] for argv, _ in (scripted.commands if scripted else []) if argv]
    after = f"; the next line ({orphans[-1]!r}) runs as a command of its own" if len(orphans) > 1 else ""
    return (
        f"torchrun's training script is {script!r}: a backslash followed by a blank escapes the blank instead of "
        f"continuing the line, and the comment after it ends the command{after}; put the backslash last on the line"
    )


def _no_script(launch: Launch, scripted: Scripted | None) -> str:
    """torchrun with no training script exits with a usage error at once. In a script, flags that run
    as commands of their own (``--nnodes=2`` alone on a line) say why: a comment line or a blank after
    a backslash ended the torchrun command (pytorch/xla's GKE example comments every flag)."""
    words = launch.words
    name = " ".join(words[:3]) if words and words[0].rsplit("/", 1)[-1].startswith("python") else "torchrun"
    message = f"{name} runs no training script, so it exits with a usage error at once"
    orphans = [argv[0] for argv, _ in (scripted.commands if scripted else []) if argv and argv[0].startswith("--")]
    if launch.script and orphans:
        message += (
            f"; {orphans[0]!r} runs as a command of its own: a comment line or a blank after a backslash ends "
            "the torchrun command there (move the comments out of the continued lines)"
        )
    return message


# --- node rank source vs kind ----------------------------------------------------------------------

_JOB_INDEX = ("batch.kubernetes.io/job-completion-index",)
_STS_INDEX = ("apps.kubernetes.io/pod-index", "statefulset.kubernetes.io/pod-name")
_VAR = re.compile(r"^\$(?:\{(\w+)\}|\((\w+)\)|(\w+))$")
_JOB_ENV = re.compile(r"\$(?:\{|\()?JOB_COMPLETION_INDEX\b")


def _rank_sources(c: dict, cpath: tuple) -> Iterator[tuple[tuple, str]]:
    """(path, text) of every env fieldRef path and env value, and of the command/args items."""
    for i, e in enumerate(k8s.env_list(c)):
        if not isinstance(e, dict):
            continue
        ref = k8s.get(e, "valueFrom", "fieldRef", "fieldPath")
        if isinstance(ref, str):
            yield cpath + ("env", i, "valueFrom", "fieldRef", "fieldPath"), ref
        if isinstance(e.get("value"), str):
            yield cpath + ("env", i, "value"), e["value"]
    for key in ("command", "args"):
        items = c.get(key)
        if isinstance(items, list):
            for i, item in enumerate(items):
                if isinstance(item, str):
                    yield cpath + (key, i), item


@rule(
    "KG120",
    E,
    "The node rank must come from a source the pod has: JOB_COMPLETION_INDEX and the job-completion-index "
    "label/annotation exist only in Indexed Job pods, apps.kubernetes.io/pod-index and "
    "statefulset.kubernetes.io/pod-name only in StatefulSet pods, and the two index labels only from "
    "Kubernetes 1.28; elsewhere they are empty. A --node-rank from the pod's name or IP is not a number.",
    "Use the source of the workload's kind: Job metadata.annotations['batch.kubernetes.io/job-completion-index'], "
    "StatefulSet metadata.labels['apps.kubernetes.io/pod-index'] (1.28+) or the HOSTNAME ordinal.",
    kinds=TRAINING_KINDS,
    scope="stream",
)
def node_rank_source(docs: list, ctx: Context) -> Iterator:
    for w in workloads(docs):
        sources = w.tpl.rank_sources
        for c, cpath, scripted, _why in w.containers:
            launches = [launch for launch in scripted.launches if launch.training]
            if launches and all(launch.form == "kgen" for launch in launches):
                continue  # kgen's entrypoint skips an empty rank source and falls back to the HOSTNAME ordinal
            yield from _rank_not_a_number(w, c, cpath, launches)
            for path, text in _rank_sources(c, cpath):
                fieldref = path[-1] == "fieldPath"
                job_ref = _JOB_ENV.search(text) or (fieldref and any(k in text for k in _JOB_INDEX))
                sts_ref = fieldref and any(k in text for k in _STS_INDEX)
                if job_ref and JOB_INDEX not in sources:
                    yield (
                        w.doc,
                        path,
                        f"a {w.kind}'s pods have no completion index (JOB_COMPLETION_INDEX is an Indexed Job's); "
                        + _rank_hint(sources),
                    )
                elif sts_ref and STS_INDEX not in sources:
                    yield (w.doc, path, f"{text} is a StatefulSet pod's; " + _rank_hint(sources))
                elif fieldref and ctx.minor < 28 and text.startswith("metadata.labels[") and "-index" in text:
                    yield (
                        w.doc,
                        path,
                        f"{text} is set from Kubernetes 1.28 (PodIndexLabel); on {ctx.kubernetes_version} it is empty. "
                        "Use metadata.annotations['batch.kubernetes.io/job-completion-index'] (Job) or the "
                        "HOSTNAME ordinal (StatefulSet)",
                    )


def _rank_hint(sources: frozenset) -> str:
    if JOB_INDEX in sources:
        return "a Job's pods carry metadata.annotations['batch.kubernetes.io/job-completion-index']"
    if STS_INDEX in sources:
        return "use metadata.labels['apps.kubernetes.io/pod-index'] or the HOSTNAME ordinal"
    if VOLCANO_INDEX in sources:
        return "use VC_TASK_INDEX (the env plugin) or metadata.annotations['volcano.sh/task-index']"
    if LWS_INDEX in sources:
        return "use LWS_WORKER_INDEX"
    if RANK_ENV in sources:
        return "the operator sets RANK / PET_NODE_RANK"
    return "use the pod's index of its own kind"


def _rank_not_a_number(w: Workload, c: dict, cpath: tuple, launches: list) -> Iterator:
    """--node-rank=$(VAR) where VAR is a fieldRef to something that is not an index (the pod's name
    or IP): torchrun refuses it (not an int)."""
    refs = {
        e.get("name"): (i, k8s.get(e, "valueFrom", "fieldRef", "fieldPath"))
        for i, e in enumerate(k8s.env_list(c))
        if isinstance(e, dict)
    }
    for launch in launches:
        raw = launch.flag("node_rank")
        m = _VAR.match(raw or "")
        if not m:
            continue
        i, ref = refs.get(m.group(1) or m.group(2) or m.group(3), (None, None))
        if isinstance(ref, str) and "index" not in ref:
            yield (
                w.doc,
                cpath + ("env", i, "valueFrom", "fieldRef", "fieldPath"),
                f"--node-rank={raw} reads {ref}, which is not a number; use the pod's index "
                "(job-completion-index annotation, apps.kubernetes.io/pod-index label)",
            )


# --- counts written twice in one container ---------------------------------------------------------


@rule(
    "KG121",
    E,
    "A literal CUDA_VISIBLE_DEVICES must list as many devices as processes per node and no more than the "
    "pod's GPUs: ranks beyond the list get no GPU, and devices beyond the pod's do not exist in it.",
    "Delete CUDA_VISIBLE_DEVICES (the device plugin sets the visible GPUs).",
    kinds=TRAINING_KINDS,
    scope="stream",
)
def visible_devices(docs: list, ctx: Context) -> Iterator:
    for w in workloads(docs):
        for c, cpath, launches in w.launches:
            env = w.env(c)
            gpus = k8s.gpu_limit(c)
            nprocs = [v for la in launches for v, _ in _nproc_values(la, env)]
            cvd = env.get("CUDA_VISIBLE_DEVICES")
            if not isinstance(cvd, str) or "$" in cvd:
                continue
            devices = [d for d in cvd.split(",") if d.strip()]
            want = nprocs[0] if nprocs else gpus
            path = _env_path(cpath, c, "CUDA_VISIBLE_DEVICES")
            if gpus and len(devices) > gpus:
                yield w.doc, path, f"CUDA_VISIBLE_DEVICES lists {len(devices)} devices but the pod gets {gpus} GPUs"
            elif want and len(devices) < want:
                yield (
                    w.doc,
                    path,
                    f"CUDA_VISIBLE_DEVICES lists {len(devices)} devices for {want} processes per node; ranks "
                    f"{len(devices)}..{want - 1} get no GPU. Delete it (the device plugin sets the visible GPUs)",
                )


@rule(
    "KG141",
    W,
    "Processes per node written twice in a CPU container (--nproc-per-node and NPROC_PER_NODE, GPUS_PER_NODE "
    "...) disagree: the launcher uses its flag, and whatever reads the other value (the script, the program) "
    "gets a wrong count.",
    "Write the number once (kgen render derives all of them from --gpus).",
    kinds=TRAINING_KINDS,
    scope="stream",
)
def nproc_written_twice(docs: list, ctx: Context) -> Iterator:
    for w in workloads(docs):
        for c, cpath, launches in w.launches:
            env = w.env(c)
            if k8s.gpu_limit(c):
                continue  # GPU pods: KG107/KG139 compare each value with the GPU limit
            nprocs: list[tuple[int, str, Launch]] = [
                (v, where, la) for la in launches for v, where in _nproc_values(la, env)
            ]
            if nprocs:
                first, where0, _ = nprocs[0]
                for value, where, launch in nprocs[1:]:
                    if value != first:
                        yield (
                            w.doc,
                            _where_path(cpath, c, launch, "nproc_per_node", where),
                            f"{where} but {where0}: processes per node are written twice and disagree",
                        )


# --- GPU pods that get no GPU ---------------------------------------------------------------------

_GPU_KEY = re.compile(r"nvidia\.com/gpu|amd\.com/gpu|accelerator|gpu", re.I)


def _targets_gpu_nodes(spec: dict) -> str | None:
    """What in the pod spec sends it to GPU nodes (a GPU toleration, node selector or affinity term)."""
    for t in spec.get("tolerations") or []:
        if isinstance(t, dict) and isinstance(t.get("key"), str) and _GPU_KEY.search(t["key"]):
            return f"tolerates {t['key']}"
    for key in spec.get("nodeSelector") or {}:
        if isinstance(key, str) and _GPU_KEY.search(key):
            return f"selects nodes by {key}"
    terms = k8s.get(
        spec, "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms"
    )
    for term in terms if isinstance(terms, list) else []:
        for expr in k8s.get(term, "matchExpressions") or []:
            if isinstance(expr, dict) and isinstance(expr.get("key"), str) and _GPU_KEY.search(expr["key"]):
                return f"requires nodes with {expr['key']}"
    return None


@rule(
    "KG122",
    E,
    "A training container that needs GPUs must request them: --nproc-per-node=gpu without an nvidia.com/gpu "
    "limit fails at start (no CUDA device), and a pod sent to GPU nodes (GPU toleration, node selector or "
    "affinity) without a GPU limit gets no GPU from the device plugin.",
    "Set resources.limits.nvidia.com/gpu to the GPUs per node (and --nproc-per-node to the same number).",
    kinds=TRAINING_KINDS,
    scope="stream",
)
def gpu_pod_without_gpus(docs: list, ctx: Context) -> Iterator:
    for w in workloads(docs):
        target = _targets_gpu_nodes(w.spec)
        for c, cpath, launches in w.launches:
            if k8s.gpu_limit(c):
                continue
            auto = [la for la in launches if (la.flag("nproc_per_node") or "").lower() in ("gpu", "cuda")]
            if auto:
                yield (
                    w.doc,
                    _launch_path(cpath, auto[0], "nproc_per_node"),
                    f"--nproc-per-node={auto[0].flag('nproc_per_node')} counts CUDA devices, but the container "
                    "requests no GPU; set resources.limits.nvidia.com/gpu",
                )
            elif target:
                yield (
                    w.doc,
                    cpath,
                    f"the pod {target} but its trainer requests no GPU, so the device plugin gives it none; "
                    "set resources.limits.nvidia.com/gpu",
                )


# --- cluster DNS from the host network --------------------------------------------------------------


@rule(
    "KG123",
    E,
    "A multi-node training pod with hostNetwork: true needs dnsPolicy: ClusterFirstWithHostNet; with the "
    "default ClusterFirst it falls back to the node's resolver and pod names such as <name>-0.<service> do "
    "not resolve.",
    "Set dnsPolicy: ClusterFirstWithHostNet (or drop hostNetwork).",
    kinds=TRAINING_KINDS,
    scope="stream",
)
def host_network_dns(docs: list, ctx: Context) -> Iterator:
    for w in workloads(docs):
        if w.spec.get("hostNetwork") is not True or not _multi(w):
            continue
        policy = w.spec.get("dnsPolicy")
        if policy in (None, "ClusterFirst", "Default"):
            yield (
                w.doc,
                w.base + (("dnsPolicy",) if policy else ("hostNetwork",)),
                f"hostNetwork with dnsPolicy {policy or 'ClusterFirst (default)'} uses the node's resolver, so "
                f"{w.name}-0.<service> does not resolve; set dnsPolicy: ClusterFirstWithHostNet",
            )
