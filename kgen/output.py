"""Finding writers: text (default), json and junit. They write to the stream they are given."""

from __future__ import annotations

import json
from typing import IO, Any
from xml.sax.saxutils import escape, quoteattr

from kgen.errors import UsageError
from kgen.findings import Finding, Severity

FORMATS = ("text", "json", "junit")


def write_findings(result: Any, fmt: str, stream: IO[str]) -> None:
    """Write ``result`` (a LintResult) as ``fmt`` (text|json|junit) to ``stream``."""
    if fmt == "text":
        _text(result, stream)
    elif fmt == "json":
        _json(result, stream)
    elif fmt == "junit":
        _junit(result, stream)
    else:
        raise UsageError(f'must be text, json or junit, got "{fmt}"', option="--format")


def _text(result: Any, stream: IO[str]) -> None:
    for f in result.findings:
        stream.write(f.text() + "\n")


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
            "exitCode": result.exit_code,
        },
    }
    stream.write(json.dumps(payload, indent=2, ensure_ascii=False) + "\n")


def _junit(result: Any, stream: IO[str]) -> None:
    """One testsuite per file, one testcase per document; error findings are failures, warnings and
    info go to the testcase's system-out."""
    by_doc: dict[tuple, list[Finding]] = {}
    suites: dict[str, list] = {name: [] for name in result.files}
    for ref in result.documents:
        suites.setdefault(ref.file, []).append(ref)
    lines_by_file: dict[str, list[int]] = {}
    for ref in result.documents:
        lines_by_file.setdefault(ref.file, []).append(ref.line)
    for f in result.findings:
        starts = [ln for ln in lines_by_file.get(f.file, []) if ln <= max(f.line, 1)]
        key = (f.file, max(starts) if starts else 0)
        by_doc.setdefault(key, []).append(f)
    total_tests = len(result.documents)
    total_fail = sum(
        1 for ref in result.documents if any(x.severity is Severity.ERROR for x in by_doc.get((ref.file, ref.line), []))
    )
    out = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<testsuites name="kgen lint" tests="{total_tests}" failures="{total_fail}" errors="0">',
    ]
    for name, refs in suites.items():
        fails = sum(
            1 for ref in refs if any(x.severity is Severity.ERROR for x in by_doc.get((ref.file, ref.line), []))
        )
        out.append(f'  <testsuite name={quoteattr(name)} tests="{len(refs)}" failures="{fails}" errors="0">')
        for ref in refs:
            label = f"{ref.kind or '?'}/{ref.name or '?'} (line {ref.line})"
            found = by_doc.get((ref.file, ref.line), [])
            errors = [x for x in found if x.severity is Severity.ERROR]
            other = [x for x in found if x.severity is not Severity.ERROR]
            out.append(f"    <testcase classname={quoteattr(name)} name={quoteattr(label)}>")
            for x in errors:
                out.append(
                    f"      <failure type={quoteattr(x.rule_id)} message={quoteattr(x.message)}>"
                    f"{escape(x.text())}</failure>"
                )
            if other:
                out.append("      <system-out>" + escape("\n".join(x.text() for x in other)) + "</system-out>")
            out.append("    </testcase>")
        out.append("  </testsuite>")
    out.append("</testsuites>")
    stream.write("\n".join(out) + "\n")
