"""Worker output and failures: the Pump writes torchrun's and the workers' lines, and reads failures."""

from __future__ import annotations

import json
import os
import re
import selectors
import signal
import subprocess
import sys
import threading
import time

from .hang import HANG
from .header import _utc_stamp, emit

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
