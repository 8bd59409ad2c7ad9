"""Finding writers: text (default), json, junit, github (GitHub Actions workflow commands) and sarif
(SARIF 2.1.0, for code scanning). They write to the stream they are given."""

from __future__ import annotations

import bisect
import json
from typing import IO, Any, NamedTuple

from kgen.errors import UsageError
from kgen.findings import Finding, Severity

FORMATS = ("text", "json", "junit", "github", "sarif")


def write_findings(result: Any, fmt: str, stream: IO[str]) -> None:
    """Write ``result`` (a LintResult) as ``fmt`` (one of FORMATS) to ``stream``."""
    writer = _WRITERS.get(fmt)
    if writer is None:
        raise UsageError(f'must be {", ".join(FORMATS[:-1])} or {FORMATS[-1]}, got "{fmt}"', option="--format")
    writer(result, stream)


def rules_listing(rules: list, fmt: str) -> str:
    """``kgen lint --list-rules``: one line per rule (text) or a JSON list (json)."""
    if fmt == "json":
        rows = [
            {
                "id": r.id,
                "severity": r.severity.value,
                "summary": r.summary,
                "fix": r.fix,
                "kinds": sorted(r.kinds) if r.kinds else None,
            }
            for r in rules
        ]
        return json.dumps(rows, indent=2, ensure_ascii=False) + "\n"
    return "".join(f"{r.id}  {r.severity.value:<7}  {r.summary}\n" for r in rules)


def _fails(result: Any, f: Finding) -> bool:
    fails = getattr(result, "fails", None)
    return fails(f) if fails is not None else f.severity is Severity.ERROR


def _text(result: Any, stream: IO[str]) -> None:
    for f in result.findings:
        stream.write(f.text() + "\n")


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def checked_line(result: Any) -> str:
    """What a clean `kgen lint` prints in a terminal (nothing when piped): what it checked, in one line."""
    docs, files = _plural(len(result.documents), "document"), _plural(len(result.files), "file")
    line = f"All checks passed: {docs} in {files}"
    skipped = len(getattr(result, "skipped", ()))
    if skipped:
        line += f" ({skipped} skipped: not Kubernetes manifests)"
    return line


def summary_line(result: Any) -> str:
    """The text report's last line (kubeconform's -summary): documents, files, findings by severity,
    the files skipped as not manifests or left out by --exclude and, when the run had several apply
    units, how many; then each unit with findings has a line of its own before it."""
    files, docs = len(result.files), len(result.documents)
    line = (
        f"Summary: {_plural(docs, 'document')} in {_plural(files, 'file')} - "
        f"{_plural(result.count(Severity.ERROR), 'error')}, {_plural(result.count(Severity.WARNING), 'warning')}, "
        f"{result.count(Severity.INFO)} info"
    )
    skipped, excluded = len(getattr(result, "skipped", ())), getattr(result, "excluded", 0)
    if skipped:
        values = sum(1 for s in result.skipped if s.reason.startswith("kgen values file"))
        said = f": {_plural(values, 'kgen values file')}" if values else ""
        line += f" - {_plural(skipped, 'file')} skipped (not Kubernetes manifests{said})"
    if excluded:
        line += f" - {excluded} excluded"
    units = getattr(result, "units", ())
    if len(units) <= 1:
        return line
    line += f" - {_plural(len(units), 'apply unit')}"
    counts: dict[str, list[int]] = {}
    for f in result.findings:
        n = counts.setdefault(f.unit, [0, 0, 0])
        n[(Severity.ERROR, Severity.WARNING, Severity.INFO).index(f.severity)] += 1
    per_unit = [
        f"Unit {u.name} ({u.kind}, {_plural(len(u.files), 'file')}): "
        f"{_plural(n[0], 'error')}, {_plural(n[1], 'warning')}, {n[2]} info"
        for u in units
        for n in [counts.get(u.name)]
        if n
    ]
    return "\n".join([*per_unit, line])


def finding_dict(f: Finding) -> dict:
    return {
        "rule": f.rule_id,
        "severity": f.severity.value,
        "message": f.message,
        "file": f.file,
        "line": f.line,
        "column": f.column,
        "path": f.path,
        "kind": f.kind,
        "name": f.name,
        "unit": f.unit,
    }


def _json(result: Any, stream: IO[str]) -> None:
    payload = {
        "findings": [finding_dict(f) for f in result.findings],
        "summary": {
            "files": len(result.files),
            "documents": len(result.documents),
            "errors": result.count(Severity.ERROR),
            "warnings": result.count(Severity.WARNING),
            "info": result.count(Severity.INFO),
            "skipped": len(getattr(result, "skipped", ())),
            "excluded": getattr(result, "excluded", 0),
            "units": len(getattr(result, "units", ())),
            "strict": bool(getattr(result, "fail_on_warnings", False)),
            "exitCode": result.exit_code,
        },
    }
    skipped = getattr(result, "skipped", ())
    if skipped:
        payload["skipped"] = [{"file": s.path, "reason": s.reason} for s in skipped]
    stream.write(indented_json(payload) + "\n")


