"""The trainer's environment from the values: ``env`` entries that reference a Secret, a
ConfigMap, a pod field or a resource (``valueFrom``), and ``envFrom`` sources, checked the way the API
server checks them (``ValidateEnv``/``validateEnvVarValueFrom``/``ValidateEnvFrom`` in
pkg/apis/core/validation/validation.go), so a mistake is one line at render time naming the values key,
not a rejected object at ``kubectl apply``.

Pure functions: they return the entry as it is rendered, or raise EnvProblem (kgen.render.validate names the layer).
"""

from __future__ import annotations

import re
from typing import Any

from kgen.k8s import (
    ENV_FIELD_PATH_SUBSCRIPTED,
    ENV_FIELD_PATHS,
    ENV_VAR_NAME,
    is_configmap_key,
    is_dns_subdomain,
    is_env_field_path,
    parse_quantity,
)

# valueFrom sources and their fields: (field, required, type). Types: "str", "bool", "quantity".
SOURCES: dict[str, tuple[tuple[str, bool, str], ...]] = {
    "secretKeyRef": (("name", True, "str"), ("key", True, "str"), ("optional", False, "bool")),
    "configMapKeyRef": (("name", True, "str"), ("key", True, "str"), ("optional", False, "bool")),
    "fieldRef": (("fieldPath", True, "str"), ("apiVersion", False, "str")),
    "resourceFieldRef": (("resource", True, "str"), ("containerName", False, "str"), ("divisor", False, "quantity")),
}
EXAMPLES = {
    "secretKeyRef": "{secretKeyRef: {name: hf-token, key: token}}",
    "configMapKeyRef": "{configMapKeyRef: {name: train-config, key: lr}}",
    "fieldRef": "{fieldRef: {fieldPath: status.podIP}}",
    "resourceFieldRef": "{resourceFieldRef: {resource: limits.memory, divisor: 1Mi}}",
}
# resourceFieldRef.resource in a container's env (validContainerResourceFieldPathExpressions + hugepages).
RESOURCES = tuple(f"{side}.{r}" for side in ("limits", "requests") for r in ("cpu", "memory", "ephemeral-storage"))
ENV_FROM_SOURCES = ("configMapRef", "secretRef")


class EnvProblem(Exception):
    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message, self.hint = message, hint


def _did_you_mean(word: str, choices: list[str] | tuple[str, ...]) -> str:
    import difflib

    near = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {near[0]}?)" if near else ""


def _bool(value: Any, at: str) -> bool:
    """true/false (a values file gives every scalar as written; a Python caller may give a bool)."""
    if isinstance(value, bool):
        return value
    if value in ("true", "True", "TRUE", "false", "False", "FALSE"):
        return value.lower() == "true"
    raise EnvProblem(f"{at}: must be true or false, got {value!r}")


def value_from(name: str, entry: Any, containers: set[str]) -> dict:
    """``NAME: {valueFrom: {...}}`` -> the ``valueFrom`` mapping to render; ``containers`` are the pod's
    container names (resourceFieldRef.containerName must be one of them)."""
    where = f"{name}: "
    if not isinstance(entry, dict) or set(entry) != {"valueFrom"}:
        keys = ", ".join(map(str, entry)) if isinstance(entry, dict) else type(entry).__name__
        raise EnvProblem(
            f"{where}must be a string or a mapping with only valueFrom, got {keys}",
            hint=f"e.g. {name}: {{valueFrom: {EXAMPLES['secretKeyRef']}}}",
        )
    source = entry["valueFrom"]
    names = list(SOURCES)
    if not isinstance(source, dict) or len(source) != 1 or next(iter(source)) not in SOURCES:
        got = ", ".join(map(str, source)) if isinstance(source, dict) and source else repr(source)
        near = _did_you_mean(str(next(iter(source))), names) if isinstance(source, dict) and len(source) == 1 else ""
        raise EnvProblem(
            f"{where}valueFrom must name exactly one of {', '.join(names)}; got {got}{near}",
            hint=f"e.g. valueFrom: {EXAMPLES['secretKeyRef']}",
        )
    kind, ref = next(iter(source.items()))
    at = f"{where}valueFrom.{kind}"
    fields = {f: (req, typ) for f, req, typ in SOURCES[kind]}
    if not isinstance(ref, dict):
        raise EnvProblem(f"{at}: must be a mapping, got {ref!r}", hint=f"e.g. valueFrom: {EXAMPLES[kind]}")
    for key in ref:
        if key not in fields:
            raise EnvProblem(
                f"{at}: unknown field {key}{_did_you_mean(str(key), list(fields))}; it takes {', '.join(fields)}",
                hint=f"e.g. valueFrom: {EXAMPLES[kind]}",
            )
    for key, (required, typ) in fields.items():
        if key not in ref or ref[key] is None:
            if required:
                raise EnvProblem(f"{at}: needs {key}", hint=f"e.g. valueFrom: {EXAMPLES[kind]}")
            continue
        value = ref[key]
        if typ == "bool":
            value = ref[key] = _bool(value, f"{at}.{key}")
        if typ == "str" and (not isinstance(value, str) or not value):
            raise EnvProblem(f"{at}.{key}: must be a non-empty string, got {value!r}")
        if typ == "quantity" and (isinstance(value, bool) or parse_quantity(str(value)) in (None, 0)):
            raise EnvProblem(f"{at}.{key}: must be a quantity > 0 such as 1Mi or 1m, got {value!r}")
    _check_source(kind, ref, at, containers)
    out = {k: ref[k] for k in fields if k in ref and ref[k] is not None}
    if "divisor" in out:
        out["divisor"] = str(out["divisor"])
    return {kind: out}


