"""The verdict of a run on a cluster: API objects -> per-rank records (kgen.cluster.kube_records) ->
the one verdict of every run (kgen.runs.verdict.judge)."""

from __future__ import annotations

from collections.abc import Mapping

from kgen.cluster.kube_records import records
from kgen.runs.verdict import Verdict, judge


def decide(
    name: str,
    pods: list[Mapping],
    workload: Mapping | None = None,
    events: list[Mapping] | None = None,
    logs: Mapping[str, str] | None = None,
    deleted: list[Mapping] | None = None,
    kind: str | None = None,
) -> Verdict:
    """The verdict of cluster run ``name`` from API objects (the Kubernetes adapter, then ``judge``).
    ``logs`` maps pod name -> log text (tails are enough); ``deleted`` are pod objects a watch saw deleted."""
    return judge(records(name, pods, workload, events, logs, deleted, kind))
