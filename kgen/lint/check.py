"""Lint one group of apply units: parse each file once, check each document once (schema and
document rules), then run the cross-document rules once per unit over that unit's objects only.

A group is what must be checked together: units that share no file are groups of their own (the
usual case: one folder, one unit, one group); units that share files (two Kustomize overlays of one
base) form one group, so the shared documents are read and checked once. ``check_group`` is a pure
function of the group's inputs and the prepared options: ``kgen.lint.api`` runs groups one after
another or in worker processes (``kgen.lint.workers``), and the output is the same either way.

A cross-document finding is reported once per document even when several units produce it, with the
first unit's name; a document's own findings carry its first unit's name.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from kgen.errors import InputError, UsageError
from kgen.findings import Finding, Severity
from kgen.lint.document import Document

SKIP_ANNOTATION = "kgen.dev/lint-skip"
ENGINES = ("builtin", "kubeconform")


class DocumentRef(NamedTuple):
    file: str
    line: int
    kind: str
    name: str


class Unit(NamedTuple):
    """One apply unit: what one ``kubectl apply`` creates together (see ``kgen.lint.units``)."""

    name: str  # "envs/prod/", "deploy/job.yaml", "<stdin>", "all inputs"
    kind: str  # directory | kustomization | file | stdin | tree
    files: tuple[str, ...]  # in the order the files were found


class Prepared:
    """Options checked once: version, engine, skip ids, rules, schema stores."""

    def __init__(self, opts: Any) -> None:
        from kgen import schema
        from kgen.lint.registry import Context, expand_ids, load_rules
        from kgen.lint.schemas import SchemaCheck

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
        self.schema = SchemaCheck(self.version, opts.strict, opts.schema_location)
        self.kubeconform = None
        if opts.engine == "kubeconform":
            from kgen.lint import kubeconform

            self.kubeconform = kubeconform.Runner(self.version, opts.strict, opts.schema_location)
        self.doc_rules = [r for r in self.rules.values() if r.scope == "document" and r.id not in self.skip]
        self._by_kind: dict[tuple[str, str], list] = {}
        self.stream_rules = [r for r in self.rules.values() if r.scope == "stream" and r.id not in self.skip]

    def rules_for(self, doc: Document) -> list[tuple[Any, str, Any]]:
        """(function, id, severity) of the document rules for ``doc``'s apiVersion and kind: those of its
        kind, without the rules that read only pod templates when lint has no adapter for it."""
        key = (doc.api_version, doc.kind)
        rules = self._by_kind.get(key)
        if rules is None:
            from kgen.lint.kinds import adapter_for

            kind, workload = key[1], adapter_for(doc) is not None
            rules = self._by_kind[key] = [
                (r.fn, r.id, r.severity)
                for r in self.doc_rules
                if (r.kinds is None or kind in r.kinds) and (workload or not r.templates_only)
            ]
        return rules


def _unknown_ids(unknown: list[str], rules: dict) -> str:
    import difflib

    first = unknown[0]
    close = difflib.get_close_matches(first, sorted(rules), n=1, cutoff=0.6)
    hint = f"did you mean {close[0]}?" if close else "see `kgen lint --list-rules` or docs/lint.md"
    return f"unknown rule id {', '.join(unknown)}; {hint}"


class FileOutput:
    """What checking one file gave: skipped by its content (the reason), or its documents and the
    KG004 findings of what could not be read."""

    __slots__ = ("skip", "refs", "input_errors")

    def __init__(self) -> None:
        self.skip: str | None = None
        self.refs: list[DocumentRef] = []
        self.input_errors: list[Finding] = []


class GroupOutput:
    """What checking one group gave (small and picklable: findings and references, no values)."""

    __slots__ = ("files", "findings", "alias_used")

    def __init__(self) -> None:
        self.files: dict[str, FileOutput] = {}
        self.findings: list[Finding] = []
        self.alias_used = 0  # nodes added by YAML aliases (the run's budget, kgen.lint.parse.Budget)


def input_error(out: FileOutput, findings: list[Finding], name: str, err: InputError) -> None:
    line, col = getattr(err, "line", 0), getattr(err, "column", 0)
    problem = getattr(err, "problem", None) or err.message.split(": ", 1)[-1]
    if line and getattr(err, "stops", False):
        problem = f"{problem}; the rest of this file is not linted"
    finding = Finding("KG004", Severity.ERROR, problem, name, line, col)
    out.input_errors.append(finding)
    findings.append(finding)  # never skipped: the run must not pass with an unread file


class _Run:
    """What the document phase hands to the unit phase."""

    __slots__ = ("docs", "objects", "per_doc", "texts", "broken", "first_unit")

    def __init__(self) -> None:
        self.docs: list[Document] = []
        self.objects: dict[str, list[Document]] = {}  # file -> its objects (documents with apiVersion and kind)
        self.per_doc: dict[int, list[Finding]] = {}
        self.texts: dict[str, str] = {}  # for kubeconform, which reads files itself
        self.broken: set[str] = set()  # files with a KG004 finding
        self.first_unit: dict[str, str] = {}  # file -> the name of the first unit it is in


def check_group(
    files: Sequence[str],
    units: Sequence[Unit],
    read: Callable[[str], str | InputError],
    p: Prepared,
    budget: Any,
    name_units: bool = False,
) -> GroupOutput:
    """Check the files of a group (in this order) and run the cross-document rules per unit.
    ``read(name)`` gives a file's text or the InputError that makes it a KG004 finding;
    ``name_units``: the run has several units, so ``--explain`` names each one (KG137)."""
    from kgen.lint import sbatch
    from kgen.lint.files import content_skip_reason
    from kgen.lint.parse import parse_stream_partial

    out = GroupOutput()
    run = _Run()
    for unit in units:
        for f in unit.files:
            run.first_unit.setdefault(f, unit.name)
    before = budget.alias_nodes
    for name in files:
        fout = out.files[name] = FileOutput()
        text = read(name)
        if isinstance(text, InputError):
            input_error(fout, out.findings, name, text)
            run.broken.add(name)
            continue
        if sbatch.is_sbatch(name, text):  # an sbatch script, not YAML: kgen.lint.sbatch reads it (no unit rules)
            job, found = sbatch.lint_file(name, text, p.skip)
            fout.refs.append(DocumentRef(name, 1, "sbatch", job))
            out.findings.extend(found)
            continue
        parsed, errors = parse_stream_partial(text, name, budget)
        if name != "<stdin>":
            reason = content_skip_reason(name, text, parsed, bool(errors))
            if reason is not None:
                fout.skip = reason
                continue
        if p.kubeconform is not None:
            run.texts[name] = text
        for err in errors:
            input_error(fout, out.findings, name, err)
        if errors:
            run.broken.add(name)
        check_documents(parsed, bool(errors), p, fout, out.findings, run)
    out.alias_used = before - budget.alias_nodes
    shared = len(units) > 1 and sum(len(u.files) for u in units) > len(files)
    for unit in units:
        objects = [d for f in unit.files for d in run.objects.get(f, ())]
        ctx = p.ctx._replace(unit=f"{unit.name} ({unit.kind})") if name_units else p.ctx
        _check_unit(objects, any(f in run.broken for f in unit.files), p, ctx, run, unit.name, shared)
    _collect(run, p, out)
    if p.kubeconform is not None:
        out.findings.extend(p.kubeconform.run(p.schema))
    return out


def check_values(docs: list[Document], unit: Unit, p: Prepared) -> GroupOutput:
    """``check_group`` for documents already in memory (one unit of one file, no text)."""
    out = GroupOutput()
    run = _Run()
    name = unit.name
    run.first_unit[name] = name
    fout = out.files[name] = FileOutput()
    check_documents(docs, False, p, fout, out.findings, run)
    _check_unit(run.objects.get(name, []), False, p, p.ctx, run, name, False)
    _collect(run, p, out)
    return out


def _skips(doc: Document) -> frozenset:
    ann = doc.metadata.get("annotations")
    value = ann.get(SKIP_ANNOTATION) if isinstance(ann, dict) else None
    if not isinstance(value, str):
        return frozenset()
    from kgen.lint.registry import expand_ids

    return expand_ids(
        frozenset(s.strip().upper() if s.strip().lower() != "all" else "all" for s in value.split(",") if s.strip())
    )


def check_documents(
    docs: list[Document], broken: bool, p: Prepared, fout: FileOutput, findings: list[Finding], run: _Run
) -> None:
    """Schema and document rules for the documents of one input (``broken``: it had a syntax error), and
    for the objects embedded in them (AppWrapper components are linted as objects of their own)."""
    from kgen.lint.model import with_embedded

    for doc in with_embedded(docs):
        run.docs.append(doc)
        fout.refs.append(DocumentRef(doc.file, doc.line, doc.kind, doc.name))
        objects = run.objects.setdefault(doc.file, [])
        count = len(objects)
        try:
            found = _check_document(doc, broken, p, run, objects)
        except RecursionError:  # a safety net: MAX_DEPTH and RECURSION_LIMIT are meant to prevent it
            del objects[count:]  # not for the cross-document rules either
            line, col = doc.locate(())
            problem = "document nests too deeply for kgen's checks; refusing to lint it"
            finding = Finding("KG004", Severity.ERROR, problem, doc.file, line, col, "", doc.kind, doc.name)
            fout.input_errors.append(finding)
            run.broken.add(doc.file)
            found = [finding]
        if found:
            run.per_doc[id(doc)] = found


def _check_document(doc: Document, broken: bool, p: Prepared, run: _Run, objects: list) -> list[Finding]:
    from kgen.lint.schemas import missing_spec

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
    objects.append(doc)
    if p.kubeconform is None or broken:  # kubeconform would stop at the file's syntax error
        schema_found = p.schema.findings(doc)
        found.extend(schema_found)
        malformed = any(f.rule_id in ("KG010", "KG002") for f in schema_found)
    else:
        p.kubeconform.add(doc, run.texts.get(doc.file, ""), p.schema.has_schema(doc))
        malformed = True  # not known before kubeconform runs
    no_spec = missing_spec(doc)
    if no_spec is not None and not any(f.message.startswith("missing required field 'spec'") for f in found):
        found.append(doc.finding("KG010", Severity.ERROR, no_spec, ("spec",) if "spec" in data else ()))
        malformed = True
    ctx = p.ctx
    for fn, rule_id, severity in p.rules_for(doc):
        try:
            for path, message in fn(doc, ctx):
                found.append(doc.finding(rule_id, severity, message, path))
        except (TypeError, AttributeError, KeyError, IndexError, ValueError):
            if not malformed:
                raise  # a bug in the rule: well-typed input must never crash it
            # a field of the wrong type: the schema finding already says so
    return found


def _check_unit(
    objects: list[Document], incomplete: bool, p: Prepared, ctx: Any, run: _Run, unit: str, shared: bool
) -> None:
    """The cross-document rules over one unit's objects. ``incomplete``: a file of the unit could not be
    read, so rules that report something missing are not run. ``shared``: units of this group share
    files, so a finding a document already has from another unit is not added again."""
    per_doc = run.per_doc
    any_malformed = p.kubeconform is not None or any(
        f.rule_id in ("KG010", "KG002") for d in objects for f in per_doc.get(id(d), ())
    )
    for r in p.stream_rules:
        if incomplete and r.needs_all_inputs:
            continue  # "X is missing" may be wrong when X sits in a file that did not parse
        try:
            for doc, path, message in r.fn(objects, ctx):  # type: ignore[misc]  # registered rules have fn
                finding = doc.finding(r.id, r.severity, message, path)
                if unit != run.first_unit.get(doc.file, unit):
                    finding = finding._replace(unit=unit)  # from a unit that is not the document's first
                got = per_doc.setdefault(id(doc), [])
                if shared and any(f[:9] == finding[:9] for f in got):
                    continue
                got.append(finding)
        except (TypeError, AttributeError, KeyError, IndexError, ValueError):
            if not any_malformed:
                raise


def _collect(run: _Run, p: Prepared, out: GroupOutput) -> None:
    """The findings in document order, with per-object suppression applied and each one's unit."""
    per_doc = run.per_doc
    for doc in run.docs:
        found = per_doc.get(id(doc))
        if not found:
            continue
        skip = p.skip | _skips(doc)
        home = run.first_unit.get(doc.file, "")
        for f in found:
            if f.rule_id == "KG004" or (f.rule_id not in skip and "all" not in skip):
                out.findings.append(f if f.unit else f._replace(unit=home))
