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

from kgen.runs.views import prefix, rank_width

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


def merge(texts: Mapping[int, Sequence[str]], since_s: int | None = None, timestamps: bool = False) -> list[str]:
    """Every rank's stamped lines merged in time order (a rank's own order kept), each after its ``[rank]``
    prefix; lines older than ``since_s`` seconds left out."""
    cut = since_cut(since_s)
    width = rank_width(texts or [0])
    keyed = [
        [(split_ts(line)[0], rank, i, line) for i, line in enumerate(lines) if not cut or split_ts(line)[0] >= cut]
        for rank, lines in sorted(texts.items())
    ]
    return [prefix(rank, width) + show(line, timestamps) for _, rank, _, line in heapq.merge(*keyed)]
