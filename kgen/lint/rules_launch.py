"""Reviewer rules for multi-node training: launcher modes, node-rank sources and counts written twice (the
failure policy and QoS are rules_failure.py's). Stream rules over the training workloads of
``rules_training`` (a Job or StatefulSet whose containers launch torchrun or kgen's entrypoint).

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
