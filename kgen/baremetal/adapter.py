"""The SSH adapter of the verdict: each host's run state (the entrypoint's ``--state``) -> per-rank records.

Pure. What a node's state says, in the vocabulary of `kgen status` on clusters:

| the host says | row state | failure record |
|---|---|---|
| ssh could not ask it | Unreachable (a state, not a crash) | only if the other nodes lost it (their log says so) |
| no run directory | NoRunDir | - |
| supervisor alive, entrypoint SIGSTOPped | Frozen | if the others dropped it |
| supervisor alive | Running (training generation N, waiting, re-forming) | attempts its supervisor replaced |
| exit 0 | Succeeded | - |
| exit 6, or ended after `kgen stop` | Stopped | - (the run is "stopped") |
| exit N | Failed | exit N with its meaning and role (kgen.runs.exitcodes) |
| supervisor gone, no exit | Lost (host rebooted, or its processes were SIGKILLed) | yes, "cause" |

The log lines are ``<UTC time> <text>``; the entrypoint's own lines (events) carry generations,
FAIL-STOP blames and the last ``stopped:`` line, the same lines the cluster verdict reads from pods.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from kgen.baremetal.record import NodeRecord, RunRecord
from kgen.runs import exitcodes
from kgen.runs.errors import FAILURE_MARK, node_error, parse_record
from kgen.runs.logtext import last_line
from kgen.runs.records import RELAYED, Failure, Row, RunRecords, blamed_ranks, parse_time
from kgen.runs.stamps import split_ts

KGEN_PREFIX = re.compile(r"^\[kgen (?:node|supervisor) \d+ \d\d:\d\d:\d\d \+[\d.]+s\] ")
# read where the entrypoint's (or the supervisor's) own line begins: words inside a line cannot pass for them
GEN_START = re.compile(r"^generation (\d+): starting")
REPLACED = re.compile(r"^node \d+'s entrypoint ended with code (\d+): replacing it")
LOST = re.compile(r"^(?:(?:peer lost|FAIL-STOP): (.*)|re-forming: (node 0 lost: .*))")
STOPPED_BY = re.compile(r"stopped (by user on \S+)")  # the entrypoint's "stopped: stopped by user on HOST"
EXIT_STOPPED = 6
SHOW = 110  # characters of a log line in a row
DROPPED = re.compile(r"^\[kgen supervisor \d+\] (\d+) log line\(s\) dropped: could not be written \(([^)]*)\)")
STOPPED_LINE = "kgen-entrypoint: stopped: "


def dropped_lines(st: dict) -> tuple[int, str]:
    """Log lines the node's supervisor could not write (a full or failing disk) and the error: the exit
    record's count once it ended, else what its log said so far."""
    raw = st.get("exit")
    ex: dict = raw if isinstance(raw, dict) else {}
    if isinstance(ex.get("dropped"), int) and ex["dropped"]:
        return ex["dropped"], str(ex.get("drop_error") or "")
    n, err = 0, ""
    for line in st.get("events") or []:
        m = DROPPED.match(split_ts(line)[1])
        if m:
            n, err = n + int(m.group(1)), err or m.group(2)
    return n, err


@dataclass
class NodeState:
    node: NodeRecord
    state: dict | None  # the entrypoint's --state answer
    unreachable: str = ""


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= SHOW else text[: SHOW - 3] + "..."


def _gen_start(line: str) -> re.Match | None:
    return GEN_START.match(KGEN_PREFIX.sub("", split_ts(line)[1], count=1))


def _lost_blames(rank: int, events: Sequence[str]) -> list[tuple[int, str, str]]:
    """(blamed rank, words, UTC time) for each line where this node says it lost another node."""
    out: list[tuple[int, str, str]] = []
    for line in events:
        ts, text = split_ts(line)
        m = LOST.match(KGEN_PREFIX.sub("", text, count=1))
        if not m:
            continue
        words = RELAYED.sub("", (m.group(1) or m.group(2) or "").strip())
        out.extend((r, words, ts) for r in blamed_ranks(words) if r != rank)
    return out


