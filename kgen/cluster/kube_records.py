"""The Kubernetes adapter of the verdict: API objects (dicts as the API server sends them) -> per-rank records.

Inputs: the run's pods (one list call), its Job or StatefulSet (or JobSet), the namespace's Events,
optionally the tails of some pods' logs (for the entrypoint's ``FAIL-STOP:`` lines) and pods a watch saw
deleted. Output: ``kgen.runs.records.RunRecords``, which ``kgen.runs.verdict.judge`` decides on.
Pure: ``kgen.cluster.client`` fetches.

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
from datetime import datetime

from kgen.runs import exitcodes
from kgen.runs.errors import node_error
from kgen.runs.errors import records as failure_records
from kgen.runs.records import IDLE_AFTER_SUCCESS, Failure, Row, RunRecords, log_generation, parse_time

CONTAINER = "trainer"
INSTANCE_LABEL = "app.kubernetes.io/instance"
MANAGED_BY = "app.kubernetes.io/managed-by"


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


def pod_nproc(pods: Iterable[Mapping]) -> int:
    """Training processes per pod: the trainer's NPROC_PER_NODE (kgen render sets it), else 1."""
    for pod in pods:
        for c in (pod.get("spec") or {}).get("containers") or []:
            if c.get("name") != CONTAINER:
                continue
            for e in c.get("env") or []:
                if e.get("name") == "NPROC_PER_NODE" and str(e.get("value") or "").isdigit():
                    return max(int(e["value"]), 1)
    return 1


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


