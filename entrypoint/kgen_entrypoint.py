#!/usr/bin/env python3
"""kgen in-pod entrypoint: node rank, readiness, torchrun, diagnostics and fail-stop.

Usage (what `kgen render` puts in the pod; also works by hand on bare metal):

    python3 kgen_entrypoint.py -- train.py --lr 3e-4     # a script, passed to torchrun as is
    python3 kgen_entrypoint.py -- -m pkg.module args     # a module (torchrun -m)
    python3 kgen_entrypoint.py -- ./run.sh args          # anything else: torchrun --no-python
    python3 kgen_entrypoint.py --smoke-test              # all-reduce check instead of training
    python3 kgen_entrypoint.py --diagnose                # one PASS/FAIL line per check
    python3 kgen_entrypoint.py --stop                    # stop the whole group (run's environment, any host)
    python3 kgen_entrypoint.py --run-dir DIR --state     # bare metal: a node's run state (kgen launch)
    srun ... python3 kgen_entrypoint.py --slurm-node RUN -- train.py   # Slurm: one task per node (slurm.md)

Environment (docs/design.md is the contract): NNODES, NPROC_PER_NODE, MASTER_ADDR, MASTER_PORT,
node rank from NODE_RANK > JOB_COMPLETION_INDEX > KGEN_POD_INDEX > HOSTNAME ordinal (inside a Slurm
job step: NNODES, the node rank, MASTER_ADDR and MASTER_PORT come from the allocation), optional
KGEN_LIVENESS_PORT (default MASTER_PORT+1), KGEN_LIVENESS_BIND (where node 0 listens: IPs or *),
KGEN_JOB_NAME, KGEN_KIND, KGEN_RUN_ID, KGEN_RESTART_ATTEMPT, KGEN_MASTER_WAIT_TIMEOUT,
KGEN_RDZV_TIMEOUT, KGEN_HEARTBEAT_INTERVAL, KGEN_HEARTBEAT_TIMEOUT, KGEN_MAX_RESTARTS,
KGEN_MAX_REFORMATIONS, KGEN_REPLACEMENT_TIMEOUT, KGEN_ON_SCRIPT_ERROR, KGEN_HANG_TIMEOUT, KGEN_HEALTH_GATE
(KGEN_HEALTH_TIMEOUT), and for NNODES > 1
the run's secret, the same on every node (the liveness channel authenticates every connection with it):
KGEN_SECRET_FILE (a file holding it), or KGEN_JOB_UID (Kubernetes Job and JobSet pods: the UID of the
pod's Job, from its batch.kubernetes.io/controller-uid label; the secret is derived from it with
KGEN_NAMESPACE and KGEN_JOB_NAME). Set for the training processes: KGEN_RESTART_COUNT (the
generation, 0 first), KGEN_RDZV_ID, KGEN_PROGRESS_FILE (kgen_progress(step): the hang watchdog).

Exit codes: 0 success; 2 bad environment, usage or no torch; 3 node 0 not reachable (within
KGEN_MASTER_WAIT_TIMEOUT, or KGEN_REPLACEMENT_TIMEOUT after a loss); 4 the group could not form
(nodes missing after KGEN_RDZV_TIMEOUT, or a lost node's replacement after KGEN_REPLACEMENT_TIMEOUT);
5 the run failed as a whole (re-formation limit, another node's script error or internal error); 6
stopped by user (Ctrl-C / SIGINT on any node, or --stop): every node of the group exits 6; 70 kgen's
own entrypoint failed on this node (an internal error, a bug in kgen, not in the training script: the
traceback is in the log; report it); 75 a peer was lost and re-formation is off
(KGEN_MAX_REFORMATIONS=0); 76 this node was dropped from the group (it froze or was cut off): replace
it; 77 a hang (KGEN_HANG_TIMEOUT: no rank made progress; node 0's log has the report); 78 the health
gate failed before training (KGEN_HEALTH_GATE=fail; node 0's log names the node); otherwise
torchrun's exit code; 128+N after signal N. The last log line says why:
"kgen-entrypoint: stopped: <reason>".

Standard library only in the supervising parent; torch is imported by the smoke-test worker and
by the GPU check of --diagnose. How it works and what was measured: docs/entrypoint.md.
"""

from __future__ import annotations

# ==== entrypoint/assemble.py: the standard library imports of every part ====
import contextlib
import errno
import hmac
import json
import math
import os
import random
import re
import secrets
import selectors
import shlex
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time

# ==== entrypoint/parts/header.py:53 ====
EXIT_OK = 0
EXIT_CONFIG = 2
EXIT_MASTER_UNREACHABLE = 3
EXIT_PEERS_MISSING = 4  # distinct from 75: a pod that never starts is not a disruption to retry
EXIT_RUN_FAILED = 5  # the run failed as a whole: re-formation limit, or another node's script error
EXIT_STOPPED = 6  # stopped by user: Ctrl-C (SIGINT) on any node or --stop; the whole group exits 6
EXIT_INTERNAL = 70  # kgen's own code failed on this node (sysexits EX_SOFTWARE): a bug to report, not the script's
EXIT_PEER_LOST = 75  # re-formation off (KGEN_MAX_REFORMATIONS=0): a peer was lost, the group is replaced
EXIT_DROPPED = 76  # this node froze or was cut off and the group moved on without it: replace this pod
EXIT_HANG = 77  # no rank made progress for KGEN_HANG_TIMEOUT: the hang report is in node 0's log; every node exits 77

# Fixed tuning (documented in docs/entrypoint.md).
ABORT_GRACE = 3.0  # fail-stop: SIGTERM to the local tree, then SIGKILL after this many seconds
SIGNAL_GRACE = 20.0  # SIGTERM/SIGINT received: torchrun gets this long before SIGKILL (k8s: 30 s)
PROGRESS_EVERY = 10.0  # a progress line while waiting for node 0
BACKOFF_FIRST, BACKOFF_MAX = 0.05, 1.0  # master wait: exponential backoff with jitter
# Waiting for node 0 that is not there yet (its pod starting): the whole group's attempts per second, at most
REFUSED_RATE = 2000.0  # its address resolves, its port refuses: connections to that address (no name lookup)
LOOKUP_RATE = 200.0  # its name does not resolve: name lookups (never slower than the backoff, BACKOFF_MAX)
HANDSHAKE_TIMEOUT = 5.0  # node 0 must answer a hello within this; a member must say hello within this
FAIL_VERDICT_WAIT = 2.0  # a torchrun failed: node 0 waits this long for a lost node to explain it
STOP_GRACE = 10.0  # stopped by user: SIGTERM to the local tree, SIGKILL after this (a script may checkpoint)
STOP_LINGER = 5.0  # stopped by user: node 0 keeps telling nodes that rejoin (between generations) this long
STOP_BUDGET = 5.0  # --stop (and Ctrl-C on a node not connected): how long to try reaching node 0
DENIED_BOUND = 60.0  # denials alone for this long (or until the wait's own bound) mean a wrong secret
LISTEN_BUSY_BOUND = 15.0  # node 0's liveness port in use: retried this long (a predecessor still ending)
RECORD_BOUND = 30.0  # a node's exit record that the disk refuses (full, failing) is tried again this long
PROTOCOL = 3  # liveness channel wire format (docs/entrypoint.md, "Wire format"); 3: authenticated

# Membership proof (docs/entrypoint.md, "Security"): limits that keep strangers cheap.
SECRET_MIN, SECRET_MAX = 32, 4096  # characters in KGEN_SECRET_FILE (after stripping whitespace), bytes read
AUTH_TIMEOUT = 3.0  # a connection must prove membership within this many seconds of its accept
MAX_UNPROVEN = 128  # connections waiting to prove membership at once; beyond, the oldest is dropped
PREAUTH_LINE_MAX = 1024  # bytes of a line before membership is proven
LINE_MAX = 65536  # bytes of a line on an authenticated connection
MAX_DEPTH = 8  # nesting of a line's JSON, checked before it is parsed (protocol 3 needs 2)
TEXT_MAX = 4096  # characters of a text field (a reason, a host name)
STRANGER_LOG_BURST, STRANGER_LOG_WINDOW = 10, 10.0  # refused connections logged one by one, then counted

DEFAULTS = {
    "KGEN_MASTER_WAIT_TIMEOUT": 600.0,
    "KGEN_RDZV_TIMEOUT": 300,
    "KGEN_HEARTBEAT_INTERVAL": 1.0,
    "KGEN_HEARTBEAT_TIMEOUT": 5.0,
    "KGEN_MAX_RESTARTS": 0,
    "KGEN_MAX_REFORMATIONS": 10,
    "KGEN_REPLACEMENT_TIMEOUT": 300.0,
    "KGEN_ON_SCRIPT_ERROR": "fail",
}
ON_SCRIPT_ERROR = ("fail", "reform")

_TAG = "kgen"
_T0 = time.monotonic()


_OUT = threading.Lock()  # one writer at a time: every line this process writes is whole (the pump's too)


DROPPED = [0]  # lines this process could not write (its stdout/stderr on a full or failing disk, a closed pipe)


def script_path() -> str:
    """This script's path. The pod copy runs as a zip (kgen render's ConfigMap): its code is the archive's
    __main__.py, so __file__ is <script>/__main__.py; the script to run again is the archive."""
    here = os.path.abspath(__file__)
    up = os.path.dirname(here)
    return up if os.path.basename(here) == "__main__.py" and os.path.isfile(up) else here


def emit(stream, text: str) -> None:
    """Write whole lines; never raises (a log write never ends the run): what fails is counted in DROPPED."""
    with _OUT:
        try:
            stream.write(text)
            stream.flush()
        except (OSError, ValueError):
            DROPPED[0] += max(1, text.count("\n"))


def printable(text: str, backslash: bool = False) -> str:
    """`text` with every character that is not printable (controls, line and paragraph separators,
    format characters, lone surrogates) written as repr writes it (\\x1b, \\n, \\u202e), and with
    `backslash` backslashes too: nothing written to a log or a terminal can move the cursor or forge a line."""
    if text.isprintable() and not (backslash and "\\" in text):
        return text
    return "".join(c if c.isprintable() and (c != "\\" or not backslash) else repr(c)[1:-1] for c in text)


def shown(value, limit: int = 200) -> str:
    """A value a peer sent, as a log line may show it: escaped (repr-style) and at most `limit` characters."""
    if not isinstance(value, str):
        scalar = value is None or isinstance(value, (bool, float)) or (isinstance(value, int) and abs(value) < 1 << 64)
        value = repr(value) if scalar else f"<{type(value).__name__}>"
    text = printable(value, backslash=True)
    return text if len(text) <= limit else text[:limit] + "..."


def _utc_stamp(t: float | None = None) -> str:
    t = time.time() if t is None else t
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1e6):06d}Z"


def log(msg: str) -> None:
    stamp = time.strftime("%H:%M:%S", time.gmtime())
    emit(sys.stderr, f"[{_TAG} {stamp} +{time.monotonic() - _T0:.1f}s] {printable(msg)}\n")


class Stop(Exception):
    """How this node's run ends: the exit code and the one-line reason logged last."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code, self.reason = code, reason


def internal_error(exc: BaseException, doing: str = "") -> str:
    """An exception escaped kgen's own code: its traceback into the log, one line saying so (`doing`: it
    was contained there, and the run goes on), and the reason: `kgen entrypoint internal error on node N:
    RecursionError: ... (report it)`, never "the training script failed"."""
    import traceback

    try:
        for line in "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).splitlines():
            sys.stderr.write(printable(line) + "\n")
    except Exception:  # noqa: BLE001 - the traceback is a courtesy; the reason below is what counts
        pass
    reason = internal_reason(_TAG[5:] if _TAG.startswith("kgen node") else "this host", exc)
    log(f"{reason} while {doing}: contained there, the run goes on" if doing else reason)
    return reason


def internal_reason(where: str, exc: BaseException | str) -> str:
    what = exc if isinstance(exc, str) else f"{type(exc).__name__}: {shown(str(exc), 300)}"
    return f"kgen entrypoint internal error on {where}: {what} (report it)"


def fatal(code: int, lines: list[str] | str) -> None:
    lines = [lines] if isinstance(lines, str) else lines
    emit(sys.stderr, "".join(f"kgen-entrypoint: error: {printable(line)}\n" for line in lines))
    raise Stop(code, "configuration error" if code == EXIT_CONFIG else lines[0])


# ==== entrypoint/parts/config.py:1 ====
"""Configuration: the node's environment read into one Config, with every problem found at once."""


# ==== entrypoint/parts/config.py:20 ====
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


# ==== entrypoint/parts/proctree.py:1 ====
"""The local process tree: this node's children, signals, and ending them all."""


# ==== entrypoint/parts/proctree.py:18 ====
# --------------------------------------------------------------------------------------------
# Local process tree
# --------------------------------------------------------------------------------------------


def set_child_subreaper() -> bool:
    """Orphans (workers whose torchrun died) are re-parented to us, so we can still kill them."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


SUPERVISOR_PID = "KGEN_SUPERVISOR_PID"  # set by a bare-metal/Slurm supervisor for the entrypoint it runs
_PRCTL: list = []  # libc's prctl, looked up once in the parent (a forked child only calls it)


def _prctl():
    if not _PRCTL:
        try:
            import ctypes

            _PRCTL.append(ctypes.CDLL(None, use_errno=True).prctl)
        except (OSError, AttributeError):
            _PRCTL.append(None)
    return _PRCTL[0]


def die_with_parent(sig: int, parent: int | None = None) -> bool:
    """PR_SET_PDEATHSIG: this process gets `sig` when its parent dies (the supervisor and its node live and
    die together: a killed supervisor leaves no entrypoint, torchrun or worker behind). When `parent` is no
    longer our parent (it died before the call), `sig` is sent at once."""
    prctl = _prctl()
    ok = prctl is not None and prctl(1, int(sig), 0, 0, 0) == 0  # PR_SET_PDEATHSIG
    if parent is not None and os.getppid() != parent:
        os.kill(os.getpid(), sig)
    return ok


def _torchrun_dies_with_us() -> None:  # pragma: no cover - runs in the forked child before exec
    prctl = _PRCTL[0] if _PRCTL else None
    if prctl is not None:
        prctl(1, int(signal.SIGTERM), 0, 0, 0)  # torchrun SIGTERMs its workers and ends


_PROC_OURS: bool | None = None


def proc_is_ours() -> bool:
    """Is /proc this PID namespace's? (A sandbox without its own /proc mount shows the host's
    processes; PIDs read there must never be signalled.)"""
    global _PROC_OURS
    if _PROC_OURS is None:
        try:
            _PROC_OURS = os.readlink("/proc/self") == str(os.getpid())
        except OSError:
            _PROC_OURS = False
        if not _PROC_OURS:
            log("/proc is not this PID namespace's: stopping torch by process group only")
    return _PROC_OURS


def descendants(root: int | None = None) -> list[int]:
    """Live (non-zombie) processes below `root` (default: us), from /proc; [] when /proc is not ours."""
    if not proc_is_ours():
        return []
    root = os.getpid() if root is None else root
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                stat = fh.read().decode("ascii", "replace")
            fields = stat.rsplit(")", 1)[1].split()
            state, ppid = fields[0], int(fields[1])
        except (OSError, IndexError, ValueError):
            continue
        if state in ("Z", "X"):
            continue  # exited; its parent (or we, as subreaper) reaps it
        children.setdefault(ppid, []).append(int(name))
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def signal_tree(sig: int, extra_pgid: int | None = None) -> int:
    pids = descendants()
    grouped: set[int] = set()
    if extra_pgid:
        try:
            os.killpg(extra_pgid, sig)
            grouped = {p for p in pids if _pgid(p) == extra_pgid}  # signalled once, not twice
        except OSError:
            pass
    for pid in pids:
        if pid in grouped:
            continue
        try:
            os.kill(pid, sig)
        except OSError:
            pass
    return len(pids)


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


class Running:
    """What this node runs now: its torchrun and its link to the group (a Hub or a Spoke). Read only when
    kgen's own code failed (internal_stop): the group is told and no torch process is left behind."""

    child: Child | None = None
    link: Hub | Spoke | None = None


class Child:
    """torchrun, started in its own session; reaped by us (we may be a subreaper or PID 1). With `base_rank`
    its output and its workers' (torchrun --redirects 3 into `log_dir`) go through a Pump: whole lines only,
    a worker's after "[rank R] " (docs/entrypoint.md#logs)."""

    def __init__(
        self,
        argv: list[str],
        env: dict | None = None,
        log_dir: str = "",
        base_rank: int = 0,
        proc: subprocess.Popen | None = None,
    ) -> None:
        """`proc`: torchrun already running (the standby agent, entrypoint/parts/standby.py), else started here."""
        pipe = subprocess.PIPE if log_dir else None
        _prctl()  # looked up here: the child only calls it
        self.proc = proc or subprocess.Popen(
            argv, start_new_session=True, env=env, stdout=pipe, stderr=pipe, preexec_fn=_torchrun_dies_with_us
        )
        self.pid = self.proc.pid
        self.rc: int | None = None
        self.pump = Pump(self.proc, log_dir, base_rank) if log_dir else None
        self._failure: dict | None = None
        self.termed = False  # the tree already got SIGTERM (the group stop): kill_tree waits, then SIGKILLs
        Running.child = self

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.pid:
                code = os.waitstatus_to_exitcode(status)
                self.rc = 128 - code if code < 0 else code
                self.proc.returncode = self.rc

    def failure(self) -> dict | None:
        """torchrun exited non-zero by itself: which worker of this node failed first and why (once)."""
        if self._failure is None and self.rc and self.pump is not None:
            self.pump.drained.wait(FAILURE_WAIT)  # short: node 0's event loop (heartbeats) waits meanwhile
            self._failure = self.pump.failure() or {}
            if self._failure:
                log(f"worker failure: {failure_text(self._failure)}")
                emit(sys.stderr, f"{FAILURE_MARK}{json.dumps(self._failure, sort_keys=True)}\n")
        return self._failure or None

    def kill_tree(self, grace: float, first: int = signal.SIGTERM, sigs: Signals | None = None) -> None:
        """Signal everything below us, wait up to `grace` seconds (cut short by a signal in `sigs`:
        a second Ctrl-C), then SIGKILL what is left."""
        try:
            self._kill_tree(grace, first, sigs)
        finally:
            if self.pump is not None:
                self.pump.finish()

    def _kill_tree(self, grace: float, first: int, sigs: Signals | None) -> None:
        if first == signal.SIGTERM and self.termed:
            sent = len(descendants())
        else:
            sent = signal_tree(first, self.pid if self.rc is None else None)
        if sent == 0 and (proc_is_ours() or self.rc is not None):
            return
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            self.reap()
            if not descendants() and (proc_is_ours() or self.rc is not None):
                return
            if sigs is not None and sigs.pending:
                log(f"received {signal.Signals(sigs.pending.pop(0)).name} again: killing the local process tree now")
                break
            time.sleep(0.05)
        left = signal_tree(signal.SIGKILL, self.pid if self.rc is None else None)
        if left:
            log(f"{left} process(es) did not stop within {grace:g}s of SIGTERM: SIGKILLed")
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and descendants():
            self.reap()
            time.sleep(0.05)
        self.reap()


# ==== entrypoint/parts/pump.py:1 ====
"""Worker output and failures: the Pump writes torchrun's and the workers' lines, and reads failures."""


# ==== entrypoint/parts/pump.py:18 ====
# --------------------------------------------------------------------------------------------
# Worker output and failures (docs/entrypoint.md#logs). torchrun writes each worker's stdout and
# stderr to files (--redirects 3 --log-dir); the Pump writes their lines and torchrun's own (pipes)
# to our stdout/stderr, one whole line at a time, a worker's after "[rank R] " (its global rank). A
# line without its newline yet is held (PARTIAL_HOLD s at most). From each worker's stderr it keeps
# the last traceback; with torch elastic's error file (a script under @record) and torchrun's own
# summary (exit codes, signals) that makes the failure record: one JSON line after FAILURE_MARK.
# kgen/runs/errors.py reads the same things on the other side (one test table for both).
# --------------------------------------------------------------------------------------------

FAILURE_MARK = "kgen-entrypoint: worker failure: "
FAILURE_WAIT = 1.0  # torchrun ended: its output is read to the end within this (normally ~0.2 s)
PARTIAL_HOLD = 1.0
LINE_CAP = 65536
_RANK_TAG = re.compile(r"^\[rank\d+\]:\s?")  # torch's own excepthook prefix
_FRAME = re.compile(r'^\s+File "(.*)", line (\d+)')
_EXC = re.compile(r"^([A-Za-z_][\w.]*)(?::\s?(.*))?$")
_INTERPRETER = re.compile(r"^/\S*python[\d.]*: ")  # python3: No module named x (from `python -m x`)
_PEER = re.compile(
    r"closed by peer|reset by peer|remote worker|broken pipe|timed out|timeout|DistNetworkError|DistStoreError|"
    r"communicator was aborted|connection refused|NCCL error",
    re.I,
)
_SUMMARY_RANK = re.compile(r"^\s*rank\s*: (\d+) \(local_rank: (\d+)\)")
_SUMMARY_EXIT = re.compile(r"^\s*exitcode\s*: (-?\d+)")


class ErrorScan:
    """One process's stderr, line by line: its last traceback (type, message, innermost file:line) and last line."""

    def __init__(self) -> None:
        self.tb = False
        self.frame = ""
        self.error: tuple[str, str, str, float] | None = None  # type, message, where, when
        self.last = ""

    def feed(self, line: str) -> None:
        line = _RANK_TAG.sub("", line.rstrip())
        if not line.strip():
            return
        if line.startswith(("During handling of", "The above exception")):  # a chained exception follows
            return
        if line.startswith("Traceback (most recent call last):"):
            self.tb, self.frame = True, ""
            return
        frame = _FRAME.match(line)
        if frame and (self.tb or line.startswith("  File ")):  # a SyntaxError has no "Traceback" line
            self.tb, self.frame = True, f"{frame.group(1)}:{frame.group(2)}"
            return
        if self.tb:
            if line[:1] in " \t":
                return
            self.tb = False
            exc = _EXC.match(line)
            if exc:
                self.error = (exc.group(1), (exc.group(2) or "").strip(), self.frame, time.time())
                return
        self.last = _INTERPRETER.sub("", line)


def _error_file(path: str) -> tuple[str, str, str, float] | None:
    """torch elastic's error file (ErrorHandler.record_exception): "Type: message" and the traceback."""
    try:
        with open(path) as fh:
            data = json.load(fh)
        when = os.stat(path).st_mtime
    except (OSError, ValueError):
        return None
    msg = data.get("message") if isinstance(data, dict) else None
    if isinstance(msg, dict):
        text, stack = str(msg.get("message") or ""), str((msg.get("extraInfo") or {}).get("py_callstack") or "")
    else:
        text, stack = str(msg or ""), ""
    kind, _, message = text.partition(": ")
    frames = [m for m in (_FRAME.match(ln) for ln in stack.splitlines()) if m]
    where = f"{frames[-1].group(1)}:{frames[-1].group(2)}" if frames else ""
    return kind, message, where, when


def failure_text(rec: dict) -> str:
    what = ": ".join(x for x in (rec.get("error"), rec.get("message")) if x) or f"exit {rec.get('exit')}"
    return f"rank {rec.get('rank')} (local rank {rec.get('local_rank')}): {what}" + (
        f" ({rec['where']})" if rec.get("where") else ""
    )


class Pump(threading.Thread):
    """Writes torchrun's output (its pipes) and its workers' (the files under `log_dir`) to our stdout and
    stderr, whole lines only; keeps what the failure record needs."""

    def __init__(self, proc: subprocess.Popen, log_dir: str, base_rank: int) -> None:
        super().__init__(name="kgen-pump", daemon=True)
        self.log_dir, self.base_rank = log_dir, base_rank
        self.streams: dict[int, list] = {}  # fd -> [target stream, prefix, held bytes, held since, scan]
        for pipe, target in ((proc.stdout, sys.stdout), (proc.stderr, sys.stderr)):
            if pipe is not None:
                fd = pipe.fileno()
                os.set_blocking(fd, False)
                self.streams[fd] = [target, "", b"", 0.0, None, True]
        self.agent = ErrorScan()
        self.files: dict[str, int] = {}
        self.scans: dict[int, ErrorScan] = {}
        self.exits: dict[int, int] = {}  # local rank -> worker exit code, from torchrun's summary
        self._summary_rank: int | None = None
        self.stopping = threading.Event()
        self.drained = threading.Event()  # torchrun's pipes ended and every file was read after that
        self.start()

    def _write(self, fd: int, data: bytes, final: bool = False) -> None:
        st = self.streams[fd]
        *lines, rest = (st[2] + data).split(b"\n")
        now = time.monotonic()
        if rest and (lines or not st[2]):
            st[3] = now  # a line without its newline yet: held from now on
        if rest and (final or len(rest) > LINE_CAP or now - st[3] >= PARTIAL_HOLD):
            lines.append(rest)
            rest = b""
        st[2] = rest
        out = []
        for raw in lines:
            text = raw.decode("utf-8", "replace").rstrip("\r")
            if "\r" in text:  # a progress bar: what a terminal would show
                text = next((seg for seg in reversed(text.split("\r")) if seg), "")
            if st[1]:
                text = _RANK_TAG.sub("", text)  # torch's own "[rankN]: " (its excepthook): "[rank N] " says it
                out.append((st[1] + text).rstrip(" ") + "\n")
            else:
                out.append(text + "\n")
            if st[1]:
                HANG.saw(st[1])  # a rank's line: progress (hang watchdog)
            if st[4] is not None:
                st[4].feed(text)
            elif st[0] is sys.stderr:
                self._summary(text)
        if out:
            emit(st[0], "".join(out))

    def _summary(self, line: str) -> None:
        m = _SUMMARY_RANK.match(line)
        if m:
            self._summary_rank = int(m.group(2))
            return
        m = _SUMMARY_EXIT.match(line)
        if m and self._summary_rank is not None:
            self.exits[self._summary_rank] = int(m.group(1))
            self._summary_rank = None

    def _discover(self) -> None:
        for root, _, names in os.walk(self.log_dir):
            for name in names:
                path = os.path.join(root, name)
                if name not in ("stdout.log", "stderr.log") or path in self.files:
                    continue
                try:
                    local = int(os.path.basename(root))
                    fd = os.open(path, os.O_RDONLY)
                except (ValueError, OSError):
                    continue
                self.files[path] = fd
                err = name == "stderr.log"
                scan = self.scans.setdefault(local, ErrorScan()) if err else None
                self.streams[fd] = [
                    sys.stderr if err else sys.stdout,
                    f"[rank {self.base_rank + local}] ",
                    b"",
                    0.0,
                    scan,
                    False,
                ]

    def _read_files(self, final: bool = False) -> None:
        for fd in list(self.files.values()):
            for _ in range(64):  # at most 4 MiB per file and pass: the pipes get their turn
                try:
                    data = os.read(fd, 65536)
                except OSError:
                    data = b""
                if data:
                    self._write(fd, data)
                if len(data) < 65536:
                    break
            if final or self.streams[fd][2]:
                self._write(fd, b"", final)

    def run(self) -> None:
        sel = selectors.DefaultSelector()
        for fd in [fd for fd, st in self.streams.items() if st[5]]:
            sel.register(fd, selectors.EVENT_READ)
        open_pipes = len(sel.get_map())
        next_scan = 0.0
        try:
            while True:
                for key, _ in sel.select(0.1) if open_pipes else []:
                    try:
                        data = os.read(key.fd, 65536)
                    except BlockingIOError:
                        continue
                    except OSError:
                        data = b""
                    if data:
                        self._write(key.fd, data)
                    else:
                        self._write(key.fd, b"", final=True)
                        sel.unregister(key.fd)
                        open_pipes -= 1
                if not open_pipes:
                    time.sleep(0.1)
                if time.monotonic() >= next_scan and len(self.files) < 2 * 4096:
                    self._discover()
                    next_scan = time.monotonic() + 0.5
                self._read_files()
                for fd, st in self.streams.items():
                    if st[5] and st[2]:
                        self._write(fd, b"")
                if not open_pipes and not self.drained.is_set():
                    self._discover()
                    self._read_files(final=True)
                    self.drained.set()
                if self.stopping.is_set():
                    break
            self._discover()
            self._read_files(final=True)
        finally:
            self.drained.set()
            sel.close()
            for fd in self.files.values():
                try:
                    os.close(fd)
                except OSError:
                    pass
            import shutil

            shutil.rmtree(self.log_dir, ignore_errors=True)

    def finish(self) -> None:
        """The tree is gone: read what is left, then end (and remove the log folder)."""
        self.stopping.set()
        self.join(5.0)

    def failure(self) -> dict | None:
        """The first failed worker of this node (a reaction to another process's failure only when every
        failure here is one), with the other failed workers of this node."""
        found = []
        locals_ = set(self.scans) | set(self.exits)
        for local in sorted(locals_):
            scan = self.scans.get(local) or ErrorScan()
            code = self.exits.get(local)
            paths = [p for p in self.files if p.endswith(f"{os.sep}{local}{os.sep}stderr.log")]
            recorded = _error_file(os.path.join(os.path.dirname(paths[0]), "error.json")) if paths else None
            err, source = (recorded, "error file") if recorded else (scan.error, "traceback")
            if err is None and code in (None, 0):
                continue
            rec = {"rank": self.base_rank + local, "local_rank": local, "exit": code, "source": source}
            if err is not None:
                rec.update(error=err[0], message=err[1][:400], where=err[2], time=_utc_stamp(err[3]))
                rec["peer"] = bool(_PEER.search(f"{err[0]}: {err[1]}"))
            elif code is not None and code < 0:  # torchrun SIGTERMs the others once one failed
                said = f" (its last line: {scan.last[:300]})" if scan.last and code != -signal.SIGTERM else ""
                rec.update(error="", message=f"killed by {_signal_name(-code)}{said}", where="", source="exit status")
                rec["peer"] = code == -signal.SIGTERM
            else:
                rec.update(
                    error="", message=scan.last[:400], where="", source="last line" if scan.last else "exit status"
                )
                rec["peer"] = bool(_PEER.search(scan.last))
            found.append(rec)
        if not found:
            return None
        if all(r["source"] == "exit status" and r["exit"] == -signal.SIGTERM for r in found):
            for r in found:  # torchrun SIGTERMs its workers after a local failure: here there was none
                r["peer"] = False
        found.sort(key=lambda r: (r["peer"], r.get("time") or "9", r["rank"]))
        first = dict(found[0])
        same = (first.get("error"), first.get("message"))
        first["others"] = [  # type: ignore[assignment]
            dict({k: r[k] for k in ("rank", "exit", "error", "peer") if r.get(k) is not None},
                 **({"same": True} if (r.get("error"), r.get("message")) == same and not r["peer"] else {}))
            for r in found[1:16]
        ]  # fmt: skip
        return first


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


