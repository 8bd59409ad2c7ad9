"""Configuration: the node's environment read into one Config, with every problem found at once."""

from __future__ import annotations

import errno
import hmac
import math
import os
import re
import shlex
import socket
import stat

from .channel import EVERY_INTERFACE, is_ip
from .hang import HANG
from .header import DEFAULTS, ON_SCRIPT_ERROR, SECRET_MAX, SECRET_MIN
from .healthgate import HEALTH
from .slurmenv import slurm_environment

# --------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------


class Config:
    """Validated settings. Built by load_config(); `problems` lists what is wrong."""

    def __init__(self) -> None:
        self.problems: list[str] = []
        # None until load_config sets them (a Config with problems never runs): typed as a run sees them
        self.nnodes: int = None  # type: ignore[assignment]
        self.nproc: int = None  # type: ignore[assignment]
        self.master_port: int = None  # type: ignore[assignment]
        self.liveness_port: int = None  # type: ignore[assignment]
        self.master_addr = ""
        self.node_rank: int | None = None
        self.rank_source = ""
        self.rank_looked_at: list[str] = []
        self.job_name = self.kind = self.run_id = ""
        self.restart_attempt = ""  # JobSet: label jobset.sigs.k8s.io/restart-attempt (KGEN_RESTART_ATTEMPT)
        self.master_wait = self.hb_interval = self.hb_timeout = 0.0
        self.rdzv_timeout = self.max_restarts = self.max_reformations = 0
        self.replacement_timeout = 0.0
        self.on_script_error = "fail"
        self.secret: bytes | None = None  # the run's secret (KGEN_SECRET_FILE or KGEN_JOB_UID); None for NNODES=1
        self.secret_file = ""
        self.secret_source = ""  # where the secret comes from, for messages: "KGEN_SECRET_FILE=<path>", ...
        self.secret_from_uid = False  # derived from the Job's UID: the rendezvous id must not carry that UID
        self.secret_problem = ""  # also in `problems`; --diagnose reports it as its own check
        self.liveness_bind: list[str] = []  # KGEN_LIVENESS_BIND: the addresses node 0 listens on ([]: derived)
        self.notes: list[str] = []  # logged after the summary (e.g. a secret file others can read)
        self.slurm: dict | None = None  # inside a Slurm job step: what came from the allocation (slurm_environment)
        self.restart_base = 0  # KGEN_RESTART_COUNT of generation 0 (Slurm: SLURM_RESTART_COUNT, the requeues)
        self.hang_timeout = 0.0  # KGEN_HANG_TIMEOUT (values hang.timeout): 0 = no hang watchdog
        self.health_gate = "warn"  # KGEN_HEALTH_GATE (values health.gate): off | warn | fail

    @property
    def world_size(self) -> int:
        return self.nnodes * self.nproc

    @property
    def rdzv_id(self) -> str:
        run = self.run_id or "local"
        if self.secret_from_uid and self.run_id:  # the store's keys (readable by anyone who reaches
            run = hmac.new(b"kgen rendezvous id", run.encode(), "sha256").hexdigest()[:16]  # it) hold this
        base = f"{self.job_name or 'kgen'}-{run}"
        return f"{base}-attempt{self.restart_attempt}" if self.restart_attempt else base

    @property
    def is_master(self) -> bool:
        return self.node_rank == 0

    def summary(self) -> str:
        return (
            f"node {self.node_rank}/{self.nnodes} (rank from {self.rank_source}), "
            f"{self.nproc} process(es) per node, world size {self.world_size}; "
            f"master {self.master_addr}:{self.master_port}, liveness port {self.liveness_port}; "
            f"rendezvous static id={self.rdzv_id} timeout={self.rdzv_timeout}s; "
            f"master wait {self.master_wait:g}s; heartbeat every {self.hb_interval:g}s, "
            f"peer lost after {self.hb_timeout:g}s of silence; "
            + (
                f"re-formations up to {self.max_reformations}, replacement wait {self.replacement_timeout:g}s"
                if self.slurm is None
                else f"a lost node ends the step, requeues up to {self.max_reformations}"
            )
            + f", on script error: {self.on_script_error}, health gate: {self.health_gate}"
            + (f"; run secret from {self.secret_source}" if self.secret is not None else "")
        )


