"""The local process tree: this node's children, signals, and ending them all."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from .channel import Signals
from .header import emit, log
from .hub import Hub
from .pump import FAILURE_MARK, FAILURE_WAIT, Pump, failure_text
from .spoke import Spoke

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