# ==== entrypoint/parts/channel.py:1 ====
"""The liveness channel: authenticated newline-delimited JSON over TCP (Conn, Session)."""


# ==== entrypoint/parts/channel.py:18 ====
# --------------------------------------------------------------------------------------------
# Liveness channel: newline-delimited JSON over TCP, node 0 is the hub, every connection proves
# that it belongs to the run before anything it says counts (docs/entrypoint.md, "Wire format").
#
#   node 0 -> process, on accept:   {"t":"challenge","v":3,"n":"<ns: 32 hex>"}
#   process -> node 0:              {"t":"auth","v":3,"n":"<nc: 32 hex>","mac":"<HMAC(S, 'kgen/3 auth ns nc')>"}
#   then every line, both ways:     <64 hex: HMAC(K, '<dir> <seq> ' + json)> <json>
#                                   K = HMAC(S, 'kgen/3 session ns nc'), dir c (to node 0) / s (from node 0),
#                                   seq counts the lines of that direction from 0
#   node 0 -> a failed proof:       {"t":"denied","reason":"..."}    (then it closes)
#
# S is the run's secret (KGEN_SECRET_FILE), HMAC is HMAC-SHA256 in hex. The secret never crosses the
# network; both nonces are fresh per connection, so neither a recorded proof nor a recorded line is
# accepted again; a line out of order, dropped, replayed or changed fails its MAC and ends the
# connection. Node 0 proves itself by its first line (only a holder of S can compute K).
# --------------------------------------------------------------------------------------------

MSG_CHALLENGE = "challenge"  # node 0 -> process (not authenticated): its nonce
MSG_AUTH = "auth"  # process -> node 0 (not authenticated): its nonce and the proof
MSG_DENIED = "denied"  # node 0 -> process (not authenticated): the proof was wrong; closes


def _mac(key: bytes, text: str | bytes) -> str:
    return hmac.new(key, text.encode() if isinstance(text, str) else text, "sha256").hexdigest()


def membership_proof(secret: bytes, ns: str, nc: str) -> str:
    """The answer to node 0's challenge `ns`, bound to the prover's own nonce `nc`."""
    return _mac(secret, f"kgen/{PROTOCOL} auth {ns} {nc}")


def new_nonce() -> str:
    return secrets.token_hex(16)


class ProtocolError(Exception):
    """A line that does not belong on this connection: too long, not kgen's protocol, or a MAC that
    does not verify (an injected, replayed, reordered or corrupted message)."""


class Session:
    """An authenticated connection: a key of its own (from the secret and both nonces), a MAC and a
    sequence number on every line, per direction."""

    def __init__(self, secret: bytes, ns: str, nc: str, side: str) -> None:
        self.key = bytes.fromhex(_mac(secret, f"kgen/{PROTOCOL} session {ns} {nc}"))
        self.tx_dir, self.rx_dir = ("c", "s") if side == "client" else ("s", "c")
        self.tx_seq = self.rx_seq = 0

    def seal(self, msg: dict) -> bytes:
        body = _encode(msg)
        tag = _mac(self.key, f"{self.tx_dir} {self.tx_seq} {body}")
        self.tx_seq += 1
        return f"{tag} {body}\n".encode()

    def open(self, line: bytes) -> dict:
        tag, _, body = line.partition(b" ")
        expected = _mac(self.key, f"{self.rx_dir} {self.rx_seq} ".encode() + body).encode()
        if not hmac.compare_digest(tag, expected):
            raise ProtocolError("a message failed verification (injected, replayed, reordered or corrupted)")
        self.rx_seq += 1
        return _decode(body, "an authenticated line is not a message of the protocol")


def _encode(msg: dict) -> str:
    return json.dumps(msg, separators=(",", ":"))


def _too_deep(body: bytes) -> bool:
    """Does the JSON in `body` nest deeper than MAX_DEPTH? (Brackets inside strings do not count.)"""
    if body.count(b"[") + body.count(b"{") <= MAX_DEPTH:
        return False
    depth, in_str, esc = 0, False, False
    for c in body:
        if in_str:
            esc, in_str = (False, True) if esc else (c == 0x5C, c != 0x22)
        elif c == 0x22:
            in_str = True
        elif c in b"[{":
            depth += 1
            if depth > MAX_DEPTH:
                return True
        elif c in b"]}":
            depth -= 1
    return False


def _decode(body: bytes, problem: str) -> dict:
    """The one gate every line passes before anything reads it, on both sides and before and after the
    proof: bounded nesting, then JSON, then an object whose `t` is a message of the protocol and whose
    fields have that message's types and alphabets (FIELDS). Returns only those fields, absent optional
    ones filled in; anything else raises ProtocolError(problem), which ends that connection only."""
    try:
        msg = None if _too_deep(body) else json.loads(body)
    except (ValueError, RecursionError):
        msg = None
    t = msg.get("t") if isinstance(msg, dict) else None
    fields = FIELDS.get(t) if isinstance(t, str) else None
    if fields is None or msg is None:
        raise ProtocolError(problem)
    out = {"t": t}
    for name, (check, default) in fields.items():
        if name not in msg and default is not REQUIRED:
            out[name] = default
        elif not check(msg.get(name, REQUIRED)):
            raise ProtocolError(f"{problem} (field {name!r} of {t!r})")
        else:
            out[name] = msg[name]
    return out


def plain_line(msg: dict) -> bytes:
    return (_encode(msg) + "\n").encode()


def parse_plain(line: bytes) -> dict:
    return _decode(line, "sent something that is not kgen's protocol")


def show_addr(addr) -> str:
    if isinstance(addr, tuple) and len(addr) >= 2:
        host, port = addr[0], addr[1]
        return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
    return str(addr or "?")


class Conn:
    def __init__(self, sock: socket.socket, addr=None) -> None:
        sock.setblocking(False)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
        self.sock, self.addr = sock, addr
        self.inbuf = b""
        self.outbuf = b""
        self.last_rx = self.last_tx = time.monotonic()
        self.closed = False
        self.session: Session | None = None  # set once membership is proven
        self.nonce = ""  # node 0: the challenge sent on this connection
        self.limit = PREAUTH_LINE_MAX
        self.rank: int | None = None
        self.host = ""
        self.done = False
        self.since = time.monotonic()
        self.sel: selectors.BaseSelector | None = None  # where it is registered: close() takes it out

    def register(self, sel: selectors.BaseSelector) -> None:
        sel.register(self.sock, selectors.EVENT_READ, ("conn", self))
        self.sel = sel

    def send(self, msg: dict) -> None:
        if self.closed:
            return
        self.outbuf += self.session.seal(msg) if self.session is not None else plain_line(msg)
        self.last_tx = time.monotonic()
        self.flush()

    def flush(self, block_for: float = 0.0) -> None:
        deadline = time.monotonic() + block_for
        while self.outbuf and not self.closed:
            try:
                n = self.sock.send(self.outbuf)
                self.outbuf = self.outbuf[n:]
            except (BlockingIOError, InterruptedError):
                if time.monotonic() >= deadline:
                    return
                time.sleep(0.01)
            except OSError:
                self.close()
                return

    def fill(self) -> bool:
        """Read what has arrived; False when the peer closed the connection or reset it."""
        try:
            data = self.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return True
        except OSError:
            return False
        if not data:
            return False
        self.last_rx = time.monotonic()
        self.inbuf += data
        return True

    def pop(self) -> dict | None:
        """The next complete message (verified once the connection is authenticated), None when no
        full line has arrived. Raises ProtocolError; the caller drops the connection."""
        end = self.inbuf.find(b"\n")
        if end < 0 or end > self.limit:
            if len(self.inbuf) > self.limit:
                raise ProtocolError(f"sent more than {self.limit} bytes without a line break")
            return None
        line, self.inbuf = self.inbuf[:end], self.inbuf[end + 1 :]
        return self.session.open(line) if self.session is not None else parse_plain(line)

    def close(self) -> None:
        """Every close, also one inside flush() after a send failed: out of its selector first, so no fd of a
        closed connection stays registered (the next accept or connect reuses the number)."""
        if self.sel is not None:
            try:
                self.sel.unregister(self.sock)
            except (KeyError, ValueError, OSError):
                pass
            self.sel = None
        if not self.closed:
            self.closed = True
            try:
                self.sock.close()
            except OSError:
                pass


def resolve(host: str, port: int) -> list[tuple]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [info[4] for info in infos]


def is_ip(text: str) -> bool:
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, text)
            return True
        except (OSError, ValueError):
            pass
    return False


def is_local(addr: str) -> bool:
    """Is `addr` an address of this host (can a socket be bound to it)?"""
    try:
        with socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((addr, 0))
        return True
    except OSError:
        return False


EVERY_INTERFACE = ["0.0.0.0", "::"]


def bind_addresses(cfg: Config) -> tuple[list[str], str]:
    """Where node 0's liveness channel listens, and why. KGEN_LIVENESS_BIND when set (`*`: every
    interface); a pod: every interface of the pod (its network namespace; the NetworkPolicy fences it);
    elsewhere the addresses of this host that MASTER_ADDR names, where the other nodes reach node 0
    (loopback for `kgen launch --local`); every interface, said in the log, when it names none of them or a
    host name that resolves to loopback here only (as Debian's 127.0.1.1 entry does: the others reach it
    elsewhere)."""
    if cfg.liveness_bind:
        every = cfg.liveness_bind == EVERY_INTERFACE
        return cfg.liveness_bind, "every interface: KGEN_LIVENESS_BIND=*" if every else "KGEN_LIVENESS_BIND"
    if cfg.kind:
        return EVERY_INTERFACE, "every interface of the pod; the run's NetworkPolicy admits only its own pods"
    try:
        named = sorted({a[0] for a in resolve(cfg.master_addr, 0)})
    except (OSError, UnicodeError):
        named = []
    local = [a for a in named if is_local(a)]
    loopback = all(a.startswith("127.") or a == "::1" for a in local)
    if local and (not loopback or is_ip(cfg.master_addr) or cfg.master_addr == "localhost"):
        return local, f"where MASTER_ADDR={cfg.master_addr} reaches this host; KGEN_LIVENESS_BIND=* widens it"
    said = f"names {', '.join(local)} here only" if local else f"is {', '.join(named) or 'unresolved'} here"
    return EVERY_INTERFACE, (
        f"every interface: MASTER_ADDR={cfg.master_addr} {said}, not an address the other nodes reach this host "
        f"at; set KGEN_LIVENESS_BIND to that address"
    )


class Rejected(Exception):
    def __init__(self, reason: str, code: int) -> None:
        super().__init__(reason)
        self.code = code


class Denied(Exception):
    """Node 0 (or whatever answers at its address) refused this process's membership proof."""


def _read_line(sock: socket.socket, buf: bytes, deadline: float, limit: int) -> tuple[bytes, bytes]:
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("no answer")
        if len(buf) > limit:
            raise ProtocolError(f"the answer exceeds {limit} bytes without a line break")
        sock.settimeout(left)
        data = sock.recv(4096)
        if not data:
            raise ConnectionResetError("closed during the handshake")
        buf += data
    line, rest = buf.split(b"\n", 1)
    return line, rest


def handshake(cfg: Config, sock: socket.socket, first: dict) -> tuple[Session, dict, bytes]:
    """Prove membership to node 0 and send `first` (hello, probe or stop) in the same packet.

    Returns the session, node 0's first (verified) answer and any bytes after it. Raises Denied
    (node 0 refused the proof), ProtocolError (the answer is not an authenticated node 0), OSError."""
    if cfg.secret is None:
        raise Denied("no run secret on this host (KGEN_SECRET_FILE)")
    deadline = time.monotonic() + HANDSHAKE_TIMEOUT
    line, rest = _read_line(sock, b"", deadline, PREAUTH_LINE_MAX)
    challenge = parse_plain(line)
    if challenge["t"] != MSG_CHALLENGE:
        raise ProtocolError("the process on that port is not a kgen node 0 (no challenge)")
    if challenge["v"] != PROTOCOL:
        raise ProtocolError(f"node 0 speaks liveness protocol {challenge['v']}, this node {PROTOCOL}")
    ns, nc = challenge["n"], new_nonce()
    session = Session(cfg.secret, ns, nc, "client")
    auth = {"t": MSG_AUTH, "v": PROTOCOL, "n": nc, "mac": membership_proof(cfg.secret, ns, nc)}
    sock.settimeout(max(0.1, deadline - time.monotonic()))
    sock.sendall(plain_line(auth) + session.seal(first))
    line, rest = _read_line(sock, rest, deadline, LINE_MAX)
    if line.startswith(b"{"):
        plain = parse_plain(line)
        if plain["t"] == MSG_DENIED:
            raise Denied(shown(plain["reason"]))
        raise ProtocolError("node 0's answer is not authenticated")
    return session, session.open(line), rest


def open_session(cfg: Config, first: dict, timeout: float, host: str | None = None, addrs: list | None = None):
    """One attempt: resolve node 0 (or `host`; `addrs`: resolved already), connect, prove membership, send `first`.

    Returns (socket, session, answer, rest). Raises socket.gaierror, OSError, ProtocolError, Denied."""
    addrs = addrs or resolve(host or cfg.master_addr, cfg.liveness_port)
    last: Exception = OSError("no address")
    for addr in addrs:
        family = socket.AF_INET6 if len(addr) == 4 else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            sock.connect(addr)
            session, answer, rest = handshake(cfg, sock, first)
        except Denied:
            sock.close()
            raise
        except (OSError, ProtocolError) as exc:
            sock.close()
            last = exc
            continue
        return sock, session, answer, rest
    raise last


def connect_once(
    cfg: Config, hello: dict, timeout: float, addrs: list | None = None
) -> tuple[socket.socket, Session, bytes]:
    """One attempt to join: open a session with a hello (`addrs`: node 0's, resolved already). Raises
    socket.gaierror / OSError / ProtocolError / Denied / Rejected."""
    sock, session, answer, rest = open_session(cfg, hello, timeout, addrs=addrs)
    if answer["t"] == MSG_WELCOME:
        return sock, session, rest
    sock.close()
    if answer["t"] != MSG_REJECT:
        raise ProtocolError(f"node 0 answered a hello with {answer['t']!r}")
    raise Rejected(shown(answer["reason"], 1000), answer["code"])


class Signals:
    """Signal handlers that only record the signal and wake the event loop."""

    def __init__(self) -> None:
        self.rfd, self.wfd = os.pipe()
        os.set_blocking(self.rfd, False)
        os.set_blocking(self.wfd, False)
        self.pending: list[int] = []
        signal.set_wakeup_fd(self.wfd, warn_on_full_buffer=False)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
            signal.signal(sig, self._on)
        signal.signal(signal.SIGCHLD, lambda *_: None)

    def _on(self, signum, _frame) -> None:
        self.pending.append(signum)

    def drain(self) -> None:
        try:
            while os.read(self.rfd, 512):
                pass
        except OSError:
            pass

    def sleep(self, seconds: float) -> None:
        """Sleep, but wake up at once when a signal arrives."""
        if seconds > 0 and not self.pending:
            try:
                sel = selectors.DefaultSelector()
                sel.register(self.rfd, selectors.EVENT_READ)
                sel.select(seconds)
                sel.close()
            except (OSError, ValueError):
                time.sleep(min(seconds, 0.1))
        self.drain()


# ==== entrypoint/parts/reform.py:1 ====
"""Re-formation: the protocol's messages, the verdict (decide), --stop and the wait for node 0."""


# ==== entrypoint/parts/reform.py:52 ====
# --------------------------------------------------------------------------------------------
# Re-formation protocol (docs/entrypoint.md, "Re-formation")
#
# A node's states: joining -> training -> (a node is lost) -> re-forming -> training ... -> done |
# failed. Node 0's entrypoint (the hub) numbers the generations: every node (re)joins with a
# hello carrying the last generation it trained in; when all NNODES are there the hub sends
# `start` with generation max(last)+1, so a replacement node 0 learns the count from the others.
# Each generation is a new torch world: rendezvous id <base>-g<gen>, KGEN_RESTART_COUNT=<gen>.
# --------------------------------------------------------------------------------------------

MSG_HELLO = "hello"  # node -> node 0: rank, run id, NNODES, NPROC_PER_NODE, host, last generation (-1: fresh)
MSG_WELCOME = "welcome"  # node 0 -> node: joined; wait for `start`
MSG_REJECT = "reject"  # node 0 -> node: refused; code 0 = try again, 2 = configuration, 76 = dropped
MSG_PROBE = "probe"  # --diagnose -> node 0: which nodes are there (answered with `status`)
MSG_STATUS = "status"
MSG_HB = "hb"  # heartbeat, both ways, from the supervising processes
MSG_START = "start"  # node 0 -> nodes: every node is there; start torchrun for generation `gen`
MSG_ABORT = "abort"  # node 0 -> nodes: a node was lost; stop torch, join again for the next generation
MSG_END = "end"  # node 0 -> nodes: the run failed as a whole; stop torch, exit with `code` (`blame`: the node at fault)
MSG_DONE = "done"  # either way: my torchrun finished successfully
MSG_FAIL = "fail"  # node -> node 0: my torchrun exited non-zero (node 0 decides), or `internal`: my entrypoint failed
MSG_LEAVE = "leave"  # node -> node 0: I am going away (SIGTERM: pod deleted; the group re-forms)
MSG_STOP = "stop"  # either way: stopped by user on `host` (Ctrl-C, --stop): every node ends torch and exits 6
MSG_STOPPING = "stopping"  # node 0 -> --stop: the stop is under way (`nodes`: the ranks told)

# Every message's fields: (check of type and alphabet, default; REQUIRED: must be there). _decode lets
# through nothing else, so the code that reads a message can trust what it reads.
REQUIRED = object()
_BIG = (1 << 31) - 1
_int = lambda lo, hi=_BIG: lambda v: type(v) is int and lo <= v <= hi  # `type(v) is int`: true and false are no ints
_hex = lambda n: lambda v: type(v) is str and len(v) == n and not v.strip("0123456789abcdef")
_TEXT = lambda v: type(v) is str and len(v) <= TEXT_MAX and v.isprintable()  # no control character, no surrogate
_VERSION, _RANK, _COUNT, _GEN, _CODE = _int(-_BIG), _int(0), _int(1), _int(-1), _int(1, 255)
_RANKS = lambda v: type(v) is list and len(v) <= 1 << 16 and all(map(_RANK, v))
FIELDS: dict[str, dict] = {
    MSG_CHALLENGE: {"v": (_VERSION, REQUIRED), "n": (_hex(32), REQUIRED)},
    MSG_AUTH: {"v": (_VERSION, REQUIRED), "n": (_hex(32), REQUIRED), "mac": (_hex(64), REQUIRED)},
    MSG_DENIED: {"reason": (_TEXT, "refused")},
    MSG_HELLO: {
        "v": (_VERSION, REQUIRED),
        "rank": (_RANK, REQUIRED),
        "id": (_TEXT, REQUIRED),
        "nnodes": (_COUNT, REQUIRED),
        "nproc": (_COUNT, REQUIRED),
        "host": (_TEXT, "?"),
        "last": (_GEN, -1),
    },
    MSG_WELCOME: {"v": (_VERSION, REQUIRED), "hb": (lambda v: type(v) in (int, float) and 0 < v <= 3600, 1.0)},
    MSG_REJECT: {"reason": (_TEXT, REQUIRED), "code": (lambda v: type(v) is int and v in (0, 2, 76), REQUIRED)},
    MSG_PROBE: {},
    MSG_STATUS: {
        "joined": (_RANKS, REQUIRED),
        "nnodes": (_COUNT, REQUIRED),
        "id": (_TEXT, REQUIRED),
        "gen": (_GEN, -1),
        "state": (_TEXT, "?"),
    },
    MSG_HB: {},
    MSG_START: {"gen": (_RANK, REQUIRED)},
    MSG_ABORT: {"gen": (_GEN, -1), "reason": (_TEXT, "unknown")},
    MSG_END: {"code": (_CODE, REQUIRED), "reason": (_TEXT, "?"), "blame": (lambda b: b is None or _RANK(b), None)},
    MSG_DONE: {},
    MSG_FAIL: {"rc": (_CODE, REQUIRED), "internal": (_TEXT, "")},
    MSG_LEAVE: {"reason": (_TEXT, "unknown")},
    MSG_STOP: {"host": (_TEXT, "?")},
    MSG_STOPPING: {"nodes": (_RANKS, REQUIRED)},
}

REFORM = "reform"
FAIL = "fail"


def decide(cfg: Config, fault: str, gen: int) -> tuple[str, int, str]:
    """What a fault in generation `gen` leads to: (REFORM, 0, "") or (FAIL, exit code, why).

    fault: "lost" (a node died, was deleted, evicted, frozen or cut off), "script" (a node's
    torchrun exited non-zero while no node was lost: the training script's own error) or "internal"
    (a node's kgen entrypoint failed: a bug in kgen, which a new generation would not cure).
    Not decided here: a group that never forms (4), a node that learns it was dropped (76), a stop
    by the user (6)."""
    if fault == "internal":
        return FAIL, EXIT_RUN_FAILED, "a kgen entrypoint failed (an internal error: report it)"
    if cfg.slurm is not None:  # Slurm: no node comes back inside a step; the step ends, the job is requeued
        return slurm_decide(cfg, fault)
    if cfg.max_reformations == 0:  # re-formation off: fail-stop, the controller replaces the group
        return FAIL, EXIT_PEER_LOST, "re-formation is off (KGEN_MAX_REFORMATIONS=0)"
    if fault == "script" and cfg.on_script_error == "fail":
        return FAIL, EXIT_RUN_FAILED, "a training script failed (KGEN_ON_SCRIPT_ERROR=fail)"
    if gen + 1 > cfg.max_reformations:
        return FAIL, EXIT_RUN_FAILED, f"re-formation limit reached (KGEN_MAX_REFORMATIONS={cfg.max_reformations})"
    return REFORM, 0, ""


def check_torch() -> None:
    """An image without torch gets one clear line instead of torchrun's traceback."""
    import importlib.util

    try:
        found = importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        fatal(
            EXIT_CONFIG,
            f"torch is not installed for {sys.executable}: use an image with torch, or set values "
            f"`python` to the interpreter that has it",
        )


def wrong_secret(cfg: Config, target: str, reason: str) -> None:
    fix = (
        "the Job's pods derive it from the Job's UID, so node 0 there is a pod of another Job (one deleted or "
        "replaced under the same name?)"
        if cfg.secret_from_uid
        else f"every node needs the same secret in KGEN_SECRET_FILE (here {cfg.secret_file}); on Kubernetes "
        f"every pod mounts the run's Secret: re-render and re-apply the whole run"
    )
    fatal(
        EXIT_CONFIG, f"wrong secret: node 0 at {target} refused this node's proof of the run secret ({reason}): {fix}"
    )


def stopped_by_user(host: str) -> Stop:
    return Stop(EXIT_STOPPED, f"stopped by user on {host}")


def tell_node0_stop(cfg: Config, host: str, budget: float) -> tuple[bool, str]:
    """Ask node 0 to stop the whole group (--stop, or Ctrl-C on a node not connected to it).

    Returns (True, what node 0 answered) or (False, why it could not be reached) within `budget`
    seconds. Raises Denied when node 0 refuses this host's proof of the run secret."""
    deadline = time.monotonic() + budget
    backoff = BACKOFF_FIRST
    why = "not tried"
    denied: Denied | None = None  # the budget ended with denials alone: node 0 refuses this host's proof
    while True:
        try:
            sock, _, answer, _ = open_session(
                cfg, {"t": MSG_STOP, "host": host}, timeout=max(0.2, min(2.0, deadline - time.monotonic()))
            )
            denied = None
        except Denied as exc:  # unauthenticated: not yet node 0 (see wait_for_master), unless it lasts
            denied, why = exc, f"denied ({exc})"
        except socket.gaierror as exc:
            denied = None
            why = f"{cfg.master_addr!r} does not resolve ({exc.strerror or exc})"
        except (OSError, ProtocolError) as exc:
            denied = None
            why = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        else:
            sock.close()
            if answer["t"] == MSG_STOPPING:
                nodes = answer["nodes"]
                return True, f"node 0 is stopping the group ({len(nodes)} other node(s) connected: {nodes[:64]})"
            why = f"node 0 answered {answer['t']!r}"
        now = time.monotonic()
        if now >= deadline:
            if denied is not None:
                raise denied
            return False, why
        time.sleep(min(backoff, BACKOFF_MAX, deadline - now) * random.uniform(0.5, 1.0))
        backoff *= 2


def stop_unconnected(cfg: Config) -> Stop:
    """Ctrl-C on a node that is not connected to node 0 (waiting for it): end this node, and tell
    node 0 when it can be reached within a short bound."""
    host = socket.gethostname()
    try:
        told, detail = tell_node0_stop(cfg, host, min(STOP_BUDGET, 2.0))
    except Denied as exc:
        told, detail = False, f"node 0 refused this node's proof ({exc})"
    log(f"received SIGINT: stopped by user; node 0 {'told: ' + detail if told else 'not told: ' + detail}")
    return stopped_by_user(host)


def refused_poll(nnodes: int) -> float:
    """Seconds between two connection attempts of a node while node 0's address resolves but its port refuses
    (node 0's pod is there, its entrypoint not yet listening): every 0.05 s, slower in large groups so that
    node 0 sees at most REFUSED_RATE attempts a second from all of them, never less often than BACKOFF_MAX."""
    return min(BACKOFF_MAX, max(0.05, (nnodes - 1) / REFUSED_RATE))


