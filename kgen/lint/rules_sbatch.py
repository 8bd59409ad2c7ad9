"""Rules for sbatch scripts (KG170-KG180): how a Slurm batch script launches torchrun, read by kgen.lint.sbatch.

The classes of mistake, each from reference/slurm.md's measurements on Slurm 22.05: one torchrun per task
instead of per node, ``--nnodes`` hard-coded while the allocation differs, ``MASTER_ADDR`` resolved on every
node, no ``srun`` (the batch host trains alone), a fixed rendezvous port on shared nodes, no fail-stop (the
survivors of a dead node wait until their timeouts or the time limit), no requeue; and what sbatch or bash
refuse, directives sbatch ignores, and a node rank the batch shell expands once for every node.

Each rule gets an ``SbatchScript`` and yields ``(line, message)``; the severities follow docs/lint.md's policy.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator

from kgen.findings import Severity
from kgen.launch.argv import Launch, host_of
from kgen.lint.registry import rule
from kgen.lint.sbatch import ALLOC_NODE_VARS, BATCH_VALUE, SbatchScript, Step, literal_int, node_range

KINDS = ("sbatch",)
PER_NODE_LAUNCHERS = ("torchrun", "deepspeed", "accelerate", "kgen")
LOCAL_HOSTS = re.compile(r"^(?:localhost|127(?:\.\d+){3}|::1|0\.0\.0\.0)$")
PER_NODE_HOST = re.compile(r"\$\(\s*hostname\b|`\s*hostname\b|\$\{?HOSTNAME\b|\$\{?SLURMD_NODENAME\b")
DEFAULT_PORTS = {"torchrun": 29500, "deepspeed": 29500, "accelerate": 29500}
C10D_DEFAULT_PORT = 29400
# Slurm's variables that hold a node's GPU count (a task count taken from one is one task per GPU)
GPU_COUNT_VARS = ("SLURM_GPUS_ON_NODE", "SLURM_GPUS_PER_NODE", "SLURM_JOB_GPUS_PER_NODE")
Found = Iterator[tuple[int, str]]


# ---------------------------------------------------------------------------------------------- helpers
def training(launch: Launch) -> bool:
    """A launcher that starts a node's training processes (kgen's entrypoint only with a command: its
    ``--slurm-end`` runs after the step)."""
    return launch.form in PER_NODE_LAUNCHERS and (launch.form != "kgen" or bool(launch.child))


def steps(s: SbatchScript, *kinds: str) -> Iterator[Step]:
    for step in s.steps:
        if step.kind in kinds and not step.in_cmdsub:
            yield step


def resolve(value: str | None, s: SbatchScript, launch: Launch) -> str | None:
    """A flag's value with a whole-token ``$X`` the batch script assigned replaced (inside a task's own shell
    only the variables it exported are there)."""
    if value is None:
        return None
    m = re.fullmatch(r"\$\{?(\w+)\}?", value)
    if m and m.group(1) in s.scalars and (not launch.script or m.group(1) in s.exports):
        return s.scalars[m.group(1)]
    return value


def static(launch: Launch) -> bool:
    backend = (launch.flag("rdzv_backend") or "static").lower()
    return backend == "static" and not launch.has("standalone")


def step_nodes(s: SbatchScript, step: Step) -> tuple[int, int] | None:
    """(min, max) nodes of the step: srun's -N, else the allocation's #SBATCH --nodes."""
    given, value = step.option("nodes")
    if given:
        got = node_range(value)
        if got is not None and not (step.per_host and got == (1, 1)):
            return got  # (per-host one-node steps, a loop's or a function's, span the allocation)
    return s.nodes


def nodes_said(s: SbatchScript, step: Step) -> str:
    given, value = step.option("nodes")
    if given and node_range(value) and not (step.per_host and node_range(value) == (1, 1)):
        return f"srun --nodes={value} (line {s.locate(step.line, '-N', '--nodes')})"
    d = s.directive("nodes")
    return f"#SBATCH --nodes={d.value} (line {d.line})" if d else "the allocation"


