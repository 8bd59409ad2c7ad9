#!/usr/bin/env python3
"""kgen in-pod entrypoint: node rank, readiness, torchrun, diagnostics and fail-stop.

Usage (what `kgen render` puts in the pod; also works by hand on bare metal):

    python3 kgen_entrypoint.py -- train.py --lr 3e-4     # a script, passed to torchrun as is
    python3 kgen_entrypoint.py -- -m pkg.module args     # a module (torchrun -m)
    python3 kgen_entrypoint.py -- ./run.sh args          # anything else: torchrun --no-python
    python3 kgen_entrypoint.py --smoke-test              # all-reduce check instead of training
    python3 kgen_entrypoint.py --diagnose                # one PASS/FAIL line per check

Environment (docs/design.md is the contract): NNODES, NPROC_PER_NODE, MASTER_ADDR, MASTER_PORT,
node rank from NODE_RANK > JOB_COMPLETION_INDEX > KGEN_POD_INDEX > HOSTNAME ordinal, optional
KGEN_LIVENESS_PORT (default MASTER_PORT+1), KGEN_JOB_NAME, KGEN_KIND, KGEN_RUN_ID, KGEN_RESTART_ATTEMPT,
KGEN_MASTER_WAIT_TIMEOUT, KGEN_RDZV_TIMEOUT, KGEN_HEARTBEAT_INTERVAL, KGEN_HEARTBEAT_TIMEOUT,
KGEN_MAX_RESTARTS, KGEN_MAX_REFORMATIONS, KGEN_REPLACEMENT_TIMEOUT, KGEN_ON_SCRIPT_ERROR.
Set for the training processes: KGEN_RESTART_COUNT (the generation, 0 first), KGEN_RDZV_ID.

Exit codes: 0 success; 2 bad environment, usage or no torch; 3 node 0 not reachable (within
KGEN_MASTER_WAIT_TIMEOUT, or KGEN_REPLACEMENT_TIMEOUT after a loss); 4 the group could not form
(nodes missing after KGEN_RDZV_TIMEOUT, or a lost node's replacement after KGEN_REPLACEMENT_TIMEOUT);
5 the run failed as a whole (re-formation limit, another node's script error); 75 a peer was lost
and re-formation is off (KGEN_MAX_REFORMATIONS=0); 76 this node was dropped from the group (it froze
or was cut off): replace it; otherwise torchrun's exit code; 128+N after signal N. The last log
line says why: "kgen-entrypoint: stopped: <reason>".

Standard library only in the supervising parent; torch is imported by the smoke-test worker and
by the GPU check of --diagnose. How it works and what was measured: docs/entrypoint.md.
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import selectors
import shlex
import signal
import socket
import subprocess
import sys
import time

EXIT_OK = 0
EXIT_CONFIG = 2
EXIT_MASTER_UNREACHABLE = 3
EXIT_PEERS_MISSING = 4  # distinct from 75: a pod that never starts is not a disruption to retry
EXIT_RUN_FAILED = 5  # the run failed as a whole: re-formation limit, or another node's script error
EXIT_PEER_LOST = 75  # re-formation off (KGEN_MAX_REFORMATIONS=0): a peer was lost, the group is replaced
EXIT_DROPPED = 76  # this node froze or was cut off and the group moved on without it: replace this pod

# Fixed tuning (documented in docs/entrypoint.md).
ABORT_GRACE = 3.0  # fail-stop: SIGTERM to the local tree, then SIGKILL after this many seconds
SIGNAL_GRACE = 20.0  # SIGTERM/SIGINT received: torchrun gets this long before SIGKILL (k8s: 30 s)
PROGRESS_EVERY = 10.0  # a progress line while waiting for node 0
BACKOFF_FIRST, BACKOFF_MAX = 0.05, 1.0  # master wait: exponential backoff with jitter
HANDSHAKE_TIMEOUT = 5.0  # node 0 must answer a hello within this
FAIL_VERDICT_WAIT = 2.0  # a torchrun failed: node 0 waits this long for a lost node to explain it
PROTOCOL = 2

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


def log(msg: str) -> None:
    stamp = time.strftime("%H:%M:%S", time.gmtime())
    try:
        sys.stderr.write(f"[{_TAG} {stamp} +{time.monotonic() - _T0:.1f}s] {msg}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


class Stop(Exception):
    """How this node's run ends: the exit code and the one-line reason logged last."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code, self.reason = code, reason