def lookup_poll(nnodes: int) -> float:
    """Seconds between two attempts of a node while node 0's name does not resolve (no pod 0, or not yet an
    address): every 0.25 s in small groups, at most LOOKUP_RATE lookups a second from all of them, and never
    less often than the backoff's BACKOFF_MAX."""
    return min(BACKOFF_MAX, max(0.25, (nnodes - 1) / LOOKUP_RATE))


def wait_for_master(cfg: Config, sigs: Signals, last: int = -1) -> Conn:
    """Active, bounded wait for node 0's entrypoint (DNS, TCP, the membership proof, hello/welcome).

    `last` is the generation this node trained in (-1: never). The name is resolved again at least every
    BACKOFF_MAX (a replacement node 0 comes back with a new IP). While node 0 is not there yet the attempts do
    not back off: while the name does not resolve, one every lookup_poll() seconds; while the address it gives
    refuses the connection (node 0's pod is starting), one to that address every refused_poll() seconds,
    without a lookup each time. So a node joins within a fraction of a second of node 0 listening."""
    hello = {
        "t": MSG_HELLO,
        "v": PROTOCOL,
        "rank": cfg.node_rank,
        "id": cfg.rdzv_id,
        "nnodes": cfg.nnodes,
        "nproc": cfg.nproc,
        "host": printable(os.environ.get("HOSTNAME") or socket.gethostname())[:255],
        "last": last,
    }
    if last < 0:
        bound, bound_name = cfg.master_wait, "KGEN_MASTER_WAIT_TIMEOUT"
    else:
        bound, bound_name = cfg.replacement_timeout, "KGEN_REPLACEMENT_TIMEOUT"
    start = time.monotonic()
    deadline = start + bound
    next_progress = start + PROGRESS_EVERY
    backoff = BACKOFF_FIRST
    attempts = 0
    state = "not tried"
    denied_since: float | None = None  # the first of the denials since the last other answer
    denied_reason = ""
    target = f"{cfg.master_addr}:{cfg.liveness_port}"
    refused: tuple[list, float] | None = None  # (node 0's addresses, when resolved) while they refuse
    log(f"waiting for node 0 at {target} (liveness port; bound {bound_name}={bound:g}s)")
    while True:
        if sigs.pending:
            sig = sigs.pending.pop(0)
            name = signal.Signals(sig).name
            if sig == signal.SIGINT:
                raise stop_unconnected(cfg)
            log(f"received {name} while waiting for node 0: exiting")
            raise Stop(128 + sig, f"signal {name}")
        attempts += 1
        now = time.monotonic()
        denied = False
        addrs: list | None = None
        resolved_at = now
        if refused is not None and now - refused[1] < BACKOFF_MAX:
            addrs, resolved_at = refused
        refused, unresolved = None, False
        try:
            addrs = addrs or resolve(cfg.master_addr, cfg.liveness_port)
            sock, session, rest = connect_once(cfg, hello, timeout=max(0.2, min(5.0, deadline - now)), addrs=addrs)
            log(f"node 0 reachable after {time.monotonic() - start:.1f}s ({attempts} attempt(s))")
            conn = Conn(sock)
            conn.session, conn.limit = session, LINE_MAX
            conn.inbuf = rest  # anything node 0 sent right after the welcome
            return conn
        except socket.gaierror as exc:
            state = f"DNS: {cfg.master_addr!r} does not resolve ({exc.strerror or exc})"
            unresolved = True
        except Denied as exc:
            # unauthenticated: whatever answers at node 0's address before node 0 proved itself (a start
            # window, node 0 being replaced, another process on its host) can say it; not yet this run's node 0
            denied, denied_reason = True, str(exc)
            denied_since = now if denied_since is None else denied_since
            state = f"{target} denied this node's proof of the run secret ({exc}): a wrong secret, or not yet node 0"
            if now - denied_since >= DENIED_BOUND:
                wrong_secret(cfg, target, f"{exc}; denials alone for {now - denied_since:.0f}s")
        except Rejected as exc:
            if exc.code == EXIT_DROPPED:
                log(f"node 0 says: {exc}")
                raise Stop(EXIT_DROPPED, f"dropped from the group ({exc})") from None
            if exc.code:
                fatal(exc.code, f"node 0 refused this node: {exc}")
            state = f"node 0 answered but is not ready for this node: {exc}"
        except ProtocolError as exc:
            state = f"{target} answered but did not prove it is this run's node 0 ({exc})"
        except (OSError, ValueError) as exc:
            reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
            state = f"port: {target} resolved but not accepting ({reason})"
            if isinstance(exc, ConnectionRefusedError) and addrs:
                refused = (addrs, resolved_at)
        if not denied:
            denied_since = None
        now = time.monotonic()
        if now >= deadline:
            if denied_since is not None:  # the bound ended with denials alone
                wrong_secret(
                    cfg, target, f"{denied_reason}; denials alone for {now - denied_since:.0f}s, until {bound_name}"
                )
            break
        if now >= next_progress:
            log(f"still waiting for node 0 ({now - start:.0f}s of {bound:g}s): {state}")
            next_progress = now + PROGRESS_EVERY
        if refused:
            delay = refused_poll(cfg.nnodes)
        else:
            delay = lookup_poll(cfg.nnodes) if unresolved else min(backoff, BACKOFF_MAX)
        delay *= random.uniform(0.5, 1.0)
        backoff *= 2
        sigs.sleep(min(delay, max(0.0, deadline - now)))
    if state.startswith("DNS"):
        hint = (
            "the name never resolved: is pod 0 scheduled and running? Does the headless Service "
            "exist with publishNotReadyAddresses: true, and does the pod set subdomain/serviceName "
            "to it? (kubectl get pods,svc; kubectl describe pod <name>-0)"
        )
    else:
        hint = (
            "the name resolved but nothing answered on the liveness port: is pod 0 running the kgen "
            "entrypoint (kubectl logs <name>-0), is KGEN_LIVENESS_PORT the same on every pod, does "
            "a NetworkPolicy block it?"
        )
    what = "not reachable" if last < 0 else f"not back (after generation {last})"
    fatal(
        EXIT_MASTER_UNREACHABLE,
        f"node 0 {what} within {bound_name}={bound:g}s after {attempts} attempts; last: {state}; {hint}",
    )
    raise AssertionError  # unreachable


class StrangerLog:
    """Each refused connection is logged once; beyond STRANGER_LOG_BURST lines per
    STRANGER_LOG_WINDOW seconds they are only counted (a flood must not flood the log)."""

    def __init__(self) -> None:
        self.window_start = time.monotonic()
        self.lines = self.suppressed = self.total = 0

    def note(self, text: str) -> None:
        self.total += 1
        self.roll(time.monotonic())
        if self.lines < STRANGER_LOG_BURST:
            self.lines += 1
            log(text)
        else:
            self.suppressed += 1

    def roll(self, now: float, final: bool = False) -> None:
        if now - self.window_start < STRANGER_LOG_WINDOW and not final:
            return
        if self.suppressed:
            log(
                f"refused {self.suppressed} more connection(s) from outside the run in the last "
                f"{now - self.window_start:.0f}s (not logged one by one; {self.total} in all)"
            )
        self.window_start, self.lines, self.suppressed = now, 0, 0


# ==== entrypoint/parts/hub.py:1 ====
"""Node 0's Hub: the group's membership and generations (every other node's side is the Spoke)."""


# ==== entrypoint/parts/hub.py:63 ====
class Hub:
    """Node 0's side: proves every connection's membership, accepts every other node, numbers the
    generations, watches the nodes."""

    def __init__(self, cfg: Config, sel: selectors.BaseSelector) -> None:
        self.cfg, self.sel = cfg, sel
        self.listeners: list[socket.socket] = []
        self.unproven: dict[Conn, None] = {}  # accepted, challenged, no proof yet (oldest first)
        self.members: dict[Conn, None] = {}  # proven, no hello yet (or a probe / a stop request)
        self.peers: dict[int, Conn] = {}
        self.lasts: dict[int, int] = {}
        self.dropped: dict[int, tuple[int, str]] = {}  # rank -> (generation, why)
        self.expected = set(range(1, cfg.nnodes))
        self.gen = -1
        self.state = "joining"  # joining | training | finishing | stopping
        self.form_started = time.monotonic()
        self.why_forming = ""
        self.last_beat = 0.0
        self.lost: str | None = None
        self.script_fail: tuple[int, int, float, str] | None = None  # (rank, rc, when, internal error)
        self.script_fail_peer = False  # the blamed node's own workers failed of a lost peer (node 0 knows its own)
        self.stop_host: str | None = None  # a stop by the user was asked for, on this host
        self.told: set[int] = set()  # stopping: the ranks told to stop
        self.strangers = StrangerLog()
        self.seen_nonces: dict[str, None] = {}  # recent client nonces: a replayed proof is named as such
        Running.link = self

    def listen(self, sigs: Signals | None = None) -> str:
        """Listen where bind_addresses() says; returns where, and why, for the log. A port in use is retried
        for LISTEN_BUSY_BOUND seconds (a node 0 restarted or replaced on the same host: its predecessor's
        tree may still be ending); only a port still taken then is a configuration error."""
        hosts, why = bind_addresses(self.cfg)
        start = time.monotonic()
        delay = BACKOFF_FIRST
        said = False
        while True:
            errors = self._bind(hosts)
            busy = [h for h, exc in errors if getattr(exc, "errno", None) == errno.EADDRINUSE]
            if not busy or time.monotonic() - start >= LISTEN_BUSY_BOUND or (sigs is not None and sigs.pending):
                break
            if not said:
                said = True
                log(
                    f"KGEN_LIVENESS_PORT={self.cfg.liveness_port} is in use on {busy[0]}: trying again for up to "
                    f"{LISTEN_BUSY_BOUND:g}s (a node 0 ending on this host?)"
                )
            self.close_listeners()
            (sigs.sleep if sigs is not None else time.sleep)(min(delay, BACKOFF_MAX))
            delay *= 2
        if said and not errors:
            log(f"KGEN_LIVENESS_PORT={self.cfg.liveness_port} free after {time.monotonic() - start:.1f}s")
        if not self.listeners or any(h != "::" for h, _ in errors):  # IPv6 may be off: its wildcard is optional
            host, exc = errors[0] if errors else ("?", OSError("no socket"))
            held = f", still in use after {LISTEN_BUSY_BOUND:g}s" if busy else ""
            fatal(
                EXIT_CONFIG,
                f"KGEN_LIVENESS_PORT={self.cfg.liveness_port}: cannot listen on {host} ({exc}{held}): pick a free "
                f"port (values livenessPort) that differs from MASTER_PORT"
                + ("" if host in ("0.0.0.0", "::") else ", or set KGEN_LIVENESS_BIND to an address of node 0"),
            )
        return f"{', '.join(hosts)} ({why})"

    def _bind(self, hosts: list[str]) -> list[tuple[str, OSError]]:
        errors: list[tuple[str, OSError]] = []
        for host in hosts:
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            try:
                sock = socket.socket(family, socket.SOCK_STREAM)
            except OSError as exc:
                errors.append((host, exc))
                continue
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind((host, self.cfg.liveness_port))
                sock.listen(max(MAX_UNPROVEN, self.cfg.nnodes))
                sock.setblocking(False)
            except OSError as exc:
                sock.close()
                errors.append((host, exc))
                continue
            self.listeners.append(sock)
            self.sel.register(sock, selectors.EVENT_READ, ("listen", sock))
        return errors

    def close_listeners(self) -> None:
        for sock in self.listeners:
            try:
                self.sel.unregister(sock)
            except (KeyError, ValueError):
                pass
            sock.close()
        self.listeners = []

    # -- connections and the membership proof ---------------------------------------------
    def on_event(self, data) -> None:
        kind, obj = data
        try:
            self._accept(obj) if kind == "listen" else self.read(obj)
        except Exception as exc:  # noqa: BLE001 - a bug of kgen's, never a peer's doing: that connection only
            internal_error(exc, f"handling a connection from {show_addr(getattr(obj, 'addr', None))}")
            if kind == "conn" and not obj.closed:
                self._bad(obj, f"kgen failed handling its line ({type(exc).__name__}: an internal error)")

    def read(self, conn: Conn) -> None:
        """What arrived on one connection. Raises nothing but a bug: whatever the peer sent is at most a
        protocol error, which ends that connection only (a joined node's: that node is lost)."""
        if conn.closed:
            return
        alive = conn.fill()
        while not conn.closed:
            try:
                msg = conn.pop()
            except ProtocolError as exc:
                self._bad(conn, str(exc))
                return
            if msg is None:
                break
            if conn.session is None:
                self._prove(conn, msg)
            else:
                self._message(conn, msg)
        if not alive and not conn.closed:
            if conn.session is None:
                self._stranger(conn, "closed the connection without proving membership")
            else:
                self._gone(conn, "closed its liveness connection (pod died, was deleted or its entrypoint was killed)")

    def _accept(self, listener: socket.socket) -> None:
        for _ in range(64):  # a burst is taken in one turn, but bounded: heartbeats come first
            try:
                sock, addr = listener.accept()
            except OSError:
                return
            conn = Conn(sock, addr)
            conn.nonce = new_nonce()
            self.unproven[conn] = None
            conn.register(self.sel)
            conn.send({"t": MSG_CHALLENGE, "v": PROTOCOL, "n": conn.nonce})
            if conn.closed:  # connected, then reset before its challenge went out
                self._stranger(conn, "reset the connection before its challenge")
                continue
            if len(self.unproven) > MAX_UNPROVEN:
                oldest = next(iter(self.unproven))
                self._stranger(oldest, f"dropped: more than {MAX_UNPROVEN} connections waited to prove membership")

    def _stranger(self, conn: Conn, what: str, deny: str | None = None) -> None:
        """A connection that did not prove membership: logged once, told nothing useful, dropped."""
        self.strangers.note(
            f"refused a connection from {show_addr(conn.addr)}: {what} (not a node of this run; not counted, "
            f"nothing changed)"
        )
        if deny is not None:
            conn.send({"t": MSG_DENIED, "reason": deny})
        self._drop(conn)

    def _prove(self, conn: Conn, msg: dict) -> None:
        """The first line of a connection (a message _decode let through): its membership proof, or it is
        a stranger's."""
        if msg["t"] != MSG_AUTH:
            return self._stranger(conn, f"sent {msg['t']!r} without proving membership")
        if msg["v"] != PROTOCOL:
            v = msg["v"]
            return self._stranger(
                conn,
                f"speaks liveness protocol {v}",
                deny=f"liveness protocol {v} vs node 0's {PROTOCOL}: every node must run the same kgen entrypoint",
            )
        nc, mac = msg["n"], msg["mac"]
        if not hmac.compare_digest(mac, membership_proof(self.cfg.secret or b"", conn.nonce, nc)):
            if nc in self.seen_nonces:
                what = "replayed a recorded exchange (its nonce was used before)"
            else:
                what = "wrong proof of the run secret (a different KGEN_SECRET_FILE?)"
            return self._stranger(conn, what, deny="wrong secret")
        self.seen_nonces[nc] = None
        if len(self.seen_nonces) > 4096:
            del self.seen_nonces[next(iter(self.seen_nonces))]
        conn.session = Session(self.cfg.secret or b"", conn.nonce, nc, "server")
        conn.limit = LINE_MAX
        conn.since = time.monotonic()
        del self.unproven[conn]
        self.members[conn] = None

    def _bad(self, conn: Conn, why: str) -> None:
        if conn.session is None:
            self._stranger(conn, why)
        elif conn.rank is not None:
            self._gone(conn, f"sent a line that is not valid on its connection ({why}): dropped")
        else:
            log(f"dropped a connection from {show_addr(conn.addr)}: {why}")
            self._drop(conn)

    def _gone(self, conn: Conn, what: str) -> None:
        """A joined node's connection ended (closed, reset, silent or broken)."""
        self._drop(conn)
        rank = conn.rank
        if rank is None or self.peers.get(rank) is not conn:
            return
        del self.peers[rank]
        self.lasts.pop(rank, None)
        if conn.done or self.state == "stopping":
            return
        if self.state == "joining":
            log(f"node {rank} {what} while the group was forming: waiting for it again")
        else:
            self.lose(rank, f"node {rank} {what}")

    # -- messages on proven connections --------------------------------------------------------
    def _message(self, conn: Conn, msg: dict) -> None:
        t = msg["t"]
        if conn.rank is None:
            if t == MSG_PROBE:
                conn.send(
                    {
                        "t": MSG_STATUS,
                        "joined": sorted(self.peers),
                        "nnodes": self.cfg.nnodes,
                        "id": self.cfg.rdzv_id,
                        "gen": self.gen,
                        "state": self.state,
                    }
                )
                conn.flush(0.5)
                self._drop(conn)
            elif t == MSG_HELLO:
                self._hello(conn, msg)
            elif t == MSG_STOP:
                self._stop_asked(conn, msg)
                conn.send({"t": MSG_STOPPING, "nodes": sorted(self.peers)})
                conn.flush(0.5)
                self._drop(conn)
            else:
                log(f"dropped a member connection from {show_addr(conn.addr)}: it sent {t!r} before hello")
                self._drop(conn)
            return
        if t == MSG_DONE:
            conn.done = True
            log(f"node {conn.rank} finished successfully")
        elif t == MSG_FAIL and msg["internal"]:
            reason = internal_reason(f"node {conn.rank}", shown(msg["internal"], 400))
            log(f"node {conn.rank} says: {reason}")
            self.script_failed(conn.rank, msg["rc"], reason)
        elif t == MSG_FAIL:
            log(f"node {conn.rank}'s torchrun exited with code {msg['rc']}")
            self.script_failed(conn.rank, msg["rc"])
        elif t == MSG_LEAVE:
            self._gone(conn, f"left: {shown(msg['reason'])}")
        elif t in (MSG_PROGRESS, MSG_STACKS, MSG_STACKED):
            HANG.from_node(conn.rank, msg)  # hang watchdog section
        elif t == MSG_STOP:
            conn.done = True  # its departure is not a loss
            self._stop_asked(conn, msg)
        elif t != MSG_HB:
            self._bad(conn, f"sent {t!r}, which no node sends to node 0 once joined")

    def _stop_asked(self, conn: Conn, msg: dict) -> None:
        host = shown(msg["host"])
        via = f"node {conn.rank}" if conn.rank is not None else f"kgen_entrypoint.py --stop from {show_addr(conn.addr)}"
        log(f"stop requested by user on {host} ({via})")
        if self.stop_host is None:
            self.stop_host = host

    def _reject(self, conn: Conn, msg: dict, reason: str, code: int) -> None:
        log(f"refused node {msg['rank']} (host {shown(msg['host'])}): {reason}")
        conn.send({"t": MSG_REJECT, "reason": reason, "code": code})
        conn.flush(0.5)
        self._drop(conn)

    def _hello(self, conn: Conn, msg: dict) -> None:
        rank, last = msg["rank"], msg["last"]
        cfg = self.cfg
        if msg["id"] != cfg.rdzv_id:
            return self._reject(
                conn,
                msg,
                f"rendezvous id '{shown(msg['id'])}' differs from node 0's {cfg.rdzv_id!r} (pods of two different "
                "runs?)",
                0,
            )
        if self.state == "stopping":  # between generations when the stop came
            conn.send({"t": MSG_STOP, "host": self.stop_host})
            conn.flush(0.5)
            self.told.add(rank)
            self._drop(conn)
            return
        if self.state == "finishing":
            return self._reject(conn, msg, "node 0 has finished this run", 0)
        if msg["nnodes"] != cfg.nnodes or msg["nproc"] != cfg.nproc:
            return self._reject(
                conn,
                msg,
                f"NNODES {msg['nnodes']} vs {cfg.nnodes} / NPROC_PER_NODE {msg['nproc']} vs {cfg.nproc} "
                f"(that node vs node 0): render every pod from the same manifest",
                EXIT_CONFIG,
            )
        if rank not in self.expected:
            return self._reject(conn, msg, f"node rank {rank} is not in 1..{cfg.nnodes - 1}", EXIT_CONFIG)
        if rank in self.dropped and 0 <= last <= self.dropped[rank][0]:
            gen, why = self.dropped[rank]
            return self._reject(
                conn,
                msg,
                f"node {rank} was dropped from generation {gen} ({why}) and the group has moved on: this "
                f"process is stale; exit {EXIT_DROPPED} so that the pod is replaced",
                EXIT_DROPPED,
            )
        if rank in self.peers:
            return self._reject(
                conn,
                msg,
                f"node rank {rank} already joined from {self.peers[rank].host}: two pods derived the same node rank",
                EXIT_CONFIG,
            )
        if self.state != "joining":
            return self._reject(conn, msg, f"node 0 is training generation {self.gen}; try again", 0)
        del self.members[conn]
        conn.rank, conn.host = rank, shown(msg["host"])
        self.peers[rank] = conn
        self.lasts[rank] = last
        if last < 0:
            self.dropped.pop(rank, None)
        conn.send({"t": MSG_WELCOME, "v": PROTOCOL, "hb": cfg.hb_interval})
        log(
            f"node {rank} joined the liveness channel ({len(self.peers)}/{cfg.nnodes - 1} peers, host "
            f"{conn.host}, last generation {last})"
        )

    def _drop(self, conn: Conn) -> None:
        self.unproven.pop(conn, None)
        self.members.pop(conn, None)
        conn.close()

    def lose(self, rank: int | None, reason: str) -> None:
        if self.state == "training" and rank is not None:
            self.dropped[rank] = (self.gen, reason)
        if self.lost is None:
            self.lost = reason

    def script_failed(self, rank: int, rc: int, internal: str = "") -> None:
        """A node's torchrun exited `rc` (or, `internal`, its kgen entrypoint failed): node 0 decides."""
        first = self.script_fail
        if first is None or (internal and not first[3]):
            self.script_fail = (rank, rc, time.monotonic(), internal)
            self.script_fail_peer = False
        elif self.script_fail_peer and not first[3] and rank != first[0]:
            # the first report was a consequence (node 0's own workers failed of a lost peer, and node 0 reports
            # without the network's delay): this node's failure may be the cause; the verdict wait runs on
            self.script_fail = (rank, rc, first[2], internal)
            self.script_fail_peer = False

    def own_failure_was_a_peers(self) -> None:
        """Node 0's failure record says its workers failed of a lost peer: a later report names the cause."""
        if self.script_fail is not None and self.script_fail[0] == 0 and not self.script_fail[3]:
            self.script_fail_peer = True

    # -- forming a generation -------------------------------------------------------------
    @property
    def first_formation(self) -> bool:
        return self.gen < 0 and all(last < 0 for last in self.lasts.values())

    def complete(self) -> bool:
        return set(self.peers) == self.expected

    def form_deadline_passed(self, now: float) -> str | None:
        """The reason the group cannot form, once the bound for (re)forming has passed."""
        cfg = self.cfg
        missing = sorted(self.expected - set(self.peers))
        if self.first_formation:
            if now - self.form_started <= cfg.rdzv_timeout:
                return None
            return (
                f"node rank(s) {missing} did not connect within KGEN_RDZV_TIMEOUT={cfg.rdzv_timeout}s: are "
                f"those pods scheduled and running (kubectl get pods -o wide; kubectl describe pod)?"
            )
        if now - self.form_started <= cfg.replacement_timeout:
            return None
        why = f" after {self.why_forming}" if self.why_forming else ""
        return (
            f"re-forming{why}: node rank(s) {missing} did not come back within KGEN_REPLACEMENT_TIMEOUT="
            f"{cfg.replacement_timeout:g}s (a frozen or partitioned pod keeps its index, so the Job "
            f"controller creates no replacement until it is evicted or exits)"
        )

    def next_generation(self) -> int:
        return max([self.gen, *self.lasts.values()]) + 1

    def start(self, gen: int) -> None:
        self.gen = gen
        self.state = "training"
        self.lost = None
        self.script_fail = None
        self.script_fail_peer = False
        for conn in self.peers.values():
            conn.done = False
            conn.send({"t": MSG_START, "gen": gen})

    def abort(self, reason: str) -> None:
        """A node was lost: tell the others to stop torch and join again; form the next generation."""
        for conn in self.peers.values():
            conn.send({"t": MSG_ABORT, "gen": self.gen, "reason": reason})
        self._close_peers()
        self.state = "joining"
        self.form_started = time.monotonic()
        self.why_forming = f"generation {self.gen}: {reason}"

    def end(self, code: int, reason: str, blame: int | None = None) -> None:
        """The run failed as a whole: every node exits with `code` (the node to blame: its own)."""
        for conn in self.peers.values():
            if not conn.done:
                conn.send({"t": MSG_END, "code": code, "reason": reason, "blame": blame})
        self._close_peers()
        self.close_listeners()

    def stop_all(self, host: str) -> None:
        """Stopped by user: tell every node now; nodes that rejoin meanwhile are told by _hello."""
        self.stop_host = host
        self.state = "stopping"
        for rank, conn in self.peers.items():
            if not conn.done:
                conn.send({"t": MSG_STOP, "host": host})
            self.told.add(rank)
        self._close_peers()

    def all_told(self) -> bool:
        return self.expected <= self.told

    def _close_peers(self) -> None:
        for conn in list(self.peers.values()) + list(self.members):
            conn.flush(0.2)
            self._drop(conn)
        self.peers.clear()
        self.lasts.clear()

    def tick(self, now: float) -> None:
        cfg = self.cfg
        if now - self.last_beat >= cfg.hb_interval:
            self.last_beat = now
            for conn in list(self.peers.values()):
                conn.send({"t": MSG_HB})
        else:
            for conn in self.peers.values():
                conn.flush()
        for conn in list(self.unproven):
            if now - conn.since <= AUTH_TIMEOUT:
                break  # oldest first: the rest are younger
            self._stranger(conn, f"sent no proof of membership within {AUTH_TIMEOUT:g}s")
        for conn in list(self.members):
            if now - conn.since > HANDSHAKE_TIMEOUT:
                self._drop(conn)
        self.strangers.roll(now)
        for _, conn in sorted(self.peers.items()):
            if conn.closed:  # a send to it failed (reset, broken pipe): closed under us
                self._gone(conn, "broke its liveness connection (a send to it failed: reset or broken pipe)")
            elif not conn.done and now - conn.last_rx > cfg.hb_timeout:
                self._gone(
                    conn,
                    f"silent for {now - conn.last_rx:.1f}s (> KGEN_HEARTBEAT_TIMEOUT={cfg.hb_timeout:g}s): "
                    f"frozen or cut off",
                )

    def finish(self) -> None:
        """Own torchrun succeeded: tell the others; keep watching until they are done."""
        self.state = "finishing"
        self.close_listeners()
        self.strangers.roll(time.monotonic(), final=True)
        for conn in list(self.unproven) + list(self.members):
            self._drop(conn)
        for conn in self.peers.values():
            conn.send({"t": MSG_DONE})

    def all_done(self) -> bool:
        return all(conn.done or conn.closed for conn in self.peers.values())

    def close(self) -> None:
        self._close_peers()
        for conn in list(self.unproven):
            self._drop(conn)
        self.close_listeners()
        self.strangers.roll(time.monotonic(), final=True)


# ==== entrypoint/parts/spoke.py:1 ====
"""Every other node's Spoke: its one authenticated connection to node 0 (node 0's side is the Hub)."""


