"""A run's verdict and root cause: a pure function of API objects (dicts as the API server sends them).

Inputs: the run's pods (one list call), its Job or StatefulSet, the namespace's Events, optionally the
tails of some pods' logs (for the entrypoint's ``FAIL-STOP:`` lines) and pods a watch saw deleted.
Nothing here does I/O; ``kgen.cluster.client`` fetches, ``kgen.cluster.views`` writes.

What the recordings taught (shared/cluster-recordings/README.md): the Job forgets ignored failures
(count re-formations from pods), the Job controller deletes pods that were still running (their only
trace is an Event), ``finishedAt`` has 1 s resolution (ties are broken by exit codes and FAIL-STOP
lines: 75 is always a victim), ``FailureTarget`` comes before ``Failed``, and the FailJob message can
blame a rank that only reacted.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone

from kgen.cluster import exitcodes

CONTAINER = "trainer"
INSTANCE_LABEL = "app.kubernetes.io/instance"
MANAGED_BY = "app.kubernetes.io/managed-by"
INCIDENT_WINDOW_S = 10.0  # failures this close to the first one belong to the same incident
IMAGE_ERRORS = {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"}

# Exit codes of `kgen status` (contract C2; the one table, for runs on a cluster and over ssh alike).
# By default 0 unless the run failed (1), so `set -e` scripts survive a healthy running job; 2 is always
# bad input or a run that cannot be found. `--exit-code` gives each state its own code (STATE_EXIT).
STATE_EXIT = {"succeeded": 0, "failed": 1, "running": 3, "starting": 3, "restarting": 3, "degraded": 3, "pending": 4}
EXIT_FAILED = 1
EXIT_NOT_FOUND = 2  # and every usage or cluster error


def status_exit(state: str, state_codes: bool = False) -> int:
    """The exit code of `kgen status` for a run in ``state``: STATE_EXIT with --exit-code, else 0 or 1."""
    if state_codes:
        return STATE_EXIT[state]
    return EXIT_FAILED if state == "failed" else 0


# ----------------------------------------------------------------------------------------- helpers
def parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    text = text.replace("Z", "+00:00")
    if "." in text:  # 2026-11-22T15:06:42.015560+00:00: fromisoformat on 3.10 wants 3 or 6 digits
        head, rest = text.split(".", 1)
        digits = re.match(r"\d+", rest).group(0)  # type: ignore[union-attr]
        text = f"{head}.{(digits + '000000')[:6]}{rest[len(digits) :]}"
    return datetime.fromisoformat(text)


def clock(t: datetime | None) -> str:
    return t.strftime("%H:%M:%S") if t else "?"


def _meta(obj: Mapping) -> Mapping:
    return obj.get("metadata") or {}


def _status(obj: Mapping) -> Mapping:
    return obj.get("status") or {}


def pod_rank(pod: Mapping) -> int | None:
    """The node rank: the Job completion index, or the StatefulSet pod index."""
    meta = _meta(pod)
    labels = meta.get("labels") or {}
    for key in ("batch.kubernetes.io/job-completion-index", "apps.kubernetes.io/pod-index"):
        value = labels.get(key) or (meta.get("annotations") or {}).get(key)
        if value is not None and str(value).isdigit():
            return int(value)
    # before 1.28 a StatefulSet pod has no pod-index label: its ordinal ends its name
    if any(ref.get("kind") == "StatefulSet" for ref in meta.get("ownerReferences") or []):
        tail = (meta.get("name") or "").rsplit("-", 1)[-1]
        if tail.isdigit():
            return int(tail)
    return None


def rank_from_name(run: str, pod_name: str) -> int | None:
    """Rank of a pod known only by name (Events of a deleted pod): NAME-INDEX-xxxxx or NAME-INDEX."""
    m = re.fullmatch(re.escape(run) + r"-(\d+)(?:-[a-z0-9]{5})?", pod_name)
    return int(m.group(1)) if m else None


def trainer_status(pod: Mapping) -> Mapping | None:
    statuses = _status(pod).get("containerStatuses") or []
    for cs in statuses:
        if cs.get("name") == CONTAINER:
            return cs
    return statuses[0] if statuses else None


def condition(obj: Mapping, ctype: str) -> Mapping | None:
    for c in _status(obj).get("conditions") or []:
        if c.get("type") == ctype and c.get("status") == "True":
            return c
    return None


def _false_condition(obj: Mapping, ctype: str) -> Mapping | None:
    for c in _status(obj).get("conditions") or []:
        if c.get("type") == ctype and c.get("status") == "False":
            return c
    return None


# --------------------------------------------------------------------------------------- the rows
@dataclass
class Row:
    """One line of `kgen status`: the current pod of one node rank."""

    rank: int | None
    pod: str
    node: str
    state: str  # Running, Pending, Unschedulable, CrashLoopBackOff, Succeeded, Failed, Terminating ...
    ready: bool
    restarts: int
    exit_code: int | None
    meaning: str
    generation: int  # 1 = the first pod of this rank (Job: pods per completion index)
    ip: str = ""  # the pod's IP (`kgen status -o wide`)


def pod_row(pod: Mapping, generation: int = 1) -> Row:
    meta, st = _meta(pod), _status(pod)
    cs = trainer_status(pod)
    exit_code, meaning, ready, restarts = None, "", False, 0
    state = st.get("phase") or "Unknown"
    if cs:
        restarts = int(cs.get("restartCount") or 0)
        ready = bool(cs.get("ready"))
        cur, last = cs.get("state") or {}, (cs.get("lastState") or {}).get("terminated")
        if "running" in cur:
            state = "Running" if ready or condition(pod, "Ready") else "Running (not ready)"
        elif "waiting" in cur:
            state = cur["waiting"].get("reason") or "Waiting"
        if "terminated" in cur:
            term = cur["terminated"]
            exit_code = term.get("exitCode")
            meaning = exitcodes.meaning(exit_code, term.get("reason") or "").meaning
        elif last:
            exit_code = last.get("exitCode")
            meaning = "last: " + exitcodes.meaning(exit_code, last.get("reason") or "").meaning
    elif state == "Pending":
        sched = _false_condition(pod, "PodScheduled")
        if sched and sched.get("reason") == "Unschedulable":
            state = "Unschedulable"
    disruption = condition(pod, "DisruptionTarget")
    if disruption:
        meaning = f"{meaning}; " if meaning else ""
        meaning += f"disrupted: {disruption.get('reason')}"
    if meta.get("deletionTimestamp"):
        state = "Terminating"
    return Row(
        rank=pod_rank(pod),
        pod=meta.get("name", "?"),
        node=(pod.get("spec") or {}).get("nodeName") or "",
        state=state,
        ready=ready,
        restarts=restarts,
        exit_code=exit_code,
        meaning=meaning,
        generation=generation,
        ip=st.get("podIP") or "",
    )


# ------------------------------------------------------------------------------------ failures
@dataclass
class Failure:
    """One container (or pod) that ended other than with success."""

    rank: int | None
    pod: str
    node: str
    exit_code: int | None
    reason: str  # container reason (Error, OOMKilled) or pod-level explanation
    meaning: str
    role: str  # cause | victim | stopped | consequence (see kgen.cluster.exitcodes)
    time: datetime | None
    source: str  # "pod", "previous container", "deleted pod (watch)", "events"
    disruption: str = ""  # the DisruptionTarget condition: evicted, preempted, ...

    def describe(self) -> str:
        what = self.meaning if self.exit_code is None else f"exit {self.exit_code}: {self.meaning}"
        if self.disruption:
            what = f"{what}; {self.disruption}"
        return what


def _failure_from_term(pod: Mapping, term: Mapping, source: str) -> Failure | None:
    code = term.get("exitCode")
    if code == 0:
        return None
    m = exitcodes.meaning(code, term.get("reason") or "")
    return Failure(
        rank=pod_rank(pod),
        pod=_meta(pod).get("name", "?"),
        node=(pod.get("spec") or {}).get("nodeName") or "",
        exit_code=code,
        reason=term.get("reason") or "",
        meaning=m.meaning,
        role=m.role,
        time=parse_time(term.get("finishedAt")),
        source=source,
    )


def pod_failures(pod: Mapping, source: str = "pod") -> list[Failure]:
    """The failures one pod object shows: its current and its previous container, or the pod itself."""
    out: list[Failure] = []
    cs = trainer_status(pod)
    disruption = condition(pod, "DisruptionTarget")
    if cs:
        last = (cs.get("lastState") or {}).get("terminated")
        if last:
            f = _failure_from_term(pod, last, "previous container")
            if f:
                out.append(f)
        cur = (cs.get("state") or {}).get("terminated")
        if cur:
            f = _failure_from_term(pod, cur, source)
            if f:
                out.append(f)
    st = _status(pod)
    if not out and (st.get("phase") == "Failed" or disruption):
        out.append(
            Failure(
                rank=pod_rank(pod),
                pod=_meta(pod).get("name", "?"),
                node=(pod.get("spec") or {}).get("nodeName") or "",
                exit_code=None,
                reason=st.get("reason") or "",
                meaning=st.get("message") or st.get("reason") or "pod failed without a container exit code",
                role="stopped",
                time=parse_time((disruption or {}).get("lastTransitionTime")),
                source=source,
            )
        )
    if disruption and out:
        last_f = out[-1]
        last_f.disruption = f"{disruption.get('reason')}: {disruption.get('message', '')}".rstrip(": ")
        last_f.meaning = "evicted or preempted (DisruptionTarget)"
        last_f.role = "cause"
        began = parse_time(disruption.get("lastTransitionTime"))
        if began and (last_f.time is None or began < last_f.time):
            last_f.time = began  # an eviction starts when it is decided, not when the process ends
    return out


# ------------------------------------------------------------------------------------ FAIL-STOP
FAIL_STOP = re.compile(r"FAIL-STOP: (.*)")
RELAYED = re.compile(r"^node \d+ (?:stopped the job|ended the run): ")
GENERATION = re.compile(r"\bgeneration (\d+)\b")
LOG_PREFIX = re.compile(r"\[kgen node (\d+) (\d\d:\d\d:\d\d)")


@dataclass
class Blame:
    ranks: list[int]
    text: str  # the entrypoint's reason, e.g. "node 1 silent for 5.0s (...): frozen or cut off"
    reporter: int | None  # the rank whose log said it
    at: str  # HH:MM:SS from the log line


def fail_stop_blames(log: str) -> list[Blame]:
    """Every FAIL-STOP line of one log: which ranks it blames and why."""
    out = []
    for line in log.splitlines():
        m = FAIL_STOP.search(line)
        if not m:
            continue
        text = RELAYED.sub("", m.group(1).strip())
        listed = re.search(r"node rank\(s\) \[([\d, ]+)\]", text)
        if listed:
            ranks = [int(x) for x in listed.group(1).replace(",", " ").split()]
        else:
            single = re.search(r"node (\d+)", text)
            ranks = [int(single.group(1))] if single else []
        prefix = LOG_PREFIX.search(line)
        out.append(
            Blame(
                ranks=ranks,
                text=text,
                reporter=int(prefix.group(1)) if prefix else None,
                at=prefix.group(2) if prefix else "",
            )
        )
    return out


def error_lines(log: str) -> list[str]:
    """The entrypoint's own last word: ``kgen-entrypoint: error: ...`` or ``kgen-entrypoint: stopped: ...``."""
    return [
        ln.strip() for ln in log.splitlines() if "kgen-entrypoint: error:" in ln or "kgen-entrypoint: stopped:" in ln
    ]


