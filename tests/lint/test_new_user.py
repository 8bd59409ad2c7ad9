"""What a new user meets first: kgen's own values files kept beside the manifests are recognised (not KG003,
not "Helm values" advice) and counted in the summary; a finding two files' copies of one Job produce is
printed once; the Python API lints objects in memory; a clean run in a terminal says what it checked."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from lint_helpers import FIXTURES

from kgen import LintRequest, RenderRequest, lint, render
from kgen.cli import cli
from kgen.errors import UsageError
from kgen.lint.files import KGEN_VALUE_KEYS, is_kgen_values

ROOT = Path(__file__).resolve().parents[2]


def run(args):
    result = CliRunner().invoke(cli, ["lint", *args])
    return result.exit_code, result.stdout, result.stderr


def test_the_value_keys_lint_knows_are_renders():
    from kgen.render.values import VALUES

    assert {k.split(".")[0] for k in VALUES} == KGEN_VALUE_KEYS


@pytest.mark.parametrize("name", ["llama-values.yaml", "values.yaml", "prod.yaml"])
def test_kgen_values_files_beside_manifests_are_recognised(tmp_path, name):
    preset = CliRunner().invoke(cli, ["presets", "show", "4x8"]).stdout
    (tmp_path / name).write_text(preset)
    (tmp_path / "job.yaml").write_text((FIXTURES / "valid-job.yaml").read_text())
    code, out, err = run(["--summary", str(tmp_path)])
    assert code == 0 and "KG003" not in out
    assert f"{tmp_path / name}: skipped, kgen values file (lint what it renders: kgen render -f FILE" in err
    assert "Helm" not in err
    assert out.splitlines()[-1].endswith("- 1 file skipped (not Kubernetes manifests: 1 kgen values file)")


def test_helm_values_and_other_yaml_are_told_apart():
    assert is_kgen_values({"nodes": 2, "gpus": 8, "image": "x"})
    assert not is_kgen_values({"image": {"repository": "x"}, "replicaCount": 2})  # Helm's
    assert not is_kgen_values({"name": "x", "image": "y"})  # nothing only kgen has
    assert not is_kgen_values({"nodes": 2, "spec": {}})  # a key kgen does not know


def test_a_finding_two_copies_of_one_job_make_is_printed_once(tmp_path):
    for name in ("a.yaml", "b.yaml"):
        (tmp_path / name).write_text((FIXTURES / "seed000-2node-test-job.yaml").read_text())
    _, out, _ = run([str(tmp_path)])
    lines = out.splitlines()
    assert len(lines) == len(set(lines))
    assert sum(" KG140 " in line and "selector also matches" in line for line in lines) == 1


def test_the_python_api_lints_objects_in_memory():
    docs = [dict(d) for d in render(RenderRequest(preset="4x8")).documents]
    assert lint(documents=docs).exit_code == 0
    job = next(d for d in docs if d["kind"] == "Job")
    job["spec"]["template"]["spec"]["containers"][0]["image"] = "your-registry/train:v1"
    for report in (lint(documents=docs), lint(LintRequest(documents=docs, strict=True))):
        [finding] = [f for f in report.findings if f.severity.value == "error"]
        assert (report.exit_code, finding.rule_id, finding.file, finding.line) == (1, "KG181", "<documents>", 0)
        assert finding.path == "spec.template.spec.containers[0].image"
    with pytest.raises(UsageError, match="paths or documents, not both"):
        lint(LintRequest(["x.yaml"], documents=docs))
    with pytest.raises(UsageError, match="nothing to lint"):
        lint()


def _in_a_terminal(args: list[str]) -> str:
    leader, follower = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "kgen", "lint", *args], stdout=follower, stderr=subprocess.PIPE, env=env, timeout=60
    )
    os.close(follower)
    out = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    os.close(leader)
    assert proc.returncode == 0, proc.stderr
    return out.decode()


def test_a_clean_run_in_a_terminal_says_what_it_checked_and_nothing_when_piped():
    path = str(FIXTURES / "valid-job.yaml")
    assert _in_a_terminal([path]).strip() == "All checks passed: 3 documents in 1 file"
    assert run([path]) == (0, "", "")  # not a terminal: the report stays empty
    assert _in_a_terminal(["-o", "json", path]).lstrip().startswith("{")  # other formats unchanged
