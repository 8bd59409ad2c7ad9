"""The health gate's record in a run's logs: what `kgen status` says of it.

Node 0's entrypoint writes the gate's result as one JSON line after ``HEALTH_MARK`` (the entrypoint's
``HEALTH_MARK``): the gate (off/warn/fail), one line per node and the nodes at fault. See
docs/entrypoint.md, The health gate.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from kgen.runs.safetext import printable

HEALTH_MARK = "kgen-entrypoint: health: "
SHOWN_OK = 8  # a group this large or smaller shows every node's line; a larger one its nodes at fault only


def health_record(logs: Iterable[str]) -> dict | None:
    """The last health-gate record in the logs (node 0's), None when there is none."""
    found = None
    for log in logs:
        for line in log.splitlines():
            at = line.find(HEALTH_MARK)
            if at < 0:
                continue
            try:
                value = json.loads(line[at + len(HEALTH_MARK) :])
            except ValueError:
                continue
            if isinstance(value, dict) and isinstance(value.get("lines"), list):
                found = value
    return found


def health_lines(record: Mapping) -> list[str]:
    """What `kgen status` says of the gate: a headline, then the nodes' lines (at fault first)."""
    lines = [str(x) for x in record.get("lines") or []]
    bad = [b for b in record.get("bad") or [] if isinstance(b, int) and 0 <= b < len(lines)]
    gate = str(record.get("gate") or "warn")
    if not bad:
        head = f"health gate passed: {len(lines)} node(s) ok"
    else:
        head = f"health gate ({gate}) found {len(bad)} node(s) at fault" + (
            ": the run stopped" if gate == "fail" else ""
        )
    shown = [lines[b] for b in bad] + (
        [x for i, x in enumerate(lines) if i not in bad] if len(lines) <= SHOWN_OK else []
    )
    return [printable(head)] + [printable(f"  health: {x}") for x in shown]