def nnodes_literal(s: SbatchScript, launch: Launch) -> int | None:
    return literal_int(resolve(launch.flag("nnodes"), s, launch))


def multi_node(s: SbatchScript, step: Step, launch: Launch) -> bool:
    """Whether the step trains on more than one node, as far as the script says."""
    nodes = step_nodes(s, step)
    if nodes is not None:
        return nodes[1] > 1
    n = nnodes_literal(s, launch)
    if n is not None:
        return n > 1
    return any(v in (launch.flag("nnodes") or "") for v in ALLOC_NODE_VARS)


def name(launch: Launch) -> str:
    return {"kgen": "kgen's entrypoint", "accelerate": "accelerate launch"}.get(launch.form, launch.form)


# ---------------------------------------------------------------------------------------------- KG170
@rule(
    "KG170",
    Severity.ERROR,
    "An sbatch script sbatch or bash refuses: no shebang on its first line (sbatch: 'This does not look like a "
    "batch script'), or shell syntax bash rejects.",
    "Start the script with #!/bin/bash and fix the syntax at the line given (bash -n SCRIPT shows it).",
    kinds=KINDS,
    scope="sbatch",
)
def refused(s: SbatchScript) -> Found:
    if s.error is not None:
        yield s.error


# ---------------------------------------------------------------------------------------------- KG171
def tasks_per_node(s: SbatchScript, step: Step) -> tuple[int | None, str]:
    """How many tasks srun starts on each node, and why (srun inherits the allocation's task count)."""
    given_n, n = step.option("ntasks")
    given_tpn, tpn = step.option("ntasks-per-node")
    nodes = step_nodes(s, step)
    line = s.locate(step.line, "--ntasks", "-n")
    if given_n:
        if any(v in (n or "") for v in ALLOC_NODE_VARS):
            return 1, ""
        count = literal_int(n)
        if count is not None and nodes is not None and nodes[0] == nodes[1]:
            each = math.ceil(count / nodes[0])
            return each, f"srun --ntasks={count} on {nodes[0]} node(s) at line {line}"
        return None, ""
    per = literal_int(tpn)
    if given_tpn and per is not None and per > 1:
        return per, f"srun --ntasks-per-node={per} at line {s.locate(step.line, '--ntasks-per-node')}"
    d = s.directive("ntasks-per-node")
    alloc = literal_int(d.value) if d else None
    ignored = "; srun's own --ntasks-per-node=1 does not change that without --ntasks" if given_tpn else ""
    if d is not None and alloc is not None and alloc > 1:
        return alloc, f"#SBATCH --ntasks-per-node={alloc} at line {d.line}, which srun inherits{ignored}"
    d = s.directive("ntasks")
    total = literal_int(d.value) if d else None
    if d is not None and total is not None and s.nodes is not None and s.nodes[0] == s.nodes[1]:
        per = math.ceil(total / s.nodes[0])
        if per > 1:
            said = f"#SBATCH --ntasks={total} on {s.nodes[0]} node(s) at line {d.line}"
            return per, f"{said}, which srun inherits{ignored}"
    return 1, ""


