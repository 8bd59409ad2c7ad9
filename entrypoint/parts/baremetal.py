"""Bare metal: one node's run directory and its supervisor (kgen launch). Not in pods."""

from __future__ import annotations

import errno
import json
import os
import re
import selectors
import signal
import socket
import subprocess
import sys
import time

from .header import (
    DEFAULTS,
    EXIT_CONFIG,
    EXIT_DROPPED,
    EXIT_INTERNAL,
    EXIT_OK,
    EXIT_PEER_LOST,
    RECORD_BOUND,
    _utc_stamp,
    printable,
    shown,
)
from .proctree import SUPERVISOR_PID, proc_is_ours, set_child_subreaper

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
