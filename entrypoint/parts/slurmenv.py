"""A Slurm job step's environment: host lists, ports, and the verdict inside a step."""

from __future__ import annotations

import re

from .config import Config, _raw
from .header import EXIT_DROPPED, EXIT_PEER_LOST, EXIT_RUN_FAILED
from .reform import FAIL

# --------------------------------------------------------------------------------------------
# Slurm: one task per node of a job step (docs/slurm.md)
#
# Inside `srun` (SLURM_JOB_ID and SLURM_STEP_ID set) the node rank is SLURM_NODEID, NNODES the step's
# node count, MASTER_ADDR the first host of the step's node list (parsed here, as `scontrol show
# hostnames` does: no scontrol needed inside a container), MASTER_PORT 20000 + 2 x (job id % 5000)
# (below the ephemeral range; the liveness port is the next one, so two jobs sharing a node never share
# a port), the run id the job id, and KGEN_RESTART_COUNT follows SLURM_RESTART_COUNT. A value set
# explicitly must agree with the allocation (NNODES and NODE_RANK both set: ranks by hand, nothing is
# derived). A lost node is never replaced inside a step: the survivors fail-stop (75), the step ends,
# and --slurm-end requeues the job (`scontrol requeue`) to resume from the checkpoint, at most
# KGEN_MAX_REFORMATIONS times; a script error fails the job at once (5).
#
#   RUN = the run's folder on a file system every node shares (kgen submit makes it, 0700):
#   secret, kgen_entrypoint.py, job.sbatch   written at submit time (the secret never in the script)
#   node<R>/log, node<R>/events            every line of node R, "<UTC time> <line>", all attempts
#   node<R>/exit    {"code", "reason", "time", "attempt", "job", "host"} of node R's last attempt
#   node<R>/pid     node R's task: host, pid, attempt, job
#   node<R>/attempts  one JSON line per start (host) and exit of node R, every attempt (a requeue keeps them)
#   end, history    --slurm-end's decision on the last attempt (JSON); every decision (JSON lines)
#   stopping        kgen stop was asked: nothing is requeued, a requeued attempt does not start
#
# Verbs: --slurm-node RUN -- COMMAND (the task srun starts on every node: the entrypoint under a
# foreground supervisor that stamps its lines into RUN/node<R>), --slurm-end RUN RC (the batch script,
# after srun: succeeded, failed, stopped, or requeue).
# --------------------------------------------------------------------------------------------

SLURM_PORT_BASE, SLURM_PORT_PAIRS = 20000, 5000  # ports 20000-29999: below Linux's ephemeral range
SLURM_REQUEUE_CODES = (EXIT_PEER_LOST, EXIT_DROPPED, 128 + 9, 128 + 15)  # a lost, frozen or killed node
HOSTLIST_MAX = 65536  # names one host list may expand to