def fatal(code: int, lines: list[str] | str) -> None:
    lines = [lines] if isinstance(lines, str) else lines
    for line in lines:
        sys.stderr.write(f"kgen-entrypoint: error: {line}\n")
    sys.stderr.flush()
    raise Stop(code, "configuration error" if code == EXIT_CONFIG else lines[0])


# --------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------


class Config:
    """Validated settings. Built by load_config(); `problems` lists what is wrong."""

    def __init__(self) -> None:
        self.problems: list[str] = []
        self.nnodes = self.nproc = self.master_port = self.liveness_port = None
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

    @property
    def world_size(self) -> int:
        return self.nnodes * self.nproc

    @property
    def rdzv_id(self) -> str:
        base = f"{self.job_name or 'kgen'}-{self.run_id or 'local'}"
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
            f"peer lost after {self.hb_timeout:g}s of silence; re-formations up to {self.max_reformations}, "
            f"replacement wait {self.replacement_timeout:g}s, on script error: {self.on_script_error}"
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


def load_config(env: dict) -> Config:
    cfg = Config()
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
    ose = (env.get("KGEN_ON_SCRIPT_ERROR") or d["KGEN_ON_SCRIPT_ERROR"]).strip()
    if ose not in ON_SCRIPT_ERROR:
        p.append(
            f"KGEN_ON_SCRIPT_ERROR={ose!r} is not 'fail' or 'reform': set values reform.onScriptError to "
            f"fail (default: a training script's own error fails the run) or reform"
        )
    cfg.on_script_error = ose
    derive_rank(env, cfg.nnodes, cfg)
    return cfg


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
    if extra_pgid:
        try:
            os.killpg(extra_pgid, sig)
        except OSError:
            pass
    for pid in pids:
        try:
            os.kill(pid, sig)
        except OSError:
            pass
    return len(pids)


class Child:
    """torchrun, started in its own session; reaped by us (we may be a subreaper or PID 1)."""

    def __init__(self, argv: list[str], env: dict | None = None) -> None:
        self.proc = subprocess.Popen(argv, start_new_session=True, env=env)
        self.pid = self.proc.pid
        self.rc: int | None = None

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

    def kill_tree(self, grace: float, first: int = signal.SIGTERM) -> None:
        """Signal everything below us, wait up to `grace` seconds, then SIGKILL what is left."""
        if signal_tree(first, self.pid if self.rc is None else None) == 0 and (proc_is_ours() or self.rc is not None):
            return
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            self.reap()
            if not descendants() and (proc_is_ours() or self.rc is not None):
                return
            time.sleep(0.05)
        left = signal_tree(signal.SIGKILL, self.pid if self.rc is None else None)
        if left:
            log(f"{left} process(es) did not stop within {grace:g}s of SIGTERM: SIGKILLed")
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and descendants():
            self.reap()
            time.sleep(0.05)
        self.reap()


# --------------------------------------------------------------------------------------------
# Liveness channel: newline-delimited JSON over TCP, node 0 is the hub
# --------------------------------------------------------------------------------------------


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
        self.rank: int | None = None
        self.host = ""
        self.done = False
        self.since = time.monotonic()

    def send(self, msg: dict) -> None:
        if self.closed:
            return
        self.outbuf += (json.dumps(msg, separators=(",", ":")) + "\n").encode()
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

    def read(self) -> list[dict] | None:
        """Messages received so far; None when the peer closed the connection or reset it."""
        try:
            data = self.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return []
        except OSError:
            return None
        if not data:
            return None
        self.last_rx = time.monotonic()
        self.inbuf += data
        return self.read_buffered()

    def read_buffered(self) -> list[dict]:
        msgs = []
        while b"\n" in self.inbuf:
            line, self.inbuf = self.inbuf.split(b"\n", 1)
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if isinstance(msg, dict):
                msgs.append(msg)
        return msgs

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            try:
                self.sock.close()
            except OSError:
                pass


def resolve(host: str, port: int) -> list[tuple]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [info[4] for info in infos]


class Rejected(Exception):
    def __init__(self, reason: str, code: int) -> None:
        super().__init__(reason)
        self.code = code


def handshake(cfg: Config, sock: socket.socket, hello: dict) -> tuple[dict, bytes]:
    sock.settimeout(HANDSHAKE_TIMEOUT)
    sock.sendall((json.dumps(hello) + "\n").encode())
    buf = b""
    deadline = time.monotonic() + HANDSHAKE_TIMEOUT
    while b"\n" not in buf:
        if time.monotonic() > deadline:
            raise TimeoutError("no answer")
        data = sock.recv(4096)
        if not data:
            raise ConnectionResetError("closed during handshake")
        buf += data
    line, rest = buf.split(b"\n", 1)
    return json.loads(line), rest


