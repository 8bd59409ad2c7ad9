"""Distributed-training rules on the workload model (``kgen.lint.model``: every kind's pod templates
as the same views), across all documents of one lint run: node counts, processes per node and world
sizes wherever they are written, hand-set ranks, the pod's /dev/shm, start-up sleeps, rendezvous
flags, Indexed gangs; and the helpers the other training rule modules share. The Service and DNS
wiring is in rules_wiring.py, the launcher modes in rules_launch.py, the failure policy and QoS in
rules_failure.py, a StatefulSet's start order in rules_startup.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from kgen import k8s
from kgen.findings import Severity
from kgen.launch.argv import Launch, resolve
from kgen.launch.command import _SHELLS, find_launches
from kgen.lint.model import TRAINING_KINDS, Workload, stated_nnodes, workloads, world
from kgen.lint.registry import Context, rule

E, W, INFO = Severity.ERROR, Severity.WARNING, Severity.INFO
_HAND_SET = ("RANK", "LOCAL_RANK", "WORLD_SIZE")
# Launchers that set RANK, LOCAL_RANK and WORLD_SIZE for every worker they start.
_SETS_RANKS = {
    "torchrun": "torchrun",
    "deepspeed": "deepspeed",
    "accelerate": "accelerate (torchrun)",
    "kgen": "torchrun",
}
_ENV_REF = re.compile(r"\$\((\w+)\)")
_ENV_NAME = re.compile(r"[A-Z][A-Z0-9]*_[A-Z0-9_]*|[A-Z]{2,}[0-9]*")  # NODE_RANK, RANK: no command is named so


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _literal_env(container: dict) -> dict[str, Any]:
    env: dict[str, Any] = {}
    for e in k8s.env_list(container):
        if isinstance(e, dict) and isinstance(e.get("name"), str):
            env[e["name"]] = e.get("value") if "value" in e else None
    return env


def _multi(w: Workload) -> bool:
    """A distributed training workload of several pods (the wiring rules apply)."""
    if not w.distributed:
        return False  # GPUs alone: maybe independent tasks; the pod rules still apply
    if w.nodes is not None and w.nodes > 1:
        return True
    for c, _, launches in w.launches:
        env = w.env(c)
        for launch in launches:
            if any(top > 1 for _, top, _ in stated_nnodes(launch, env)):
                return True
    return False


# Variables that state the processes per node wherever a manifest writes them down (torchrun itself
# reads PET_NPROC_PER_NODE when the flag is absent); the node count's are the model's NNODES_VARS.
NPROC_VARS = ("NPROC_PER_NODE", "GPUS_PER_NODE", "NUM_GPUS_PER_NODE", "PET_NPROC_PER_NODE")


def _each(w: Workload) -> Iterator[tuple[dict, tuple, list]]:
    """Every training container with its known launches, or [None] when its launcher is unknown."""
    for c, cpath, scripted, _why in w.containers:
        found = [launch for launch in scripted.launches if launch.training]
        yield c, cpath, found or [None]


def _nproc_values(launch: Launch | None, env: dict) -> list[tuple[int, str]]:
    out = []
    raw = resolve(launch.flag("nproc_per_node"), env) if launch is not None and launch.has("nproc_per_node") else None
    if raw and raw.isdigit():
        out.append((int(raw), f"--nproc-per-node={raw}"))
    for var in NPROC_VARS:
        nn = env.get(var)
        if isinstance(nn, str) and nn.isdigit():
            out.append((int(nn), f"{var}={nn}"))
    return out


def _where_path(cpath: tuple, c: dict, launch: Launch | None, flag: str, where: str) -> tuple:
    """Path of a value named by ``where`` ("--flag=..." or "VAR=...")."""
    if where.startswith("--"):
        return _launch_path(cpath, launch, flag)
    return _env_path(cpath, c, where.split("=", 1)[0])


def _env_path(container_path: tuple, container: dict, name: str) -> tuple:
    found = k8s.env_value(container, name)
    return container_path + ("env", found[0], "value") if found else container_path


def _launch_path(container_path: tuple, launch: Launch | dict | None = None, flag: str | None = None) -> tuple:
    """Where a finding about a launch (or one of its flags) points: the command/args item that holds
    it (a flag in ``args:`` is located in args, not at ``command:``). Callers that pass the container
    instead of a launch (``_launch_path(cpath, c)``) get its first launch's first flag."""
    if isinstance(launch, dict):
        found = find_launches(launch)
        if not found:
            return container_path
        launch = found[0]
        if flag is None and launch.flag_where:
            return container_path + next(iter(launch.flag_where.values()))
    return container_path + launch.at(flag) if launch is not None and launch.at(flag) else container_path