# ==== entrypoint/parts/spoke.py:15 ====
class Spoke:
    """Every other node's side: one authenticated connection to node 0 per generation."""

    def __init__(self, cfg: Config, sel: selectors.BaseSelector, conn: Conn) -> None:
        self.cfg, self.sel, self.conn = cfg, sel, conn
        self.master_done = False
        self.start_gen: int | None = None
        # what node 0 (or its loss) decided: ("abort", reason) | ("end", code, blame, reason) |
        # ("stop", host) | ("lost", reason)
        self.verdict: tuple | None = None
        conn.register(sel)
        Running.link = self
        self._drain(True)

    def on_event(self, data) -> None:
        self._drain(self.conn.fill())

    def _drain(self, alive: bool) -> None:
        while not self.conn.closed:
            try:
                msg = self.conn.pop()
                if msg is None:
                    break
                self._handle(msg)
            except Exception as exc:  # noqa: BLE001 - a ProtocolError, or a bug: either way the link is broken
                if not isinstance(exc, ProtocolError):
                    internal_error(exc, "handling a line from node 0")
                self.close()
                self._set(("lost", f"the liveness connection to node 0 broke: {shown(str(exc))}"))
                return
        if not alive and not self.conn.closed:
            self.close()
            if not self.master_done:
                self._set(
                    (
                        "lost",
                        "the liveness connection to node 0 closed (node 0 died, was deleted or its entrypoint "
                        "was killed)",
                    )
                )

    def _handle(self, msg: dict) -> None:
        """One message node 0 sent (already through _decode's gate). Raises ProtocolError for a message node
        0 never sends to a joined node."""
        t = msg["t"]
        if t == MSG_START:
            self.start_gen = msg["gen"]
        elif t == MSG_ABORT:
            self._set(("abort", shown(msg["reason"], 1000)))
        elif t == MSG_END:
            self._set(("end", msg["code"], msg["blame"], shown(msg["reason"], 1000)))
        elif t == MSG_STOP:
            self._set(("stop", shown(msg["host"])))
        elif t == MSG_DONE:
            self.master_done = True
            log("node 0 finished successfully")
        elif t == MSG_DUMP:
            HANG.dump_for(self)  # hang watchdog section
        elif t != MSG_HB:
            raise ProtocolError(f"node 0 sent {t!r} to a joined node")

    def _set(self, verdict: tuple) -> None:
        if self.verdict is None:
            self.verdict = verdict

    def close(self) -> None:
        self.conn.close()

    def tick(self, now: float) -> None:
        conn = self.conn
        if conn.closed:  # closed under us (a send failed): node 0 is lost unless it said it is done
            if not self.master_done:
                self._set(("lost", "the liveness connection to node 0 broke (a send to it failed)"))
            return
        if now - conn.last_tx >= self.cfg.hb_interval:
            conn.send({"t": MSG_HB})
        else:
            conn.flush()
        if not self.master_done and now - conn.last_rx > self.cfg.hb_timeout:
            self.close()
            self._set(
                (
                    "lost",
                    f"node 0 silent for {now - conn.last_rx:.1f}s (> KGEN_HEARTBEAT_TIMEOUT="
                    f"{self.cfg.hb_timeout:g}s): frozen or cut off",
                )
            )

    def send(self, msg: dict, then_close: bool = False) -> None:
        self.conn.send(msg)
        self.conn.flush(1.0)
        if then_close:
            self.close()


# ==== entrypoint/parts/command.py:1 ====
"""The training command: torchrun's argv around it, and the refusal of a launcher given as the command."""


# ==== entrypoint/parts/command.py:13 ====
# --------------------------------------------------------------------------------------------
# the training command
# --------------------------------------------------------------------------------------------


def torchrun_argv(cfg: Config, command: list[str], gen: int = 0, log_dir: str = "") -> list[str]:
    argv = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nnodes={cfg.nnodes}",
        f"--nproc-per-node={cfg.nproc}",
        "--rdzv-backend=static",
        f"--master-addr={cfg.master_addr}",
        f"--master-port={cfg.master_port}",
        f"--node-rank={cfg.node_rank}",
        f"--rdzv-id={cfg.rdzv_id}-g{gen}",
        f"--rdzv-conf=timeout={cfg.rdzv_timeout}",
        "--max-restarts=0",
        "--monitor-interval=0.1",
    ]
    if log_dir:  # each worker's output into files the Pump reads (whole lines, "[rank R] ")
        argv += ["--redirects=3", f"--log-dir={log_dir}"]
    if command[0] == "-m":
        return argv + ["-m"] + [torchrun_literal(a) for a in command[1:]]
    if command[0].endswith(".py"):
        return argv + [torchrun_literal(a) for a in command]
    return argv + ["--no-python", command[0]] + [torchrun_literal(a) for a in command[1:]]


_NOT_TORCHRUN_MACRO = re.compile(r"\$(?!\{local_rank\}|local_rank(?![A-Za-z0-9_]))")


def torchrun_literal(arg: str) -> str:
    """torchrun passes every worker argument through string.Template (its ${local_rank} macro), which
    turns "$$" into "$": escape every other "$" so that the script gets its arguments exactly."""
    return _NOT_TORCHRUN_MACRO.sub("$$", arg)


# A launcher as the command nests launchers: every node's inner torchrun (accelerate, deepspeed) would form
# its own one-node world. Read as the launcher reads its arguments; kgen.launch.launchers holds the same reading
# (tests/test_launchers.py keeps the two on one table). Options not listed as flags take one value.
NESTED_PROBLEM = (
    "{launcher} is a launcher, and kgen's entrypoint already starts torchrun on every node "
    "(nested, each node would train alone as its own one-node world)"
)
LOCAL_RANK_NOTE = "the script gets LOCAL_RANK in its environment, not a --local_rank argument"
_LAUNCHER_FLAGS = {
    "torchrun": {"standalone", "m", "module", "no_python", "run_path", "virtual_local_rank", "use_env", "h"},
    "accelerate": {"h", "help", "q", "quiet", "cpu", "multi_gpu", "tpu", "ipex", "enable_cpu_affinity",
                   "dynamo_use_fullgraph", "dynamo_use_dynamic", "use_deepspeed", "use_fsdp", "use_megatron_lm",
                   "use_xpu", "same_network", "m", "module", "no_python", "tpu_cluster", "no_tpu_cluster",
                   "tpu_use_sudo", "downcast_bf16", "fp8_use_autocast_during_eval", "debug"},
    "deepspeed": {"h", "help", "module", "no_python", "no_local_rank", "no_ssh", "no_ssh_check", "force_multi",
                  "save_pid", "elastic_training", "bind_cores_to_rank"},
}  # fmt: skip
_LAUNCHER_MODULES = {
    "torch.distributed.run": "torchrun",
    "torch.distributed.launch": "torchrun",
    "accelerate.commands.launch": "accelerate",
    "deepspeed.launcher.runner": "deepspeed",
}
_NPROC_OPTIONS = {"torchrun": ("nproc_per_node",), "deepspeed": ("num_gpus", "num_accelerators")}


def _launcher_start(command: list[str]) -> tuple[str, str, int] | None:
    """(the launcher as written, its family, where its options start) when `command` starts with one."""
    head = command[0].rsplit("/", 1)[-1] if command else ""
    if head in ("torchrun", "deepspeed", "accelerate-launch"):
        return command[0], {"accelerate-launch": "accelerate"}.get(head, head), 1
    if head == "accelerate":
        i = 1
        while i < len(command) and command[i].startswith("-") and command[i] not in ("-h", "--help"):
            i += 1
        return (f"{command[0]} launch", "accelerate", i + 1) if command[i : i + 1] == ["launch"] else None
    at = 0
    if re.fullmatch(r"python(\d+(\.\d+)*)?", head):  # python [options] -m MODULE
        at = 1
        while at < len(command) and not (command[at] == "-m" or re.match(r"-m[^-]", command[at])):
            if not command[at].startswith("-") or command[at] in ("-", "-c", "--"):
                return None
            at += 2 if command[at] in ("-X", "-W", "--check-hash-based-pycs") else 1
    if at < len(command) - 1 and command[at] == "-m":
        module, first = command[at + 1], at + 2
    elif at < len(command) and re.match(r"-m[^-]", command[at]):
        module, first = command[at][2:], at + 1
    else:
        return None
    family = _LAUNCHER_MODULES.get(module)
    return (" ".join([*command[:at], "-m", module]), family, first) if family else None


def nested_launcher(command: list[str]) -> tuple[str, list[str], int | None, str, int | None, bool] | None:
    """(launcher as written, the training command inside it, processes per node it was asked for and how,
    nodes it was asked for, whether it passed --local_rank to the script) when `command` is a launcher."""
    found = _launcher_start(command)
    if found is None:
        return None
    launcher, family, i = found
    opts: dict[str, tuple[str, str | None]] = {}
    while i < len(command) and command[i].startswith("-") and command[i] != "-":
        word = command[i]
        if word == "--":
            i += 1
            break
        name = word.split("=", 1)[0]
        if word.startswith("--") and "=" in word:
            opts[name.lstrip("-").replace("-", "_")] = (name, word.split("=", 1)[1])
            i += 1
        elif not word.startswith("--") and word[1:2] in "rtHie" and len(word) > 2:
            opts[word[1]] = (word[:2], word[2:])
            i += 1
        elif word.lstrip("-").replace("-", "_") in _LAUNCHER_FLAGS[family]:
            opts[word.lstrip("-").replace("-", "_")] = (word, None)
            i += 1
        else:
            opts[word.lstrip("-").replace("-", "_")] = (word, command[i + 1] if i + 1 < len(command) else None)
            i += 2
    script, args = (command[i], command[i + 1 :]) if i < len(command) else ("SCRIPT", [])
    if "m" in opts or "module" in opts:
        inner = ["-m", script, *args]
    elif "no_python" in opts or script.endswith(".py") or script == "SCRIPT":
        inner = [script, *args]
    else:
        inner = ["python3", script, *args]

    def number(name: str) -> int | None:
        value = opts.get(name, ("", None))[1]
        return int(value) if value is not None and re.fullmatch(r"\d+", value.strip()) else None

    nproc, option = None, ""
    if family == "accelerate" and "num_processes" in opts:
        total, machines = number("num_processes"), number("num_machines") or 1
        nproc = total // machines if total is not None and total % machines == 0 else None
        option = " ".join(opts["num_processes"]) + (f" over {machines} machines" if machines > 1 else "")  # type: ignore[arg-type]
    for name in _NPROC_OPTIONS.get(family, ()):
        if name in opts and not option:
            nproc, option = number(name), " ".join(opts[name])  # type: ignore[arg-type]
    nnodes = number({"torchrun": "nnodes", "accelerate": "num_machines", "deepspeed": "num_nodes"}[family])
    local_rank_arg = (family == "deepspeed" and "no_local_rank" not in opts) or (
        launcher.endswith("torch.distributed.launch") and "use_env" not in opts
    )
    return launcher, inner, nproc, option, 1 if "standalone" in opts else nnodes, local_rank_arg


def launcher_problem(command: list[str], env: dict) -> str | None:
    """The refusal of a launcher as the command, with the command to run instead (`use: ...`)."""
    nested = nested_launcher(command)
    if nested is None:
        return None
    launcher, inner, nproc, option, nnodes, local_rank_arg = nested
    notes, prefix = [], []
    for var, asked, how in (("NPROC_PER_NODE", nproc, f"its {option}"), ("NNODES", nnodes, f"its {nnodes} nodes")):
        have = (env.get(var) or "").strip()
        if asked is None or (var == "NNODES" and asked < 2):
            continue
        if not have:
            prefix.append(f"{var}={asked}")
        elif have != str(asked):
            notes.append(f"{how} disagree{'s' * (var == 'NPROC_PER_NODE')} with {var}={have}")
    if local_rank_arg:
        notes.append(LOCAL_RANK_NOTE)
    name = os.path.basename(script_path())
    me = sys.argv[0] if os.path.basename(sys.argv[0]) == name else name
    use = " ".join(shlex.quote(w) for w in [*prefix, "python3", me, "--", *inner])
    return "; ".join([NESTED_PROBLEM.format(launcher=launcher), *notes, f"use: {use}"])


def check_command(command: list[str], env: dict | None = None) -> None:
    if not command:
        fatal(
            EXIT_CONFIG,
            "no command after '--': give the training command, e.g. "
            "-- train.py --lr 3e-4, or use --smoke-test / --diagnose",
        )
    nested = launcher_problem(command, os.environ if env is None else env)  # type: ignore[arg-type]
    if nested:
        fatal(EXIT_CONFIG, nested)
    head = command[0]
    if head == "-m":
        if len(command) < 2 or command[1].startswith("-"):
            fatal(EXIT_CONFIG, "'-m' needs a module name: -- -m package.module [args]")
    elif head.startswith("-"):
        fatal(
            EXIT_CONFIG, f"command starts with the option {head!r}: give a script, '-m module' or a program after '--'"
        )
    elif head.endswith(".py") and not os.path.isfile(head):
        fatal(
            EXIT_CONFIG,
            f"training script {head!r} not found (working directory "
            f"{os.getcwd()}): check the path, the image and workingDir",
        )


# ==== entrypoint/parts/standby.py:1 ====
"""The standby agent: a survivor's next torchrun, its torch imported while the group waits for a replacement."""


# ==== entrypoint/parts/standby.py:17 ====
# --------------------------------------------------------------------------------------------
# The standby agent (docs/entrypoint.md, "Re-formation")
#
# A node that stopped its torch to re-form waits (seconds: the replacement pod's back-off, scheduling and
# start) and then starts a new torchrun, whose first seconds are the agent importing torch. So, between
# generations, the node starts that interpreter ahead: it imports torchrun's module and blocks on a pipe. On
# `start` the entrypoint writes the generation's torchrun arguments and environment to a private file and its
# path to the pipe; the standby takes them as its own (sys.argv, os.environ) and runs torchrun's main, the
# same code `python -m torch.distributed.run` runs. Nothing of torch.distributed happens before `start`: no
# store, no rendezvous, no worker. An empty line or the pipe's end (discarded, or the entrypoint is gone) ends
# it; when it is not there or has exited by `start`, torchrun starts as before.
# On every node but 0, the standby first waits until node 0's rendezvous port accepts a connection (a TCP
# connect, closed at once: node 0's torchrun may still be importing torch when node 0 was the one replaced):
# torch's store client retries with a growing back-off, which, started seconds early, would join seconds late.
# --------------------------------------------------------------------------------------------

STANDBY_PROGRAM = """import json, os, sys
import torch.distributed.run as run
path = os.fdopen(int(sys.argv[1])).readline().strip()
if not path:
    sys.exit(0)
with open(path) as fh:
    spec = json.load(fh)
os.unlink(path)
if spec["wait"]:
    import socket, time
    host, port, bound, every = spec["wait"]
    end = time.monotonic() + bound
    try:
        addrs = [a[4] for a in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]
    except OSError:
        addrs = []
    while addrs and time.monotonic() < end:
        try:
            socket.create_connection(addrs[0][:2], 1).close()
            break
        except OSError:
            addrs = addrs[1:] + addrs[:1]
            time.sleep(every)
os.environ.clear()
os.environ.update(spec["env"])
sys.argv = [run.__file__, *spec["argv"]]
run.main()
"""


