"""Bare metal: one node's run directory and its supervisor (kgen launch). Not in pods."""

from __future__ import annotations

import errno
import json
import os
import re
import secrets
import selectors
import signal
import socket
import subprocess
import sys
import time

from .hang import stacks_answer
from .header import (
    DEFAULTS,
    EXIT_CONFIG,
    EXIT_DROPPED,
    EXIT_INTERNAL,
    EXIT_OK,
    EXIT_PEER_LOST,
    EXIT_STOPPED,
    RECORD_BOUND,
    _utc_stamp,
    fatal,
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