def indented_json(value: Any) -> str:
    """``json.dumps(value, indent=2, ensure_ascii=False)``, byte for byte, for values made of dicts with
    string keys, lists, strings, ints, floats, booleans and None (any other value: json.dumps itself).
    With ``indent`` json's encoder runs in Python, item by item (41 ms for 5,000 findings); here the
    strings go through its C escaper and the layout is joined once (28 ms)."""
    out: list[str] = []
    try:
        _indented(value, "\n", out)
    except _NotPlain:
        return json.dumps(value, indent=2, ensure_ascii=False)
    return "".join(out)


class _NotPlain(Exception):
    pass


_ESCAPE = json.encoder.encode_basestring  # what ensure_ascii=False uses (C)
_FLOAT = json.JSONEncoder(ensure_ascii=False).encode  # a float alone: NaN, Infinity, repr()


def _indented(value: Any, newline: str, out: list[str]) -> None:
    t = value.__class__
    if t is str:
        out.append(_ESCAPE(value))
    elif t is int:
        out.append(int.__repr__(value))
    elif value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif t is float:
        out.append(_FLOAT(value))
    elif t is dict:
        if not value:
            out.append("{}")
            return
        inner = newline + "  "
        sep = "{" + inner
        for k, v in value.items():
            if k.__class__ is not str:
                raise _NotPlain
            out.append(sep)
            out.append(_ESCAPE(k))
            out.append(": ")
            _indented(v, inner, out)
            sep = "," + inner
        out.append(newline + "}")
    elif t is list:
        if not value:
            out.append("[]")
            return
        inner = newline + "  "
        sep = "[" + inner
        for v in value:
            out.append(sep)
            _indented(v, inner, out)
            sep = "," + inner
        out.append(newline + "]")
    else:
        raise _NotPlain


def _junit(result: Any, stream: IO[str]) -> None:
    """One testsuite per file. A document without failing findings is one passing testcase; a document
    with failing findings (errors; warnings too under --strict) has one testcase per such finding, each
    with exactly one <failure> (the JUnit schema allows one; GitLab and Jenkins show only the first).
    Findings that do not fail go to the system-out of the document's first testcase."""
    from xml.sax.saxutils import escape, quoteattr  # here: it imports urllib (~20-50 ms) for every writer

    by_doc: dict[tuple, list[Finding]] = {}
    suites: dict[str, list] = {name: [] for name in result.files}
    for ref in result.documents:
        suites.setdefault(ref.file, []).append(ref)
    for f in getattr(result, "input_errors", []):
        # the unparsable part of a file is a testcase of its own, starting at the error's line
        suites.setdefault(f.file, []).append(_Ref(f.file, f.line, "", ""))
    lines_by_file: dict[str, list[int]] = {}
    for refs in suites.values():
        for ref in refs:
            lines_by_file.setdefault(ref.file, []).append(ref.line)
    for lines in lines_by_file.values():
        lines.sort()
    for f in result.findings:  # a finding belongs to the document that starts last at or before its line
        lines = lines_by_file.get(f.file, [])
        at = bisect.bisect_right(lines, max(f.line, 1))
        key = (f.file, lines[at - 1] if at else 0)
        by_doc.setdefault(key, []).append(f)
    cases: dict[str, list[list[str]]] = {}  # file -> testcases (their XML lines)
    failed: dict[str, int] = {}
    for name, refs in suites.items():
        cases[name] = []
        failed[name] = 0
        for ref in refs:
            label = f"{ref.kind or '?'}/{ref.name or '?'} (line {ref.line})" if ref.kind else f"YAML (line {ref.line})"
            found = by_doc.get((ref.file, ref.line), [])
            errors = [x for x in found if _fails(result, x)]
            other = [x for x in found if not _fails(result, x)]
            out_xml = []
            if other:
                out_xml = ["      <system-out>" + escape("\n".join(x.text() for x in other)) + "</system-out>"]
            if not errors:
                cases[name].append([f"    <testcase classname={quoteattr(name)} name={quoteattr(label)}>", *out_xml])
                continue
            failed[name] += len(errors)
            for i, x in enumerate(errors):
                case_name = f"{label} {x.rule_id}" + (f" [{x.path}]" if x.path else "")
                cases[name].append(
                    [
                        f"    <testcase classname={quoteattr(name)} name={quoteattr(case_name)}>",
                        f"      <failure type={quoteattr(x.rule_id)} message={quoteattr(x.message)}>"
                        f"{escape(x.text())}</failure>",
                        *(out_xml if i == 0 else []),
                    ]
                )
    total_tests = sum(len(c) for c in cases.values())
    out = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<testsuites name="kgen lint" tests="{total_tests}" failures="{sum(failed.values())}" errors="0">',
    ]
    for name, file_cases in cases.items():
        out.append(
            f'  <testsuite name={quoteattr(name)} tests="{len(file_cases)}" failures="{failed[name]}" errors="0">'
        )
        for case in file_cases:
            out.extend(case)
            out.append("    </testcase>")
        out.append("  </testsuite>")
    out.append("</testsuites>")
    stream.write("\n".join(out) + "\n")