# --- world size arithmetic ----------------------------------------------------------------------


@rule(
    "KG106",
    E,
    "The node count, wherever it is written (--nnodes, NNODES, NUM_NODES, PET_NNODES ..., the training "
    "script's trainer.num_nodes=N as Lightning reads it from Hydra or LightningCLI), must equal the number of "
    "pods: Job completions (= parallelism) or StatefulSet replicas.",
    "Make them equal (kgen render derives both from --nodes).",
    kinds=TRAINING_KINDS,
    scope="stream",
)
def nnodes_agree(docs: list, ctx: Context) -> Iterator:
    for w in workloads(docs):
        if w.nodes is None:
            continue
        what = w.facts.count_what
        shared = world(docs, w)
        nodes = w.nodes if shared is None else shared.nodes
        if shared is not None:
            what = f"the world it shares with other workloads ({what} of each added up)"
        for c, cpath, launches in _each(w):
            env = w.env(c)
            for launch in launches:
                for low, high, where in stated_nnodes(launch, env):
                    if not low <= nodes <= high:
                        path = _where_path(cpath, c, launch, "nnodes", where)
                        why = (
                            "every pod trains alone as a world of its own"
                            if high == 1 and where.startswith("--")
                            else "the world never completes"
                        )
                        yield w.doc, path, f"{where} but {what} is {nodes}; {why}. Make them equal"


@rule(
    "KG107",
    E,
    "Processes per node, wherever written (--nproc-per-node, NPROC_PER_NODE, GPUS_PER_NODE ...), must not exceed "
    "the GPUs per pod (nvidia.com/gpu limit) for GPU pods: the extra ranks find no GPU of their own (invalid "
    "device ordinal, or two ranks on one GPU, which NCCL refuses).",
    "Set it to the GPU limit, or to 'gpu'.",
    kinds=TRAINING_KINDS,
    scope="stream",
)
def nproc_agree(docs: list, ctx: Context) -> Iterator:
    yield from _nproc_vs_gpus(docs, "more")


@rule(
    "KG139",
    W,
    "Processes per node fewer than the GPUs per pod (nvidia.com/gpu limit), and no even share of them (3 "
    "processes on 8 GPUs): the pod holds GPUs no process uses (the run trains, slower than the GPUs it "
    "reserved). An even share (4 processes on 8 GPUs) is KG194's.",
    "Set --nproc-per-node to the GPU limit (or 'gpu'), or request fewer GPUs.",
    kinds=TRAINING_KINDS,
    scope="stream",
)
def nproc_below_gpus(docs: list, ctx: Context) -> Iterator:
    yield from _nproc_vs_gpus(docs, "fewer")


@rule(
    "KG194",
    INFO,
    "GPUs per pod a whole multiple (2x or more) of the processes per node (8 GPUs, --nproc-per-node=4): right "
    "when each process drives several GPUs itself (model parallel inside a process, as kgen render "
    "--set nprocPerNode allows), otherwise the extra GPUs stay idle.",
    "If each process uses one GPU, set --nproc-per-node to the GPU limit (or 'gpu'), or request fewer GPUs; "
    "if each process drives its share, nothing to change.",
    kinds=TRAINING_KINDS,
    scope="stream",
)
def gpus_shared_by_processes(docs: list, ctx: Context) -> Iterator:
    yield from _nproc_vs_gpus(docs, "share")


def _compare(value: int, gpus: int) -> str:
    """How processes per node compare with the GPUs: more, fewer (GPUs idle), share (an even share each), equal."""
    if value == gpus:
        return "equal"
    if value > gpus:
        return "more"
    return "share" if value > 0 and gpus % value == 0 else "fewer"


