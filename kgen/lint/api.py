"""kgen lint's library API: what the CLI and ``kgen render`` call.

    opts = LintOptions(kubernetes_version="1.37")
    result = lint_paths(["manifests/", "-"], opts)     # '-' = stdin; folders recursive
    result = lint_text(text, "<render>", opts)
    result = lint_documents(list_of_dicts, "<render>", opts)  # in memory: paths, no lines
    result.findings, result.exit_code                   # 0 clean, 1 failing findings, 2 unparsable input

All inputs of one call are one context: the training rules see the documents of every file (and
stdin) together, the way ``kubectl apply -f DIR`` creates them; Services pair with workloads of the
same namespace (an object without a namespace pairs with any).

A file that is not valid YAML (or not UTF-8 text, too large, unreadable: permission denied) does
not stop the run: it becomes a KG004 finding with file and line, every other file is linted, and
``exit_code`` is 2; so does a document past a limit (``kgen.lint.parse``: depth, size, aliases),
and the file's other documents are linted. Files that are not manifests (``kgen.lint.files``:
kustomization.yaml, Helm charts, CI workflows ...) are skipped and listed in ``result.skipped``;
``LintOptions.exclude`` holds --exclude globs. A missing file, an empty stdin or an empty file named
explicitly, a folder without YAML files, an unknown version, engine or rule id, a missing kubeconform
binary raise ``kgen.errors.InputError`` / ``UsageError`` (exit 2 in the CLI, no report).

Cost: documents are read one file at a time, each checked as soon as it is read; only their values
(and where their text is, for line numbers) stay for the cross-document rules.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

from kgen.errors import InputError, UsageError
from kgen.findings import Finding, Severity
from kgen.lint.document import Document, format_path

SKIP_ANNOTATION = "kgen.dev/lint-skip"
# Schema validation and rules walk a document recursively (a few frames per level); the parser lets
# documents nest up to kgen.lint.parse.MAX_DEPTH (1,000) levels, past Python's default 1,000 frames.
RECURSION_LIMIT = 5000
ENGINES = ("builtin", "kubeconform")


class LintOptions(NamedTuple):
    kubernetes_version: str = "1.37"
    skip: frozenset = frozenset()
    engine: str = "builtin"
    schema_location: str | None = None
    strict: bool = True  # strict schemas reject unknown fields
    fail_on_warnings: bool = False  # `kgen lint --strict`: warnings fail too (exit 1)
    explain: bool = False  # `kgen lint --explain`: one info finding per training workload: how lint reads it
    exclude: tuple = ()  # --exclude globs (kgen.lint.files.Excludes)


class DocumentRef(NamedTuple):
    file: str
    line: int
    kind: str
    name: str


class LintResult:
    """Findings (sorted by file order, line, column) and what was read."""

    __slots__ = ("findings", "documents", "files", "input_errors", "fail_on_warnings", "skipped", "excluded")

    def __init__(self, files: list[str] | None = None, fail_on_warnings: bool = False) -> None:
        self.findings: list[Finding] = []
        self.documents: list[DocumentRef] = []
        self.files: list[str] = files if files is not None else []
        self.input_errors: list[Finding] = []  # KG004: files that could not be parsed (also in findings)
        self.fail_on_warnings = fail_on_warnings
        self.skipped: list = []  # kgen.lint.files.Skip: files that are not manifests (kustomization.yaml ...)
        self.excluded = 0  # files and folders left out by --exclude

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
    from kgen.lint.files import Excludes

    prepared = _Prepared(opts)
    result = LintResult(fail_on_warnings=opts.fail_on_warnings)
    return _lint_inputs(_read_inputs(list(paths), stdin, Excludes(opts.exclude), result), prepared, result)


def _lint_inputs(
    inputs: Iterable[tuple[str, str | InputError]], p: _Prepared, result: LintResult | None = None
) -> LintResult:
    """Parse every input, then lint all their documents together (one context).

    The values of a run stay alive until the stream rules have run; the cyclic garbage collector
    would rescan that growing heap over and over (3-5x the run time on a folder of 2000 documents)
    although parsing creates no cycles, so it is paused meanwhile.
    """
    import gc

    from kgen.lint.document import forget_positions

    enabled = gc.isenabled()
    gc.disable()
    limit = sys.getrecursionlimit()
    if limit < RECURSION_LIMIT:
        sys.setrecursionlimit(RECURSION_LIMIT)
    try:
        return _lint_all(inputs, p, result or LintResult(fail_on_warnings=p.opts.fail_on_warnings))
    finally:
        sys.setrecursionlimit(limit)
        forget_positions()
        if enabled:
            gc.enable()


class _Run:
    """What the document phase hands to the stream phase."""

    __slots__ = ("docs", "objects", "per_doc", "texts")

    def __init__(self) -> None:
        self.docs: list[Document] = []
        self.objects: list[Document] = []
        self.per_doc: dict[int, list[Finding]] = {}
        self.texts: dict[str, str] = {}  # for kubeconform, which reads files itself


def _lint_all(inputs: Iterable[tuple[str, str | InputError]], p: _Prepared, result: LintResult) -> LintResult:
    from kgen.lint import sbatch
    from kgen.lint.files import Skip, content_skip_reason
    from kgen.lint.parse import Budget, parse_stream_partial

    run = _Run()
    budget = Budget()
    for name, text in inputs:
        if isinstance(text, InputError):
            result.files.append(name)
            _input_error(result, name, text)
            continue
        if sbatch.is_sbatch(name, text):  # an sbatch script, not YAML: kgen.lint.sbatch reads it
            job, found = sbatch.lint_file(name, text, p.skip)
            result.files.append(name)
            result.documents.append(DocumentRef(name, 1, "sbatch", job))
            result.findings.extend(found)
            continue
        parsed, errors = parse_stream_partial(text, name, budget)
        if name != "<stdin>":
            reason = content_skip_reason(name, text, parsed, bool(errors))
            if reason is not None:
                result.skipped.append(Skip(name, reason))
                continue
        result.files.append(name)
        if p.kubeconform is not None:
            run.texts[name] = text
        for err in errors:
            _input_error(result, name, err)
        _check_documents(parsed, bool(errors), p, result, run)
    _check_stream(run, p, result)
    if p.kubeconform is not None:
        p.kubeconform.run(result, p)
    _finish(result)
    return result


def _input_error(result: LintResult, name: str, err: InputError) -> None:
    line, col = getattr(err, "line", 0), getattr(err, "column", 0)
    problem = getattr(err, "problem", None) or err.message.split(": ", 1)[-1]
    if line and getattr(err, "stops", False):
        problem = f"{problem}; the rest of this file is not linted"
    finding = Finding("KG004", Severity.ERROR, problem, name, line, col)
    result.input_errors.append(finding)
    result.findings.append(finding)  # never skipped: the run must not pass with an unread file


def _read_inputs(
    paths: list[str], stdin: Any, excludes: Any, result: LintResult
) -> Iterator[tuple[str, str | InputError]]:
    """(name, text) per input; a file that is there but cannot be linted (not UTF-8 text, too large,
    permission denied) comes as (name, InputError) and becomes a KG004 finding. Files that are not
    manifests go to ``result.skipped``, --exclude'd ones are counted in ``result.excluded``. Missing
    paths, empty stdin, an empty file named explicitly and a folder without YAML files raise
    InputError (nothing to report)."""
    from kgen.inputs import read_stream
    from kgen.lint.files import Skip, display_rel, skip_reason, walk

    if not paths:
        raise UsageError("no input given; pass files, folders or '-' for stdin")
    seen: set[str] = set()  # real paths already read: a file named twice (or also inside a folder) is linted once
    charts: dict[str, str | None] = {}
    yielded = 0
    folders_left_empty: list[str] = []

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
                text = read_stream(stream, "<stdin>")
            except InputError as err:
                yielded += 1
                yield "<stdin>", err
                continue
            if not text.strip():
                # `kgen render ... | kgen lint -` must not pass when the producer printed nothing
                # (a failed render, a wrong path): an empty stream is an input error, not "clean".
                raise InputError("<stdin>: empty input; nothing to lint (did the command before the pipe fail?)")
            yielded += 1
            yield "<stdin>", text
            continue
        if os.path.isdir(path):
            files, skips, problems, excluded = walk(path, excludes)
            result.excluded += excluded
            result.skipped.extend(skips)
            for problem in problems:
                yielded += 1
                yield problem.path, InputError(problem.message)
            if not files and not skips and not problems and not excluded:
                raise InputError(f"{path}: no *.yaml or *.yml files in this folder")
            linted = 0
            for f in files:
                if not first_time(f):
                    continue
                reason = skip_reason(f, charts)
                if reason is not None:
                    result.skipped.append(Skip(f, reason))
                    continue
                linted += 1
                yielded += 1
                yield f, _read_or_error(f, explicit=False)
            if not linted and not problems:
                folders_left_empty.append(path)
            continue
        if excludes and excludes.excludes_file(display_rel(path)):
            result.excluded += 1
            continue
        reason = skip_reason(path, charts) if os.path.isfile(path) else None
        if reason is not None:
            result.skipped.append(Skip(path, reason))
            continue
        got = _read_or_error(path, explicit=True)
        if isinstance(got, str) and not got.strip():
            # named explicitly, like stdin: an empty file is a mistake (a failed redirect), not "clean";
            # empty files found inside a folder are skipped
            raise InputError(f"{path}: empty file; nothing to lint")
        yielded += 1
        yield path, got
    if folders_left_empty and not yielded:
        left = len(result.skipped) + result.excluded
        raise InputError(
            f"{folders_left_empty[0]}: nothing to lint: every YAML file in it was skipped as not a Kubernetes "
            f"manifest or excluded ({left} in all; see the info lines)"
        )


def _read_or_error(path: str, explicit: bool) -> str | InputError:
    from kgen.inputs import read_yaml_file

    try:
        return read_yaml_file(path)
    except FileNotFoundError:
        if explicit:
            raise InputError(f"{path}: no such file or directory") from None
        return InputError(f"{path}: no such file (a dangling symbolic link?)")
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory") from None
    except InputError as err:  # not UTF-8 text, too large, permission denied: a KG004 finding
        return err


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
    run = _Run()
    run.texts = texts
    broken = {f.file for f in result.input_errors}
    for doc in docs:
        _check_documents([doc], doc.file in broken, p, result, run)
    _check_stream(run, p, result)


def _check_documents(docs: list[Document], broken: bool, p: _Prepared, result: LintResult, run: _Run) -> None:
    """Schema and document rules for the documents of one input (``broken``: it had a syntax error), and
    for the objects embedded in them (AppWrapper components are linted as objects of their own)."""
    from kgen.lint.model import with_embedded

    for doc in with_embedded(docs):
        run.docs.append(doc)
        result.documents.append(DocumentRef(doc.file, doc.line, doc.kind, doc.name))
        objects = len(run.objects)
        try:
            found = _check_document(doc, broken, p, run)
        except RecursionError:  # a safety net: MAX_DEPTH and RECURSION_LIMIT are meant to prevent it
            del run.objects[objects:]  # not for the cross-document rules either
            line, col = doc.locate(())
            problem = "document nests too deeply for kgen's checks; refusing to lint it"
            finding = Finding("KG004", Severity.ERROR, problem, doc.file, line, col, "", doc.kind, doc.name)
            result.input_errors.append(finding)
            found = [finding]
        if found:
            run.per_doc[id(doc)] = found


def _check_document(doc: Document, broken: bool, p: _Prepared, run: _Run) -> list[Finding]:
    found = list(doc.parse_findings())
    data = doc.data
    if not isinstance(data, dict):
        found.append(
            doc.finding(
                "KG003",
                Severity.ERROR,
                f"document is a {type(data).__name__}, not a Kubernetes object; delete it or fix the indentation",
            )
        )
        return found
    missing = [k for k in ("apiVersion", "kind") if not isinstance(data.get(k), str) or not data.get(k)]
    if missing:
        found.append(
            doc.finding(
                "KG003",
                Severity.ERROR,
                f"document has no {' or '.join(missing)}; every Kubernetes object needs both",
            )
        )
        return found
    run.objects.append(doc)
    if p.kubeconform is None or broken:  # kubeconform would stop at the file's syntax error
        schema_found = _schema_findings(doc, p)
        found.extend(schema_found)
        malformed = any(f.rule_id in ("KG010", "KG002") for f in schema_found)
    else:
        p.kubeconform.add(doc, run.texts.get(doc.file, ""), _has_schema(doc, p))
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
    return found


def _check_stream(run: _Run, p: _Prepared, result: LintResult) -> None:
    """Stream rules once over all objects (one context), then the findings in document order with
    per-object suppression applied."""
    per_doc = run.per_doc
    any_malformed = p.kubeconform is not None or any(
        f.rule_id in ("KG010", "KG002") for fs in per_doc.values() for f in fs
    )
    incomplete = bool(result.input_errors)
    for r in p.stream_rules:
        if incomplete and r.needs_all_inputs:
            continue  # "X is missing" may be wrong when X sits in a file that did not parse
        try:
            for doc, path, message in r.fn(run.objects, p.ctx):  # type: ignore[misc]  # registered rules have fn
                per_doc.setdefault(id(doc), []).append(doc.finding(r.id, r.severity, message, path))
        except (TypeError, AttributeError, KeyError, IndexError, ValueError):
            if not any_malformed:
                raise
    for doc in run.docs:
        found = per_doc.get(id(doc))
        if not found:
            continue
        skip = p.skip | _skips(doc)
        for f in found:
            if f.rule_id == "KG004" or (f.rule_id not in skip and "all" not in skip):
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
