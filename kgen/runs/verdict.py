"""A run's verdict and root cause: a pure function of per-rank records (kgen.runs.records).

Two adapters make the records: ``kgen.cluster.kube_records`` from API objects (pods, the workload,
events, log tails) and ``kgen.baremetal.adapter`` from each ssh host's run state and log tail. The
decision is made once, here: incidents (failures within 10 s of each other), the root cause (causes
before victims, the ranks the survivors' FAIL-STOP lines name, the earliest second together), the state
and one headline in one vocabulary. ``kgen.cluster.verdict.decide`` is the cluster verbs' entry point
(API objects in). Nothing here does I/O; ``kgen.runs.views`` writes.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields, is_dataclass, replace
from datetime import datetime, timezone

from kgen.runs.errors import describe
from kgen.runs.records import (
    FAIL_STOP,
    GENERATION,
    IDLE_AFTER_SUCCESS,
    LOG_PREFIX,
    Blame,
    Failure,
    Row,
    RunRecords,
    clock,
    error_lines,
    fail_stop_blames,
    log_generation,
    parse_time,
)
from kgen.runs.safetext import printable

# re-exported: the adapters and the tests import these from here
__all__ = [
    "FAIL_STOP",
    "GENERATION",
    "IDLE_AFTER_SUCCESS",
    "LOG_PREFIX",
    "Blame",
    "Failure",
    "Row",
    "RunRecords",
    "clock",
    "error_lines",
    "fail_stop_blames",
    "log_generation",
    "parse_time",
    "INCIDENT_WINDOW_S",
    "IMAGE_ERRORS",
    "STATE_EXIT",
    "EXIT_FAILED",
    "EXIT_NOT_FOUND",
    "status_exit",
    "RootCause",
    "Verdict",
    "judge",
    "now_utc",
]

INCIDENT_WINDOW_S = 10.0  # failures this close to the first one belong to the same incident
IMAGE_ERRORS = {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"}

# Exit codes of `kgen status` (the one table, for runs on a cluster and over ssh alike).
# By default 0 unless the run failed or was stopped (1), so `set -e` scripts survive a healthy running
# job; 2 is always bad input or a run that cannot be found. `--exit-code` gives each state its own code.
# "stopped": a run ended by `kgen stop` or a deliberate group stop (terminal, not a success).
STATE_EXIT = {
    "succeeded": 0,
    "failed": 1,
    "stopped": 1,
    "running": 3,
    "starting": 3,
    "restarting": 3,
    "degraded": 3,
    "pending": 4,
}
EXIT_FAILED = 1
EXIT_NOT_FOUND = 2  # and every usage or cluster error
NODE0_ENDED = "stopped: node 0 ended the run"  # the entrypoint's last line on a node node 0 ended


def status_exit(state: str, state_codes: bool = False) -> int:
    """The exit code of `kgen status` for a run in ``state``: STATE_EXIT with --exit-code, else 0 or 1."""
    if state_codes:
        return STATE_EXIT[state]
    return EXIT_FAILED if state in ("failed", "stopped") else 0


# ------------------------------------------------------------------------------------ the verdict
@dataclass
class RootCause:
    ranks: list[int]
    pods: list[str]
    nodes: list[str]
    exit_code: int | None
    meaning: str
    time: str  # HH:MM:SS UTC
    evidence: str  # where it was seen: pod status, events, logs of rank N
    detail: str = ""  # the entrypoint's own words, when the logs have them
    followers: str = ""  # how the others followed
    hosts: list[str] = field(default_factory=list)  # bare metal: the ssh hosts
    # what the first failed training process said (kgen.runs.errors.ProcessError.to_dict): rank, node,
    # local_rank, exit, type, message, where (file:line), source, time, peer; None when no process error is known
    error: dict | None = None
    node_ranks: list[int] = field(default_factory=list)  # the node ranks of ``ranks`` (= ranks with 1 process per node)
    consequences: list[int] = field(default_factory=list)  # global ranks that failed because of it


@dataclass
class Verdict:
    name: str
    kind: str  # Job | StatefulSet | JobSet | bare-metal | local | ?
    state: str  # pending | starting | running | degraded | restarting | succeeded | failed | stopped
    headline: str  # the one verdict line
    details: list[str] = field(default_factory=list)
    ranks_expected: int = 0
    ranks_up: int = 0
    reformations: int = 0
    root_cause: RootCause | None = None
    job_reason: str = ""
    job_message: str = ""
    rows: list[Row] = field(default_factory=list)
    incidents: list[str] = field(default_factory=list)
    nproc: int = 1  # training processes per node: a row is a node, the ranks node*nproc .. node*nproc+nproc-1

    @property
    def exit_code(self) -> int:
        """What `kgen status` exits with (0 unless failed); ``state_code`` is the --exit-code one."""
        return status_exit(self.state)

    @property
    def state_code(self) -> int:
        return status_exit(self.state, state_codes=True)

    def to_dict(self) -> dict:
        out = asdict(self)
        out["exit_code"] = self.exit_code
        out["state_code"] = self.state_code
        return out


def _incidents(failures: list[Failure]) -> list[list[Failure]]:
    timed = sorted((f for f in failures if f.when), key=lambda f: (f.when, f.rank if f.rank is not None else -1))
    groups: list[list[Failure]] = []
    for f in timed:
        if groups and (f.when - groups[-1][0].when).total_seconds() <= INCIDENT_WINDOW_S:  # type: ignore[operator]
            groups[-1].append(f)
        else:
            groups.append([f])
    untimed = [f for f in failures if not f.when]
    if untimed:
        if groups:
            groups[-1].extend(untimed)
        else:
            groups.append(untimed)
    return groups


def _blames_for(incident: list[Failure], logs: Mapping[str, str]) -> list[Blame]:
    out = []
    for f in incident:
        if f.role == "victim" or f.exit_code == 4:
            out.extend(fail_stop_blames(logs.get(f.where, "")))
    return out


def _rank_list(ranks: Iterable[int | None], unit: str = "rank") -> str:
    rs = sorted({r for r in ranks if r is not None})
    if not rs:
        return "?"
    return (unit if len(rs) == 1 else f"{unit}s") + " " + _spans(rs)


def _spans(rs: list[int]) -> str:
    """0, 1, 2, 5 -> "0-2, 5" (three or more in a row as a range)."""
    out: list[str] = []
    i = 0
    while i < len(rs):
        j = i
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        out.extend([f"{rs[i]}-{rs[j]}"] if j - i >= 2 else [str(r) for r in rs[i : j + 1]])
        i = j + 1
    return ", ".join(out)


def _settle_errors(incident: list[Failure]) -> None:
    """What the failed processes said decides between ranks whose exit codes look alike: a node that only
    followed (exit 5) but whose own script failed on its own is a cause too; when some process failed on its
    own, a node whose processes only reacted (connection closed by peer, timeouts) is a reaction, not a cause."""
    real = any(f.error is not None and not f.error.peer for f in incident)
    for f in incident:
        if f.error is None:
            continue
        if not f.error.peer and f.role == "victim" and f.exit_code != 75:
            f.role = "cause"
        elif f.error.peer and real and f.role == "cause" and (f.exit_code or 0) < 128:
            f.role = "reaction"


def _waited_for_node0(incident: list[Failure], logs: Mapping[str, str]) -> None:
    """Nodes that trained with node 0, lost it and gave up waiting for it to come back (exit 3, "node 0 not
    back") while node 0 itself ended in the same incident (it left for good, was lost) followed it: node 0
    is the cause, they are not. (A node 0 never reached is another story: the waiting nodes stay causes.)"""
    zero = [f for f in incident if f.rank == 0 and f.exit_code != 3]
    first = min((f.when for f in zero if f.when), default=None)

    def followed(f: Failure) -> bool:
        if "node 0 not back" in logs.get(f.where, ""):
            return True
        return first is not None and f.when is not None and first < f.when  # node 0 had ended before

    waited = [f for f in incident if f.exit_code == 3 and f.rank != 0 and followed(f)]
    if not zero or not waited:
        return
    for f in waited:
        f.role = "victim"
    for f in zero:
        if f.role == "stopped":
            f.role = "cause"


def _consequences(incident: list[Failure], chosen: list[Failure], nproc: int = 1) -> list[int]:
    """The global ranks that failed because of the chosen ones: every process of every node of the incident
    that failed (whatever each node's record caught before it was stopped: the list is the same on every run
    of the same failure), and the processes the records name, less the chosen ones."""
    if any(f.error is not None and f.error.rank is not None for f in chosen):
        lead = set(_together(chosen))
    else:
        lead = {r for f in chosen if f.rank is not None for r in range(f.rank * nproc, (f.rank + 1) * nproc)}
    out: set[int] = set()
    for f in incident:
        if f.rank is not None and f.exit_code != 0:
            out.update(range(f.rank * nproc, (f.rank + 1) * nproc))
    for f in incident:
        e = f.error
        if e is None:
            continue
        if f not in chosen and e.rank is not None:
            out.add(e.rank)
        for o in e.others:
            if isinstance(o.get("rank"), int) and not (o.get("same") and f in chosen):
                out.add(o["rank"])
    return sorted(out - lead)


def _together(chosen: list[Failure]) -> list[int]:
    """Global ranks that failed the same way as the lead, on its node too (the record's ``same`` others)."""
    out = {f.error.rank for f in chosen if f.error is not None and f.error.rank is not None}
    for f in chosen:
        if f.error is not None:
            out.update(o["rank"] for o in f.error.others if o.get("same") and isinstance(o.get("rank"), int))
    return sorted(out)


def _node0_decided(chosen: list[Failure], candidates: list[Failure], logs: Mapping[str, str]) -> list[Failure]:
    """Node 0 ends the whole group for some causes (a hang, a failed health gate, a stop): every node exits with
    node 0's code, the others saying "node 0 ended the run (...)". When the record of such a node came first (in
    the same second, finishedAt's resolution), node 0 is the one chosen, not the ones that followed it. (A node
    whose own process failed keeps its error: the same error on every node is one cause, together.)"""
    followed = [
        f for f in chosen if f.error is None and any(NODE0_ENDED in ln for ln in error_lines(logs.get(f.where, "")))
    ]
    zero = [f for f in candidates if f.rank == 0 and f not in followed]
    if not followed or not zero or zero[0].exit_code != followed[0].exit_code:
        return chosen
    return [zero[0]] + [f for f in chosen if f not in followed and f is not zero[0]]


def _root_cause(
    incident: list[Failure],
    logs: Mapping[str, str],
    expected: int,
    pods_by_rank: Mapping[int, list[str]],
    by_host: bool = False,
    nproc: int = 1,
) -> RootCause:
    """The root cause of one incident. ``pods_by_rank``: the pods (``by_host``: the hosts) each rank has had."""

    def where(ranks: Iterable[int]) -> dict:
        found = [p for r in ranks for p in pods_by_rank.get(r, [])[:1]]
        return {"pods": [], "hosts": found} if by_host else {"pods": found}

    unit = "node" if nproc > 1 else "rank"
    _settle_errors(incident)
    _waited_for_node0(incident, logs)
    victims = [f for f in incident if f.role == "victim"]
    candidates = [f for f in incident if f.role in ("cause", "stopped")]
    blames = _blames_for(incident, logs)
    blamed = Counter(r for b in blames for r in b.ranks)
    chosen: list[Failure] = []
    said = [f for f in candidates if f.error is not None and not f.error.peer and f.when]
    if said:  # the processes' own errors: the first one, and every rank that failed the same way
        lead = min(said, key=lambda f: (f.when, f.rank if f.rank is not None else -1))
        assert lead.error is not None
        chosen = [lead] + [f for f in said if f is not lead and f.error is not None and f.error.same(lead.error)]
    elif candidates and blamed:
        chosen = [f for f in candidates if f.rank in blamed]
    if not chosen and candidates:
        causes = [f for f in candidates if f.role == "cause"] or candidates
        first = min(f.when for f in causes if f.when) if any(f.when for f in causes) else None
        # finishedAt has 1 s resolution: everything in the first second is "first" together
        chosen = [f for f in causes if f.when == first] if first else causes[:1]
    chosen = _node0_decided(chosen, candidates, logs)
    others = [f for f in incident if f not in chosen]
    followers = ""
    consequences = _consequences(incident, chosen, nproc) if chosen else []
    if consequences:
        followers = f"{_rank_list(consequences)} failed because of it"
    if victims:
        vt = [f.time for f in victims if f.time]
        t0 = min(f.time for f in chosen if f.time) if any(f.time for f in chosen) else (min(vt) if vt else None)
        span = int((max(vt) - t0).total_seconds()) if vt and t0 else 0
        n = len({f.rank for f in victims})
        when = f"within {span} s" if span > 0 else "in the same second"
        codes = ", ".join(str(c) for c in sorted({f.exit_code for f in victims if f.exit_code is not None}))
        stopped = f"{n} {unit}{'s' if n != 1 else ''} stopped by fail-stop{f' (exit {codes})' if codes else ''} {when}"
        followers = f"{followers}; {stopped}" if followers else stopped
    rest = [f for f in others if f.role not in ("victim", "reaction")]
    if rest:
        tail = "; ".join(f"{_rank_list([f.rank], unit)} {f.describe()}" for f in rest)
        followers = f"{followers}; {tail}" if followers else tail
    detail = ""
    if chosen:
        # in rank order, not arrival order: nodes that end in the same second (a hang ends every node, node 0
        # first by decision but not always first on the record) must give the same detail on every run
        for f in sorted(chosen, key=lambda f: -1 if f.rank is None else f.rank):
            errs = error_lines(logs.get(f.where, ""))
            if errs:
                detail = errs[-1]
                break
        if not detail and blames:
            best = [b for b in blames if set(b.ranks) & {f.rank for f in chosen}]
            if best:
                detail = f"rank {best[0].reporter}'s log: FAIL-STOP: {best[0].text}"
        lead = chosen[0]
        same_code = len({f.exit_code for f in chosen}) == 1
        node_ranks = sorted({f.rank for f in chosen if f.rank is not None})
        error = lead.error
        ordered = sorted(chosen, key=lambda f: -1 if f.rank is None else f.rank)
        return RootCause(
            ranks=_together(chosen) if error is not None and error.rank is not None else node_ranks,
            pods=[f.pod for f in ordered if f.pod],
            hosts=[f.host for f in ordered if f.host],
            nodes=[f.node for f in ordered],
            exit_code=lead.exit_code if same_code else None,
            meaning=lead.describe() if same_code else "; ".join(f.describe() for f in chosen),
            time=clock(lead.when),
            evidence=_evidence(lead),
            detail=detail,
            followers=followers,
            error=error.to_dict() if error is not None else None,
            node_ranks=node_ranks,
            consequences=consequences,
        )
    # Only victims: the rank that went first left no failure (frozen, cut off, or its pod is gone).
    t0 = min((f.time for f in incident if f.time), default=None)
    if blamed:
        ranks = sorted(r for r, _ in blamed.most_common() if blamed[r] == max(blamed.values()))
        b = next(b for b in blames if set(b.ranks) & set(ranks))
        return RootCause(
            ranks=ranks,
            **where(ranks),
            nodes=[],
            exit_code=None,
            meaning=b.text,
            time=b.at or clock(t0),
            evidence=f"logs of {_rank_list((b.reporter for b in blames), unit)} (FAIL-STOP lines)",
            detail=f"rank {b.reporter}'s log: FAIL-STOP: {b.text}",
            followers=followers,
            node_ranks=ranks,
        )
    failed_ranks = {f.rank for f in incident}
    suspects = [r for r in range(expected) if r not in failed_ranks]
    return RootCause(
        ranks=suspects,
        **where(suspects),
        nodes=[],
        exit_code=None,
        meaning="no failure recorded for this rank: every failed rank only reacted (fail-stop); "
        "it hung, was cut off, or its pod is gone (see `kgen logs` for the FAIL-STOP lines)",
        time=clock(t0),
        evidence="pods (the ranks that did not fail)",
        followers=followers,
        node_ranks=suspects,
    )


def _evidence(f: Failure) -> str:
    if f.source == "events":
        return "events (the pod is gone)"
    return "pod status" if f.pod else f.source


def _fmt_cause(rc: RootCause, unit: str = "rank") -> str:
    """``unit``: what a row is called, "rank" (one process per node) or "node"; a process's error names ranks."""
    err = rc.error
    who = _rank_list(rc.ranks, "rank" if err is not None else unit)
    where = []
    if err is not None and rc.ranks != rc.node_ranks:  # several processes per node: say which node
        local = f", local rank {err['local_rank']}" if err.get("local_rank") is not None and len(rc.ranks) == 1 else ""
        where.append(f"{_rank_list(rc.node_ranks, 'node')}{local}")
    if rc.pods:
        where.append("pod " + ", ".join(rc.pods))
    if rc.hosts:
        where.append("host " + ", ".join(dict.fromkeys(rc.hosts)))
    nodes = [n for n in rc.nodes if n and n not in rc.hosts]
    if nodes:
        where.append("node " + ", ".join(dict.fromkeys(nodes)))
    loc = f" ({'; '.join(where)})" if where else ""
    code = f"exit {rc.exit_code}: " if rc.exit_code is not None and not rc.meaning.startswith("exit") else ""
    together = " together" if len(rc.ranks) > 1 else ""
    seen = f", seen in the {rc.evidence}" if rc.evidence.startswith("logs") else ""
    what = rc.meaning
    if err is not None:  # the process's own error instead of the exit code's meaning
        what = describe(err)
        code = f"exit {rc.exit_code}: " if rc.exit_code is not None else ""
    return f"{who}{loc}{together}: {code}{what} at {rc.time}{seen}"


def _reform_text(kind: str, n: int) -> str:
    """A JobSet never re-forms in place (KGEN_MAX_REFORMATIONS 0): each new generation is a group restart by
    the JobSet controller (status.restarts), every node's pod recreated."""
    what = "group restart" if kind == "JobSet" else "re-formation"
    return f"{n} {what}{'s' if n != 1 else ''}"


def judge(rec: RunRecords) -> Verdict:
    """The verdict of a run from its per-rank records, whichever adapter made them."""
    by_host = any(r.host for r in rec.rows)
    incidents = _incidents(rec.failures)
    causes = [_root_cause(inc, rec.logs, rec.expected, rec.where_by_rank, by_host, rec.nproc) for inc in incidents]
    unit = "node" if rec.nproc > 1 else "rank"  # a row is a node: with one process per node, that rank
    incident_lines = [
        f"{i + 1}. {_fmt_cause(rc, unit)}" + (f"; {rc.followers}" if rc.followers else "")
        for i, rc in enumerate(causes)
    ]
    rows, expected = rec.rows, rec.expected
    v = Verdict(name=rec.name, kind=rec.kind, state="starting", headline="", rows=rows, ranks_expected=expected)
    v.reformations = rec.reformations
    v.nproc = rec.nproc
    v.incidents = incident_lines
    v.root_cause = causes[0] if causes else None
    v.ranks_up = sum(1 for r in rows if r.state == "Running")
    reform_text = _reform_text(rec.kind, rec.reformations)
    if rec.failed:
        v.job_reason = rec.job_reason
        v.job_message = rec.job_message
    every_rank_exited_0 = expected > 0 and len(rows) == expected and all(r.exit_code == 0 for r in rows)
    if rec.complete or every_rank_exited_0:  # never Failed when every rank exited 0
        v.state = "succeeded"
        done = max(rec.succeeded, expected if every_rank_exited_0 else 0)
        v.headline = f"Succeeded: {done}/{expected} {unit}s completed, {reform_text}"
    elif rec.failed:
        v.state = "failed"
        rc = v.root_cause
        if rc:
            v.headline = f"Failed: {_fmt_cause(rc, unit)}" + (f"; {rc.followers}" if rc.followers else "")
        else:
            v.headline = f"Failed: {v.job_reason}: {v.job_message}"
        if not rec.failed_final:
            v.details.append(
                f"the Job is failing (FailureTarget since {clock(rec.failing_since)}), "
                f"{rec.terminating} pod(s) still terminating"
            )
    elif rec.stopped:
        v.state = "stopped"
        ended = sum(1 for r in rows if r.state in ("Stopped", "Succeeded", "Failed", "Lost"))
        v.headline = f"Stopped: {rec.stopped}; {ended}/{expected} {unit}s ended, {reform_text}"
    elif rec.restarting:  # JobSet: the old attempt's Jobs and pods go, the new ones come (all nodes at once)
        v.state = "restarting"
        v.headline = (
            f"Restarting: the JobSet controller restarts the whole group ({rec.restarting}), "
            f"{v.ranks_up}/{expected} {unit}s up; restart {rec.reformations} of the run"
        )
    elif rec.suspended and rec.admission:
        v.state = "pending"
        v.headline = (
            f"Pending: not admitted by its queue yet (Kueue: {rec.admission}); the run stays suspended, "
            f"{v.ranks_up}/{expected} {unit}s up, and starts when admitted"
        )
    elif rec.suspended:
        v.state = "pending"
        v.headline = (
            f"Pending: the Job is suspended (spec.suspend), {v.ranks_up}/{expected} {unit}s up; "
            "a queue such as Kueue starts it when admitted, or `kubectl patch` it"
        )
    else:
        _live_state(v, rec, unit)
    # bare metal: a degraded headline that already names the only incident does not repeat it below
    repeated = by_host and v.state == "degraded" and len(causes) == 1 and _fmt_cause(causes[0], unit) in v.headline
    if v.state != "failed" and causes and (v.reformations or v.state == "restarting") and not repeated:
        label = "restarting after" if v.state == "restarting" else "re-formed after"
        v.details.append(
            f"{label}: {_fmt_cause(causes[-1], unit)}" + (f"; {causes[-1].followers}" if causes[-1].followers else "")
        )
        if len(causes) > 1:
            v.details.append(f"first incident: {_fmt_cause(causes[0], unit)}")
    if v.job_reason:
        owner = "JobSet" if rec.kind == "JobSet" else "Job"
        msg = f"{owner} reason: {v.job_reason}" + (f": {v.job_message}" if v.job_message else "")
        named = re.search(r"for pod \S+/(\S+) failed", v.job_message)
        if named and v.root_cause and named.group(1) not in v.root_cause.pods:
            msg += " (this names a rank that reacted, not the root cause)"
        v.details.append(msg)
    if v.root_cause and v.root_cause.detail:
        v.details.append(v.root_cause.detail)
    if v.state == "failed" or (v.state == "succeeded" and incident_lines):
        v.details.append(f"{reform_text}" + (f"; incidents: {len(incident_lines)}" if incident_lines else ""))
    v.details.extend(rec.notes)
    _hang(v, rec)
    _health(v, rec)
    return _printable(v)


def _hang(v: Verdict, rec: RunRecords) -> None:
    """The hang watchdog's report in a log (node 0's): the verdict names the ranks that differ and their frames."""
    from kgen.runs.stacks import hang_lines, hang_record

    for log in rec.logs.values():
        found = hang_record(log)
        if found is None:
            continue
        lines = hang_lines(found)
        if v.state == "failed":
            v.headline = f"Failed: {lines[0]}"
            v.details[:0] = [line.strip() for line in lines[1:]]
        else:
            v.details[:0] = [lines[0], *(line.strip() for line in lines[1:])]
        return


def _health(v: Verdict, rec: RunRecords) -> None:
    """The health gate's lines (node 0's log) when it found a node at fault: with health.gate fail the
    headline, its nodes' lines the details (a gate that passed stays in the log: `kgen logs`)."""
    from kgen.runs.health import health_lines, health_record

    found = health_record(rec.logs.values())
    if found is None or not found.get("bad"):
        return
    lines = health_lines(found)
    if v.state == "failed" and found.get("gate") == "fail" and found.get("bad"):
        v.headline = f"Failed: {lines[1].strip()[len('health: ') :]} (health gate)"
        v.details[:0] = [line.strip() for line in lines]
    else:
        v.details.extend(line.strip() for line in lines)


def _printable(obj):
    """A copy of a verdict (its rows, its root cause) with every text escaped: the words come from logs, pod
    messages and hosts, and what `kgen status` prints must not pass a control character (kgen.runs.safetext)."""
    changes: dict[str, object] = {}
    for f in fields(obj):
        value = getattr(obj, f.name)
        if isinstance(value, str):
            changes[f.name] = printable(value)
        elif isinstance(value, list):
            changes[f.name] = [
                printable(x) if isinstance(x, str) else _printable(x) if is_dataclass(x) else x for x in value
            ]
        elif is_dataclass(value):
            changes[f.name] = _printable(value)
    return replace(obj, **changes)


def _live_state(v: Verdict, rec: RunRecords, unit: str = "rank") -> None:
    rows, expected, kind, logs = rec.rows, rec.expected, rec.kind, rec.logs
    states = Counter(r.state for r in rows)
    up = states.get("Running", 0)
    missing = max(expected - len(rows), 0)
    unsched_current = [r for r in rows if r.state == "Unschedulable"]
    image = [r for r in rows if r.state in IMAGE_ERRORS]
    crash = [r for r in rows if r.state == "CrashLoopBackOff"]
    terminal = [r for r in rows if r.state in ("Failed", "Succeeded") and kind == "Job"]
    if unsched_current:
        msgs = rec.scheduler_messages
        msg = msgs.most_common(1)[0][0] if msgs else ""
        placed = len(rows) - len(unsched_current)
        v.state = "pending"
        v.headline = (
            f"Pending: {placed}/{expected} placed, {up} running; "
            f"{len(unsched_current)} unschedulable: {msg.split(' no new claims')[0].split(' preemption:')[0]}"
        )
        if msg:
            v.details.append(f"scheduler: {msg}")
        return
    if image:
        v.state = "pending"
        v.headline = f"Pending: {len(image)} rank(s) cannot pull the image ({image[0].state}, pod {image[0].pod})"
        return
    if crash:
        v.state = "restarting"
        v.headline = (
            f"Restarting: {up}/{expected} {unit}s up; {len(crash)} in CrashLoopBackOff "
            f"({_rank_list((r.rank for r in crash), unit)}); re-formation {v.reformations + 1} pending"
        )
        return
    if up == expected and expected and rec.idle_after_success:
        # restartPolicy Always: the entrypoint holds the pods idle after success instead of training again
        v.state = "succeeded"
        v.headline = (
            f"Succeeded: node 0's log says the run succeeded; its {expected} pods hold idle "
            f"(restartPolicy Always would train again) and keep their GPUs: `kgen stop {v.name}` releases them"
        )
        return
    # bare metal: a node's process runs, but it waits or re-forms instead of training (its row says which)
    busy = [r for r in rows if r.state == "Running" and r.host and not r.ready]
    if up == expected and expected and busy:
        reforming = [r for r in busy if r.meaning.startswith(("re-forming", "peer lost"))]
        v.state = "restarting" if reforming else "starting"
        what = "; ".join(f"{unit} {r.rank}: {r.meaning}" for r in (reforming or busy)[:3])
        word = "Re-forming" if reforming else "Starting"
        v.headline = f"{word}: {up}/{expected} {unit}s up, {len(busy)} not training yet ({what})"
        return
    if up == expected and expected:
        v.state = "running"
        joined = ""
        if any(f"all {expected} nodes connected" in text for text in logs.values()):
            joined = ", the group formed (node 0's log)"
        gen = max((r.generation for r in rows), default=0)  # the GEN column's own number
        after = f"; generation {gen} after {_reform_text(kind, v.reformations)}"
        if kind == "JobSet":  # every attempt has new pods: no generation to count, only the group restarts
            after = f"; after {_reform_text(kind, v.reformations)}"
        v.headline = f"Running: {up}/{expected} {unit}s up{joined}" + (after if v.reformations else "")
        return
    failed_rows = [r for r in rows if r.state in ("Failed", "Terminating", "Deleted", "Lost") and r.exit_code != 0]
    done = [r for r in rows if r.state == "Succeeded"]
    unseen = [r for r in rows if r.state in ("Unreachable", "Frozen")]  # bare metal: ssh cannot tell, or SIGSTOPped
    if unseen and up and not failed_rows:
        which = ", ".join(f"{unit} {r.rank} ({r.host or r.pod}) {r.state.lower()}" for r in unseen)
        if rec.group_intact:
            v.state = "running"
            v.headline = (
                f"Running: {up}/{expected} {unit}s up, {which}: node 0's log says the group still trains with "
                "every node, so it runs but kgen cannot see it"
            )
        else:
            v.state = "degraded"
            first = v.root_cause
            v.headline = f"Degraded: {up}/{expected} {unit}s up; " + (_fmt_cause(first, unit) if first else which)
        return
    if failed_rows and up:
        v.state = "degraded"
        first = v.root_cause
        why = f": {_fmt_cause(first, unit)}" if first else ""
        v.headline = f"Degraded: {up}/{expected} {unit}s up, {len(failed_rows)} failed or stopping{why}"
        return
    if terminal and not up and failed_rows:
        v.state = "restarting"
        v.headline = (
            f"Re-forming: 0/{expected} {unit}s up; the {unit}s ended and the Job controller has not replaced them "
            "yet (its pod failure back-off: no event explains the wait) or is failing the Job"
        )
        return
    if done and up + len(done) == expected:
        v.state = "running"
        v.headline = f"Completing: {len(done)}/{expected} {unit}s done, {up} still running"
        return
    if done and len(done) == expected:
        v.state = "running"
        v.headline = f"Completing: {expected}/{expected} {unit}s done, waiting for the Job's Complete condition"
        return
    v.state = "starting"
    pending = states.get("Pending", 0) + states.get("ContainerCreating", 0) + states.get("NoPod", 0) + missing
    v.headline = f"Starting: {up}/{expected} {unit}s up" + (f", {pending} not started yet" if pending else "")
    if unseen or states.get("NoRunDir"):  # bare metal
        v.headline += f", {len(unseen)} unreachable" if unseen else ""
        v.headline += f", {states['NoRunDir']} without a run directory" if states.get("NoRunDir") else ""
    if states.get("Pending") and all(r.node for r in rows if r.state == "Pending"):
        v.details.append(f"{states['Pending']} pod(s) bound to a node but no container started yet")


def now_utc() -> datetime:
    return datetime.now(timezone.utc)