def log_generation(logs: Mapping[str, str]) -> int:
    """The highest group generation the logs name (in-place re-formation counts generations from 0)."""
    return max((int(m.group(1)) for text in logs.values() for m in GENERATION.finditer(text)), default=0)


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


@dataclass
class Verdict:
    name: str
    kind: str  # Job | StatefulSet | ?
    state: str  # pending | starting | running | degraded | restarting | succeeded | failed
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


def expected_ranks(workload: Mapping | None, pods: Iterable[Mapping]) -> int:
    spec = (workload or {}).get("spec") or {}
    if spec.get("replicatedJobs"):  # JobSet: replicas x completions of each replicated Job
        return sum(
            int(rj.get("replicas") or 1) * int(((rj.get("template") or {}).get("spec") or {}).get("completions") or 1)
            for rj in spec["replicatedJobs"]
        )
    for key in ("completions", "parallelism", "replicas"):
        if spec.get(key) is not None:
            return int(spec[key])
    ranks = {pod_rank(p) for p in pods}
    return len({r for r in ranks if r is not None})


def _creation(pod: Mapping) -> tuple[str, str]:
    meta = _meta(pod)
    return (meta.get("creationTimestamp") or "", meta.get("name") or "")


def current_pods(pods: Iterable[Mapping]) -> tuple[dict[int, Mapping], dict[int, int]]:
    """The newest pod of every rank and how many pods each rank has had."""
    by_rank: dict[int, list[Mapping]] = {}
    for p in pods:
        r = pod_rank(p)
        if r is not None:
            by_rank.setdefault(r, []).append(p)
    current = {r: max(ps, key=_creation) for r, ps in by_rank.items()}
    return current, {r: len(ps) for r, ps in by_rank.items()}


