"""One node's log as `kgen logs` shows it (pure; cluster and bare-metal runs alike).

The entrypoint writes each training process's lines after ``[rank R] `` (its global rank; whole lines only,
entrypoint/kgen_entrypoint.py ``Pump``); every other line is the node's own: kgen's entrypoint and
supervisor, torchrun. `kgen logs` shows a process's line after ``[R] `` and a node's own after ``[node N] ``.
A log written before those prefixes existed has node lines only.

torchrun's report after a signal (kgen's own stop or re-formation, a deleted pod: the "Received 15 death
signal" and "Sending process N closing signal" warnings, then its traceback down to ``SignalException``,
~35 lines per node) becomes one line; ``full`` shows it as written.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

SIGNAL_NAMES = {1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 9: "SIGKILL", 15: "SIGTERM"}
BLOCK_START = re.compile(
    r"Received \d+ death signal, shutting down workers|Sending process \d+ closing signal SIG\w+"
    r"|^Traceback \(most recent call last\):"
)
BLOCK_END = re.compile(r"SignalException: Process \d+ got signal: (\d+)\s*$")
BLOCK_LINE = re.compile(r"^(\s|$)|^Traceback \(most recent call last\):|^(During handling|The above exception)")
HOLD_MAX = 400  # lines of one held block at most (then it is shown as written)


def split(line: str) -> tuple[int | None, str]:
    """(global rank, text) of a worker's line (``[rank R] text``: RANK_LINE); (None, line) of a node's own line.
    String operations, not the regex: `kgen logs` splits every line (a bulk log is 100,000s of them)."""
    if line.startswith("[rank "):
        end = line.find("]", 6)
        digits = line[6:end]
        if end > 6 and digits.isascii() and digits.isdigit() and (len(line) == end + 1 or line[end + 1] == " "):
            return int(digits), line[end + 2 :]
    return None, line


def prefix(rank: int | None, node: int, width: int) -> str:
    return f"[{rank:>{width}}] " if rank is not None else f"[node {node}] "


def collapsed_line(signal: int, hidden: int | None) -> str:
    name = SIGNAL_NAMES.get(signal, f"signal {signal}")
    lines = f"{hidden} lines of its shutdown report" if hidden is not None else "its shutdown report"
    return f"kgen: torchrun stopped by {name} and ended its workers ({lines} hidden; kgen logs --full shows them)"


# Lines a library writes on its own, which say nothing about the run: torch's C++ log lines (c10 and glog
# style: `[W1128 12:00:00.123 4242 socket.cpp:207] The hostname of the client socket cannot be retrieved`,
# `W1128 12:00:00.123000 140 torch/distributed/run.py:793] ...`), Python's warnings (`/x/numpy/core.py:12:
# UserWarning: ...` and the source line after it), torchrun's banner of asterisks and torch's "(Triggered
# internally at ...)". A node's status row shows the last line that is not one of them.
LIBRARY_LINE = re.compile(
    r"^\[?[WIEF]\d{4} \d\d:\d\d:\d\d(\.\d+)? +\d+ [^\]\s]+:\d+\]"
    r"|^\[[WIEF] [^\]\s]+:\d+\]"
    r"|^\S+\.py:\d+: \w*Warning: "
    r"|^\*{20,}$"
    r"|^\s*\(Triggered internally at "
)
PYTHON_WARNING = re.compile(r"^\S+\.py:\d+: \w*Warning: ")


def is_library_line(text: str) -> bool:
    """Whether ``text`` (one line, without its prefix) is a library's own warning or log line (LIBRARY_LINE)."""
    return bool(LIBRARY_LINE.search(text))


def last_line(lines: Iterable[str]) -> str:
    """The last meaningful line of a log's tail as `kgen logs` shows it (``[R] `` before a process's line;
    torchrun's shutdown report as its one line, even when the tail cut it): kgen's or the script's, not a
    library's warning (``is_library_line``), unless the tail holds nothing else."""
    out = shown((None, line) for line in lines)
    if not out:
        return ""
    chosen = out[-1]
    for i in range(len(out) - 1, -1, -1):
        _, _, text = out[i]
        if is_library_line(text):
            continue
        if i > 0 and (text[:1].isspace() or "warn" in text) and PYTHON_WARNING.search(out[i - 1][2]):
            continue  # the source line Python prints below a warning (`  warnings.warn(`; a log may strip it)
        if not text.strip():
            continue
        chosen = out[i]
        break
    _, rank, text = chosen
    if rank is not None:
        return f"[{rank}] {text}"
    end = BLOCK_END.search(text)
    return collapsed_line(int(end.group(1)), None) if end else text


class NodeLines:
    """Feed one node's lines in order (each with a key: its timestamp); get back (key, rank, text) to show,
    the rank None for the node's own lines. A torchrun shutdown report is held until it ends and then shown as
    one line (at its last line's key); anything else that interrupts it releases what was held."""

    def __init__(self, full: bool = False) -> None:
        self.full = full
        self.held: list[tuple[Any, str]] = []

    def feed(self, key: Any, line: str) -> list[tuple[Any, int | None, str]]:
        rank, text = split(line)
        if rank is not None or self.full:
            return [(key, rank, text)]
        if not self.held and "signal" not in text and not text.startswith("Traceback"):
            return [(key, None, text)]  # no report starts here (every BLOCK_START has one of the two)
        out: list[tuple[Any, int | None, str]] = []
        if self.held:
            end = BLOCK_END.search(text)
            if end:
                out.append((key, None, collapsed_line(int(end.group(1)), len(self.held) + 1)))
                self.held = []
                return out
            if (BLOCK_LINE.match(text) or BLOCK_START.search(text)) and len(self.held) < HOLD_MAX:
                self.held.append((key, text))
                return out
            out.extend(self.release())
        if BLOCK_START.search(text):
            self.held.append((key, text))
            return out
        out.append((key, None, text))
        return out

    def release(self) -> list[tuple[Any, int | None, str]]:
        out: list[tuple[Any, int | None, str]] = [(k, None, t) for k, t in self.held]
        self.held = []
        return out

    def flush(self) -> list[tuple[Any, int | None, str]]:
        return self.release()


def shown(lines: Iterable[tuple[Any, str]], full: bool = False) -> list[tuple[Any, int | None, str]]:
    """Every (key, line) of one node's log, as `kgen logs` shows it (see ``NodeLines``)."""
    nl = NodeLines(full)
    out: list[tuple[Any, int | None, str]] = []
    for key, line in lines:
        out.extend(nl.feed(key, line))
    out.extend(nl.flush())
    return out


def wanted(rank: int | None, node: int, ranks: set[int] | None, nproc: int) -> bool:
    """``--rank``: a process's lines when its rank is chosen; a node's own lines (kgen, torchrun) when every rank
    of that node is (with one process per node: when its rank is)."""
    if ranks is None:
        return True
    if rank is not None:
        return rank in ranks
    return all(r in ranks for r in range(node * nproc, (node + 1) * nproc))


def nodes_of(ranks: set[int] | None, nproc: int) -> set[int] | None:
    """The nodes whose logs hold any of ``ranks`` (None: every node)."""
    return None if ranks is None else {r // max(nproc, 1) for r in ranks}


TAIL_SLACK = 200  # lines more than --tail asks for: a shutdown report cut at the top still folds into one line
