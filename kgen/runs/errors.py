"""What a failed training process said: its exception type, message and where it was raised (pure).

The entrypoint writes one failure record per node whose torchrun failed on its own (``FAILURE_MARK`` and a
JSON object, entrypoint/kgen_entrypoint.py ``Pump.failure``): the node's first failed worker, from torch
elastic's error file (a script under ``@record``) or that worker's last traceback, or its last line (``python3:
No module named x``), with the other failed workers of the node. The record reaches kgen in the node's log (bare
metal: its events; Kubernetes: the pod log, and the container's termination message, which
``terminationMessagePolicy: FallbackToLogsOnError`` fills from the end of the log).

Where no record is there (an older entrypoint, a log cut short) ``scan_log`` finds the last traceback of each
process in the log itself: a line ``[rank R] ...`` is process R's (the entrypoint's prefix); a log without those
prefixes is one node's, its tracebacks the node's. torchrun's own tracebacks (a ``SignalException`` after a
stop, ``ChildFailedError``) are the launcher's, never a worker's error. ``ErrorScan`` is the entrypoint's
``ErrorScan`` (one test table holds both).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from kgen.runs.records import parse_time

FAILURE_MARK = "kgen-entrypoint: worker failure: "
RANK_LINE = re.compile(r"^\[rank (\d+)\](?: (.*))?$")  # the entrypoint's prefix of a worker's line
TORCH_TAG = re.compile(r"^\[rank\d+\]:\s?")  # torch's own excepthook prefix
FRAME = re.compile(r'^\s+File "(.*)", line (\d+)')
EXCEPTION = re.compile(r"^([A-Za-z_][\w.]*)(?::\s?(.*))?$")
INTERPRETER = re.compile(r"^/\S*python[\d.]*: ")  # python3: No module named x (from `python -m x`)
PEER = re.compile(
    r"closed by peer|reset by peer|remote worker|broken pipe|timed out|timeout|DistNetworkError|DistStoreError|"
    r"communicator was aborted|connection refused|NCCL error",
    re.I,
)
LAUNCHER_ERRORS = ("SignalException", "ChildFailedError", "RendezvousTimeoutError", "RendezvousConnectionError")
MESSAGE_MAX = 400


@dataclass
class ProcessError:
    """The error of one failed training process (a torchrun worker)."""

    rank: int | None  # its global rank (None: a node's log without per-process prefixes)
    node: int | None = None  # its node rank
    local_rank: int | None = None
    exit: int | None = None  # the worker's exit code (negative: killed by that signal), when torchrun said
    type: str = ""  # the exception type ("" when the process left no traceback)
    message: str = ""
    where: str = ""  # file:line where it was raised (the innermost frame)
    source: str = ""  # error file | traceback | last line | exit status | log
    time: datetime | None = None
    peer: bool = False  # a reaction to another process's failure (connection closed by peer, timeout ...)
    others: list[dict] = field(default_factory=list)  # the node's other failed workers: rank, exit, error, peer

    def text(self) -> str:
        """``RuntimeError: message (train.py:12)``: what `kgen status` says of it."""
        return describe(self.to_dict())

    def same(self, other: ProcessError) -> bool:
        return (self.type, self.message) == (other.type, other.message)

    def to_dict(self) -> dict:
        return {
            "rank": self.rank,
            "node": self.node,
            "local_rank": self.local_rank,
            "exit": self.exit,
            "type": self.type,
            "message": self.message,
            "where": self.where,
            "source": self.source,
            "time": self.time.isoformat() if self.time else None,
            "peer": self.peer,
        }


def describe(error: dict) -> str:
    """``RuntimeError: message (train.py:12)`` of a ``ProcessError.to_dict()`` (a root cause's ``error``)."""
    what = ": ".join(str(error[k]) for k in ("type", "message") if error.get(k))
    if not what:
        what = f"worker exit {error['exit']}" if error.get("exit") is not None else "failed"
    return what + (f" ({error['where']})" if error.get("where") else "")


def _int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def parse_record(text: str, node: int | None = None) -> ProcessError | None:
    """One failure record (the JSON after ``FAILURE_MARK``), or None when it is not one."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    others = [o for o in data.get("others") or [] if isinstance(o, dict)]
    return ProcessError(
        rank=_int(data.get("rank")),
        node=node,
        local_rank=_int(data.get("local_rank")),
        exit=_int(data.get("exit")),
        type=str(data.get("error") or ""),
        message=str(data.get("message") or "")[:MESSAGE_MAX],
        where=str(data.get("where") or ""),
        source=str(data.get("source") or ""),
        time=_time(data.get("time")),
        peer=bool(data.get("peer")),
        others=others[:64],
    )


def _time(value) -> datetime | None:
    try:
        return parse_time(value) if isinstance(value, str) else None
    except (ValueError, AttributeError):
        return None


def records(log: str, node: int | None = None) -> list[ProcessError]:
    """Every failure record in a log (or a termination message), oldest first."""
    out = []
    for line in log.splitlines():
        at = line.find(FAILURE_MARK)
        if at >= 0:
            rec = parse_record(line[at + len(FAILURE_MARK) :], node)
            if rec is not None:
                out.append(rec)
    return out


class ErrorScan:
    """One process's output, line by line: its last traceback (type, message, innermost file:line) and its last
    line. The entrypoint has the same class (stdlib only); tests/test_errors.py holds both to one table."""

    def __init__(self) -> None:
        self.tb = False
        self.frame = ""
        self.error: tuple[str, str, str] | None = None  # type, message, where
        self.last = ""

    def feed(self, line: str) -> None:
        line = TORCH_TAG.sub("", line.rstrip())
        if not line.strip():
            return
        if line.startswith(("During handling of", "The above exception")):  # a chained exception follows
            return
        if line.startswith("Traceback (most recent call last):"):
            self.tb, self.frame = True, ""
            return
        frame = FRAME.match(line)
        if frame and (self.tb or line.startswith("  File ")):  # a SyntaxError has no "Traceback" line
            self.tb, self.frame = True, f"{frame.group(1)}:{frame.group(2)}"
            return
        if self.tb:
            if line[:1] in " \t":
                return
            self.tb = False
            exc = EXCEPTION.match(line)
            if exc:
                self.error = (exc.group(1), (exc.group(2) or "").strip(), self.frame)
                return
        self.last = INTERPRETER.sub("", line)


def _launcher(error: tuple[str, str, str]) -> bool:
    return error[0].rsplit(".", 1)[-1] in LAUNCHER_ERRORS


def scan_log(log: str | Iterable[str], node: int | None = None) -> list[ProcessError]:
    """The last traceback of each process in a log that has no failure record (see the module's doc)."""
    lines = log.splitlines() if isinstance(log, str) else log
    scans: dict[int | None, ErrorScan] = {}
    for line in lines:
        m = RANK_LINE.match(line)
        rank, text = (int(m.group(1)), m.group(2) or "") if m else (None, line)
        if rank is None and (text.startswith(("[kgen ", "kgen-entrypoint: ")) or FAILURE_MARK in text):
            continue
        scans.setdefault(rank, ErrorScan()).feed(text)
    out = []
    for rank, scan in scans.items():
        if scan.error is None or _launcher(scan.error):
            continue
        kind, message, where = scan.error
        out.append(
            ProcessError(
                rank=rank,
                node=node,
                type=kind,
                message=message[:MESSAGE_MAX],
                where=where,
                source="log",
                peer=bool(PEER.search(f"{kind}: {message}")),
            )
        )
    return out


def node_error(log: str, node: int | None = None) -> ProcessError | None:
    """The error a node's log tells: its last failure record, else the first non-peer traceback in it (else a
    peer one)."""
    recs = records(log, node)
    if recs:
        return recs[-1]
    found = scan_log(log, node)
    found.sort(key=lambda e: (e.peer, -1 if e.rank is None else e.rank))
    return found[0] if found else None
