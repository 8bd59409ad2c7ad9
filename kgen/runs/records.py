"""Per-rank records: what the verdict (kgen.runs.verdict) decides from, whatever the run runs on.

Two adapters fill them: ``kgen.cluster.kube_records`` (pods, the Job/StatefulSet/JobSet, events and log
tails from the API server) and ``kgen.baremetal.adapter`` (each ssh host's run state and log tail).
The verdict never sees a pod or a host, only these records, so the states, the headline, the root
cause's wording and the ``-o json`` shape are the same for both. Pure: no I/O here.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kgen.runs.errors import ProcessError


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


# --------------------------------------------------------------------------------------- the rows
@dataclass
class Row:
    """One line of `kgen status`: the current process of one node rank (a pod, or a node on an ssh host)."""

    rank: int | None
    pod: str  # the pod ("" on bare metal)
    node: str  # the Kubernetes node, or the host's own name (bare metal)
    state: str  # Running, Pending, Unschedulable, CrashLoopBackOff, Succeeded, Failed, Terminating, Unreachable ...
    ready: bool
    restarts: int
    exit_code: int | None
    meaning: str
    generation: int  # Kubernetes: pods this rank has had (1 = the first); bare metal: the group generation
    host: str = ""  # the ssh destination (bare metal)
    last_line: str = ""  # the last line of this rank's log, when it was read
    ip: str = ""  # the pod's IP (`kgen status -o wide`)

    @property
    def where(self) -> str:
        return self.pod or self.host


# ------------------------------------------------------------------------------------ failures
@dataclass
class Failure:
    """One node process (container, pod, or a node's entrypoint on a host) that ended other than with success."""

    rank: int | None
    pod: str
    node: str
    exit_code: int | None
    reason: str  # container reason (Error, OOMKilled) or an explanation
    meaning: str
    role: str  # cause | victim | stopped | consequence | reaction (see kgen.runs.exitcodes)
    time: datetime | None
    source: str  # "pod", "previous container", "deleted pod (watch)", "events", "exit file", ...
    disruption: str = ""  # the DisruptionTarget condition: evicted, preempted, ...
    host: str = ""  # the ssh destination (bare metal)
    key: str = ""  # the key of this rank's log in ``RunRecords.logs`` when not the pod (bare metal: node R@host)
    error: ProcessError | None = None  # what its first failed training process said (kgen.runs.errors)

    @property
    def when(self) -> datetime | None:
        """When it went wrong: the error's own time (sub-second) when known, else the exit's."""
        return self.error.time if self.error is not None and self.error.time else self.time

    @property
    def where(self) -> str:
        return self.key or self.pod or self.host

    def describe(self) -> str:
        what = self.meaning if self.exit_code is None else f"exit {self.exit_code}: {self.meaning}"
        if self.disruption:
            what = f"{what}; {self.disruption}"
        return what


# ------------------------------------------------------------------------------------ FAIL-STOP
# The entrypoint's own lines are read only where they begin (after a log timestamp, if any): words a peer or
# a script put inside a line cannot pass for them.
KGEN_LINE = r"^(?:\S+Z )?\[kgen node \d+ [^\]]*\] "
FAIL_STOP = re.compile(KGEN_LINE + r"FAIL-STOP: (.*)")
ENTRYPOINT_LAST_WORD = re.compile(r"^(?:\S+Z )?kgen-entrypoint: (?:error|stopped): ")
RELAYED = re.compile(r"^node \d+ (?:stopped the job|ended the run): ")
GENERATION = re.compile(KGEN_LINE + r".*?\bgeneration (\d+)\b", re.M)
LOG_PREFIX = re.compile(r"\[kgen node (\d+) (\d\d:\d\d:\d\d)")
IDLE_AFTER_SUCCESS = "run succeeded; holding idle"  # the entrypoint's line (StatefulSet)


@dataclass
class Blame:
    ranks: list[int]
    text: str  # the entrypoint's reason, e.g. "node 1 silent for 5.0s (...): frozen or cut off"
    reporter: int | None  # the rank whose log said it
    at: str  # HH:MM:SS from the log line


def blamed_ranks(text: str) -> list[int]:
    """The node ranks an entrypoint's reason names: ``node rank(s) [1, 2] ...``, else ``node 1 ...``."""
    listed = re.search(r"node rank\(s\) \[([\d, ]+)\]", text)
    if listed:
        return [int(x) for x in listed.group(1).replace(",", " ").split()]
    single = re.search(r"\bnode (\d+)\b", text)
    return [int(single.group(1))] if single else []


def fail_stop_blames(log: str) -> list[Blame]:
    """Every FAIL-STOP line of one log: which ranks it blames and why."""
    out = []
    for line in log.splitlines():
        m = FAIL_STOP.search(line)
        if not m:
            continue
        text = RELAYED.sub("", m.group(1).strip())
        prefix = LOG_PREFIX.search(line)
        out.append(
            Blame(
                ranks=blamed_ranks(text),
                text=text,
                reporter=int(prefix.group(1)) if prefix else None,
                at=prefix.group(2) if prefix else "",
            )
        )
    return out


def error_lines(log: str) -> list[str]:
    """The entrypoint's own last word: ``kgen-entrypoint: error: ...`` or ``kgen-entrypoint: stopped: ...``."""
    return [ln.strip() for ln in log.splitlines() if ENTRYPOINT_LAST_WORD.match(ln)]


def log_generation(logs: Mapping[str, str]) -> int:
    """The highest group generation the logs name (in-place re-formation counts generations from 0)."""
    return max((int(m.group(1)) for text in logs.values() for m in GENERATION.finditer(text)), default=0)


# ------------------------------------------------------------------------------------ a run's records
@dataclass
class RunRecords:
    """Everything the verdict reads about one run: per-rank rows and failures, log tails, and what the
    platform itself says about the run as a whole (a Job's conditions; on bare metal: nothing but the ranks)."""

    name: str
    kind: str  # Job | StatefulSet | JobSet | bare-metal | local | ?
    expected: int  # node ranks the run has
    rows: list[Row]  # one per rank, sorted by rank
    failures: list[Failure]  # every failure seen (with its role already settled by the adapter)
    logs: Mapping[str, str] = field(default_factory=dict)  # where (pod or host) -> log tail
    where_by_rank: Mapping[int, list[str]] = field(default_factory=dict)  # pods (or hosts) each rank has had
    reformations: int = 0
    # the platform's word on the run as a whole
    complete: bool = False  # the run succeeded
    succeeded: int = 0  # ranks that completed (the headline's "N/M ranks completed")
    failed: bool = False  # the run failed (Kubernetes: Failed or FailureTarget; bare metal: every rank ended)
    failed_final: bool = True  # False: Kubernetes' FailureTarget without Failed yet (pods still terminating)
    failing_since: datetime | None = None  # when the FailureTarget was set
    terminating: int = 0
    suspended: bool = False
    admission: str = ""  # a suspended run: why its queue (Kueue) has not admitted it yet
    job_reason: str = ""
    job_message: str = ""
    scheduler_messages: Counter = field(default_factory=Counter)  # unschedulable pods' PodScheduled messages
    idle_after_success: bool = False  # StatefulSet: node 0's log says the run succeeded and the pods idle
    notes: list[str] = field(default_factory=list)  # extra detail lines from the adapter (bare metal: ssh errors)
    restarting: str = ""  # JobSet: its controller is restarting the whole group now (the condition's reason)
    # bare metal only
    stopped: str = ""  # the run was stopped on purpose: by whom and how (the headline's words)
    group_intact: bool = False  # node 0's log: every node in the current generation, none lost since
    nproc: int = 1  # training processes per node (global rank = node rank x nproc + local rank)
