"""JobSet (jobset.x-k8s.io v1alpha2 and v1, both served upstream): one pod template per
replicatedJob, ``replicas`` child Jobs of ``completions`` pods each; pods are
``<jobset>-<replicatedJob>-<jobIndex>-<podIndex>.<subdomain>`` through a headless Service the
controller creates (``publishNotReadyAddresses`` defaults to true); the webhook defaults the child
Jobs to Indexed and an empty pod restartPolicy to OnFailure."""

from __future__ import annotations

from typing import Any

from kgen import jobset as js
from kgen.lint.kinds.base import JOB_INDEX, Adapter, Facts, Template, as_int, get
from kgen.lint.kinds.builtin import job_pods

SERVED = ("jobset.x-k8s.io/v1alpha2", "jobset.x-k8s.io/v1")


def rjobs(data: Any, base: tuple = ("spec",)) -> list[tuple[int, dict]]:
    items = get(data, *base, "replicatedJobs")
    return [(i, r) for i, r in enumerate(items) if isinstance(r, dict)] if isinstance(items, list) else []


def replicas(rjob: dict) -> int:
    r = as_int(rjob.get("replicas"))
    return 1 if r is None else r


def jobset_templates(data: Any, base: tuple = ("spec",)) -> list[Template]:
    """Pod templates of a JobSet spec at ``base`` (also a TrainingRuntime's ``spec.template.spec``)."""
    out = []
    for i, rjob in rjobs(data, base):
        job = get(rjob, "template", "spec")
        tpl = get(job, "template")
        if not isinstance(job, dict) or not isinstance(tpl, dict):
            continue
        jpath = base + ("replicatedJobs", i, "template", "spec")
        per_job = job_pods(job)
        rp = get(tpl, "spec", "restartPolicy")
        out.append(
            Template(
                tpl,
                jpath + ("template",),
                None if per_job is None else replicas(rjob) * per_job,
                role=str(rjob.get("name", "")),
                restart_policy=rp if isinstance(rp, str) else "OnFailure",
                restart_path=jpath + ("template", "spec") + (("restartPolicy",) if isinstance(rp, str) else ()),
                job=job,
                job_path=jpath,
                rank_sources=frozenset({JOB_INDEX} if job.get("completionMode") in (None, "Indexed") else ()),
            )
        )
    return out


def network_facts(name: str, spec: dict, base: tuple, facts: Facts) -> None:
    """DNS names, the pod-0 hostname and the not-ready setting of a JobSet spec."""
    sub = get(spec, "network", "subdomain")
    sub = sub if isinstance(sub, str) and sub else name
    first = next((r.get("name") for _, r in rjobs({"spec": spec}) if isinstance(r.get("name"), str)), None)
    facts.dns = "managed"
    facts.service_like = sub
    if first:
        facts.master_hosts = (js.pod_fqdn(name, sub, 0, first),)
        facts.pod_identity = {"jobset.sigs.k8s.io/jobset-name": name}
        facts.pod0_index = {
            "jobset.sigs.k8s.io/replicatedjob-name": first,
            "jobset.sigs.k8s.io/job-index": "0",
            "batch.kubernetes.io/job-completion-index": "0",
        }
    if get(spec, "network", "enableDNSHostnames") is False:
        facts.dns_problems.append(
            (
                base + ("network", "enableDNSHostnames"),
                "enableDNSHostnames is false, so the pods get no DNS names"
                + (f" and {facts.master_hosts[0]} does not resolve" if facts.master_hosts else "")
                + "; set it to true",
            )
        )
    if get(spec, "network", "publishNotReadyAddresses") is False:
        facts.managed_not_ready = (
            base + ("network", "publishNotReadyAddresses"),
            "publishNotReadyAddresses: false: pod 0's name resolves only once it is Ready; delete it (default true)",
        )
    for i, rjob in rjobs({"spec": spec}):
        pod_sub = get(rjob, "template", "spec", "template", "spec", "subdomain")
        if pod_sub is not None and pod_sub != sub:
            path = base + ("replicatedJobs", i, "template", "spec", "template", "spec", "subdomain")
            facts.dns_problems.append(
                (path, f"subdomain {pod_sub!r} differs from the JobSet's subdomain {sub!r}; use {sub!r}")
            )


class JobSetAdapter(Adapter):
    kind = "JobSet"
    groups = ("jobset.x-k8s.io",)

    def templates(self, doc: Any) -> list[Template]:
        return jobset_templates(doc.data)

    def facts(self, doc: Any) -> Facts:
        spec = doc.data.get("spec") if isinstance(doc.data.get("spec"), dict) else {}
        total = sum(t.pods or 0 for t in self.templates(doc)) if self.templates(doc) else None
        facts = Facts("JobSet", total, "pods (replicas x completions over all replicatedJobs)", group_restart=True)
        network_facts(doc.name, spec, ("spec",), facts)
        suspend = spec.get("suspend")
        facts.suspend = suspend if isinstance(suspend, bool) else None
        facts.suspend_path = ("spec", "suspend")
        return facts


ADAPTERS = [JobSetAdapter()]
