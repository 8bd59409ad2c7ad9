"""kgen's Python API: one typed function per kgen command, and the dataclasses they take and return.

    from kgen import render, lint, RenderRequest, LintRequest     # kgen/__init__.py loads this package lazily
    result = render(RenderRequest(preset="4x8", name="llama", command=["train.py"]))
    report = lint(LintRequest(["deploy/"]))

The CLI (kgen.cli) calls exactly these functions; docs/api.md shows each with an example a test runs.
Each name loads its module on first use (PEP 562): `kgen render` never loads the run verbs, `kgen status`
never the render pipeline.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kgen.render.request import (
        RenderRequest,
        RenderResult,
    )
    from kgen.sdk.launching import LaunchRequest, launch
    from kgen.sdk.manifests import (
        LintRequest,
        entrypoint_path,
        entrypoint_where,
        lint,
        lint_rules,
        preset,
        presets,
        render,
        values_reference,
    )
    from kgen.sdk.runs import (
        ListRequest,
        LogsRequest,
        RunList,
        RunRef,
        RunStatus,
        StatusUpdate,
        StopReport,
        StopRequest,
        StopResult,
        SubmitRequest,
        SubmitResult,
        check_submit,
        list_runs,
        logs,
        status,
        stop,
        submit,
        watch,
    )

_HOME = {
    "RenderRequest": "kgen.render.request",
    "RenderResult": "kgen.render.request",
    "LintRequest": "kgen.sdk.manifests",
    "entrypoint_path": "kgen.sdk.manifests",
    "entrypoint_where": "kgen.sdk.manifests",
    "lint": "kgen.sdk.manifests",
    "lint_rules": "kgen.sdk.manifests",
    "preset": "kgen.sdk.manifests",
    "presets": "kgen.sdk.manifests",
    "render": "kgen.sdk.manifests",
    "values_reference": "kgen.sdk.manifests",
    "LaunchRequest": "kgen.sdk.launching",
    "ListRequest": "kgen.sdk.runs",
    "LogsRequest": "kgen.sdk.runs",
    "RunList": "kgen.sdk.runs",
    "RunRef": "kgen.sdk.runs",
    "RunStatus": "kgen.sdk.runs",
    "StatusUpdate": "kgen.sdk.runs",
    "StopReport": "kgen.sdk.runs",
    "StopRequest": "kgen.sdk.runs",
    "StopResult": "kgen.sdk.runs",
    "SubmitRequest": "kgen.sdk.runs",
    "SubmitResult": "kgen.sdk.runs",
    "check_submit": "kgen.sdk.runs",
    "launch": "kgen.sdk.launching",
    "list_runs": "kgen.sdk.runs",
    "logs": "kgen.sdk.runs",
    "status": "kgen.sdk.runs",
    "stop": "kgen.sdk.runs",
    "submit": "kgen.sdk.runs",
    "watch": "kgen.sdk.runs",
}
__all__ = [
    "LaunchRequest",
    "LintRequest",
    "ListRequest",
    "LogsRequest",
    "RenderRequest",
    "RenderResult",
    "RunList",
    "RunRef",
    "RunStatus",
    "StatusUpdate",
    "StopReport",
    "StopRequest",
    "StopResult",
    "SubmitRequest",
    "SubmitResult",
    "check_submit",
    "entrypoint_path",
    "entrypoint_where",
    "launch",
    "lint",
    "lint_rules",
    "list_runs",
    "logs",
    "preset",
    "presets",
    "render",
    "status",
    "stop",
    "submit",
    "values_reference",
    "watch",
]


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'kgen.sdk' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
