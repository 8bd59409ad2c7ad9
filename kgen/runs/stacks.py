"""Where every rank is: the training processes' Python stacks, grouped, the odd ones out first.

The entrypoint dumps them (faulthandler on a signal, through the sitecustomize it gives the workers) and
answers `--stacks` / `--run-dir DIR --stacks` with one JSON line per node: each rank's main-thread frames
(innermost first, ``[file, line, function]``), ``what`` (the library call the user's innermost frame is in:
``queue.get``, ``distributed_c10d.all_reduce``) and ``where`` (that frame's ``file:line``). Here they are
grouped (identical stacks together) and written; the hang watchdog's report (``HANG_MARK`` in node 0's log)
is read back for ``kgen status``. The entrypoint has its own copy of the grouping (it cannot import kgen);
tests/test_stacks.py holds one table for both. Nothing here does I/O.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kgen.runs.safetext import printable

HANG_MARK = "kgen-entrypoint: hang: "  # the entrypoint's HANG_MARK: the hang report, one JSON line
EXIT_HANG = 77  # the entrypoint's EXIT_HANG


def rank_spans(ranks: Iterable[int]) -> str:
    """[0, 1, 2, 5] -> "ranks 0-2, 5"; [7] -> "rank 7"."""
    rs = sorted(set(ranks))
    parts, i = [], 0
    while i < len(rs):
        j = i
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        parts.append(str(rs[i]) if i == j else f"{rs[i]}-{rs[j]}")
        i = j + 1
    return ("rank " if len(rs) == 1 else "ranks ") + ", ".join(parts)


def _in_collective(frames: list) -> bool:
    return any("torch/distributed/" in str(f[0]) for f in frames)


def group_stacks(stacks: Iterable[Mapping], world: int | None = None) -> list[dict]:
    """Ranks with identical main-thread stacks together, the odd ones out first (``differs``): every group
    smaller than the one largest group, or, when the largest are tied, those not waiting inside
    torch.distributed (the others wait for them). Ranks without a stack (and, given ``world``, ranks that
    sent none) are groups of their own, marked ``differs``."""
    groups: dict[tuple, dict] = {}
    stacks = list(stacks)
    for s in stacks:
        frames = [list(f) for f in s.get("frames") or []]
        key = tuple(tuple(f) for f in frames) if frames else ("no stack", s.get("why") or "")
        g = groups.setdefault(
            key,
            {
                "ranks": [],
                "what": s.get("what") or "",
                "where": s.get("where") or "",
                "frames": frames,
                "why": "" if frames else s.get("why") or "no stack",
            },
        )
        g["ranks"].append(int(s["rank"]))
    seen = {int(s["rank"]) for s in stacks}
    if world is not None and len(seen) < world:
        missing = [r for r in range(world) if r not in seen]
        groups[("missing",)] = {
            "ranks": missing,
            "what": "",
            "where": "",
            "frames": [],
            "why": "no stack: not registered",
        }
    out = list(groups.values())
    sizes = sorted((len(g["ranks"]) for g in out if g["frames"]), reverse=True)
    for g in out:
        if not g["frames"]:
            g["differs"] = True
        elif len(sizes) < 2:
            g["differs"] = False
        elif sizes[0] > sizes[1]:
            g["differs"] = len(g["ranks"]) < sizes[0]
        else:
            g["differs"] = not _in_collective(g["frames"]) and any(_in_collective(h["frames"]) for h in out)
    out.sort(key=lambda g: (not g["differs"], len(g["ranks"]), min(g["ranks"])))
    return out


def short_where(where: str) -> str:
    path, _, line = where.rpartition(":")
    return f"{os.path.basename(path)}:{line}" if path else where


def group_line(g: Mapping) -> str:
    """ "ranks 0-6: distributed_c10d.all_reduce at train.py:42", "rank 7: queue.get at data.py:88 (the one that
    differs)"."""
    if not g.get("frames"):
        return printable(f"{rank_spans(g['ranks'])}: {g.get('why') or 'no stack'}")
    text = f"{rank_spans(g['ranks'])}: {g['what']} at {short_where(g['where'])}"
    if g.get("differs"):
        text += " (the one that differs)" if len(g["ranks"]) == 1 else " (differs)"
    return printable(text)


