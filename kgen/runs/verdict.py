"""A run's verdict: a pure function of per-rank records (kgen.runs.records).

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
from dataclasses import asdict, dataclass, field, fields, is_dataclass, replace
from datetime import datetime, timezone

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
from kgen.runs.rootcause import INCIDENT_WINDOW_S, RootCause, fmt_cause, rank_list, root_cause, split_incidents
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


def status_exit(state: str, state_codes: bool = False) -> int:
    """The exit code of `kgen status` for a run in ``state``: STATE_EXIT with --exit-code, else 0 or 1."""
    if state_codes:
        return STATE_EXIT[state]
    return EXIT_FAILED if state in ("failed", "stopped") else 0


# ------------------------------------------------------------------------------------ the verdict
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


def _reform_text(kind: str, n: int) -> str:
    """A JobSet never re-forms in place (KGEN_MAX_REFORMATIONS 0): each new generation is a group restart by
    the JobSet controller (status.restarts), every node's pod recreated."""
    what = "group restart" if kind == "JobSet" else "re-formation"
    return f"{n} {what}{'s' if n != 1 else ''}"


def judge(rec: RunRecords) -> Verdict:
    """The verdict of a run from its per-rank records, whichever adapter made them."""
    by_host = any(r.host for r in rec.rows)
    incidents = split_incidents(rec.failures)
    causes = [root_cause(inc, rec.logs, rec.expected, rec.where_by_rank, by_host, rec.nproc) for inc in incidents]
    unit = "node" if rec.nproc > 1 else "rank"  # a row is a node: with one process per node, that rank
    incident_lines = [
        f"{i + 1}. {fmt_cause(rc, unit)}" + (f"; {rc.followers}" if rc.followers else "") for i, rc in enumerate(causes)
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
            v.headline = f"Failed: {fmt_cause(rc, unit)}" + (f"; {rc.followers}" if rc.followers else "")
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
    repeated = by_host and v.state == "degraded" and len(causes) == 1 and fmt_cause(causes[0], unit) in v.headline
    if v.state != "failed" and causes and (v.reformations or v.state == "restarting") and not repeated:
        label = "restarting after" if v.state == "restarting" else "re-formed after"
        v.details.append(
            f"{label}: {fmt_cause(causes[-1], unit)}" + (f"; {causes[-1].followers}" if causes[-1].followers else "")
        )
        if len(causes) > 1:
            v.details.append(f"first incident: {fmt_cause(causes[0], unit)}")
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
            f"({rank_list((r.rank for r in crash), unit)}); re-formation {v.reformations + 1} pending"
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
            v.headline = f"Degraded: {up}/{expected} {unit}s up; " + (fmt_cause(first, unit) if first else which)
        return
    if failed_rows and up:
        v.state = "degraded"
        first = v.root_cause
        why = f": {fmt_cause(first, unit)}" if first else ""
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