@rule(
    "KG171",
    Severity.ERROR,
    "srun starts several tasks per node and each task runs a per-node launcher (torchrun, deepspeed, accelerate "
    "launch, kgen's entrypoint): every node runs that many launchers, each starting its own processes for the "
    "whole node (NCCL: duplicate GPU; a world of several times the ranks, with clashing node ranks); inside an "
    "allocation srun inherits the allocation's tasks, and srun --ntasks-per-node=1 alone does not change that.",
    'Run one task per node for the launcher: srun --ntasks="$SLURM_NNODES" --ntasks-per-node=1 (or '
    "#SBATCH --ntasks-per-node=1), and let the launcher start the per-GPU processes; or one task per GPU with "
    "no launcher (python train.py reading SLURM_PROCID).",
    kinds=KINDS,
    scope="sbatch",
)
def per_task_launcher(s: SbatchScript) -> Found:
    for step in steps(s, "srun"):
        launches = [x for x in step.launches if training(x)]
        if not launches:
            continue
        given, tpn = step.option("ntasks-per-node")
        gpu_var = next((v for v in GPU_COUNT_VARS if given and v in (tpn or "")), None)
        inherited = s.directive("ntasks") or s.directive("ntasks-per-node") or step.option("ntasks")[0]
        if gpu_var is not None and not inherited:  # (an allocation's task count would override it: measured)
            per_node = job_gpus(s)[1]
            count = f"{per_node} tasks" if per_node else "one task per GPU"
            yield (
                s.locate(step.line, "--ntasks-per-node"),
                f"srun --ntasks-per-node={tpn} starts {count} on every node (${gpu_var} is the node's GPU count), "
                f"and each runs {name(launches[0])}: every one starts the whole node's processes",
            )
            continue
        per, why = tasks_per_node(s, step)
        if per is not None and per > 1:
            launcher = name(launches[0])
            message = f"srun starts {per} tasks per node ({why}), and each runs {launcher}: {per} of them on every "
            yield step.line, message + "node, each starting the whole node's processes"


# ---------------------------------------------------------------------------------------------- KG172/KG173
def _nnodes(s: SbatchScript) -> Iterator[tuple[Step, Launch, int, tuple[int, int] | None]]:
    for step in steps(s, "srun", "mpi", "batch"):
        for launch in step.launches:
            if not training(launch) or launch.form == "kgen":
                continue
            raw = launch.flag("nnodes")
            value = resolve(raw, s, launch)
            if raw is None or value is None or any(v in raw or v in value for v in ALLOC_NODE_VARS):
                continue
            n = literal_int(value)
            if n is not None:
                yield step, launch, n, step_nodes(s, step)


@rule(
    "KG172",
    Severity.ERROR,
    "A launcher's node count is written as a number that the job's nodes do not match (#SBATCH --nodes, or "
    "srun's -N), or torchrun has none (it defaults to 1) in an srun step on several nodes: a static rendezvous "
    "waits for nodes that do not exist (or the extra nodes' ranks are out of range) until its timeout, and "
    "without --nnodes every node trains alone or waits in a rendezvous that closed with one node.",
    'Take the count from the allocation: --nnodes="$SLURM_NNODES" (deepspeed --num_nodes, accelerate '
    "--num_machines likewise).",
    kinds=KINDS,
    scope="sbatch",
)
def nnodes_differs(s: SbatchScript) -> Found:
    for step, launch, n, nodes in _nnodes(s):
        if nodes is not None and not nodes[0] <= n <= nodes[1]:
            flag = launch.spelling("nnodes")
            yield s.locate(step.line, flag), f"{name(launch)} {flag}={n}, but the job has {nodes_said(s, step)}"
    # torchrun without --nnodes is a one-node world: srun on several nodes starts several such worlds
    for step in steps(s, "srun"):
        nodes = step_nodes(s, step)
        if nodes is None or nodes[0] <= 1:
            continue
        for launch in step.launches:
            if (
                launch.form == "torchrun"
                and not launch.opaque
                and not launch.has("nnodes")
                and not launch.has("standalone")
            ):
                yield (
                    step.line,
                    f"torchrun has no --nnodes, so it defaults to 1 (every node forms a world of its own, or waits "
                    f"in a rendezvous that closed with one node), but the job has {nodes_said(s, step)}; "
                    'add --nnodes="$SLURM_NNODES"',
                )


@rule(
    "KG173",
    Severity.INFO,
    "A launcher's node count is a number written into the script: it agrees with the job's nodes only until "
    "sbatch -N (or a later edit, or a --nodes range) gives another count, and then the rendezvous waits for "
    "nodes that do not exist.",
    'Take the count from the allocation: --nnodes="$SLURM_NNODES".',
    kinds=KINDS,
    scope="sbatch",
)
def nnodes_hardcoded(s: SbatchScript) -> Found:
    for step, launch, n, nodes in _nnodes(s):
        flag = launch.spelling("nnodes")
        where = s.locate(step.line, flag)
        if nodes is None and n > 1:
            yield (
                where,
                f"{name(launch)} {flag}={n} is written into the script; no #SBATCH --nodes says the job's count",
            )
        elif nodes is not None and nodes[0] <= n <= nodes[1] and (nodes[0] != nodes[1] or n > 1):
            more = f" (a range: the job may get {nodes[0]} to {nodes[1]})" if nodes[0] != nodes[1] else ""
            yield where, f"{name(launch)} {flag}={n} repeats {nodes_said(s, step)}{more}: sbatch -N overrides one"


