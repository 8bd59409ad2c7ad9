"""Kubernetes facts that render and lint share: name syntax, quantities, env names, pod templates.

A leaf: render (kgen.render.validate, envvars, selfcheck, slurmkind) and lint's rules import it, so both
hold one definition of Kubernetes syntax; it imports no room of kgen."""

from __future__ import annotations

import re
from collections.abc import Iterator
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from typing import Any

# util/validation/validation.go. Anchored with \Z, not $: `$` also matches before a final newline, and a name
# "ml\n" must not pass (the API server refuses it).
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?\Z")
QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]\Z")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?\Z")
IANA_SVC_NAME = re.compile(r"^[-a-z0-9]+\Z")
ENV_VAR_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*\Z")
CONFIGMAP_KEY = re.compile(r"^[-._a-zA-Z0-9]+\Z")
# What env can read through valueFrom.fieldRef (pkg/apis/core/validation: validEnvDownwardAPIFieldPathExpressions),
# and the subscripted forms metadata.labels['KEY'] / metadata.annotations['KEY'] (render and lint share them).
ENV_FIELD_PATHS = (
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "spec.serviceAccountName",
    "status.hostIP",
    "status.hostIPs",
    "status.podIP",
    "status.podIPs",
)
ENV_FIELD_PATH_SUBSCRIPTED = re.compile(r"metadata\.(labels|annotations)\['([^']+)'\]")


def is_env_field_path(path: Any) -> bool:
    """Whether env's valueFrom.fieldRef.fieldPath may be ``path``."""
    if not isinstance(path, str):
        return False
    if path in ENV_FIELD_PATHS:
        return True
    m = ENV_FIELD_PATH_SUBSCRIPTED.fullmatch(path)
    # the key in brackets is a label/annotation key (validateObjectFieldSelector: ValidateQualifiedName; an
    # annotation key lower-cased first)
    return m is not None and qualified_name_problem(m[2].lower() if m[1] == "annotations" else m[2]) is None


def is_configmap_key(value: Any) -> bool:
    """A ConfigMap or Secret key (IsConfigMapKey): at most 253 of [-._a-zA-Z0-9], not `.`, `..` or `..x`."""
    return (
        isinstance(value, str)
        and len(value) <= 253
        and bool(CONFIGMAP_KEY.match(value))
        and value != "."
        and not value.startswith("..")
    )


# An image reference as the kubelet parses it (distribution/reference's grammar, ParseNormalizedNamed):
# [domain[:port]/]path[/path...][:tag][@digest], path components lower case; anything else fails the pod
# with InvalidImageName.
_IMAGE_PATH = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IMAGE_DOMAIN_PART = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_IMAGE_DOMAIN = rf"(?:{_IMAGE_DOMAIN_PART}(?:\.{_IMAGE_DOMAIN_PART})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?"
IMAGE_REFERENCE = re.compile(
    rf"(?P<name>(?:{_IMAGE_DOMAIN}/)?{_IMAGE_PATH}(?:/{_IMAGE_PATH})*)"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?"
)
_IMAGE_ID = re.compile(r"[a-f0-9]{64}")


@lru_cache(maxsize=4096)
def is_image_reference(value: str) -> bool:
    """Whether the kubelet can parse ``value`` as an image reference (name at most 255 characters, not a
    bare 64-hex image id)."""
    m = IMAGE_REFERENCE.fullmatch(value) if len(value) <= 4096 else None
    return m is not None and len(m.group("name")) <= 255 and not _IMAGE_ID.fullmatch(m.group("name"))


def is_dns_label(value: Any) -> bool:
    return isinstance(value, str) and len(value) <= 63 and bool(DNS1123_LABEL.match(value))


def is_dns_subdomain(value: Any) -> bool:
    return isinstance(value, str) and len(value) <= 253 and bool(DNS1123_SUBDOMAIN.match(value))


def is_dns1035_label(value: Any) -> bool:
    return isinstance(value, str) and len(value) <= 63 and bool(DNS1035_LABEL.match(value))


