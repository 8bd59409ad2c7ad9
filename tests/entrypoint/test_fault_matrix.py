"""The fault matrix as tests: one test per row of faultmatrix.py, the table docs/entrypoint.md shows.

Rows of one mechanism share one run (`group`): the run is made once per session (real supervisors, the real
entrypoint, real torchrun and gloo workers: faultrun.py) and each row checks its own observation. A row whose
run does not come out as its row says fails; a row no run observes yet fails too, saying so."""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

import pytest
from faultmatrix import Cell, cells, markdown
from faultrun import Run

DOC = Path(__file__).resolve().parents[2] / "docs" / "entrypoint.md"
FAST = {"KGEN_REPLACEMENT_TIMEOUT": "8", "KGEN_RDZV_TIMEOUT": "8", "KGEN_MASTER_WAIT_TIMEOUT": "8"}
STOP_FOR = 10.0


def test_the_doc_table_is_the_matrix():
    text = DOC.read_text()
    begin, end = "<!-- fault matrix: tests/entrypoint/faultmatrix.py -->\n", "<!-- end of the fault matrix -->"
    assert begin in text and end in text, "docs/entrypoint.md has no fault matrix block"
    shown = text.split(begin, 1)[1].split(end, 1)[0]
    assert shown == markdown(), "docs/entrypoint.md's fault matrix differs from tests/entrypoint/faultmatrix.py"


def test_every_cell_is_there_once():
    ids = [c.id for c in cells()]
    assert len(ids) == len(set(ids)) == 4 * 2 * 3 * 4 + 11


# -- observations: what a group's run showed, per row id ------------------------------------------------------
class Seen:
    """One row's observation: the run's final state, the ranks its root cause names, the victim's exit code
    (or 'replaced' codes), whether the run re-formed, and how long the verdict took."""

    def __init__(self, state: str, named: list[int], exit: str, outcome: str, took: float = 0.0) -> None:
        self.state, self.named, self.exit, self.outcome, self.took = state, named, exit, outcome, took

    def __repr__(self) -> str:
        return f"Seen({self.state}, named {self.named}, exit {self.exit}, {self.outcome}, {self.took:.1f}s)"


_SEEN: dict[str, Seen | Exception] = {}
_DONE: set[str] = set()
_TMP: list[Path] = []


def _tmp(factory) -> Path:
    return factory.mktemp("faults")


def _final(run: Run, timeout: float) -> tuple[dict, object]:
    codes = run.wait(timeout)
    assert None not in codes.values(), f"the run did not end within {timeout}s: {codes}\n{run.logs()}"
    return codes, run.verdict()


def _named(v) -> list[int]:
    rc = v.root_cause
    return sorted(set(rc.node_ranks or rc.ranks)) if rc else []


def _replaced(run: Run, rank: int) -> list[int]:
    return [int(c) for c in re.findall(r"entrypoint ended with code (\d+): replacing it", run.log(rank))]


def _pid_changes(run: Run, rank: int, kind: str, timeout: float = 60.0) -> None:
    old = run.pid(rank, kind)
    run.wait_for(lambda: run.pid(rank, kind) not in (None, old), timeout)


def _in_training(run: Run, ranks, gen: int, steps: int = 2) -> None:
    rx = re.compile(rf"generation {gen}: starting")

    def ok() -> bool:
        return all(rx.search(run.log(r)) and _steps_after(run.log(r), gen) >= steps for r in ranks)

    run.wait_for(ok, 120)


def _steps_after(log: str, gen: int) -> int:
    part = log.split(f"generation {gen}: starting", 1)
    return len(re.findall(r"KGEN_EVT \S+ rank=\d+ step ", part[1])) if len(part) == 2 else 0


