"""JobSet (jobset.x-k8s.io/v1alpha2) and Kueue rules.

The JobSet structure check is written from the API reference (api/jobset/v1alpha2/jobset_types.go
and the validating webhook): it covers the fields kgen relies on, so a JobSet is checked offline
without the CRD's schema (which ``--schema-location`` can still add). The child Job template is
checked against the batch/v1 Job schema of the chosen Kubernetes version and by the Job rules.
The training rules apply the invariants of rules_training to the JobSet's pod template, with
JobSet's own naming: pods ``<jobset>-<replicatedJob>-<jobIndex>-<podIndex>.<subdomain>``.

Kueue facts (kueue docs, tasks/run/{jobs,jobsets,statefulset,topology_aware_scheduling}.md): the
queue is the ``kueue.x-k8s.io/queue-name`` label on the workload's own metadata; Kueue suspends a
queued Job/JobSet through its webhook and unsuspends it on admission; the topology annotations go
on the pod template, exactly one of them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from kgen import jobset as js
from kgen import k8s
from kgen.findings import Severity
from kgen.launch.command import find_launches
from kgen.lint.kinds.base import unknown_fields
from kgen.lint.kinds.jobset import SERVED
from kgen.lint.registry import RULES, Context, rule

E, W, INFO = Severity.ERROR, Severity.WARNING, Severity.INFO

SPEC_KEYS = {
    "replicatedJobs",
    "network",
    "successPolicy",
    "failurePolicy",
    "startupPolicy",
    "suspend",
    "coordinator",
    "managedBy",
    "ttlSecondsAfterFinished",
    "volumeClaimPolicies",
}
RJOB_KEYS = {"name", "groupName", "template", "replicas", "dependsOn"}
NETWORK_KEYS = {"enableDNSHostnames", "subdomain", "publishNotReadyAddresses"}
FAILURE_KEYS = {"maxRestarts", "restartStrategy", "rules"}
RULE_KEYS = {"name", "action", "onJobFailureReasons", "onJobFailureMessagePatterns", "targetReplicatedJobs"}
ACTIONS = (
    "FailJobSet",
    "RestartJobSet",
    "RestartJobSetAndIgnoreMaxRestarts",
    "RestartJob",
    "RestartJobAndIgnoreMaxRestarts",
)
RESTART_STRATEGIES = ("Recreate", "BlockingRecreate", "InPlaceRestart")
RULE_NAME = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
_PFP_INDEX = re.compile(r"rule at index (\d+)\$?$")

# Kinds whose own queue-name label Kueue reads (its job integrations); core kinds it never manages.
NOT_MANAGED = {
    "Service",
    "ConfigMap",
    "Secret",
    "PodDisruptionBudget",
    "PersistentVolumeClaim",
    "ServiceAccount",
    "Role",
    "RoleBinding",
    "NetworkPolicy",
    "DaemonSet",
    "ReplicaSet",
    "Namespace",
}


def _is_jobset(doc: Any) -> bool:
    """A JobSet of the JobSet project's API group (a ``kind: JobSet`` of another group is not one)."""
    return doc.api_version.split("/")[0] == "jobset.x-k8s.io"


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _spec(doc: Any) -> dict:
    spec = doc.data.get("spec") if isinstance(doc.data, dict) else None
    return spec if isinstance(spec, dict) else {}


def _rjobs(doc: Any) -> list[tuple[int, dict]]:
    items = _spec(doc).get("replicatedJobs")
    return [(i, r) for i, r in enumerate(items) if isinstance(r, dict)] if isinstance(items, list) else []


def _rjob_names(doc: Any) -> set:
    return {r.get("name") for _, r in _rjobs(doc) if isinstance(r.get("name"), str)}


def _job_spec(rjob: dict) -> dict:
    spec = k8s.get(rjob, "template", "spec")
    return spec if isinstance(spec, dict) else {}


def _replicas(rjob: dict) -> int:
    r = _int(rjob.get("replicas"))
    return 1 if r is None else r


def _subdomain(doc: Any) -> str:
    sub = k8s.get(_spec(doc), "network", "subdomain")
    return sub if isinstance(sub, str) and sub else doc.name


def _dns_enabled(doc: Any) -> bool:
    return k8s.get(_spec(doc), "network", "enableDNSHostnames") is not False  # the webhook defaults true


