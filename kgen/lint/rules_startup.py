"""How the pods of a training StatefulSet start: OrderedReady (the default) creates pod N+1 only once pod N is
Ready, a delay that grows with the pods (KG213, info) and a deadlock when readiness waits for the training
(KG113, where a probe or readiness gate holds the pods back). What holds readiness back is the workload
model's ``readiness_held``, which KG102 reads too.
"""

from __future__ import annotations

from collections.abc import Iterator

from kgen import k8s
from kgen.findings import Severity
from kgen.lint.model import Workload, readiness_held, workloads
from kgen.lint.registry import Context, rule
from kgen.lint.rules_training import _multi

W, INFO = Severity.WARNING, Severity.INFO


def _ordered(docs: list) -> Iterator[tuple[Workload, str | None]]:
    """Multi-pod training StatefulSets that start their pods in order (OrderedReady, the default), with what
    holds a pod back from Ready after its containers start (None: nothing)."""
    for w in workloads(docs):
        if (
            w.doc.kind == "StatefulSet"
            and _multi(w)
            and k8s.get(w.doc.data, "spec", "podManagementPolicy") != "Parallel"
        ):
            yield w, readiness_held(w)


@rule(
    "KG113",
    W,
    "A training StatefulSet whose pods are held back from Ready (a readiness or startup probe, a readiness "
    "gate) should use podManagementPolicy: Parallel; OrderedReady starts pod N+1 only when pod N is Ready, "
    "which delays the rendezvous, or deadlocks it when readiness waits for the training (KG213 without such "
    "a hold).",
    "Set podManagementPolicy: Parallel.",
    kinds=["StatefulSet"],
    scope="stream",
)
def statefulset_parallel(docs: list, ctx: Context) -> Iterator:
    for w, held in _ordered(docs):
        if held is not None:
            yield (
                w.doc,
                ("spec",),
                f"podManagementPolicy is OrderedReady (default) and {held}: pod N+1 starts only then; "
                "set podManagementPolicy: Parallel",
            )


@rule(
    "KG213",
    INFO,
    "A training StatefulSet with podManagementPolicy OrderedReady (the default) and nothing holding its pods "
    "back from Ready: the pods start one after another, each once the one before is scheduled, has pulled "
    "its image and started, so the rendezvous forms later the more pods there are.",
    "Set podManagementPolicy: Parallel.",
    kinds=["StatefulSet"],
    scope="stream",
)
def statefulset_ordered_start(docs: list, ctx: Context) -> Iterator:
    for w, held in _ordered(docs):
        if held is None:
            yield (
                w.doc,
                ("spec",),
                f"podManagementPolicy is OrderedReady (default): the {w.nodes or 'several'} pods start one after "
                "another; set podManagementPolicy: Parallel",
            )