# ---------------------------------------------------------------------------------------------- KG174
def _inner_master(step: Step) -> Iterator[str]:
    """MASTER_ADDR set by each task's own shell from the node it runs on (or to localhost)."""
    for script, _ in step.read.scripts if step.read is not None else []:
        for cmd in script.simple_commands():
            words = [w for w in cmd.assigns]
            if cmd.words and cmd.words[0].raw == "export":
                words += cmd.words[1:]
            for w in words:
                key, eq, value = w.raw.partition("=")
                if (
                    key == "MASTER_ADDR"
                    and eq
                    and (PER_NODE_HOST.search(value) or LOCAL_HOSTS.match(value.strip("\"'")))
                ):
                    yield value


@rule(
    "KG174",
    Severity.ERROR,
    "The rendezvous address is not the first node's on every node: MASTER_ADDR or the launcher's master address "
    "is $(hostname), $HOSTNAME or localhost in the command each task's own shell runs (so each node names "
    "itself), --standalone on several nodes, or a static torchrun without --master-addr (127.0.0.1): every node "
    "forms a world of its own and the rendezvous hangs.",
    "Compute the address once in the batch script, which runs on the first node: export MASTER_ADDR=$(scontrol "
    'show hostnames "$SLURM_JOB_NODELIST" | head -n1), and pass --master-addr="$MASTER_ADDR" to every node.',
    kinds=KINDS,
    scope="sbatch",
)
def master_per_node(s: SbatchScript) -> Found:
    for step in steps(s, "srun", "mpi"):
        for launch in step.launches:
            if launch.form not in ("torchrun", "deepspeed", "accelerate", "python") or not multi_node(s, step, launch):
                continue
            if launch.has("standalone"):
                yield step.line, "torchrun --standalone on a multi-node step: each node forms its own one-node world"
                continue
            masters = launch.master_flags()
            for _, raw in masters:
                value = resolve(raw, s, launch) or ""
                host = host_of(value)
                if LOCAL_HOSTS.match(host):
                    yield s.locate(step.line, raw), f"{name(launch)}'s master address is {host} on every node"
                elif launch.script and PER_NODE_HOST.search(raw):
                    yield (
                        s.locate(step.line, raw),
                        (
                            f"{name(launch)}'s master address {raw} is evaluated by each task's own shell: each node "
                            "names itself"
                        ),
                    )
            if not masters and launch.form == "torchrun" and static(launch) and not launch.opaque:
                if "PET_MASTER_ADDR" not in s.exports:
                    yield step.line, "static torchrun without --master-addr uses 127.0.0.1 on every node"
        for value in _inner_master(step):
            if any(x.form in ("torchrun", "deepspeed", "accelerate", "python") for x in step.launches):
                yield step.line, f"MASTER_ADDR={value} is set by each task's own shell: each node names itself"
                break


# ---------------------------------------------------------------------------------------------- KG175
@rule(
    "KG175",
    Severity.ERROR,
    "A multi-node job runs its launcher in the batch script itself, without srun: Slurm runs the batch script on "
    "the first node only, so the other nodes never start and the rendezvous waits for them (or the first node "
    "trains alone while the rest of the allocation idles).",
    'Start the launcher on every node with srun, one task per node: srun --ntasks="$SLURM_NNODES" '
    "--ntasks-per-node=1 torchrun ...",
    kinds=KINDS,
    scope="sbatch",
)
def no_srun(s: SbatchScript) -> Found:
    for step in steps(s, "batch"):
        for launch in step.launches:
            if not training(launch) or (launch.form == "deepspeed" and (launch.config_file or launch.has("launcher"))):
                continue  # deepspeed's own runner reaches the hosts of its hostfile (pdsh, or srun with --launcher)
            nodes = s.nodes
            n = nnodes_literal(s, launch)
            if (nodes is not None and nodes[0] > 1) or (n is not None and n > 1):
                said = f"#SBATCH --nodes={s.directive('nodes').value}" if nodes else f"{launch.spelling('nnodes')}={n}"  # type: ignore[union-attr]
                yield (
                    step.line,
                    f"{name(launch)} runs in the batch script (the first node only) while the job has {said}",
                )


