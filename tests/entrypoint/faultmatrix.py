"""The fault matrix: one table that docs/entrypoint.md ("Fault matrix") shows and test_fault_matrix.py runs.

Each row is one cell: a process (supervisor, entrypoint, torchrun, worker) of node 0 or of a peer, a signal
(SIGKILL, SIGTERM, SIGSTOP for 10 s), a phase (formation, training, re-formation, shutdown), or one of the
other faults; what `kgen status` says then (run state, who is named, the exit code of that node) and whether
the run re-forms, succeeds or fails, within which bound. `group` is the run (or protocol test) that
observes the row: cells of one mechanism share one run. Bounds use the values the tests run with: heartbeat
timeout 5 s, KGEN_REPLACEMENT_TIMEOUT / KGEN_RDZV_TIMEOUT / KGEN_MASTER_WAIT_TIMEOUT 8 s.
"""

from __future__ import annotations

from dataclasses import dataclass

KINDS = ("supervisor", "entrypoint", "torchrun", "worker")
NODES = ("node 0", "peer")
SIGNALS = ("SIGKILL", "SIGTERM", "SIGSTOP 10s")
PHASES = ("formation", "training", "re-formation", "shutdown")


@dataclass(frozen=True)
class Cell:
    id: str
    fault: str  # process / node / signal / phase, or the other fault
    verdict: str  # the run's state at the end (kgen status)
    named: str  # who the root cause names ("-": nobody)
    exit: str  # that node's exit code (its exit record)
    outcome: str  # re-forms | succeeds | fails | n/a
    bound: str  # within what the verdict comes
    group: str  # the run or test that observes it


def _signal_cell(kind: str, node: str, sig: str, phase: str) -> Cell:
    who = "rank 0" if node == "node 0" else "rank 1"
    cid = f"{kind}-{'n0' if node == 'node 0' else 'peer'}-{sig.split()[0].lower()}-{phase}"
    fault = f"{kind} of {node}, {sig}, {phase}"
    stop = sig.startswith("SIGSTOP")
    if kind in ("torchrun", "worker") and phase != "training":
        # no torch process exists then: a node forms, re-forms (torch stopped) or has finished without one
        return Cell(cid, fault, "n/a", "-", "-", "n/a", "no such process in this phase", "absent")
    if phase == "shutdown" and node == "peer":
        return Cell(cid, fault, "n/a", "-", "-", "n/a", "a peer ends as it says done", "absent")
    if phase == "shutdown":  # torchrun's exit barrier holds node 0's torchrun until every node's is done
        return Cell(cid, fault, "n/a", "-", "-", "n/a", "node 0 ends with the others (torchrun's exit barrier)",
                    "absent")  # fmt: skip
    if kind == "supervisor" and stop:  # observed in the entrypoint's run of the same node and phase
        return Cell(cid, fault, "succeeded", "-", "0", "succeeds", "the run's own length",
                    f"entry-{node.replace(' ', '')}-{phase}")  # fmt: skip
    if kind == "supervisor":  # the node ends with it, for good (PR_SET_PDEATHSIG / forwarded SIGTERM)
        code = "none (Lost)" if sig == "SIGKILL" else "143"
        if node == "node 0":
            return Cell(cid, fault, "failed", who, code, "fails", "peers exit 3 after the wait bound + 5 s",
                        f"sup-lost-{phase}")  # fmt: skip
        return Cell(cid, fault, "failed", who, code, "fails", "node 0 exits 4 after the wait bound + 5 s",
                    f"sup-lost-{phase}")  # fmt: skip
    if kind == "entrypoint":
        if stop and phase == "training":
            return Cell(cid, fault, "succeeded", "-", "76, replaced", "re-forms", "dropped after 5 s; 76 at thaw",
                        f"entry-{node.replace(' ', '')}-{phase}")  # fmt: skip
        if stop:
            return Cell(cid, fault, "succeeded", "-", "0", "succeeds", "the freeze's own length",
                        f"entry-{node.replace(' ', '')}-{phase}")  # fmt: skip
        code = "137, replaced" if sig == "SIGKILL" else "143, replaced"
        outcome = "succeeds" if phase == "formation" else "re-forms"
        return Cell(cid, fault, "succeeded", "-", code, outcome, "replaced after 1-2 s back-off",
                    f"entry-{node.replace(' ', '')}-{phase}")  # fmt: skip
    # torch processes while training
    if stop:
        return Cell(cid, fault, "succeeded", "-", "0", "succeeds", "training resumes at thaw", "torch-stops")
    if kind == "torchrun":  # SIGTERM: torchrun ends its workers and exits 1 (its SignalException)
        code = "137" if sig == "SIGKILL" else "1"
        return Cell(cid, fault, "failed", who, code, "fails", "others exit 5 within 2 s + grace",
                    f"torch-{cid}")  # fmt: skip
    return Cell(cid, fault, "failed", who, "1", "fails", "others exit 5 within 2 s + grace", f"torch-{cid}")