def _nproc_vs_gpus(docs: list, mode: str) -> Iterator:
    """Processes per node stated for a GPU container that compare with its GPUs as ``mode`` says (more, fewer,
    share)."""
    for w in workloads(docs):
        stated = w.facts.nproc_stated
        for c, cpath, launches in _each(w):
            gpus = k8s.gpu_limit(c)
            if not gpus:
                continue
            if stated is not None and stated[0].isdigit() and int(stated[0]) != gpus and w.primary:
                value = int(stated[0])
                if _compare(value, gpus) == mode:
                    yield w.doc, stated[1], _message(f"{stated[2]}: {value}", value, gpus, mode, "the trainer")
                stated = None
            env = w.env(c)
            for launch in launches:
                for value, where in _nproc_values(launch, env):
                    if _compare(value, gpus) == mode:
                        path = _where_path(cpath, c, launch, "nproc_per_node", where)
                        yield w.doc, path, _message(where, value, gpus, mode, "the container")


def _message(said: str, value: int, gpus: int, mode: str, holder: str) -> str:
    if mode == "more":
        return f"{said} but {holder} has {gpus} GPUs (ranks without a GPU fail); use {gpus}"
    if mode == "fewer":
        return f"{said} but {holder} has {gpus} GPUs ({gpus - value} GPU(s) stay idle); use {gpus}"
    return (
        f"{said} with {gpus} GPUs: {gpus // value} GPUs per process, right if each process drives its share "
        f"(model parallel); if each uses one GPU, {gpus - value} stay idle: use {gpus}"
    )


@rule(
    "KG108",
    E,
    "A literal WORLD_SIZE read by the program (env:// initialisation, an unknown launcher) must equal nodes x "
    "processes per node: otherwise the rendezvous waits for ranks that never come.",
    "Delete WORLD_SIZE (a launcher such as torchrun sets it) or fix it.",
    kinds=TRAINING_KINDS,
    scope="stream",
)
def world_size_agree(docs: list, ctx: Context) -> Iterator:
    for w in workloads(docs):
        if w.nodes is None:
            continue
        for c, cpath, launches in _each(w):
            if any(launch is not None and launch.form in _SETS_RANKS for launch in launches):
                continue  # the launcher sets WORLD_SIZE for its workers: a hand-set one is KG109's
            env = w.env(c)
            ws = env.get("WORLD_SIZE")
            if not (isinstance(ws, str) and ws.isdigit()):
                continue
            nprocs = (
                [v for launch in launches for v, _ in _nproc_values(launch, env)]
                or ([1] if launches == [None] and not k8s.gpu_limit(c) else [])
                or ([k8s.gpu_limit(c)] if k8s.gpu_limit(c) else [])
            )
            if nprocs and int(ws) != w.nodes * nprocs[0]:
                yield (
                    w.doc,
                    _env_path(cpath, c, "WORLD_SIZE"),
                    f"WORLD_SIZE={ws} but {w.nodes} nodes x {nprocs[0]} processes = {w.nodes * nprocs[0]}",
                )


@rule(
    "KG109",
    W,
    "RANK, LOCAL_RANK and WORLD_SIZE are set by the launcher (torchrun, deepspeed, accelerate) for every "
    "worker; values set by hand next to it (in env, or exported by the script) are overridden and mislead.",
    "Delete them; use NODE_RANK / --node-rank for the node (a variable that only feeds a launcher flag, such "
    "as --node_rank=$RANK, is fine; a RANK taken from the pod's index beside a static rendezvous without "
    "--node-rank is the node rank KG119 asks for).",
    kinds=TRAINING_KINDS,
    scope="stream",
)
def hand_set_ranks(docs: list, ctx: Context) -> Iterator:
    for w in workloads(docs):
        for c, cpath, launches in w.launches:
            setters = [launch for launch in launches if launch.form in _SETS_RANKS and launch.form != "kgen"]
            if not setters:
                continue
            who = _SETS_RANKS[setters[0].form]
            env = {e.get("name"): i for i, e in enumerate(k8s.env_list(c)) if isinstance(e, dict)}
            for var in _HAND_SET:
                if var in env and not _feeds_a_flag(var, launches) and not _unread_node_rank(c, env[var], setters):
                    yield (
                        w.doc,
                        cpath + ("env", env[var], "name"),
                        f"{var} is set by hand but {who} sets it per worker; delete it",
                    )
            exported = {v for launch in setters for v in launch.exports}
            for var in _HAND_SET:
                if var in exported and not _feeds_a_flag(var, launches):
                    yield (
                        w.doc,
                        _launch_path(cpath, setters[0]),
                        f"the script exports {var}, which {who} overrides per worker; delete the export",
                    )