def _activity(events: Sequence[str]) -> tuple[str, bool]:
    """What a running node does, from its kgen lines; and whether it trains (vs waits or re-forms).

    A re-formation (a ``peer lost:`` or ``re-forming:`` line after the last generation start) is what the
    node does until the next generation starts, whatever it logged since (nodes joining, node 0 reachable)."""
    latest = ""
    for line in reversed(events):
        _, text = split_ts(line)
        body = KGEN_PREFIX.sub("", text)
        m = GEN_START.match(body)
        if m:
            return (latest, False) if latest else (f"training, generation {m.group(1)}", True)
        if body.startswith(("re-forming", "peer lost")):
            return _short(body), False
        if latest or ("all" in body and "nodes connected" in body):
            continue  # node 0 says "all N nodes connected" right before "generation N: starting"
        if body.startswith(("node ", "liveness channel", "waiting", "still waiting")):  # (REPLACED's too)
            latest = _short(body)
    return latest or "starting", False


def _finished(events: Sequence[str]) -> bool:
    """The node's torchrun of its last generation finished successfully (its training is done)."""
    for line in reversed(events):
        body = KGEN_PREFIX.sub("", split_ts(line)[1])
        if body.startswith("torchrun finished successfully"):
            return True
        if GEN_START.match(body):
            return False
    return False


def _last_stop(events: Sequence[str]) -> str:
    for line in reversed(events):
        text = split_ts(line)[1]
        if text.startswith(STOPPED_LINE):
            return text[len(STOPPED_LINE) :]
    return ""


def row_and_failures(ns: NodeState) -> tuple[Row, list[Failure], bool]:
    """One rank's row, its failures, and whether it trains in the current generation."""
    node, st = ns.node, ns.state or {}
    key = f"node{node.rank}@{node.host}"
    row = Row(node.rank, "", st.get("host") or node.hostname, "", False, 0, None, "", 0, host=node.host)
    if ns.unreachable:
        row.state, row.meaning = "Unreachable", ns.unreachable.split(": ", 1)[-1]
        return row, [], False
    if st.get("missing"):
        row.state, row.meaning = "NoRunDir", f"no run directory {node.dir} on this host (never started, or removed)"
        return row, [], False
    events = st.get("events") or []
    tail = st.get("tail") or []
    row.generation = max((int(m.group(1)) for e in events for m in [_gen_start(e)] if m), default=0)
    row.last_line = _short(last_line(split_ts(t)[1] for t in tail))  # as `kgen logs` shows it
    failures: list[Failure] = []

    said = None  # the failure record of the attempt at hand (the entrypoint's FAILURE_MARK line)

    def failed(code: int | None, meaning: str, role: str, ts: str | None, source: str) -> None:
        failures.append(Failure(node.rank, "", row.node, code, "", meaning, role, parse_time(ts), source,
                                host=node.host, key=key, error=said))  # fmt: skip

    for line in events:  # attempts the supervisor replaced (as a Job replaces a pod)
        ts, text = split_ts(line)
        if text.startswith(FAILURE_MARK):
            said = parse_record(text[len(FAILURE_MARK) :], node.rank)
            continue
        m = REPLACED.match(KGEN_PREFIX.sub("", text, count=1))
        if m:
            row.restarts += 1
            replaced = exitcodes.meaning(int(m.group(1)))
            failed(
                replaced.code, replaced.meaning, replaced.role, ts, "an earlier attempt (its supervisor replaced it)"
            )
            said = None
    exit_rec = st.get("exit")
    child_state = (st.get("child") or {}).get("state")
    training = False
    if isinstance(exit_rec, dict) and isinstance(exit_rec.get("code"), int):
        code = exit_rec["code"]
        row.exit_code = code
        reason = str(exit_rec.get("reason") or "")
        meaning = exitcodes.meaning(code)
        row.meaning = reason or meaning.meaning
        if code == 0:
            row.state = "Succeeded"
        elif code == EXIT_STOPPED or (st.get("stopping") and code in (130, 137, 143)):
            row.state = "Stopped"
            row.meaning = reason if code == EXIT_STOPPED else f"{reason} (kgen stop)"
        else:
            row.state = "Failed"
            if said is None:  # no record (an older entrypoint, or it was killed first): a traceback in the tail
                said = node_error("\n".join(split_ts(t)[1] for t in tail), node.rank)
            failed(code, meaning.meaning, meaning.role, exit_rec.get("time"), "exit status on the host")
    elif st.get("alive"):
        row.state = "Frozen" if child_state == "T" else "Running"
        activity, training = _activity(events)
        row.ready = training  # running and training in the current generation (not waiting, not re-forming)
        row.meaning = "frozen (SIGSTOP): it cannot answer its peers" if row.state == "Frozen" else activity
    elif _last_stop(events) == "succeeded" or _finished(events):  # only its supervisor's record is missing
        row.state, row.exit_code = "Succeeded", 0
        row.meaning = "succeeded (its log says so; its supervisor ended before writing the exit record)"
    else:
        row.state = "Lost"
        row.meaning = "its processes are gone without an exit status: the host restarted, or they were SIGKILLed"
        last = split_ts(tail[-1])[0] if tail else ""
        failed(None, row.meaning, "cause", last, "run state on the host (last log line)")
    return row, failures, training