@dataclass
class NodeStacks:
    """One node's answer to ``--stacks``: its ranks' stacks, or why there are none."""

    node: int
    host: str
    ranks: list[dict] = field(default_factory=list)
    note: str = ""  # why this node has no stacks (not registered, unreachable, an old entrypoint)


@dataclass
class StacksReport:
    name: str
    world: int
    nodes: list[NodeStacks]

    @property
    def ranks(self) -> list[dict]:
        out = []
        for n in self.nodes:
            for r in n.ranks:
                out.append(dict(r, node=n.node, host=n.host))
        return sorted(out, key=lambda r: (r["rank"], r.get("pid", 0)))

    @property
    def groups(self) -> list[dict]:
        primary: dict[int, dict] = {}
        for r in self.ranks:  # one stack per rank (a rank's spawned helpers register as the same rank)
            primary.setdefault(r["rank"], r)
        return group_stacks(primary.values(), self.world or None)

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "world": self.world,
            "groups": self.groups,
            "ranks": self.ranks,
            "notes": [f"node {n.node} ({n.host}): {n.note}" for n in self.nodes if n.note],
        }


def parse_answer(line: str) -> dict | None:
    """The JSON line a node's ``--stacks`` printed (None when it is not one)."""
    try:
        value = json.loads(line)
    except ValueError:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("ranks"), list):
        return None
    ranks = []
    for r in value["ranks"]:
        if isinstance(r, dict) and isinstance(r.get("rank"), int) and isinstance(r.get("frames"), list):
            frames = [f for f in r["frames"] if isinstance(f, list) and len(f) == 3]
            ranks.append(dict(r, frames=[[str(f[0]), int(f[1]), str(f[2])] for f in frames]))
    return {"ranks": ranks, "note": str(value.get("note") or ""), "host": str(value.get("host") or "")}


def report_lines(report: StacksReport, frames: int = 12) -> list[str]:
    """The text view: one line per group, the odd ones out first, each with its stack (innermost first)."""
    groups = report.groups
    ranks = {r["rank"] for r in report.ranks}
    lines = [
        f"run {report.name}: stacks of {len(ranks)}/{report.world or len(ranks)} rank(s), "
        f"{len([g for g in groups if g['frames']])} distinct"
    ]
    for g in groups:
        lines.append(group_line(g))
        for f in g["frames"][:frames]:
            lines.append(printable(f"    {f[0]}:{f[1]} in {f[2]}"))
        if len(g["frames"]) > frames:
            lines.append(f"    ... {len(g['frames']) - frames} more frame(s)")
    for n in report.nodes:
        if n.note:
            lines.append(printable(f"node {n.node} ({n.host}): {n.note}"))
    return lines


def hang_record(log: str) -> dict | None:
    """The last hang report in a log (node 0's), None when there is none."""
    found = None
    for line in log.splitlines():
        at = line.find(HANG_MARK)
        if at < 0:
            continue
        try:
            value = json.loads(line[at + len(HANG_MARK) :])
        except ValueError:
            continue
        if isinstance(value, dict) and isinstance(value.get("groups"), list):
            found = value
    return found


def hang_lines(record: Mapping) -> list[str]:
    """What `kgen status` says of a hang: the headline's words, then one line per group."""
    out = [printable(f"hang: {record.get('headline') or 'no rank made progress'}")]
    for g in record.get("groups") or []:
        if isinstance(g, dict) and isinstance(g.get("ranks"), list):
            out.append(f"  {group_line(g)}")
    return out


def last_answer(out: str) -> dict | None:
    """A node's answer in what its ``--stacks`` printed: the last line that is a JSON object (None: none is)."""
    for line in reversed(out.splitlines()):
        if line.startswith("{"):
            return parse_answer(line)
    return None