EXTRA = [
    Cell("denied-at-start", "a stranger answers `denied` at node 0's address before node 0 listens", "running",
         "-", "-", "succeeds", "joins once node 0 listens", "protocol"),
    Cell("denied-alone", "only denials until the wait bound", "failed", "that node", "2 (wrong secret)", "fails",
         "KGEN_MASTER_WAIT_TIMEOUT, at most 60 s of denials", "protocol"),
    Cell("port-squat-start", "node 0's liveness port held by another process at start", "failed", "rank 0",
         "2 (pick a free port)", "fails", "15 s of retries", "protocol"),
    Cell("port-squat-restart", "the port held briefly when node 0 restarts", "running", "-", "-", "succeeds",
         "listens once free, within 15 s", "protocol"),
    Cell("rst-storm", "connect + RST storm, 50/s for 20 s, at node 0 while training", "running", "-", "-",
         "succeeds", "no heartbeat late, no fd left registered", "storm"),
    Cell("long-line", "a 1 MiB line without a newline from a worker", "running", "-", "-", "succeeds",
         "every piece keeps [rank N]; no event forged", "protocol"),
    Cell("enospc", "ENOSPC on the run folder (a tiny tmpfs in a private mount namespace)", "succeeded", "-", "0",
         "succeeds", "training never stopped; drops counted", "disk"),
    Cell("eio", "EIO on the run folder's writes (fault-injected at the write call)", "succeeded", "-", "0",
         "succeeds", "training never stopped; drops counted", "protocol"),
    Cell("read-only", "the run folder becomes read-only while training", "succeeded", "-", "0", "succeeds",
         "training never stopped; exit record via its reserve", "disk"),
    Cell("clock-plus-1h", "the wall clock steps +1 h (injected: time.time)", "running", "-", "-", "succeeds",
         "every bound is monotonic", "clock"),
    Cell("clock-minus-1h", "the wall clock steps -1 h (injected: time.time)", "running", "-", "-", "succeeds",
         "every bound is monotonic", "clock"),
]  # fmt: skip


def _reforming(c: Cell) -> Cell:
    """In re-formation the run re-forms whatever else happens: a row that would succeed re-forms."""
    if c.id.endswith("-re-formation") and c.outcome == "succeeds":
        return Cell(c.id, c.fault, c.verdict, c.named, c.exit, "re-forms", c.bound, c.group)
    return c


def cells() -> list[Cell]:
    out = [_reforming(_signal_cell(k, n, s, p)) for p in PHASES for k in KINDS for n in NODES for s in SIGNALS]
    return out + EXTRA


HEADER = ("fault", "verdict", "named", "exit", "outcome", "bound")


def markdown() -> str:
    rows = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    for c in cells():
        rows.append(f"| {c.fault} | {c.verdict} | {c.named} | {c.exit} | {c.outcome} | {c.bound} |")
    return "\n".join(rows) + "\n"
