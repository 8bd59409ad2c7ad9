"""Schema validation of one document as findings: the bundled schemas of one Kubernetes version,
``--schema-location`` schemas for CRDs, and the specs the API server requires although the OpenAPI
schemas mark them optional (KG010, KG002, KG011, KG012).

Both engines use it: the builtin one for every document, ``--engine kubeconform`` for the kinds it
tells kubeconform to skip (and for files kubeconform cannot read).
"""

from __future__ import annotations

from typing import Any

from kgen.findings import Finding, Severity


class SchemaCheck:
    """The schema stores of one run (version and strictness checked once)."""

    __slots__ = ("version", "bundled", "user")

    def __init__(self, version: str, strict: bool, schema_location: str | None) -> None:
        from kgen import schema

        self.version = version
        self.bundled = schema.bundled(version, strict)
        self.user = schema.UserSchemas(schema_location, version, strict) if schema_location else None

    def has_schema(self, doc: Any) -> bool:
        if self.bundled.validator(doc.api_version, doc.kind) is not None:
            return True
        return self.user is not None and self.user.validator(doc.api_version, doc.kind) is not None

    def findings(self, doc: Any) -> list[Finding]:
        from kgen import schema

        api, kind = doc.api_version, doc.kind
        v = self.bundled.validator(api, kind)
        if v is not None:
            return schema_errors_to_findings(doc, v.validate(doc.data), self.version)
        if self.user is not None:
            uv = self.user.validator(api, kind)
            if uv is not None:
                return schema_errors_to_findings(doc, self.user.errors(uv[1], doc.data))
        if schema.is_builtin_group(api):
            return [
                doc.finding(
                    "KG012",
                    Severity.ERROR,
                    f"Kubernetes {self.version} serves no {api} {kind}; check apiVersion and kind "
                    "(e.g. batch/v1 Job, apps/v1 StatefulSet, policy/v1 PodDisruptionBudget)",
                    ("kind",),
                )
            ]
        return [
            doc.finding(
                "KG011",
                Severity.INFO,
                f"no schema for {api} {kind}: schema validation skipped (pass --schema-location to validate it)",
                ("kind",),
            )
        ]


def schema_errors_to_findings(doc: Any, errors: list, version: str = "") -> list[Finding]:
    out = []
    for path, message in errors:
        if message == "missing required field 'status'" and len(path) >= 2 and path[-2] == "onPodConditions":
            continue  # validation.md §D #47: defaulted to "True" by the server; KG067 warns instead
        rule_id = "KG010"
        node = doc.scalar_at(path) if message.startswith("expected string") else None
        if node is not None and node.style == "" and node.tag == "!kgen-plain":
            from kgen.lint.parse import YAML11_BOOLS  # a node tree means PyYAML is loaded already

            if node.value in YAML11_BOOLS:
                rule_id = "KG002"
                why = "" if node.value.lower() in ("true", "false") else " (YAML 1.1)"
                message = (
                    f"unquoted {node.value} is a boolean for kubectl{why} but this field is a string; "
                    f'quote it: "{node.value}"'
                )
            else:
                message = f'{message}; quote it: "{node.value}"'
        elif version and (message.startswith("unknown field") or message.startswith("missing required")):
            message = f"{message} ({doc.kind} schema, Kubernetes {version})"
        out.append(doc.finding(rule_id, Severity.ERROR, message, path))
    return out


# Built-in kinds whose spec the API server requires (its validation needs spec.containers, spec.template,
# spec.selector, spec.jobTemplate), although the OpenAPI schemas mark spec optional.
_SPEC_REQUIRED = {
    "v1": {"Pod": "spec.containers"},
    "batch/v1": {"Job": "spec.template", "CronJob": "spec.schedule and spec.jobTemplate"},
    "apps/v1": {
        "StatefulSet": "spec.selector and spec.template",
        "Deployment": "spec.selector and spec.template",
        "DaemonSet": "spec.selector and spec.template",
        "ReplicaSet": "spec.selector and spec.template",
    },
}


def missing_spec(doc: Any) -> str | None:
    """The KG010 message for a workload with no spec (or ``spec: null``), else None."""
    needs = _SPEC_REQUIRED.get(doc.api_version, {}).get(doc.kind)
    if needs is None or not isinstance(doc.data, dict) or doc.data.get("spec") is not None:
        return None
    what = "is null" if "spec" in doc.data else "is missing"
    return f"spec {what}: the API server rejects a {doc.kind} without {needs}; add the spec"