def _pfp_rules(job_spec: dict) -> list:
    rules = k8s.get(job_spec, "podFailurePolicy", "rules")
    return rules if isinstance(rules, list) else []


def _failure_rules(doc: Any) -> list[tuple[int, dict]]:
    rules = k8s.get(_spec(doc), "failurePolicy", "rules")
    return [(i, r) for i, r in enumerate(rules) if isinstance(r, dict)] if isinstance(rules, list) else []


# --- structure --------------------------------------------------------------------------------


@rule(
    "KG150",
    E,
    "JobSet structure (written from the jobset.x-k8s.io v1alpha2 and v1 API references; other versions are "
    "not served): known spec fields, "
    "replicatedJobs with unique names, a Job template and replicas >= 0, network and failurePolicy "
    "field types, failure policy actions, rule names, Job failure reasons and regular expressions, "
    "success/startup policy enums and replicatedJob references.",
    "Fix the field named in the message (see docs/jobset.md); --schema-location with the CRD's schema checks the rest.",
    kinds=["JobSet"],
)
def jobset_structure(doc: Any, ctx: Context) -> Iterator:
    if doc.api_version.split("/")[0] != "jobset.x-k8s.io":
        return  # a JobSet of another API group is not this JobSet
    if doc.api_version not in SERVED:
        yield (
            ("apiVersion",),
            f"apiVersion {doc.api_version!r} is not served by the JobSet controller; use {' or '.join(SERVED)}",
        )
    spec = doc.data.get("spec")
    if not isinstance(spec, dict):
        yield ("spec",), "spec must be a mapping with replicatedJobs"
        return
    yield from unknown_fields(spec, SPEC_KEYS, ("spec",), "unknown field spec.{key} (JobSet v1alpha2 has {allowed})")
    yield from _check_rjobs(spec)
    names = {r.get("name") for _, r in _rjobs(doc)}
    yield from _check_network(spec)
    yield from _check_failure_policy(spec, names)
    sp = spec.get("successPolicy")
    if sp is not None:
        if not isinstance(sp, dict) or sp.get("operator") not in ("All", "Any"):
            yield ("spec", "successPolicy"), "successPolicy.operator must be All or Any"
        else:
            yield from _targets(sp, ("spec", "successPolicy"), names)
    st = spec.get("startupPolicy")
    if st is not None:
        order = st.get("startupPolicyOrder") if isinstance(st, dict) else None
        if order not in ("AnyOrder", "InOrder"):
            yield ("spec", "startupPolicy"), "startupPolicy.startupPolicyOrder must be AnyOrder or InOrder"
        elif order == "InOrder" and any("dependsOn" in r for _, r in _rjobs(doc)):
            yield (
                ("spec", "startupPolicy"),
                "startupPolicy InOrder and replicatedJobs[].dependsOn are mutually exclusive",
            )
    if "suspend" in spec and not isinstance(spec["suspend"], bool):
        yield ("spec", "suspend"), f"suspend must be true or false, got {spec['suspend']!r}"
    ttl = spec.get("ttlSecondsAfterFinished")
    if ttl is not None and (_int(ttl) is None or ttl < 0):
        yield ("spec", "ttlSecondsAfterFinished"), f"ttlSecondsAfterFinished must be an integer >= 0, got {ttl!r}"
    coord = spec.get("coordinator")
    if isinstance(coord, dict) and coord.get("replicatedJob") not in names:
        yield (
            ("spec", "coordinator", "replicatedJob"),
            f"coordinator.replicatedJob {coord.get('replicatedJob')!r} names no replicatedJob",
        )


def _check_rjobs(spec: dict) -> Iterator:
    items = spec.get("replicatedJobs")
    base = ("spec", "replicatedJobs")
    if not isinstance(items, list) or not items:
        yield base if "replicatedJobs" in spec else ("spec",), "replicatedJobs must be a non-empty list"
        return
    seen: set = set()
    for i, r in enumerate(items):
        if not isinstance(r, dict):
            yield base + (i,), "each replicatedJob must be a mapping with name and template"
            continue
        yield from unknown_fields(r, RJOB_KEYS, base + (i,), "unknown field {key!r} in a replicatedJob ({allowed})")
        name = r.get("name")
        if not k8s.is_dns_label(name):
            yield (
                base + (i, "name"),
                f"replicatedJob name {name!r} must be a DNS label (it is part of Job and pod names)",
            )
        elif name in seen:
            yield base + (i, "name"), f"replicatedJob name {name!r} is used twice"
        seen.add(name)
        if not isinstance(k8s.get(r, "template", "spec"), dict):
            yield base + (i,), "replicatedJob needs template.spec (a batch/v1 Job spec)"
        reps = r.get("replicas")
        if reps is not None and (_int(reps) is None or reps < 0):
            yield base + (i, "replicas"), f"replicas must be an integer >= 0, got {reps!r}"