def _event_time(ev: Mapping) -> datetime | None:
    return parse_time(ev.get("lastTimestamp") or ev.get("eventTime") or ev.get("firstTimestamp"))


def gone_pods(
    name: str, pods: list[Mapping], deleted: list[Mapping], events: list[Mapping], workload_uid: str | None = None
) -> list[Failure]:
    """Pods the workload created (its Events say so) that are no longer in the pod list nor in ``deleted``.

    Only this workload's events count (``workload_uid``): a stopped and re-submitted run of the same
    name leaves the old Job's events behind for an hour."""
    known = {_meta(p).get("name") for p in pods} | {_meta(p).get("name") for p in deleted}
    created: dict[str, datetime | None] = {}
    deleted_by: dict[str, datetime | None] = {}
    killing: dict[str, datetime | None] = {}
    for ev in events:
        obj = ev.get("involvedObject") or {}
        msg = ev.get("message") or ""
        same = obj.get("name") == name and obj.get("kind") in ("Job", "StatefulSet")
        if same and (workload_uid is None or obj.get("uid") in (None, workload_uid)):
            m = re.match(r"(Created|Deleted) pod: (\S+)", msg) or re.match(r"(Create|Delete) Pod (\S+) in", msg)
            if m:
                target = created if m.group(1).startswith("Creat") else deleted_by
                target[m.group(2)] = _event_time(ev)
        elif obj.get("kind") == "Pod" and ev.get("reason") == "Killing":
            killing[obj.get("name", "")] = _event_time(ev)
    out = []
    for pod in sorted(set(created) | set(deleted_by)):
        if pod in known:
            continue
        by_job = pod in deleted_by
        when = deleted_by.get(pod) or killing.get(pod)
        if by_job:
            text = "deleted by the workload controller while still running (pod and log are gone)"
        elif pod in killing:
            text = "stopped and deleted (kubelet Killing event; evicted, drained or deleted; pod and log are gone)"
        else:
            text = "pod gone (deleted; no status left)"
        out.append(
            Failure(
                rank=rank_from_name(name, pod),
                pod=pod,
                node="",
                exit_code=None,
                reason="Deleted",
                meaning=text,
                role="consequence" if by_job else "stopped",
                time=when,
                source="events",
            )
        )
    return out


