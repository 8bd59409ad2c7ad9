"""kgen's Python API: one typed function per kgen command, and the dataclasses they take and return.

    from kgen import render, lint, RenderRequest, LintRequest     # kgen/__init__.py loads this package lazily
    result = render(RenderRequest(preset="4x8", name="llama", command=["train.py"]))
    report = lint(LintRequest(["deploy/"]))

The CLI (kgen.cli) calls exactly these functions; docs/api.md shows each with an example a test runs.
"""

from kgen.render.request import RenderRequest, RenderResult
from kgen.sdk.manifests import (
    LintRequest,
    entrypoint_path,
    lint,
    lint_rules,
    preset,
    presets,
    render,
    values_reference,
)
from kgen.sdk.runs import (
    LaunchRequest,
    ListRequest,
    LogsRequest,
    RunList,
    RunRef,
    RunStatus,
    StatusUpdate,
    StopRequest,
    StopResult,
    SubmitRequest,
    SubmitResult,
    check_submit,
    launch,
    list_runs,
    logs,
    status,
    stop,
    submit,
    watch,
)

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
    "StopRequest",
    "StopResult",
    "SubmitRequest",
    "SubmitResult",
    "check_submit",
    "entrypoint_path",
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
