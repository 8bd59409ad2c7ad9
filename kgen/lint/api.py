"""kgen lint's library API: what the CLI and ``kgen render`` call.

    opts = LintOptions(kubernetes_version="1.37")
    result = lint_paths(["manifests/", "-"], opts)     # '-' = stdin; folders recursive
    result = lint_text(text, "<render>", opts)
    result = lint_documents(list_of_dicts, "<render>", opts)  # in memory: paths, no lines
    result.findings, result.exit_code                   # 0 clean, 1 failing findings, 2 unparsable input
    result.units                                        # the apply units the cross-document rules saw

The cross-document rules see one *apply unit* at a time (``kgen.lint.units``; ``LintOptions.unit``):
by default one folder's own files (as ``kubectl apply -f DIR`` without ``-R``; files named on the
command line join their folder's), a folder with a ``kustomization.yaml`` together with what it
lists, and stdin alone; ``"file"``: every file alone; ``"tree"``: everything given, together. Inside
a unit, Services pair with workloads of the same namespace (an object without a namespace pairs
with any).

A file that is not valid YAML (or not UTF-8 text, too large, unreadable: permission denied) does
not stop the run: it becomes a KG004 finding with file and line, every other file is linted, and
``exit_code`` is 2; so does a document past a limit (``kgen.lint.parse``: depth, size, aliases),
and the file's other documents are linted. Files that are not manifests (``kgen.lint.files``:
kustomization.yaml and the patches it lists, Helm charts, CI workflows ...) are skipped and listed
in ``result.skipped``; ``LintOptions.exclude`` holds --exclude globs. A missing file, an empty stdin
or an empty file named explicitly, a folder without YAML files, an unknown version, engine, unit or
rule id, a missing kubeconform binary raise ``kgen.errors.InputError`` / ``UsageError`` (exit 2 in
the CLI, no report).

Cost: documents are read one file at a time, each checked as soon as it is read; only their values
(and where their text is, for line numbers) stay for the unit's cross-document rules. Units that
share no file are checked independently: on large inputs (``PARALLEL_MIN_BYTES``) by forked worker
processes on every core (``kgen.lint.workers``), with the same report, byte for byte, in the same
order, as one process gives (``LintOptions.jobs``).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any, NamedTuple

from kgen.errors import InputError
from kgen.findings import Finding, Severity
from kgen.lint.check import ENGINES, SKIP_ANNOTATION, DocumentRef, GroupOutput, Prepared, Unit
from kgen.lint.document import Document, format_path

# Schema validation and rules walk a document recursively (a few frames per level); the parser lets
# documents nest up to kgen.lint.parse.MAX_DEPTH (1,000) levels, past Python's default 1,000 frames.
RECURSION_LIMIT = 5000
# Below this many bytes of input a run stays in one process: a forked worker costs ~5-10 ms. Measured
# with bench/lint_scale --crossover (2 cores, two runs): two processes take 1.1-1.9x one process's
# time at 10-20 KiB, 0.55-0.85x at 50-100 KiB, 0.4-0.8x from 200 KiB.
PARALLEL_MIN_BYTES = 128 * 1024


class LintOptions(NamedTuple):
    kubernetes_version: str = "1.37"
    skip: frozenset = frozenset()
    engine: str = "builtin"
    schema_location: str | None = None
    strict: bool = True  # strict schemas reject unknown fields
    fail_on_warnings: bool = False  # `kgen lint --strict`: warnings fail too (exit 1)
    explain: bool = False  # `kgen lint --explain`: one info finding per training workload: how lint reads it
    exclude: tuple = ()  # --exclude globs (kgen.lint.files.Excludes)
    unit: str = "dir"  # --unit: dir | file | tree (kgen.lint.units)
    jobs: int = 0  # processes for large inputs: 0 = every core this process may use; 1 = this one only


class LintResult:
    """Findings (sorted by file order, line, column) and what was read."""

    __slots__ = ("findings", "documents", "files", "input_errors", "fail_on_warnings", "skipped", "excluded", "units")

    def __init__(self, files: list[str] | None = None, fail_on_warnings: bool = False) -> None:
        self.findings: list[Finding] = []
        self.documents: list[DocumentRef] = []
        self.files: list[str] = files if files is not None else []
        self.input_errors: list[Finding] = []  # KG004: files that could not be parsed (also in findings)
        self.fail_on_warnings = fail_on_warnings
        self.skipped: list = []  # kgen.lint.files.Skip: files that are not manifests (kustomization.yaml ...)
        self.excluded = 0  # files and folders left out by --exclude
        self.units: list[Unit] = []  # the apply units (files that were skipped by their content left out)

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


def lint_text(text: str, filename: str, opts: LintOptions) -> LintResult:
    """Lint one YAML stream (what ``kgen render`` runs on its own output): one unit."""
    p = Prepared(opts)
    result = LintResult(fail_on_warnings=opts.fail_on_warnings)
    unit = Unit(filename, "stdin" if filename == "<stdin>" else "file", (filename,))
    with _running():
        from kgen.lint.check import check_group
        from kgen.lint.parse import Budget

        out = check_group([filename], [unit], lambda _name: text, p, Budget())
    _merge(result, [filename], [out], [unit])
    return result


def lint_documents(values: Iterable[Any], filename: str, opts: LintOptions) -> LintResult:
    """Lint documents already in memory (``kgen render``'s self-check on what it is about to print).

    Same schema check and rules as ``lint_text``, without a YAML round trip: findings carry the
    field path but no line (0). The builtin engine only: kubeconform reads files.
    """
    from kgen.errors import UsageError

    if opts.engine != "builtin":
        raise UsageError("lint_documents checks values in memory: use the builtin engine", option="--engine")
    p = Prepared(opts)
    result = LintResult(fail_on_warnings=opts.fail_on_warnings)
    docs = [Document(filename, i, None, value) for i, value in enumerate(values)]
    unit = Unit(filename, "file", (filename,))
    with _running():
        from kgen.lint.check import check_values

        out = check_values(docs, unit, p)
    _merge(result, [filename], [out], [unit])
    return result


def lint_paths(paths: Iterable[str], opts: LintOptions, stdin: Any = None) -> LintResult:
    """Lint files, folders (recursively: *.yaml, *.yml) and '-' (stdin), unit by unit."""
    from kgen.lint.files import Excludes
    from kgen.lint.units import collect

    p = Prepared(opts)
    plan = collect(list(paths), stdin, Excludes(opts.exclude), opts.unit)
    result = LintResult(fail_on_warnings=opts.fail_on_warnings)
    result.excluded = plan.excluded
    with _running():
        outputs = _check_groups(plan, p)
    _merge(result, plan.events, outputs, plan.units)
    return result


class _running:
    """While a run checks documents: a deeper recursion limit, and the cyclic garbage collector paused.

    The values of a unit stay alive until its cross-document rules have run; the collector would
    rescan that growing heap over and over (3-5x the run time on a folder of 2000 documents)
    although parsing creates no cycles."""

    def __enter__(self) -> None:
        import gc

        self.enabled = gc.isenabled()
        gc.disable()
        self.limit = sys.getrecursionlimit()
        if self.limit < RECURSION_LIMIT:
            sys.setrecursionlimit(RECURSION_LIMIT)

    def __exit__(self, *exc: object) -> None:
        import gc

        from kgen.lint.document import forget_positions

        sys.setrecursionlimit(self.limit)
        forget_positions()
        if self.enabled:
            gc.enable()


def jobs_for(opts: LintOptions, plan: Any, groups: list) -> int:
    """How many processes check ``groups``: one for small inputs (a fork costs more than it saves),
    for a single group, for ``--engine kubeconform`` (it runs a process per file itself) and where
    forking is not safe; else ``opts.jobs`` or every core."""
    from kgen.lint import workers

    if len(groups) < 2 or opts.engine != "builtin" or opts.jobs == 1:
        return 1
    if sum(plan.sizes.values()) < PARALLEL_MIN_BYTES and opts.jobs == 0:
        return 1
    return opts.jobs or workers.cores()


def _check_groups(plan: Any, p: Prepared) -> list[GroupOutput]:
    """Each group's output, in group order: in this process, or on every core for large inputs. The
    alias budget is the run's: when the workers together spent more than it (only hostile input
    does), the run is redone in one process, where the budget is spent in the same order as ever."""
    from kgen.lint import workers
    from kgen.lint.check import check_group
    from kgen.lint.parse import MAX_ALIAS_NODES, Budget
    from kgen.lint.units import groups as make_groups
    from kgen.lint.units import read_or_error

    groups = make_groups(plan.units)
    name_units = len(plan.units) > 1

    def read(name: str) -> str | InputError:
        got = plan.texts.get(name)
        return got if got is not None else read_or_error(name, explicit=False)

    budget = Budget(MAX_ALIAS_NODES)

    def work(i: int) -> GroupOutput:
        files, units = groups[i]
        return check_group(files, units, read, p, budget, name_units)

    jobs = jobs_for(p.opts, plan, groups)
    if jobs > 1:
        sizes = [sum(plan.sizes.get(f, 0) for f in files) for files, _ in groups]
        order = sorted(range(len(groups)), key=lambda i: (-sizes[i], i))  # the largest first
        outputs = workers.run(len(groups), work, jobs, order)
        if sum(o.alias_used for o in outputs if isinstance(o, GroupOutput)) <= MAX_ALIAS_NODES:
            return [_crashed(o, groups[i][0]) for i, o in enumerate(outputs)]
        budget.alias_nodes = MAX_ALIAS_NODES
    return [work(i) for i in range(len(groups))]


def _crashed(out: Any, files: list[str]) -> GroupOutput:
    """A group whose worker died: one KG004 finding per file (the run fails with exit 2)."""
    if isinstance(out, GroupOutput):
        return out
    from kgen.lint.check import FileOutput

    got = GroupOutput()
    problem = f"kgen's checks of this file's apply unit stopped: the worker process {out.describe()}"
    for name in files:
        fout = got.files[name] = FileOutput()
        finding = Finding("KG004", Severity.ERROR, problem, name)
        fout.input_errors.append(finding)
        got.findings.append(finding)
    return got


def _merge(result: LintResult, events: list, outputs: list[GroupOutput], units: list[Unit]) -> None:
    """The groups' outputs as one result, in the order the files were found: files, skipped files,
    documents and KG004 findings by file; findings by file order, line, column."""
    from kgen.lint.files import Skip

    by_file = {}
    for out in outputs:
        by_file.update(out.files)
    for event in events:
        if isinstance(event, Skip):
            result.skipped.append(event)
            continue
        fout = by_file[event]
        if fout.skip is not None:
            result.skipped.append(Skip(event, fout.skip))
            continue
        result.files.append(event)
        result.documents.extend(fout.refs)
        result.input_errors.extend(fout.input_errors)
    for out in outputs:
        result.findings.extend(out.findings)
    # A finding made twice (a Service checked against two files' copies of one Job) is reported once.
    result.findings = list(dict.fromkeys(result.findings))
    linted = set(result.files)
    for unit in units:
        files = tuple(f for f in unit.files if f in linted)
        if files:
            result.units.append(unit._replace(files=files))
    order = {name: i for i, name in enumerate(result.files)}
    result.findings.sort(key=lambda f: (order.get(f.file, len(order)), f.line, f.column, f.rule_id, f.path))


__all__ = [
    "ENGINES",
    "SKIP_ANNOTATION",
    "DocumentRef",
    "LintOptions",
    "LintResult",
    "Unit",
    "format_path",
    "lint_documents",
    "lint_paths",
    "lint_text",
]
