"""`--kind slurm`: the checked values -> the sbatch script's typed fields (kgen.render.sbatch.SbatchSpec). Pure.

The same presets and values as the Kubernetes kinds, read for Slurm:

- name, nodes, gpus: ``--job-name``, ``--nodes`` (one task per node), ``--gpus-per-node``;
- cpu, memory (and resources.requests.cpu/memory, which override them, as on Kubernetes): ``--cpus-per-task``
  (whole CPUs) and ``--mem`` (the Kubernetes quantity in Slurm's binary units: 64Gi -> 64G, 64G -> 61036M);
- slurm.time, slurm.partition, slurm.account, slurm.qos, slurm.directives: ``--time``, ``--partition``,
  ``--account``, ``--qos``, more ``#SBATCH`` lines; workingDir: ``--chdir``;
- reform.maxReformations: the requeues (``--requeue`` when > 0; ``KGEN_MAX_REFORMATIONS``);
- python, command, env (strings), nccl.*, gloo.*, timeouts.*, reform.onScriptError, nprocPerNode: the
  entrypoint's interpreter, command and environment.

Kubernetes' own keys do one of two things when a user's layer sets them (a values file, ``--set``, a flag; not
the defaults or a preset): those whose loss would change what runs or how it is fenced are refused with the
fix (``REFUSED``: patches, Kueue's queue and topology, NetworkPolicy rules, fixed ports, a deadline,
Secrets and ConfigMaps in the environment, init containers); the pod's placement and packaging keys have no
meaning for an sbatch job and are reported as ignored (``IGNORED``, a warning on stderr).
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

from kgen.render.sbatch import ENV_NAME, NAME, OUTPUT, TIME, WORD, SbatchSpec
from kgen.render.spec import TrainingSpec
from kgen.render.validate import _fail

MIB, GIB = Decimal(2**20), Decimal(2**30)
QUEUE_HINT = "Slurm queues by partition and QoS: set slurm.partition / slurm.qos instead"

# Kubernetes-only keys whose loss would change what runs: (key, why, the fix). Refused when a user set them.
REFUSED = (
    ("patches", "it edits the Kubernetes objects, and --kind slurm renders an sbatch script",
     "put extra #SBATCH options in slurm.directives"),
    ("queue", "it is Kueue's LocalQueue", QUEUE_HINT),
    ("workloadPriorityClass", "it is Kueue's priority class", QUEUE_HINT),
    ("topology.required", "it is Kueue's topology request", "ask Slurm with slurm.directives, e.g. [--switches=1]"),
    ("topology.preferred", "it is Kueue's topology request", "ask Slurm with slurm.directives, e.g. [--switches=1]"),
    ("networkPolicy.extraIngress", "it is a Kubernetes NetworkPolicy rule, and Slurm fences no job's ports",
     "drop it for --kind slurm (the liveness channel proves the run's secret on every connection)"),
    ("port", "under Slurm the ports come from the job id (20000 + 2 x (job id mod 5000)), so two jobs can share a "
     "node", "drop it for --kind slurm"),
    ("livenessPort", "under Slurm it is the port after MASTER_PORT, from the job id", "drop it for --kind slurm"),
    ("activeDeadlineSeconds", "it is a Job's deadline",
     "set Slurm's wall-clock limit instead: slurm.time, e.g. 24:00:00"),
    ("envFrom", "it reads Kubernetes Secrets and ConfigMaps",
     "export the variables before kgen submit (sbatch passes the environment), or list them in env"),
    ("initContainers", "they run in a pod before the trainer, and an sbatch job has no pod",
     "do that work in the training script, or before kgen submit"),
)  # fmt: skip

# Kubernetes-only keys an sbatch job has no use for: reported as ignored when a user set them.
IGNORED = (
    ("namespace", "a Slurm job has no namespace"),
    ("image", "the nodes' own interpreter runs the entrypoint (python); a container runtime's options "
     "(e.g. pyxis' --container-image) go in slurm.directives"),
    ("imagePullPolicy", "no image is pulled"),
    ("imagePullSecrets", "no image is pulled"),
    ("shmSize", "the nodes' own /dev/shm is used"),
    ("hostIPC", "the job runs on the node itself"),
    ("hostNetwork", "the job uses the node's network"),
    ("dnsPolicy", "the job uses the node's resolver"),
    ("guaranteed", "Slurm allocates the CPUs and memory it asks for"),
    ("resources.limits", "Slurm enforces the allocation itself"),
    ("resources.requests", "only its cpu and memory are read (--cpus-per-task, --mem)"),
    ("volumes", "a Slurm job sees the nodes' file systems"),
    ("volumeMounts", "a Slurm job sees the nodes' file systems"),
    ("nodeSelector", "ask Slurm for nodes with slurm.directives (e.g. --constraint=h100)"),
    ("affinity", "ask Slurm for nodes with slurm.directives (e.g. --constraint=h100)"),
    ("tolerations", "a pod's; Slurm has no taints"),
    ("topologySpreadConstraints", "a pod's; Slurm places one task per node"),
    ("priorityClassName", "a pod's; Slurm's priority comes from slurm.qos and slurm.partition"),
    ("runtimeClassName", "a pod's"),
    ("schedulerName", "a pod's"),
    ("podSecurityContext", "the job runs as the user who submits it"),
    ("serviceAccountName", "the job runs as the user who submits it"),
    ("labels", "Kubernetes metadata"),
    ("annotations", "Kubernetes metadata"),
    ("terminationGracePeriodSeconds", "Slurm's KillWait decides the grace"),
    ("ttlSecondsAfterFinished", "Slurm forgets a finished job after its MinJobAge"),
    ("podDisruptionBudget", "Slurm drains nodes after the jobs on them end"),
    ("rdma", "a container capability; the job runs on the node itself"),
    ("reform.replacementTimeout", "nothing re-forms inside a Slurm job step: Slurm requeues the job"),
    ("reform.nodeLostTolerationSeconds", "a pod's toleration; Slurm requeues the job when a node is lost"),
    ("jobset.maxRestarts", "JobSet's; the requeues are reform.maxReformations"),
    ("auth.secretName", "kgen submit writes a new secret into the run's folder"),
    ("networkPolicy.enabled", "Slurm fences no job's ports; the liveness channel proves the run's secret"),
)  # fmt: skip

# The #SBATCH options kgen writes from other keys: slurm.directives may not set them again.
OWN_OPTIONS = {
    "job-name": "name",
    "nodes": "nodes",
    "ntasks-per-node": "kgen (one task per node)",
    "ntasks": "kgen (one task per node)",
    "gpus-per-node": "gpus",
    "cpus-per-task": "cpu",
    "mem": "memory",
    "time": "slurm.time",
    "partition": "slurm.partition",
    "account": "slurm.account",
    "qos": "slurm.qos",
    "chdir": "workingDir",
    "requeue": "reform.maxReformations (0: --no-requeue)",
    "no-requeue": "reform.maxReformations (0: --no-requeue)",
    "open-mode": "kgen (append: a requeued attempt adds to the log)",
    "output": "kgen (kgen submit writes it into the run's folder)",
}
# What the entrypoint reads, from which values key (exported by the script; the rest it derives from Slurm).
EXPORTS = (
    ("KGEN_MASTER_WAIT_TIMEOUT", "timeouts.masterWait"),
    ("KGEN_RDZV_TIMEOUT", "timeouts.rendezvous"),
    ("KGEN_HEARTBEAT_INTERVAL", "timeouts.heartbeatInterval"),
    ("KGEN_HEARTBEAT_TIMEOUT", "timeouts.heartbeat"),
    ("KGEN_MAX_REFORMATIONS", "reform.maxReformations"),
    ("KGEN_ON_SCRIPT_ERROR", "reform.onScriptError"),
)


def _set_by_user(spec: TrainingSpec, key: str) -> str | None:
    """Where a user's layer set ``key`` (a values file, --set, a flag), else None (the default or a preset)."""
    origin = spec.origins.get(key, "default")
    return None if origin == "default" or origin.startswith("preset ") else origin