# -- the groups -------------------------------------------------------------------------------------------------
def _entry_formation(tmp: Path, node: str) -> dict[str, Seen]:
    """The victim alone, forming: its entrypoint SIGKILLed, then SIGTERMed (each replaced), then SIGSTOPped
    10 s together with its supervisor; then the other node starts and the run must succeed."""
    victim = 0 if node == "node 0" else 1
    other = 1 - victim
    run = Run(tmp, nodes=2, steps=6, sleep=0.2)
    out: dict[str, Seen] = {}
    tag = "n0" if victim == 0 else "peer"
    try:
        run.start(victim)
        waiting = "liveness channel listening" if victim == 0 else "waiting for node 0"
        run.wait_for(lambda: run.log(victim).count(waiting) >= 1, 60)
        absent = run.pid(victim, "torchrun") is None
        for sig, name in ((signal.SIGKILL, "sigkill"), (signal.SIGTERM, "sigterm")):
            n = len(_replaced(run, victim))
            run.signal(victim, "entrypoint", sig)
            run.wait_for(lambda n=n: len(_replaced(run, victim)) > n, 30)
            run.wait_for(lambda n=n: run.log(victim).count(waiting) >= n + 2, 30)
            out[f"entrypoint-{tag}-{name}-formation"] = Seen("", [], f"{_replaced(run, victim)[-1]}, replaced", "")
        for kind in ("entrypoint", "supervisor"):
            run.signal(victim, kind, signal.SIGSTOP)
        time.sleep(STOP_FOR)
        for kind in ("supervisor", "entrypoint"):
            run.signal(victim, kind, signal.SIGCONT)
        run.start(other)
        codes, v = _final(run, 120)
        for cid in list(out):
            out[cid] = Seen(v.state, _named(v), out[cid].exit, "succeeds" if v.state == "succeeded" else v.state)
        for kind in ("entrypoint", "supervisor"):
            out[f"{kind}-{tag}-sigstop-formation"] = Seen(
                v.state, _named(v), str(codes[victim]), "succeeds" if v.state == "succeeded" else v.state
            )
        if absent:
            _ABSENT.add(f"{tag}-formation")
        return out
    finally:
        run.cleanup()


_ABSENT: set[str] = set()


GROUPS = {
    "entry-node0-formation": lambda tmp: _entry_formation(tmp, "node 0"),
    "entry-peer-formation": lambda tmp: _entry_formation(tmp, "peer"),
}


def _observe(group: str, factory) -> None:
    if group in _DONE:
        return
    _DONE.add(group)
    runner = GROUPS.get(group)
    if runner is None:
        return
    try:
        _SEEN.update(runner(_tmp(factory)))
    except Exception as exc:  # noqa: BLE001 - every row of the group fails with it
        _SEEN[group] = exc


def _check(cell: Cell, seen: Seen) -> None:
    assert seen.state == cell.verdict, f"{cell.fault}: the run ended {seen.state}, the matrix says {cell.verdict}"
    if cell.named != "-":
        want = [int(x) for x in re.findall(r"\d+", cell.named)]
        assert set(want) <= set(seen.named), f"{cell.fault}: names {seen.named}, the matrix says {cell.named}"
    if cell.exit not in ("-",):
        assert seen.exit.split(",")[0].strip() == cell.exit.split(",")[0].split()[0].strip() or (
            cell.exit.startswith("none") and seen.exit in ("", "None")
        ), f"{cell.fault}: exit {seen.exit}, the matrix says {cell.exit}"
    assert seen.outcome == cell.outcome, f"{cell.fault}: {seen.outcome}, the matrix says {cell.outcome}"


@pytest.mark.torch
@pytest.mark.parametrize("cell", cells(), ids=lambda c: c.id)
def test_fault(cell: Cell, tmp_path_factory):
    if cell.group == "absent":
        phase = cell.id.rsplit("-", 1)[1] if not cell.id.endswith("re-formation") else "re-formation"
        tag = "n0" if "-n0-" in cell.id else "peer"
        _observe(f"entry-{'node0' if tag == 'n0' else 'peer'}-{phase}", tmp_path_factory)
        assert f"{tag}-{phase}" in _ABSENT, f"{cell.fault}: no run observed that phase without torch processes"
        return
    _observe(cell.group, tmp_path_factory)
    if isinstance(_SEEN.get(cell.group), Exception):
        raise _SEEN[cell.group]  # type: ignore[misc]
    seen = _SEEN.get(cell.id)
    assert seen is not None, f"{cell.fault}: no run observes this row yet (group {cell.group})"
    assert isinstance(seen, Seen)
    _check(cell, seen)