class Standby:
    """At most one standby agent on this node: started between generations, taken by the next one's `start`."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.fd = -1  # the pipe's writing end
        self.since = 0.0

    def ready(self) -> None:
        """Start the standby unless one is there (this node stopped its torch and waits to re-form)."""
        if self.proc is not None and self.proc.poll() is None:
            return
        self.discard()
        rfd, wfd = os.pipe()
        try:
            _prctl()  # looked up here: the child only calls it
            self.proc = subprocess.Popen(
                [sys.executable, "-c", STANDBY_PROGRAM, str(rfd)],
                start_new_session=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(rfd,),
                preexec_fn=_torchrun_dies_with_us,
            )
        except OSError as exc:
            log(f"note: no standby agent ({exc}): the next torchrun starts when the group has formed")
            os.close(wfd)
            self.proc = None
            return
        finally:
            os.close(rfd)
        self.fd, self.since = wfd, time.monotonic()

    def take(self, argv: list[str], env: dict, log_dir: str, base_rank: int, wait: tuple | None) -> Child | None:
        """The generation's torchrun as the standby (None: there is none, or it has exited: start one). `wait`:
        (node 0's address, its rendezvous port, for how long at most, how often) to try before torchrun starts
        (every node but 0)."""
        proc = self.proc
        if proc is None or proc.poll() is not None or not log_dir:
            self.discard()
            return None
        path = ""
        try:
            fd, path = tempfile.mkstemp(prefix="kgen-agent-", suffix=".json")  # this user's alone (0600)
            with os.fdopen(fd, "w") as fh:
                json.dump({"argv": argv[3:], "env": env, "wait": wait}, fh)  # argv[:3]: python -m torch.distributed.run
            os.write(self.fd, path.encode() + b"\n")  # far below PIPE_BUF: never blocks
        except OSError as exc:
            log(f"note: the standby agent not used ({exc}): torchrun starts anew")
            if path:
                with contextlib.suppress(OSError):
                    os.unlink(path)
            self.discard()
            return None
        os.close(self.fd)
        self.proc, self.fd = None, -1
        log(f"torchrun is the standby agent started {time.monotonic() - self.since:.1f}s ago (torch imported since)")
        return Child(argv, env, log_dir, base_rank, proc)

    def discard(self) -> None:
        """End the standby (the run ends, or the node holds idle)."""
        proc, self.proc = self.proc, None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            proc.wait()
        if proc is not None:
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()


STANDBY = Standby()


# ==== entrypoint/parts/torchrun.py:1 ====
"""torchrun: one generation's run, and the node's run loop (the command it runs: entrypoint/parts/command.py)."""


# ==== entrypoint/parts/torchrun.py:57 ====
# --------------------------------------------------------------------------------------------
# torchrun
# --------------------------------------------------------------------------------------------


def start_torchrun(cfg: Config, command: list[str], gen: int) -> Child:
    try:
        import tempfile

        log_dir = tempfile.mkdtemp(prefix=f"kgen-torchrun-g{gen}-")
    except OSError as exc:
        log(f"note: no temporary folder for the workers' output ({exc}): their lines go out unprefixed")
        log_dir = ""
    argv = torchrun_argv(cfg, command, gen, log_dir)
    restarts = str(cfg.restart_base + gen)
    env = dict(os.environ, KGEN_RESTART_COUNT=restarts, KGEN_RDZV_ID=f"{cfg.rdzv_id}-g{gen}")
    env.update(HANG.worker_env(env))  # stacks on a signal, progress files (hang watchdog section)
    log(f"generation {gen}: starting: " + " ".join(argv[1:]))
    wait = None if cfg.is_master else (cfg.master_addr, cfg.master_port, cfg.rdzv_timeout, refused_poll(cfg.nnodes))
    standby = STANDBY.take(argv, env, log_dir, cfg.node_rank * cfg.nproc, wait)  # type: ignore[operator]
    if standby is not None:
        return standby
    try:
        return Child(argv, env, log_dir, cfg.node_rank * cfg.nproc)  # type: ignore[operator]
    except OSError as exc:
        fatal(EXIT_CONFIG, f"cannot start torchrun with {sys.executable}: {exc}")
        raise AssertionError from exc  # unreachable


def poll(sel: selectors.BaseSelector, sigs: Signals, link, timeout: float = 0.1) -> None:
    """One turn of the event loop: wait up to `timeout` for messages or signals and handle them."""
    for key, _ in sel.select(timeout=timeout):
        if key.data[0] == "signal":
            sigs.drain()
        elif link is not None:
            link.on_event(key.data)


def excuse_own_absence(conns, took: float, cfg: Config) -> None:
    """This process was not running for `took` seconds (stopped, starved): that silence is ours,
    not the peers'; do not count it against them. (Whether they dropped us, node 0 tells.)"""
    if took > 2 * cfg.hb_interval:
        for conn in conns:
            conn.last_rx += took


def stop_after_signal(sigs: Signals, child: Child | None, sig: int) -> Stop:
    """Forward `sig` to torchrun, give it SIGNAL_GRACE, then kill what is left."""
    name = signal.Signals(sig).name
    log(f"received {name}: stopping torchrun (SIGKILL after {SIGNAL_GRACE:g}s)")
    if child is not None and child.rc is None:
        try:
            os.killpg(child.pid, sig)
        except OSError:
            pass
        deadline = time.monotonic() + SIGNAL_GRACE
        while child.rc is None and time.monotonic() < deadline:
            if sigs.pending:
                log(f"received {signal.Signals(sigs.pending.pop(0)).name} again: killing the local process tree now")
                break
            sigs.sleep(0.05)
            child.reap()
        finished = child.rc is not None
        child.kill_tree(2.0 if finished else 0.0, signal.SIGTERM if finished else signal.SIGKILL)
        log(f"stopped after {name} (torchrun exit code {child.rc})")
    return Stop(128 + sig, f"signal {name}")


def end_local(cfg: Config, sigs: Signals, child: Child | None, stop: Stop) -> Stop:
    """Stopped by user: end this node's torch tree (SIGTERM, SIGKILL after STOP_GRACE or at a second
    Ctrl-C), then exit with `stop` (a StatefulSet pod holds idle instead: it would retrain)."""
    if child is not None:
        log(f"{stop.reason}: stopping torch (SIGTERM, SIGKILL after {STOP_GRACE:g}s)")
        child.kill_tree(STOP_GRACE, sigs=sigs)
    hold_if_statefulset(cfg, sigs, "stopped by user")
    return stop


def hold_if_statefulset(cfg: Config, sigs: Signals, what: str = "run succeeded") -> None:
    """StatefulSet pods restart on any exit (restartPolicy Always): after a successful or stopped
    run, idle until the pod is deleted (SIGTERM)."""
    STANDBY.discard()
    if cfg.kind != "statefulset":
        return
    log(f"{what}; holding idle so restartPolicy Always does not retrain; kgen stop NAME to remove")
    while not sigs.pending:
        sigs.sleep(3600)


def run_single(cfg: Config, command: list[str], sigs: Signals) -> Stop:
    child = start_torchrun(cfg, command, 0)
    while child.rc is None:
        if sigs.pending:
            sig = sigs.pending.pop(0)
            if sig == signal.SIGINT:
                return end_local(cfg, sigs, child, stopped_by_user(socket.gethostname()))
            return stop_after_signal(sigs, child, sig)
        sigs.sleep(0.1)
        child.reap()
        if child.rc is None and HANG.due(time.monotonic()):
            return end_hang(cfg, child)
    child.failure()
    child.kill_tree(2.0)
    if child.rc:
        return Stop(child.rc, f"torch failed with code {child.rc}")
    hold_if_statefulset(cfg, sigs)
    return Stop(0, "succeeded")


def stop_group(cfg: Config, hub: Hub, sigs: Signals, child: Child | None, host: str) -> Stop:
    """Node 0: stopped by user on `host` (its own Ctrl-C, a node's, or --stop). Every node is told
    at once; nodes that were between generations are told when they rejoin, for STOP_LINGER."""
    stop = stopped_by_user(host)
    log(f"{stop.reason}: stopping every node")
    hub.stop_all(host)
    if child is not None and child.rc is None:
        signal_tree(signal.SIGTERM, child.pid)  # torch ends while the last nodes are told
        child.termed = True  # once: a second SIGTERM cuts torchrun's own shutdown report short
    deadline = time.monotonic() + STOP_LINGER
    while not hub.all_told() and time.monotonic() < deadline and not sigs.pending:
        poll(hub.sel, sigs, hub)
        hub.tick(time.monotonic())
        if child is not None:
            child.reap()
    if not hub.all_told():
        log(f"node rank(s) {sorted(hub.expected - hub.told)} not connected: not told")
    hub.close()
    return end_local(cfg, sigs, child, stop)


def run_hub(cfg: Config, command: list[str], sigs: Signals, sel: selectors.BaseSelector) -> Stop:
    hub = Hub(cfg, sel)
    where = hub.listen(sigs)
    log(
        f"liveness channel listening on port {cfg.liveness_port} at {where}; connections prove membership with "
        f"the run secret; waiting for {cfg.nnodes - 1} node(s), bound KGEN_RDZV_TIMEOUT={cfg.rdzv_timeout}s"
    )
    while True:
        # joining / re-forming: every node must (re)join with a hello
        while not hub.complete():
            poll(sel, sigs, hub)
            if sigs.pending and sigs.pending[0] == signal.SIGINT:
                sigs.pending.pop(0)
                return stop_group(cfg, hub, sigs, None, socket.gethostname())
            if sigs.pending:
                hub.close()
                return stop_after_signal(sigs, None, sigs.pending.pop(0))
            if hub.stop_host is not None:
                return stop_group(cfg, hub, sigs, None, hub.stop_host)
            now = time.monotonic()
            hub.tick(now)
            reason = hub.form_deadline_passed(now)
            if hub.script_fail is not None and hub.script_fail[3]:  # a node's entrypoint failed meanwhile
                blame, _, _, reason = hub.script_fail
                log(f"FAIL-STOP: {reason}")
                hub.end(EXIT_RUN_FAILED, reason, blame)
                return Stop(EXIT_RUN_FAILED, f"the run failed ({reason})")
            if reason is not None:
                log(f"FAIL-STOP: {reason}")
                hub.end(EXIT_PEERS_MISSING if cfg.max_reformations else EXIT_PEER_LOST, reason)
                return Stop(EXIT_PEERS_MISSING, f"group could not form: {reason}")
        gen = hub.next_generation()
        if gen > 0 and gen > cfg.max_reformations:
            reason = f"re-formation limit reached (KGEN_MAX_REFORMATIONS={cfg.max_reformations}): {hub.why_forming}"
            hub.end(EXIT_RUN_FAILED, reason)
            return Stop(EXIT_RUN_FAILED, reason)
        formed = time.monotonic() - hub.form_started
        log(f"all {cfg.nnodes} nodes connected after {formed:.1f}s: generation {gen}")
        hub.start(gen)
        stop = HEALTH.run(cfg, sigs, hub, gen)  # the health gate (generation 0): a Stop ends the run here
        if stop is not None:
            return stop
        child = start_torchrun(cfg, command, gen)
        own_rc: int | None = None
        now = time.monotonic()
        while True:
            before = now
            poll(sel, sigs, hub)
            child.reap()
            now = time.monotonic()
            took = now - before  # one turn of this loop (normally <= 0.1 s)
            finished = hub.state == "finishing"  # own torchrun succeeded: the others no longer watch node 0
            if took > cfg.hb_timeout - cfg.hb_interval and finished:
                log(f"this node was frozen for {took:.1f}s after it finished: the others finish by themselves")
                hub.close()
                hold_if_statefulset(cfg, sigs)
                return Stop(0, "succeeded")
            if took > cfg.hb_timeout - cfg.hb_interval:  # the others have (almost surely) dropped us
                reason = (
                    f"this node was frozen for {took:.1f}s (about KGEN_HEARTBEAT_TIMEOUT={cfg.hb_timeout:g}s): the "
                    f"others have dropped it"
                )
                log(f"FAIL-STOP: {reason}")
                hub.close()
                child.kill_tree(ABORT_GRACE)
                return Stop(EXIT_DROPPED, f"dropped from the group ({reason})")
            excuse_own_absence(hub.peers.values(), took, cfg)
            if sigs.pending and sigs.pending[0] == signal.SIGINT:
                sigs.pending.pop(0)
                return stop_group(cfg, hub, sigs, child, socket.gethostname())
            if hub.stop_host is not None:
                return stop_group(cfg, hub, sigs, child, hub.stop_host)
            if sigs.pending and finished:  # its training is done: a signal now ends no training
                name = signal.Signals(sigs.pending.pop(0)).name
                log(f"received {name} after this node finished: the others finish by themselves")
                hub.close()
                return Stop(0, "succeeded")
            if sigs.pending:
                sig = sigs.pending[0]
                reason = f"node 0 received {signal.Signals(sig).name} (pod deleted or stopped)"
                verdict, code, _ = decide(cfg, "lost", hub.gen)
                if hub.state == "training":
                    hub.abort(reason) if verdict == REFORM else hub.end(code, reason)
                hub.close()
                return stop_after_signal(sigs, child, sigs.pending.pop(0))
            if child.rc is not None and own_rc is None:
                own_rc = child.rc
                if own_rc == 0:
                    child.kill_tree(2.0)
                    log("torchrun finished successfully; waiting for the other nodes to finish")
                    hub.finish()
                else:
                    log(f"torchrun exited with code {own_rc}")
                    hub.script_failed(0, own_rc)  # first: who reported first is who node 0 blames,
                    said = child.failure()
                    if said and said.get("peer"):  # unless node 0's own workers only lost a peer
                        hub.own_failure_was_a_peers()
            hub.tick(now)
            if own_rc is None and hub.state == "training" and HANG.due(now):
                return end_hang(cfg, child, hub, sigs)
            if hub.state == "finishing":
                if hub.lost is not None:
                    log(f"{hub.lost}; this node had already finished successfully")
                    hub.close()
                    hold_if_statefulset(cfg, sigs)
                    return Stop(0, "succeeded")
                if hub.all_done():
                    hub.close()
                    log("all nodes finished")
                    hold_if_statefulset(cfg, sigs)
                    return Stop(0, "succeeded")
                continue
            fault, blame = None, None  # type: ignore[assignment]
            if hub.script_fail is not None and hub.script_fail[3]:  # a lost connection follows it: not the cause
                blame, _, _, reason = hub.script_fail
                fault, what = "internal", "the run failed"
            elif hub.lost is not None:
                fault, reason, what = "lost", hub.lost, "peer lost"
            elif hub.script_fail is not None and now - hub.script_fail[2] >= FAIL_VERDICT_WAIT:
                blame, rc, _, _ = hub.script_fail
                fault, reason, what = "script", f"node {blame}'s torchrun exited with code {rc}", "script failed"
            if fault is None:
                continue
            verdict, code, why = decide(cfg, fault, hub.gen)
            if verdict == REFORM:
                log(f"{what}: {reason}; stopping torch and re-forming (generation {hub.gen + 1})")
                hub.abort(reason)  # type: ignore[arg-type]
                child.kill_tree(ABORT_GRACE)
                STANDBY.ready()  # the next generation's agent imports torch while the group waits
                break
            if code == EXIT_RUN_FAILED and fault == "lost":
                reason = f"{why}: {reason}"
            log(f"FAIL-STOP: {reason}")
            hub.end(code, reason, blame)  # type: ignore[arg-type]
            child.kill_tree(ABORT_GRACE)
            if own_rc and blame == 0:
                return Stop(own_rc, f"torch failed with code {own_rc}")
            return Stop(code, f"{what} ({reason})")


def spoke_signal(cfg: Config, sigs: Signals, spoke: Spoke, child: Child | None) -> Stop:
    """A signal on a connected node: Ctrl-C (SIGINT) stops the whole group through node 0; any
    other signal (SIGTERM: pod deleted) makes this node leave, and the group re-forms without it."""
    sig = sigs.pending.pop(0)
    if sig == signal.SIGINT:
        host = socket.gethostname()
        spoke.send({"t": MSG_STOP, "host": host}, True)
        log("received SIGINT: stopped by user; node 0 told to stop every node")
        return end_local(cfg, sigs, child, stopped_by_user(host))
    spoke.send({"t": MSG_LEAVE, "reason": f"received {signal.Signals(sig).name} (pod deleted or stopped)"}, True)
    return stop_after_signal(sigs, child, sig)


def run_spoke(cfg: Config, command: list[str], sigs: Signals, sel: selectors.BaseSelector) -> Stop:
    last = -1
    while True:
        spoke = Spoke(cfg, sel, wait_for_master(cfg, sigs, last))
        while spoke.start_gen is None and spoke.verdict is None:
            poll(sel, sigs, spoke)
            if sigs.pending:
                return spoke_signal(cfg, sigs, spoke, None)
            spoke.tick(time.monotonic())
        if spoke.start_gen is None:
            verdict = spoke.verdict
            spoke.close()
            if verdict[0] == "stop":  # type: ignore[index]
                log(f"node 0 says: stopped by user on {verdict[1]}")  # type: ignore[index]
                return end_local(cfg, sigs, None, stopped_by_user(verdict[1]))  # type: ignore[index]
            if verdict[0] == "end":  # type: ignore[index]
                log(f"FAIL-STOP: node 0 ended the run: {verdict[-1]}")  # type: ignore[index]
                return Stop(verdict[1], f"node 0 ended the run ({verdict[-1]})")  # type: ignore[index]
            log(f"node 0 lost while waiting to start ({verdict[-1]}): joining again")  # type: ignore[index]
            continue
        gen = spoke.start_gen
        stop = HEALTH.run(cfg, sigs, spoke, gen)  # the health gate (generation 0): a Stop ends the run here
        if stop is not None:
            return stop
        child = start_torchrun(cfg, command, gen)
        own_rc: int | None = None
        now = time.monotonic()
        while True:
            before = now
            poll(sel, sigs, spoke)
            child.reap()
            now = time.monotonic()
            excuse_own_absence([spoke.conn], now - before, cfg)
            if sigs.pending:
                return spoke_signal(cfg, sigs, spoke, child)
            if child.rc is not None and own_rc is None:
                own_rc = child.rc
                if own_rc == 0:
                    child.kill_tree(2.0)
                    log("torchrun finished successfully")
                    spoke.send({"t": MSG_DONE}, True)
                    hold_if_statefulset(cfg, sigs)
                    return Stop(0, "succeeded")
                log(f"torchrun exited with code {own_rc}; node 0 decides: a lost node (re-form) or a script error")
                spoke.send({"t": MSG_FAIL, "rc": own_rc})  # first: node 0 blames whoever reports first
                child.failure()
            spoke.tick(time.monotonic())
            HANG.report(spoke, time.monotonic())
            if spoke.verdict is None:
                continue
            kind = spoke.verdict[0]
            reason = spoke.verdict[-1]
            spoke.close()
            if kind == "stop":
                log(f"node 0 says: stopped by user on {reason}")
                return end_local(cfg, sigs, child, stopped_by_user(reason))
            if kind == "end":
                log(f"FAIL-STOP: node 0 ended the run: {reason}")
                child.kill_tree(ABORT_GRACE)
                if own_rc and spoke.verdict[2] == cfg.node_rank:
                    return Stop(own_rc, f"torch failed with code {own_rc}")
                return Stop(spoke.verdict[1], f"node 0 ended the run ({reason})")
            if kind == "lost":
                verdict, code, why = decide(cfg, "lost", gen)  # type: ignore[assignment]
                if verdict != REFORM:  # type: ignore[comparison-overlap]
                    log(f"FAIL-STOP: {reason}")
                    child.kill_tree(ABORT_GRACE)
                    what = "peer lost" if code == EXIT_PEER_LOST else why
                    return Stop(code, f"{what} (node 0: {reason})")
                reason = f"node 0 lost: {reason}"
            log(f"re-forming: {reason}; stopping torch (generation {gen})")
            child.kill_tree(ABORT_GRACE)
            STANDBY.ready()  # the next generation's agent imports torch while the group waits
            last = gen
            break


def run(cfg: Config, command: list[str]) -> int:
    """Wait for node 0 (non-masters), start torchrun, supervise it and the liveness channel.
    Ends by raising Stop (exit code and reason), which main() turns into the last log line."""
    sigs = Signals()
    sel = selectors.DefaultSelector()
    sel.register(sigs.rfd, selectors.EVENT_READ, ("signal", None))
    set_child_subreaper()
    check_torch()
    try:
        if cfg.nnodes == 1:
            stop = run_single(cfg, command, sigs)
        elif cfg.is_master:
            stop = run_hub(cfg, command, sigs, sel)
        else:
            stop = run_spoke(cfg, command, sigs, sel)
    except Stop:
        raise
    except Exception as exc:  # noqa: BLE001 - kgen's own fault: said so, never "the script failed"
        stop = internal_stop(exc)
    finally:
        STANDBY.discard()  # not taken: the run ended between generations
    HANG.cleanup()  # hang watchdog section
    raise stop


def internal_stop(exc: BaseException) -> Stop:
    """kgen's own code failed on this node (a bug): the traceback and the reason into the log, the group
    told (node 0 ends the run, every other node exits 5; a node tells node 0, which does the same), this
    node's torch processes ended, exit EXIT_INTERNAL."""
    reason = internal_error(exc)
    link, child = Running.link, Running.child
    try:
        if isinstance(link, Hub):
            link.end(EXIT_RUN_FAILED, reason, 0)
            link.close()
        elif isinstance(link, Spoke) and not link.conn.closed:
            what = f"{type(exc).__name__}: {shown(str(exc), 300)}"
            link.send({"t": MSG_FAIL, "rc": EXIT_INTERNAL, "internal": what}, then_close=True)
    except Exception:  # noqa: BLE001 - best effort: the others notice the closed connection anyway
        pass
    try:
        if child is not None:
            child.kill_tree(ABORT_GRACE)
        else:
            signal_tree(signal.SIGKILL)
    except Exception:  # noqa: BLE001
        signal_tree(signal.SIGKILL, child.pid if child is not None else None)
    return Stop(EXIT_INTERNAL, reason)


def request_stop(env: dict) -> int:
    """--stop: ask node 0 over the liveness channel to stop the whole group (run's environment,
    any host). 0: node 0 is stopping it; 3: node 0 not reachable; 2: configuration, wrong secret."""
    cfg = load_config(env, with_rank=False)
    if cfg.problems:
        fatal(EXIT_CONFIG, cfg.problems)
    if cfg.nnodes == 1:
        fatal(EXIT_CONFIG, "--stop: NNODES=1 has no liveness channel: stop that node with Ctrl-C (SIGINT)")
    target = f"{cfg.master_addr}:{cfg.liveness_port}"
    host = socket.gethostname()
    try:
        told, detail = tell_node0_stop(cfg, host, STOP_BUDGET)
    except Denied as exc:
        wrong_secret(cfg, target, str(exc))
        raise AssertionError from exc  # unreachable
    if not told:  # one line: this command is no node, so no "stopped:" line follows (fatal would add one)
        sys.stderr.write(
            f"kgen-entrypoint: error: --stop: node 0 at {target} not reachable within {STOP_BUDGET:g}s ({detail}): "
            "nothing was stopped; the run may have ended, or node 0 is down (then Ctrl-C each node)\n"
        )
        return EXIT_MASTER_UNREACHABLE
    print(f"kgen-entrypoint: stop: {detail}; every node exits {EXIT_STOPPED} (stopped by user on {host})", flush=True)
    return 0


# ==== entrypoint/parts/smoke.py:1 ====
"""The --smoke-test worker (run by torchrun on every rank): an all-reduce check."""


# ==== entrypoint/parts/smoke.py:9 ====
# --------------------------------------------------------------------------------------------
# --smoke-test worker (run by torchrun on every rank)
# --------------------------------------------------------------------------------------------


def smoke_worker() -> int:
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(local)
        device, backend = torch.device("cuda", local), "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    tag = f"[smoke rank {rank}/{world}]"
    t0 = time.monotonic()
    dist.init_process_group(backend, timeout=timedelta(seconds=120))
    t_init = time.monotonic() - t0
    numel = (64 << 20 if cuda else 4 << 20) // 4
    x = torch.full((numel,), float(rank + 1), dtype=torch.float32, device=device)
    expected = world * (world + 1) / 2
    dist.all_reduce(x)  # warm-up and correctness
    if cuda:
        torch.cuda.synchronize()
    bad = (x != expected).sum().item()
    if bad:
        sys.stderr.write(
            f"{tag} FAIL: all-reduce sum wrong in {bad} of {numel} elements: got {x[0].item()} expected {expected}\n"
        )
        return 1
    iters = 5
    times = []
    for _ in range(iters):
        x.fill_(float(rank + 1))
        if cuda:
            torch.cuda.synchronize()
        t = time.monotonic()
        dist.all_reduce(x)
        if cuda:
            torch.cuda.synchronize()
        times.append(time.monotonic() - t)
        if x[0].item() != expected or x[-1].item() != expected:
            sys.stderr.write(f"{tag} FAIL: all-reduce sum {x[0].item()} != {expected}\n")
            return 1
    best = min(times)
    size = numel * 4
    algbw = size / best / 1e9
    busbw = algbw * 2 * (world - 1) / world if world > 1 else algbw
    timing = torch.tensor([best], dtype=torch.float64, device=device)
    dist.all_reduce(timing, op=dist.ReduceOp.MAX)
    print(f"{tag} ok: backend {backend}, init {t_init:.2f}s, sum {expected:g} correct", flush=True)
    if rank == 0:
        slow = timing.item()
        print(
            f"kgen smoke-test: PASS world_size={world} backend={backend} "
            f"all-reduce {size >> 20} MiB: {slow * 1e3:.1f} ms (slowest rank), "
            f"algbw {size / slow / 1e9:.3f} GB/s, busbw "
            f"{size / slow / 1e9 * 2 * (world - 1) / max(world, 1):.3f} GB/s "
            f"(rank 0: {algbw:.3f}/{busbw:.3f})",
            flush=True,
        )
    dist.barrier()
    dist.destroy_process_group()
    return 0


# ==== entrypoint/parts/diagnose.py:1 ====
"""--diagnose: one PASS/FAIL line per check of the environment and the network."""


# ==== entrypoint/parts/diagnose.py:24 ====
# --------------------------------------------------------------------------------------------
# --diagnose
# --------------------------------------------------------------------------------------------


def _iface_check(var: str, value: str | None) -> tuple[bool, str]:
    if not value:
        return True, f"{var} not set: the library picks an interface itself"
    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError as exc:
        return False, f"{var}={value}: cannot list interfaces ({exc})"
    spec = value
    exclude = spec.startswith("^")
    exact = spec.lstrip("^").startswith("=")
    wanted = [w for w in spec.lstrip("^").lstrip("=").split(",") if w]
    if exclude:
        left = [n for n in names if not any((n == w) if exact else n.startswith(w) for w in wanted)]
        if left:
            return True, f"{var}={value}: usable {', '.join(left)}"
        return False, f"{var}={value} excludes every interface ({', '.join(names)})"
    missing = [w for w in wanted if not any((n == w) if exact else n.startswith(w) for n in names)]
    if missing:
        return False, (
            f"{var}={value}: no interface matches {', '.join(missing)} (have "
            f"{', '.join(names)}); set it to the pod network interface, e.g. eth0"
        )
    return True, f"{var}={value}: present"


def probe_node0(cfg: Config, host: str) -> tuple[bool, str]:
    """Ask node 0's entrypoint which nodes have joined (an authenticated probe: node 0 tells only a
    holder of the run's secret). Returns (ok, detail after "<host>:<port> ")."""
    if cfg.secret is None:
        try:
            sock = socket.create_connection((host, cfg.liveness_port), timeout=3)
        except OSError as exc:
            return False, f"does not accept ({exc.strerror or exc})"
        try:
            line, _ = _read_line(sock, b"", time.monotonic() + 3, PREAUTH_LINE_MAX)
            hello = parse_plain(line)
        except (OSError, ProtocolError):
            hello = {"t": None}
        finally:
            sock.close()
        if hello["t"] != MSG_CHALLENGE:
            return False, "accepts, but what answers is not a kgen entrypoint (no challenge)"
        return True, (
            f"accepts (kgen liveness protocol {hello['v']}); without the run's secret node 0 tells nothing "
            f"more: set KGEN_SECRET_FILE to see which nodes joined"
        )
    try:
        sock, _, answer, _ = open_session(cfg, {"t": MSG_PROBE}, timeout=3, host=host)
    except Denied as exc:
        return False, (
            f"accepts, but node 0 refused this host's proof of the run secret ({exc}): {cfg.secret_source} "
            f"gives another secret than node 0's"
        )
    except ProtocolError as exc:
        return False, f"accepts, but did not prove it is this run's node 0 ({exc})"
    except OSError as exc:
        return False, f"does not accept ({getattr(exc, 'strerror', None) or exc})"
    sock.close()
    if answer["t"] != MSG_STATUS:
        return False, f"accepts, but node 0 answered {answer['t']!r}"
    joined, nnodes = set(answer["joined"]), answer["nnodes"]
    missing = [r for r in range(1, min(nnodes, 1 << 16)) if r not in joined]
    return True, (
        f"accepts; node 0's entrypoint (run {shown(answer['id'])}) has {len(joined)} of {nnodes - 1} peers"
        + (f", missing {missing[:64]}" if missing else "")
    )


def running_job_status(cfg: Config) -> str:
    """Inside a running job: node 0's own entrypoint answers an authenticated probe on the liveness port."""
    if cfg.secret is None:
        return ""
    for host in dict.fromkeys({"0.0.0.0": "127.0.0.1", "::": "::1"}.get(h, h) for h in bind_addresses(cfg)[0]):
        try:
            sock, _, answer, _ = open_session(cfg, {"t": MSG_PROBE}, timeout=2, host=host)
        except (OSError, ProtocolError, Denied):
            continue
        sock.close()
        if answer["t"] == MSG_STATUS and answer["id"] == cfg.rdzv_id:
            return f"node 0's entrypoint (run {cfg.rdzv_id}) is running with {len(answer['joined'])} peer(s)"
    return ""


def _proc_net_addr(text: str, v6: bool) -> str:
    raw = bytes.fromhex(text)
    if not v6:
        return socket.inet_ntop(socket.AF_INET, raw[::-1])
    return socket.inet_ntop(socket.AF_INET6, b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4)))


def listening_addresses(port: int) -> list[str] | None:
    """The addresses this host's listening TCP sockets on `port` are bound to (/proc/net/tcp, tcp6);
    None when neither can be read."""
    found: set[str] = set()
    readable = False
    for path, v6 in (("/proc/net/tcp", False), ("/proc/net/tcp6", True)):
        try:
            with open(path) as fh:
                rows = fh.read().splitlines()[1:]
        except OSError:
            continue
        readable = True
        for row in rows:
            fields = row.split()
            if len(fields) < 4 or fields[3] != "0A":  # 0A = LISTEN
                continue
            addr, _, port_hex = fields[1].rpartition(":")
            try:
                if int(port_hex, 16) == port:
                    found.add(_proc_net_addr(addr, v6))
            except ValueError:
                continue
    return sorted(found) if readable else None


def interface_addresses() -> list[tuple[str, str]]:
    """(interface, IPv4 address) of this host's interfaces (Linux SIOCGIFADDR); [] when unknown."""
    try:
        import fcntl
        import struct

        names = [name for _, name in socket.if_nameindex()]
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    except (ImportError, OSError):
        return []
    out = []
    try:
        for name in names:
            try:
                res = fcntl.ioctl(sock.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))  # SIOCGIFADDR
            except OSError:
                continue
            out.append((name, socket.inet_ntoa(res[20:24])))
    finally:
        sock.close()
    return out


def exposure(port: int, authenticated: bool, env: dict) -> str:
    """Node 0: who can reach `port`, from the addresses its listeners are bound to (where it can tell)."""
    bound = listening_addresses(port)
    if bound is None:
        return f"{port}: cannot tell (/proc/net/tcp is not readable)"
    guard = (
        "kgen's liveness channel authenticates every connection"
        if authenticated
        else "torch's store does not authenticate, and torch 2.13 cannot bind it to one address (torchrun's static "
        "rendezvous gives its TCPStore no address or socket: it listens on every interface): fence this port (a "
        "NetworkPolicy on Kubernetes, a host firewall on bare metal; README, Security)"
    )
    if not bound:
        later = "" if authenticated else f"; once it runs: {guard}"
        return f"{port}: nothing listens on it yet (the run is not running on this node): cannot tell{later}"
    if any(a in ("0.0.0.0", "::") for a in bound):
        addrs = [(name, ip) for name, ip in interface_addresses() if not ip.startswith("127.")]
        fabric = [v for v in (env.get("GLOO_SOCKET_IFNAME"), env.get("NCCL_SOCKET_IFNAME")) if v]
        where = ", ".join(f"{ip} ({name})" for name, ip in addrs) or "every address of this host"
        text = f"{port} listens on all interfaces ({', '.join(bound)}): reachable at {where} by any host routed there"
        if fabric:
            wanted = [w for spec in fabric for w in spec.lstrip("^=").split(",") if w]
            outside = [f"{ip} ({name})" for name, ip in addrs if not any(name.startswith(w) for w in wanted)]
            if outside:
                text += f"; outside the training fabric ({', '.join(fabric)}) too: {', '.join(outside)}"
        return f"{text}; {guard}"
    if all(a.startswith("127.") or a == "::1" for a in bound):
        return f"{port} is bound to loopback only ({', '.join(bound)}): not reachable from other hosts"
    return f"{port} is bound to {', '.join(bound)} only: reachable only through that address; {guard}"


def diagnose(env: dict) -> int:
    results: list[tuple[bool, str, str]] = []

    def check(ok: bool, name: str, detail: str) -> None:
        results.append((ok, name, detail))
        print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}", flush=True)

    cfg = load_config(env)
    rank_problems = [p for p in cfg.problems if "rank" in p and "NNODES is not" not in p and p != cfg.secret_problem]
    env_problems = [p for p in cfg.problems if p not in rank_problems and p != cfg.secret_problem]
    if env_problems:
        for p in env_problems:
            check(False, "environment", p)
    else:
        check(
            True,
            "environment",
            f"NNODES={cfg.nnodes} NPROC_PER_NODE={cfg.nproc} MASTER_ADDR="
            f"{cfg.master_addr} MASTER_PORT={cfg.master_port} liveness port "
            f"{cfg.liveness_port}",
        )
    if cfg.secret_problem:
        check(False, "run secret", cfg.secret_problem)
    elif cfg.secret is not None:
        check(True, "run secret", f"{cfg.secret_source} ({len(cfg.secret)} characters)")
    if rank_problems:
        for p in rank_problems:
            check(False, "node rank", p)
    elif cfg.node_rank is not None:
        check(
            True,
            "node rank",
            f"{cfg.node_rank} (from {cfg.rank_source}; looked at {', '.join(cfg.rank_looked_at) or 'nothing else'})",
        )
    if cfg.master_addr:
        try:
            addrs = sorted({a[0] for a in resolve(cfg.master_addr, cfg.master_port or 0)})
            check(True, "master DNS", f"{cfg.master_addr} -> {', '.join(addrs)}")
        except socket.gaierror as exc:
            addrs = []
            check(
                False,
                "master DNS",
                f"{cfg.master_addr} does not resolve ({exc.strerror}): pod "
                f"0 must exist and the headless Service must publish "
                f"not-ready addresses; check subdomain/serviceName",
            )
        if addrs and cfg.master_port and cfg.liveness_port:
            if cfg.node_rank == 0:
                running = running_job_status(cfg)
                for label, port in (("rendezvous", cfg.master_port), ("liveness", cfg.liveness_port)):
                    s = socket.socket()
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    try:
                        s.bind(("0.0.0.0", port))
                        check(True, f"master {label} port", f"{port} is free on node 0")
                    except OSError as exc:
                        if running:
                            check(True, f"master {label} port", f"{port} is in use by this job: {running}")
                        else:
                            check(
                                False,
                                f"master {label} port",
                                f"{port} cannot be bound on node 0 ({exc.strerror}) and no kgen entrypoint of "
                                f"this run answers on the liveness port: another process holds it; pick another "
                                f"port",
                            )
                    finally:
                        s.close()
                for label, port in (("rendezvous", cfg.master_port), ("liveness", cfg.liveness_port)):
                    check(True, f"exposure of the {label} port", exposure(port, label == "liveness", env))
            else:
                ok, detail = probe_node0(cfg, cfg.master_addr)
                if not ok and detail.startswith("does not accept"):
                    detail += (
                        ": node 0's entrypoint must be running; check its logs, the container ports and NetworkPolicies"
                    )
                check(ok, "master liveness port", f"{cfg.master_addr}:{cfg.liveness_port} {detail}")
                port = cfg.master_port
                try:
                    socket.create_connection((cfg.master_addr, port), timeout=3).close()
                    check(True, "master rendezvous port", f"{cfg.master_addr}:{port} accepts")
                except OSError as exc:
                    check(
                        False,
                        "master rendezvous port",
                        f"{cfg.master_addr}:{port} does not accept ({exc.strerror or exc}): "
                        f"node 0's entrypoint/torchrun must be running; check its logs, the "
                        f"container ports and NetworkPolicies",
                    )
    try:
        st = os.statvfs("/dev/shm")
        size = st.f_frsize * st.f_blocks
        mib = size >> 20
        if mib < 1024:
            check(
                False,
                "/dev/shm",
                f"{mib} MiB: NCCL and DataLoader workers need more; mount a "
                f"memory-backed emptyDir at /dev/shm (values shmSize, >= 1Gi)",
            )
        else:
            check(True, "/dev/shm", f"{mib} MiB")
    except OSError as exc:
        check(False, "/dev/shm", f"not available ({exc}): mount a memory-backed emptyDir there")
    try:
        import torch

        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if gpus == 0:
            check(True, "GPUs", f"none visible: CPU job, gloo backend, NPROC_PER_NODE={cfg.nproc}")
        elif cfg.nproc and cfg.nproc > gpus:
            check(
                False,
                "GPUs",
                f"{gpus} visible but NPROC_PER_NODE={cfg.nproc}: request "
                f"{cfg.nproc} GPUs per pod or lower NPROC_PER_NODE",
            )
        else:
            extra = f" ({gpus - cfg.nproc} idle)" if cfg.nproc and gpus > cfg.nproc else ""
            check(True, "GPUs", f"{gpus} visible, NPROC_PER_NODE={cfg.nproc}{extra}")
    except Exception as exc:  # noqa: BLE001 - any import failure is the finding
        check(False, "GPUs", f"cannot import torch with {sys.executable} ({exc}): use an image with torch installed")
    for var in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
        ok, detail = _iface_check(var, env.get(var))
        check(ok, "interface", detail)
    failed = sum(1 for ok, _, _ in results if not ok)
    print(f"{'PASS' if not failed else 'FAIL'} summary: {len(results) - failed} passed, {failed} failed", flush=True)
    return 1 if failed else 0


# ==== entrypoint/parts/hang.py:1 ====
"""The hang watchdog and the training processes' stacks (--stacks)."""


# ==== entrypoint/parts/hang.py:23 ====
# --------------------------------------------------------------------------------------------
# Hang watchdog and stacks (docs/entrypoint.md#when-a-run-hangs)
#
# Stacks: every generation the workers get a sitecustomize (first on their PYTHONPATH, in this node's
# hang folder; it then runs the one that was there before) that registers faulthandler on
# STACKS_SIGNAL with a dump file of its own and records the process in <hang>/stacks/<pid>.json. Only
# recorded processes with the recorded start time are ever signalled (the default action would end any
# other). The watchdog (KGEN_HANG_TIMEOUT > 0): progress is a line of a rank (the Pump) or a step a rank
# wrote to KGEN_PROGRESS_FILE (kgen_progress(step), docs); a node tells node 0 its ranks made progress
# (`prog`, at most once per HANG_POLL); node 0 decides for the group: no progress for the timeout ->
# every node dumps and sends its ranks' stacks (`dump` -> `stacks` per rank, `stacked`), node 0 groups
# identical stacks (the odd ones out first), logs the report (HANG_MARK: a JSON line kgen status reads)
# and ends the run: every node exits EXIT_HANG. The size of this section counts twice in a pod's
# ConfigMap (tests/test_size_budget.py): keep it lean; the docs say the rest.
# --------------------------------------------------------------------------------------------

HANG_MARK = "kgen-entrypoint: hang: "
HANG_POLL, DUMP_WAIT, STACKS_WAIT, STACK_FRAMES = 1.0, 2.0, 4.0, 60
STACKS_SIGNAL = signal.SIGRTMIN + 4 if hasattr(signal, "SIGRTMIN") else signal.SIGUSR2
MSG_PROGRESS, MSG_DUMP, MSG_STACKS, MSG_STACKED = "prog", "dump", "stacks", "stacked"  # docs: When a run hangs
_WRAPPERS = {"wrapper", "inner", "wrapped", "fn", "decorate_context", "__call__"}
_FRAME_OK = lambda f: type(f) is list and len(f) == 3 and _TEXT(f[0]) and _int(0)(f[1]) and _TEXT(f[2])  # noqa: E731
FIELDS.update(
    {
        MSG_PROGRESS: {},
        MSG_DUMP: {},
        MSG_STACKS: {
            "rank": (_RANK, REQUIRED),
            "pid": (_int(0), 0),
            "frames": (lambda v: type(v) is list and len(v) <= STACK_FRAMES and all(map(_FRAME_OK, v)), []),
            **{k: (_TEXT, "") for k in ("what", "where", "why", "step")},
        },
        MSG_STACKED: {},
    }
)
SITECUSTOMIZE = r"""import os, sys
def _kgen():
    d, r = os.environ.get("KGEN_HANG_DIR"), os.environ.get("RANK")
    if d and r and os.environ.get("LOCAL_RANK") and not os.environ.get("KGEN_STACKS_PID"):
        try:
            import faulthandler, json, threading
            p, s = os.getpid(), os.path.join(d, "stacks", "%d." % os.getpid())
            sys._kgen_dump = open(s + "txt", "ab", buffering=0)
            faulthandler.register(int(os.environ["KGEN_STACKS_SIGNAL"]), sys._kgen_dump, all_threads=True)
            os.environ["KGEN_STACKS_PID"], os.environ["KGEN_PROGRESS_FILE"] = str(p), os.path.join(d, "progress", r)
            st = open("/proc/self/stat", "rb").read().rsplit(b")", 1)[1].split()[19].decode()
            with open(s + "tmp", "w") as fh:
                json.dump({"rank": int(r), "pid": p, "start": st, "main": threading.get_ident()}, fh)
            os.replace(s + "tmp", s + "json")
        except Exception as e:
            sys.stderr.write("kgen: no stacks on a signal in this process: %s\n" % e)
    import importlib.machinery as m, importlib.util as u
    h = os.path.dirname(os.path.abspath(__file__))
    spec = m.PathFinder.find_spec("sitecustomize", [p for p in sys.path if os.path.abspath(p or ".") != h])
    if spec and spec.loader:
        sys.modules["sitecustomize"] = u.module_from_spec(spec)
        spec.loader.exec_module(sys.modules["sitecustomize"])
_kgen()
"""


