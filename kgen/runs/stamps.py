"""Time stamps of run records and node logs, whatever the run runs on.

A node's supervisor writes every line of its log as ``<UTC time> <line>`` (``2026-11-26T08:10:42.123456Z
...``); the verbs split that stamp off, cut at ``--since``, show it with ``--timestamps`` and merge the ranks'
logs in time order. Records carry whole seconds (``created``). Pure, but for ``now``.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone

from kgen.runs.logtext import prefix, shown, wanted
from kgen.runs.views import rank_width

TS = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z) ")


def now() -> datetime:
    return datetime.now(timezone.utc)


def record_stamp(t: datetime | None = None) -> str:
    """A record's time, to the second: ``2026-11-26T08:10:42Z``."""
    return (t or now()).strftime("%Y-%m-%dT%H:%M:%SZ")


def line_stamp(t: datetime) -> str:
    """A log line's time, to the microsecond (what the supervisors write; sorts as text)."""
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def split_ts(line: str) -> tuple[str, str]:
    """(stamp, the line without it); ("", line) for a line without a stamp."""
    m = TS.match(line)
    return (m.group(1), line[m.end() :]) if m else ("", line)


def since_cut(since_s: int | None) -> str:
    """The stamp before which lines are older than ``since_s`` seconds ("" without --since)."""
    if since_s is None:
        return ""
    return line_stamp(now() - timedelta(seconds=since_s))


def show(line: str, timestamps: bool) -> str:
    """A stamped line as `kgen logs` prints it: the stamp dropped, or kept with ``--timestamps``."""
    ts, body = split_ts(line)
    return f"{ts} {body}" if timestamps and ts else body


def merge(
    texts: Mapping[int, Sequence[str]],
    since_s: int | None = None,
    timestamps: bool = False,
    *,
    nproc: int = 1,
    nnodes: int | None = None,
    ranks: set[int] | None = None,
    full: bool = False,
    tail: int | None = None,
) -> list[str]:
    """Every node's stamped lines merged in time order (a node's own order kept), each as `kgen logs` shows it
    (kgen.runs.logtext: ``[R] `` before training process R's lines, ``[node N] `` before the node's own,
    torchrun's shutdown report as one line unless ``full``); ``ranks``: the chosen global ranks' lines only;
    lines older than ``since_s`` seconds left out; ``tail``: the last ``tail`` lines of each node."""
    cut = since_cut(since_s)
    nodes = nnodes if nnodes is not None else max(texts, default=0) + 1
    width = rank_width([max(nodes, 1) * max(nproc, 1) - 1])
    keyed = []
    for node, lines in sorted(texts.items()):
        out = [
            (ts, node, i, prefix(rank, node, width) + (f"{ts} {text}" if timestamps and ts else text))
            for i, (ts, rank, text) in enumerate(shown((split_ts(line) for line in lines), full))
            if wanted(rank, node, ranks, max(nproc, 1)) and (not cut or ts >= cut)
        ]
        keyed.append(out[-tail:] if tail else out if tail is None else [])
    return [line for _, _, _, line in heapq.merge(*keyed)]
