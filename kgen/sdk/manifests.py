"""The manifest verbs as library functions: `kgen render`, `kgen lint` (and its rule list), `kgen values`,
`kgen presets list|show`, `kgen entrypoint`. Typed requests in, typed results out; nothing printed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kgen.render.request import RenderRequest, RenderResult
from kgen.versions import DEFAULT_KUBERNETES_VERSION

if TYPE_CHECKING:
    from kgen.lint.api import LintResult
    from kgen.lint.registry import Rule
    from kgen.render.presets import Preset


def render(request: RenderRequest | None = None) -> RenderResult:
    """`kgen render`: the manifest text (``request.output_format``: yaml, or json, a kubectl List), its
    documents, and what kgen says about it on stderr (warnings, notes, cautions). Bad input raises
    kgen.errors.KgenError (a UsageError names the option or the values file and key); the self-check's
    errors raise RenderError. A launcher as the command raises NestedLauncherError, with the command to
    use instead."""
    from kgen.render.pipeline import render_with_warnings

    return render_with_warnings(request if request is not None else RenderRequest())


@dataclass(frozen=True)
class LintRequest:
    """`kgen lint`: ``paths`` (files, folders, "-" for stdin) checked against
    ``kubernetes_version``'s schemas and kgen's rules. ``skip``: rule ids (comma lists allowed, any case);
    ``strict``: warnings fail too; ``engine``: builtin or kubeconform (on PATH); ``schema_location``:
    schemas for CRDs; ``explain``: how lint reads each training workload (KG137 info); ``exclude``:
    .gitignore-like globs; ``unit``: what the cross-document rules see together (``dir``: each folder's own
    files and a kustomization's resources; ``file``; ``tree``: everything given, docs/lint.md "Apply units")."""

    paths: Sequence[str] = ()
    kubernetes_version: str = DEFAULT_KUBERNETES_VERSION
    skip: Sequence[str] = ()
    strict: bool = False
    engine: str = "builtin"
    schema_location: str | None = None
    explain: bool = False
    exclude: Sequence[str] = ()
    unit: str = "dir"
    # objects in memory (dicts, as yaml.safe_load or render(...).documents give them) instead of paths: linted
    # as one unit named "<documents>", with field paths and no line numbers
    documents: Sequence[Any] | None = None


def lint(request: LintRequest | None = None, *, documents: Sequence[Any] | None = None) -> LintResult:
    """Lint manifests offline: kgen.lint.api.LintResult (``findings``, ``exit_code`` 0 clean, 1 failing
    findings, 2 unreadable or unparsable input, ``skipped`` files that are no manifests). A file that is
    not valid YAML is a KG004 finding, not an exception; a missing file, an unknown version, engine or
    rule id raise kgen.errors.KgenError. ``documents`` (here or in the request) lints objects in memory:
    render -> modify -> lint needs no temporary file."""
    from kgen.errors import UsageError
    from kgen.lint.api import LintOptions, lint_documents, lint_paths

    request = request if request is not None else LintRequest()
    if documents is not None:
        if request.documents is not None:
            raise UsageError("documents given twice: pass them to lint() or to LintRequest, not both")
        request = replace(request, documents=documents)

    skip = frozenset(s.strip() for item in request.skip for s in item.split(",") if s.strip())
    options = LintOptions(
        kubernetes_version=request.kubernetes_version,
        skip=skip,
        engine=request.engine,
        schema_location=request.schema_location,
        fail_on_warnings=request.strict,
        explain=request.explain,
        exclude=tuple(request.exclude),
        unit=request.unit,
    )
    if request.documents is not None:
        if request.paths:
            raise UsageError("lint takes paths or documents, not both: lint them in two calls")
        if isinstance(request.documents, (str, bytes, dict)):
            raise UsageError("documents must be a list of objects (dicts), e.g. documents=[job, service]")
        return lint_documents(list(request.documents), "<documents>", options)
    if not request.paths:
        raise UsageError("nothing to lint: give paths (files, folders, '-') or documents=[...]")
    return lint_paths(list(request.paths), options)


def lint_rules() -> list[Rule]:
    """`kgen lint --list-rules`: every rule (id, severity, summary, fix), by id."""
    from kgen.lint.registry import load_rules

    return sorted(load_rules().values(), key=lambda r: r.id)


def values_reference(output_format: str = "text") -> str:
    """`kgen values`: every values key with its type, default and meaning (text, or markdown: the README's table)."""
    from kgen.render.reference import values_reference as reference

    return reference(output_format)


def presets() -> list[Preset]:
    """`kgen presets list`: every built-in preset (``name``, ``text``; ``summary()``: shape, kind, description)."""
    from kgen.render import presets as presets_mod

    return [presets_mod.load(n) for n in presets_mod.names()]


def preset(name: str) -> Preset:
    """`kgen presets show NAME`: one preset; an unknown name raises UsageError with the closest name."""
    from kgen.render import presets as presets_mod

    return presets_mod.load(name)


def entrypoint_path() -> Path:
    """`kgen entrypoint --path`: the installed in-pod entrypoint script (kgen_entrypoint.py)."""
    from kgen.resources import entrypoint_path as path

    return path()