def _check_network(spec: dict) -> Iterator:
    net = spec.get("network")
    if net is None:
        return
    if not isinstance(net, dict):
        yield ("spec", "network"), "network must be a mapping"
        return
    for key, value in net.items():
        path = ("spec", "network", key)
        if key not in NETWORK_KEYS:
            yield path, f"unknown field network.{key} ({', '.join(sorted(NETWORK_KEYS))})"
        elif key in ("enableDNSHostnames", "publishNotReadyAddresses") and not isinstance(value, bool):
            yield path, f"network.{key} must be true or false, got {value!r}"
        elif key == "subdomain" and not isinstance(value, str):
            yield path, f"network.subdomain must be a string, got {value!r}"


def _check_failure_policy(spec: dict, names: set) -> Iterator:
    fp = spec.get("failurePolicy")
    if fp is None:
        return
    base = ("spec", "failurePolicy")
    if not isinstance(fp, dict):
        yield base, "failurePolicy must be a mapping"
        return
    yield from unknown_fields(fp, FAILURE_KEYS, base, "unknown field failurePolicy.{key} ({allowed})")
    mr = fp.get("maxRestarts")
    if mr is not None and (_int(mr) is None or not 0 <= mr <= 2**31 - 1):
        yield base + ("maxRestarts",), f"maxRestarts must be an integer >= 0, got {mr!r}"
    rs = fp.get("restartStrategy")
    if rs is not None and rs not in RESTART_STRATEGIES:
        yield base + ("restartStrategy",), f"restartStrategy {rs!r} must be one of {', '.join(RESTART_STRATEGIES)}"
    rules = fp.get("rules")
    if rules is None:
        return
    if not isinstance(rules, list):
        yield base + ("rules",), "rules must be a list"
        return
    rule_names: set = set()
    for i, r in enumerate(rules):
        path = base + ("rules", i)
        if not isinstance(r, dict):
            yield path, "each failure policy rule must be a mapping with an action"
            continue
        yield from unknown_fields(r, RULE_KEYS, path, "unknown field {key!r} in a failure policy rule ({allowed})")
        action = r.get("action")
        if action not in ACTIONS:
            yield path + ("action",), f"action {action!r} must be one of {', '.join(ACTIONS)}"
        name = r.get("name")
        if name is not None:
            if not isinstance(name, str) or not RULE_NAME.match(name):
                yield path + ("name",), f"rule name {name!r} must match {RULE_NAME.pattern}"
            elif name in rule_names:
                yield path + ("name",), f"rule name {name!r} is used twice"
            rule_names.add(name)
        reasons = r.get("onJobFailureReasons")
        if reasons is not None:
            if not isinstance(reasons, list) or len(set(map(str, reasons))) != len(reasons):
                yield path + ("onJobFailureReasons",), "onJobFailureReasons must be a list of unique reasons"
            else:
                for j, reason in enumerate(reasons):
                    if reason not in js.JOB_FAILURE_REASONS:
                        yield (
                            path + ("onJobFailureReasons", j),
                            f"{reason!r} is not a Job failure reason, so the rule never matches; "
                            f"use one of {', '.join(js.JOB_FAILURE_REASONS)}",
                        )
        patterns = r.get("onJobFailureMessagePatterns")
        if patterns is not None:
            if not isinstance(patterns, list) or len(set(map(str, patterns))) != len(patterns):
                yield (
                    path + ("onJobFailureMessagePatterns",),
                    "onJobFailureMessagePatterns must be a list of unique patterns",
                )
            else:
                for j, pat in enumerate(patterns):
                    problem = _regex_problem(pat)
                    if problem:
                        yield path + ("onJobFailureMessagePatterns", j), problem
        yield from _targets(r, path, names)