def _unread_node_rank(c: dict, index: int, setters: list[Launch]) -> bool:
    """The variable is the pod's index (a fieldRef to the controller's index annotation or label), meant as the
    node rank of a static rendezvous that has no --node-rank: the defect is the missing flag (KG119 reports it,
    with this variable as the fix), not a worker rank to delete."""
    path = k8s.get(k8s.env_list(c)[index], "valueFrom", "fieldRef", "fieldPath")
    if not isinstance(path, str) or "index" not in path:
        return False
    return any(
        (launch.flag("rdzv_backend") or "static").lower() == "static" and not launch.has("node_rank")
        for launch in setters
    )


def _feeds_a_flag(var: str, launches: list[Launch]) -> bool:
    """The launcher reads ``var`` as a flag's value (JobSet's examples: RANK from the completion index,
    then ``--node_rank=$RANK``): the variable is the node rank's input, not a worker's RANK left to
    mislead (torchrun sets the workers' own)."""
    ref = re.compile(r"\$(?:\{" + var + r"\b|\(" + var + r"\)|" + var + r"\b)")
    return any(isinstance(v, str) and ref.search(v) for launch in launches for v in launch.flags.values())


# --- pod shape ----------------------------------------------------------------------------------


@rule(
    "KG110",
    E,
    "GPU training pods with several GPUs need a memory-backed /dev/shm (emptyDir medium: Memory, a hostPath "
    "/dev/shm, or hostIPC: true): NCCL's transport between the pod's GPUs lives there, and the default 64 MiB "
    "makes it fail at start (and DataLoader workers with it).",
    "Mount an emptyDir {medium: Memory, sizeLimit: ...} at /dev/shm.",
    kinds=TRAINING_KINDS,
    scope="stream",
)
def dev_shm(docs: list, ctx: Context) -> Iterator:
    for w, cpath, gpus in _shm_gaps(docs):
        if gpus > 1:
            yield (
                w.doc,
                cpath,
                f"container with {gpus} GPUs has no memory-backed /dev/shm (NCCL's transport between them needs "
                "it); mount an emptyDir with medium: Memory at /dev/shm",
            )


@rule(
    "KG138",
    INFO,
    "A 1-GPU training pod without a memory-backed /dev/shm: no NCCL transport inside the pod needs it, but "
    "DataLoader workers pass batches through /dev/shm and the default 64 MiB ends them with a bus error once "
    "batches grow (fine with num_workers=0).",
    "Mount an emptyDir {medium: Memory, sizeLimit: ...} at /dev/shm.",
    kinds=TRAINING_KINDS,
    scope="stream",
)
def dev_shm_one_gpu(docs: list, ctx: Context) -> Iterator:
    for w, cpath, gpus in _shm_gaps(docs):
        if gpus == 1:
            yield (
                w.doc,
                cpath,
                "1-GPU container has no memory-backed /dev/shm (64 MiB): DataLoader workers fail with a bus error "
                "on large batches; mount an emptyDir with medium: Memory at /dev/shm",
            )


def _shm_gaps(docs: list) -> Iterator[tuple[Workload, tuple, int]]:
    for w in workloads(docs):
        if w.tpl.partial:
            continue  # a TrainJob's trainer: the pod's volumes are its runtime's
        by_path = {p: c for c, p, _, _ in w.containers}
        for cpath in shm_gaps(w.spec, [(c, p, None) for c, p, _, _ in w.containers]):
            yield w, cpath, k8s.gpu_limit(by_path[cpath])