# ---------------------------------------------------------------------------------------------- KG176
@rule(
    "KG176",
    Severity.ERROR,
    "A static rendezvous gets the same node rank on every node: $SLURM_NODEID (or $SLURM_PROCID) in the srun "
    "line is expanded by the batch script's shell on the first node (0) before any task starts, or the rank is "
    "a number, or torchrun's --node-rank is left at its default 0: the ranks clash and the rendezvous fails or "
    "hangs (a one-node job whose --nnodes follows the allocation, $SLURM_NNODES, and whose node rank the batch "
    "shell expands breaks at the first sbatch -N 2).",
    "Let each task's own shell expand it: srun bash -c 'exec torchrun --node-rank=\"$SLURM_NODEID\" ...' (single "
    "quotes), or use a c10d rendezvous (--rdzv-backend=c10d), which assigns the ranks itself.",
    kinds=KINDS,
    scope="sbatch",
)
def same_node_rank(s: SbatchScript) -> Found:
    for step in steps(s, "srun", "mpi"):
        for launch in step.launches:
            if launch.form not in ("torchrun", "accelerate") or not static(launch) or launch.opaque:
                continue
            if launch.form == "accelerate" and (launch.flag("rdzv_backend") or "static") != "static":
                continue
            # one node today, but the launcher's node count follows the allocation: the rank the batch shell
            # expanded is every node's as soon as sbatch -N gives the job more
            multi = multi_node(s, step, launch)
            scales = not multi and any(v in (launch.flag("nnodes") or "") for v in ALLOC_NODE_VARS)
            if not multi and not (scales and step.node_rank_vars):
                continue
            raw = launch.flag("node_rank")
            flag = launch.spelling("node_rank")
            if raw is None:
                if launch.form == "torchrun" and "PET_NODE_RANK" not in s.exports:
                    yield step.line, f"torchrun without {flag}: every node is node 0"
                continue
            value = resolve(raw, s, launch)
            if literal_int(value) is None:
                continue
            if step.per_host and node_range(step.option("nodes")[1]) == (1, 1) and not step.node_rank_vars:
                # one step per host, each on one node (a function called per host): a number is that node's rank,
                # unless another call of the same command gives the same one
                if _ranks_of_calls(s, step).count(value) == 1:
                    continue
            if step.node_rank_vars and value == "0":
                var = step.node_rank_vars[0]
                yield (
                    s.locate(step.line, flag),
                    (
                        f"${var} in the srun line is expanded by the batch script's shell (on the first node, where it "
                        f"is 0): every node gets {flag}=0"
                        + (
                            f" once the job has several nodes (its {launch.spelling('nnodes')} follows the allocation)"
                            if scales
                            else ""
                        )
                    ),
                )
            else:
                yield s.locate(step.line, flag), f"{flag}={value} is the same on every node"


def _ranks_of_calls(s: SbatchScript, step: Step) -> list[str | None]:
    """The node rank each step read from the same command (a function's calls) gives its launcher."""
    out = []
    for other in s.steps:
        if other.node is step.node:
            out += [resolve(x.flag("node_rank"), s, x) for x in other.launches if x.form in ("torchrun", "accelerate")]
    return out


