"""--engine kubeconform: the offline pieces are unit-tested here; a real run needs the binary."""

from __future__ import annotations

import hashlib
import shutil

import pytest
from lint_helpers import BASES, FIXTURES, dump

from kgen import schema
from kgen.errors import InputError
from kgen.lint import kubeconform
from kgen.lint.api import LintOptions, lint_paths, lint_text
from kgen.lint.parse import parse_stream


def test_cache_file_name_is_sha256_of_the_definitions_url():
    assert kubeconform.cache_file_name() == "a9027535b596dbfbbdb2af8f583a6f1dae274670326c658b6ac2894b0e937bda"
    assert kubeconform.cache_file_name() == hashlib.sha256(b"https://kubernetes.io/api/_definitions.json").hexdigest()


def test_seed_cache_one_folder_per_version_and_strictness(tmp_path):
    strict = kubeconform.seed_cache("1.33", True, tmp_path)
    loose = kubeconform.seed_cache("1.33", False, tmp_path)
    other = kubeconform.seed_cache("1.37", True, tmp_path)
    assert len({strict, loose, other}) == 3
    src = schema.schema_root() / "v1.33.0-local-strict" / "_definitions.json"
    seeded = strict / kubeconform.cache_file_name()
    assert seeded.read_bytes() == src.read_bytes()
    assert (loose / kubeconform.cache_file_name()).read_bytes() == (
        schema.schema_root() / "v1.33.0-local" / "_definitions.json"
    ).read_bytes()
    assert kubeconform.seed_cache("1.33", True, tmp_path) == strict  # idempotent


def test_command_line_is_offline_and_strict(tmp_path):
    cmd = kubeconform.build_command(
        "/usr/bin/kubeconform", "1.33", True, tmp_path, None, ["kubeflow.org/v1/PyTorchJob"], ["a.yaml"]
    )
    root = schema.schema_root()
    assert cmd == [
        "/usr/bin/kubeconform",
        "-strict",
        "-output",
        "json",
        "-kubernetes-version",
        "1.33.0",
        "-cache",
        str(tmp_path),
        "-schema-location",
        f"{root}/{{{{ .NormalizedKubernetesVersion }}}}-local{{{{ .StrictSuffix }}}}/"
        "{{ .ResourceKind }}{{ .KindSuffix }}.json",
        "-skip",
        "kubeflow.org/v1/PyTorchJob",
        "a.yaml",
    ]
    assert "-ignore-missing-schemas" not in cmd
    # the template resolves to a real bundled file for Job 1.33 strict
    assert (root / "v1.33.0-local-strict" / "job-batch-v1.json").is_file()


def test_report_maps_to_findings_with_lines():
    docs = parse_stream(dump(BASES["job"]()), "job.yaml")
    report = {
        "resources": [
            {
                "filename": "job.yaml",
                "kind": "Job",
                "name": "llama",
                "version": "batch/v1",
                "status": "statusInvalid",
                "msg": "...",
                "validationErrors": [
                    {"path": "/spec/template/spec/containers/0/image", "msg": "got number, want string"}
                ],
            },
            {"filename": "job.yaml", "kind": "Service", "name": "llama", "status": "statusValid"},
        ],
        "summary": {},
    }
    [f] = kubeconform.Runner.findings(report, docs)
    assert (f.rule_id, f.kind, f.path) == ("KG010", "Job", "spec.template.spec.containers[0].image")
    assert f.line == 44 and f.column == 9 and "got number, want string" in f.message


def test_skipped_or_errored_resources_are_errors_not_silence():
    docs = parse_stream(dump(BASES["job"]()), "job.yaml")
    report = {
        "resources": [{"kind": "Job", "name": "llama", "status": "statusError", "msg": "could not find schema for Job"}]
    }
    [f] = kubeconform.Runner.findings(report, docs)
    assert f.severity.value == "error" and "could not find schema" in f.message


@pytest.mark.skipif(
    shutil.which("kubeconform") is None, reason="kubeconform binary not on PATH (not installable in this environment)"
)
def test_real_kubeconform_run_matches_builtin():
    opts = LintOptions(engine="kubeconform")
    assert lint_paths([str(FIXTURES / "valid-job.yaml")], opts).findings == []
    docs = BASES["job"]()
    docs[1]["spec"]["completions"] = "four"
    result = lint_text(dump(docs), "<stdin>", opts)
    assert any(f.rule_id == "KG010" and f.path == "spec.completions" for f in result.findings)


@pytest.mark.parametrize("rc,stdout", [(2, '{"resources": []}'), (1, ""), (0, "not json"), (0, "[]")])
def test_a_broken_kubeconform_run_is_an_error_not_a_pass(rc, stdout):
    with pytest.raises(InputError, match="kubeconform failed"):
        kubeconform.parse_report(rc, stdout, "boom")


def test_normal_reports_parse():
    assert kubeconform.parse_report(1, '{"resources": [], "summary": {}}', "") == {"resources": [], "summary": {}}
