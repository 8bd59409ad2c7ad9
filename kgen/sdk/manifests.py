"""The manifest verbs as library functions: `kgen render`, `kgen lint` (and its rule list), `kgen values`,
`kgen presets list|show`, `kgen entrypoint`. Typed requests in, typed results out; nothing printed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kgen.errors import UsageError
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
    """`kgen lint`: ``paths`` (files, folders, "-" for stdin; one ``str`` is one path) checked against
    ``kubernetes_version``'s schemas and kgen's rules. ``skip``: rule ids (comma lists allowed, any case);
    ``strict``: warnings fail too; ``engine``: builtin or kubeconform (on PATH); ``schema_location``:
    schemas for CRDs; ``explain``: how lint reads each training workload (KG137 info); ``exclude``:
    .gitignore-like globs; ``unit``: what the cross-document rules see together (``dir``: each folder's own
    files and a kustomization's resources; ``file``; ``tree``: everything given, docs/lint.md "Apply units").
    Every field is checked when the request is made, with `kgen lint`'s messages (UsageError; a wrong
    Python type names the field); a ``str`` for ``skip`` or ``exclude`` is one --skip or --exclude."""

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

    def __post_init__(self) -> None:
        check_lint_request(self)


def _lint_strings(name: str, value: Any, option: str) -> tuple[str, ...]:
    """A sequence field as a tuple of strings: one ``str`` (or path) is one item, as the CLI reads one word."""
    if isinstance(value, (str, os.PathLike)):
        value = [value]
    if isinstance(value, (bytes, Mapping)) or not isinstance(value, (Sequence, set, frozenset)):
        raise UsageError(
            f"must be a list of strings, got {type(value).__name__} {value!r}"[:120], option=f"LintRequest.{name}"
        )
    out = []
    for i, item in enumerate(value):
        item = os.fspath(item) if isinstance(item, os.PathLike) and name == "paths" else item
        if not isinstance(item, str):
            raise UsageError(
                f"item {i} must be a string, got {type(item).__name__} {item!r}",
                option=f"LintRequest.{name}",
                hint=f"{option} takes text",
            )
        out.append(item)
    return tuple(out)


def check_lint_request(request: LintRequest) -> None:
    """``LintRequest``'s checks, with `kgen lint`'s messages: what the CLI checks before a file is read."""
    from kgen import schema
    from kgen.lint.check import ENGINES, _unknown_ids
    from kgen.lint.registry import expand_ids, load_rules
    from kgen.lint.units import UNIT_MODES

    set_field = object.__setattr__  # frozen: the normalized sequences replace what was passed
    for name, option in (("paths", "PATH"), ("skip", "--skip"), ("exclude", "--exclude")):
        set_field(request, name, _lint_strings(name, getattr(request, name), option))
    for name in ("strict", "explain"):
        if not isinstance(getattr(request, name), bool):
            raise UsageError(f"must be True or False, got {getattr(request, name)!r}", option=f"LintRequest.{name}")
    for name in ("kubernetes_version", "engine", "unit", "schema_location"):
        value = getattr(request, name)
        if not isinstance(value, str) and not (value is None and name == "schema_location"):
            raise UsageError(f"must be a string, got {type(value).__name__} {value!r}", option=f"LintRequest.{name}")
    if request.documents is not None:
        if request.paths:
            raise UsageError("lint takes paths or documents, not both: lint them in two calls")
        if isinstance(request.documents, (str, bytes, Mapping)) or not isinstance(request.documents, Sequence):
            raise UsageError("documents must be a list of objects (dicts), e.g. documents=[job, service]")
    elif not request.paths:
        raise UsageError("no input given; pass files, folders or '-' for stdin, or documents=[...]")
    for path in request.paths:
        if not path.strip():
            raise UsageError("needs a file or folder name, got an empty string", option="PATH", hint="- reads stdin")
    schema.normalize_version(request.kubernetes_version)
    if request.engine not in ENGINES:
        raise UsageError(f"unknown engine {request.engine!r}; use builtin or kubeconform", option="--engine")
    if request.unit not in UNIT_MODES:
        raise UsageError(f"must be one of {', '.join(UNIT_MODES)}, got {request.unit!r}", option="--unit")
    rules = load_rules()
    skip = expand_ids(frozenset(s.strip().upper() for item in request.skip for s in item.split(",") if s.strip()))
    unknown = sorted(s for s in skip if s not in rules)
    if unknown:
        raise UsageError(_unknown_ids(unknown, rules), option="--skip")


def lint(request: LintRequest | None = None, *, documents: Sequence[Any] | None = None) -> LintResult:
    """Lint manifests offline: kgen.lint.api.LintResult (``findings``, ``exit_code`` 0 clean, 1 failing
    findings, 2 unreadable or unparsable input, ``skipped`` files that are no manifests). A file that is
    not valid YAML is a KG004 finding, not an exception; a missing file, an unknown version, engine or
    rule id raise kgen.errors.KgenError. ``documents`` (here or in the request) lints objects in memory:
    render -> modify -> lint needs no temporary file."""
    from kgen.errors import UsageError
    from kgen.lint.api import LintOptions, lint_documents, lint_paths

    if request is None:
        if documents is None:
            raise UsageError("nothing to lint: give paths (files, folders, '-') or documents=[...]")
        request = LintRequest(documents=documents)
    elif documents is not None:
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
    if request.documents is not None:  # checked when the request was made: no paths beside them
        return lint_documents(list(request.documents), "<documents>", options)
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


def entrypoint_where(line: int, text: str | None = None) -> str:
    """`kgen entrypoint --where LINE`: the source of line LINE of the shipped entrypoint (a pod's traceback
    has the same numbers), as `entrypoint/parts/hub.py:210`, read from the file's banners
    (`# ==== entrypoint/parts/hub.py:12 ====`: the next line is that part's line 12). Lines above the first
    banner are the first part's own; a banner that names no line (the gathered imports, the guard) is said
    as it stands. An out-of-range LINE raises UsageError."""
    import re

    from kgen.errors import UsageError

    if text is None:
        text = entrypoint_path().read_text(encoding="utf-8")
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    if not 1 <= line <= len(lines):
        raise UsageError(f"must be a line of the entrypoint, 1 to {len(lines)}, got {line}", option="--where")
    banner = re.compile(r"# ==== (.+?) ====$")
    for number in range(line, 0, -1):
        m = banner.match(lines[number - 1])
        if not m:
            continue
        place = m.group(1)
        named = re.fullmatch(r"(\S+\.py):(\d+)", place)
        if not named:
            return place
        return f"{named.group(1)}:{int(named.group(2)) + max(0, line - number - 1)}"
    return f"entrypoint/parts/header.py:{line}"
