"""Built-in kinds: Job and StatefulSet (training workloads), and the other pod-template kinds whose
pod templates the pod rules check (Pod, CronJob, Deployment, ReplicaSet, DaemonSet, ...)."""

from __future__ import annotations

from typing import Any

from kgen.lint.kinds.base import JOB_INDEX, STS_INDEX, Adapter, Facts, Template, as_int, get


def _spec(doc: Any) -> dict:
    spec = doc.data.get("spec")
    return spec if isinstance(spec, dict) else {}


def job_pods(spec: dict) -> int | None:
    """Pods of a Job running at once: completions (else parallelism, else 1)."""
    comp = as_int(spec.get("completions"))
    if comp is not None:
        return comp
    par = as_int(spec.get("parallelism"))
    return par if par is not None else (1 if "parallelism" not in spec else None)


class JobAdapter(Adapter):
    kind = "Job"
    groups = ("batch",)

    def templates(self, doc: Any) -> list[Template]:
        spec = _spec(doc)
        tpl = spec.get("template")
        if not isinstance(tpl, dict):
            return []
        indexed = spec.get("completionMode") == "Indexed"
        comp = as_int(spec.get("completions"))
        if comp is None:
            comp = as_int(spec.get("parallelism"))
        return [
            Template(
                tpl,
                ("spec", "template"),
                comp,
                job=spec,
                job_path=("spec",),
                rank_sources=frozenset({JOB_INDEX} if indexed else ()),
            )
        ]

    def facts(self, doc: Any) -> Facts:
        spec = _spec(doc)
        comp = as_int(spec.get("completions"))
        nodes = comp if comp is not None else as_int(spec.get("parallelism"))
        sub = get(spec, "template", "spec", "subdomain")
        return Facts(
            "Job",
            nodes,
            "completions",
            dns="subdomain",
            dns_name=sub if isinstance(sub, str) and sub else None,
            dns_path=("spec", "template", "spec", "subdomain"),
            suspend=spec.get("suspend") if isinstance(spec.get("suspend"), bool) else None,
            suspend_path=("spec", "suspend"),
        )


class StatefulSetAdapter(Adapter):
    kind = "StatefulSet"
    groups = ("apps",)

    def templates(self, doc: Any) -> list[Template]:
        spec = _spec(doc)
        tpl = spec.get("template")
        if not isinstance(tpl, dict):
            return []
        reps = as_int(spec.get("replicas"))
        if reps is None and "replicas" not in spec:
            reps = 1
        return [Template(tpl, ("spec", "template"), reps, rank_sources=frozenset({STS_INDEX}))]

    def facts(self, doc: Any) -> Facts:
        spec = _spec(doc)
        reps = as_int(spec.get("replicas"))
        if reps is None and "replicas" not in spec:
            reps = 1
        name = spec.get("serviceName")
        return Facts(
            "StatefulSet",
            reps,
            "replicas",
            dns="serviceName",
            dns_name=name if isinstance(name, str) and name else None,
            dns_path=("spec", "serviceName"),
            runs_to_completion=False,
        )


class _PodTemplateKind(Adapter):
    """A kind whose pod template the pod rules check, but no training workload."""

    def __init__(self, kind: str, groups: tuple[str, ...], path: tuple) -> None:
        self.kind = kind
        self.groups = groups
        self.path = path

    def templates(self, doc: Any) -> list[Template]:
        if not self.path:
            return [Template(doc.data, (), 1)]
        tpl = get(doc.data, *self.path)
        return [Template(tpl, self.path, None)] if isinstance(tpl, dict) else []


ADAPTERS = [
    JobAdapter(),
    StatefulSetAdapter(),
    _PodTemplateKind("Pod", ("",), ()),
    _PodTemplateKind("PodTemplate", ("",), ("template",)),
    _PodTemplateKind("ReplicationController", ("",), ("spec", "template")),
    _PodTemplateKind("CronJob", ("batch",), ("spec", "jobTemplate", "spec", "template")),
    _PodTemplateKind("Deployment", ("apps", "extensions"), ("spec", "template")),
    _PodTemplateKind("ReplicaSet", ("apps", "extensions"), ("spec", "template")),
    _PodTemplateKind("DaemonSet", ("apps", "extensions"), ("spec", "template")),
]