def qualified_name_problem(key: Any) -> str | None:
    """Why ``key`` is not a valid label/annotation key (``[prefix/]name``), or None."""
    if not isinstance(key, str) or not key:
        return "must be a non-empty string"
    return _qualified_name_problem(key)


@lru_cache(maxsize=4096)
def _qualified_name_problem(key: str) -> str | None:
    prefix, slash, name = key.rpartition("/")
    if slash and not prefix:
        return "prefix before '/' must not be empty"
    if prefix and not is_dns_subdomain(prefix):
        return f"prefix {prefix!r} must be a DNS subdomain (lower case, digits, '-', '.', at most 253)"
    if "/" in prefix:
        return "may contain at most one '/'"
    if len(name) > 63:
        return f"name part is {len(name)} characters, at most 63 allowed"
    if not QUALIFIED_NAME.match(name):
        return "name part must be alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
    return None


def label_value_problem(value: Any) -> str | None:
    if not isinstance(value, str):
        return None  # None is fine; the schema reports other types
    return _label_value_problem(value)


@lru_cache(maxsize=4096)
def _label_value_problem(value: str) -> str | None:
    if len(value) > 63:
        return f"is {len(value)} characters, at most 63 allowed"
    if not LABEL_VALUE.match(value):
        return "must be empty or alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
    return None


def iana_port_name_problem(name: str) -> str | None:
    """util/validation IsValidPortName: <=15, [-a-z0-9], >=1 letter, no '--', no edge '-'."""
    if len(name) > 15:
        return f"is {len(name)} characters, at most 15 allowed"
    if not IANA_SVC_NAME.match(name):
        return "may contain only lower-case letters, digits and '-'"
    if not re.search(r"[a-z]", name):
        return "must contain at least one letter"
    if "--" in name:
        return "must not contain '--'"
    if name.startswith("-") or name.endswith("-"):
        return "must not begin or end with '-'"
    return None


# --- quantities (apimachinery resource.Quantity) ---------------------------------------------

_QUANTITY = re.compile(
    r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?$"
)
_SUFFIX = {
    None: Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}


def parse_quantity(value: Any) -> Decimal | None:
    """The quantity's value, or None if the syntax is invalid (``512GB``, ``1.5 Gi``)."""
    if isinstance(value, str):
        return _parse_quantity_text(value)
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        try:
            q = Decimal(str(value))
        except InvalidOperation:
            return None
        return q if q.is_finite() else None
    return None


@lru_cache(maxsize=1024)
def _parse_quantity_text(value: str) -> Decimal | None:
    m = _QUANTITY.match(value)
    if not m:
        return None
    number, suffix = m.group(1), m.group(2)
    try:
        base = Decimal(number)
        if suffix and suffix[0] in "eE":
            return base * (Decimal(10) ** int(suffix[1:]))
        return base * _SUFFIX[suffix]
    except (InvalidOperation, OverflowError):
        return None


# --- objects ----------------------------------------------------------------------------------

POD_TEMPLATE_PATHS = {
    "Job": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "Deployment": ("spec", "template"),
    "ReplicaSet": ("spec", "template"),
    "DaemonSet": ("spec", "template"),
    "ReplicationController": ("spec", "template"),
    "PodTemplate": ("template",),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
    # The first replicatedJob's pod template (kgen renders one; rules_jobset checks all of them).
    "JobSet": ("spec", "replicatedJobs", 0, "template", "spec", "template"),
}


def get(data: Any, *path: Any) -> Any:
    for step in path:
        if step.__class__ is str:  # most steps: a key (the same answer as below, with one check)
            if not isinstance(data, dict):
                return None
            data = data.get(step)
        elif isinstance(step, int):
            if not isinstance(data, list) or not -len(data) <= step < len(data):
                return None
            data = data[step]
        elif not isinstance(data, dict):
            return None
        else:
            data = data.get(step)
    return data


def pod_template(doc: Any) -> tuple[dict, tuple] | None:
    """(pod template dict, its path) of a workload, or (the Pod itself, ()) for a Pod."""
    memo = doc.memo
    if "pod_template" not in memo:
        memo["pod_template"] = _pod_template(doc)
    return memo["pod_template"]


