"""The Slurm adapter of the verdict: the job's state and each node's files -> per-rank records. Pure.

What the records say, in the vocabulary of `kgen status` everywhere:

| Slurm and the node's files say | row state | failure record |
|---|---|---|
| job PENDING (also after a requeue: Reason BeginTime) | Pending | - |
| job running, node's task started this attempt | Running (training generation N, waiting ...) | - |
| job running, no task yet on this node | Pending | - |
| exit 0 / 6 / N this attempt | Succeeded / Stopped / Failed | exit N with its meaning and role |
| job ended, no exit this attempt | Lost (its node died, or the job was cancelled first) | yes, "cause" |
| an earlier attempt (node<R>/attempts: requeued by kgen or by Slurm) | - | its lost node (cause), the others' exits |

Requeues are the run's re-formations: attempt A of the job (Slurm's restart count) is generation A.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kgen.runs.errors import node_error
from kgen.runs.exitcodes import meaning as exit_meaning
from kgen.runs.logtext import last_line
from kgen.runs.records import RELAYED, Failure, Row, RunRecords, blamed_ranks, parse_time
from kgen.runs.stamps import split_ts
from kgen.slurm.commands import JobInfo
from kgen.slurm.record import RunRecord

KGEN_PREFIX = re.compile(r"^\[kgen (?:node|supervisor) \d+ \d\d:\d\d:\d\d \+[\d.]+s\] ")
GEN_START = re.compile(r"generation (\d+): starting")
LOST = re.compile(r"(?:peer lost|FAIL-STOP): (.*)")
EXIT_STOPPED = 6
SHOW = 110
FAILED_STATES = {"FAILED", "NODE_FAIL", "TIMEOUT", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "PREEMPTED"}
STATE_MEANING = {
    "TIMEOUT": "Slurm's time limit (--time) ended the job",
    "NODE_FAIL": "a node of the job failed (Slurm: NODE_FAIL) and the job was not requeued",
    "OUT_OF_MEMORY": "out of memory (Slurm: OUT_OF_MEMORY)",
    "BOOT_FAIL": "a node of the job failed to boot (Slurm: BOOT_FAIL)",
    "DEADLINE": "the job's deadline passed (Slurm: DEADLINE)",
    "PREEMPTED": "the job was preempted and not requeued (Slurm: PREEMPTED)",
}
PENDING_MEANING = {
    "BeginTime": "requeued: waiting for Slurm to start it again (BeginTime)",
    "Priority": "queued (Priority)",
    "Resources": "queued: waiting for free nodes (Resources)",
}


@dataclass
class NodeFiles:
    """What node R left in the run's folder."""

    rank: int
    exit: dict | None = None
    pid: dict | None = None
    events: Sequence[str] = field(default_factory=list)
    tail: Sequence[str] = field(default_factory=list)
    attempts: Sequence[Mapping] = field(default_factory=list)  # node<R>/attempts: every start and exit


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= SHOW else text[: SHOW - 3] + "..."


def _activity(events: Sequence[str]) -> str:
    for line in reversed(events):
        body = KGEN_PREFIX.sub("", split_ts(line)[1])
        m = GEN_START.search(body)
        if m:
            return "training"
        if body.startswith(("waiting", "still waiting", "node ", "liveness channel", "Slurm job")):
            return _short(body)
    return "starting"


def current_events(events: Sequence[str], attempt: int) -> list[str]:
    """The lines of this attempt (a node's events file holds every attempt's, each opened by its supervisor)."""
    mark = f", attempt {attempt} ("
    for i in range(len(events) - 1, -1, -1):
        if mark in events[i] and "Slurm job" in events[i]:
            return list(events[i:])
    return list(events) if attempt == 0 else []


def attempt_of(job: JobInfo | None, end: Mapping | None, files: Sequence[NodeFiles]) -> int:
    """The job's current attempt (0 first; Slurm's restart count)."""
    if job is not None and job.source == "scontrol":
        return job.restarts
    seen = [int(f.pid.get("attempt", 0)) for f in files if f.pid and isinstance(f.pid.get("attempt"), int)]
    if end and isinstance(end.get("attempt"), int):
        seen.append(end["attempt"])
    return max(seen, default=0)