def hang_home(env: dict) -> str:
    """This node's hang folder: <run dir>/hang (bare metal, Slurm), else a private one in the temporary folder."""
    if (env.get("KGEN_RUN_DIR") or "").strip():
        return os.path.join(env["KGEN_RUN_DIR"].strip(), "hang")
    import tempfile

    tag = "-".join(x for x in ((env.get("MASTER_PORT") or "").strip(), (env.get("NODE_RANK") or "").strip(),
                               socket.gethostname()) if x)  # fmt: skip
    return os.path.join(tempfile.gettempdir(), f"kgen-hang-{os.getuid()}-{re.sub(r'[^0-9A-Za-z]', '_', tag)}")


def _private_dir(path: str) -> bool:
    try:
        os.makedirs(path, 0o700, exist_ok=True)
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077


def parse_dump(text: str) -> list[tuple[int, list[list]]]:
    """faulthandler's dump: [(thread id, frames innermost first as [file, line, function])]."""
    threads: list[tuple[int, list[list]]] = []
    for line in text.splitlines():
        if line.startswith(("Thread 0x", "Current thread 0x")):
            threads.append((int(line.split("0x", 1)[1].split()[0], 16), []))
        elif line.startswith('  File "') and threads and " in " in line:
            path, _, rest = line[8:].rpartition('", line ')
            num, _, func = rest.partition(" in ")
            if num.isdigit():
                threads[-1][1].append([path, int(num), func])
    return threads


def is_library(path: str) -> bool:
    """A frame of the standard library or of an installed package: not the user's own code."""
    import sysconfig

    libs = {sysconfig.get_paths().get(k, "") for k in ("stdlib", "platstdlib")} - {""}
    return "-packages/" in path or path.startswith("<frozen ") or any(path.startswith(lib + "/") for lib in libs)


def stack_summary(frames: list[list]) -> tuple[str, str]:
    """(what, where) of a stack (innermost frame first): the library call the user's innermost frame is in
    ("queue.get"; decorators skipped) and that frame's file:line."""
    user = next((i for i, f in enumerate(frames) if not is_library(f[0])), len(frames))
    inside = [f for f in frames[:user] if f[2] not in _WRAPPERS and not f[2].startswith("_")] or frames[:user]
    at = frames[user] if user < len(frames) else frames[-1] if frames else None
    if at is None:
        return "", ""
    called = f"{os.path.basename(inside[-1][0]).removesuffix('.py')}.{inside[-1][2]}" if inside else at[2]
    return called, f"{at[0]}:{at[1]}"


def collect_stacks(home: str, wait: float = DUMP_WAIT) -> list[dict]:
    """Every registered training process of this node dumps its stacks: [{rank, pid, frames (main thread,
    innermost first), what, where, why, threads, text}]."""
    sdir, procs = os.path.join(home, "stacks"), []
    for name in sorted(n for n in os.listdir(sdir) if n.endswith(".json")) if os.path.isdir(sdir) else []:
        try:
            with open(os.path.join(sdir, name)) as fh:
                rec = json.load(fh)
            pid, path = int(rec["pid"]), os.path.join(sdir, f"{rec['pid']}.txt")
            with open(f"/proc/{pid}/stat", "rb") as fh:
                if fh.read().rsplit(b")", 1)[1].split()[19].decode() != rec["start"]:
                    continue  # gone, or its PID is another process's now: never signalled
            size = os.path.getsize(path)
            os.kill(pid, STACKS_SIGNAL)
            procs.append([rec, size, path, 0.0, -1])
        except (OSError, ValueError, KeyError, TypeError, IndexError):
            continue
    deadline = time.monotonic() + wait
    while procs and time.monotonic() < deadline:  # every dump written, and not growing for 0.15 s
        time.sleep(0.05)
        now = time.monotonic()
        for p in procs:
            size = os.path.getsize(p[2]) if os.path.exists(p[2]) else p[4]
            p[3], p[4] = (now, size) if size != p[4] else (p[3], size)
        if all(p[4] > p[1] and now - p[3] >= 0.15 for p in procs):
            break
    out = []
    for rec, start, path, _, _ in procs:
        try:
            with open(path, "rb") as fh:
                fh.seek(start)
                text = fh.read(1 << 18).decode("utf-8", "replace")
        except OSError:
            text = ""
        threads = parse_dump(text)
        frames = next((t[1] for t in threads if t[0] == rec.get("main")), threads[-1][1] if threads else [])
        what, where = stack_summary(frames[:STACK_FRAMES])
        why = "" if threads else f"no dump within {wait:g}s (stuck outside Python?)"
        out.append(dict(rank=rec["rank"], pid=rec["pid"], frames=frames[:STACK_FRAMES], what=what, where=where,
                        why=why, threads=len(threads), text=text))  # fmt: skip
    return sorted(out, key=lambda r: (r["rank"], r["pid"]))


def rank_spans(ranks: list[int]) -> str:
    """[0, 1, 2, 5] -> "ranks 0-2, 5"; [7] -> "rank 7"."""
    rs = sorted(set(ranks))
    parts: list[list[int]] = []
    for r in rs:
        if parts and parts[-1][1] == r - 1:
            parts[-1][1] = r
        else:
            parts.append([r, r])
    return ("rank " if len(rs) == 1 else "ranks ") + ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in parts)


def group_stacks(stacks: list[dict], world: int | None = None) -> list[dict]:
    """Identical stacks together, the odd ones out first (`differs`): the groups smaller than the one largest,
    or, the largest tied, those not inside torch.distributed; ranks without a stack are groups of their own."""
    groups: dict = {}
    for s in stacks:
        f = s.get("frames") or []
        g = groups.setdefault(str(f) if f else s.get("why") or "no stack", dict(s, ranks=[], frames=f))
        g["ranks"].append(s["rank"])
    missing = [r for r in range(world or 0) if r not in {s["rank"] for s in stacks}]
    if missing:
        groups[""] = {"ranks": missing, "frames": [], "why": "no stack: not registered"}
    out = [{k: g.get(k) or "" for k in ("what", "where", "why")} | {"ranks": g["ranks"], "frames": g["frames"]}
           for g in groups.values()]  # fmt: skip
    sizes = sorted((len(g["ranks"]) for g in out if g["frames"]), reverse=True) + [0, 0]
    waits = lambda g: any("torch/distributed/" in f[0] for f in g["frames"])  # noqa: E731
    anywait = any(map(waits, out))
    for g in out:  # a tie of the largest: those not waiting inside torch.distributed differ (the others wait)
        tie = not (len(g["ranks"]) < sizes[0] if sizes[0] > sizes[1] else anywait and not waits(g))
        g["differs"] = not g["frames"] or not tie
    return sorted(out, key=lambda g: (not g["differs"], len(g["ranks"]), min(g["ranks"])))


def group_line(g: dict) -> str:
    if not g["frames"]:
        return f"{rank_spans(g['ranks'])}: {g['why']}"
    path, _, line = g["where"].rpartition(":")
    odd = (" (the one that differs)" if len(g["ranks"]) == 1 else " (differs)") if g["differs"] else ""
    return f"{rank_spans(g['ranks'])}: {g['what']} at {os.path.basename(path)}:{line}{odd}"


class Hang:
    """This node's watchdog (module singleton HANG): its ranks' progress; on node 0 the group's."""

    def __init__(self) -> None:
        self.timeout, self.home, self.armed, self.told = 0.0, "", False, 0.0
        self.last = self.reported = self.next_poll = 0.0
        self.files: dict = {}
        self.steps: dict = {}  # rank -> the last step it reported
        self.nodes: dict = {}  # node 0: node rank -> when it last reported progress
        self.remote: dict = {}  # node 0: rank -> its `stacks` message
        self.stacked: set = set()

    def configure(self, env: dict, problems: list[str]) -> float:
        raw = (env.get("KGEN_HANG_TIMEOUT") or "0").strip()
        try:
            self.timeout = float(raw)
            assert self.timeout == 0 or 1 <= self.timeout < math.inf
        except (ValueError, AssertionError):
            self.timeout = 0.0
            problems.append(
                f"KGEN_HANG_TIMEOUT={raw!r} is not 0 or a number of seconds >= 1: set values hang.timeout to the "
                f"seconds without progress after which the run is a hang (e.g. 600), or 0 (off)"
            )
        return self.timeout

    def worker_env(self, env: dict) -> dict:
        """A generation starts: a fresh hang folder and sitecustomize; the workers' extra environment."""
        self.armed, self.last, self.files, self.steps, self.nodes = bool(self.timeout), time.monotonic(), {}, {}, {}
        home = hang_home(env)
        self.home = home if all(_private_dir(os.path.join(home, d)) for d in ("", "py", "stacks", "progress")) else ""
        if not self.home or (env.get("KGEN_STACKS") or "").strip().lower() in ("0", "off", "false", "no"):
            self.home = ""
            return {}
        for sub in ("stacks", "progress"):
            for name in os.listdir(os.path.join(home, sub)):
                try:
                    os.unlink(os.path.join(home, sub, name))
                except OSError:
                    pass
        with open(os.path.join(home, "py", "sitecustomize.tmp"), "w") as fh:
            fh.write(SITECUSTOMIZE)
        os.replace(os.path.join(home, "py", "sitecustomize.tmp"), os.path.join(home, "py", "sitecustomize.py"))
        path = os.path.join(home, "py") + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        return {"KGEN_HANG_DIR": home, "KGEN_STACKS_SIGNAL": str(int(STACKS_SIGNAL)), "PYTHONPATH": path}

    def saw(self, prefix: str) -> None:
        self.last = time.monotonic()  # the Pump wrote a line of a rank: progress

    def poll(self, now: float) -> None:
        """Progress files (kgen_progress(step)) changed since the last look."""
        if now < self.next_poll or not self.home:
            return
        self.next_poll = now + HANG_POLL
        try:
            for e in os.scandir(os.path.join(self.home, "progress")):
                key = (e.stat().st_mtime_ns, e.stat().st_size)
                if self.files.get(e.name) != key and e.name.isdigit():
                    self.files[e.name], self.last = key, now
                    with open(e.path, "rb") as fh:
                        self.steps[int(e.name)] = printable(fh.read(40).decode("utf-8", "replace").strip())
        except OSError:
            pass

    def report(self, spoke, now: float) -> None:
        """A node (not node 0): tell node 0 its ranks made progress, at most once per HANG_POLL."""
        if self.armed:
            self.poll(now)
            if self.last > self.reported and now - self.told >= HANG_POLL:
                spoke.conn.send({"t": MSG_PROGRESS})
                self.reported, self.told = self.last, now

    def silent(self, now: float) -> float:
        return now - max([self.last, *self.nodes.values()])

    def due(self, now: float) -> bool:
        """Node 0 (or a single node): no rank of the group made progress for the timeout."""
        if self.armed:
            self.poll(now)
        return self.armed and self.silent(now) >= self.timeout

    def from_node(self, node: int, msg: dict) -> None:
        if msg["t"] == MSG_PROGRESS:
            self.nodes[node] = time.monotonic()
        elif msg["t"] == MSG_STACKS:
            self.remote[msg["rank"]] = msg
        else:
            self.stacked.add(node)

    def local(self) -> list[dict]:
        """This node's ranks' stacks, each logged (header, then its main thread's frames)."""
        stacks = collect_stacks(self.home) if self.home else []
        for s in stacks:
            log(f"stack of rank {s['rank']} (pid {s['pid']}, {s['threads']} thread(s)): {s['what']} at {s['where']}")
            for f in s["frames"]:
                log(f"  {f[0]}:{f[1]} in {f[2]}")
        return stacks

    def cleanup(self) -> None:
        """The node ends: its hang folder goes (a run directory's stays for kgen stop --rm)."""
        if self.home and not os.environ.get("KGEN_RUN_DIR"):
            import shutil

            shutil.rmtree(self.home, ignore_errors=True)

    def dump_for(self, spoke) -> None:
        """A node: node 0 found a hang and asks for this node's stacks."""
        log("node 0 found no progress for the hang timeout: sending this node's stacks")
        for s in self.local():  # bounded and printable: the gate of node 0 drops a connection for less
            frames = [[shown(f[0], 500), f[1], shown(f[2], 100)] for f in s["frames"]]
            wire = {k: shown(s[k], 600) for k in ("what", "where", "why")} | {"step": self.steps.get(s["rank"], "")}
            spoke.conn.send({"t": MSG_STACKS, "rank": s["rank"], "pid": s["pid"], "frames": frames, **wire})
        spoke.conn.send({"t": MSG_STACKED})
        spoke.conn.flush(1.0)


HANG = Hang()


def end_hang(cfg: Config, child: Child, hub: Hub | None = None, sigs: Signals | None = None) -> Stop:
    """No rank of the group made progress for the timeout (node 0, or a single node): every rank's stacks,
    grouped, into the log and the HANG_MARK line, then the run ends as a hang (every node exits EXIT_HANG)."""
    silent, HANG.armed, HANG.remote, HANG.stacked = HANG.silent(time.monotonic()), False, {}, set()
    log(
        f"no rank made progress for {silent:.1f}s (KGEN_HANG_TIMEOUT={HANG.timeout:g}s): collecting every rank's stacks"
    )
    for conn in list(hub.peers.values()) if hub else []:
        conn.send({"t": MSG_DUMP})
    stacks, deadline = HANG.local(), time.monotonic() + STACKS_WAIT
    while hub and sigs and not set(hub.peers) <= HANG.stacked and time.monotonic() < deadline and not sigs.pending:
        poll(hub.sel, sigs, hub)
        hub.tick(time.monotonic())
    groups = group_stacks(stacks + list(HANG.remote.values()), cfg.world_size)
    steps = {r: m["step"] for r, m in HANG.remote.items() if m["step"]} | HANG.steps
    lead = next((g for g in groups if g["differs"] and g["frames"]), groups[0])
    report = {"timeout": HANG.timeout, "silent": round(silent, 1), "world": cfg.world_size, "time": _utc_stamp(),
              "headline": f"no rank made progress for {silent:.0f}s; {group_line(lead)}", "steps": steps,
              "groups": [dict(g, frames=g["frames"][:8]) for g in groups]}  # fmt: skip
    log(f"HANG: {report['headline']}")
    for g in groups:
        log(f"hang report: {group_line(g)}")
    if steps:
        log("hang report: last steps reported: " + ", ".join(f"rank {k}: {v}" for k, v in sorted(steps.items())))
    emit(sys.stderr, f"{HANG_MARK}{json.dumps(report, sort_keys=True)}\n")
    if hub is not None:
        hub.end(EXIT_HANG, f"hang: {report['headline']}")
    child.kill_tree(ABORT_GRACE)
    return Stop(EXIT_HANG, f"hang: {report['headline']}")


def stacks_answer(home: str) -> dict:
    """--stacks (kubectl exec) and --run-dir DIR --stacks: this node's ranks' stacks, one JSON line."""
    stacks = collect_stacks(home)
    note = "" if stacks else f"no training process of this node registered for stacks in {home}"
    return {"host": socket.gethostname(), "ranks": [dict(s, text=s["text"][-65536:]) for s in stacks], "note": note}


# ==== entrypoint/parts/healthgate.py:1 ====
"""The pre-flight health gate: devices, an all-reduce and ping-pongs between nodes before training."""


# ==== entrypoint/parts/healthgate.py:18 ====
# --------------------------------------------------------------------------------------------
# Health gate (docs/entrypoint.md#the-health-gate)
#
# KGEN_HEALTH_GATE=off|warn|fail (values health.gate, default warn). Generation 0 of a group of 2+ nodes,
# after node 0 said start and before this node's torchrun: every node runs HEALTH_WORKER (python, torch)
# with the rank of its node and the run's master address and port (the store the training's rendezvous
# uses next). It checks the devices (GPUs visible as NPROC_PER_NODE, nvidia-smi's uncorrected ECC errors),
# all-reduces a few MiB over the real backend (nccl on GPUs, gloo on CPU) and then times a ping-pong with
# every other node (round-robin pairs); each node's phases and numbers go to the store, so every node reads
# the same result and judges it alike (health_verdict). A link far slower than the median node's best (or above
# HEALTH_LINK_MS) is slow; a node whose every link is slow is the slow node. The worker is bounded by
# KGEN_HEALTH_TIMEOUT: at the bound it reports how far each node got (the ones that did not answer).
# Node 0 logs one line per node and HEALTH_MARK (a JSON line kgen status reads); each other node its own.
# fail: a failed gate ends the run before training (EXIT_HEALTH on every node, node 0 names the node).
# The heartbeats go on meanwhile. This section counts twice in a pod's ConfigMap: keep it lean.
# --------------------------------------------------------------------------------------------

HEALTH_MARK = "kgen-entrypoint: health: "
EXIT_HEALTH = 78  # the health gate failed with KGEN_HEALTH_GATE=fail: every node exits 78
HEALTH_SLOW, HEALTH_FLOOR_MS, HEALTH_LINK_MS, HEALTH_WAIT = 5.0, 20.0, 100.0, 10.0
HEALTH_PHASES = ("store", "process group", "all-reduce", "ping-pongs", "end")
HEALTH_WORKER = r"""import json, os, subprocess, threading, time
from datetime import timedelta
import torch, torch.distributed as dist
c = json.loads(os.environ["KGEN_HEALTH"]); R, N, T = c["rank"], c["world"], c["timeout"]; t0 = time.monotonic()
left = lambda: timedelta(seconds=max(1, T - 1 - time.monotonic() + t0))
def out(d):
    print(json.dumps(d), flush=True); os._exit(0)
def late():
    time.sleep(left().total_seconds())
    try:
        s = dist.TCPStore(c["addr"], c["port"], N, False, timedelta(seconds=2))
        out({"reached": [sum(s.check([k + str(r)]) for k in ("up", "pg", "ar", "pp")) for r in range(N)]})
    except Exception as e:
        out({"error": f"no answer within {T:g}s, node 0's store neither ({str(e)[:200]})"})
threading.Thread(target=late, daemon=True).start()
try:
    cuda = torch.cuda.is_available(); need, dev = c["gpus"] or cuda * c["nproc"], ""
    if (torch.cuda.device_count() if cuda else 0) < need:
        dev = f"{torch.cuda.device_count() if cuda else 0} GPU(s) visible, {need} expected"
    try:
        q = need and subprocess.run(["nvidia-smi", "--query-gpu=index,ecc.errors.uncorrected.volatile.total",
                                          "--format=csv,noheader"], capture_output=True, text=True, timeout=10)
        ecc = [r.split(",")[0] for r in q.stdout.splitlines() if r.split(",")[-1].strip().lstrip("0").isdigit()]
        dev = dev or (f"nvidia-smi exit {q.returncode}" if q.returncode else ecc and f"ECC errors: GPU {ecc}" or "")
    except (OSError, AttributeError):
        pass
    d, sync = (torch.device("cuda", 0), torch.cuda.synchronize) if cuda else (torch.device("cpu"), lambda: None)
    s = dist.TCPStore(c["addr"], c["port"], N, R == 0, timedelta(seconds=T), wait_for_workers=False)
    s.set(f"up{R}", dev)
    dist.init_process_group("nccl" if cuda else "gloo", store=dist.PrefixStore("pg", s), rank=R, world_size=N,
                            timeout=timedelta(seconds=T))
    s.set(f"pg{R}", "")
    x, times = torch.empty(c["mb"] << 18, device=d), []
    while len(times) < 3:
        x.fill_(1.0); sync(); t = time.monotonic(); dist.all_reduce(x); sync(); times.append(time.monotonic() - t)
        if x[0].item() != N or x[-1].item() != N:
            raise RuntimeError(f"all-reduce sum {x[0].item()}, not {N}")
        spent = torch.tensor([sum(times)], dtype=torch.float64, device=d); dist.all_reduce(spent, op=dist.ReduceOp.MAX)
        if spent.item() > 1:
            break
    s.set(f"ar{R}", str(min(times) * 1e3))
    M, y, pp = N + N % 2, torch.ones(c["kb"] << 8, device=d), {}
    for rnd in range(M - 1):  # round-robin pairs: a fixed, the others turn
        ring = [0] + [1 + (k + rnd) % (M - 1) for k in range(M - 1)]
        p = ring[M - 1 - ring.index(R)]
        for _ in range(3 * (p < N)):
            t = time.monotonic()
            for op in (dist.send, dist.recv) if R < p else (dist.recv, dist.send):
                op(y, p)
            sync(); pp[p] = min(pp.get(p, 1e9), (time.monotonic() - t) * 1e3)
    s.set(f"pp{R}", json.dumps(pp))
    s.wait([f"pp{r}" for r in range(N)], left())
    res = {"up": [s.get(f"up{r}").decode() for r in range(N)], "ar": [float(s.get(f"ar{r}")) for r in range(N)],
           "pp": [json.loads(s.get(f"pp{r}")) for r in range(N)]}
    s.set(f"done{R}", "")
    if R == 0:
        s.wait([f"done{r}" for r in range(N)], left())
    out(res)
except Exception as e:
    out({"error": f"{type(e).__name__}: {str(e)[:300]}"})
"""