def _where(origin: str, key: str) -> str:
    return origin if origin.endswith(key) else f"{origin} ({key})"


def check(spec: TrainingSpec) -> None:
    """The Kubernetes-only keys a user set that --kind slurm cannot honour: the first is one UsageError."""
    v, o = spec.values, spec.origins
    for key, why, fix in REFUSED:
        if _set_by_user(spec, key) and v[key] not in ([], {}, "", None):
            raise _fail(o, key, f"has no meaning with kind slurm: {why}", hint=fix)
    for name, value in v["env"].items():
        if not isinstance(value, str):
            raise _fail(o, "env", f"{name}: has no meaning with kind slurm: valueFrom reads Kubernetes objects",
                        hint="export it before kgen submit (sbatch passes it on), or give it as a string")  # fmt: skip
        if not ENV_NAME.fullmatch(name):
            raise _fail(o, "env", f'"{name}" is not a shell variable name (letters, digits, _; no leading digit)',
                        hint="the sbatch script exports it")  # fmt: skip


def cautions(spec: TrainingSpec) -> list[str]:
    """Kubernetes-only keys a user set that an sbatch job ignores, in the words of the other kinds' cautions."""
    out = []
    for key, why in IGNORED:
        origin = _set_by_user(spec, key)
        if origin:
            out.append(f"{_where(origin, key)}: has no effect with kind slurm: {why}")
    return out