def _regex_problem(pattern: Any) -> str | None:
    if not isinstance(pattern, str):
        return f"pattern {pattern!r} must be a string"
    try:
        re.compile(pattern)  # RE2 is a subset of Python's syntax for everything but \C and lookarounds
    except re.error as err:
        return f"pattern {pattern!r} is not a valid regular expression ({err})"
    if re.search(r"\(\?[=!<]", pattern):
        return f"pattern {pattern!r} uses a lookaround, which RE2 (Go) does not support"
    return None


def _targets(obj: dict, path: tuple, names: set) -> Iterator:
    targets = obj.get("targetReplicatedJobs")
    if targets is None:
        return
    if not isinstance(targets, list):
        yield path + ("targetReplicatedJobs",), "targetReplicatedJobs must be a list of replicatedJob names"
        return
    for j, t in enumerate(targets):
        if t not in names:
            yield path + ("targetReplicatedJobs", j), f"targetReplicatedJobs names {t!r}, which is not a replicatedJob"


@rule(
    "KG151",
    E,
    "Every replicatedJob template must be a valid batch/v1 Job (schema of the chosen Kubernetes version, "
    "plus kgen's Job rules such as podFailurePolicy and Indexed-Job limits).",
    "Fix the child Job field named in the message.",
    kinds=["JobSet"],
)
def child_job_template(doc: Any, ctx: Context) -> Iterator:
    if not _is_jobset(doc):
        return
    from kgen import schema
    from kgen.lint.document import Document

    validator = schema.bundled(ctx.kubernetes_version).validator("batch/v1", "Job")
    # The Job rules that make a Job invalid (errors): KG151 reports them as its own errors, so a Job
    # rule that only warns or informs (KG067, KG161) must not come out of it as an error.
    job_rules = [
        r
        for r in RULES.values()
        if r.scope == "document" and r.kinds and "Job" in r.kinds and r.fn and r.severity is Severity.ERROR
    ]
    for i, rjob in _rjobs(doc):
        tpl = rjob.get("template")
        if not isinstance(tpl, dict) or not isinstance(tpl.get("spec"), dict):
            continue  # KG150
        base = ("spec", "replicatedJobs", i, "template")
        meta = tpl["metadata"] if isinstance(tpl.get("metadata"), dict) else {}
        child = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "child", **meta}, "spec": tpl["spec"]}
        if validator is not None:
            for path, message in validator.validate(child):
                if message == "missing required field 'onPodConditions'" or (
                    message == "missing required field 'status'" and "onPodConditions" in path
                ):
                    # Schemas <= 1.28 (and <= 1.34 for status) mark these required although the API
                    # server accepts an onExitCodes rule alone and defaults status (validation.md
                    # §D #47); JobSet's CRD schema, from its own newer API types, does not require them.
                    continue
                if path[:1] in (("spec",), ("metadata",)):
                    yield base + tuple(path), f"child Job: {message}"
        child_doc = Document(doc.file, doc.index, None, child)
        for r in job_rules:
            if r.id in ("KG060", "KG063"):  # restart policy default and Job name: JobSet's own (KG157, KG152)
                continue
            try:
                for path, message in r.fn(child_doc, ctx):  # type: ignore[misc]
                    yield base + tuple(path), f"child Job ({r.id}): {message}"
            except (TypeError, AttributeError, KeyError, IndexError, ValueError):
                continue  # a malformed field: the schema finding above says so


@rule(
    "KG152",
    E,
    "JobSet's generated names must fit: Jobs <jobset>-<replicatedJob>-<index> and the subdomain are "
    "DNS-1035 labels, and the longest pod name <jobset>-<replicatedJob>-<jobIndex>-<podIndex>-xxxxx has at "
    "most 63 characters (the JobSet webhook rejects the JobSet otherwise).",
    "Shorten the JobSet or replicatedJob name.",
    kinds=["JobSet"],
)
def jobset_names(doc: Any, ctx: Context) -> Iterator:
    if not _is_jobset(doc):
        return
    if not doc.name:
        return
    for i, rjob in _rjobs(doc):
        rj = rjob.get("name")
        if not isinstance(rj, str):
            continue
        replicas = _replicas(rjob)
        longest_job = js.job_name(doc.name, rj, max(replicas - 1, 0))
        if not k8s.is_dns1035_label(longest_job):
            yield (
                ("metadata", "name"),
                f"child Job name {longest_job!r} is not a DNS-1035 label (<= 63, starts with a letter)",
            )
            continue
        spec = _job_spec(rjob)
        completions = _int(spec.get("completions"))
        if spec.get("completionMode", "Indexed") == "Indexed" and completions and completions > 0:
            pod = js.longest_pod_name(doc.name, completions, rj, max(replicas, 1))
            if len(pod) > 63:
                yield (
                    ("spec", "replicatedJobs", i, "name"),
                    f"pod names reach {len(pod)} characters ({pod!r} with the random suffix), the limit is 63; "
                    "shorten the JobSet or replicatedJob name",
                )
    sub = _subdomain(doc)
    if not k8s.is_dns1035_label(sub):
        path = ("spec", "network", "subdomain") if k8s.get(_spec(doc), "network", "subdomain") else ("metadata", "name")
        yield path, f"subdomain {sub!r} (the headless Service's name) must be a DNS-1035 label: start with a letter"


