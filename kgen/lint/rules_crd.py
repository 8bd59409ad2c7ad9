"""Training CRDs: their structure (written from each API reference, ``kgen.lint.kinds``) and the
mistakes specific to them that break runs: a Volcano Job whose gang is smaller than its world, a
suspended workload whose Kueue queue label sits where Kueue does not read it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kgen import jobset as js
from kgen.findings import Severity
from kgen.lint import kinds
from kgen.lint.kinds import volcano
from kgen.lint.kinds.base import get
from kgen.lint.model import workloads
from kgen.lint.registry import Context, rule
from kgen.lint.rules_training import _multi

E, W = Severity.ERROR, Severity.WARNING
QUEUE_LABEL = js.QUEUE_LABEL


@rule(
    "KG136",
    E,
    "Structure of the training CRDs, written from their API references (field names, types, required fields, "
    "enums): PyTorchJob (kubeflow.org/v1: Master/Worker, one Master, a container named pytorch, elasticPolicy, "
    "nprocPerNode), MPIJob (kubeflow.org/v2beta1 or v1: one Launcher, Workers; older versions are served no "
    "more), TrainJob and (Cluster)TrainingRuntime (trainer.kubeflow.org/v1alpha1), Volcano Job "
    "(batch.volcano.sh/v1alpha1: tasks, policies, plugins), LeaderWorkerSet (leaderworkerset.x-k8s.io/v1) and "
    "AppWrapper (workload.codeflare.dev/v1beta2).",
    "Fix the field named in the message; --schema-location with the CRD's published schema checks the rest.",
    kinds=[
        "PyTorchJob",
        "MPIJob",
        "TrainJob",
        "TrainingRuntime",
        "ClusterTrainingRuntime",
        "Job",
        "LeaderWorkerSet",
        "AppWrapper",
    ],
)
def crd_structure(doc: Any, ctx: Context) -> Iterator:
    adapter = kinds.adapter_for(doc)
    if adapter is None or adapter.kind in ("JobSet",) or kinds.group_of(doc.api_version) in ("batch", "apps", ""):
        return
    yield from adapter.structure(doc, ctx)


@rule(
    "KG132",
    W,
    "A Volcano Job's minAvailable below its training pods gang-schedules only part of the world: on a busy "
    "cluster the started pods wait in the rendezvous for pods that are not scheduled (and hold their GPUs).",
    "Delete minAvailable (Volcano defaults it to every pod) or set it to the sum of the tasks' replicas.",
    kinds=["Job"],
    scope="stream",
)
def volcano_gang(docs: list, ctx: Context) -> Iterator:
    done: set = set()
    for w in workloads(docs):
        if kinds.group_of(w.doc.api_version) != "batch.volcano.sh" or id(w.doc) in done or not _multi(w):
            continue
        done.add(id(w.doc))
        got = volcano.min_available(w.doc)
        if got is not None and w.nodes is not None and got[0] < w.nodes:
            yield (
                w.doc,
                got[1],
                f"minAvailable {got[0]} but the job runs {w.nodes} training pods: Volcano starts {got[0]} of them "
                f"and the rest may never be scheduled; delete minAvailable or set it to {w.nodes}",
            )


@rule(
    "KG133",
    E,
    "A suspended workload (suspend: true) whose Kueue queue-name label is only on a pod template (or a "
    "TrainJob's spec.labels / podTemplateOverrides) is never admitted: Kueue reads the label on the "
    "workload's own metadata, so nothing ever unsuspends it.",
    "Put kueue.x-k8s.io/queue-name on the workload's metadata.labels (Kueue then suspends and admits it).",
    scope="stream",
)
def suspended_without_queue(docs: list, ctx: Context) -> Iterator:
    for doc in docs:
        facts = kinds.facts(doc)
        if facts is None or facts.suspend is not True or not facts.kueue_managed:
            continue
        labels = doc.metadata.get("labels")
        if isinstance(labels, dict) and QUEUE_LABEL in labels:
            continue
        places = list(facts.queue_label_paths)
        for tpl in kinds.templates(doc):
            if tpl.containers is None and QUEUE_LABEL in tpl.labels:
                places.append((tpl.path + ("metadata", "labels", QUEUE_LABEL), "the pod template"))
            if tpl.job_path[-2:] == ("template", "spec"):
                job_labels = get(doc.data, *tpl.job_path[:-1], "metadata", "labels")
                if isinstance(job_labels, dict) and QUEUE_LABEL in job_labels:
                    places.append((tpl.job_path[:-1] + ("metadata", "labels", QUEUE_LABEL), "a child Job template"))
        if places:
            path, where = places[0]
            yield (
                doc,
                path,
                f"suspend: true and the queue-name label only on {where}: Kueue reads it on the {facts.kind}'s own "
                "metadata, so it never admits (unsuspends) this workload; move the label to metadata.labels",
            )
