"""docs/lint.md stays honest: every registered rule is documented with its severity, and the
pre-commit hook runs `kgen lint`."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from kgen.lint.registry import load_rules

ROOT = Path(__file__).resolve().parents[2]


def test_every_rule_is_documented_with_its_severity_and_fix():
    text = (ROOT / "docs" / "lint.md").read_text()
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| (KG\d{3}) \| (\w+) \|", text, re.M)}
    rules = load_rules()
    assert rows == {rid: r.severity.value for rid, r in rules.items()}
    for r in rules.values():
        assert r.summary and r.fix and r.summary.endswith(".") and r.fix.endswith(".")
        esc = lambda s: s.replace("|", "\\|")
        row = f"| {r.id} | {r.severity.value} | {esc(r.summary)} | {esc(r.fix)} |"
        assert row in text, f"docs/lint.md row for {r.id} is out of date"


def test_docs_have_a_ci_section_with_pre_commit_and_shell():
    text = (ROOT / "docs" / "lint.md").read_text()
    assert "## CI use" in text and "pre-commit" in text and "kgen lint -o junit --output-file" in text


def test_pre_commit_hook_runs_kgen_lint():
    [hook] = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    assert hook["id"] == "kgen-lint" and hook["entry"] == "kgen lint" and hook["language"] == "python"
    assert re.search(hook["files"], "deploy/job.yaml") and re.search(hook["files"], "a.yml")


def test_docs_state_the_cli_default_kubernetes_version():
    """QA #8: docs/lint.md said the default was 1.37."""
    from kgen.versions import DEFAULT_KUBERNETES_VERSION

    text = " ".join((ROOT / "docs" / "lint.md").read_text().split())
    defaults = re.findall(r"--kubernetes-version`, default (1\.\d+)", text)
    assert defaults == [DEFAULT_KUBERNETES_VERSION]