def _incidents(failures: list[Failure]) -> list[list[Failure]]:
    timed = sorted((f for f in failures if f.time), key=lambda f: (f.time, f.rank if f.rank is not None else -1))
    groups: list[list[Failure]] = []
    for f in timed:
        if groups and (f.time - groups[-1][0].time).total_seconds() <= INCIDENT_WINDOW_S:  # type: ignore[operator]
            groups[-1].append(f)
        else:
            groups.append([f])
    untimed = [f for f in failures if not f.time]
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
            out.extend(fail_stop_blames(logs.get(f.pod, "")))
    return out


def _rank_list(ranks: Iterable[int | None]) -> str:
    rs = sorted({r for r in ranks if r is not None})
    if not rs:
        return "?"
    return ("rank " if len(rs) == 1 else "ranks ") + ", ".join(str(r) for r in rs)


def _root_cause(
    incident: list[Failure], logs: Mapping[str, str], expected: int, pods_by_rank: Mapping[int, list[str]]
) -> RootCause:
    victims = [f for f in incident if f.role == "victim"]
    candidates = [f for f in incident if f.role in ("cause", "stopped")]
    blames = _blames_for(incident, logs)
    blamed = Counter(r for b in blames for r in b.ranks)
    chosen: list[Failure] = []
    if candidates and blamed:
        chosen = [f for f in candidates if f.rank in blamed]
    if not chosen and candidates:
        causes = [f for f in candidates if f.role == "cause"] or candidates
        first = min(f.time for f in causes if f.time) if any(f.time for f in causes) else None
        # finishedAt has 1 s resolution: everything in the first second is "first" together
        chosen = [f for f in causes if f.time == first] if first else causes[:1]
    others = [f for f in incident if f not in chosen]
    followers = ""
    if victims:
        vt = [f.time for f in victims if f.time]
        t0 = min(f.time for f in chosen if f.time) if any(f.time for f in chosen) else (min(vt) if vt else None)
        span = int((max(vt) - t0).total_seconds()) if vt and t0 else 0
        n = len({f.rank for f in victims})
        when = f"within {span} s" if span > 0 else "in the same second"
        followers = f"{n} rank{'s' if n != 1 else ''} stopped by fail-stop (exit 75) {when}"
    rest = [f for f in others if f.role != "victim"]
    if rest:
        tail = "; ".join(f"{_rank_list([f.rank])} {f.describe()}" for f in rest)
        followers = f"{followers}; {tail}" if followers else tail
    detail = ""
    if chosen:
        for f in chosen:
            errs = error_lines(logs.get(f.pod, ""))
            if errs:
                detail = errs[-1]
                break
        if not detail and blames:
            best = [b for b in blames if set(b.ranks) & {f.rank for f in chosen}]
            if best:
                detail = f"rank {best[0].reporter}'s log: FAIL-STOP: {best[0].text}"
        lead = chosen[0]
        same_code = len({f.exit_code for f in chosen}) == 1
        return RootCause(
            ranks=sorted({f.rank for f in chosen if f.rank is not None}),
            pods=[f.pod for f in chosen],
            nodes=[f.node for f in chosen],
            exit_code=lead.exit_code if same_code else None,
            meaning=lead.describe() if same_code else "; ".join(f.describe() for f in chosen),
            time=clock(lead.time),
            evidence="pod status" if lead.source != "events" else "events (the pod is gone)",
            detail=detail,
            followers=followers,
        )
    # Only victims: the rank that went first left no failure (frozen, cut off, or its pod is gone).
    t0 = min((f.time for f in incident if f.time), default=None)
    if blamed:
        ranks = sorted(r for r, _ in blamed.most_common() if blamed[r] == max(blamed.values()))
        b = next(b for b in blames if set(b.ranks) & set(ranks))
        return RootCause(
            ranks=ranks,
            pods=[p for r in ranks for p in pods_by_rank.get(r, [])[:1]],
            nodes=[],
            exit_code=None,
            meaning=b.text,
            time=b.at or clock(t0),
            evidence=f"logs of {_rank_list(b.reporter for b in blames)} (FAIL-STOP lines)",
            detail=f"rank {b.reporter}'s log: FAIL-STOP: {b.text}",
            followers=followers,
        )
    failed_ranks = {f.rank for f in incident}
    suspects = [r for r in range(expected) if r not in failed_ranks]
    return RootCause(
        ranks=suspects,
        pods=[p for r in suspects for p in pods_by_rank.get(r, [])[:1]],
        nodes=[],
        exit_code=None,
        meaning="no failure recorded for this rank: every failed rank only reacted (fail-stop); "
        "it hung, was cut off, or its pod is gone (see `kgen logs` for the FAIL-STOP lines)",
        time=clock(t0),
        evidence="pods (the ranks that did not fail)",
        followers=followers,
    )