# --- training invariants on the JobSet's pod templates ---------------------------------------


def _training_rjobs(doc: Any) -> Iterator[tuple[int, dict, dict, tuple, list]]:
    """(index, replicatedJob, pod spec, pod spec path, [(container, path, launches)]) for torchrun pods."""
    for i, rjob in _rjobs(doc):
        ps = k8s.get(rjob, "template", "spec", "template", "spec")
        if not isinstance(ps, dict):
            continue
        base = ("spec", "replicatedJobs", i, "template", "spec", "template", "spec")
        launches = []
        for c, path in k8s.containers(ps, base, init=False):
            found = find_launches(c)
            if found:
                launches.append((c, path, found))
        if launches:
            yield i, rjob, ps, base, launches


def _total_pods(doc: Any) -> int | None:
    total = 0
    for _, rjob in _rjobs(doc):
        spec = _job_spec(rjob)
        comp = _int(spec.get("completions"))
        par = _int(spec.get("parallelism"))
        n = comp if comp is not None else (par if par is not None else 1)
        total += _replicas(rjob) * n
    return total


@rule(
    "KG158",
    W,
    "A training JobSet's failure policy should be wired to the failures: a restart rule that matches every "
    "PodFailurePolicy failure also restarts non-retriable exits (forever with RestartJobSetAndIgnoreMaxRestarts); "
    "a message pattern '... rule at index N' must name a FailJob rule of the child Job's podFailurePolicy; "
    "RestartJob restarts one child Job of a torch world that spans several.",
    "Use kgen render --kind jobset's policy (docs/jobset.md): FailJob rules in the child Job, matched by "
    "onJobFailureMessagePatterns in the JobSet.",
    kinds=["JobSet"],
)
def jobset_failure_wiring(doc: Any, ctx: Context) -> Iterator:
    if not _is_jobset(doc):
        return
    trained = list(_training_rjobs(doc))
    total = _total_pods(doc)
    if not trained or total is None or total <= 1:
        return
    fp = _spec(doc).get("failurePolicy")
    if fp is None:
        return  # KG206
    rjobs = dict(_rjobs(doc))
    names = {r.get("name"): r for r in rjobs.values()}
    exit_code_failjob = any(
        isinstance(r, dict) and r.get("action") == "FailJob" and "onExitCodes" in r
        for _, rjob, *_ in trained
        for r in _pfp_rules(_job_spec(rjob))
    )
    several_jobs = sum(_replicas(r) for r in rjobs.values()) > 1
    fails_first = False  # an earlier FailJobSet rule takes PodFailurePolicy failures (first match wins)
    for i, r in _failure_rules(doc):
        path = ("spec", "failurePolicy", "rules", i)
        action = r.get("action")
        reasons = r.get("onJobFailureReasons") or []
        patterns = r.get("onJobFailureMessagePatterns") or []
        matches_pfp = not reasons or "PodFailurePolicy" in reasons
        if action == "FailJobSet" and matches_pfp:
            fails_first = True
        if action in ("RestartJobSet", "RestartJobSetAndIgnoreMaxRestarts") and matches_pfp and not patterns:
            if exit_code_failjob and not fails_first:
                forever = " forever" if action == "RestartJobSetAndIgnoreMaxRestarts" else ""
                yield (
                    path,
                    f"{action} matches every PodFailurePolicy failure, so the child Job's FailJob exit codes "
                    f"(non-retriable, e.g. a configuration error) restart the group{forever}; "
                    "add onJobFailureMessagePatterns",
                )
        if action in ("RestartJob", "RestartJobAndIgnoreMaxRestarts") and several_jobs:
            yield (
                path,
                f"{action} recreates one child Job while the others keep a broken torch world; use RestartJobSet",
            )
        targets = r.get("targetReplicatedJobs") or list(names)
        for j, pat in enumerate(patterns if isinstance(patterns, list) else []):
            m = _PFP_INDEX.search(pat) if isinstance(pat, str) else None
            if not m:
                continue
            index = int(m.group(1))
            for t in targets:
                rjob = names.get(t)
                if rjob is None:
                    continue
                pfp = _pfp_rules(_job_spec(rjob))
                if index >= len(pfp) or not isinstance(pfp[index], dict) or pfp[index].get("action") != "FailJob":
                    yield (
                        path + ("onJobFailureMessagePatterns", j),
                        f"pattern {pat!r} names podFailurePolicy rule {index} of replicatedJob {t!r}, which is not "
                        "a FailJob rule, so this rule never matches",
                    )


