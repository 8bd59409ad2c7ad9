"""The root cause of a run's failures: a pure function of per-rank failures and log tails (kgen.runs.records).

Failures within INCIDENT_WINDOW_S of each other are one incident; in each, causes come before victims (the
exit code's role, kgen.runs.exitcodes), the ranks the survivors' FAIL-STOP lines name decide, and the earliest
second together. ``root_cause`` makes the RootCause of one incident, ``fmt_cause`` its one line; the verdict
(kgen.runs.verdict.judge) takes them from here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kgen.runs.errors import describe
from kgen.runs.records import Blame, Failure, clock, error_lines, fail_stop_blames

INCIDENT_WINDOW_S = 10.0  # failures this close to the first one belong to the same incident
NODE0_ENDED = "stopped: node 0 ended the run"  # the entrypoint's last line on a node node 0 ended


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


def split_incidents(failures: list[Failure]) -> list[list[Failure]]:
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


def rank_list(ranks: Iterable[int | None], unit: str = "rank") -> str:
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


def root_cause(
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
        followers = f"{rank_list(consequences)} failed because of it"
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
        tail = "; ".join(f"{rank_list([f.rank], unit)} {f.describe()}" for f in rest)
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
            evidence=f"logs of {rank_list((b.reporter for b in blames), unit)} (FAIL-STOP lines)",
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


def fmt_cause(rc: RootCause, unit: str = "rank") -> str:
    """``unit``: what a row is called, "rank" (one process per node) or "node"; a process's error names ranks."""
    err = rc.error
    who = rank_list(rc.ranks, "rank" if err is not None else unit)
    where = []
    if err is not None and rc.ranks != rc.node_ranks:  # several processes per node: say which node
        local = f", local rank {err['local_rank']}" if err.get("local_rank") is not None and len(rc.ranks) == 1 else ""
        where.append(f"{rank_list(rc.node_ranks, 'node')}{local}")
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
