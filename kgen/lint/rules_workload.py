"""Job, StatefulSet, ConfigMap and PodDisruptionBudget rules (validation.md §D rows 33-59)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from kgen import k8s
from kgen.findings import Severity
from kgen.lint.registry import Context, rule

E, W, INFO = Severity.ERROR, Severity.WARNING, Severity.INFO
MAX_PARALLELISM_INDEXED = 100_000


def _spec(doc: Any) -> dict:
    spec = doc.data.get("spec") if isinstance(doc.data, dict) else None
    return spec if isinstance(spec, dict) else {}


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _indexed(spec: dict) -> bool:
    return spec.get("completionMode") == "Indexed"


# --- Job --------------------------------------------------------------------------------------


@rule(
    "KG060",
    E,
    "A Job's (or CronJob's) pod template restartPolicy must be Never or OnFailure; omitted means Always, "
    "which is rejected.",
    "Set spec.template.spec.restartPolicy: Never.",
    kinds=["Job", "CronJob"],
)
def job_restart_policy(doc: Any, ctx: Context) -> Iterator:
    ps = k8s.pod_spec(doc)
    if not ps:
        return
    spec, base = ps
    rp = spec.get("restartPolicy")
    if rp is None:
        yield base, "restartPolicy is not set, so it defaults to Always, which a Job rejects; set restartPolicy: Never"
    elif rp == "Always":
        yield base + ("restartPolicy",), "a Job's restartPolicy must be Never or OnFailure, not Always"


@rule(
    "KG061",
    E,
    "podFailurePolicy requires the pod template's restartPolicy: Never.",
    "Set spec.template.spec.restartPolicy: Never.",
    kinds=["Job"],
)
def pod_failure_policy_never(doc: Any, ctx: Context) -> Iterator:
    spec = _spec(doc)
    rp = k8s.get(spec, "template", "spec", "restartPolicy")
    if spec.get("podFailurePolicy") is not None and rp != "Never":
        yield (
            ("spec", "podFailurePolicy"),
            f"podFailurePolicy requires restartPolicy: Never, got {rp or 'Always (default)'}",
        )


@rule("KG062", E, "An Indexed Job needs spec.completions.", "Set completions (= parallelism = nodes).", kinds=["Job"])
def indexed_needs_completions(doc: Any, ctx: Context) -> Iterator:
    spec = _spec(doc)
    if _indexed(spec) and spec.get("completions") is None:
        yield ("spec", "completionMode"), "completionMode: Indexed requires spec.completions"


@rule(
    "KG063",
    E,
    "Job name at most 63 characters (it becomes the job-name label value); for Indexed Jobs "
    "'<name>-<completions-1>' is the pod hostname and must be a DNS-1123 label.",
    "Shorten the Job name.",
    kinds=["Job"],
)
def job_name_length(doc: Any, ctx: Context) -> Iterator:
    name = doc.name
    spec = _spec(doc)
    if not name:
        return
    if len(name) > 63:
        yield (
            ("metadata", "name"),
            f"Job name is {len(name)} characters; at most 63 (it is copied into the job-name label)",
        )
        return
    completions = _int(spec.get("completions"))
    if _indexed(spec) and completions and completions > 0:
        host = f"{name}-{completions - 1}"
        if not k8s.is_dns_label(host):
            why = "has dots" if "." in name else f"is {len(host)} characters (max 63)"
            yield ("metadata", "name"), f"pod hostname {host!r} {why}; shorten the Job name"


@rule(
    "KG064",
    E,
    "Indexed Job limits: completionMode is NonIndexed or Indexed; parallelism at most 100000.",
    "Use completionMode: Indexed and a parallelism <= 100000.",
    kinds=["Job"],
)
def completion_mode(doc: Any, ctx: Context) -> Iterator:
    spec = _spec(doc)
    mode = spec.get("completionMode")
    if isinstance(mode, str) and mode not in ("NonIndexed", "Indexed"):
        yield ("spec", "completionMode"), f"completionMode {mode!r} must be NonIndexed or Indexed (case matters)"
    par = _int(spec.get("parallelism"))
    if _indexed(spec) and par is not None and par > MAX_PARALLELISM_INDEXED:
        yield ("spec", "parallelism"), f"parallelism {par} exceeds 100000 for an Indexed Job"


@rule(
    "KG065",
    E,
    "backoffLimitPerIndex and maxFailedIndexes need completionMode: Indexed; maxFailedIndexes "
    "needs backoffLimitPerIndex and is at most completions and 100000; above 100000 completions, "
    "backoffLimitPerIndex needs maxFailedIndexes and parallelism <= 10000.",
    "Set completionMode: Indexed and the limits named in the message.",
    kinds=["Job"],
)
def per_index_backoff(doc: Any, ctx: Context) -> Iterator:
    spec = _spec(doc)
    for key in ("backoffLimitPerIndex", "maxFailedIndexes"):
        if spec.get(key) is not None and not _indexed(spec):
            yield ("spec", key), f"{key} requires completionMode: Indexed"
    mfi = _int(spec.get("maxFailedIndexes"))
    if mfi is not None:
        if spec.get("backoffLimitPerIndex") is None:
            yield ("spec", "maxFailedIndexes"), "maxFailedIndexes requires backoffLimitPerIndex"
        comp = _int(spec.get("completions"))
        if comp is not None and mfi > comp:
            yield ("spec", "maxFailedIndexes"), f"maxFailedIndexes {mfi} exceeds completions {comp}"
        if mfi > 100_000:
            yield ("spec", "maxFailedIndexes"), f"maxFailedIndexes {mfi} exceeds 100000"
    comp = _int(spec.get("completions"))
    if spec.get("backoffLimitPerIndex") is not None and comp is not None and comp > 100_000:
        par = _int(spec.get("parallelism"))
        if mfi is None:
            yield (
                ("spec", "maxFailedIndexes"),
                "completions > 100000 with backoffLimitPerIndex requires maxFailedIndexes",
            )
        if par is not None and par > 10_000:
            yield (
                ("spec", "parallelism"),
                "completions > 100000 with backoffLimitPerIndex requires parallelism <= 10000",
            )


_ACTIONS = ("FailJob", "FailIndex", "Ignore", "Count")


@rule(
    "KG066",
    E,
    "podFailurePolicy rules: action FailJob, FailIndex, Ignore or Count (FailIndex needs "
    "backoffLimitPerIndex); exactly one of onExitCodes/onPodConditions; at most 20 rules; onExitCodes names a "
    "template container, operator In/NotIn, 1-255 sorted unique values, no 0 with In; podReplacementPolicy "
    "must be Failed.",
    "Fix the rule as the message says.",
    kinds=["Job"],
)
def pod_failure_policy_rules(doc: Any, ctx: Context) -> Iterator:
    spec = _spec(doc)
    pfp = spec.get("podFailurePolicy")
    if not isinstance(pfp, dict):
        return
    rules = pfp.get("rules")
    base = ("spec", "podFailurePolicy", "rules")
    prp = spec.get("podReplacementPolicy")
    if prp is not None and prp != "Failed":
        yield (
            ("spec", "podReplacementPolicy"),
            f"podReplacementPolicy must be Failed with a podFailurePolicy, got {prp!r}",
        )
    if not isinstance(rules, list):
        return
    if len(rules) > 20:
        yield base, f"{len(rules)} podFailurePolicy rules; at most 20"
    names = {c.get("name") for c in k8s.get(spec, "template", "spec", "containers") or [] if isinstance(c, dict)}
    names |= {c.get("name") for c in k8s.get(spec, "template", "spec", "initContainers") or [] if isinstance(c, dict)}
    for i, r in enumerate(rules):
        if not isinstance(r, dict):
            continue
        action = r.get("action")
        if isinstance(action, str) and action not in _ACTIONS:
            yield base + (i, "action"), f"action {action!r} must be one of {', '.join(_ACTIONS)}"
        if action == "FailIndex" and spec.get("backoffLimitPerIndex") is None:
            yield base + (i, "action"), "action FailIndex requires spec.backoffLimitPerIndex"
        # The server counts an empty onPodConditions as absent (len() > 0): JobSet's examples write
        # `onPodConditions: []` beside onExitCodes for the old schemas that required the field.
        conds = r.get("onPodConditions")
        has_codes, has_conds = r.get("onExitCodes") is not None, conds is not None and conds != []
        if has_codes == has_conds:
            yield base + (i,), "set exactly one of onExitCodes and onPodConditions"
        codes = r.get("onExitCodes")
        if isinstance(codes, dict):
            cp = base + (i, "onExitCodes")
            cn = codes.get("containerName")
            if cn is not None and cn not in names:
                yield cp + ("containerName",), f"containerName {cn!r} is not a container of the template"
            op = codes.get("operator")
            if op not in ("In", "NotIn"):
                yield cp + ("operator",), f"operator {op!r} must be In or NotIn"
            values = codes.get("values")
            if isinstance(values, list):
                ints = [v for v in values if _int(v) is not None]
                if not 1 <= len(values) <= 255:
                    yield cp + ("values",), f"{len(values)} values; between 1 and 255 allowed"
                if ints != sorted(set(ints)):
                    yield cp + ("values",), "values must be sorted and unique"
                if op == "In" and 0 in ints:
                    yield cp + ("values",), "exit code 0 is not allowed with operator In"


@rule(
    "KG067",
    INFO,
    "Kubernetes <= 1.34 schemas (and kubeconform) require onPodConditions[].status although the "
    'server defaults it to "True".',
    'Always write status: "True".',
    kinds=["Job"],
)
def on_pod_conditions_status(doc: Any, ctx: Context) -> Iterator:
    rules = k8s.get(_spec(doc), "podFailurePolicy", "rules")
    for i, r in enumerate(rules if isinstance(rules, list) else []):
        conds = r.get("onPodConditions") if isinstance(r, dict) else None
        for j, c in enumerate(conds if isinstance(conds, list) else []):
            if isinstance(c, dict) and "status" not in c:
                yield (
                    ("spec", "podFailurePolicy", "rules", i, "onPodConditions", j),
                    'status is missing; write status: "True" (schemas for Kubernetes <= 1.34 require it)',
                )


@rule("KG068", E, "successPolicy requires completionMode: Indexed.", "Set completionMode: Indexed.", kinds=["Job"])
def success_policy(doc: Any, ctx: Context) -> Iterator:
    spec = _spec(doc)
    if spec.get("successPolicy") is not None and not _indexed(spec):
        yield ("spec", "successPolicy"), "successPolicy requires completionMode: Indexed"


@rule(
    "KG069",
    E,
    "A Job must not set spec.selector unless manualSelector: true; the server generates it.",
    "Delete spec.selector.",
    kinds=["Job"],
)
def job_selector(doc: Any, ctx: Context) -> Iterator:
    spec = _spec(doc)
    if spec.get("selector") is not None and spec.get("manualSelector") is not True:
        yield ("spec", "selector"), "do not set spec.selector on a Job (it is generated); delete it"


@rule(
    "KG070",
    E,
    "Job counts are not negative: parallelism, completions, backoffLimit, activeDeadlineSeconds, "
    "ttlSecondsAfterFinished, backoffLimitPerIndex, maxFailedIndexes.",
    "Use 0 or more.",
    kinds=["Job"],
)
def job_non_negative(doc: Any, ctx: Context) -> Iterator:
    spec = _spec(doc)
    for key in (
        "parallelism",
        "completions",
        "backoffLimit",
        "activeDeadlineSeconds",
        "ttlSecondsAfterFinished",
        "backoffLimitPerIndex",
        "maxFailedIndexes",
    ):
        v = _int(spec.get(key))
        if v is not None and v < 0:
            yield ("spec", key), f"{key} must not be negative, got {v}"
    ads = _int(spec.get("activeDeadlineSeconds"))
    if ads == 0:
        yield ("spec", "activeDeadlineSeconds"), "activeDeadlineSeconds must be positive"


# --- StatefulSet ------------------------------------------------------------------------------


@rule(
    "KG080",
    E,
    "StatefulSet name at most 52 characters: pods get a controller-revision-hash label "
    "'<name>-<hash>' that must fit 63 (not validated; the pods fail to create).",
    "Shorten the StatefulSet name to 52 characters or fewer.",
    kinds=["StatefulSet"],
)
def statefulset_name_length(doc: Any, ctx: Context) -> Iterator:
    if len(doc.name) > 52:
        yield (
            ("metadata", "name"),
            (
                f"StatefulSet name is {len(doc.name)} characters; pods fail to create above 52 "
                "(controller-revision-hash label); shorten it"
            ),
        )


@rule(
    "KG081",
    E,
    "A StatefulSet's pod template restartPolicy must be Always and it must not set activeDeadlineSeconds.",
    "Delete restartPolicy (or set Always) and activeDeadlineSeconds.",
    kinds=["StatefulSet"],
)
def statefulset_restart_policy(doc: Any, ctx: Context) -> Iterator:
    ps = k8s.pod_spec(doc)
    if not ps:
        return
    spec, base = ps
    rp = spec.get("restartPolicy")
    if rp is not None and rp != "Always":
        yield base + ("restartPolicy",), f"a StatefulSet's restartPolicy must be Always, got {rp!r}"
    if spec.get("activeDeadlineSeconds") is not None:
        yield base + ("activeDeadlineSeconds",), "activeDeadlineSeconds is not allowed in a StatefulSet"


@rule(
    "KG082",
    E,
    "A StatefulSet needs a non-empty selector that matches its template labels.",
    "Copy the template's labels into spec.selector.matchLabels.",
    kinds=["StatefulSet"],
)
def statefulset_selector(doc: Any, ctx: Context) -> Iterator:
    spec = _spec(doc)
    sel = spec.get("selector")
    if not isinstance(sel, dict) or not (sel.get("matchLabels") or sel.get("matchExpressions")):
        yield ("spec", "selector"), "selector is missing or empty; set matchLabels to the template's labels"
        return
    labels = k8s.template_labels(doc)
    ml = sel.get("matchLabels")
    if isinstance(ml, dict):
        for k, v in ml.items():
            if labels.get(k) != v:
                yield (
                    ("spec", "selector", "matchLabels", k),
                    f"selector {k}={v} does not match the template labels; the StatefulSet is rejected",
                )


@rule(
    "KG083",
    E,
    "StatefulSet serviceName is a DNS-1123 label; podManagementPolicy OrderedReady or Parallel; "
    "updateStrategy RollingUpdate or OnDelete; replicas >= 0.",
    "Fix the field as the message says.",
    kinds=["StatefulSet"],
)
def statefulset_fields(doc: Any, ctx: Context) -> Iterator:
    spec = _spec(doc)
    sn = spec.get("serviceName")
    if isinstance(sn, str) and sn and not k8s.is_dns_label(sn):
        yield ("spec", "serviceName"), f"serviceName {sn!r} must be a DNS-1123 label (the Service's name, no dots)"
    pmp = spec.get("podManagementPolicy")
    if isinstance(pmp, str) and pmp not in ("OrderedReady", "Parallel"):
        yield ("spec", "podManagementPolicy"), f"podManagementPolicy {pmp!r} must be OrderedReady or Parallel"
    ut = k8s.get(spec, "updateStrategy", "type")
    if isinstance(ut, str) and ut not in ("RollingUpdate", "OnDelete"):
        yield ("spec", "updateStrategy", "type"), f"updateStrategy.type {ut!r} must be RollingUpdate or OnDelete"
    rep = _int(spec.get("replicas"))
    if rep is not None and rep < 0:
        yield ("spec", "replicas"), f"replicas must not be negative, got {rep}"


# --- ConfigMap --------------------------------------------------------------------------------


@rule(
    "KG085",
    E,
    "ConfigMap keys match [-._a-zA-Z0-9]+ (at most 253, not '.' or '..'), appear in only one of "
    "data/binaryData, and all data is at most 1 MiB.",
    "Rename the key or split the ConfigMap.",
    kinds=["ConfigMap"],
)
def configmap_keys(doc: Any, ctx: Context) -> Iterator:
    data = doc.data
    total = 0
    keys: dict = {}
    for section in ("data", "binaryData"):
        values = data.get(section)
        if not isinstance(values, dict):
            continue
        for key, value in values.items():
            if not k8s.is_configmap_key(key):
                yield (section, key), f"ConfigMap key {key!r} must match [-._a-zA-Z0-9]+ (no '/', no spaces)"
            if key in keys:
                yield (section, key), f"key {key!r} is in both data and binaryData"
            keys[key] = section
            total += len(str(value).encode()) if value is not None else 0
    if total > 1024 * 1024:
        yield ("data",), f"ConfigMap data is {total} bytes, more than 1 MiB"


# --- PodDisruptionBudget ----------------------------------------------------------------------

_PERCENT = re.compile(r"^(\d+)%$")


@rule(
    "KG090",
    E,
    "PodDisruptionBudget: minAvailable and maxUnavailable are exclusive, each an int >= 0 or "
    "'N%' with N <= 100; unhealthyPodEvictionPolicy is IfHealthyBudget or AlwaysAllow.",
    "Keep one of the two fields with a valid value.",
    kinds=["PodDisruptionBudget"],
)
def pdb(doc: Any, ctx: Context) -> Iterator:
    spec = _spec(doc)
    if spec.get("minAvailable") is not None and spec.get("maxUnavailable") is not None:
        yield ("spec",), "minAvailable and maxUnavailable are mutually exclusive; keep one"
    for key in ("minAvailable", "maxUnavailable"):
        v = spec.get(key)
        if v is None:
            continue
        if isinstance(v, int) and not isinstance(v, bool):
            if v < 0:
                yield ("spec", key), f"{key} must not be negative"
        elif isinstance(v, str):
            m = _PERCENT.match(v)
            if not m or int(m.group(1)) > 100:
                yield ("spec", key), f"{key} {v!r} must be an integer or a percentage like '50%' (at most 100%)"
    up = spec.get("unhealthyPodEvictionPolicy")
    if isinstance(up, str) and up not in ("IfHealthyBudget", "AlwaysAllow"):
        yield ("spec", "unhealthyPodEvictionPolicy"), f"{up!r} must be IfHealthyBudget or AlwaysAllow"