def _this(rec: dict | None, attempt: int, job_id: str) -> dict | None:
    if isinstance(rec, dict) and rec.get("attempt") == attempt and str(rec.get("job")) == job_id:
        return rec
    return None


def _earlier_failures(files: Sequence[NodeFiles], attempt: int, job_id: str) -> list[Failure]:
    """Failures of the attempts before ``attempt`` (each node's attempts file): a node that started and left no
    exit was lost (cause); the others' exits keep their meaning (the survivors' 75: victims)."""
    out = []
    for a in range(attempt):
        starts = {f.rank: x for f in files for x in f.attempts if _of(x, a, job_id, "start")}
        exits = {f.rank: x for f in files for x in f.attempts if _of(x, a, job_id, "exit")}
        times = [t for x in exits.values() if (t := parse_time(str(x.get("time") or "")))]
        source = f"the run folder (attempt {a})"
        for rank in sorted(starts):
            host = str(starts[rank].get("host") or "")
            key = f"node{rank}@{host}" if host else f"node{rank}"
            x = exits.get(rank)
            if x is None:
                lost = f"its node was lost in attempt {a} (no exit record)"
                out.append(Failure(rank, "", host, None, "", lost, "cause", min(times, default=None), source,
                                   host=host, key=key))  # fmt: skip
            elif isinstance(x.get("code"), int) and x["code"] != 0:
                m = exit_meaning(x["code"])
                when = parse_time(str(x.get("time") or ""))
                out.append(Failure(rank, "", host, x["code"], "", m.meaning, m.role, when, source, host=host, key=key))
    return out


def _of(x: Mapping, attempt: int, job_id: str, event: str) -> bool:
    return x.get("event") == event and x.get("attempt") == attempt and str(x.get("job")) == job_id