def _fmt_cause(rc: RootCause) -> str:
    who = _rank_list(rc.ranks)
    where = []
    if rc.pods:
        where.append("pod " + ", ".join(rc.pods))
    nodes = [n for n in rc.nodes if n]
    if nodes:
        where.append("node " + ", ".join(dict.fromkeys(nodes)))
    loc = f" ({'; '.join(where)})" if where else ""
    code = f"exit {rc.exit_code}: " if rc.exit_code is not None and not rc.meaning.startswith("exit") else ""
    together = " together" if len(rc.ranks) > 1 else ""
    seen = f", seen in the {rc.evidence}" if rc.evidence.startswith("logs") else ""
    return f"{who}{loc}{together}: {code}{rc.meaning} at {rc.time}{seen}"


def _owner_kind(pods: Iterable[Mapping]) -> str:
    """The workload kind from the pods' owner references (the workload itself is gone)."""
    for p in pods:
        for ref in _meta(p).get("ownerReferences") or []:
            if ref.get("controller") and ref.get("kind") in ("Job", "StatefulSet"):
                return ref["kind"]
    return "?"


def decide(
    name: str,
    pods: list[Mapping],
    workload: Mapping | None = None,
    events: list[Mapping] | None = None,
    logs: Mapping[str, str] | None = None,
    deleted: list[Mapping] | None = None,
    kind: str | None = None,
) -> Verdict:
    """The verdict of run ``name``. ``logs`` maps pod name -> log text (tails are enough);
    ``deleted`` are pod objects a watch saw deleted (their status is the last the API had)."""
    events = list(events or [])
    logs = dict(logs or {})
    deleted = list(deleted or [])
    kind = kind or (workload or {}).get("kind") or _owner_kind(pods)
    expected = expected_ranks(workload, pods)
    all_pods = list(pods) + deleted
    current, counts = current_pods(pods)

    # rows: the newest pod of every rank, generation = how many pods that rank has had
    uid = _meta(workload or {}).get("uid")
    gone = gone_pods(name, list(pods), deleted, events, uid) if kind == "Job" else []
    gone_count = Counter(f.rank for f in gone if f.rank is not None)
    deleted_count = Counter(pod_rank(p) for p in deleted)
    rows = [pod_row(current[r], counts[r] + gone_count.get(r, 0) + deleted_count.get(r, 0)) for r in sorted(current)]
    # a rank without a pod still gets its row: its pod was deleted (the Job's events name it) or never made
    have = set(current)
    last_gone: dict[int, Mapping] = {}
    for p in sorted(deleted, key=_creation):
        last_gone[pod_rank(p)] = p  # type: ignore[index]
    for r in range(expected):
        if r in have:
            continue
        if r in last_gone:
            row = pod_row(last_gone[r], gone_count.get(r, 0) + deleted_count.get(r, 0))
            row.state = "Deleted"
        else:
            g = [f for f in gone if f.rank == r]
            row = Row(r, g[-1].pod if g else "-", "", "Deleted" if g else "NoPod", False, 0, None, "", len(g))
            row.meaning = "pod gone (deleted; its status and log with it)" if g else "no pod (yet)"
        rows.append(row)
    rows.sort(key=lambda row: -1 if row.rank is None else row.rank)

    # failures, incidents, root cause
    failures: list[Failure] = []
    for p in pods:
        failures.extend(pod_failures(p))
    for p in deleted:
        failures.extend(pod_failures(p, "deleted pod (watch)") or [])
    failures.extend(gone)
    wl_status = _status(workload or {})
    failure_target = condition(workload or {}, "FailureTarget") or condition(workload or {}, "Failed")
    ft_time = parse_time((failure_target or {}).get("lastTransitionTime"))
    for f in failures:
        # SIGTERM (or a deletion) after the Job controller decided to fail the Job: its doing, not a cause
        # (same second counts for SIGTERM/deletions; a crash in the same second may be the trigger itself)
        if f.disruption or f.role == "victim" or not (ft_time and f.time):
            continue
        if (f.role == "stopped" and f.time >= ft_time) or (f.role == "cause" and f.time > ft_time):
            f.role = "consequence"
            f.meaning += " (after the Job controller started failing the Job)"
    pods_by_rank: dict[int, list[str]] = {}
    for p in sorted(all_pods, key=_creation):
        prank = pod_rank(p)
        if prank is not None:
            pods_by_rank.setdefault(prank, []).append(_meta(p).get("name", "?"))
    for f in gone:
        if f.rank is not None:
            pods_by_rank.setdefault(f.rank, []).insert(0, f.pod)
    incidents = _incidents(failures)
    causes = [_root_cause(inc, logs, expected, pods_by_rank) for inc in incidents]
    incident_lines = [
        f"{i + 1}. {_fmt_cause(rc)}" + (f"; {rc.followers}" if rc.followers else "") for i, rc in enumerate(causes)
    ]

    # re-formations: Job = extra pods per completion index (deleted ones included); StatefulSet = restarts
    if kind == "StatefulSet":
        reformations = max((r.restarts for r in rows), default=0)
    else:
        per_rank = Counter(pod_rank(p) for p in all_pods if pod_rank(p) is not None)
        for f in gone:
            if f.rank is not None:
                per_rank[f.rank] += 1
        reformations = max(per_rank.values(), default=1) - 1
    # in place (survivors stay and re-form): only the logs count these
    reformations = max(reformations, log_generation(logs))
    if kind == "JobSet":  # every group restart recreates the child Jobs and bumps status.restarts
        reformations = max(reformations, int(wl_status.get("restarts") or 0))

    v = Verdict(name=name, kind=kind, state="starting", headline="", rows=rows, ranks_expected=expected)
    v.reformations = reformations
    v.incidents = incident_lines
    v.root_cause = causes[0] if causes else None
    v.ranks_up = sum(1 for r in rows if r.state == "Running")

    complete = (
        condition(workload or {}, "Complete")
        or condition(workload or {}, "SuccessCriteriaMet")
        or condition(workload or {}, "Completed")  # JobSet
    )

    failed = condition(workload or {}, "Failed") or failure_target
    reform_text = f"{reformations} re-formation{'s' if reformations != 1 else ''}"
    if failed:
        v.job_reason = failed.get("reason") or ""
        v.job_message = failed.get("message") or ""
    if complete:
        v.state = "succeeded"
        done = wl_status.get("succeeded", 0)
        v.headline = f"Succeeded: {done}/{expected} ranks completed, {reform_text}"
    elif failed:
        v.state = "failed"
        rc = v.root_cause
        if rc:
            v.headline = f"Failed: {_fmt_cause(rc)}" + (f"; {rc.followers}" if rc.followers else "")
        else:
            v.headline = f"Failed: {v.job_reason}: {v.job_message}"
        if not condition(workload or {}, "Failed"):
            v.details.append(
                f"the Job is failing (FailureTarget since {clock(ft_time)}), "
                f"{wl_status.get('terminating', 0)} pod(s) still terminating"
            )
    elif condition(workload or {}, "Suspended"):
        v.state = "pending"
        v.headline = (
            f"Pending: the Job is suspended (spec.suspend), {v.ranks_up}/{expected} ranks up; "
            "a queue such as Kueue starts it when admitted, or `kubectl patch` it"
        )
    else:
        _live_state(v, rows, expected, kind, workload, pods, logs)
    if v.state != "failed" and causes and (v.reformations or v.state == "restarting"):
        label = "restarting after" if v.state == "restarting" else "re-formed after"
        v.details.append(
            f"{label}: {_fmt_cause(causes[-1])}" + (f"; {causes[-1].followers}" if causes[-1].followers else "")
        )
        if len(causes) > 1:
            v.details.append(f"first incident: {_fmt_cause(causes[0])}")
    if v.job_reason:
        msg = f"Job reason: {v.job_reason}" + (f": {v.job_message}" if v.job_message else "")
        named = re.search(r"for pod \S+/(\S+) failed", v.job_message)
        if named and v.root_cause and named.group(1) not in v.root_cause.pods:
            msg += " (this names a rank that reacted, not the root cause)"
        v.details.append(msg)
    if v.root_cause and v.root_cause.detail:
        v.details.append(v.root_cause.detail)
    if v.state == "failed" or (v.state == "succeeded" and incident_lines):
        v.details.append(f"{reform_text}" + (f"; incidents: {len(incident_lines)}" if incident_lines else ""))
    return v