def connect_once(cfg: Config, hello: dict, timeout: float) -> tuple[socket.socket, bytes]:
    """One attempt: resolve, connect, handshake. Raises socket.gaierror / OSError / Rejected."""
    addrs = resolve(cfg.master_addr, cfg.liveness_port)
    last: Exception = OSError("no address")
    for addr in addrs:
        family = socket.AF_INET6 if len(addr) == 4 else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            sock.connect(addr)
            answer, rest = handshake(cfg, sock, hello)
        except (OSError, ValueError) as exc:
            sock.close()
            last = exc
            continue
        if answer.get("t") == "welcome":
            return sock, rest
        sock.close()
        code = answer.get("code", EXIT_CONFIG if answer.get("fatal") else 0)
        raise Rejected(str(answer.get("reason", answer)), code if isinstance(code, int) else EXIT_CONFIG)
    raise last


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
MSG_FAIL = "fail"  # node -> node 0: my torchrun exited non-zero (node 0 decides: lost node or script error)
MSG_LEAVE = "leave"  # node -> node 0: I am going away (signal: pod deleted or stopped)

REFORM = "reform"
FAIL = "fail"


def decide(cfg: Config, fault: str, gen: int) -> tuple[str, int, str]:
    """What a fault in generation `gen` leads to: (REFORM, 0, "") or (FAIL, exit code, why).

    fault: "lost" (a node died, was deleted, evicted, frozen or cut off) or "script" (a node's
    torchrun exited non-zero while no node was lost: the training script's own error).
    Not decided here: a group that never forms (4), a node that learns it was dropped (76)."""
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


