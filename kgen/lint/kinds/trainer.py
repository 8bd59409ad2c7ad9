"""Kubeflow Trainer v2 (trainer.kubeflow.org/v1alpha1): a TrainJob names a (Cluster)TrainingRuntime
whose ``spec.template`` is a JobSet template; the TrainJob's ``spec.trainer`` (image, command,
args, env, numNodes, resourcesPerNode, numProcPerNode) overrides the runtime's trainer container
(``node``), and the torch plugin injects PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK,
PET_MASTER_ADDR and PET_MASTER_PORT (pkg/apis/trainer/v1alpha1/{trainjob,trainingruntime}_types.go).
The runtime's pod templates get every pod rule; a TrainJob alone gets the launch and count rules
on its trainer (its volumes and the rest of the pod live in the runtime)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kgen import jobset as js
from kgen.lint.kinds.base import JOB_INDEX, RANK_ENV, Adapter, Facts, Template, as_int, get, unknown_fields
from kgen.lint.kinds.jobset import jobset_templates, network_facts

INJECTED = frozenset({"PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT"})
TRAINJOB_KEYS = {
    "runtimeRef",
    "initializer",
    "trainer",
    "labels",
    "annotations",
    "podSpecOverrides",
    "podTemplateOverrides",
    "runtimePatches",
    "suspend",
    "managedBy",
    "activeDeadlineSeconds",
}
TRAINER_KEYS = {"image", "command", "args", "env", "numNodes", "resourcesPerNode", "numProcPerNode"}
RUNTIME_KEYS = {"mlPolicy", "podGroupPolicy", "template"}
RUNTIME_KINDS = ("TrainingRuntime", "ClusterTrainingRuntime")
QUEUE_LABEL = js.QUEUE_LABEL


class TrainJobAdapter(Adapter):
    kind = "TrainJob"
    groups = ("trainer.kubeflow.org",)

    def templates(self, doc: Any) -> list[Template]:
        trainer = get(doc.data, "spec", "trainer")
        if not isinstance(trainer, dict):
            return []
        container: dict = {"name": "node"}
        for key in ("image", "command", "args", "env"):
            if key in trainer:
                container[key] = trainer[key]
        if isinstance(trainer.get("resourcesPerNode"), dict):
            container["resources"] = trainer["resourcesPerNode"]
        nodes = as_int(trainer.get("numNodes"))
        return [
            Template(
                {"spec": {"containers": [container]}},
                ("spec", "trainer"),
                nodes,
                role="node",
                injected_env=INJECTED,
                rank_sources=frozenset({JOB_INDEX, RANK_ENV}),
                trainer_container="node",
                containers=[(container, ("spec", "trainer"))],
                partial=True,
            )
        ]

    def facts(self, doc: Any) -> Facts:
        nodes = as_int(get(doc.data, "spec", "trainer", "numNodes"))
        facts = Facts("TrainJob", nodes, "trainer.numNodes", dns="managed")
        suspend = get(doc.data, "spec", "suspend")
        facts.suspend = suspend if isinstance(suspend, bool) else None
        facts.suspend_path = ("spec", "suspend")
        npn = get(doc.data, "spec", "trainer", "numProcPerNode")
        if isinstance(npn, (int, str)) and not isinstance(npn, bool):
            facts.nproc_stated = (str(npn), ("spec", "trainer", "numProcPerNode"), "trainer.numProcPerNode")
        labels = get(doc.data, "spec", "labels")
        if isinstance(labels, dict) and QUEUE_LABEL in labels:
            facts.queue_label_paths.append((("spec", "labels", QUEUE_LABEL), "spec.labels (the JobSet's)"))
        for base, key in (
            (("spec",), "podTemplateOverrides"),
            (("spec",), "podSpecOverrides"),
            (
                ("spec", "trainer"),
                "podTemplateOverrides",
            ),
        ):
            items = get(doc.data, *base, key)
            for i, item in enumerate(items if isinstance(items, list) else []):
                if isinstance(get(item, "metadata", "labels"), dict) and QUEUE_LABEL in item["metadata"]["labels"]:
                    facts.queue_label_paths.append(
                        (base + (key, i, "metadata", "labels", QUEUE_LABEL), f"{key}[{i}] (the pod template's)")
                    )
        return facts

    def structure(self, doc: Any, ctx: Any) -> Iterator[tuple[tuple, str]]:
        spec = doc.data.get("spec")
        if not isinstance(spec, dict):
            yield ("spec",), "spec must be a mapping with runtimeRef"
            return
        yield from unknown_fields(spec, TRAINJOB_KEYS, ("spec",), "unknown field spec.{key} (TrainJob has {allowed})")
        ref = spec.get("runtimeRef")
        if not isinstance(ref, dict) or not isinstance(ref.get("name"), str) or not ref.get("name"):
            yield ("spec", "runtimeRef") if "runtimeRef" in spec else ("spec",), "runtimeRef.name is required"
        elif ref.get("kind") is not None and ref.get("kind") not in RUNTIME_KINDS:
            yield ("spec", "runtimeRef", "kind"), f"runtimeRef.kind must be one of {', '.join(RUNTIME_KINDS)}"
        trainer = spec.get("trainer")
        if isinstance(trainer, dict):
            yield from unknown_fields(
                trainer, TRAINER_KEYS, ("spec", "trainer"), "unknown field trainer.{key} ({allowed})"
            )
            nn = trainer.get("numNodes")
            if nn is not None and (as_int(nn) is None or nn < 1):
                yield ("spec", "trainer", "numNodes"), f"numNodes must be an integer >= 1, got {nn!r}"
            for key in ("command", "args"):
                value = trainer.get(key)
                if value is not None and (not isinstance(value, list) or not all(isinstance(x, str) for x in value)):
                    yield ("spec", "trainer", key), f"trainer.{key} must be a list of strings"
        for key in ("podTemplateOverrides", "podSpecOverrides"):
            items = spec.get(key)
            for i, item in enumerate(items if isinstance(items, list) else []):
                targets = item.get("targetJobs") if isinstance(item, dict) else None
                for j, target in enumerate(targets if isinstance(targets, list) else []):
                    if not isinstance(target, dict) or not isinstance(target.get("name"), str):
                        yield (
                            ("spec", key, i, "targetJobs", j),
                            f"targetJobs items are objects {{name: <replicatedJob>}}, got {target!r}: the API server "
                            f"rejects the TrainJob; write - name: {target if isinstance(target, str) else 'node'}",
                        )


class RuntimeAdapter(Adapter):
    groups = ("trainer.kubeflow.org",)

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def templates(self, doc: Any) -> list[Template]:
        out = jobset_templates(doc.data, ("spec", "template", "spec"))
        nodes = as_int(get(doc.data, "spec", "mlPolicy", "numNodes"))
        for t in out:
            t.operator_step = not _initializer(doc, t)
            if _step(doc, t) == "trainer":  # the torch plugin wires only the step labelled trainer
                t.injected_env = INJECTED
                t.rank_sources = t.rank_sources | {RANK_ENV}
                if nodes is not None:
                    t.pods = nodes
        return out

    def facts(self, doc: Any) -> Facts:
        nodes = as_int(get(doc.data, "spec", "mlPolicy", "numNodes"))
        tpls = jobset_templates(doc.data, ("spec", "template", "spec"))
        if tpls and not any(_step(doc, t) == "trainer" for t in tpls):
            nodes = sum(t.pods or 0 for t in tpls if not _initializer(doc, t))  # numNodes applies to no step
        facts = Facts(self.kind, nodes, "mlPolicy.numNodes")
        spec = get(doc.data, "spec", "template", "spec")
        network_facts("<trainjob>", spec if isinstance(spec, dict) else {}, ("spec", "template", "spec"), facts)
        facts.master_hosts = ()  # the JobSet takes the TrainJob's name: PET_MASTER_ADDR is set for it
        facts.service_like = None
        facts.kueue_managed = False
        facts.resources_elsewhere = True  # TrainJobs set resourcesPerNode
        npn = get(doc.data, "spec", "mlPolicy", "torch", "numProcPerNode")
        if isinstance(npn, (int, str)) and not isinstance(npn, bool):
            facts.nproc_stated = (
                str(npn),
                ("spec", "mlPolicy", "torch", "numProcPerNode"),
                "mlPolicy.torch.numProcPerNode",
            )
        return facts

    def structure(self, doc: Any, ctx: Any) -> Iterator[tuple[tuple, str]]:
        spec = doc.data.get("spec")
        if not isinstance(spec, dict):
            yield ("spec",), "spec must be a mapping with template"
            return
        yield from unknown_fields(
            spec, RUNTIME_KEYS, ("spec",), "unknown field spec.{key} (" + self.kind + " has {allowed})"
        )
        if not isinstance(get(spec, "template", "spec", "replicatedJobs"), list):
            yield (
                ("spec", "template") if "template" in spec else ("spec",),
                "template.spec.replicatedJobs is required (a JobSet template)",
            )
        nn = get(spec, "mlPolicy", "numNodes")
        if nn is not None and (as_int(nn) is None or nn < 1):
            yield ("spec", "mlPolicy", "numNodes"), f"numNodes must be an integer >= 1, got {nn!r}"
        yield from _trainer_step_label(doc)


def _trainer_step_label(doc: Any) -> Iterator[tuple[tuple, str]]:
    """A runtime's trainer step is the replicatedJob labelled trainjob-ancestor-step: trainer (the Trainer's
    torch plugin and resourcesPerNode/numNodes look it up by that label): without it the TrainJob's trainer
    settings and PET_* environment are never applied."""
    tpls = jobset_templates(doc.data, ("spec", "template", "spec"))
    if not tpls or any(_step(doc, t) == "trainer" for t in tpls):
        return
    node = next((t for t in tpls if t.role == "node"), None) or next(
        (
            t
            for t in tpls
            if any(isinstance(c, dict) and c.get("name") == "node" for c in t.spec.get("containers") or [])
        ),
        None,
    )
    if node is not None and not _initializer(doc, node):
        yield (
            node.job_path[:-1],
            f"replicatedJob {node.role!r} has no label {ANCESTOR_STEP}: trainer on its Job template, so the "
            "Trainer applies no TrainJob trainer settings (image, command, numNodes, resourcesPerNode) and no "
            f"PET_* environment to it; add metadata.labels {{{ANCESTOR_STEP}: trainer}}",
        )


def _step(doc: Any, t: Template) -> str | None:
    labels = get(doc.data, *t.job_path[:-1], "metadata", "labels")
    step = labels.get(ANCESTOR_STEP) if isinstance(labels, dict) else None
    return step if isinstance(step, str) else None


ANCESTOR_STEP = "trainer.kubeflow.org/trainjob-ancestor-step"
INITIALIZER_STEPS = ("dataset-initializer", "model-initializer")


def _initializer(doc: Any, t: Template) -> bool:
    """A runtime's dataset/model initializer step (its Job or pod template labelled with that
    trainjob-ancestor-step, or a replicatedJob named ``*-initializer`` without the label): it
    downloads once, it does not train (manifests/base/runtimes/torchtune, data-cache)."""
    for labels in (get(doc.data, *t.job_path[:-1], "metadata", "labels"), t.labels):
        step = labels.get(ANCESTOR_STEP) if isinstance(labels, dict) else None
        if isinstance(step, str):
            return step in INITIALIZER_STEPS
    return t.role.endswith("initializer")


class RetiredAdapter(Adapter):
    """Trainer v2's pre-release API group (kubeflow.org/v2alpha1 TrainJob and runtimes): no release serves
    it; the API server rejects it (no such resource) once Kubeflow Trainer is installed."""

    groups = ("kubeflow.org",)

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def structure(self, doc: Any, ctx: Any) -> Iterator[tuple[tuple, str]]:
        yield (
            ("apiVersion",),
            f"{doc.api_version} {self.kind} is Kubeflow Trainer's retired pre-release API (no release serves it); "
            "use apiVersion trainer.kubeflow.org/v1alpha1",
        )


ADAPTERS = [
    TrainJobAdapter(),
    RuntimeAdapter("TrainingRuntime"),
    RuntimeAdapter("ClusterTrainingRuntime"),
    RetiredAdapter("TrainJob"),
    RetiredAdapter("TrainingRuntime"),
    RetiredAdapter("ClusterTrainingRuntime"),
]
