"""The render entry points of kgen 0.1, kept for code that imports them from here.

They live in ``kgen.render``; ``kgen.api.render(request)`` still returns the manifest text. (A package
rather than kgen/api.py, so that git follows that file to kgen/render/pipeline.py.)
"""

from kgen.render.pipeline import (
    FLAG_NAMES,
    SHAPE_KEYS,
    Checked,
    RenderRequest,
    RenderResult,
    base_preset,
    build,
    check_rendered,
    render,
    render_cautions,
    render_checked,
    render_documents,
    render_notes,
    render_with_warnings,
    self_check_hint,
    stderr_lines,
    warning_line,
)

__all__ = [
    "FLAG_NAMES",
    "SHAPE_KEYS",
    "Checked",
    "RenderRequest",
    "RenderResult",
    "base_preset",
    "build",
    "check_rendered",
    "render",
    "render_cautions",
    "render_checked",
    "render_documents",
    "render_notes",
    "render_with_warnings",
    "self_check_hint",
    "stderr_lines",
    "warning_line",
]