def shm_gaps(pod_spec: dict, launches: list) -> Iterator[tuple]:
    """The paths of GPU containers without a memory-backed /dev/shm (KG110, every kind):
    an emptyDir with medium Memory or a hostPath /dev/shm mounted there, or the pod in the host's IPC
    namespace (hostIPC: true, and with it the host's /dev/shm)."""
    if pod_spec.get("hostIPC") is True:
        return
    mem_vols = {
        v.get("name")
        for v in pod_spec.get("volumes") or []
        if isinstance(v, dict)
        and (k8s.get(v, "emptyDir", "medium") == "Memory" or _is_dev_shm(k8s.get(v, "hostPath", "path")))
    }
    for c, cpath, _ in launches:
        if not k8s.gpu_limit(c):
            continue
        mounts = [
            m
            for m in c.get("volumeMounts") or []
            if isinstance(m, dict) and str(m.get("mountPath", "")).rstrip("/") == "/dev/shm"
        ]
        if not any(m.get("name") in mem_vols for m in mounts):
            yield cpath


@rule(
    "KG111",
    W,
    "A fixed or random `sleep` before torchrun staggers start-up: it wastes time on every start and "
    "grows with the node count, and it does not make the master ready.",
    "Delete the sleep; torchrun's rendezvous (or kgen's entrypoint) waits actively with a timeout.",
    kinds=TRAINING_KINDS,
    scope="stream",
)
def sleep_stagger(docs: list, ctx: Context) -> Iterator:
    for w in workloads(docs):
        for _c, cpath, launches in w.launches:
            sleeps = {s for launch in launches for s in launch.sleeps}
            for s in sorted(sleeps):
                yield (
                    w.doc,
                    _launch_path(cpath, launches[0]),
                    f"`{s}` staggers start-up; delete it (rendezvous waits actively)",
                )


@rule(
    "KG112",
    INFO,
    "Do not mix dynamic rendezvous (--rdzv-backend=c10d or etcd) with static flags (--master-addr, "
    "--master-port, --node-rank): torchrun ignores the static ones (the rendezvous assigns ranks), so they "
    "mislead whoever reads the command (without --rdzv-backend the backend is static, and --rdzv-endpoint "
    "with --node-rank is fine).",
    "Use either c10d (rdzv flags, no node rank) or static (master addr/port + node rank).",
    kinds=TRAINING_KINDS,
    scope="stream",
)
def mixed_rendezvous(docs: list, ctx: Context) -> Iterator:
    for w in workloads(docs):
        for _c, cpath, launches in w.launches:
            for launch in launches:
                backend = (launch.flag("rdzv_backend") or "").lower()
                # without --rdzv-backend torchrun's backend is static, where --rdzv-endpoint names the
                # master like --master-addr does: a per-pod --node-rank with it is right
                dynamic = backend in ("c10d", "etcd", "etcd-v2")
                static_keys = [k for k in ("master_addr", "master_port", "node_rank") if launch.has(k)]
                static = [f"--{k.replace('_', '-')}" for k in static_keys]
                if dynamic and static:
                    yield (
                        w.doc,
                        _launch_path(cpath, launch, static_keys[0]),
                        (
                            f"{backend} rendezvous mixed with static flags {', '.join(static)}, which torchrun "
                            "ignores; drop the static ones (or the rdzv ones)"
                        ),
                    )


@rule(
    "KG114",
    E,
    "$(VAR) expands only variables the container defines: in an env value those earlier in the same env "
    "list (or from envFrom), in command/args any of its env; $(JOB_COMPLETION_INDEX) is added by the Job "
    "controller after yours, so an env value never sees it. Anything else stays literal; in a shell script "
    "the shell then runs an upper-case $(NAME) as a command, which is not found, so it expands to nothing.",
    "Define the variable in env (before its use), read it in the shell ($VAR), or use a fieldRef.",
    templates_only=True,
)
def env_refs(doc: Any, ctx: Context) -> Iterator:
    from kgen.lint import kinds
    from kgen.lint.kinds.base import JOB_INDEX

    for tpl in kinds.templates(doc):
        containers = tpl.containers if tpl.containers is not None else list(k8s.containers(tpl.spec, tpl.spec_path))
        yield from _env_refs(tpl, containers, JOB_INDEX in tpl.rank_sources)