def _word(spec: TrainingSpec, key: str, pattern: Any, what: str) -> str:
    value = spec.values[key]
    if not isinstance(value, str):
        raise _fail(spec.origins, key, f'must be a string, got "{value}"')
    if value and not pattern.fullmatch(value):
        raise _fail(spec.origins, key, f"must be {what}, got {value!r}")
    return value


def cpus(spec: TrainingSpec) -> int:
    """--cpus-per-task: the cpu request in whole CPUs (0: none asked)."""
    from kgen.k8s import parse_quantity

    qty = ((spec.resources or {}).get("requests") or {}).get("cpu")
    if qty in (None, ""):
        return 0
    amount = parse_quantity(str(qty))
    key = "resources.requests" if "cpu" in spec.values["resources.requests"] else "cpu"
    if amount is None or amount != amount.to_integral_value():
        up = math.ceil(amount) if amount is not None else 1
        raise _fail(spec.origins, key, f"is {qty}: Slurm allocates whole CPUs (--cpus-per-task)", hint=f"use {up}")
    return int(amount)


def mem(spec: TrainingSpec) -> str:
    """--mem: the memory request in Slurm's units (K, M, G, T are powers of 1024), exact when it can be, else
    rounded up to whole MiB ("" when none is asked)."""
    from kgen.k8s import parse_quantity

    qty = ((spec.resources or {}).get("requests") or {}).get("memory")
    if qty in (None, ""):
        return ""
    amount = parse_quantity(str(qty))
    assert amount is not None and amount > 0  # kgen.render.validate checked it
    if amount % GIB == 0:
        return f"{int(amount // GIB)}G"
    return f"{math.ceil(amount / MIB)}M"


# sbatch's words when no node of the partition has what the job asks per node (memory, CPUs, GPUs).
NO_NODE_FITS = ("Requested node configuration is not available", "Memory required by task is not available")


def mem_origin(spec: TrainingSpec) -> str | None:
    """Where the script's --mem came from and how to leave it out (None when the script asks none): what a
    refused submission names, since sbatch says only that no node fits."""
    asked = mem(spec)
    if not asked:
        return None
    if "memory" in spec.values["resources.requests"]:
        where = spec.origins.get("resources.requests", "resources.requests")
        return f"--mem={asked} is resources.requests.memory (from {where}); leave it out of resources.requests"
    origin = spec.origins.get("memory", "default")
    value = spec.values["memory"]
    if value == "auto":
        rule = f"8Gi per GPU x {spec.gpus} GPUs" if spec.gpus else f"2Gi per process x {spec.nproc_per_node}"
        where = "" if origin == "default" else f"; memory: auto from {origin}"
        what = f"kgen's automatic memory request ({rule}{where})"
    else:
        what = f"kgen's memory request {value} (from {origin})"
    return f"--mem={asked} is {what}; leave it out with --memory '' (Slurm's default applies) or ask less: --memory QTY"


def explain_refusal(message: str, spec: TrainingSpec) -> str | None:
    """sbatch's refusal ``message`` with the kgen value behind it, when no node fits what the script asks."""
    if not any(words in message for words in NO_NODE_FITS):
        return None
    hint = mem_origin(spec)
    return f"{message}; {hint}" if hint else None