@rule(
    "KG206",
    INFO,
    "A multi-pod training JobSet with no failurePolicy fails as a whole at the first failed child Job: "
    "nothing restarts the group after a node failure or eviction (the JobSet default, and what most "
    "healthy examples write; it costs a rerun only when a pod fails).",
    "Add failurePolicy.maxRestarts and rules (kgen render --kind jobset writes them; docs/jobset.md).",
    kinds=["JobSet"],
)
def jobset_no_failure_policy(doc: Any, ctx: Context) -> Iterator:
    if not _is_jobset(doc) or "failurePolicy" in _spec(doc):
        return
    total = _total_pods(doc)
    if any(True for _ in _training_rjobs(doc)) and total is not None and total > 1:
        yield (
            ("spec",),
            "no failurePolicy: the first failed child Job fails the JobSet, nothing restarts the group; "
            "add failurePolicy.maxRestarts and rules",
        )


# --- Kueue ------------------------------------------------------------------------------------


def _labels(obj: Any) -> dict:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    labels = meta.get("labels") if isinstance(meta, dict) else None
    return labels if isinstance(labels, dict) else {}


def _annotations(obj: Any) -> dict:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    ann = meta.get("annotations") if isinstance(meta, dict) else None
    return ann if isinstance(ann, dict) else {}


def _pod_templates(doc: Any) -> list[tuple[dict, tuple]]:
    """(template, path) of the object's own pod templates (once per document: the Kueue rules each ask)."""
    memo = doc.memo
    got = memo.get("kg_own_templates")
    if got is None:
        from kgen.lint import kinds

        got = memo["kg_own_templates"] = [
            (t.template, t.path) for t in kinds.templates(doc) if t.path and t.containers is None
        ]
    return got


@rule(
    "KG160",
    W,
    "kueue.x-k8s.io/queue-name belongs on the workload's own metadata (Job, JobSet, StatefulSet, ...): "
    "Kueue ignores it on Services, ConfigMaps and other kinds it does not manage, on a Job's or JobSet's "
    "pod template and on a JobSet's child Job template; a StatefulSet's pod-group labels are Kueue's to set.",
    "Move the label to the Job's/JobSet's/StatefulSet's metadata.labels.",
)
def queue_label_placement(doc: Any, ctx: Context) -> Iterator:
    label = js.QUEUE_LABEL
    if label in _labels(doc.data):
        if doc.kind in NOT_MANAGED:
            yield (
                ("metadata", "labels", label),
                f"Kueue does not manage a {doc.kind}; put the queue-name label on the Job/JobSet/StatefulSet",
            )
        elif doc.kind == "CronJob":
            yield (
                ("metadata", "labels", label),
                "Kueue reads the queue-name of the Jobs a CronJob creates: put it in spec.jobTemplate.metadata.labels",
            )
    queue = _labels(doc.data).get(label)
    for tpl, path in _pod_templates(doc):
        value = _labels(tpl).get(label)
        if doc.kind in ("Job", "JobSet") and value is not None:
            yield (
                path + ("metadata", "labels", label),
                f"Kueue reads the {doc.kind}'s own queue-name label, not the pod template's; "
                "move it to metadata.labels",
            )
        if doc.kind == "StatefulSet":
            if value is not None and value != queue:
                yield (
                    path + ("metadata", "labels", label),
                    "Kueue's webhook copies the StatefulSet's queue-name to its pods; set it on the StatefulSet only",
                )
            if js.POD_GROUP_LABEL in _labels(tpl):
                yield (
                    path + ("metadata", "labels", js.POD_GROUP_LABEL),
                    "Kueue's webhook sets pod-group-name for a queued StatefulSet; delete the hand-set one",
                )
    if doc.kind == "JobSet":
        for i, rjob in _rjobs(doc):
            if label in _labels(rjob.get("template")):
                yield (
                    ("spec", "replicatedJobs", i, "template", "metadata", "labels", label),
                    "Kueue admits the JobSet as a whole; put queue-name on the JobSet's metadata, not a child Job's",
                )