IDLE_AFTER_SUCCESS = "run succeeded; holding idle"  # the entrypoint's line (StatefulSet)


def _live_state(v: Verdict, rows: list[Row], expected: int, kind: str, workload, pods, logs) -> None:
    states = Counter(r.state for r in rows)
    up = states.get("Running", 0)
    missing = max(expected - len(rows), 0)
    unsched = [p for p in pods if _false_condition(p, "PodScheduled") and not (p.get("spec") or {}).get("nodeName")]
    unsched_current = [r for r in rows if r.state == "Unschedulable"]
    image = [r for r in rows if r.state in IMAGE_ERRORS]
    crash = [r for r in rows if r.state == "CrashLoopBackOff"]
    terminal = [r for r in rows if r.state in ("Failed", "Succeeded") and kind == "Job"]
    if unsched_current:
        msgs = Counter((_false_condition(p, "PodScheduled") or {}).get("message", "") for p in unsched)
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
            f"Restarting: {up}/{expected} ranks up; {len(crash)} in CrashLoopBackOff "
            f"({_rank_list(r.rank for r in crash)}); re-formation {v.reformations + 1} pending"
        )
        return
    if up == expected and expected and kind == "StatefulSet" and any(IDLE_AFTER_SUCCESS in t for t in logs.values()):
        # restartPolicy Always: the entrypoint holds the pods idle after success instead of training again
        v.state = "succeeded"
        v.headline = (
            f"Succeeded: node 0's log says the run succeeded; its {expected} pods hold idle "
            f"(restartPolicy Always would train again): `kgen stop {v.name}` removes them"
        )
        return
    if up == expected and expected:
        v.state = "running"
        joined = ""
        if any(f"all {expected} nodes connected" in text for text in logs.values()):
            joined = ", the group formed (node 0's log)"
        v.headline = f"Running: {up}/{expected} ranks up{joined}" + (
            f"; generation {v.reformations + 1} after {v.reformations} re-formation"
            + ("s" if v.reformations != 1 else "")
            if v.reformations
            else ""
        )
        return
    failed_rows = [r for r in rows if r.state in ("Failed", "Terminating", "Deleted") and r.exit_code != 0]
    done = [r for r in rows if r.state == "Succeeded"]
    if failed_rows and up:
        v.state = "degraded"
        first = v.root_cause
        why = f": {_fmt_cause(first)}" if first else ""
        v.headline = f"Degraded: {up}/{expected} ranks up, {len(failed_rows)} failed or stopping{why}"
        return
    if terminal and not up and failed_rows:
        v.state = "restarting"
        v.headline = (
            f"Re-forming: 0/{expected} ranks up; the ranks ended and the Job controller has not replaced them "
            "yet (its pod failure back-off: no event explains the wait) or is failing the Job"
        )
        return
    if done and up + len(done) == expected:
        v.state = "running"
        v.headline = f"Completing: {len(done)}/{expected} ranks done, {up} still running"
        return
    if done and len(done) == expected:
        v.state = "running"
        v.headline = f"Completing: {expected}/{expected} ranks done, waiting for the Job's Complete condition"
        return
    v.state = "starting"
    pending = states.get("Pending", 0) + states.get("ContainerCreating", 0) + states.get("NoPod", 0) + missing
    v.headline = f"Starting: {up}/{expected} ranks up" + (f", {pending} not started yet" if pending else "")
    if states.get("Pending") and all(r.node for r in rows if r.state == "Pending"):
        v.details.append(f"{states['Pending']} pod(s) bound to a node but no container started yet")


def now_utc() -> datetime:
    return datetime.now(timezone.utc)
