"""kgen lint's library API: what the CLI and ``kgen render`` call.

    opts = LintOptions(kubernetes_version="1.37")
    result = lint_paths(["manifests/", "-"], opts)     # '-' = stdin; folders recursive
    result = lint_text(text, "<render>", opts)
    result = lint_documents(list_of_dicts, "<render>", opts)  # in memory: paths, no lines
    result.findings, result.exit_code                   # 0 clean, 1 failing findings, 2 unparsable input

All inputs of one call are one context: the training rules see the documents of every file (and
stdin) together, the way ``kubectl apply -f DIR`` creates them; Services pair with workloads of the
same namespace (an object without a namespace pairs with any).

A file that is not valid YAML (or not UTF-8) does not stop the run: it becomes a KG004 finding
with file and line, every other file is linted, and ``exit_code`` is 2. A missing file, an empty
stdin or an empty file named explicitly, an unknown version, engine or rule id, a missing kubeconform binary raise
``kgen.errors.InputError`` / ``UsageError`` (exit 2 in the CLI, no report).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from typing import Any, NamedTuple

from kgen.errors import InputError, UsageError
from kgen.findings import Finding, Severity
from kgen.lint.document import Document, format_path

SKIP_ANNOTATION = "kgen.dev/lint-skip"
ENGINES = ("builtin", "kubeconform")


class LintOptions(NamedTuple):
    kubernetes_version: str = "1.37"
    skip: frozenset = frozenset()
    engine: str = "builtin"
    schema_location: str | None = None
    strict: bool = True  # strict schemas reject unknown fields
    fail_on_warnings: bool = False  # `kgen lint --strict`: warnings fail too (exit 1)
    explain: bool = False  # `kgen lint --explain`: one info finding per training workload: how lint reads it


class DocumentRef(NamedTuple):
    file: str
    line: int
    kind: str
    name: str


class LintResult:
    """Findings (sorted by file order, line, column) and what was read."""

    __slots__ = ("findings", "documents", "files", "input_errors", "fail_on_warnings")

    def __init__(self, files: list[str] | None = None, fail_on_warnings: bool = False) -> None:
        self.findings: list[Finding] = []
        self.documents: list[DocumentRef] = []
        self.files: list[str] = files if files is not None else []
        self.input_errors: list[Finding] = []  # KG004: files that could not be parsed (also in findings)
        self.fail_on_warnings = fail_on_warnings

    def fails(self, finding: Finding) -> bool:
        """Whether ``finding`` fails the run: errors always, warnings with ``fail_on_warnings``."""
        return finding.severity is Severity.ERROR or (self.fail_on_warnings and finding.severity is Severity.WARNING)

    @property
    def exit_code(self) -> int:
        if self.input_errors:
            return 2
        return 1 if any(self.fails(f) for f in self.findings) else 0

    def count(self, severity: Severity) -> int:
        return sum(1 for f in self.findings if f.severity is severity)


class _Prepared:
    """Options checked once: version, engine, skip ids, schema stores."""

    def __init__(self, opts: LintOptions):
        from kgen import schema
        from kgen.lint.registry import Context, expand_ids, load_rules

        self.opts = opts
        self.version = schema.normalize_version(opts.kubernetes_version)
        if opts.engine not in ENGINES:
            raise UsageError(f"unknown engine {opts.engine!r}; use builtin or kubeconform", option="--engine")
        self.rules = load_rules()
        if isinstance(opts.skip, str):
            raise UsageError("skip must be a set of rule ids, not a string", option="--skip")
        self.skip = expand_ids(frozenset(s.strip().upper() for s in opts.skip))
        unknown = sorted(s for s in self.skip if s not in self.rules)
        if unknown:
            raise UsageError(_unknown_ids(unknown, self.rules), option="--skip")
        self.ctx = Context(self.version, opts.explain)
        self.schemas = schema.bundled(self.version, opts.strict)
        self.user = (
            schema.UserSchemas(opts.schema_location, self.version, opts.strict) if opts.schema_location else None
        )
        self.kubeconform = None
        if opts.engine == "kubeconform":
            from kgen.lint import kubeconform

            self.kubeconform = kubeconform.Runner(self.version, opts.strict, opts.schema_location)
        self.doc_rules = [r for r in self.rules.values() if r.scope == "document" and r.id not in self.skip]
        self._by_kind: dict[str, list] = {}
        self.stream_rules = [r for r in self.rules.values() if r.scope == "stream" and r.id not in self.skip]

    def rules_for(self, kind: str) -> list:
        rules = self._by_kind.get(kind)
        if rules is None:
            rules = self._by_kind[kind] = [r for r in self.doc_rules if r.kinds is None or kind in r.kinds]
        return rules


def _unknown_ids(unknown: list[str], rules: dict) -> str:
    import difflib

    first = unknown[0]
    close = difflib.get_close_matches(first, sorted(rules), n=1, cutoff=0.6)
    hint = f"did you mean {close[0]}?" if close else "see `kgen lint --list-rules` or docs/lint.md"
    return f"unknown rule id {', '.join(unknown)}; {hint}"


def lint_text(text: str, filename: str, opts: LintOptions) -> LintResult:
    """Lint one YAML stream (what ``kgen render`` runs on its own output)."""
    return _lint_inputs([(filename, text)], _Prepared(opts))


def lint_documents(values: Iterable[Any], filename: str, opts: LintOptions) -> LintResult:
    """Lint documents already in memory (``kgen render``'s self-check on what it is about to print).

    Same schema check and rules as ``lint_text``, without a YAML round trip: findings carry the
    field path but no line (0). The builtin engine only: kubeconform reads files.
    """
    if opts.engine != "builtin":
        raise UsageError("lint_documents checks values in memory: use the builtin engine", option="--engine")
    prepared = _Prepared(opts)
    result = LintResult(files=[filename], fail_on_warnings=opts.fail_on_warnings)
    docs = [Document(filename, i, None, value) for i, value in enumerate(values)]
    _lint_docs(docs, {}, prepared, result)
    _finish(result)
    return result


def lint_paths(paths: Iterable[str], opts: LintOptions, stdin: Any = None) -> LintResult:
    """Lint files, folders (recursively: *.yaml, *.yml) and '-' (stdin), all as one context."""
    prepared = _Prepared(opts)
    return _lint_inputs(list(_read_inputs(list(paths), stdin)), prepared)


def _lint_inputs(inputs: list[tuple[str, str | InputError]], p: _Prepared) -> LintResult:
    """Parse every input, then lint all their documents together (one context).

    All node trees of a run stay alive until the stream rules have located their findings; the
    cyclic garbage collector would rescan that growing heap over and over (3-5x the run time on a
    folder of 2000 documents) although parsing creates no cycles, so it is paused meanwhile.
    """
    import gc

    enabled = gc.isenabled()
    gc.disable()
    try:
        return _lint_all(inputs, p)
    finally:
        if enabled:
            gc.enable()


def _lint_all(inputs: list[tuple[str, str | InputError]], p: _Prepared) -> LintResult:
    from kgen.lint.parse import ParseError, parse_stream_partial

    result = LintResult(fail_on_warnings=p.opts.fail_on_warnings)
    docs: list[Document] = []
    texts: dict[str, str] = {}
    for name, text in inputs:
        result.files.append(name)
        if isinstance(text, InputError):
            errors: list[InputError] = [text]
        else:
            texts[name] = text
            parsed, errors = parse_stream_partial(text, name)  # type: ignore[assignment]
            docs.extend(parsed)
        for err in errors:
            line, col = (err.line, err.column) if isinstance(err, ParseError) else (0, 0)
            problem = err.problem if isinstance(err, ParseError) else err.message.split(": ", 1)[-1]
            if line:
                problem = f"{problem}; the rest of this file is not linted"
            finding = Finding("KG004", Severity.ERROR, problem, name, line, col)
            result.input_errors.append(finding)
            result.findings.append(finding)  # never skipped: the run must not pass with an unread file
    _lint_docs(docs, texts, p, result)
    if p.kubeconform is not None:
        p.kubeconform.run(result, p)
    _finish(result)
    return result


def _read_inputs(paths: list[str], stdin: Any) -> Iterable[tuple[str, str | InputError]]:
    """(name, text) per input; a file that is there but is not UTF-8 text comes as (name, InputError)
    and becomes a KG004 finding. Missing paths and empty stdin raise InputError (nothing to report)."""
    if not paths:
        raise UsageError("no input given; pass files, folders or '-' for stdin")
    seen: set[str] = set()  # real paths already read: a file named twice (or also inside a folder) is linted once

    def first_time(path: str) -> bool:
        real = "-" if path == "-" else os.path.realpath(path)
        if real in seen:
            return False
        seen.add(real)
        return True

    for path in paths:
        if not first_time(path):
            continue
        if path == "-":
            stream = stdin if stdin is not None else sys.stdin
            try:
                text = stream.read()
            except UnicodeDecodeError as err:
                raise InputError(f"<stdin>: not UTF-8 text ({err.reason})") from None
            if not text.strip():
                # `kgen render ... | kgen lint -` must not pass when the producer printed nothing
                # (a failed render, a wrong path): an empty stream is an input error, not "clean".
                raise InputError("<stdin>: empty input; nothing to lint (did the command before the pipe fail?)")
            yield "<stdin>", text
            continue
        if os.path.isdir(path):
            files = _yaml_files(path)
            if not files:
                raise InputError(f"{path}: no *.yaml or *.yml files in this folder")
            for f in files:
                if first_time(f):
                    yield f, _read_or_error(f)
        else:
            text = _read_or_error(path)
            if isinstance(text, str) and not text.strip():
                # named explicitly, like stdin: an empty file is a mistake (a failed redirect), not "clean";
                # empty files found inside a folder are skipped
                raise InputError(f"{path}: empty file; nothing to lint")
            yield path, text


def _read_or_error(path: str) -> str | InputError:
    try:
        return _read(path)
    except InputError as err:
        if "not UTF-8" in err.message:
            return err
        raise


def _yaml_files(folder: str) -> list[str]:
    out = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for f in sorted(files):
            if f.endswith((".yaml", ".yml")):
                out.append(os.path.join(root, f))
    return out


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except FileNotFoundError:
        raise InputError(f"{path}: no such file or directory") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory") from None
    except UnicodeDecodeError as err:
        raise InputError(f"{path}: not UTF-8 text ({err.reason})") from None
    except OSError as err:
        raise InputError(f"{path}: cannot read ({err.strerror})") from None


def _skips(doc: Document) -> frozenset:
    ann = doc.metadata.get("annotations")
    value = ann.get(SKIP_ANNOTATION) if isinstance(ann, dict) else None
    if not isinstance(value, str):
        return frozenset()
    from kgen.lint.registry import expand_ids

    return expand_ids(
        frozenset(s.strip().upper() if s.strip().lower() != "all" else "all" for s in value.split(",") if s.strip())
    )


def _lint_docs(docs: list[Document], texts: dict[str, str], p: _Prepared, result: LintResult) -> None:
    """Document rules per document; stream rules once over all documents (one context)."""
    from kgen.lint.model import with_embedded

    docs = with_embedded(docs)  # AppWrapper components are linted as objects of their own
    objects: list[Document] = []
    per_doc: dict[int, list[Finding]] = {}
    broken = {f.file for f in result.input_errors}
    for doc in docs:
        found = per_doc.setdefault(id(doc), [])
        found.extend(doc.findings)
        result.documents.append(DocumentRef(doc.file, doc.line, doc.kind, doc.name))
        data = doc.data
        if not isinstance(data, dict):
            found.append(
                doc.finding(
                    "KG003",
                    Severity.ERROR,
                    f"document is a {type(data).__name__}, not a Kubernetes object; delete it or fix the indentation",
                )
            )
            continue
        missing = [k for k in ("apiVersion", "kind") if not isinstance(data.get(k), str) or not data.get(k)]
        if missing:
            found.append(
                doc.finding(
                    "KG003",
                    Severity.ERROR,
                    f"document has no {' or '.join(missing)}; every Kubernetes object needs both",
                )
            )
            continue
        objects.append(doc)
        if p.kubeconform is None or doc.file in broken:  # kubeconform would stop at the file's syntax error
            schema_found = _schema_findings(doc, p)
            found.extend(schema_found)
            malformed = any(f.rule_id in ("KG010", "KG002") for f in schema_found)
        else:
            p.kubeconform.add(doc, texts.get(doc.file, ""), _has_schema(doc, p))
            malformed = True  # not known before kubeconform runs
        no_spec = _missing_spec(doc)
        if no_spec is not None and not any(f.message.startswith("missing required field 'spec'") for f in found):
            found.append(doc.finding("KG010", Severity.ERROR, no_spec, ("spec",) if "spec" in data else ()))
            malformed = True
        for r in p.rules_for(doc.kind):
            try:
                for path, message in r.fn(doc, p.ctx):  # type: ignore[misc]  # registered rules have fn
                    found.append(doc.finding(r.id, r.severity, message, path))
            except (TypeError, AttributeError, KeyError, IndexError, ValueError):
                if not malformed:
                    raise  # a bug in the rule: well-typed input must never crash it
                # a field of the wrong type: the schema finding already says so
    any_malformed = p.kubeconform is not None or any(
        f.rule_id in ("KG010", "KG002") for fs in per_doc.values() for f in fs
    )
    incomplete = bool(result.input_errors)
    for r in p.stream_rules:
        if incomplete and r.needs_all_inputs:
            continue  # "X is missing" may be wrong when X sits in a file that did not parse
        try:
            for doc, path, message in r.fn(objects, p.ctx):  # type: ignore[misc]  # registered rules have fn
                per_doc.setdefault(id(doc), []).append(doc.finding(r.id, r.severity, message, path))
        except (TypeError, AttributeError, KeyError, IndexError, ValueError):
            if not any_malformed:
                raise
    for doc in docs:
        skip = p.skip | _skips(doc)
        for f in per_doc.get(id(doc), []):
            if f.rule_id not in skip and "all" not in skip:
                result.findings.append(f)


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


def _missing_spec(doc: Document) -> str | None:
    """The KG010 message for a workload with no spec (or ``spec: null``), else None."""
    needs = _SPEC_REQUIRED.get(doc.api_version, {}).get(doc.kind)
    if needs is None or not isinstance(doc.data, dict) or doc.data.get("spec") is not None:
        return None
    what = "is null" if "spec" in doc.data else "is missing"
    return f"spec {what}: the API server rejects a {doc.kind} without {needs}; add the spec"


def _has_schema(doc: Document, p: _Prepared) -> bool:
    if p.schemas.validator(doc.api_version, doc.kind) is not None:
        return True
    return p.user is not None and p.user.validator(doc.api_version, doc.kind) is not None


def _schema_findings(doc: Document, p: _Prepared) -> list[Finding]:
    from kgen import schema

    api, kind = doc.api_version, doc.kind
    v = p.schemas.validator(api, kind)
    if v is not None:
        return schema_errors_to_findings(doc, v.validate(doc.data), p.version)
    if p.user is not None:
        uv = p.user.validator(api, kind)
        if uv is not None:
            return schema_errors_to_findings(doc, p.user.errors(uv[1], doc.data))
    if schema.is_builtin_group(api):
        return [
            doc.finding(
                "KG012",
                Severity.ERROR,
                f"Kubernetes {p.version} serves no {api} {kind}; check apiVersion and kind "
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


def schema_errors_to_findings(doc: Document, errors: list, version: str = "") -> list[Finding]:
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


def _finish(result: LintResult) -> None:
    order = {name: i for i, name in enumerate(result.files)}
    result.findings.sort(key=lambda f: (order.get(f.file, len(order)), f.line, f.column, f.rule_id, f.path))


__all__ = ["LintOptions", "LintResult", "DocumentRef", "lint_documents", "lint_paths", "lint_text", "format_path"]