def _raw(env: dict, name: str) -> str | None:
    value = env.get(name)
    if value is None or value.strip() == "":
        return None
    return value.strip()


def _number(env, name, problems, kind, default=None, lo=None, hi=None, fix=""):
    raw = _raw(env, name)
    if raw is None:
        if default is None:
            problems.append(f"{name} is not set: {fix}")
        return default
    try:
        value = kind(raw)
        if kind is float and not math.isfinite(value):
            raise ValueError
    except ValueError:
        what = "an integer" if kind is int else "a number"
        problems.append(f"{name}={raw!r} is not {what}: {fix}")
        return None
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        bounds = f">= {lo}" if hi is None else f"between {lo} and {hi}"
        problems.append(f"{name}={raw!r} must be {bounds}: {fix}")
        return None
    return value


def derive_rank(env: dict, nnodes: int | None, cfg: Config) -> None:
    """Node rank: NODE_RANK, JOB_COMPLETION_INDEX, KGEN_POD_INDEX, then the hostname ordinal."""
    looked = cfg.rank_looked_at
    for name in ("NODE_RANK", "JOB_COMPLETION_INDEX", "KGEN_POD_INDEX"):
        raw = env.get(name)
        if raw is None or raw.strip() == "":
            looked.append(f"{name} ({'unset' if raw is None else 'empty'})")
            continue
        try:
            rank = int(raw.strip())
        except ValueError:
            cfg.problems.append(
                f"{name}={raw!r} is not an integer node rank: set it to a number in [0, NNODES) or unset it"
            )
            return
        cfg.rank_source = f"{name}={raw.strip()}"
        break
    else:
        host = env.get("HOSTNAME") or socket.gethostname()
        job = (env.get("KGEN_JOB_NAME") or "").strip()
        match = None
        if job and host.startswith(job + "-") and host[len(job) + 1 :].isdigit():
            match = host[len(job) + 1 :]
        else:
            found = re.search(r"-(\d+)$", host)
            match = found.group(1) if found else None
        if match is None:
            looked.append(f"HOSTNAME={host!r} (no -<n> ordinal suffix)")
            cfg.problems.append(
                "cannot derive the node rank: looked at " + ", ".join(looked) + "; set "
                "NODE_RANK=<0..NNODES-1> (bare metal) or run as an Indexed Job / StatefulSet pod"
            )
            return
        rank = int(match)
        cfg.rank_source = f"HOSTNAME={host}"
    if nnodes is not None and not 0 <= rank < nnodes:
        cfg.problems.append(
            f"node rank {rank} (from {cfg.rank_source}) is outside [0, NNODES={nnodes}): make "
            f"NNODES equal to the Job's completions / StatefulSet's replicas, or fix the rank"
        )
        return
    cfg.node_rank = rank


SECRET_HOWTO = (
    "create one with `umask 077; python3 -c 'import secrets; print(secrets.token_hex(32))' > ~/.kgen-secret` "
    "and give every node the same file (Kubernetes: kgen render mounts the run's Secret and sets it)"
)


UUID4 = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}\Z")


def secret_from_job_uid(uid: str, namespace: str, job: str) -> bytes:
    """The run's secret of a Kubernetes Job's pods: HMAC-SHA256 keyed with the Job's UID (random, made by
    the API server for every Job it creates), over kgen's label and the run's namespace/name; 64 hex."""
    return hmac.new(uid.encode(), f"kgen run secret v2\0{namespace}/{job}".encode(), "sha256").hexdigest().encode()