def to_records(
    rec: RunRecord,
    job: JobInfo | None,
    files: Sequence[NodeFiles],
    end: Mapping | None = None,
    stopping: bool = False,
) -> RunRecords:
    attempt = attempt_of(job, end, files)
    end_now = end if end and end.get("attempt") == attempt and str(end.get("job")) == rec.job_id else None
    state = job.state if job is not None else ""
    rows: list[Row] = []
    failures: list[Failure] = []
    logs: dict[str, str] = {}
    hosts: dict[int, str] = {}
    files = [NodeFiles(f.rank, f.exit, f.pid, current_events(f.events, attempt), f.tail, f.attempts) for f in files]
    for f in sorted(files, key=lambda f: f.rank):
        pid = _this(f.pid, attempt, rec.job_id)
        host = str((pid or {}).get("host") or "")  # where it runs in this attempt ("" before it started)
        hosts[f.rank] = host
        key = f"node{f.rank}@{host}" if host else f"node{f.rank}"
        logs[key] = "\n".join(split_ts(e)[1] for e in f.events)
        row = Row(f.rank, "", host, "", False, attempt, None, "", attempt, host=host)
        row.last_line = _short(last_line(split_ts(t)[1] for t in f.tail))  # as `kgen logs` shows it
        ex = _this(f.exit, attempt, rec.job_id)
        if ex is not None and isinstance(ex.get("code"), int):
            code = ex["code"]
            row.exit_code = code
            meaning = exit_meaning(code)
            row.meaning = str(ex.get("reason") or meaning.meaning)
            if code == 0:
                row.state = "Succeeded"
            elif code == EXIT_STOPPED or (stopping and code in (130, 137, 143)):
                row.state = "Stopped"
            else:
                row.state = "Failed"
                said = node_error("\n".join(split_ts(t)[1] for t in f.tail), f.rank)  # its failure record
                failures.append(Failure(f.rank, "", host, code, "", meaning.meaning, meaning.role,
                                        parse_time(ex.get("time")), "exit record in the run folder", host=host,
                                        key=key, error=said))  # fmt: skip
        elif state == "PENDING" or (not state and not pid):
            row.state = "Pending"
            row.meaning = PENDING_MEANING.get(job.reason if job else "", f"queued ({job.reason})" if job else "")
        elif job is not None and job.running and pid is not None:
            row.state = "Running"
            row.meaning = _activity(f.events)
            row.ready = row.meaning == "training"  # up, not training before the group formed (the verdict says so)
        elif job is not None and job.running:
            row.state, row.meaning = "Pending", "its task has not started on a node yet"
        elif state == "CANCELLED" or stopping:
            row.state, row.meaning = "Stopped", "cancelled (scancel) before it wrote an exit status"
        else:
            row.state = "Lost"
            row.meaning = "no exit status: its node died, or its processes were SIGKILLed"
            last = split_ts(f.tail[-1])[0] if f.tail else ""
            failures.append(Failure(f.rank, "", host, None, "", row.meaning, "cause", parse_time(last),
                                    "the run folder (no exit record)", host=host, key=key))  # fmt: skip
        rows.append(row)
    failures = _earlier_failures(files, attempt, rec.job_id) + failures
    _blames_for_unseen(rows, files, failures, hosts)
    out = RunRecords(
        name=rec.name,
        kind="slurm",
        expected=rec.nodes,
        rows=rows,
        failures=failures,
        logs=logs,
        where_by_rank={r: [h] for r, h in hosts.items() if h},
        reformations=attempt,
        nproc=max(rec.nproc, 1),
    )
    out.succeeded = sum(1 for r in rows if r.state == "Succeeded")
    decision = (end_now or {}).get("decision")
    out.complete = decision == "succeeded" or (out.succeeded == rec.nodes and state in ("COMPLETED", ""))
    if not out.complete:
        if decision == "stopped" or state == "CANCELLED" or (stopping and (job is None or job.ended)):
            by_user = [r.meaning for r in rows if r.state == "Stopped" and "stopped by user" in r.meaning]
            out.stopped = by_user[0] if by_user else ("by kgen stop" if stopping else "cancelled (scancel)")
        elif decision == "failed" or state in FAILED_STATES:
            out.failed = True
            if state in STATE_MEANING:
                out.job_reason, out.job_message = state, STATE_MEANING[state]
                if not failures:
                    failures.append(Failure(None, "", job.nodelist if job else "", None, state,
                                            STATE_MEANING[state], "cause", parse_time(None), "Slurm"))  # fmt: skip
            elif end_now:
                out.job_reason, out.job_message = "attempt", str(end_now.get("reason") or "")
    out.group_intact = bool(rows) and all(r.state == "Running" for r in rows)
    if job is not None:
        out.notes.append(
            f"Slurm job {rec.job_id}: {job.state or '?'}"
            + (f" ({job.reason})" if job.reason else "")
            + (f" on {job.nodelist}" if job.nodelist else "")
            + f", attempt {attempt} (restarts {job.restarts})"
        )
    else:
        out.notes.append(f"Slurm job {rec.job_id}: no longer known to Slurm; the run folder's records speak")
    return out


def _blames_for_unseen(rows: list[Row], files: Sequence[NodeFiles], failures: list[Failure],
                       hosts: Mapping[int, str]) -> None:  # fmt: skip
    """A rank the survivors' FAIL-STOP lines name gets their words when it left no failure of its own."""
    by_rank = {r.rank: r for r in rows}
    for f in files:
        for line in f.events:
            ts, text = split_ts(line)
            m = LOST.search(text)
            if not m:
                continue
            words = RELAYED.sub("", m.group(1).strip())
            for blamed in blamed_ranks(words):
                row = by_rank.get(blamed)
                if blamed == f.rank or row is None or row.state not in ("Pending", "Running"):
                    continue
                if any(x.rank == blamed and x.source.startswith("logs") for x in failures):
                    continue
                host = hosts.get(blamed, "")
                if row.state == "Running":  # Slurm still counts its task; the other nodes lost it
                    row.meaning = _short(f"lost by the group (rank {f.rank}'s log): {words}")
                failures.append(Failure(blamed, "", host, None, "", f"rank {f.rank}'s log: {words}", "cause",
                                        parse_time(ts), f"logs of rank {f.rank}", host=host,
                                        key=f"node{blamed}@{host}" if host else f"node{blamed}"))  # fmt: skip
