"""Real-world manifests (tests/lint/fixtures/realworld/, modelled on public examples): lint reports
exactly the findings a reviewer expects (NAME.expected: `RULE LINE` per line), and the layouts marked
`# valid` lint clean under --strict. Regenerate the expected files with KGEN_UPDATE_REALWORLD=1 and
read the diff."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kgen.findings import Severity
from kgen.lint.api import LintOptions, lint_paths

CORPUS = Path(__file__).resolve().parent / "fixtures" / "realworld"
FILES = sorted(CORPUS.glob("*.yaml"))


def _expected(path: Path) -> list[tuple[str, int]]:
    out = []
    for line in path.with_suffix(".expected").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            rule, lineno = line.split()
            out.append((rule, int(lineno)))
    return sorted(out)


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_exactly_the_expected_findings(path):
    result = lint_paths([str(path)], LintOptions(kubernetes_version="1.33"))
    got = sorted((f.rule_id, f.line) for f in result.findings)
    if os.environ.get("KGEN_UPDATE_REALWORLD"):
        lines = [f"{f.rule_id} {f.line}  # {f.severity.value}: {f.message[:90]}" for f in result.findings]
        path.with_suffix(".expected").write_text("\n".join(lines) + "\n")
    assert got == _expected(path), "\n".join(f.text() for f in result.findings)


@pytest.mark.parametrize("path", [p for p in FILES if "# valid" in p.read_text()[:200]], ids=lambda p: p.stem)
def test_valid_layouts_are_clean_under_strict(path):
    result = lint_paths([str(path)], LintOptions(kubernetes_version="1.33", fail_on_warnings=True))
    assert result.exit_code == 0, "\n".join(f.text() for f in result.findings)
    assert all(f.severity is Severity.INFO for f in result.findings)


def test_the_corpus_covers_every_kind_lint_models():
    kinds = {
        line.split(":", 1)[1].strip() for p in FILES for line in p.read_text().splitlines() if line.startswith("kind:")
    }
    assert {
        "JobSet",
        "PyTorchJob",
        "TrainJob",
        "ClusterTrainingRuntime",
        "Job",
        "StatefulSet",
        "LeaderWorkerSet",
    } <= kinds
    assert {"AppWrapper", "NetworkPolicy"} <= kinds