def read_secret(env: dict, cfg: Config) -> None:
    """The run's secret: from the file named by KGEN_SECRET_FILE (contract: text, surrounding whitespace
    stripped; only regular files are read, and at most SECRET_MAX bytes of them), or derived from the
    Job's UID in KGEN_JOB_UID (Kubernetes Job and JobSet pods, docs/entrypoint.md "Security")."""
    path = _raw(env, "KGEN_SECRET_FILE")
    uid = env.get("KGEN_JOB_UID")
    problem = ""
    if path is not None and uid is not None:
        problem = "KGEN_SECRET_FILE and KGEN_JOB_UID are both set: the run's secret comes from one of them; unset one"
    elif uid is not None:
        uid = uid.strip()
        cfg.secret_source = "the Job's UID (KGEN_JOB_UID)"
        if not uid:
            problem = (
                "KGEN_JOB_UID is empty: this pod has no batch.kubernetes.io/controller-uid label, which the Job "
                "controller (Kubernetes 1.27+) puts on every pod of a Job; run it as a Job or JobSet, or give "
                "the run a Secret of your own (values auth.secretName)"
            )
        elif not UUID4.match(uid):
            problem = (
                f"KGEN_JOB_UID={uid[:40]!r} is not a random (version 4) UUID as the API server makes for every Job: "
                f"the run's secret is derived from it; give the run a Secret of your own (values auth.secretName)"
            )
        else:
            cfg.secret = secret_from_job_uid(uid, (env.get("KGEN_NAMESPACE") or "").strip(), cfg.job_name)
            cfg.secret_from_uid = True
    elif path is None:
        problem = f"KGEN_SECRET_FILE is not set: a multi-node run needs the run's secret; {SECRET_HOWTO}"
    else:
        cfg.secret_file = path
        cfg.secret_source = f"KGEN_SECRET_FILE={path}"
        data = b""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except OSError as exc:
            problem = f"KGEN_SECRET_FILE={path!r}: cannot read it ({exc.strerror or exc}); {SECRET_HOWTO}"
            secret_name = (env.get("KGEN_AUTH_NAME") or "").strip()
            if exc.errno == errno.ENOENT and secret_name:  # Kubernetes: the (optional) Secret is not there
                ns = (env.get("KGEN_NAMESPACE") or "").strip()
                problem = (
                    f"the run's secret is missing: Secret {secret_name} (key `secret`, mounted at "
                    f"{os.path.dirname(path)}) does not exist{' in namespace ' + ns if ns else ''}; create it: "
                    f"{create_secret_line(secret_name, ns, cfg.job_name)} (kgen submit creates it for you); the "
                    f"pod starts over once it exists"
                )
        else:
            try:
                info = os.fstat(fd)
                if not stat.S_ISREG(info.st_mode):
                    problem = f"KGEN_SECRET_FILE={path!r} is not a regular file; {SECRET_HOWTO}"
                else:
                    while len(data) <= SECRET_MAX:
                        chunk = os.read(fd, SECRET_MAX + 1 - len(data))
                        if not chunk:
                            break
                        data += chunk
                    problem = secret_mode_problem(path, info.st_mode, env, cfg)
            except OSError as exc:
                problem = f"KGEN_SECRET_FILE={path!r}: cannot read it ({exc.strerror or exc}); {SECRET_HOWTO}"
            finally:
                os.close(fd)
        secret = data.strip()
        if problem:
            pass
        elif len(data) > SECRET_MAX:
            problem = f"KGEN_SECRET_FILE={path!r} is larger than {SECRET_MAX} bytes: not a secret file; {SECRET_HOWTO}"
        elif len(secret) < SECRET_MIN:
            problem = (
                f"KGEN_SECRET_FILE={path!r} holds {len(secret)} characters: a run secret needs at least "
                f"{SECRET_MIN}; {SECRET_HOWTO}"
            )
        else:
            cfg.secret = secret
    if problem:
        cfg.secret_problem = problem
        cfg.problems.append(problem)


def secret_mode_problem(path: str, mode: int, env: dict, cfg: Config) -> str:
    """A bare-metal secret file others can use is refused (any user of the host can read or change it:
    they could join, fail or stop the run), one a group can read is noted; both with the chmod to run.
    A pod's Secret volume is render's (read-only, this pod's containers only)."""
    if (env.get("KGEN_KIND") or "").strip() or not mode & 0o066:
        return ""
    fix = f"run: chmod 600 {shlex.quote(path)}"
    what = f"KGEN_SECRET_FILE={path} (mode {stat.S_IMODE(mode):04o})"
    if mode & 0o026:
        who = "any user of this host" if mode & 0o006 else "its group"
        return f"{what} can be read or changed by {who}, who could then join, fail or stop the run: {fix}"
    cfg.notes.append(f"{what} can be read by its group, whose users could join, fail or stop the run: {fix}")
    return ""


