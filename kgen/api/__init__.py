"""The render entry points of kgen 0.1, kept for code that imports them from here.

They live in ``kgen.render``; ``kgen.api.render(request)`` still returns the manifest text (it is
``kgen.render.pipeline.manifest_text``; kgen's API is ``kgen.render``, which returns a RenderResult). (A package
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
    manifest_text,
    render_cautions,
    render_checked,
    render_documents,
    render_notes,
    render_with_warnings,
    self_check_hint,
    stderr_lines,
    warning_line,
)

render = manifest_text  # kgen 0.1's name

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