# ---------------------------------------------------------------------------------------------- KG177
def _port(launch: Launch, s: SbatchScript) -> tuple[str, str] | None:
    """(the fixed port, what says it) of a launch's rendezvous, None when it is computed or unknown."""
    if launch.form == "torchrun" and not static(launch):
        if launch.has("standalone"):
            return None
        endpoint = resolve(launch.flag("rdzv_endpoint"), s, launch)
        if not endpoint:
            return None
        if endpoint.count(":") == 1 or endpoint.startswith("["):
            port = endpoint.rsplit(":", 1)[1]
            return (port, f"--rdzv-endpoint ...:{port}") if port.isdigit() else None
        if BATCH_VALUE in endpoint or "$" in endpoint:
            return None
        return str(C10D_DEFAULT_PORT), "the c10d rendezvous' default port (--rdzv-endpoint without a port)"
    if launch.form not in DEFAULT_PORTS:
        return None
    raw = launch.flag("master_port")
    if raw is None:
        if launch.opaque or (launch.form == "torchrun" and (nnodes_literal(s, launch) or 1) <= 1 and not any(
            v in (launch.flag("nnodes") or "") for v in ALLOC_NODE_VARS
        )):  # fmt: skip
            return None  # torch 2.13: a one-node static torchrun without a port picks a free one (localhost:0)
        return str(DEFAULT_PORTS[launch.form]), f"{name(launch)}'s default port"
    value = resolve(raw, s, launch) or ""
    return (value, f"{launch.spelling('master_port')}={value}") if value.isdigit() else None


@rule(
    "KG177",
    Severity.INFO,
    "The rendezvous port is a fixed number (or the launcher's default, 29500) on nodes the job does not hold "
    "exclusively: two jobs placed on one node at once (Slurm does, measured) bind the same port and the later "
    "one fails with EADDRINUSE.",
    "Derive the port from the job id, below Linux's ephemeral range: --master-port=$((20000 + SLURM_JOB_ID % "
    "10000)); or ask for whole nodes (#SBATCH --exclusive).",
    kinds=KINDS,
    scope="sbatch",
)
def fixed_port(s: SbatchScript) -> Found:
    if s.directive("exclusive") is not None:
        return
    for step in steps(s, "srun", "mpi", "batch"):
        for launch in step.launches:
            if not training(launch) or launch.form == "kgen":
                continue
            got = _port(launch, s)
            if got is not None:
                port, said = got
                yield s.locate(step.line, port), f"the rendezvous port is fixed: {said}"
                break
        else:
            port = s.scalars.get("MASTER_PORT", "")
            if "MASTER_PORT" in s.exports and port.isdigit() and any(x.form == "python" for x in step.launches):
                yield step.line, f"the rendezvous port is fixed: MASTER_PORT={port}"


# ---------------------------------------------------------------------------------------------- KG178
@rule(
    "KG178",
    Severity.INFO,
    "A multi-node training step without a fail-stop: srun's default (KillOnBadExit=0) lets the other nodes run "
    "on when one node's task dies, so they wait in their collectives until NCCL's or gloo's timeout (10 to 30 "
    "minutes), or until the time limit for a rank that hangs, holding the whole allocation.",
    "End the step when a task fails: srun --kill-on-bad-exit=1 (with --requeue and a resume from the checkpoint), "
    "or run the nodes under kgen's entrypoint (kgen render --kind slurm), which stops every node within seconds.",
    kinds=KINDS,
    scope="sbatch",
)
def no_fail_stop(s: SbatchScript) -> Found:
    if s.scalars.get("SLURM_KILL_BAD_EXIT") == "1" and "SLURM_KILL_BAD_EXIT" in s.exports:
        return
    for step in steps(s, "srun"):
        given, value = step.option("kill-on-bad-exit")
        if given and (value is None or value.strip() not in ("0", "")):
            continue
        launches = [x for x in step.launches if training(x) and x.form != "kgen"]
        if launches and multi_node(s, step, launches[0]):
            what = "srun --kill-on-bad-exit=0" if given else "srun without --kill-on-bad-exit"
            dies = f"when one node's {name(launches[0])} dies, the other nodes' processes wait in their collectives"
            yield step.line, f"{what}: {dies}"


