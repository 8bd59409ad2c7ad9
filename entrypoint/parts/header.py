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

import os
import sys
import threading
import time

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