def _check_source(kind: str, ref: dict, at: str, containers: set[str]) -> None:
    if kind in ("secretKeyRef", "configMapKeyRef"):
        what = "Secret" if kind == "secretKeyRef" else "ConfigMap"
        if not is_dns_subdomain(ref["name"]):
            raise EnvProblem(f'{at}.name: must be a {what} name (a DNS subdomain), got "{ref["name"]}"')
        key = ref["key"]
        if not is_configmap_key(key):
            raise EnvProblem(f'{at}.key: must be a {what} key (letters, digits, "-", "_", "."), got "{key}"')
    elif kind == "fieldRef":
        path = ref["fieldPath"]
        sub = ENV_FIELD_PATH_SUBSCRIPTED.fullmatch(path)
        if sub and not is_env_field_path(path):
            raise EnvProblem(f'{at}.fieldPath: "{sub[2]}" in "{path}" is not a valid {sub[1][:-1]} key')
        if not is_env_field_path(path):
            raise EnvProblem(
                f'{at}.fieldPath: "{path}" is not a field env can read{_did_you_mean(path, ENV_FIELD_PATHS)}',
                hint=f"one of {', '.join(ENV_FIELD_PATHS)}, metadata.labels['KEY'] or metadata.annotations['KEY']",
            )
        if ref.get("apiVersion", "v1") != "v1":
            raise EnvProblem(f'{at}.apiVersion: must be v1, got "{ref["apiVersion"]}"')
    else:
        resource = ref["resource"]
        if resource not in RESOURCES and not re.fullmatch(r"(limits|requests)\.hugepages-[0-9A-Za-z]+", resource):
            raise EnvProblem(
                f'{at}.resource: "{resource}" is not a resource env can read{_did_you_mean(resource, RESOURCES)}',
                hint=f"one of {', '.join(RESOURCES)}",
            )
        container = ref.get("containerName")
        if container is not None and container not in containers:
            raise EnvProblem(
                f'{at}.containerName: "{container}" is no container of the pod',
                hint=f"one of {', '.join(sorted(containers))}, or leave it out for the trainer itself",
            )


def env_from(items: list) -> list[dict]:
    """``envFrom`` entries: exactly one of configMapRef/secretRef (with a name), an optional prefix."""
    out = []
    for i, item in enumerate(items):
        at = f"[{i}]"
        sources = [k for k in ENV_FROM_SOURCES if k in item]
        extra = [k for k in item if k not in (*ENV_FROM_SOURCES, "prefix")]
        if extra:
            raise EnvProblem(
                f"{at}: unknown field {extra[0]}{_did_you_mean(str(extra[0]), [*ENV_FROM_SOURCES, 'prefix'])}",
                hint="e.g. envFrom: [{secretRef: {name: hf-token}}]",
            )
        if len(sources) != 1:
            raise EnvProblem(
                f"{at}: needs exactly one of configMapRef, secretRef, got {', '.join(sources) or 'neither'}",
                hint="e.g. envFrom: [{secretRef: {name: hf-token}}, {configMapRef: {name: train-env}}]",
            )
        ref = item[sources[0]]
        what = "Secret" if sources[0] == "secretRef" else "ConfigMap"
        if not isinstance(ref, dict) or not set(ref) <= {"name", "optional"}:
            raise EnvProblem(f"{at}.{sources[0]}: takes name and optional, got {ref!r}")
        if not isinstance(ref.get("name"), str) or not is_dns_subdomain(ref["name"]):
            got = ref.get("name")
            raise EnvProblem(f"{at}.{sources[0]}.name: must be a {what} name (a DNS subdomain), got {got!r}")
        if "optional" in ref:
            _bool(ref["optional"], f"{at}.{sources[0]}.optional")
        prefix = item.get("prefix")
        if prefix is not None and (not isinstance(prefix, str) or not ENV_VAR_NAME.match(prefix)):
            raise EnvProblem(f"{at}.prefix: must be a valid environment variable name prefix, got {prefix!r}")
        out.append(item)
    return out