class _Ref(NamedTuple):
    file: str
    line: int
    kind: str
    name: str


# --- GitHub Actions workflow commands ---------------------------------------------------------

_GITHUB_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def _gh_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _gh_prop(text: str) -> str:
    return _gh_data(text).replace(":", "%3A").replace(",", "%2C")


def github_line(f: Finding) -> str:
    """``::error file=F,line=L,col=C,title=KG105::message [path]`` (GitHub Actions annotation)."""
    props = [f"file={_gh_prop(f.file)}"]
    if f.line:
        props += [f"line={f.line}", f"col={f.column or 1}"]
    props.append(f"title={_gh_prop(f.rule_id)}")
    field = f" [{f.path}]" if f.path else ""
    return f"::{_GITHUB_LEVEL[f.severity]} {','.join(props)}::{_gh_data(f.message + field)}"


def _github(result: Any, stream: IO[str]) -> None:
    for f in result.findings:
        stream.write(github_line(f) + "\n")


# --- SARIF 2.1.0 --------------------------------------------------------------------------------

SARIF_VERSION = "2.1.0"
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
_SARIF_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}


def _artifact_uri(name: str) -> str:
    """A URI reference for a file name: relative paths stay relative (code scanning resolves them
    against the checkout), absolute ones become file:// URIs, stdin is 'stdin'."""
    from pathlib import PurePath
    from urllib.parse import quote

    if name in ("<stdin>", "-"):
        return "stdin"
    if name.startswith("<") and name.endswith(">"):
        return quote(name[1:-1])
    p = PurePath(name)
    if p.is_absolute():
        return "file://" + quote(p.as_posix())
    return quote(p.as_posix())


def sarif_log(result: Any) -> dict:
    """The SARIF 2.1.0 log of ``result``: one run, every registered rule, one result per finding."""
    from kgen import __version__
    from kgen.lint.registry import load_rules

    rules = sorted(load_rules().values(), key=lambda r: r.id)
    index = {r.id: i for i, r in enumerate(rules)}
    driver = {
        "name": "kgen",
        "version": __version__,
        "informationUri": "https://github.com/kgen-dev/kgen/blob/main/docs/lint.md",
        "rules": [
            {
                "id": r.id,
                "name": r.id,
                "shortDescription": {"text": r.summary},
                "fullDescription": {"text": r.summary},
                "help": {"text": r.fix},
                "helpUri": f"https://github.com/kgen-dev/kgen/blob/main/docs/lint.md#{r.id.lower()}",
                "defaultConfiguration": {"level": _SARIF_LEVEL[r.severity]},
            }
            for r in rules
        ],
    }
    results = []
    for f in result.findings:
        location: dict = {"physicalLocation": {"artifactLocation": {"uri": _artifact_uri(f.file)}}}
        # code scanning places every result on a line: a finding about a whole file goes on line 1
        location["physicalLocation"]["region"] = {"startLine": max(f.line, 1), "startColumn": max(f.column, 1)}
        if f.path or f.kind:
            logical = f"{f.kind}/{f.name}" + (f".{f.path}" if f.path else "")
            location["logicalLocations"] = [{"fullyQualifiedName": logical}]
        entry: dict = {
            "ruleId": f.rule_id,
            "level": _SARIF_LEVEL[f.severity],
            "message": {"text": f.message},
            "locations": [location],
        }
        if f.rule_id in index:
            entry["ruleIndex"] = index[f.rule_id]
        results.append(entry)
    artifacts = [{"location": {"uri": _artifact_uri(name)}} for name in result.files]
    return {
        "$schema": SARIF_SCHEMA,
        "version": SARIF_VERSION,
        "runs": [
            {
                "tool": {"driver": driver},
                "artifacts": artifacts,
                "results": results,
                "invocations": [
                    {
                        "executionSuccessful": not getattr(result, "input_errors", []),
                        "exitCode": result.exit_code,
                    }
                ],
                "columnKind": "unicodeCodePoints",
            }
        ],
    }


def _sarif(result: Any, stream: IO[str]) -> None:
    stream.write(indented_json(sarif_log(result)) + "\n")


_WRITERS = {"text": _text, "json": _json, "junit": _junit, "github": _github, "sarif": _sarif}
