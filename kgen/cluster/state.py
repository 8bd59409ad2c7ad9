"""What `kgen status --watch` knows about a run while it follows the pod and workload watches (pure).

Watch events are applied in the order they arrive; a pod's DELETED event keeps its last object, so
the verdict can still name a rank whose pod the Job controller deleted (its status and log are gone
from the API afterwards).
"""

from __future__ import annotations

from collections.abc import Mapping

from kgen.cluster.verdict import decide
from kgen.runs.verdict import Verdict


class RunState:
    def __init__(self, name: str, pods=(), workload: Mapping | None = None, events=(), logs=None):
        self.name = name
        self.pods: dict[str, Mapping] = {p["metadata"]["name"]: p for p in pods}
        self.deleted: dict[str, Mapping] = {}
        self.workload = workload
        self.events = list(events)
        self.logs: dict[str, str] = dict(logs or {})

    def apply(self, event: Mapping) -> None:
        """One watch event (``{"type": ..., "object": ...}``) of the run's pods or its workload."""
        obj = event.get("object") or {}
        kind = obj.get("kind")
        etype = event.get("type")
        if etype in ("BOOKMARK", "ERROR") or not obj.get("metadata"):
            return
        name = obj["metadata"]["name"]
        if kind in ("Job", "StatefulSet"):
            self.workload = None if etype == "DELETED" else obj
            return
        if etype == "DELETED":
            self.pods.pop(name, None)
            self.deleted[name] = obj
        else:
            self.pods[name] = obj
            self.deleted.pop(name, None)

    def verdict(self) -> Verdict:
        return decide(
            self.name,
            list(self.pods.values()),
            self.workload,
            self.events,
            self.logs,
            deleted=list(self.deleted.values()),
            kind=(self.workload or {}).get("kind"),
        )


def terminal(v: Verdict, workload: Mapping | None) -> bool:
    """The run is over: succeeded, or failed with the Job's ``Failed`` condition (not just FailureTarget)."""
    if v.state == "succeeded":
        return True
    if v.state != "failed":
        return False
    conds = ((workload or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Failed" and c.get("status") == "True" for c in conds) or workload is None
