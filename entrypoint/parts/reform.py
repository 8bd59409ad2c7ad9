"""Re-formation: the protocol's messages, the verdict (decide), --stop and the wait for node 0."""

from __future__ import annotations

import os
import random
import signal
import socket
import sys
import time

from .channel import (
    MSG_AUTH,
    MSG_CHALLENGE,
    MSG_DENIED,
    Conn,
    Denied,
    ProtocolError,
    Rejected,
    Signals,
    connect_once,
    open_session,
    resolve,
)
from .config import Config
from .header import (
    BACKOFF_FIRST,
    BACKOFF_MAX,
    DENIED_BOUND,
    EXIT_CONFIG,
    EXIT_DROPPED,
    EXIT_MASTER_UNREACHABLE,
    EXIT_PEER_LOST,
    EXIT_RUN_FAILED,
    EXIT_STOPPED,
    LINE_MAX,
    LOOKUP_RATE,
    PROGRESS_EVERY,
    PROTOCOL,
    REFUSED_RATE,
    STOP_BUDGET,
    STRANGER_LOG_BURST,
    STRANGER_LOG_WINDOW,
    TEXT_MAX,
    Stop,
    fatal,
    log,
    printable,
)
from .slurmenv import slurm_decide

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