def to_records(rec: RunRecord, states: list[NodeState]) -> RunRecords:
    rows: list[Row] = []
    failures: list[Failure] = []
    logs: dict[str, str] = {}
    training: dict[int, bool] = {}
    for ns in sorted(states, key=lambda s: s.node.rank):
        row, fs, trains = row_and_failures(ns)
        rows.append(row)
        failures.extend(fs)
        training[ns.node.rank] = trains
        events = (ns.state or {}).get("events") or []
        logs[f"node{ns.node.rank}@{ns.node.host}"] = "\n".join(split_ts(e)[1] for e in events)
    unit = "node" if rec.nproc > 1 else "rank"  # a row is a node: with one process per node, that rank
    by_rank = {r.rank: r for r in rows if r.rank is not None}
    # a node the others lost but kgen cannot see (unreachable, frozen): their words are its failure
    for ns in states:
        for blamed, words, ts in _lost_blames(ns.node.rank, (ns.state or {}).get("events") or []):
            seen = by_rank.get(blamed)
            if seen is None or seen.state not in ("Unreachable", "Frozen"):
                continue
            if any(f.rank == blamed and f.source.startswith("logs") for f in failures):
                continue
            what = "unreachable over ssh" if seen.state == "Unreachable" else "frozen (SIGSTOP)"
            said = f"{what}; {unit} {ns.node.rank}'s log: {words}"
            failures.append(
                Failure(blamed, "", seen.node, None, "", said, "cause", parse_time(ts),
                        f"logs of {unit} {ns.node.rank}",
                        host=seen.host, key=f"node{blamed}@{row.host}")
            )  # fmt: skip
    expected = len(rec.nodes)
    out = RunRecords(
        name=rec.name,
        kind=rec.kind,
        expected=expected,
        rows=rows,
        failures=failures,
        logs=logs,
        where_by_rank={n.rank: [n.host] for n in rec.nodes},
        # generations that started (a "re-forming (generation 1)" that never formed does not count)
        reformations=max((r.generation for r in rows), default=0),
        nproc=rec.nproc,
    )
    states_now = [r.state for r in rows]
    alive = [s for s in states_now if s in ("Running", "Frozen")]  # an unreachable node may run: it only
    out.succeeded = states_now.count("Succeeded")  # keeps the run from "succeeded"
    out.complete = out.succeeded == expected
    stopped_rows = [r for r in rows if r.state == "Stopped"]
    if not alive and not out.complete and stopped_rows:
        by_user = [m.group(1) for r in stopped_rows for m in [STOPPED_BY.search(r.meaning)] if m]
        out.stopped = by_user[0] if by_user else "by kgen stop"
    elif not alive and not out.complete and any(s in ("Failed", "Lost") for s in states_now):
        out.failed = True
    running = [r for r in rows if r.state == "Running"]
    out.group_intact = bool(running) and all(training.get(r.rank or 0) for r in running)
    out.notes = [
        f"{unit} {r.rank} ({r.host}): {'unreachable' if r.state == 'Unreachable' else r.state}: {r.meaning}"
        for r in rows
        if r.state in ("Unreachable", "NoRunDir")
    ]
    for ns in sorted(states, key=lambda s: s.node.rank):
        n, err = dropped_lines(ns.state or {})
        if n:
            out.notes.append(
                f"{unit} {ns.node.rank} ({ns.node.host}): {n} log line(s) dropped, the disk refused them ({err}); "
                "the training went on"
            )
    return out
