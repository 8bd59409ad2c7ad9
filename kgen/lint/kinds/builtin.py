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


def _job_nodes(spec: dict) -> int | None:
    """Pods of a training Job: completions (else parallelism; a Job with neither runs one pod); None when
    a value is not an integer."""
    comp = as_int(spec.get("completions"))
    if comp is not None:
        return comp
    if "completions" not in spec and "parallelism" not in spec:
        return 1
    return as_int(spec.get("parallelism"))


def _sts_replicas(spec: dict) -> int | None:
    """A StatefulSet's replicas (1 when the field is absent)."""
    reps = as_int(spec.get("replicas"))
    return 1 if reps is None and "replicas" not in spec else reps


class JobAdapter(Adapter):
    kind = "Job"
    groups = ("batch",)

    def templates(self, doc: Any) -> list[Template]:
        spec = _spec(doc)
        tpl = spec.get("template")
        if not isinstance(tpl, dict):
            return []
        indexed = spec.get("completionMode") == "Indexed"
        return [
            Template(
                tpl,
                ("spec", "template"),
                _job_nodes(spec),
                job=spec,
                job_path=("spec",),
                rank_sources=frozenset({JOB_INDEX} if indexed else ()),
            )
        ]

    def facts(self, doc: Any) -> Facts:
        spec = _spec(doc)
        sub = get(spec, "template", "spec", "subdomain")
        return Facts(
            "Job",
            _job_nodes(spec),
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
        return [Template(tpl, ("spec", "template"), _sts_replicas(spec), rank_sources=frozenset({STS_INDEX}))]

    def facts(self, doc: Any) -> Facts:
        spec = _spec(doc)
        name = spec.get("serviceName")
        return Facts(
            "StatefulSet",
            _sts_replicas(spec),
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
