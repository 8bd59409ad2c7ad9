"""A suspended run's reason from Kueue: the newest `Pending` event of the run's own Workload (events as the real
Kueue v0.17 wrote them in tests/k8s/test_k8s_kinds.py)."""

from __future__ import annotations

from kgen.cluster.kube_records import queue_pending

QUOTA = (
    "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor default, "
    "8 more needed"
)


def ev(kind: str, name: str, reason: str, message: str, t: str = "2026-11-29T01:36:12Z") -> dict:
    return {"involvedObject": {"kind": kind, "name": name}, "reason": reason, "message": message, "lastTimestamp": t}


def test_the_newest_pending_event_of_the_runs_workload_is_the_reason():
    events = [
        ev("Job", "qb", "CreatedWorkload", "Created Workload: team-a/job-qb-59987"),
        ev("Workload", "job-qb-59987", "Pending", "LocalQueue lq is inactive", "2026-11-29T01:36:10Z"),
        ev("Workload", "job-qb-59987", "Pending", QUOTA),
        ev("Workload", "job-qa-f57e2", "Pending", "another run's reason", "2026-11-29T01:39:00Z"),
    ]
    assert queue_pending("qb", events) == QUOTA


def test_a_workload_is_known_by_kueues_name_without_the_jobs_event_and_nothing_is_said_without_one():
    assert queue_pending("qb", [ev("Workload", "jobset-qb-0a1b2", "Pending", "waiting")]) == "waiting"
    assert queue_pending("qb", [ev("Workload", "job-qbx-0a1b2", "Pending", "not ours")]) == ""
    assert queue_pending("qb", [ev("Job", "qb", "Suspended", "Job suspended")]) == ""