def _median(v: list[float]) -> float:
    v = sorted(v)
    return (v[(len(v) - 1) // 2] + v[len(v) // 2]) / 2 if v else 0.0


def health_verdict(res: dict, n: int, timeout: float) -> tuple[list[str], list[int]]:
    """Every node's line and the nodes at fault, from one worker's answer (every node reads the same)."""
    if "reached" in res:
        got, low = res["reached"], min(res["reached"])
        lines = [f"node {r}: no answer within {timeout:g}s (stuck in the {HEALTH_PHASES[k]})" if k == low
                 else f"node {r}: got past the {HEALTH_PHASES[k - 1]}" for r, k in enumerate(got)]  # fmt: skip
        return lines, [r for r, k in enumerate(got) if k == low]
    if "error" in res:
        return [f"node {r}: the gate failed: {res['error']}" for r in range(n)], list(range(n))
    links = {(r, int(p)): t for r, pp in enumerate(res["pp"]) for p, t in pp.items() if r < int(p)}  # a round trip
    mine = {r: [t for k, t in links.items() if r in k] for r in range(n)}
    base = _median([min(v) for v in mine.values() if v])  # the median node's best link
    slow = {k for k, t in links.items() if t > HEALTH_LINK_MS or t > HEALTH_SLOW * base and t - base > HEALTH_FLOOR_MS}
    nodes = {r for r in range(n) if n > 2 and all(k in slow for k in links if r in k)}
    nodes = nodes if len(nodes) < n else set()
    lines, bad = [], []
    for r in range(n):
        to = [k[0] + k[1] - r for k in sorted(slow) if r in k and (r in nodes or not nodes & set(k))]
        worst, names = max([links[(min(r, o), max(r, o))] for o in to] or [0]), ", ".join(map(str, to))
        if res["up"][r]:
            lines.append(f"node {r}: {res['up'][r]}")
        elif r in nodes:
            best = min(mine[r])
            lines.append(f"node {r}: {best / max(base, 1e-3):.0f}x slower than the median "
                         f"(links to nodes {names}: {best:.1f}-{worst:.1f} ms, median {base:.1f} ms)")  # fmt: skip
        elif to:
            lines.append(f"node {r}: slow link to node {names} ({worst:.1f} ms, median {base:.1f} ms"
                         + "; 2 nodes: either end)" * (n == 2) + ")" * (n > 2))  # fmt: skip
        else:
            fast = [t for k, t in links.items() if r in k and k not in slow]
            lines.append(f"node {r}: ok {_median(fast):.1f} ms (all-reduce {res['ar'][r]:.1f} ms)")
            continue
        bad.append(r)
    return lines, bad


class Health:
    """The health gate (module singleton HEALTH)."""

    gate, timeout = "warn", 30.0

    def configure(self, env: dict, problems: list[str]) -> str:
        self.gate = (env.get("KGEN_HEALTH_GATE") or "warn").strip().lower()
        if self.gate not in ("off", "warn", "fail"):
            problems.append(f"KGEN_HEALTH_GATE={self.gate!r} is not off, warn or fail: set values health.gate")
        self.timeout = _number(env, "KGEN_HEALTH_TIMEOUT", problems, float, 30.0, 5, fix="seconds, e.g. 30")
        return self.gate

    def run(self, cfg: Config, sigs: Signals, link, gen: int) -> Stop | None:
        """Before this node's torchrun: the gate (None: go on; a Stop: the run ends here)."""
        if self.gate == "off" or gen or cfg.nnodes < 2:
            return None
        import tempfile

        gpus = cfg.nproc if (os.environ.get("NVIDIA_VISIBLE_DEVICES") or "all") not in ("all", "void", "none") else 0
        spec = {"rank": cfg.node_rank, "world": cfg.nnodes, "addr": cfg.master_addr, "port": cfg.master_port,
                "timeout": self.timeout, "mb": 4, "kb": 256, "gpus": gpus, "nproc": cfg.nproc}  # fmt: skip
        log(f"health gate ({self.gate}): all-reduce, ping-pongs; KGEN_HEALTH_TIMEOUT={self.timeout:g}s")
        t0, stop = (
            time.monotonic(),
            lambda: sigs.pending or any(getattr(link, a, None) for a in ("verdict", "lost", "stop_host")),
        )
        with tempfile.TemporaryFile() as out:
            proc = subprocess.Popen([sys.executable, "-c", HEALTH_WORKER], stdout=out, stderr=subprocess.STDOUT,
                                    env=dict(os.environ, KGEN_HEALTH=json.dumps(spec)), start_new_session=True,
                                    preexec_fn=_torchrun_dies_with_us)  # fmt: skip
            while proc.poll() is None and time.monotonic() - t0 < self.timeout + 5 and not stop():
                poll(link.sel, sigs, link)
                link.tick(time.monotonic())
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            out.seek(0)
            text = out.read().decode("utf-8", "replace").strip().splitlines() or [""]
        if stop():  # the main loop sees it, or node 0 ended the run (a failed gate) before training
            v: tuple = getattr(link, "verdict", None) or ("",)
            if v[0] != "end":
                return None
            link.close()
            return Stop(v[1], f"node 0 ended the run ({v[-1]})")
        try:
            res = json.loads(text[-1])
        except ValueError:
            res = {"error": f"node {cfg.node_rank}'s worker exit {proc.returncode}: {printable(text[-1])[-300:]}"}
        lines, bad = health_verdict(res, cfg.nnodes, self.timeout)
        took = time.monotonic() - t0
        me = cfg.node_rank or 0
        for line in lines if cfg.is_master else lines[me : me + 1]:
            log(f"kgen health: {line}")
        if cfg.is_master:
            emit(sys.stderr, HEALTH_MARK + json.dumps({"gate": self.gate, "lines": lines, "bad": bad}) + "\n")
        reason = "health gate: " + "; ".join(lines[r] for r in bad)
        log(f"health gate passed in {took:.1f}s" if not bad else f"{reason} (health.gate {self.gate})")
        if not bad or self.gate == "warn":
            return None
        if cfg.is_master:
            link.end(EXIT_HEALTH, reason, bad[0])
            return Stop(EXIT_HEALTH, reason)
        end = time.monotonic() + HEALTH_WAIT
        while link.verdict is None and time.monotonic() < end and not sigs.pending:
            poll(link.sel, sigs, link)
            link.tick(time.monotonic())
        if link.verdict and link.verdict[0] != "end":
            return None
        link.close()
        return Stop(EXIT_HEALTH, reason)


HEALTH = Health()


# ==== entrypoint/parts/slurmenv.py:1 ====
"""A Slurm job step's environment: host lists, ports, and the verdict inside a step."""


# ==== entrypoint/parts/slurmenv.py:11 ====
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


# ==== entrypoint/parts/main.py:1 ====
"""main: the command line, and the one last line that says why this node stopped."""


# ==== entrypoint/parts/main.py:21 ====
# --------------------------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------------------------

USAGE = (
    "usage: kgen_entrypoint.py [--diagnose | --smoke-test | --stop | -- COMMAND [ARGS...]]\n"
    "  -- train.py ARGS      run a script on every worker through torchrun\n"
    "  -- -m pkg.mod ARGS    run a module\n"
    "  -- PROGRAM ARGS       run any program (torchrun --no-python)\n"
    "  --smoke-test          all-reduce check instead of training\n"
    "  --diagnose            environment and network checks, one PASS/FAIL line each\n"
    "  --stop                stop the whole group (with the run's environment, on any host)\n"
    "  --stacks              this node's training processes' Python stacks, one JSON line\n"
    "bare metal (kgen launch; docs/baremetal.md):\n"
    "  --run-dir DIR --detach -- COMMAND   start this node detached (DIR/env: its environment, JSON)\n"
    "  --run-dir DIR --state               the node's run state, one JSON line\n"
    "  --run-dir DIR --log [--tail N] [--follow]\n"
    "  --run-dir DIR --stop-node [--grace S] [--interrupt]   end every process of the node\n"
    "  --run-dir DIR --stacks              the node's training processes' Python stacks, one JSON line\n"
    "slurm (docs/slurm.md):\n"
    "  --slurm-node RUN -- COMMAND   this node of the job step (srun, one task per node)\n"
    "  --slurm-end RUN RC            after srun: succeeded, failed, stopped, or requeue the job\n"
)


def main(argv: list[str] | None = None) -> int:
    """Run, then end every log with one line saying why this node stopped."""
    try:
        code = _main(argv)
    except Stop as stop:
        _said_dropped()
        emit(sys.stderr, f"kgen-entrypoint: stopped: {printable(stop.reason)}\n")
        return stop.code
    except Exception as exc:  # noqa: BLE001 - kgen's own fault outside a run (--diagnose, --stop, a verb)
        emit(sys.stderr, f"kgen-entrypoint: stopped: {internal_error(exc)}\n")
        return EXIT_INTERNAL
    _said_dropped()
    return code


def _said_dropped() -> None:
    if DROPPED[0]:
        log(f"{DROPPED[0]} line(s) of this node's output could not be written (a full or failing disk?)")


def _main(argv: list[str] | None = None) -> int:
    global _TAG
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--smoke-worker"]:
        return smoke_worker()
    parent = os.environ.get(SUPERVISOR_PID, "")
    if parent.isdigit():  # run by a node's supervisor: its death is this node's (SIGTERM: leave, stop torch)
        die_with_parent(signal.SIGTERM, int(parent))
    verbs = {"--launch-node": "launch_node", "--run-dir": "run_dir_verb", "--slurm-node": "slurm_node"}
    verbs["--slurm-end"] = "slurm_end"
    if args and args[0] in verbs and verbs[args[0]] not in globals():
        fatal(
            EXIT_CONFIG,
            f"{args[0]} is for bare metal or Slurm: this is the pod copy kgen render ships, without that "
            "section; `kgen entrypoint` prints the whole file",
        )
    if args[:1] == ["--launch-node"]:  # kgen launch, over ssh (bare metal, docs/baremetal.md)
        return launch_node(globals().get("KGEN_SOURCE"))
    if args[:1] == ["--run-dir"]:
        return run_dir_verb(args[1:])
    if args[:1] == ["--slurm-node"]:  # a Slurm job step's task, one per node (docs/slurm.md)
        return slurm_node(args[1:])
    if args[:1] == ["--slurm-end"]:  # the sbatch script after srun: succeeded, failed, stopped or requeue
        return slurm_end(args[1:])
    if args[:1] in (["-h"], ["--help"]):
        sys.stdout.write(USAGE)
        return 0
    if args[:1] == ["--diagnose"]:
        if len(args) > 1:
            fatal(EXIT_CONFIG, "--diagnose takes no arguments")
        return diagnose(dict(os.environ))
    if args[:1] == ["--stacks"]:  # a pod (kubectl exec): this node's ranks' stacks, one JSON line
        print(json.dumps(stacks_answer(hang_home(dict(os.environ)))), flush=True)
        return 0
    if args[:1] == ["--stop"]:
        if len(args) > 1:
            fatal(EXIT_CONFIG, "--stop takes no arguments")
        return request_stop(dict(os.environ))
    if args[:1] == ["--smoke-test"]:
        if len(args) > 1:
            fatal(EXIT_CONFIG, "--smoke-test takes no arguments")
        command = [script_path(), "--smoke-worker"]
    elif args[:1] == ["--"]:
        command = args[1:]
        check_command(command)
    elif args and not args[0].startswith("-"):
        command = args
        check_command(command)
    else:
        sys.stderr.write(USAGE)
        fatal(EXIT_CONFIG, f"unknown option {args[0]!r}" if args else "no command given")
    cfg = load_config(dict(os.environ))
    if cfg.problems:
        fatal(EXIT_CONFIG, cfg.problems)
    _TAG = f"kgen node {cfg.node_rank}"  # type: ignore[name-defined]  # header's: one module once assembled
    log(cfg.summary())
    for note in cfg.notes:
        log(f"note: {note}")
    return run(cfg, command)


# ==== entrypoint/assemble.py: the guard ====
# The pod copy ends here with the guard, `if __name__ == "__main__": sys.exit(main())`; the whole
# file runs it at its end, after the parts only bare metal and Slurm run.


# ==== entrypoint/parts/baremetal.py:1 ====
"""Bare metal: one node's run directory and its supervisor (kgen launch). Not in pods."""


# ==== entrypoint/parts/baremetal.py:30 ====
# --------------------------------------------------------------------------------------------
# Bare metal: one node's run directory (`kgen launch`, docs/baremetal.md)
#
# `kgen launch` runs this file on every host (its source travels on ssh's stdin, so a host needs
# only python3 and torch) with --launch-node: it checks the host, answers the launcher with one
# JSON line, and on "go" writes the node's run directory and detaches a supervisor that outlives
# the launcher, the ssh connection and SIGHUP. Nothing here touches the liveness protocol: the
# supervisor runs this same file in its normal mode (`-- SCRIPT ARGS`) as a child.
#
#   DIR = $XDG_STATE_HOME (default ~/.local/state)/kgen/runs/<RUN>/node<RANK>, 0700, files 0600:
#   env        the node's environment (JSON), from the launcher's stdin: never a command line
#   secret     the run's secret (KGEN_SECRET_FILE: the secret never in argv)
#   node.json  command, working directory, rank, fault injections (--local --inject)
#   kgen_entrypoint.py   this file, as the node runs it
#   pid        the supervisor: pid, process group, session, start time, boot id
#   child      the node's entrypoint process (pid, start time, attempt)
#   log        every line of the node (entrypoint, torchrun, script): "<UTC time> <line>"
#   events     the kgen lines of the log (generations, FAIL-STOP, stopped: ...): status reads these
#   stopping   `kgen stop` was asked: the supervisor restarts nothing
#   exit       {"code", "reason", "time", "restarts"} once the node ended for good
#
# Query verbs, one process per call: --run-dir DIR --state | --log [--tail N] [--follow] |
# --stop-node [--grace S] [--interrupt]. Every process of the node carries KGEN_RUN_DIR=DIR in its
# environment (torchrun and the workers too, though they run in their own session): that marker,
# with the supervisor's session, is how --stop-node finds them all.
# --------------------------------------------------------------------------------------------

RUN_MARKER = "KGEN_RUN_DIR"
RESTART_CODES = (EXIT_PEER_LOST, EXIT_DROPPED, 128 + 9, 128 + 15)  # as the Job's podFailurePolicy: replace the node
STATE_EVENTS = 200  # kgen lines --state returns (generations, FAIL-STOP, stopped)
STATE_TAIL = 20  # last log lines --state returns
STATE_TAIL_FAILED = 200  # ... of a node that failed: kgen looks for a traceback in them (no failure record)
ORDERLY_STOP = 3.0  # --stop-node: after SIGTERM to the entrypoint, this long before SIGTERM to everything left


def state_home(env: dict | None = None) -> str:
    env = os.environ if env is None else env  # type: ignore[assignment]
    base = env.get("XDG_STATE_HOME") or ""  # type: ignore[union-attr]
    return base if os.path.isabs(base) else os.path.join(os.path.expanduser("~"), ".local", "state")


def node_dir(run: str, rank: int) -> str:
    return os.path.join(state_home(), "kgen", "runs", run, f"node{rank}")


def _write_private(path: str, data: str, exclusive: bool = False) -> None:
    """A 0600 file written whole (atomically unless `exclusive`: then it must not exist yet)."""
    target = path if exclusive else f"{path}.tmp{os.getpid()}"
    flags = os.O_WRONLY | os.O_CREAT | (os.O_EXCL if exclusive else os.O_TRUNC)
    fd = os.open(target, flags, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(data)
    if not exclusive:
        os.replace(target, path)


RESERVE_BYTES = 4096  # room kept for a node's exit record: written in place when the disk is full


def _reserve(path: str) -> None:
    """Keep RESERVE_BYTES of disk for the record at `path` (PATH.reserve, blanks): _record() writes into it
    when nothing new can be written (ENOSPC). Best effort: without it a full disk may cost the record."""
    try:
        fd = os.open(f"{path}.reserve", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, b" " * RESERVE_BYTES)
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        try:
            os.unlink(f"{path}.reserve")
        except OSError:
            pass


def _record(path: str, data: str, bound: float = 0.0) -> str | None:
    """A record (exit, child, pid, end) written whole whatever the disk does: atomically as _write_private,
    else (ENOSPC, EIO, a read-only folder) into PATH.reserve in place (its blocks exist already) and renamed
    over PATH; tried again for `bound` seconds. Never raises: None, or why it could not be written (no
    PATH.tmpPID is left behind either way)."""
    deadline = time.monotonic() + bound
    while True:
        try:
            _write_private(path, data)
            try:
                os.unlink(f"{path}.reserve")
            except OSError:
                pass
            return None
        except OSError as exc:
            why = f"{errno.errorcode.get(exc.errno or 0, 'error')}: {exc.strerror or exc}"
            try:
                os.unlink(f"{path}.tmp{os.getpid()}")
            except OSError:
                pass
        raw = data.encode()
        if len(raw) <= RESERVE_BYTES:
            try:
                fd = os.open(f"{path}.reserve", os.O_WRONLY)
                try:
                    os.write(fd, raw.ljust(RESERVE_BYTES))  # JSON ends in blanks: still one value
                finally:
                    os.close(fd)
                os.replace(f"{path}.reserve", path)
                return None
            except OSError:
                pass
        if time.monotonic() >= deadline:
            return why
        time.sleep(0.5)


def _read_json(path: str) -> dict | None:
    try:
        with open(path) as fh:
            value = json.load(fh)
        return value if isinstance(value, dict) else None
    except (OSError, ValueError):
        return None


def _proc_stat(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name: [state, ppid, pgrp, session, ...]."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().decode("ascii", "replace").rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def _identity(pid: int) -> dict:
    """What tells this process apart from a later one with the same PID."""
    st = _proc_stat(pid)
    return {"pid": pid, "start": st[19] if st else None, "boot": _boot_id()}


def _same_process(rec: dict | None) -> str | None:
    """The process state letter (R, S, T, ...) of the recorded process if it still runs, else None."""
    if not rec or not isinstance(rec.get("pid"), int):
        return None
    if rec.get("boot") and rec.get("boot") != _boot_id():
        return None  # the host rebooted since
    st = _proc_stat(rec["pid"])
    if not st or st[0] in ("Z", "X") or (rec.get("start") and st[19] != rec.get("start")):
        return None
    return st[0]


def run_processes(run_dir: str, session: int | None = None) -> list[int]:
    """Live processes of this node: KGEN_RUN_DIR=run_dir in their environment, or in `session`.
    [] when /proc is not this PID namespace's: PIDs read there are never signalled."""
    if not proc_is_ours():
        return []
    marker = f"{RUN_MARKER}={run_dir}".encode()
    found = []
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        pid = int(name)
        st = _proc_stat(pid)
        if not st or st[0] in ("Z", "X"):
            continue
        if session and st[3] == str(session):
            found.append(pid)
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                if marker in fh.read().split(b"\0"):
                    found.append(pid)
        except OSError:
            continue
    return found


def _signal_all(pids, sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except OSError:
            pass


def _entrypoint_line(line: str) -> bool:
    return line.startswith("[kgen ") or line.startswith("kgen-entrypoint: ")


SIGNAL_STOP = "kgen-entrypoint: stopped: signal "  # the entrypoint's last line after SIGTERM/SIGHUP/SIGQUIT
_RANK_PREFIX = re.compile(r"\[rank \d+\] ")
_FINISHED = re.compile(r"\[kgen node \d+ [\d:]+ \+[\d.]+s\] torchrun finished successfully")
CONTINUED = "[continued] "  # a further piece of a line that was not a training process's


def _piece_prefix(first: str) -> str:
    """What every further piece of a line cut in pieces starts with: the `[rank N] ` of its first piece
    (a training process's line stays that process's, whatever it holds), else CONTINUED: no piece after the
    first can ever read as a line of its own, so a script cannot forge kgen's events this way."""
    m = _RANK_PREFIX.match(first)
    return m.group(0) if m else CONTINUED


class Supervisor:
    """One node of a bare-metal run, detached: keeps the node's entrypoint running, stamps its output
    into DIR/log, replaces the entrypoint after a lost-node exit (75, 76, 137, 143 when kgen stop did
    not ask for it) as the Job controller replaces a pod, and writes DIR/exit at the end."""

    def __init__(self, run_dir: str) -> None:
        self.dir = run_dir
        self.node = _read_json(os.path.join(run_dir, "node.json")) or {}
        self.env = _read_json(os.path.join(run_dir, "env")) or {}
        self.rank = self.node.get("rank", self.env.get("NODE_RANK", "?"))
        self.logf = os.open(os.path.join(run_dir, "log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self.eventsf = os.open(os.path.join(run_dir, "events"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self.dropped = 0  # lines the log (or events) could not take: a full disk, an I/O error
        self.drop_error = ""  # the first error that dropped one
        self.said_dropped = 0  # the count the log already says
        self.finished = False  # this attempt's entrypoint said its torchrun finished successfully
        self.killed = False  # this attempt's entrypoint was killed by a signal
        self.t0 = time.monotonic()
        self.stopping = False
        self.pending: list[int] = []
        self.last_stop_line = ""
        self.rfd, self.wfd = os.pipe()
        os.set_blocking(self.wfd, False)

    def say(self, msg: str) -> None:
        stamp = time.strftime("%H:%M:%S", time.gmtime())
        self.write_line(f"[kgen supervisor {self.rank} {stamp} +{time.monotonic() - self.t0:.1f}s] {msg}")

    def _append(self, fd: int, data: bytes) -> bool:
        """One whole line onto the log or the events. False (counted, never raised) when the disk refuses it:
        the training is never ended for a line of its log."""
        try:
            n = os.write(fd, data)
            while n < len(data):  # a short write: the disk filled in the middle of the line
                n += os.write(fd, data[n:])
            return True
        except OSError as exc:
            if not self.drop_error:
                self.drop_error = f"{errno.errorcode.get(exc.errno or 0, 'error')}: {exc.strerror or exc}"
            return False

    def write_line(self, line: str) -> None:
        if self.dropped > self.said_dropped:  # the disk takes lines again: say first what it did not take
            note = (
                f"{_utc_stamp()} [kgen supervisor {self.rank}] {self.dropped - self.said_dropped} log line(s) "
                f"dropped: could not be written ({self.drop_error}); the training went on\n"
            ).encode()
            if self._append(self.logf, note):
                self.said_dropped = self.dropped
                self._append(self.eventsf, note)
        data = f"{_utc_stamp()} {line}\n".encode("utf-8", "replace")
        if not self._append(self.logf, data):
            self.dropped += 1
        if _entrypoint_line(line):
            if line.startswith("kgen-entrypoint: stopped:"):
                self.last_stop_line = line
            self._append(self.eventsf, data)

    def drops(self) -> dict:
        """What the exit record says of dropped lines ({} when none)."""
        return {"dropped": self.dropped, "drop_error": self.drop_error} if self.dropped else {}

    def write_pid(self) -> None:
        rec = _identity(os.getpid())
        rec.update(pgid=os.getpgid(0), sid=os.getsid(0), host=socket.gethostname(), time=_utc_stamp())
        _write_private(os.path.join(self.dir, "pid"), json.dumps(rec))
        _reserve(os.path.join(self.dir, "exit"))

    def _on_signal(self, signum, _frame) -> None:
        self.pending.append(signum)
        try:
            os.write(self.wfd, b"s")
        except OSError:
            pass

    def stop_requested(self) -> bool:
        return self.stopping or os.path.exists(os.path.join(self.dir, "stopping"))

    def guarded_run(self) -> int:
        """run(); when kgen's own code fails here: the traceback into the node's log, every process of the
        node ended (no torch worker left without its supervisor), DIR/exit with EXIT_INTERNAL and the reason."""
        try:
            return self.run()
        except Exception as exc:  # noqa: BLE001 - a bug of kgen's: reported as one, never as the script's
            import traceback

            reason = f"kgen supervisor internal error on node {self.rank}: {type(exc).__name__}: {shown(str(exc), 300)}"
            try:
                for line in "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).splitlines():
                    self.write_line(printable(line))
                self.write_line(f"kgen-entrypoint: stopped: {reason} (report it)")
            except Exception:  # noqa: BLE001 - the log may be what failed; the exit record still tells
                pass
            left = [p for p in run_processes(self.dir) if p != os.getpid()]
            _signal_all(left, signal.SIGTERM)  # the entrypoint tells the group it leaves, then stops torch
            deadline = time.monotonic() + ORDERLY_STOP
            while left and time.monotonic() < deadline:
                time.sleep(0.1)
                left = [p for p in run_processes(self.dir) if p != os.getpid()]
            _signal_all(left, signal.SIGKILL)
            rec = {"code": EXIT_INTERNAL, "reason": f"{reason} (report it)", "time": _utc_stamp(), "restarts": None}
            _record(os.path.join(self.dir, "exit"), json.dumps(dict(rec, **self.drops())), RECORD_BOUND)
            return EXIT_INTERNAL

    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT):
            signal.signal(sig, self._on_signal)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.signal(signal.SIGCHLD, self._on_signal)
        set_child_subreaper()  # orphans of a dead entrypoint (torchrun, workers) come back to us
        try:
            max_restarts = int(self.env.get("KGEN_MAX_REFORMATIONS", DEFAULTS["KGEN_MAX_REFORMATIONS"]))
        except ValueError:
            max_restarts = 0
        restarts = 0
        while True:
            self.finished = False
            self.last_stop_line = ""
            code = self.run_child(restarts)
            # an entrypoint that ended by itself with its torchrun's code (torch failed with code 137) failed, it
            # was not lost: only an entrypoint killed or ended by a signal is replaced
            signalled = self.killed or self.last_stop_line.startswith(SIGNAL_STOP)
            code_is_torchs = code in (128 + 9, 128 + 15) and not signalled
            if code in RESTART_CODES and self.finished:  # its training was done: nothing to replace
                self.say(f"node {self.rank}'s entrypoint ended with code {code} after its training finished: "
                         "not replacing it; the node succeeded")  # fmt: skip
                self.last_stop_line = f"kgen-entrypoint: stopped: succeeded (then {_signal_reason(code)})"
                code = EXIT_OK
            if code in RESTART_CODES and not code_is_torchs and not self.stop_requested() and restarts < max_restarts:
                restarts += 1
                delay = min(10.0, 2.0 ** (restarts - 1))
                self.say(
                    f"node {self.rank}'s entrypoint ended with code {code}: replacing it in {delay:g}s "
                    f"(replacement {restarts} of {max_restarts}, KGEN_MAX_REFORMATIONS), as the Job "
                    "controller replaces a lost pod"
                )
                if self.wait(delay):
                    continue
                self.say("stop asked while waiting to replace the entrypoint: not replacing it")
            reason = self.last_stop_line.replace("kgen-entrypoint: stopped: ", "", 1) or _signal_reason(code)
            exit_rec = {"code": code, "reason": reason, "time": _utc_stamp(), "restarts": restarts, **self.drops()}
            _record(os.path.join(self.dir, "exit"), json.dumps(exit_rec), RECORD_BOUND)
            return code

    def wait(self, seconds: float) -> bool:
        """Sleep; False when a stop was asked meanwhile."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self._take_signals(None)
            if self.stop_requested():
                return False
            sel = selectors.DefaultSelector()
            sel.register(self.rfd, selectors.EVENT_READ)
            sel.select(min(0.2, max(0.0, deadline - time.monotonic())))
            sel.close()
            self._drain()
        return not self.stop_requested()

    def _drain(self) -> None:
        try:
            os.set_blocking(self.rfd, False)
            while os.read(self.rfd, 512):
                pass
        except OSError:
            pass

    def _take_signals(self, child: subprocess.Popen | None) -> None:
        while self.pending:
            sig = self.pending.pop(0)
            if sig == signal.SIGCHLD:
                continue
            self.stopping = True
            if child is not None and child.poll() is None:
                self.say(f"received {signal.Signals(sig).name}: passing it to node {self.rank}'s entrypoint")
                try:
                    child.send_signal(sig)
                except OSError:
                    pass

    def run_child(self, attempt: int) -> int:
        command = list(self.node.get("command") or [])
        argv = [sys.executable, os.path.join(self.dir, "kgen_entrypoint.py")]
        argv += command if command[:1] in (["--smoke-test"], ["--diagnose"]) else ["--", *command]
        env = dict(os.environ)
        env.update({str(k): str(v) for k, v in self.env.items()})
        env[RUN_MARKER] = self.dir
        env[SUPERVISOR_PID] = str(os.getpid())  # the entrypoint dies with this supervisor (die_with_parent)
        cwd = self.node.get("workdir") or None
        try:
            child = subprocess.Popen(
                argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
            )
        except OSError as exc:
            self.write_line(f"kgen-entrypoint: error: cannot start the node's entrypoint in {cwd}: {exc}")
            self.last_stop_line = "kgen-entrypoint: stopped: configuration error"
            return EXIT_CONFIG
        _record(os.path.join(self.dir, "child"), json.dumps(dict(_identity(child.pid), attempt=attempt)))
        assert child.stdout is not None
        out = child.stdout.fileno()
        os.set_blocking(out, False)
        sel = selectors.DefaultSelector()
        sel.register(out, selectors.EVENT_READ, "out")
        sel.register(self.rfd, selectors.EVENT_READ, "sig")
        injections = [dict(i) for i in self.node.get("inject") or [] if attempt == 0]
        partial = b""
        cont: str | None = None  # the prefix every further piece of a line cut at 64 KiB gets
        eof = False
        ended_at: float | None = None
        while True:
            now = time.monotonic()
            for inj in injections:
                self._inject(inj, child, now)
            for key, _ in sel.select(0.1):
                if key.data == "sig":
                    self._drain()
                    continue
                try:
                    data = os.read(out, 65536)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    data = b""
                if not data:
                    eof = True
                    sel.unregister(out)
                    continue
                lines = (partial + data).split(b"\n")
                partial = lines.pop()
                if len(partial) > 65536:  # a very long line without a newline: write it in pieces
                    lines.append(partial)
                    partial = b""
                    ends = len(lines) - 1  # that last piece goes on in the next one
                else:
                    ends = len(lines)
                for i, raw in enumerate(lines):
                    text = raw.decode("utf-8", "replace").rstrip("\r")
                    if cont is not None:  # a piece of a line: never read as a line of its own (a kgen event)
                        text = cont + text
                    cont = None if i < ends else _piece_prefix(text)
                    self.write_line(text)
                    if cont is None and _FINISHED.match(text):
                        self.finished = True
            self._take_signals(child)
            if child.poll() is not None and ended_at is None:
                ended_at = time.monotonic()
                left = [p for p in run_processes(self.dir) if p != os.getpid()]
                if left:  # the entrypoint is gone: what is left of its tree goes with it, as in a container
                    _signal_all(left, signal.SIGKILL)
            if eof and child.poll() is not None:
                break
            if ended_at is not None and time.monotonic() - ended_at > 5.0:
                break  # a writer we could not kill still holds the pipe: stop reading it
        if partial:
            self.write_line((cont or "") + partial.decode("utf-8", "replace"))
        sel.close()
        child.stdout.close()
        rc = child.returncode
        self.killed = rc < 0  # killed by a signal (not an exit code that looks like one)
        return 128 - rc if rc < 0 else rc

    def _inject(self, inj: dict, child: subprocess.Popen, now: float) -> None:
        """--local --inject: SIGKILL (kill) or SIGSTOP (freeze, SIGCONT after `for` seconds) of this node's
        whole process tree (the entrypoint, torchrun, the workers; not this supervisor), at `at` seconds."""
        what, at, span = inj.get("what"), float(inj.get("at", 0)), inj.get("for")
        if child.poll() is not None or inj.get("done"):
            return
        if not inj.get("fired") and now - self.t0 >= at:
            inj["fired"] = now
            tree = [p for p in run_processes(self.dir) if p != os.getpid()]
            sig = signal.SIGKILL if what == "kill" else signal.SIGSTOP
            self.say(f"inject {what}: {signal.Signals(sig).name} to node {self.rank}'s {len(tree)} process(es)")
            _signal_all(tree, sig)
            if what == "kill" or span is None:
                inj["done"] = True
        elif inj.get("fired") and span is not None and now - inj["fired"] >= float(span):
            inj["done"] = True
            tree = [p for p in run_processes(self.dir) if p != os.getpid()]
            self.say(f"inject thaw: SIGCONT to node {self.rank}'s {len(tree)} process(es)")
            _signal_all(tree, signal.SIGCONT)


def _signal_reason(code: int) -> str:
    if code > 128:
        try:
            return f"killed by {signal.Signals(code - 128).name}"
        except ValueError:
            return f"killed by signal {code - 128}"
    return f"exit code {code}"


# ==== entrypoint/parts/nodeverbs.py:1 ====
"""kgen launch's verbs on a node: --launch-node (the checks, then the detached supervisor) and --run-dir DIR
--state | --log | --stop-node | --stacks. Not in pods."""


# ==== entrypoint/parts/nodeverbs.py:36 ====
def detach(run_dir: str) -> dict:
    """Start this node's supervisor in its own session (double fork); return its pid record once written."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the forked processes
        code = 1
        try:
            os.close(r)
            os.setsid()
            if os.fork():
                os._exit(0)
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)  # nothing of the launcher's ssh channel stays open
            os.umask(0o077)
            sup = Supervisor(run_dir)
            sup.write_pid()
            os.write(w, b"ok")
            os.close(w)
            code = sup.guarded_run()
        finally:
            os._exit(code if isinstance(code, int) and 0 <= code < 256 else 1)
    os.close(w)
    os.waitpid(pid, 0)
    with os.fdopen(r, "rb") as fh:
        ok = fh.read() == b"ok"
    rec = _read_json(os.path.join(run_dir, "pid"))
    if not ok or rec is None:
        fatal(EXIT_CONFIG, f"the node's supervisor did not start in {run_dir}")
    return rec or {}


def _script_problems(path: str, shown: str) -> list[str]:
    """The training script compiles with this host's interpreter (nothing of it runs)."""
    try:
        with open(path, "rb") as fh:
            source = fh.read(16 << 20)
        compile(source, shown, "exec", dont_inherit=True)
    except SyntaxError as exc:
        where = f"{exc.msg} (line {exc.lineno})"
        return [f"training script {shown!r} does not compile with {sys.executable} on this host: {where}"]
    except (OSError, ValueError) as exc:
        return [f"training script {shown!r} cannot be read on this host: {exc}"]
    return []


def _module_problems(name: str, workdir: str, pythonpath: str) -> list[str]:
    """`-m name` is importable as `python -m` would find it in `workdir` (nothing of it runs: the path
    finder only looks, package by package)."""
    from importlib.machinery import BuiltinImporter, PathFinder

    here = os.path.dirname(os.path.abspath(globals().get("__file__") or "")) if globals().get("__file__") else None
    search: list[str] | None = [workdir] + [p for p in pythonpath.split(os.pathsep) if p]
    search += [p for p in sys.path if p and p != here and p not in search]  # type: ignore[operator]
    parts = name.split(".")
    for i, part in enumerate(parts):
        spec = PathFinder.find_spec(part, search) or (BuiltinImporter.find_spec(part) if i == 0 else None)
        if spec is None:
            return [
                f"module {'.'.join(parts[: i + 1])!r} (of -m {name}) not found by {sys.executable} in {workdir} "
                "on this host: sync your code there (--workdir), install it, or set --env PYTHONPATH=..."
            ]
        search = list(spec.submodule_search_locations or []) or None
        if search is None and i < len(parts) - 1:
            return [f"-m {name}: {'.'.join(parts[: i + 1])!r} is a module, not a package, on this host"]
    if search is not None and PathFinder.find_spec("__main__", search) is None:
        return [f"-m {name}: {name!r} is a package without __main__.py on this host: name the module to run"]
    return []


def _port_problem(port: int) -> str | None:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("0.0.0.0", port))
    except OSError as exc:
        return f"port {port} is in use on this host ({exc.strerror})"
    finally:
        s.close()
    return None


def _reply(msg: dict) -> None:
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def launch_node(source: str | None = None) -> int:
    """--launch-node: the host side of `kgen launch`, a short dialogue on stdin/stdout.

    launcher -> one JSON line: run, rank, launch id, command, workdir, ports to check;
    host -> one JSON line: ok, problems, host name, run dir, python, the address ssh reached;
    launcher -> {"go": true, "env": ..., "secret": ..., "inject": ...} once every host answered ok
    (anything else, or EOF: nothing is created) -> host: run dir, supervisor pid."""
    import importlib.util

    header = json.loads(sys.stdin.readline() or "{}")
    run, rank = str(header.get("run") or ""), int(header.get("rank", -1))
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", run) or rank < 0:
        fatal(EXIT_CONFIG, f"--launch-node: bad run name {run!r} or rank {rank}")
    run_dir = node_dir(run, rank)
    run_root = os.path.dirname(run_dir)
    command = [str(a) for a in header.get("command") or []]
    workdir = str(header.get("workdir") or os.getcwd())
    problems = []
    if header.get("check_torch", True):
        try:
            has_torch = importlib.util.find_spec("torch") is not None
        except (ImportError, ValueError):
            has_torch = False
        if not has_torch:
            problems.append(
                f"torch is not installed for {sys.executable}: install it there, or pass --python with the "
                "interpreter that has it"
            )
    launch_id = str(header.get("launch_id") or "")
    owner = _read_json(os.path.join(run_root, "launch.json")) or {}
    if os.path.exists(run_root) and owner.get("launch_id") != launch_id:
        problems.append(
            f"a run named {run} already exists on this host ({run_root}): `kgen stop {run} --rm` removes it, "
            "or choose another --name"
        )
    if not os.path.isdir(workdir):
        problems.append(
            f"working directory {workdir} does not exist on this host: sync your code there or set --workdir"
        )
    elif command and command[0].endswith(".py") and not os.path.isfile(os.path.join(workdir, command[0])):
        problems.append(
            f"training script {command[0]!r} not found in {workdir} on this host: copy or sync it there "
            "(or set --workdir)"
        )
    elif command and command[0].endswith(".py"):
        problems.extend(_script_problems(os.path.join(workdir, command[0]), command[0]))
    elif command[:1] == ["-m"] and len(command) > 1:
        problems.extend(_module_problems(command[1], workdir, str(header.get("pythonpath") or "")))
    elif command and "/" in command[0] and not command[0].endswith(".py"):  # a program torchrun runs as is
        program = os.path.join(workdir, command[0])
        if os.path.isdir(program):
            problems.append(f"program {command[0]!r} is a directory on this host, not a program to run")
        elif not os.path.isfile(program):
            problems.append(
                f"program {command[0]!r} not found in {workdir} on this host: copy or sync it there (or set --workdir)"
            )
        elif not os.access(program, os.X_OK):
            problems.append(f"program {command[0]!r} in {workdir} is not executable on this host: chmod +x it")
    for port in header.get("ports") or []:
        problem = _port_problem(int(port))
        if problem:
            problems.append(f"{problem}: choose another --port (the run uses --port and --port+1)")
    conn = (os.environ.get("SSH_CONNECTION") or "").split()
    _reply(
        {
            "ok": not problems,
            "problems": problems,
            "host": socket.gethostname(),
            "dir": run_dir,
            "python": sys.executable,
            "addr": conn[2] if len(conn) == 4 else "",
        }
    )
    if problems:
        return EXIT_CONFIG
    try:
        go = json.loads(sys.stdin.readline() or "{}")
    except ValueError:
        go = {}
    if not isinstance(go, dict) or go.get("go") is not True:
        return EXIT_OK  # the launcher gave up (another host failed its checks): nothing was created
    try:
        os.makedirs(os.path.dirname(run_root), mode=0o700, exist_ok=True)
        # The run's folder appears whole or not at all: local nodes of one launch create it at the same
        # time, and each must see the launch id of whoever made it (a folder renamed into place).
        staging = os.path.join(os.path.dirname(run_root), f".staging-{secrets.token_hex(8)}")
        os.mkdir(staging, 0o700)
        _write_private(os.path.join(staging, "launch.json"), json.dumps({"launch_id": launch_id}))
        try:
            os.rename(staging, run_root)
        except OSError as exc:
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
            os.unlink(os.path.join(staging, "launch.json"))
            os.rmdir(staging)
            if (_read_json(os.path.join(run_root, "launch.json")) or {}).get("launch_id") != launch_id:
                raise FileExistsError(errno.EEXIST, "a run of this name exists", run_root) from None
        os.mkdir(run_dir, 0o700)
        os.chmod(run_dir, 0o700)
        env = {str(k): str(v) for k, v in (go.get("env") or {}).items()}
        env[RUN_MARKER] = run_dir
        if go.get("secret"):
            _write_private(os.path.join(run_dir, "secret"), str(go["secret"]) + "\n", exclusive=True)
            env["KGEN_SECRET_FILE"] = os.path.join(run_dir, "secret")
        _write_private(os.path.join(run_dir, "env"), json.dumps(env), exclusive=True)
        node = {"rank": rank, "run": run, "command": command, "workdir": workdir, "inject": go.get("inject") or []}
        _write_private(os.path.join(run_dir, "node.json"), json.dumps(node), exclusive=True)
        if source is None:
            with open(os.path.abspath(__file__)) as fh:
                source = fh.read()
        _write_private(os.path.join(run_dir, "kgen_entrypoint.py"), source, exclusive=True)
    except OSError as exc:
        _reply({"started": False, "error": f"cannot create the run directory {run_dir}: {exc}"})
        return EXIT_CONFIG
    rec = detach(run_dir)
    _reply({"started": True, "dir": run_dir, "pid": rec.get("pid"), "pgid": rec.get("pgid")})
    return EXIT_OK


def _tail_lines(path: str, lines: int, limit: int = 1 << 20) -> list[str]:
    """The last `lines` lines of a file, read backwards in blocks, at most `limit` bytes from its end."""
    if lines <= 0:
        return []
    try:
        with open(path, "rb") as fh:
            end = fh.seek(0, os.SEEK_END)
            data, start = b"", end
            while start > 0 and data.count(b"\n") <= lines and end - start < limit:
                step = min(65536, start, limit - (end - start))
                start -= step
                fh.seek(start)
                data = fh.read(step) + data
    except OSError:
        return []
    text = data.decode("utf-8", "replace").splitlines()
    if start > 0 and text:
        text = text[1:]  # the first line read may be cut
    return text[-lines:]


def node_state(run_dir: str) -> dict:
    """--state: this node's run state as one JSON object (what `kgen status` reads from every host)."""
    out: dict = {"dir": run_dir, "host": socket.gethostname()}
    if not os.path.isdir(run_dir):
        out["missing"] = True
        return out
    pid = _read_json(os.path.join(run_dir, "pid"))
    child = _read_json(os.path.join(run_dir, "child"))
    out["pid"] = pid
    out["alive"] = _same_process(pid) is not None
    child_state = _same_process(child)
    out["child"] = dict(child or {}, state=child_state)
    out["exit"] = _read_json(os.path.join(run_dir, "exit"))
    out["stopping"] = os.path.exists(os.path.join(run_dir, "stopping"))
    node = _read_json(os.path.join(run_dir, "node.json")) or {}
    out["rank"] = node.get("rank")
    try:
        out["log_size"] = os.path.getsize(os.path.join(run_dir, "log"))
    except OSError:
        out["log_size"] = 0
    failed = isinstance(out["exit"], dict) and out["exit"].get("code") not in (0, EXIT_STOPPED)
    out["tail"] = _tail_lines(os.path.join(run_dir, "log"), STATE_TAIL_FAILED if failed else STATE_TAIL, 256 << 10)
    out["events"] = _tail_lines(os.path.join(run_dir, "events"), STATE_EVENTS, 256 << 10)
    return out


def print_log(run_dir: str, tail: int | None, follow: bool) -> int:
    """--log: the node's log (the last `tail` lines); --follow: then every new line until the node ended."""
    path = os.path.join(run_dir, "log")
    if not os.path.isdir(run_dir):
        fatal(EXIT_CONFIG, f"no run directory {run_dir} on this host")
    out = sys.stdout.buffer
    pos = 0
    if tail is not None:
        lines = _tail_lines(path, tail, 64 << 20)
        out.write("".join(line + "\n" for line in lines).encode("utf-8", "replace"))
        out.flush()
        try:
            pos = os.path.getsize(path)
        except OSError:
            pos = 0
    partial = b""
    while True:
        ended = os.path.exists(os.path.join(run_dir, "exit")) or not _same_process(
            _read_json(os.path.join(run_dir, "pid"))
        )
        try:
            with open(path, "rb") as fh:
                fh.seek(pos)
                data = fh.read(4 << 20)
        except OSError:
            data = b""
        pos += len(data)
        if data:
            whole, _, partial = (partial + data).rpartition(b"\n")
            if whole:
                out.write(whole + b"\n")
                out.flush()
            continue
        if not follow or ended:
            break
        time.sleep(0.2)
    if partial:
        out.write(partial + b"\n")
    out.flush()
    return EXIT_OK


def stop_node(run_dir: str, grace: float, interrupt: bool, group_wait: float) -> dict:
    """--stop-node: end every process of this node. With `interrupt`, first the deliberate group stop
    (SIGINT to the node's entrypoint: the group stop); every node then waits up to `group_wait` s for the
    group to end by itself; then SIGTERM to the entrypoint (it stops torchrun, which stops the workers),
    SIGTERM to whatever is left after ORDERLY_STOP s (with SIGCONT, for a frozen tree), SIGKILL at
    `grace` s; verified by a /proc scan of the run's marker. Idempotent."""
    t0 = time.monotonic()
    out: dict = {"dir": run_dir, "host": socket.gethostname()}
    if not os.path.isdir(run_dir):
        out.update(missing=True, left=[])
        return out
    try:
        _write_private(os.path.join(run_dir, "stopping"), _utc_stamp(), exclusive=True)
    except FileExistsError:
        pass
    pid = _read_json(os.path.join(run_dir, "pid")) or {}
    sid = pid.get("sid") if _same_process(pid) else None

    def left() -> list[int]:
        return run_processes(run_dir, sid)

    procs = left()
    out["found"] = len(procs)
    if not proc_is_ours() and isinstance(pid.get("pgid"), int):
        # a sandbox without its own /proc: the supervisor's process group is all that can be reached
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(pid["pgid"], sig)
            except OSError:
                break
            time.sleep(min(grace, 5.0) if sig == signal.SIGTERM else 0)
        out.update(steps=["SIGTERM process group (no /proc of this PID namespace)"], left=[], unverified=True)
        return out
    if not procs:
        out.update(already=True, left=[], took=round(time.monotonic() - t0, 3))
        return out
    steps = []
    child = _read_json(os.path.join(run_dir, "child"))
    supervisor = pid.get("pid") if sid else None

    def wait_until(t: float) -> list[int]:
        procs = left()
        while procs and time.monotonic() < t:
            time.sleep(0.05)
            procs = left()
        return procs

    if interrupt and _same_process(child):
        os.kill(child["pid"], signal.SIGINT)  # type: ignore[index]  # the deliberate group stop (the group stop every node joins)
        steps.append("SIGINT (group stop)")
    if group_wait > 0:  # every node gives the group stop this long to end it
        procs = wait_until(t0 + min(group_wait, grace))
        if not procs and not steps:
            steps.append("ended by the group stop")
    if procs and _same_process(child):
        # the orderly way first: the entrypoint stops torchrun, which stops the workers
        _signal_all([child["pid"]], signal.SIGTERM)  # type: ignore[index]
        _signal_all(procs, signal.SIGCONT)  # a frozen (SIGSTOPped) tree acts on signals only once continued
        steps.append("SIGTERM entrypoint")
        procs = wait_until(min(time.monotonic() + ORDERLY_STOP, t0 + grace))
    if procs:
        _signal_all([p for p in procs if p != supervisor], signal.SIGTERM)
        _signal_all(procs, signal.SIGCONT)
        steps.append("SIGTERM all")
        procs = wait_until(t0 + grace)
    if procs:
        _signal_all(procs, signal.SIGKILL)
        steps.append("SIGKILL")
        procs = wait_until(time.monotonic() + 5.0)
    if not os.path.exists(os.path.join(run_dir, "exit")) and not procs:
        # the supervisor was killed before it could write it
        rec = {"code": 128 + 9, "reason": "killed by kgen stop", "time": _utc_stamp(), "restarts": None}
        _record(os.path.join(run_dir, "exit"), json.dumps(rec))
    out.update(steps=steps, left=procs, took=round(time.monotonic() - t0, 3))
    return out


def remove_node(run_dir: str) -> dict:
    """--remove-node: delete this node's run directory (and the run's folder once empty), unless it still runs."""
    import shutil

    out: dict = {"dir": run_dir, "host": socket.gethostname()}
    if not os.path.isdir(run_dir):
        out["missing"] = True
        return out
    if not os.path.basename(run_dir).startswith("node") or not os.path.isfile(os.path.join(run_dir, "node.json")):
        out["error"] = f"{run_dir} is not a kgen node run directory: not removed"
        return out
    pid = _read_json(os.path.join(run_dir, "pid")) or {}
    left = run_processes(run_dir, pid.get("sid") if _same_process(pid) else None)
    if left:
        out["error"] = f"{len(left)} process(es) of the run still alive: not removed (kgen stop first)"
        return out
    shutil.rmtree(run_dir, ignore_errors=True)
    root = os.path.dirname(run_dir)
    try:
        if set(os.listdir(root)) <= {"launch.json"}:  # the run's last node on this host
            shutil.rmtree(root, ignore_errors=True)
    except OSError:
        pass  # another node of the run on this host removed it just now
    out["removed"] = not os.path.exists(run_dir)
    return out


def run_dir_verb(args: list[str]) -> int:
    """--run-dir DIR (--state | --log [--tail N] [--follow] | --stop-node [--grace S] [--interrupt]
    [--group-wait S] | --remove-node | --detach -- COMMAND...)."""
    if len(args) < 2:
        fatal(EXIT_CONFIG, "--run-dir needs a directory and a verb (--state, --log, --stop-node, --detach)")
    run_dir, verb, rest = os.path.abspath(args[0]), args[1], args[2:]
    opts: dict = {"tail": None, "follow": False, "grace": 10.0, "interrupt": False, "group_wait": 0.0}
    command: list[str] = []
    i = 0
    while i < len(rest):
        arg = rest[i]
        if arg == "--":
            command = rest[i + 1 :]
            break
        if arg in ("--follow", "--interrupt"):
            opts[arg[2:]] = True
            i += 1
            continue
        if arg in ("--tail", "--grace", "--group-wait") and i + 1 < len(rest):
            try:
                value = float(rest[i + 1])
            except ValueError:
                fatal(EXIT_CONFIG, f"{arg} needs a number, got {rest[i + 1]!r}")
            opts[arg.lstrip("-").replace("-", "_")] = int(value) if arg == "--tail" else value
            i += 2
            continue
        fatal(EXIT_CONFIG, f"--run-dir: unknown option {arg!r}")
    if verb == "--state":
        _reply(node_state(run_dir))
        return EXIT_OK
    if verb == "--log":
        return print_log(run_dir, opts["tail"], opts["follow"])
    if verb == "--stop-node":
        _reply(stop_node(run_dir, opts["grace"], opts["interrupt"], opts["group_wait"]))
        return EXIT_OK
    if verb == "--remove-node":
        _reply(remove_node(run_dir))
        return EXIT_OK
    if verb == "--stacks":
        _reply(dict(stacks_answer(os.path.join(run_dir, "hang")), dir=run_dir))
        return EXIT_OK
    if verb == "--detach":  # by hand: DIR/env (JSON) written beforehand; the command after --
        if not command:
            fatal(EXIT_CONFIG, "--detach needs the training command after --")
        if not os.path.isfile(os.path.join(run_dir, "env")):
            fatal(EXIT_CONFIG, f"{run_dir}/env is missing: write the node's environment there (JSON, mode 0600)")
        node = {"command": command, "workdir": os.getcwd(), "inject": []}
        _write_private(os.path.join(run_dir, "node.json"), json.dumps(node))
        if not os.path.isfile(os.path.join(run_dir, "kgen_entrypoint.py")):
            with open(os.path.abspath(__file__)) as fh:
                _write_private(os.path.join(run_dir, "kgen_entrypoint.py"), fh.read())
        _reply(detach(run_dir))
        return EXIT_OK
    fatal(EXIT_CONFIG, f"--run-dir: unknown verb {verb!r} (--state, --log, --stop-node, --remove-node, --detach)")
    return EXIT_CONFIG


# ==== entrypoint/parts/slurm.py:1 ====
"""Slurm: the task's supervisor and the batch script's decision after srun. Not in pods."""


# ==== entrypoint/parts/slurm.py:31 ====
def _slurm_int(name: str, default: int = 0) -> int:
    raw = (os.environ.get(name) or "").strip()
    return int(raw) if raw.isdigit() else default


def slurm_max_requeues(env: dict) -> int:
    raw = (env.get("KGEN_MAX_REFORMATIONS") or "").strip()
    return int(raw) if raw.isdigit() else int(DEFAULTS["KGEN_MAX_REFORMATIONS"])  # type: ignore[call-overload]


class SlurmNode(Supervisor):
    """Node R of a Slurm job step, in the foreground of its srun task: bare metal's stamping (RUN/node<R>/log
    and events; every line also to stdout, which is Slurm's output file), one attempt (Slurm requeues the
    job, nothing is replaced here), RUN/node<R>/exit tagged with the attempt."""

    def __init__(self, run: str, rank: int, command: list[str]) -> None:
        self.run_root = run
        self.job = (os.environ.get("SLURM_JOB_ID") or "").strip()
        self.attempt = _slurm_int("SLURM_RESTART_COUNT")
        node_dir = os.path.join(run, f"node{rank}")
        os.makedirs(node_dir, mode=0o700, exist_ok=True)
        _write_private(os.path.join(node_dir, "node.json"), json.dumps({"command": command, "rank": rank,
                                                                          "workdir": os.getcwd()}))  # fmt: skip
        with open(os.path.abspath(__file__)) as fh:
            _write_private(os.path.join(node_dir, "kgen_entrypoint.py"), fh.read())
        super().__init__(node_dir)

    def write_line(self, line: str) -> None:
        super().write_line(line)
        try:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()
        except (OSError, ValueError):
            pass

    def finish(self, code: int, reason: str) -> int:
        rec = {"code": code, "reason": reason, "time": _utc_stamp(), "attempt": self.attempt, "job": self.job,
               "host": socket.gethostname(), **self.drops()}  # fmt: skip
        _record(os.path.join(self.dir, "exit"), json.dumps(rec), RECORD_BOUND)
        self.note(dict(rec, event="exit"))
        return code

    def note(self, rec: dict) -> None:
        """One line of RUN/node<R>/attempts: every attempt's start (host) and exit, kept across requeues."""
        try:
            fd = os.open(os.path.join(self.dir, "attempts"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        except OSError:
            return
        try:
            self._append(fd, (json.dumps(rec) + "\n").encode())
        finally:
            os.close(fd)

    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT):
            signal.signal(sig, self._on_signal)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.signal(signal.SIGCHLD, self._on_signal)
        set_child_subreaper()
        rec = _identity(os.getpid())
        rec.update(host=socket.gethostname(), attempt=self.attempt, job=self.job, time=_utc_stamp())
        _write_private(os.path.join(self.dir, "pid"), json.dumps(rec))
        _reserve(os.path.join(self.dir, "exit"))
        self.note(
            {"event": "start", "attempt": self.attempt, "job": self.job, "host": rec["host"], "time": rec["time"]}
        )
        limit = slurm_max_requeues(dict(os.environ))
        if os.path.exists(os.path.join(self.run_root, "stopping")):
            reason = "stopped by user (kgen stop asked before this attempt started)"
            self.write_line(f"kgen-entrypoint: stopped: {reason}")
            return self.finish(EXIT_STOPPED, reason)
        if self.attempt > limit:
            reason = (f"requeue limit reached: attempt {self.attempt} (SLURM_RESTART_COUNT) is more than "
                      f"KGEN_MAX_REFORMATIONS={limit}")  # fmt: skip
            self.write_line(f"kgen-entrypoint: stopped: {reason}")
            return self.finish(EXIT_RUN_FAILED, reason)
        self.say(f"Slurm job {self.job}, attempt {self.attempt} (requeues up to {limit}) on {socket.gethostname()}")
        code = self.run_child(self.attempt)
        reason = self.last_stop_line.replace("kgen-entrypoint: stopped: ", "", 1) or _signal_reason(code)
        return self.finish(code, reason)


def slurm_node(args: list[str]) -> int:
    """--slurm-node RUN -- COMMAND: node SLURM_NODEID of the run, supervised in the foreground."""
    if len(args) < 3 or args[1] != "--" or not os.path.isdir(args[0]):
        fatal(EXIT_CONFIG, "--slurm-node needs the run's folder (an existing directory) and -- COMMAND")
    rank = _slurm_int("SLURM_NODEID", -1)
    if rank < 0 or not (os.environ.get("SLURM_STEP_ID") or os.environ.get("SLURM_STEPID")):
        fatal(EXIT_CONFIG, "--slurm-node runs inside a Slurm job step: start it with srun --ntasks-per-node=1")
    command = args[2:]
    if command[:1] not in (["--smoke-test"], ["--diagnose"]):
        check_command(command)
    os.umask(0o077)
    return SlurmNode(os.path.abspath(args[0]), rank, command).run()


def slurm_outcome(exits: dict, nnodes: int, attempt: int, job: str, srun_rc: int, limit: int,
                  stopping: bool) -> tuple[str, int, str]:  # fmt: skip
    """What one attempt of a Slurm run comes to: (succeeded | failed | stopped | requeue, exit code, why).

    ``exits``: node rank -> its RUN/node<R>/exit record (any attempt; older ones count as missing). Pure."""
    current = {
        r: rec if isinstance(rec, dict) and rec.get("attempt") == attempt and str(rec.get("job")) == job else None
        for r, rec in ((r, exits.get(r)) for r in range(nnodes))
    }
    codes = {r: rec.get("code") for r, rec in current.items() if rec is not None and isinstance(rec.get("code"), int)}
    missing = sorted(r for r in range(nnodes) if r not in codes)

    def said(r: int) -> str:
        rec = current.get(r) or {}
        return f"node {r}: exit {codes[r]} ({rec.get('reason') or _signal_reason(codes[r])})"  # type: ignore[arg-type]

    if stopping:
        return "stopped", EXIT_STOPPED, "stopped by user (kgen stop)"
    if codes and not missing and all(c == 0 for c in codes.values()):
        return "succeeded", EXIT_OK, f"all {nnodes} nodes finished"
    stopped = [r for r, c in codes.items() if c == EXIT_STOPPED]
    if stopped:
        return "stopped", EXIT_STOPPED, (current[stopped[0]] or {}).get("reason") or "stopped by user"
    if not codes:
        return "failed", srun_rc or EXIT_CONFIG, f"no node of the step started (srun exit {srun_rc})"
    causes = [r for r, c in codes.items() if c not in SLURM_REQUEUE_CODES and c not in (0, EXIT_RUN_FAILED)]
    whole = [r for r, c in codes.items() if c == EXIT_RUN_FAILED]
    if causes or whole:
        first = (causes or whole)[0]
        return "failed", codes[first], said(first)  # type: ignore[return-value]
    lost = [f"node {r}: no exit record (its node was lost)" for r in missing]
    lost += [said(r) for r, c in sorted(codes.items()) if c in (EXIT_DROPPED, 128 + 9)]
    why = "; ".join(lost or [said(r) for r, c in sorted(codes.items()) if c != 0][:3])
    if attempt >= limit:
        return "failed", EXIT_RUN_FAILED, f"requeue limit reached (KGEN_MAX_REFORMATIONS={limit}): {why}"
    return "requeue", EXIT_PEER_LOST, why


def slurm_end(args: list[str]) -> int:
    """--slurm-end RUN RC: the batch script after srun (RC: srun's exit status). Decides the attempt from
    every node's exit record, writes RUN/end and RUN/history, and requeues the job when a node was lost."""
    if len(args) != 2 or not os.path.isdir(args[0]) or not args[1].lstrip("-").isdigit():
        fatal(EXIT_CONFIG, "--slurm-end needs the run's folder and srun's exit status")
    run, srun_rc = os.path.abspath(args[0]), int(args[1])
    job = (os.environ.get("SLURM_JOB_ID") or "").strip()
    attempt = _slurm_int("SLURM_RESTART_COUNT")
    nnodes = _slurm_int("SLURM_NNODES", 1)
    limit = slurm_max_requeues(dict(os.environ))
    exits = {r: _read_json(os.path.join(run, f"node{r}", "exit")) for r in range(nnodes)}
    stopping = os.path.exists(os.path.join(run, "stopping"))
    decision, code, why = slurm_outcome(exits, nnodes, attempt, job, srun_rc, limit, stopping)
    pids = {r: _read_json(os.path.join(run, f"node{r}", "pid")) or {} for r in range(nnodes)}
    rec = {"job": job, "attempt": attempt, "decision": decision, "code": code, "reason": why, "srun": srun_rc,
           "codes": {str(r): (e or {}).get("code") if (e or {}).get("attempt") == attempt else None
                     for r, e in exits.items()},
           "hosts": {str(r): p.get("host") for r, p in pids.items() if p.get("attempt") == attempt},
           "time": _utc_stamp()}  # fmt: skip
    _write_private(os.path.join(run, "end"), json.dumps(rec))
    with open(os.path.join(run, "history"), "a") as fh:
        fh.write(json.dumps(rec) + "\n")
    print(f"kgen-slurm: job {job} attempt {attempt}: {decision}: {why}", flush=True)
    if decision != "requeue":
        return code
    print(f"kgen-slurm: scontrol requeue {job} (attempt {attempt + 1} of at most {limit + 1})", flush=True)
    try:
        res = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, timeout=60)
        err = (res.stderr or res.stdout).strip() if res.returncode else ""
    except (OSError, subprocess.TimeoutExpired) as exc:
        err = str(exc)
    if err:
        print(f"kgen-slurm: error: scontrol requeue {job} failed ({err}): the job fails", flush=True)
        return code
    time.sleep(30)  # Slurm ends this script (SIGTERM) as it requeues the job
    return code


# ==== entrypoint/assemble.py: the guard ====
if __name__ == "__main__":
    sys.exit(main())