def hostlist(text: str) -> list[str]:
    """Slurm's host list -> host names in order, as `scontrol show hostnames` prints them:
    ``n[0-2]`` -> n0 n1 n2; ``gpu-[01-03,7],login1`` keeps the zero padding and the order;
    ``r[1-2]-n[0-1]`` -> r1-n0 r1-n1 r2-n0 r2-n1. ValueError on anything else."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c == "[":
            depth += 1
        elif c == "]":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
        if depth not in (0, 1):
            raise ValueError(f"unbalanced brackets in host list {text!r}")
    if depth:
        raise ValueError(f"unbalanced brackets in host list {text!r}")
    parts.append(text[start:])
    names: list[str] = []
    for part in parts:
        part = part.strip()
        if not part:
            continue
        names.extend(_hostlist_part(part, HOSTLIST_MAX - len(names)))
    return names


def _hostlist_part(part: str, room: int) -> list[str]:
    m = re.fullmatch(r"([^\[\]]*)\[([^\[\]]*)\](.*)", part)
    if not m:
        if "[" in part or "]" in part or any(c.isspace() for c in part):
            raise ValueError(f"bad host name {part!r}")
        return [part]
    prefix, ranges, rest = m.groups()
    tails = _hostlist_part(rest, room) if rest else [""]
    out: list[str] = []
    for item in ranges.split(","):
        lo, sep, hi = item.strip().partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError(f"bad range {item!r} in host list {part!r}")
        first, last = int(lo), int(hi) if sep else int(lo)
        if last < first or (last - first + 1) * len(tails) > room - len(out):
            raise ValueError(f"range {item!r} in {part!r} is reversed or longer than {HOSTLIST_MAX} names")
        out.extend(f"{prefix}{str(k).zfill(len(lo))}{t}" for k in range(first, last + 1) for t in tails)
    return out


def slurm_port(job: str) -> int:
    """MASTER_PORT of a Slurm job (the liveness channel takes the next port): pairs never overlap."""
    try:
        key = int(job)
    except ValueError:
        key = sum(job.encode()) * 7919
    return SLURM_PORT_BASE + 2 * (key % SLURM_PORT_PAIRS)


def slurm_environment(env: dict, cfg: Config) -> dict:
    """Inside a Slurm job step: the run's settings from the allocation, into a copy of ``env`` (the
    contract's names, so everything after reads them as on any other platform); cfg.slurm says what came
    from where. Outside Slurm, or with KGEN_SLURM=0: ``env`` unchanged."""
    job = _raw(env, "SLURM_JOB_ID") or _raw(env, "SLURM_JOBID")
    if job is None or _raw(env, "KGEN_SLURM") == "0":
        return env
    p = cfg.problems
    step = _raw(env, "SLURM_STEP_ID") or _raw(env, "SLURM_STEPID")
    if step is None:
        if _raw(env, "NODE_RANK") is None and (_raw(env, "SLURM_NNODES") or "1") != "1":
            p.append(
                f"this is the batch script (or allocation) of Slurm job {job}, not a job step (no SLURM_STEP_ID): "
                "start the entrypoint with srun, one task per node (srun --ntasks-per-node=1 "
                '--ntasks="$SLURM_NNODES" ...), or it runs on the batch host alone as node 0'
            )
        return env
    if _raw(env, "NNODES") is not None and _raw(env, "NODE_RANK") is not None:
        return env  # ranks given by hand (kgen launch in a Slurm shell, or a script of your own): taken as given
    out = dict(env)

    def count(*names: str) -> int | None:
        for name in names:
            raw = _raw(env, name)
            if raw is not None:
                if raw.isdigit():
                    return int(raw)
                p.append(f"{name}={raw!r} is not a number: this is not a Slurm job step's environment")
                return None
        return None

    nodes = count("SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES")
    tasks = count("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS")
    node_id = count("SLURM_NODEID")
    restart = count("SLURM_RESTART_COUNT") or 0
    if nodes is None or node_id is None:
        p.append("SLURM_STEP_NUM_NODES and SLURM_NODEID are not set in this Slurm job step: start it with srun")
        return env
    if tasks is not None and tasks != nodes:
        p.append(
            f"Slurm job step with {tasks} tasks on {nodes} node(s) (SLURM_STEP_NUM_TASKS): kgen runs one task per "
            'node, torchrun starts the per-GPU processes: srun --ntasks-per-node=1 --ntasks="$SLURM_NNODES"'
        )
    for name, value in (("NNODES", nodes), ("NODE_RANK", node_id)):
        given = _raw(env, name)
        if given is not None and given != str(value):
            origin = "SLURM_STEP_NUM_NODES" if name == "NNODES" else "SLURM_NODEID"
            p.append(
                f"{name}={given} but the Slurm step says {value} ({origin}): unset {name}, kgen takes it from Slurm"
            )
        out[name] = str(value)
    listed = _raw(env, "SLURM_STEP_NODELIST") or _raw(env, "SLURM_JOB_NODELIST") or _raw(env, "SLURM_NODELIST") or ""
    addr = _raw(env, "MASTER_ADDR")
    if addr is None:
        try:
            hosts = hostlist(listed)
        except ValueError as exc:
            hosts = []
            p.append(f"SLURM_STEP_NODELIST={listed!r}: {exc}: set MASTER_ADDR to node 0's host")
        if hosts:
            out["MASTER_ADDR"] = addr = hosts[0]
        elif listed == "":
            p.append("SLURM_STEP_NODELIST is not set: set MASTER_ADDR to node 0's host")
    if _raw(env, "MASTER_PORT") is None:
        out["MASTER_PORT"] = str(slurm_port(job))
    if _raw(env, "KGEN_RUN_ID") is None:
        out["KGEN_RUN_ID"] = job
    if _raw(env, "KGEN_JOB_NAME") is None and _raw(env, "SLURM_JOB_NAME"):
        out["KGEN_JOB_NAME"] = re.sub(r"[^A-Za-z0-9_.-]", "-", _raw(env, "SLURM_JOB_NAME") or "")[:63]
    if _raw(env, "KGEN_RESTART_ATTEMPT") is None:
        out["KGEN_RESTART_ATTEMPT"] = str(restart)
    cfg.restart_base = restart
    cfg.slurm = {"job": job, "step": step, "nodes": nodes, "restart": restart, "nodelist": listed}
    port_from = " (from the job id)" if _raw(env, "MASTER_PORT") is None else ""
    cfg.notes.append(
        f"Slurm job {job} step {step}: {nodes} node(s) (SLURM_STEP_NUM_NODES), node rank from SLURM_NODEID, "
        f"MASTER_ADDR {addr} (first host of {listed or '?'}), MASTER_PORT {out.get('MASTER_PORT')}{port_from}, "
        f"restart {restart} (SLURM_RESTART_COUNT)"
    )
    return out


def slurm_decide(cfg: Config, fault: str) -> tuple[str, int, str]:
    """decide() inside a Slurm step: nothing re-forms in place (the step has no replacement node)."""
    if fault == "script" and cfg.on_script_error == "fail":
        return FAIL, EXIT_RUN_FAILED, "a training script failed (KGEN_ON_SCRIPT_ERROR=fail)"
    return FAIL, EXIT_PEER_LOST, "the Slurm step ends; the job is requeued and resumes from the checkpoint"