def _env_refs(tpl: Any, containers: list, indexed_job: bool) -> Iterator:
    for c, cpath in containers:
        from_env = bool(c.get("envFrom"))  # unknown names: a ConfigMap or Secret may define anything
        defined: set = set(tpl.injected_env)
        for i, e in enumerate(k8s.env_list(c)):
            if not isinstance(e, dict):
                continue
            value = e.get("value")
            for var in _refs(value):
                if var == "JOB_COMPLETION_INDEX":
                    yield (
                        cpath + ("env", i, "value"),
                        (f"$({var}) stays literal: the Job controller adds it after your variables"),
                    )
                elif var not in defined and not from_env:
                    yield (
                        cpath + ("env", i, "value"),
                        f"$({var}) stays literal: it is not defined earlier in this env list",
                    )
            if isinstance(e.get("name"), str):
                defined.add(e["name"])
        if from_env:
            continue  # unknown names: a ConfigMap or Secret may define anything
        if indexed_job:
            defined.add("JOB_COMPLETION_INDEX")
        shell = _is_shell_script(c)
        for key in ("command", "args"):
            items = c.get(key)
            for j, item in enumerate(items if isinstance(items, list) else []):
                for var in _refs(item):
                    if var in defined:
                        continue
                    if not shell:
                        yield (
                            cpath + (key, j),
                            (
                                f"$({var}) stays literal: the container defines no env var {var}, so the program "
                                f"receives the text $({var})"
                            ),
                        )
                    elif _ENV_NAME.fullmatch(var):  # a shell runs $(cmd): an upper-case name is a variable meant
                        yield (
                            cpath + (key, j),
                            (
                                f"$({var}) is not expanded by Kubernetes (the container defines no env var {var}), so "
                                f"the shell runs {var} as a command, which is not found: it expands to nothing; "
                                f"write ${{{var}}} for a shell variable, or define {var} in env"
                            ),
                        )


def _refs(value: Any) -> list[str]:
    """Variables referenced as $(VAR) in ``value`` ($$(VAR) is an escape)."""
    if not isinstance(value, str) or "$(" not in value:
        return []
    return [m.group(1) for m in _ENV_REF.finditer(value) if not (m.start() > 0 and value[m.start() - 1] == "$")]


def _is_shell_script(c: dict) -> bool:
    """The container runs a shell (directly, or through env, tini ...): it reads $(cmd) itself."""
    command, args = c.get("command"), c.get("args")
    argv = (command if isinstance(command, list) else []) + (args if isinstance(args, list) else [])
    return any(isinstance(x, str) and x.rsplit("/", 1)[-1] in _SHELLS for x in argv[:3])


@rule(
    "KG115",
    E,
    "A multi-node training Job must be Indexed (completionMode: Indexed): only then do pods get "
    "a completion index and stable hostnames <job>-<index>.",
    "Set completionMode: Indexed.",
    kinds=["Job", "JobSet"],
    scope="stream",
)
def training_job_indexed(docs: list, ctx: Context) -> Iterator:
    for w in workloads(docs):
        job = w.tpl.job
        if job is None or not _multi(w):
            continue
        mode = job.get("completionMode")
        if w.doc.kind == "Job" and mode != "Indexed" and w.nodes != 1:  # one pod needs no index (a world of Jobs)
            yield w.doc, ("spec",), "multi-node training needs completionMode: Indexed (stable hostnames, node ranks)"
        elif mode is not None and mode != "Indexed":
            yield (
                w.doc,
                w.tpl.job_path + ("completionMode",),
                f"completionMode {mode!r}: training pods need Indexed (node ranks, hostnames)",
            )


@rule(
    "KG116",
    E,
    "A training Job's parallelism must equal completions: every node must run at the same time.",
    "Set parallelism = completions = nodes.",
    kinds=["Job", "JobSet"],
    scope="stream",
)
def training_job_gang(docs: list, ctx: Context) -> Iterator:
    for w in workloads(docs):
        job = w.tpl.job
        if job is None or not _multi(w):
            continue
        par, comp = _int(job.get("parallelism")), _int(job.get("completions"))
        if comp is not None and (par if par is not None else 1) != comp:
            yield (
                w.doc,
                w.tpl.job_path + ("parallelism",),
                f"parallelism {par if par is not None else '1 (default)'} != completions {comp}; the world never forms",
            )


def _is_dev_shm(path: Any) -> bool:
    return isinstance(path, str) and (path.rstrip("/") == "/dev/shm" or path.startswith("/dev/shm/"))
