"""Parser/schema ids, and object metadata: names, namespaces, labels, annotations."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from kgen import k8s
from kgen.findings import Severity
from kgen.lint import kinds
from kgen.lint.registry import Context, builtin, rule
from kgen.schema import is_builtin_group

E, W, INFO = Severity.ERROR, Severity.WARNING, Severity.INFO

builtin(
    "KG001",
    E,
    "A mapping has the same key twice; kubectl's strict field validation rejects the object.",
    "Delete one of the two keys.",
)
builtin(
    "KG002",
    E,
    "An unquoted YAML 1.1 boolean (y, yes, on, off, no, ...) sits in a string field; "
    "kubectl reads it as a boolean and the API server rejects the type.",
    'Quote the value: "on".',
)
builtin(
    "KG003",
    E,
    "A document is not a Kubernetes object (not a mapping, or apiVersion/kind missing).",
    "Give every document a string apiVersion and kind, or delete it.",
)
builtin(
    "KG004",
    E,
    "A file is not valid YAML (or not UTF-8 text, larger than 64 MiB, or unreadable), or a document breaks a "
    "limit (nesting, size, aliases): it is reported with file and line, every other input is still linted and "
    "the report written, and the run exits 2 (cannot be skipped).",
    "Fix the syntax at the line given (often indentation, a tab, or an unclosed quote or bracket), or the "
    "permission or limit named (docs/lint.md, Limits).",
)
builtin(
    "KG010",
    E,
    "The object does not match the JSON schema of its kind for the chosen Kubernetes version "
    "(unknown field, wrong type, missing required field, an integer outside its int32/int64 range), or a "
    "workload or Pod has no spec (or spec: null), which the API server requires.",
    "Fix the field named in the message.",
)
builtin(
    "KG011",
    INFO,
    "No schema for this apiVersion/kind (a CRD): schema validation skipped.",
    "Pass --schema-location with the CRD's JSON schemas to validate it.",
)
builtin(
    "KG012",
    E,
    "A built-in API group/version that this Kubernetes version does not serve (e.g. batch/v1beta1 Job).",
    "Use the served apiVersion (batch/v1, apps/v1, policy/v1, ...).",
)

_LABEL_DNS = {"Namespace", "StatefulSet"}
_SERVICE = "Service"
_PATH_SEGMENT_ONLY = {"PodDisruptionBudget"}


@rule("KG020", E, "metadata.name is missing (and no generateName).", "Set metadata.name.")
def name_missing(doc: Any, ctx: Context) -> Iterator:
    meta = doc.metadata
    if (
        not meta.get("name")
        and not meta.get("generateName")
        and isinstance(doc.data, dict)
        and "kind" in doc.data
        and not doc.kind.endswith("List")
    ):
        yield ("metadata",), "metadata.name is missing; set a name (a DNS-1123 name: lower case, digits, '-')"


@rule(
    "KG021",
    E,
    "The object name breaks its kind's syntax: DNS-1123 subdomain for most kinds, "
    "DNS-1123 label for StatefulSet (since 1.27) and Namespace, path segment for PodDisruptionBudget.",
    "Use lower-case letters, digits and '-', starting and ending with a letter or digit.",
)
def object_name(doc: Any, ctx: Context) -> Iterator:
    name = doc.metadata.get("name")
    kind = doc.kind
    if not isinstance(name, str) or not name or kind == _SERVICE or not is_builtin_group(doc.api_version):
        return
    path = ("metadata", "name")
    if kind in _PATH_SEGMENT_ONLY:
        if name in (".", "..") or "/" in name or "%" in name:
            yield path, f"{kind} name {name!r} may not be '.' or '..' or contain '/' or '%'"
        return
    if kind in _LABEL_DNS and (kind != "StatefulSet" or ctx.minor >= 27):
        if not k8s.is_dns_label(name):
            yield (
                path,
                (
                    f"{kind} name {name!r} must be a DNS-1123 label (at most 63 characters, lower case, "
                    "digits and '-', no dots)"
                ),
            )
        return
    if not k8s.is_dns_subdomain(name):
        yield (
            path,
            (
                f"{kind} name {name!r} must be a DNS-1123 subdomain (lower case, digits, '-' and '.', "
                "alphanumeric at both ends, at most 253)"
            ),
        )


@rule(
    "KG022",
    E,
    "A Service name must be a DNS-1035 label (starts with a letter, at most 63) up to "
    "Kubernetes 1.35; from 1.36 (RelaxedServiceNameValidation) a DNS-1123 label (may start with a digit).",
    "Rename the Service, e.g. prefix a letter: 'train-7b' instead of '7b-train'.",
    kinds=["Service"],
)
def service_name(doc: Any, ctx: Context) -> Iterator:
    name = doc.metadata.get("name")
    if not isinstance(name, str) or not name:
        return
    if ctx.minor >= 36:
        if not k8s.is_dns_label(name):
            yield (
                ("metadata", "name"),
                (f"Service name {name!r} must be a DNS-1123 label (at most 63, lower case, digits and '-', no dots)"),
            )
    elif not k8s.is_dns1035_label(name):
        yield (
            ("metadata", "name"),
            (
                f"Service name {name!r} must be a DNS-1035 label on Kubernetes "
                f"{ctx.kubernetes_version} (start with a letter, at most 63, lower case, digits "
                "and '-', no dots)"
            ),
        )


@rule("KG023", E, "metadata.namespace must be a DNS-1123 label.", "Use lower case, digits and '-', at most 63.")
def namespace_name(doc: Any, ctx: Context) -> Iterator:
    ns = doc.metadata.get("namespace")
    if isinstance(ns, str) and ns and not k8s.is_dns_label(ns):
        yield (
            ("metadata", "namespace"),
            f"namespace {ns!r} must be a DNS-1123 label (lower case, digits, '-', at most 63)",
        )


def check_labels(labels: Any, path: tuple, what: str = "label") -> Iterator:
    if not isinstance(labels, dict):
        return
    for key, value in labels.items():
        problem = k8s.qualified_name_problem(key)
        if problem:
            yield path + (key,), f"{what} key {key!r} {problem}"
        problem = k8s.label_value_problem(value)
        if problem:
            yield path + (key,), f"{what} value {value!r} of {key!r} {problem}"


def label_sets(doc: Any) -> Iterator[tuple[Any, tuple, str]]:
    data = doc.data
    yield doc.metadata.get("labels"), ("metadata", "labels"), "label"
    spec = data.get("spec") if isinstance(data, dict) else None
    if isinstance(spec, dict):
        sel = spec.get("selector")
        if doc.kind in ("Service", "ReplicationController"):
            yield sel, ("spec", "selector"), "selector"
        elif isinstance(sel, dict):
            yield sel.get("matchLabels"), ("spec", "selector", "matchLabels"), "selector"
    for tpl, base in kinds.pod_templates(doc):
        if base:
            yield k8s.get(tpl, "metadata", "labels"), base + ("metadata", "labels"), "label"
    for spec, base in kinds.pod_specs(doc):
        yield spec.get("nodeSelector"), base + ("nodeSelector",), "nodeSelector"


@rule(
    "KG024",
    E,
    "Label keys must be qualified names ([DNS-subdomain/]name, name at most 63) and values at most "
    "63 characters of [A-Za-z0-9-_.] with alphanumeric ends; also selectors and nodeSelector.",
    "Shorten the value or replace '/', spaces and other characters with '-'.",
)
def labels(doc: Any, ctx: Context) -> Iterator:
    for values, path, what in label_sets(doc):
        yield from check_labels(values, path, what)


@rule(
    "KG025",
    E,
    "Annotation keys must be qualified names and all annotations together at most 256 KiB.",
    "Fix the key, or move large content into a ConfigMap.",
)
def annotation_keys_and_size(doc: Any, ctx: Context) -> Iterator:
    ann = doc.metadata.get("annotations")
    if not isinstance(ann, dict):
        return
    total = 0
    for key, value in ann.items():
        problem = k8s.qualified_name_problem(key)
        if problem:
            yield ("metadata", "annotations", key), f"annotation key {key!r} {problem}"
        total += len(str(key).encode()) + len(str(value if value is not None else "").encode())
    if total > 256 * 1024:
        yield (
            ("metadata", "annotations"),
            f"annotations total {total} bytes, more than 256 KiB; move data to a ConfigMap",
        )


@rule(
    "KG026",
    W,
    "Objects over 256 KiB fail client-side `kubectl apply` (the last-applied-configuration "
    "annotation copies the whole object).",
    "Use `kubectl apply --server-side` or `kubectl create`, or split the data.",
)
def object_too_big_for_apply(doc: Any, ctx: Context) -> Iterator:
    if doc.kind not in ("ConfigMap", "Secret"):
        return
    rough = sum(
        len(v)
        for key in ("data", "binaryData", "stringData")
        if isinstance(doc.data.get(key), dict)
        for v in doc.data[key].values()
        if isinstance(v, str)
    )
    if rough < 192 * 1024:
        return  # the metadata cannot make up the rest
    size = len(json.dumps(doc.data, separators=(",", ":"), default=str).encode())
    if size > 256 * 1024:
        yield (
            ("metadata", "name"),
            (
                f"object is {size // 1024} KiB: client-side `kubectl apply` fails above "
                "256 KiB; use `kubectl apply --server-side` or `kubectl create`"
            ),
        )


@rule(
    "KG027",
    W,
    "The same object (API group, kind, namespace, name) appears twice among the linted inputs: `kubectl apply` "
    "applies both and the later silently replaces the earlier.",
    "Keep one definition (or give the copies different names or namespaces).",
    scope="stream",
)
def duplicate_objects(docs: list, ctx: Context) -> Iterator:
    seen: dict[tuple, Any] = {}
    for doc in docs:
        if not doc.name or not doc.kind:
            continue
        group = doc.api_version.rpartition("/")[0] if "/" in doc.api_version else ""
        key = (group, doc.kind, doc.namespace, doc.name)
        first = seen.setdefault(key, doc)
        if first is not doc:
            where = f"{first.file}:{first.line}" if first.line else first.file
            yield (
                doc,
                ("metadata", "name"),
                f"{doc.kind} {doc.name!r} is also defined at {where}; kubectl apply keeps only the later one",
            )
