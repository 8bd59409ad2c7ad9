"""`kgen lint` through click's CliRunner: exact text output, formats, exit codes, suppression."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET

import pytest
from click.testing import CliRunner
from lint_helpers import BASES, FIXTURES, dump

from kgen.cli import cli


def run(args, input=None):
    result = CliRunner().invoke(cli, ["lint", *args], input=input)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def bad_file(tmp_path):
    docs = BASES["job"]()
    docs[1]["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"] = "512GB"
    docs[0]["spec"].pop("publishNotReadyAddresses")
    path = tmp_path / "bad.yaml"
    path.write_text(dump(docs))
    return path


def test_clean_file_exits_0_with_no_output():
    code, out, err = run([str(FIXTURES / "valid-job.yaml")])
    assert (code, out, err) == (0, "", "")


def test_text_format_is_exact(bad_file):
    code, out, err = run([str(bad_file)])
    assert code == 1 and err == ""
    assert out.splitlines() == [
        f"{bad_file}:9:1: KG102 warning: set publishNotReadyAddresses: true so llama-N.llama resolves before the "
        "pods are Ready [spec]",
        f"{bad_file}:70:13: KG047 error: '512GB' is not a Kubernetes quantity (e.g. 512Gi, 500m, 8) "
        "[spec.template.spec.containers[0].resources.limits.memory]",
    ]


def test_json_format(bad_file):
    code, out, _ = run(["--format", "json", str(bad_file)])
    payload = json.loads(out)
    assert code == 1
    assert payload["summary"] == {
        "files": 1,
        "documents": 2,
        "errors": 1,
        "warnings": 1,
        "info": 0,
        "strict": False,
        "exitCode": 1,
    }
    assert payload["findings"][1] == {
        "rule": "KG047",
        "severity": "error",
        "message": "'512GB' is not a Kubernetes quantity (e.g. 512Gi, 500m, 8)",
        "file": str(bad_file),
        "line": 70,
        "column": 13,
        "path": "spec.template.spec.containers[0].resources.limits.memory",
        "kind": "Job",
        "name": "llama",
    }


def test_junit_format(bad_file, tmp_path):
    report = tmp_path / "report.xml"
    code, out, _ = run(["--format", "junit", "-o", str(report), str(bad_file)])
    assert code == 1 and out == ""
    root = ET.parse(report).getroot()
    assert root.tag == "testsuites" and root.get("tests") == "2" and root.get("failures") == "1"
    cases = root.findall("./testsuite/testcase")
    assert [c.get("name") for c in cases] == ["Service/llama (line 1)", "Job/llama (line 19)"]
    [failure] = cases[1].findall("failure")
    assert failure.get("type") == "KG047"
    assert "KG102 warning" in cases[0].find("system-out").text


def test_stdin_and_folders_recursively(tmp_path):
    sub = tmp_path / "a" / "b"
    sub.mkdir(parents=True)
    shutil.copy(FIXTURES / "seed003-statefulset-guide.yaml", sub / "sts.yml")
    (tmp_path / "notes.txt").write_text("not yaml: [")
    code, out, _ = run([str(tmp_path), "-"], input=(FIXTURES / "valid-job.yaml").read_text())
    assert code == 1
    files = {line.split(":")[0] for line in out.splitlines()}
    assert files == {str(sub / "sts.yml")}


def test_skip_option_and_annotation(bad_file):
    code, out, _ = run(["--skip", "KG047,KG102", str(bad_file)])
    assert (code, out) == (0, "")
    code, out, _ = run(["--skip", "KG047", "--skip", "KG102", str(bad_file)])
    assert (code, out) == (0, "")
    docs = BASES["job"]()
    docs[0]["spec"].pop("publishNotReadyAddresses")
    docs[0]["metadata"]["annotations"] = {"kgen.dev/lint-skip": "KG102"}
    code, out, _ = run(["-"], input=dump(docs))
    assert (code, out) == (0, "")


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--kubernetes-version", "1.24"], "--kubernetes-version: unsupported version '1.24'"),
        (["--kubernetes-version", "banana"], "--kubernetes-version: not a Kubernetes version"),
        (["--skip", "KG999"], "--skip: unknown rule id KG999"),
        (["--format", "xml"], "--format: must be text, json, junit, github or sarif"),
        (["--engine", "kubeval"], "--engine: unknown engine 'kubeval'"),
        (["does-not-exist.yaml"], "does-not-exist.yaml: no such file or directory"),
    ],
)
def test_bad_input_exits_2_with_one_line(args, needle):
    if "does-not-exist.yaml" not in args:
        args = [*args, str(FIXTURES / "valid-job.yaml")]
    code, out, err = run(args)
    assert code == 2 and out == ""
    assert err.startswith("kgen: error: ") and needle in err and err.count("\n") == 1
    assert "Traceback" not in err


def test_yaml_syntax_error_is_reported_the_rest_linted_the_report_written_exit_2(tmp_path, bad_file):
    """issue 8.6: one broken file no longer ends the run without a report."""
    path = tmp_path / "broken.yaml"
    path.write_text("apiVersion: v1\nkind: ConfigMap\ndata:\n  a: [1, 2\n")
    report = tmp_path / "report.xml"
    code, out, err = run(["--format", "junit", "-o", str(report), str(path), str(bad_file)])
    assert code == 2 and out == ""
    assert err.startswith(f"kgen: error: {path}:5:1: YAML syntax error") and err.count("\n") == 1
    root = ET.parse(report).getroot()
    failures = {f.get("type") for f in root.iter("failure")}
    assert failures == {"KG004", "KG047"}  # the broken file, and the other file's error finding
    code, out, _ = run([str(path), str(bad_file)])
    assert code == 2
    assert out.splitlines()[0] == (
        f"{path}:5:1: KG004 error: YAML syntax error: did not find expected ',' or ']'; "
        "the rest of this file is not linted"
    )
    assert any("KG047" in line for line in out.splitlines())


def test_syntax_error_cannot_be_skipped(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("kind: [\n")
    code, out, _ = run(["--skip", "KG004", str(path)])
    assert code == 2 and "KG004" in out


def test_a_file_that_is_not_utf8_is_a_finding_too(tmp_path):
    (tmp_path / "latin1.yaml").write_bytes("data: caf\xe9\n".encode("latin-1"))
    (tmp_path / "ok.yaml").write_text((FIXTURES / "valid-job.yaml").read_text())
    code, out, err = run([str(tmp_path)])
    assert code == 2 and "latin1.yaml: KG004 error:" in out and "not UTF-8" in out and "not UTF-8" in err


@pytest.mark.skipif(shutil.which("kubeconform") is not None, reason="kubeconform is installed here")
def test_kubeconform_engine_without_binary_is_a_clear_error():
    code, out, err = run(["--engine", "kubeconform", str(FIXTURES / "valid-job.yaml")])
    assert code == 2 and out == ""
    assert "--engine: kubeconform is not on PATH" in err


def test_empty_stdin_is_an_input_error_not_a_clean_pass():
    """`kgen render --nodes 0 | kgen lint -` must fail even without `set -o pipefail`."""
    from click.testing import CliRunner

    from kgen.cli import cli

    for text in ("", "\n  \n"):
        res = CliRunner().invoke(cli, ["lint", "-"], input=text)
        assert res.exit_code == 2
        assert res.stdout == ""
        assert (
            res.stderr == "kgen: error: <stdin>: empty input; nothing to lint (did the command before the pipe fail?)\n"
        )