def _pod_template(doc: Any) -> tuple[dict, tuple] | None:
    data = doc.data
    if doc.kind == "Pod":
        return (data, ()) if isinstance(data, dict) else None
    path = POD_TEMPLATE_PATHS.get(doc.kind)
    if path is None:
        return None
    tpl = get(data, *path)
    return (tpl, path) if isinstance(tpl, dict) else None


def pod_spec(doc: Any) -> tuple[dict, tuple] | None:
    memo = doc.memo
    if "pod_spec" not in memo:
        memo["pod_spec"] = _pod_spec(doc)
    return memo["pod_spec"]


def _pod_spec(doc: Any) -> tuple[dict, tuple] | None:
    found = pod_template(doc)
    if found is None:
        return None
    tpl, path = found
    spec = tpl.get("spec")
    return (spec, path + ("spec",)) if isinstance(spec, dict) else None


def containers(spec: dict, base: tuple, init: bool = True) -> Iterator[tuple[dict, tuple]]:
    keys = ("initContainers", "containers") if init else ("containers",)
    for key in keys:
        items = spec.get(key)
        if isinstance(items, list):
            for i, c in enumerate(items):
                if isinstance(c, dict):
                    yield c, base + (key, i)


def template_labels(doc: Any) -> dict:
    found = pod_template(doc)
    if found is None:
        return {}
    labels = get(found[0], "metadata", "labels")
    return labels if isinstance(labels, dict) else {}


_UNKNOWABLE = {"controller-uid", "batch.kubernetes.io/controller-uid", "controller-revision-hash"}


def selector_scope(selector: dict, doc: Any) -> str:
    """Which pods of workload ``doc`` a Service selector selects: 'all', 'pod0' (only pod 0, through
    the per-pod labels the controllers add), 'some' (another single pod) or 'none'."""
    if not selector:
        return "none"
    labels = template_labels(doc)
    name = doc.name
    common = {"job-name": name, "batch.kubernetes.io/job-name": name} if doc.kind == "Job" else {}
    pinned = None
    for key, value in selector.items():
        if labels.get(key) == value or common.get(key, object()) == value or key in _UNKNOWABLE:
            continue
        index = None
        if doc.kind == "Job" and key == "batch.kubernetes.io/job-completion-index":
            index = value
        elif doc.kind == "StatefulSet" and key == "apps.kubernetes.io/pod-index":
            index = value
        elif (
            doc.kind == "StatefulSet"
            and key == "statefulset.kubernetes.io/pod-name"
            and isinstance(value, str)
            and value.startswith(f"{name}-")
        ):
            index = value[len(name) + 1 :]
        if not isinstance(index, str) or not index.isdigit():
            return "none"
        pinned = index if pinned in (None, index) else "conflict"
    if pinned is None:
        return "all"
    return "pod0" if pinned in ("0",) else ("none" if pinned == "conflict" else "some")


def selector_matches(selector: dict, labels: dict) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def gpu_limit(container: dict) -> int:
    """GPUs (any ``*/gpu`` extended resource) a container asks for: limit, else request."""
    res = container.get("resources")
    if not isinstance(res, dict):
        return 0
    total = 0
    for section in ("limits", "requests"):
        values = res.get(section)
        if isinstance(values, dict):
            found = 0
            for name, value in values.items():
                if isinstance(name, str) and name.endswith("/gpu"):
                    q = parse_quantity(value)
                    if q is not None:
                        found += int(q)
            if found:
                return found
    return total


def env_list(container: dict) -> list:
    env = container.get("env")
    return env if isinstance(env, list) else []


def env_value(container: dict, name: str) -> tuple[int, Any] | None:
    """(index, literal value) of the last env entry ``name`` (value None when valueFrom)."""
    found = None
    for i, e in enumerate(env_list(container)):
        if isinstance(e, dict) and e.get("name") == name:
            found = (i, e.get("value"))
    return found