@rule(
    "KG161",
    W,
    "Contradictory suspend settings: a queued Job/JobSet with suspend: false (Kueue's webhook suspends it "
    "anyway until admission), or a JobSet child Job template with suspend (the JobSet controller and Kueue own it).",
    "Leave suspend to Kueue (or set it true) on a queued workload; suspend a JobSet through its own spec.suspend.",
    kinds=["Job", "JobSet"],
)
def suspend_settings(doc: Any, ctx: Context) -> Iterator:
    spec = _spec(doc)
    queued = js.QUEUE_LABEL in _labels(doc.data)
    suspend = spec.get("suspend")
    if queued and suspend is False:
        yield (
            ("spec", "suspend"),
            "suspend: false on a queued workload: Kueue's webhook suspends it until admission anyway; delete it",
        )
    if doc.kind == "JobSet":
        for i, rjob in _rjobs(doc):
            if "suspend" in _job_spec(rjob):
                yield (
                    ("spec", "replicatedJobs", i, "template", "spec", "suspend"),
                    "suspend in a child Job template: the JobSet controller suspends and resumes its Jobs "
                    "(spec.suspend of the JobSet); delete it",
                )


@rule(
    "KG162",
    E,
    "Kueue topology-aware scheduling takes exactly one of kueue.x-k8s.io/podset-required-topology and "
    "podset-preferred-topology per pod template, and its value is a node label key (a topology level).",
    "Keep one annotation whose value is the level's node label, e.g. cloud.google.com/gce-topology-block.",
    templates_only=True,
)
def topology_annotations(doc: Any, ctx: Context) -> Iterator:
    for tpl, path in _pod_templates(doc):
        ann = _annotations(tpl)
        have = [k for k in (js.REQUIRED_TOPOLOGY, js.PREFERRED_TOPOLOGY) if k in ann]
        if len(have) == 2:
            yield (
                path + ("metadata", "annotations", js.PREFERRED_TOPOLOGY),
                "both required and preferred topology are set; Kueue takes exactly one, delete one",
            )
        for key in have:
            problem = k8s.qualified_name_problem(ann[key])
            if problem:
                yield (
                    path + ("metadata", "annotations", key),
                    f"{key} must name a node label key (a topology level), got {ann[key]!r}: {problem}",
                )


@rule(
    "KG163",
    W,
    "Kueue settings that have no effect: topology annotations on the workload's own metadata (Kueue reads "
    "them on the pod template), or priority-class / topology on a workload without a queue-name label.",
    "Put topology annotations on the pod template and add kueue.x-k8s.io/queue-name.",
)
def kueue_without_effect(doc: Any, ctx: Context) -> Iterator:
    topo = (js.REQUIRED_TOPOLOGY, js.PREFERRED_TOPOLOGY)
    for key in topo:
        if key in _annotations(doc.data) and _pod_templates(doc):
            yield (
                ("metadata", "annotations", key),
                f"{key} on the {doc.kind}'s metadata has no effect; Kueue reads it on the pod template",
            )
    if js.QUEUE_LABEL in _labels(doc.data) or doc.kind not in ("Job", "JobSet", "StatefulSet"):
        return
    if js.PRIORITY_LABEL in _labels(doc.data):
        yield (
            ("metadata", "labels", js.PRIORITY_LABEL),
            "priority-class without kueue.x-k8s.io/queue-name: Kueue does not manage this workload; add the queue",
        )
    for tpl, path in _pod_templates(doc):
        for key in topo:
            if key in _annotations(tpl):
                yield (
                    path + ("metadata", "annotations", key),
                    f"{key} without kueue.x-k8s.io/queue-name on the {doc.kind}: only Kueue reads it; add the queue",
                )
