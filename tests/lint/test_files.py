"""CI folders: YAML that is not a manifest is skipped with an info line, --exclude, permission
errors named as such, the summary line."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from lint_helpers import FIXTURES, run_lint

from kgen.cli import cli
from kgen.lint.files import Excludes

VALID = (FIXTURES / "valid-job.yaml").read_text()
BAD_NAME = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: Bad_Name}\n"


def run(args, input=None):
    result = CliRunner().invoke(cli, ["lint", *args], input=input)
    return result.exit_code, result.stdout, result.stderr


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


CI_REPO = {
    "deploy/job.yaml": VALID,
    "deploy/kustomization.yaml": (
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [job.yaml]\n"
    ),
    "deploy/overlays/prod/kustomization.yml": "resources: [../../]\n",
    "charts/train/Chart.yaml": "apiVersion: v2\nname: train\nversion: 0.1.0\n",
    "charts/train/values.yaml": "image: ghcr.io/acme/train\nnodes: 4\n",
    "charts/train/values-prod.yaml": "nodes: 16\n",
    "charts/train/ci/test-values.yaml": "nodes: 2\n",
    "charts/train/templates/job.yaml": "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: {{ .Release.Name }}\n",
    "charts/train/templates/_helpers.tpl.yaml": '{{- define "x" -}}\n{{- end -}}\n',
    "charts/train/crds/crd-cm.yaml": BAD_NAME,  # a chart's crds/ are plain manifests: linted
    ".gitlab-ci.yml": "stages: [test]\ntest:\n  script: [pytest]\n",
    ".pre-commit-config.yaml": "repos:\n- repo: local\n  hooks: []\n",
    "docker-compose.yml": "services:\n  web:\n    image: nginx\n",
    "compose.prod.yaml": "services:\n  web:\n    image: nginx\n",
    "ci/build.yml": "on: [push]\njobs:\n  build:\n    runs-on: ubuntu-latest\n",  # a workflow outside .github
    "helm/values.yaml": "replicas: 3\n",  # values of a chart kept elsewhere
    "render/job.tmpl.yaml": "kind: Job\nmetadata:\n  name: {{ name }}\n",  # a Jinja template
    "docs/configmap-with-braces.yaml": (
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: alerts}\ndata:\n  rule: 'value is {{ $value }}'\n"
    ),  # a real manifest that holds {{: linted
}


def test_a_ci_folder_lints_the_manifests_and_skips_the_rest_with_info_lines(tmp_path):
    root = write(tmp_path, CI_REPO)
    code, out, err = run(["--summary", str(root)])
    assert code == 1, (out, err)
    lines = out.splitlines()
    assert [ln.split(": ")[0] for ln in lines[:-2]] == [f"{root}/charts/train/crds/crd-cm.yaml:3:12"]
    assert lines[-2] == f"Unit {root}/charts/train/crds/ (directory, 1 file): 1 error, 0 warnings, 0 info"
    assert lines[-1] == (
        "Summary: 5 documents in 3 files - 1 error, 0 warnings, 0 info - 15 files skipped (not Kubernetes manifests)"
        " - 3 apply units"
    )
    skipped = {ln.split(": ")[2].split(", ")[0][len(str(root)) + 1 :]: ln for ln in err.splitlines()}
    assert sorted(skipped) == sorted(
        set(CI_REPO) - {"deploy/job.yaml", "charts/train/crds/crd-cm.yaml", "docs/configmap-with-braces.yaml"}
    )
    assert all(ln.startswith("kgen: info: ") and ": skipped, " in ln for ln in err.splitlines())
    assert "Kustomize" in skipped["deploy/kustomization.yaml"]
    assert "Helm chart template (render it first: helm template" in skipped["charts/train/templates/job.yaml"]
    assert (
        "Helm values file" in skipped["charts/train/values-prod.yaml"] and "Helm values" in skipped["helm/values.yaml"]
    )
    assert "GitHub Actions workflow" in skipped["ci/build.yml"] and "Docker Compose" in skipped["compose.prod.yaml"]
    assert "a template ({{ ... }})" in skipped["render/job.tmpl.yaml"]


def test_non_manifests_named_explicitly_are_skipped_too_like_pre_commit_passes_them(tmp_path):
    root = write(tmp_path, CI_REPO | {".github/workflows/ci.yml": "on: push\njobs: {}\n"})
    code, out, err = run([str(root / "deploy/kustomization.yaml"), str(root / ".github/workflows/ci.yml")])
    assert (code, out) == (0, "") and len(err.splitlines()) == 2
    code, out, err = run([str(root / "deploy/kustomization.yaml"), str(root / "deploy/job.yaml")])
    assert (code, out) == (0, "") and "kustomization.yaml: skipped, Kustomize" in err


def test_a_folder_with_nothing_but_non_manifests_is_an_input_error(tmp_path):
    root = write(tmp_path, {k: v for k, v in CI_REPO.items() if k.startswith("charts/train/") and "crds" not in k})
    code, out, err = run([str(root / "charts")])
    assert code == 2 and out == "" and "nothing to lint" in err.splitlines()[-1]


def test_json_lists_what_was_skipped_and_excluded(tmp_path):
    root = write(tmp_path, {"a/job.yaml": VALID, "a/kustomization.yaml": "resources: []\n", "old/x.yaml": BAD_NAME})
    code, out, _ = run(["--format", "json", "--exclude", "old", str(root)])
    payload = json.loads(out)
    assert code == 0 and payload["summary"]["skipped"] == 1 and payload["summary"]["excluded"] == 1
    assert payload["skipped"] == [{"file": f"{root}/a/kustomization.yaml", "reason": payload["skipped"][0]["reason"]}]


def test_summary_line_is_exact_and_only_for_text(tmp_path):
    (tmp_path / "bad.yaml").write_text(BAD_NAME)
    code, out, _ = run(["--summary", str(FIXTURES / "valid-job.yaml"), str(tmp_path / "bad.yaml")])
    assert (
        code == 1
        and out.splitlines()[-1] == "Summary: 4 documents in 2 files - 1 error, 0 warnings, 0 info - 2 apply units"
    )
    assert out.splitlines()[-2] == f"Unit {tmp_path}/ (directory, 1 file): 1 error, 0 warnings, 0 info"
    code, out, _ = run(["--summary", str(FIXTURES / "valid-job.yaml")])
    assert (code, out) == (0, "Summary: 3 documents in 1 file - 0 errors, 0 warnings, 0 info\n")
    code, out, err = run(["--summary", "--format", "json", str(FIXTURES / "valid-job.yaml")])
    assert code == 2 and out == "" and err.startswith("kgen: error: --summary: goes with the text format only")


# ---------------------------------------------------------------------------------------------
# --exclude


@pytest.mark.parametrize(
    ("glob", "path", "is_dir", "excluded"),
    [
        ("*.tmpl.yaml", "a/b/job.tmpl.yaml", False, True),  # no slash: a name at any depth
        ("*.tmpl.yaml", "job.yaml", False, False),
        ("legacy", "deploy/legacy", True, True),
        ("legacy/", "deploy/legacy", True, True),  # trailing slash: folders only
        ("legacy/", "deploy/legacy", False, False),
        ("deploy/*.yaml", "deploy/job.yaml", False, True),  # with a slash: anchored at the argument
        ("deploy/*.yaml", "x/deploy/job.yaml", False, False),
        ("deploy/*.yaml", "deploy/sub/job.yaml", False, False),  # * stays within one segment
        ("/job.yaml", "job.yaml", False, True),
        ("/job.yaml", "a/job.yaml", False, False),
        ("**/gen/*.yaml", "a/b/gen/x.yaml", False, True),
        ("**/gen/*.yaml", "gen/x.yaml", False, True),
        ("a/**", "a/b/c.yaml", False, True),
        ("a/**/c.yaml", "a/c.yaml", False, True),
        ("a/**/c.yaml", "a/x/y/c.yaml", False, True),
        ("values-?.yaml", "values-1.yaml", False, True),
        ("values-[!0-9].yaml", "values-1.yaml", False, False),
        ("values-[!0-9].yaml", "values-x.yaml", False, True),
    ],
)
def test_exclude_globs_work_like_gitignore_lines(glob, path, is_dir, excluded):
    assert Excludes([glob]).matches(path, is_dir) is excluded


def test_exclude_prunes_folders_and_files_relative_to_each_argument(tmp_path):
    root = write(
        tmp_path / "repo",
        {
            "deploy/job.yaml": VALID,
            "deploy/legacy/old.yaml": BAD_NAME,
            "deploy/x.tmpl.yaml": BAD_NAME,
            "gen/a.yaml": BAD_NAME,
        },
    )
    code, out, err = run(
        ["--summary", "--exclude", "legacy/", "--exclude", "*.tmpl.yaml", "--exclude", "/gen", str(root)]
    )
    assert (code, err) == (
        0,
        "",
    ) and out == "Summary: 3 documents in 1 file - 0 errors, 0 warnings, 0 info - 3 excluded\n"
    code, out, _ = run(
        ["--exclude", "deploy/legacy/**", str(root / "deploy/legacy/old.yaml"), str(root / "deploy/job.yaml")]
    )
    assert (code, out) == (0, "")  # an explicit file is matched as given


# ---------------------------------------------------------------------------------------------
# Permission errors and special files


def _without_dac_override():
    """As root, drop CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from the bounding set before exec, so
    the child is refused what mode 000 forbids (root reads everything otherwise)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
        if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def test_permission_denied_is_named_the_rest_linted_exit_2():
    """A folder and a file the user cannot read are KG004 findings that say so. As root (which reads
    everything) the kgen process runs without the capabilities that override file modes; the test
    cleans up its own folder."""
    root = Path(tempfile.mkdtemp(prefix="kgen-perm-", dir="/tmp"))
    try:
        root.chmod(0o755)
        write(root, {"ok/job.yaml": VALID, "ok/bad.yaml": BAD_NAME, "locked/x.yaml": VALID, "secret.yaml": VALID})
        for p in [root / "ok", root / "ok/job.yaml", root / "ok/bad.yaml", root / "locked/x.yaml"]:
            p.chmod(0o755 if p.is_dir() else 0o644)
        (root / "locked").chmod(0o000)
        (root / "secret.yaml").chmod(0o000)
        preexec = _without_dac_override if os.geteuid() == 0 else None
        code, out, err, _, _ = run_lint([str(root), str(root / "secret.yaml")], preexec_fn=preexec)
        assert code == 2 and "Traceback" not in err, (out, err)
        assert f"{root}/locked: KG004 error: permission denied (cannot list this folder)" in out
        assert f"{root}/secret.yaml: KG004 error: permission denied (cannot read this file)" in out
        assert f"{root}/ok/bad.yaml:3:12: KG021" in out  # the rest is still linted
    finally:
        (root / "locked").chmod(0o755)
        shutil.rmtree(root)


def test_a_fifo_inside_a_folder_is_skipped_not_waited_for(tmp_path):
    write(tmp_path, {"job.yaml": VALID})
    os.mkfifo(tmp_path / "pipe.yaml")
    code, out, err, seconds, _ = run_lint([str(tmp_path)])
    assert (code, out) == (0, "") and "pipe.yaml: skipped, not a regular file" in err and seconds < 60