def _failure_from_term(pod: Mapping, term: Mapping, source: str) -> Failure | None:
    code = term.get("exitCode")
    if code == 0:
        return None
    m = exitcodes.meaning(code, term.get("reason") or "")
    rank = pod_rank(pod)
    # the termination message: with FallbackToLogsOnError (kgen render) the end of the log, which holds the
    # entrypoint's failure record when a training process failed
    said = failure_records(str(term.get("message") or ""), rank)
    return Failure(
        rank=rank,
        pod=_meta(pod).get("name", "?"),
        node=(pod.get("spec") or {}).get("nodeName") or "",
        exit_code=code,
        reason=term.get("reason") or "",
        meaning=m.meaning,
        role=m.role,
        time=parse_time(term.get("finishedAt")),
        source=source,
        error=said[-1] if said else None,
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


# The JobSet controller's events on a group restart (one per restart; the reason says whether it counts
# against failurePolicy.maxRestarts) and the child Job's failure reasons its failure policy rules match.
JOBSET_RESTART_EVENTS = {
    "RestartJobSetFailurePolicyAction": "counted against maxRestarts",
    "RestartJobSetAndIgnoreMaxRestartsFailurePolicyAction": "not counted (a disruption)",
}
JOB_FAILURE_REASONS = ("BackoffLimitExceeded", "PodFailurePolicy", "DeadlineExceeded")


def jobset_restarts(name: str, workload: Mapping, events: Iterable[Mapping]) -> list[str]:
    """What `kgen status` says about a JobSet's group restarts: how many (``status.restarts``), how many of
    them count against ``failurePolicy.maxRestarts``, and, from the Events (they outlive the deleted child Jobs
    and pods of earlier attempts), why each child Job failed and which action the JobSet took."""
    st = _status(workload)
    restarts = int(st.get("restarts") or 0)
    restarting = condition(workload, "RestartingJobSet")  # False again (JobsReady, ...) once the group is back
    if not restarts and not restarting:
        return []
    counted = int(st.get("restartsCountTowardsMax") or 0)
    limit = ((workload.get("spec") or {}).get("failurePolicy") or {}).get("maxRestarts") or 0
    plural = "s" if restarts != 1 else ""
    out = [
        f"JobSet: {restarts} group restart{plural} (every node's pod recreated), "
        f"{counted} counted against failurePolicy.maxRestarts {limit}"
    ]
    if restarting:
        out.append(f"JobSet restarting now: {restarting.get('reason', '')}: {restarting.get('message', '')}")
    uid = _meta(workload).get("uid")
    lines: list[tuple[str, int, str]] = []  # by time, a child Job's failure before the action it caused
    child = re.compile(re.escape(name) + r"-[a-z0-9-]+")
    for ev in events:
        obj = ev.get("involvedObject") or {}
        reason, msg = ev.get("reason") or "", ev.get("message") or ""
        count = int(ev.get("count") or 1)
        times = f" (x{count})" if count > 1 else ""
        when = _event_time(ev)
        stamp = when.strftime("%H:%M:%S") if when else "?"
        if obj.get("kind") == "JobSet" and obj.get("name") == name and obj.get("uid") in (None, uid):
            if reason in JOBSET_RESTART_EVENTS:
                lines.append((stamp, 1, f"{stamp} JobSet {reason}{times}, {JOBSET_RESTART_EVENTS[reason]}: {msg}"))
        elif obj.get("kind") == "Job" and child.fullmatch(obj.get("name") or "") and reason in JOB_FAILURE_REASONS:
            lines.append((stamp, 0, f"{stamp} child Job {obj.get('name')} failed{times}: {reason}: {msg}"))
    out.extend(line for *_, line in sorted(lines))
    return out


def queue_pending(name: str, events: Iterable[Mapping]) -> str:
    """Why Kueue has not admitted run ``name`` yet: the newest `Pending` event of the run's Workload (the Job's or
    JobSet's `CreatedWorkload` event names it; Kueue names it job-NAME-xxxxx or jobset-NAME-xxxxx), e.g.
    "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor default, 8
    more needed"; "" when there is none (no Kueue, or it has not looked yet)."""
    events = list(events)
    names = set()
    for ev in events:
        obj = ev.get("involvedObject") or {}
        if obj.get("kind") in ("Job", "JobSet") and obj.get("name") == name and ev.get("reason") == "CreatedWorkload":
            names.add(str(ev.get("message") or "").rsplit("/", 1)[-1].strip())
    own = re.compile(rf"(?:job|jobset)-{re.escape(name)}-[0-9a-f]{{5}}")
    newest: tuple[datetime | None, str] | None = None
    for ev in events:
        obj = ev.get("involvedObject") or {}
        wl = str(obj.get("name") or "")
        if obj.get("kind") != "Workload" or ev.get("reason") != "Pending" or not (wl in names or own.fullmatch(wl)):
            continue
        t = _event_time(ev)
        if newest is None or (t is not None and (newest[0] is None or t >= newest[0])):
            newest = (t, " ".join(str(ev.get("message") or "").split()))
    return newest[1] if newest else ""


def _owner_kind(pods: Iterable[Mapping]) -> str:
    """The workload kind from the pods' owner references (the workload itself is gone)."""
    for p in pods:
        for ref in _meta(p).get("ownerReferences") or []:
            if ref.get("controller") and ref.get("kind") in ("Job", "StatefulSet"):
                return ref["kind"]
    return "?"


def records(
    name: str,
    pods: list[Mapping],
    workload: Mapping | None = None,
    events: list[Mapping] | None = None,
    logs: Mapping[str, str] | None = None,
    deleted: list[Mapping] | None = None,
    kind: str | None = None,
) -> RunRecords:
    """The per-rank records of run ``name``. ``logs`` maps pod name -> log text (tails are enough);
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
    if kind == "StatefulSet":  # a rank's generations are its container's restarts in place (one pod)
        for row in rows:
            row.generation = row.restarts + 1

    # failures, with their roles settled against the Job controller's own decision
    failures: list[Failure] = []
    for p in pods:
        failures.extend(pod_failures(p))
    for p in deleted:
        failures.extend(pod_failures(p, "deleted pod (watch)") or [])
    failures.extend(gone)
    for f in failures:  # no termination message: the failure record, or a traceback, in the log tail
        if f.error is None and f.exit_code not in (None, 0) and logs.get(f.pod):
            f.error = node_error(logs[f.pod], f.rank)
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

    rec = RunRecords(
        name=name,
        kind=kind,
        expected=expected,
        rows=rows,
        failures=failures,
        logs=logs,
        where_by_rank=pods_by_rank,
        reformations=reformations,
        nproc=pod_nproc(all_pods),
    )
    rec.complete = bool(
        condition(workload or {}, "Complete")
        or condition(workload or {}, "SuccessCriteriaMet")
        or condition(workload or {}, "Completed")  # JobSet
    )
    rec.succeeded = wl_status.get("succeeded", 0)
    failed = condition(workload or {}, "Failed") or failure_target
    if failed:
        rec.failed = True
        rec.job_reason = failed.get("reason") or ""
        rec.job_message = failed.get("message") or ""
        if not condition(workload or {}, "Failed"):
            rec.failed_final = False
            rec.failing_since = ft_time
            rec.terminating = wl_status.get("terminating", 0)
    rec.suspended = bool(condition(workload or {}, "Suspended"))
    if rec.suspended:
        rec.admission = queue_pending(name, events)
    rec.scheduler_messages = Counter(
        (_false_condition(p, "PodScheduled") or {}).get("message", "")
        for p in pods
        if _false_condition(p, "PodScheduled") and not (p.get("spec") or {}).get("nodeName")
    )
    rec.idle_after_success = kind == "StatefulSet" and any(IDLE_AFTER_SUCCESS in t for t in logs.values())
    if kind == "JobSet" and workload:
        rec.notes.extend(jobset_restarts(name, workload, events))
        restarting = condition(workload, "RestartingJobSet")
        rec.restarting = (restarting or {}).get("reason") or ("restarting" if restarting else "")
    return rec