def create_secret_line(name: str, namespace: str, run: str) -> str:
    """The command that creates a run's Secret on Kubernetes, labelled as the run's (kgen render prints the same)."""
    ns = f" -n {shlex.quote(namespace)}" if namespace else ""
    labels = " ".join(
        shlex.quote(f"{k}={v}")
        for k, v in (("app.kubernetes.io/instance", run), ("app.kubernetes.io/managed-by", "kgen"))
    )
    return (
        f'kubectl create secret generic {name}{ns} --from-literal=secret="$(python3 -c '
        f"'import secrets; print(secrets.token_hex(32))')\" && kubectl label secret {name}{ns} {labels}"
    )


def load_config(env: dict, with_rank: bool = True) -> Config:
    """Every setting, validated; `problems` lists what is wrong. Without `with_rank` (--stop), the
    node rank is not derived: the process asking for a stop is not a node."""
    cfg = Config()
    env = slurm_environment(env, cfg)  # a Slurm job step: NNODES, NODE_RANK, MASTER_* from the allocation
    p = cfg.problems
    cfg.nnodes = _number(env, "NNODES", p, int, lo=1, fix="set NNODES to the number of nodes (pods), e.g. NNODES=4")
    cfg.nproc = _number(
        env,
        "NPROC_PER_NODE",
        p,
        int,
        lo=1,
        fix="set NPROC_PER_NODE to the processes per node (GPUs per node; CPU jobs: e.g. 1)",
    )
    addr = _raw(env, "MASTER_ADDR")
    if addr is None:
        p.append("MASTER_ADDR is not set: set it to node 0's address, e.g. <name>-0.<service> or an IP")
    elif "://" in addr or any(c.isspace() for c in addr) or (addr.count(":") == 1):
        p.append(
            f"MASTER_ADDR={addr!r} is not a bare host name or IP: give the host only "
            f"(the port goes in MASTER_PORT), e.g. MASTER_ADDR=job-0.job"
        )
    else:
        cfg.master_addr = addr
    cfg.master_port = _number(
        env,
        "MASTER_PORT",
        p,
        int,
        lo=1,
        hi=65535,
        fix="set MASTER_PORT to node 0's rendezvous port, e.g. 29500",
    )
    default_live = cfg.master_port + 1 if cfg.master_port and cfg.master_port < 65535 else None
    if default_live is None and _raw(env, "KGEN_LIVENESS_PORT") is None and cfg.master_port is None:
        default_live = 0  # MASTER_PORT is already reported; do not repeat it as a liveness problem
    cfg.liveness_port = _number(
        env,
        "KGEN_LIVENESS_PORT",
        p,
        int,
        default=default_live,
        lo=1,
        hi=65535,
        fix="set KGEN_LIVENESS_PORT to a free TCP port on node 0 (default MASTER_PORT+1)",
    )
    if cfg.liveness_port is not None and cfg.liveness_port == cfg.master_port:
        p.append(
            f"KGEN_LIVENESS_PORT={cfg.liveness_port} equals MASTER_PORT: the liveness channel "
            f"needs its own port, e.g. MASTER_PORT+1"
        )
    bind = _raw(env, "KGEN_LIVENESS_BIND")
    if bind is not None:
        items = [b.strip() for b in bind.split(",") if b.strip()]
        if items == ["*"]:
            cfg.liveness_bind = EVERY_INTERFACE
        elif items and all(is_ip(b) for b in items):
            cfg.liveness_bind = items
        else:
            p.append(
                f"KGEN_LIVENESS_BIND={bind!r} is not '*' or IP addresses: set it to the address(es) of node 0 that "
                f"the other nodes reach it at (comma-separated), or * for every interface"
            )
    cfg.job_name = (env.get("KGEN_JOB_NAME") or "").strip()
    cfg.run_id = (env.get("KGEN_RUN_ID") or "").strip()
    cfg.restart_attempt = (env.get("KGEN_RESTART_ATTEMPT") or "").strip()
    kind = (env.get("KGEN_KIND") or "").strip()
    if kind not in ("", "job", "statefulset", "jobset"):
        p.append(f"KGEN_KIND={kind!r} is not 'job', 'statefulset' or 'jobset': re-render with kgen render")
    cfg.kind = kind
    d = DEFAULTS
    cfg.master_wait = _number(
        env,
        "KGEN_MASTER_WAIT_TIMEOUT",
        p,
        float,
        default=d["KGEN_MASTER_WAIT_TIMEOUT"],
        lo=1,
        fix="seconds a node waits for node 0 (values timeouts.masterWait), e.g. 600",
    )
    cfg.rdzv_timeout = _number(
        env,
        "KGEN_RDZV_TIMEOUT",
        p,
        int,
        default=d["KGEN_RDZV_TIMEOUT"],
        lo=1,
        fix="whole seconds node 0 waits for all nodes (values timeouts.rendezvous), e.g. 300",
    )
    cfg.hb_interval = _number(
        env,
        "KGEN_HEARTBEAT_INTERVAL",
        p,
        float,
        default=d["KGEN_HEARTBEAT_INTERVAL"],
        lo=0.05,
        hi=60,
        fix="seconds between heartbeats (values timeouts.heartbeatInterval), e.g. 1",
    )
    cfg.hb_timeout = _number(
        env,
        "KGEN_HEARTBEAT_TIMEOUT",
        p,
        float,
        default=d["KGEN_HEARTBEAT_TIMEOUT"],
        lo=0.2,
        hi=3600,
        fix="seconds of silence after which a peer is lost (values timeouts.heartbeat), e.g. 5",
    )
    if cfg.hb_interval and cfg.hb_timeout and cfg.hb_timeout < 2 * cfg.hb_interval:
        p.append(
            f"KGEN_HEARTBEAT_TIMEOUT={cfg.hb_timeout:g} is less than twice "
            f"KGEN_HEARTBEAT_INTERVAL={cfg.hb_interval:g}: one late heartbeat would stop the job; "
            f"use at least 3 x the interval (defaults 5 and 1)"
        )
    cfg.max_restarts = _number(
        env,
        "KGEN_MAX_RESTARTS",
        p,
        int,
        default=d["KGEN_MAX_RESTARTS"],
        lo=0,
        fix="torchrun restarts (values maxRestarts); kgen supports 0",
    )
    if cfg.max_restarts:
        p.append(
            f"KGEN_MAX_RESTARTS={cfg.max_restarts}: in-place torchrun restarts are not supported "
            f"(with static rendezvous, torch 2.13's restarted workers read stale peer addresses and "
            f"hang); set maxRestarts: 0 and let the Job's backoffLimit restart the whole group"
        )
    cfg.max_reformations = _number(
        env,
        "KGEN_MAX_REFORMATIONS",
        p,
        int,
        default=d["KGEN_MAX_REFORMATIONS"],
        lo=0,
        fix="how often the group may re-form after a lost node (values reform.maxReformations; 0 = off), e.g. 10",
    )
    cfg.replacement_timeout = _number(
        env,
        "KGEN_REPLACEMENT_TIMEOUT",
        p,
        float,
        default=d["KGEN_REPLACEMENT_TIMEOUT"],
        lo=1,
        fix="seconds to wait for a lost node's replacement (values reform.replacementTimeout), e.g. 300",
    )
    ose = (env.get("KGEN_ON_SCRIPT_ERROR") or d["KGEN_ON_SCRIPT_ERROR"]).strip()  # type: ignore[union-attr]
    if ose not in ON_SCRIPT_ERROR:
        p.append(
            f"KGEN_ON_SCRIPT_ERROR={ose!r} is not 'fail' or 'reform': set values reform.onScriptError to "
            f"fail (default: a training script's own error fails the run) or reform"
        )
    cfg.on_script_error = ose
    cfg.hang_timeout = HANG.configure(env, p)  # hang watchdog (section below)
    cfg.health_gate = HEALTH.configure(env, p)  # health gate (section below)
    if cfg.nnodes is not None and cfg.nnodes > 1:  # one node has no liveness channel and needs no secret
        read_secret(env, cfg)
    if with_rank:
        derive_rank(env, cfg.nnodes, cfg)
        if cfg.slurm is not None and cfg.node_rank is not None:
            cfg.rank_source = f"SLURM_NODEID={cfg.node_rank}"
    return cfg