def wait_for_master(cfg: Config, sigs: Signals, last: int = -1) -> Conn:
    """Active, bounded wait for node 0's entrypoint (DNS, then TCP, then a hello/welcome).

    `last` is the generation this node trained in (-1: never). Every attempt resolves the name
    again (a replacement node 0 comes back with a new IP)."""
    hello = {
        "t": MSG_HELLO,
        "v": PROTOCOL,
        "rank": cfg.node_rank,
        "id": cfg.rdzv_id,
        "nnodes": cfg.nnodes,
        "nproc": cfg.nproc,
        "host": os.environ.get("HOSTNAME") or socket.gethostname(),
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
    target = f"{cfg.master_addr}:{cfg.liveness_port}"
    log(f"waiting for node 0 at {target} (liveness port; bound {bound_name}={bound:g}s)")
    while True:
        if sigs.pending:
            sig = sigs.pending[0]
            name = signal.Signals(sig).name
            log(f"received {name} while waiting for node 0: exiting")
            raise Stop(128 + sig, f"signal {name}")
        attempts += 1
        now = time.monotonic()
        try:
            sock, rest = connect_once(cfg, hello, timeout=max(0.2, min(5.0, deadline - now)))
            log(f"node 0 reachable after {time.monotonic() - start:.1f}s ({attempts} attempt(s))")
            conn = Conn(sock)
            conn.inbuf = rest  # anything node 0 sent right after the welcome
            return conn
        except socket.gaierror as exc:
            state = f"DNS: {cfg.master_addr!r} does not resolve ({exc.strerror or exc})"
        except Rejected as exc:
            if exc.code == EXIT_DROPPED:
                log(f"node 0 says: {exc}")
                raise Stop(EXIT_DROPPED, f"dropped from the group ({exc})") from None
            if exc.code:
                fatal(exc.code, f"node 0 refused this node: {exc}")
            state = f"node 0 answered but is not ready for this node: {exc}"
        except (OSError, ValueError) as exc:
            reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
            state = f"port: {target} resolved but not accepting ({reason})"
        now = time.monotonic()
        if now >= deadline:
            break
        if now >= next_progress:
            log(f"still waiting for node 0 ({now - start:.0f}s of {bound:g}s): {state}")
            next_progress = now + PROGRESS_EVERY
        delay = min(backoff, BACKOFF_MAX) * random.uniform(0.5, 1.0)
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


class Hub:
    """Node 0's side: accepts every other node, numbers the generations, watches the nodes."""

    def __init__(self, cfg: Config, sel: selectors.BaseSelector) -> None:
        self.cfg, self.sel = cfg, sel
        self.listeners: list[socket.socket] = []
        self.pending: list[Conn] = []
        self.peers: dict[int, Conn] = {}
        self.lasts: dict[int, int] = {}
        self.dropped: dict[int, tuple[int, str]] = {}  # rank -> (generation, why)
        self.expected = set(range(1, cfg.nnodes))
        self.gen = -1
        self.state = "joining"  # joining | training | finishing
        self.form_started = time.monotonic()
        self.why_forming = ""
        self.last_beat = 0.0
        self.lost: str | None = None
        self.script_fail: tuple[int, int, float] | None = None  # (rank, rc, when)

    def listen(self) -> None:
        errors = []
        for family, host in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
            try:
                sock = socket.socket(family, socket.SOCK_STREAM)
            except OSError:
                continue
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind((host, self.cfg.liveness_port))
                sock.listen(max(16, self.cfg.nnodes))
                sock.setblocking(False)
            except OSError as exc:
                sock.close()
                errors.append((family, exc))
                continue
            self.listeners.append(sock)
            self.sel.register(sock, selectors.EVENT_READ, ("listen", sock))
        if not self.listeners or any(f == socket.AF_INET for f, _ in errors):
            exc = errors[0][1] if errors else OSError("no socket")
            fatal(
                EXIT_CONFIG,
                f"KGEN_LIVENESS_PORT={self.cfg.liveness_port}: cannot listen ({exc}): pick a free "
                f"port (values livenessPort) that differs from MASTER_PORT",
            )

    def close_listeners(self) -> None:
        for sock in self.listeners:
            try:
                self.sel.unregister(sock)
            except (KeyError, ValueError):
                pass
            sock.close()
        self.listeners = []

    def on_event(self, data) -> None:
        kind, obj = data
        if kind == "listen":
            try:
                sock, addr = obj.accept()
            except OSError:
                return
            conn = Conn(sock, addr)
            self.pending.append(conn)
            self.sel.register(sock, selectors.EVENT_READ, ("conn", conn))
            return
        conn: Conn = obj
        msgs = conn.read()
        if msgs is None:
            self._gone(conn, "closed its liveness connection (pod died, was deleted or its entrypoint was killed)")
            return
        for msg in msgs:
            self._message(conn, msg)

    def _gone(self, conn: Conn, what: str) -> None:
        """A joined node's connection ended (closed, reset or silent)."""
        self._drop(conn)
        rank = conn.rank
        if rank is None or self.peers.get(rank) is not conn:
            return
        del self.peers[rank]
        self.lasts.pop(rank, None)
        if conn.done:
            return
        if self.state == "joining":
            log(f"node {rank} {what} while the group was forming: waiting for it again")
        else:
            self.lose(rank, f"node {rank} {what}")

    def _message(self, conn: Conn, msg: dict) -> None:
        t = msg.get("t")
        if conn.rank is None:
            if t == MSG_PROBE:
                conn.send(
                    {"t": MSG_STATUS, "joined": sorted(self.peers), "nnodes": self.cfg.nnodes, "id": self.cfg.rdzv_id}
                )
                conn.flush(0.5)
                self._drop(conn)
            elif t == MSG_HELLO:
                self._hello(conn, msg)
            else:
                self._drop(conn)
            return
        if t == MSG_DONE:
            conn.done = True
            log(f"node {conn.rank} finished successfully")
        elif t == MSG_FAIL:
            log(f"node {conn.rank}'s torchrun exited with code {msg.get('rc')}")
            self.script_failed(conn.rank, int(msg.get("rc") or 1))
        elif t == MSG_LEAVE:
            reason = msg.get("reason", "unknown")
            self._gone(conn, f"left: {reason}")

    def _reject(self, conn: Conn, msg: dict, reason: str, code: int) -> None:
        log(f"refused node {msg.get('rank')!r} (host {msg.get('host')}): {reason}")
        conn.send({"t": MSG_REJECT, "reason": reason, "fatal": code == EXIT_CONFIG, "code": code})
        conn.flush(0.5)
        self._drop(conn)

    def _hello(self, conn: Conn, msg: dict) -> None:
        rank, last = msg.get("rank"), msg.get("last", -1)
        cfg = self.cfg
        if not isinstance(last, int):
            last = -1
        if self.state == "finishing":
            return self._reject(conn, msg, "node 0 has finished this run", 0)
        if msg.get("id") != cfg.rdzv_id:
            return self._reject(
                conn,
                msg,
                f"rendezvous id {msg.get('id')!r} differs from node 0's {cfg.rdzv_id!r} (pods of two different runs?)",
                0,
            )
        if msg.get("nnodes") != cfg.nnodes or msg.get("nproc") != cfg.nproc:
            return self._reject(
                conn,
                msg,
                f"NNODES {msg.get('nnodes')} vs {cfg.nnodes} / NPROC_PER_NODE {msg.get('nproc')} vs {cfg.nproc} "
                f"(that node vs node 0): render every pod from the same manifest",
                EXIT_CONFIG,
            )
        if not isinstance(rank, int) or rank not in self.expected:
            return self._reject(conn, msg, f"node rank {rank!r} is not in 1..{cfg.nnodes - 1}", EXIT_CONFIG)
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
        self.pending.remove(conn)
        conn.rank, conn.host = rank, msg.get("host")
        self.peers[rank] = conn
        self.lasts[rank] = last
        if last < 0:
            self.dropped.pop(rank, None)
        conn.send({"t": MSG_WELCOME, "v": PROTOCOL, "hb": cfg.hb_interval})
        log(
            f"node {rank} joined the liveness channel ({len(self.peers)}/{cfg.nnodes - 1} peers, host "
            f"{msg.get('host')}, last generation {last})"
        )

    def _drop(self, conn: Conn) -> None:
        try:
            self.sel.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        if conn in self.pending:
            self.pending.remove(conn)
        conn.close()

    def lose(self, rank: int | None, reason: str) -> None:
        if self.state == "training" and rank is not None:
            self.dropped[rank] = (self.gen, reason)
        if self.lost is None:
            self.lost = reason

    def script_failed(self, rank: int, rc: int) -> None:
        if self.script_fail is None:
            self.script_fail = (rank, rc, time.monotonic())

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

    def _close_peers(self) -> None:
        for conn in list(self.peers.values()) + list(self.pending):
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
        for conn in list(self.pending):
            if now - conn.since > HANDSHAKE_TIMEOUT:
                self._drop(conn)
        for _, conn in sorted(self.peers.items()):
            if not conn.done and now - conn.last_rx > cfg.hb_timeout:
                self._gone(
                    conn,
                    f"silent for {now - conn.last_rx:.1f}s (> KGEN_HEARTBEAT_TIMEOUT={cfg.hb_timeout:g}s): "
                    f"frozen or cut off",
                )

    def finish(self) -> None:
        """Own torchrun succeeded: tell the others; keep watching until they are done."""
        self.state = "finishing"
        self.close_listeners()
        for conn in self.peers.values():
            conn.send({"t": MSG_DONE})

    def all_done(self) -> bool:
        return all(conn.done or conn.closed for conn in self.peers.values())

    def close(self) -> None:
        self._close_peers()
        self.close_listeners()


class Spoke:
    """Every other node's side: one connection to node 0 per generation."""

    def __init__(self, cfg: Config, sel: selectors.BaseSelector, conn: Conn) -> None:
        self.cfg, self.sel, self.conn = cfg, sel, conn
        self.master_done = False
        self.start_gen: int | None = None
        # what node 0 (or its loss) decided: ("abort", reason) | ("end", code, blame, reason) | ("lost", reason)
        self.verdict: tuple | None = None
        sel.register(conn.sock, selectors.EVENT_READ, ("conn", conn))
        if b"\n" in conn.inbuf:
            self._handle(conn.read_buffered())

    def on_event(self, data) -> None:
        msgs = self.conn.read()
        if msgs is None:
            self.close()
            if not self.master_done:
                self._set(
                    (
                        "lost",
                        "the liveness connection to node 0 closed (node 0 died, was deleted or its entrypoint "
                        "was killed)",
                    )
                )
            return
        self._handle(msgs)

    def _handle(self, msgs: list[dict]) -> None:
        for msg in msgs:
            t = msg.get("t")
            if t == MSG_START:
                self.start_gen = int(msg.get("gen", 0))
            elif t == MSG_ABORT:
                self._set(("abort", msg.get("reason", "unknown")))
            elif t == MSG_END:
                code = int(msg.get("code", EXIT_RUN_FAILED))
                self._set(("end", code, msg.get("blame"), msg.get("reason", "unknown")))
            elif t == MSG_DONE:
                self.master_done = True
                log("node 0 finished successfully")

    def _set(self, verdict: tuple) -> None:
        if self.verdict is None:
            self.verdict = verdict

    def close(self) -> None:
        try:
            self.sel.unregister(self.conn.sock)
        except (KeyError, ValueError):
            pass
        self.conn.close()

    def tick(self, now: float) -> None:
        conn = self.conn
        if conn.closed:
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


# --------------------------------------------------------------------------------------------
# torchrun
# --------------------------------------------------------------------------------------------


def torchrun_argv(cfg: Config, command: list[str], gen: int = 0) -> list[str]:
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
    if command[0] == "-m":
        return argv + command
    if command[0].endswith(".py"):
        return argv + command
    return argv + ["--no-python"] + command


# A launcher as the command nests launchers: every node's inner torchrun (accelerate, deepspeed) would form
# its own one-node world. Read as the launcher reads its arguments; kgen.launchers holds the same reading
# (tests/test_launchers.py keeps the two on one table). Options not listed as flags take one value.
NESTED_PROBLEM = (
    "{launcher} is a launcher, and kgen's entrypoint already starts torchrun on every node "
    "(nested, each node would train alone as its own one-node world)"
)
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


def nested_launcher(command: list[str]) -> tuple[str, list[str], int | None, str, int | None] | None:
    """(launcher as written, the training command inside it, processes per node it was asked for and how,
    nodes it was asked for) when `command` is a launcher; None otherwise."""
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
        option = " ".join(opts["num_processes"]) + (f" over {machines} machines" if machines > 1 else "")
    for name in _NPROC_OPTIONS.get(family, ()):
        if name in opts and not option:
            nproc, option = number(name), " ".join(opts[name])
    nnodes = number({"torchrun": "nnodes", "accelerate": "num_machines", "deepspeed": "num_nodes"}[family])
    return launcher, inner, nproc, option, 1 if "standalone" in opts else nnodes


def launcher_problem(command: list[str], env: dict) -> str | None:
    """The refusal of a launcher as the command, with the command to run instead (`use: ...`)."""
    nested = nested_launcher(command)
    if nested is None:
        return None
    launcher, inner, nproc, option, nnodes = nested
    notes, prefix = [], []
    for var, asked, how in (("NPROC_PER_NODE", nproc, f"its {option}"), ("NNODES", nnodes, f"its {nnodes} nodes")):
        have = (env.get(var) or "").strip()
        if asked is None or (var == "NNODES" and asked < 2):
            continue
        if not have:
            prefix.append(f"{var}={asked}")
        elif have != str(asked):
            notes.append(f"{how} disagree{'s' * (var == 'NPROC_PER_NODE')} with {var}={have}")
    me = sys.argv[0] if os.path.basename(sys.argv[0]) == os.path.basename(__file__) else os.path.basename(__file__)
    use = " ".join(shlex.quote(w) for w in [*prefix, "python3", me, "--", *inner])
    return "; ".join([NESTED_PROBLEM.format(launcher=launcher), *notes, f"use: {use}"])


def check_command(command: list[str], env: dict | None = None) -> None:
    if not command:
        fatal(
            EXIT_CONFIG,
            "no command after '--': give the training command, e.g. "
            "-- train.py --lr 3e-4, or use --smoke-test / --diagnose",
        )
    nested = launcher_problem(command, os.environ if env is None else env)
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


def start_torchrun(cfg: Config, command: list[str], gen: int) -> Child:
    argv = torchrun_argv(cfg, command, gen)
    env = dict(os.environ, KGEN_RESTART_COUNT=str(gen), KGEN_RDZV_ID=f"{cfg.rdzv_id}-g{gen}")
    log(f"generation {gen}: starting: " + " ".join(argv[1:]))
    try:
        return Child(argv, env)
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


def hold_if_statefulset(cfg: Config, sigs: Signals) -> None:
    """StatefulSet pods restart on exit 0 (restartPolicy Always): after a successful run, idle."""
    if cfg.kind != "statefulset":
        return
    log("run succeeded; holding idle so restartPolicy Always does not retrain; kgen stop NAME to remove")
    while not sigs.pending:
        sigs.sleep(3600)


def run_single(cfg: Config, command: list[str], sigs: Signals) -> Stop:
    child = start_torchrun(cfg, command, 0)
    while child.rc is None:
        if sigs.pending:
            return stop_after_signal(sigs, child, sigs.pending.pop(0))
        sigs.sleep(0.1)
        child.reap()
    child.kill_tree(2.0)
    if child.rc:
        return Stop(child.rc, f"torch failed with code {child.rc}")
    hold_if_statefulset(cfg, sigs)
    return Stop(0, "succeeded")


def run_hub(cfg: Config, command: list[str], sigs: Signals, sel: selectors.BaseSelector) -> Stop:
    hub = Hub(cfg, sel)
    hub.listen()
    log(
        f"liveness channel listening on port {cfg.liveness_port}; waiting for "
        f"{cfg.nnodes - 1} node(s), bound KGEN_RDZV_TIMEOUT={cfg.rdzv_timeout}s"
    )
    while True:
        # joining / re-forming: every node must (re)join with a hello
        while not hub.complete():
            poll(sel, sigs, hub)
            if sigs.pending:
                hub.close()
                return stop_after_signal(sigs, None, sigs.pending.pop(0))
            now = time.monotonic()
            hub.tick(now)
            reason = hub.form_deadline_passed(now)
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
        child = start_torchrun(cfg, command, gen)
        own_rc: int | None = None
        now = time.monotonic()
        while True:
            before = now
            poll(sel, sigs, hub)
            child.reap()
            now = time.monotonic()
            took = now - before  # one turn of this loop (normally <= 0.1 s)
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
                    hub.script_failed(0, own_rc)
            hub.tick(now)
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
            fault, blame = None, None
            if hub.lost is not None:
                fault, reason, what = "lost", hub.lost, "peer lost"
            elif hub.script_fail is not None and now - hub.script_fail[2] >= FAIL_VERDICT_WAIT:
                blame, rc, _ = hub.script_fail
                fault, reason, what = "script", f"node {blame}'s torchrun exited with code {rc}", "script failed"
            if fault is None:
                continue
            verdict, code, why = decide(cfg, fault, hub.gen)
            if verdict == REFORM:
                log(f"{what}: {reason}; stopping torch and re-forming (generation {hub.gen + 1})")
                hub.abort(reason)
                child.kill_tree(ABORT_GRACE)
                break
            if code == EXIT_RUN_FAILED and fault == "lost":
                reason = f"{why}: {reason}"
            log(f"FAIL-STOP: {reason}")
            hub.end(code, reason, blame)
            child.kill_tree(ABORT_GRACE)
            if own_rc and blame == 0:
                return Stop(own_rc, f"torch failed with code {own_rc}")
            return Stop(code, f"{what} ({reason})")


def run_spoke(cfg: Config, command: list[str], sigs: Signals, sel: selectors.BaseSelector) -> Stop:
    last = -1
    while True:
        spoke = Spoke(cfg, sel, wait_for_master(cfg, sigs, last))
        while spoke.start_gen is None and spoke.verdict is None:
            poll(sel, sigs, spoke)
            if sigs.pending:
                spoke.send({"t": MSG_LEAVE, "reason": f"received {signal.Signals(sigs.pending[0]).name}"}, True)
                return stop_after_signal(sigs, None, sigs.pending.pop(0))
            spoke.tick(time.monotonic())
        if spoke.start_gen is None:
            verdict = spoke.verdict
            spoke.close()
            if verdict[0] == "end":
                log(f"FAIL-STOP: node 0 ended the run: {verdict[-1]}")
                return Stop(verdict[1], f"node 0 ended the run ({verdict[-1]})")
            log(f"node 0 lost while waiting to start ({verdict[-1]}): joining again")
            continue
        gen = spoke.start_gen
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
                sig = sigs.pending[0]
                spoke.send(
                    {"t": MSG_LEAVE, "reason": f"received {signal.Signals(sig).name} (pod deleted or stopped)"}, True
                )
                return stop_after_signal(sigs, child, sigs.pending.pop(0))
            if child.rc is not None and own_rc is None:
                own_rc = child.rc
                if own_rc == 0:
                    child.kill_tree(2.0)
                    log("torchrun finished successfully")
                    spoke.send({"t": MSG_DONE}, True)
                    hold_if_statefulset(cfg, sigs)
                    return Stop(0, "succeeded")
                log(f"torchrun exited with code {own_rc}; node 0 decides: a lost node (re-form) or a script error")
                spoke.send({"t": MSG_FAIL, "rc": own_rc})
            spoke.tick(time.monotonic())
            if spoke.verdict is None:
                continue
            kind = spoke.verdict[0]
            reason = spoke.verdict[-1]
            spoke.close()
            if kind == "end":
                log(f"FAIL-STOP: node 0 ended the run: {reason}")
                child.kill_tree(ABORT_GRACE)
                if own_rc and spoke.verdict[2] == cfg.node_rank:
                    return Stop(own_rc, f"torch failed with code {own_rc}")
                return Stop(spoke.verdict[1], f"node 0 ended the run ({reason})")
            if kind == "lost":
                verdict, code, why = decide(cfg, "lost", gen)
                if verdict != REFORM:
                    log(f"FAIL-STOP: {reason}")
                    child.kill_tree(ABORT_GRACE)
                    what = "peer lost" if code == EXIT_PEER_LOST else why
                    return Stop(code, f"{what} (node 0: {reason})")
                reason = f"node 0 lost: {reason}"
            log(f"re-forming: {reason}; stopping torch (generation {gen})")
            child.kill_tree(ABORT_GRACE)
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
    if cfg.nnodes == 1:
        stop = run_single(cfg, command, sigs)
    elif cfg.is_master:
        stop = run_hub(cfg, command, sigs, sel)
    else:
        stop = run_spoke(cfg, command, sigs, sel)
    raise stop


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


def probe_status(sock: socket.socket, cfg: Config) -> str:
    """Ask node 0's entrypoint which nodes have joined (read-only; not counted as a peer)."""
    try:
        answer, _ = handshake(cfg, sock, {"t": MSG_PROBE})
    except (OSError, ValueError):
        return " (no answer from node 0's entrypoint)"
    if answer.get("t") != MSG_STATUS:
        return ""
    joined = answer.get("joined", [])
    missing = sorted(set(range(1, int(answer.get("nnodes", 1)))) - set(joined))
    return (
        f"; node 0's entrypoint (run {answer.get('id')}) has {len(joined)} of "
        f"{int(answer.get('nnodes', 1)) - 1} peers" + (f", missing {missing}" if missing else "")
    )


def running_job_status(cfg: Config) -> str:
    """Inside a running job: node 0's own entrypoint answers a probe on the liveness port."""
    try:
        sock = socket.create_connection(("127.0.0.1", cfg.liveness_port), timeout=2)
    except OSError:
        return ""
    try:
        answer, _ = handshake(cfg, sock, {"t": MSG_PROBE})
    except (OSError, ValueError):
        return ""
    finally:
        sock.close()
    if answer.get("t") != MSG_STATUS or answer.get("id") != cfg.rdzv_id:
        return ""
    return f"node 0's entrypoint (run {answer.get('id')}) is running with {len(answer.get('joined', []))} peer(s)"


def diagnose(env: dict) -> int:
    results: list[tuple[bool, str, str]] = []

    def check(ok: bool, name: str, detail: str) -> None:
        results.append((ok, name, detail))
        print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}", flush=True)

    cfg = load_config(env)
    rank_problems = [p for p in cfg.problems if "rank" in p and "NNODES is not" not in p]
    env_problems = [p for p in cfg.problems if p not in rank_problems]
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
            else:
                for label, port in (("liveness", cfg.liveness_port), ("rendezvous", cfg.master_port)):
                    try:
                        sock = socket.create_connection((cfg.master_addr, port), timeout=3)
                        detail = f"{cfg.master_addr}:{port} accepts"
                        if label == "liveness":
                            detail += probe_status(sock, cfg)
                        sock.close()
                        check(True, f"master {label} port", detail)
                    except OSError as exc:
                        check(
                            False,
                            f"master {label} port",
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


# --------------------------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------------------------

USAGE = (
    "usage: kgen_entrypoint.py [--diagnose | --smoke-test | -- COMMAND [ARGS...]]\n"
    "  -- train.py ARGS      run a script on every worker through torchrun\n"
    "  -- -m pkg.mod ARGS    run a module\n"
    "  -- PROGRAM ARGS       run any program (torchrun --no-python)\n"
    "  --smoke-test          all-reduce check instead of training\n"
    "  --diagnose            environment and network checks, one PASS/FAIL line each\n"
)


def main(argv: list[str] | None = None) -> int:
    """Run, then end every log with one line saying why this node stopped."""
    try:
        return _main(argv)
    except Stop as stop:
        sys.stderr.write(f"kgen-entrypoint: stopped: {stop.reason}\n")
        sys.stderr.flush()
        return stop.code


def _main(argv: list[str] | None = None) -> int:
    global _TAG
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--smoke-worker"]:
        return smoke_worker()
    if args[:1] in (["-h"], ["--help"]):
        sys.stdout.write(USAGE)
        return 0
    if args[:1] == ["--diagnose"]:
        if len(args) > 1:
            fatal(EXIT_CONFIG, "--diagnose takes no arguments")
        return diagnose(dict(os.environ))
    if args[:1] == ["--smoke-test"]:
        if len(args) > 1:
            fatal(EXIT_CONFIG, "--smoke-test takes no arguments")
        command = [os.path.abspath(__file__), "--smoke-worker"]
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
    _TAG = f"kgen node {cfg.node_rank}"
    log(cfg.summary())
    return run(cfg, command)


if __name__ == "__main__":
    sys.exit(main())