def directives(spec: TrainingSpec) -> tuple[str, ...]:
    """slurm.directives, checked: long options of plain words, none kgen writes itself."""
    o = spec.origins
    out = []
    for item in spec.values["slurm.directives"]:
        if not isinstance(item, str) or not item.startswith("--") or not WORD.fullmatch(item) or "%" in item:
            raise _fail(o, "slurm.directives", f"must be long options such as --exclusive or --constraint=h100, "
                        f"got {item!r}")  # fmt: skip
        name = item[2:].split("=", 1)[0]
        if name in OWN_OPTIONS:
            owner = OWN_OPTIONS[name]
            hint = f"set {owner} instead" if "kgen" not in owner else "drop it"
            raise _fail(o, "slurm.directives", f"--{name} is written by kgen from {owner}", hint=hint)
        out.append(item)
    return tuple(out)


def env(spec: TrainingSpec) -> tuple[tuple[str, str], ...]:
    """The script's exports: the processes per node, the entrypoint's settings, NCCL/gloo, the user's env."""
    v = spec.values
    out = [("NPROC_PER_NODE", str(spec.nproc_per_node))]
    out += [(name, str(v[key])) for name, key in EXPORTS]
    if v["health.gate"] != "warn":  # the health gate (the entrypoint's default, warn: not exported)
        out.append(("KGEN_HEALTH_GATE", v["health.gate"]))
    for name, key in (("NCCL_DEBUG", "nccl.debug"), ("NCCL_SOCKET_IFNAME", "nccl.socketIfname"),
                      ("GLOO_SOCKET_IFNAME", "gloo.socketIfname")):  # fmt: skip
        if v[key]:
            out.append((name, v[key]))
    if v["nccl.ibDisable"] is not None:
        out.append(("NCCL_IB_DISABLE", "1" if v["nccl.ibDisable"] else "0"))
    out += [(k, val) for k, val in v["env"].items()]
    return tuple(out)


def sbatch_spec(spec: TrainingSpec) -> SbatchSpec:
    """The sbatch script's fields for ``spec`` (kind slurm), every value checked with the layer it came from."""
    check(spec)
    v, o = spec.values, spec.origins
    python = _word(spec, "python", WORD, "an interpreter path of plain characters (no spaces or quotes)")
    workdir = _word(spec, "workingDir", OUTPUT, "an absolute path of plain characters")
    if workdir and (not workdir.startswith("/") or "%" in workdir or "," in workdir):
        raise _fail(o, "workingDir", f"must be an absolute path (no %, no commas), got {workdir!r}")
    step_wait = v["slurm.stepWait"]
    if isinstance(step_wait, bool) or not isinstance(step_wait, int) or not 1 <= step_wait <= 3600:
        raise _fail(o, "slurm.stepWait", f'must be an integer between 1 and 3600, got "{step_wait}"')
    if not NAME.fullmatch(spec.name):
        raise _fail(o, "name", f"must be a Slurm job name of plain characters, got {spec.name!r}")
    return SbatchSpec(
        name=spec.name,
        nodes=spec.nodes,
        command=list(spec.command) or ["--smoke-test"],
        gpus_per_node=spec.gpus,
        cpus_per_task=cpus(spec),
        mem=mem(spec),
        time=_word(spec, "slurm.time", TIME, "Slurm's time form (minutes, HH:MM:SS, D-HH:MM:SS)"),
        partition=_word(spec, "slurm.partition", WORD, "a Slurm partition name"),
        account=_word(spec, "slurm.account", WORD, "a Slurm account name"),
        qos=_word(spec, "slurm.qos", WORD, "a Slurm QoS name"),
        requeue=v["reform.maxReformations"] > 0,
        chdir=workdir,
        python=python,
        step_wait=step_wait,
        env=env(spec),
        extra_sbatch=directives(spec),
    )


def render_script(spec: TrainingSpec) -> str:
    """The sbatch script's text for ``spec`` (kind slurm)."""
    from kgen.render import sbatch

    return sbatch.sbatch_text(sbatch_spec(spec))