# ---------------------------------------------------------------------------------------------- KG179
@rule(
    "KG179",
    Severity.INFO,
    "A multi-node training job that says nothing about requeue (the cluster's JobRequeue decides whether a node "
    "failure ends the job), or that is requeued without --open-mode=append (a requeued attempt truncates the "
    "output file: the first attempt's log is lost).",
    "Add #SBATCH --requeue and #SBATCH --open-mode=append, and resume from the checkpoint (SLURM_RESTART_COUNT "
    "counts the requeues); or #SBATCH --no-requeue to fail the job instead.",
    kinds=KINDS,
    scope="sbatch",
)
def requeue(s: SbatchScript) -> Found:
    multi = any(
        training(x) and multi_node(s, step, x) for step in steps(s, "srun", "mpi", "batch") for x in step.launches
    )
    if not multi:
        return
    req, noreq = s.directive("requeue"), s.directive("no-requeue")
    mode = s.directive("open-mode")
    if req is None and noreq is None:
        at = s.directive("nodes") or (s.directives[0] if s.directives else None)
        yield (
            (at.line if at else 1),
            ("no #SBATCH --requeue or --no-requeue: whether a node failure requeues the job is the cluster's choice"),
        )
    elif req is not None and (noreq is None or noreq.line < req.line) and (mode is None or mode.value != "append"):
        yield req.line, "#SBATCH --requeue without --open-mode=append: a requeued attempt truncates the output file"


# ---------------------------------------------------------------------------------------------- KG180
@rule(
    "KG180",
    Severity.WARNING,
    "An #SBATCH line after the script's first command: sbatch reads directives only up to the first command, so "
    "it is silently ignored (the job runs with the default, e.g. one node).",
    "Move every #SBATCH line above the first command (comments and blank lines may come before them).",
    kinds=KINDS,
    scope="sbatch",
)
def late_directive(s: SbatchScript) -> Found:
    for d in s.late:
        yield d.line, f"#SBATCH --{d.name} comes after the first command (line {s.first_command}): sbatch ignores it"


# ---------------------------------------------------------------------------------------------- GPUs asked
def _gres_gpus(value: str) -> int | None:
    """GPUs per node in a --gres value (``gpu:8``, ``gpu:a100:8``, ``gpu``: 1; a list), 0 when none."""
    total = 0
    for item in value.split(","):
        parts = item.strip().split(":")
        if parts[0] != "gpu":
            continue
        count = parts[-1] if len(parts) > 1 else "1"
        count = count.split("(")[0]
        if len(parts) == 2 and not count.isdigit():
            count = "1"  # gpu:a100 is one GPU of that type
        if not count.isdigit():
            return None
        total += int(count)
    return total


def _count(value: str | None) -> int | None:
    """The number in a --gpus/--gpus-per-node value (``8``, ``a100:8``), None when not literal."""
    last = (value or "").split(":")[-1]
    return int(last) if last.isdigit() else None


def _gpus(options: dict[str, str | None], nodes: tuple[int, int] | None) -> tuple[bool, int | None, str]:
    """(asks for GPUs, GPUs per node when known, how it is written) from sbatch's or srun's options."""
    value = options.get("gres")
    if value is not None and "gpu" in value:
        per = _gres_gpus(value)
        return bool(per) or per is None, per, f"--gres={value}"
    for opt in ("gpus-per-node", "gpus-per-task", "gpus-per-socket"):
        if options.get(opt) is not None:
            per = _count(options[opt]) if opt == "gpus-per-node" else None
            return per != 0, per, f"--{opt}={options[opt]}"
    if options.get("gpus") is not None:
        total = _count(options["gpus"])
        per = total // nodes[0] if total is not None and nodes and nodes[0] == nodes[1] and nodes[0] else None
        return total != 0, per, f"--gpus={options['gpus']}"
    return False, None, ""


def job_gpus(s: SbatchScript) -> tuple[bool, int | None, str]:
    """What the job's #SBATCH directives allocate: (any GPUs, GPUs per node, how it is written)."""
    options = {d.name: d.value for d in s.directives}
    return _gpus(options, s.nodes)
