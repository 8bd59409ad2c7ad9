"""Install lines, the pre-commit hook and CI say what is true.

`pip install kgen` installs an unrelated PyPI project; the README's pre-commit snippet named a tag that
does not exist and, without `files:`, linted `.pre-commit-config.yaml` itself (KG003).
"""

import re
import subprocess

import pytest
import yaml

from tests.conftest import ROOT

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_distribution_is_kgen_k8s_and_the_command_kgen():
    project = PYPROJECT["project"]
    assert project["name"] == "kgen-k8s"
    assert project["scripts"] == {"kgen": "kgen.__main__:main"}
    assert project["optional-dependencies"]["cluster"] == ["kubernetes>=30"]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_install_line_names_kgen_k8s(doc):
    bad = re.findall(r"pip install ['\"]?kgen(?![-\w])\S*", doc.read_text())
    assert not bad, f"{doc.name}: {bad} installs the unrelated PyPI project 'kgen'; use kgen-k8s"


def test_readme_shows_the_pypi_install_lines():
    text = (ROOT / "README.md").read_text()
    assert "pip install kgen-k8s" in text and "pip install 'kgen-k8s[cluster]'" in text


# -- pre-commit ---------------------------------------------------------------------------------------

MANIFESTS = ["deploy/job.yaml", "k8s/train.yml", "svc.yaml", "manifests/github/job.yaml", "deploy/compose-job.yaml"]
NOT_MANIFESTS = [
    ".pre-commit-config.yaml",
    "sub/.pre-commit-config.yml",
    ".pre-commit-hooks.yaml",
    ".github/workflows/ci.yml",
    ".gitlab-ci.yml",
    "docker-compose.yaml",
    "compose.override.yml",
    "mkdocs.yml",
    "README.md",
    "train.py",
]


def selected(hook, path):
    """pre-commit's file filter: re.search(files) and not re.search(exclude)."""
    return bool(re.search(hook.get("files", ""), path)) and not re.search(hook.get("exclude", "^$"), path)


def test_the_hook_lints_manifests_and_skips_other_yaml():
    [hook] = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    assert hook["types"] == ["yaml"] and hook["require_serial"] is True  # one kgen lint run: one context
    assert [p for p in MANIFESTS if not selected(hook, p)] == []
    assert [p for p in NOT_MANIFESTS if selected(hook, p)] == []


def _snippets(doc):
    """The .pre-commit-config.yaml snippets of a doc that use the kgen-lint hook."""
    for block in re.findall(r"```yaml\n(.*?)```", doc.read_text(), re.S):
        if "repos:" in block and "id: kgen-lint" in block:
            yield yaml.safe_load(block)


def _tags():
    done = subprocess.run(["git", "-C", str(ROOT), "tag"], capture_output=True, text=True, timeout=30)
    return set(done.stdout.split()) if done.returncode == 0 else set()


@pytest.mark.parametrize("doc", [ROOT / "README.md", ROOT / "docs" / "lint.md"], ids=lambda p: p.name)
def test_the_pre_commit_snippets_name_a_rev_that_exists_and_skip_their_own_config(doc):
    [hook_def] = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    snippets = list(_snippets(doc))
    assert snippets, f"{doc.name} has no pre-commit snippet"
    for config in snippets:
        [repo] = config["repos"]
        rev = str(repo["rev"])
        # Without release tags the rev is a commit SHA the user fills in; a tag must be a real one.
        assert rev == "<a commit SHA>" or rev in _tags(), f"{doc.name}: rev {rev!r} is not a tag of this repository"
        [hook] = repo["hooks"]
        merged = {**hook_def, **hook}  # a user's files:/exclude: override the hook's
        assert selected(merged, "deploy/job.yaml")
        assert not selected(merged, ".pre-commit-config.yaml")


# -- CI -----------------------------------------------------------------------------------------------


def test_ci_runs_the_readme_test_command_and_the_static_checks():
    readme = (ROOT / "README.md").read_text()
    [test_cmd] = [line for line in readme.splitlines() if "pip install -e '.[test]'" in line]
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert "set -euo pipefail" in ci
    assert test_cmd in ci
    steps = ci[ci.index(test_cmd) :]
    for check in (".venv/bin/ruff check .", ".venv/bin/ruff format --check .", ".venv/bin/mypy"):
        assert check in steps
    test_extra = " ".join(PYPROJECT["project"]["optional-dependencies"]["test"])
    assert "ruff==" in test_extra and "mypy==" in test_extra  # the README's test command installs them
    assert PYPROJECT["tool"]["mypy"]["files"] == ["kgen", "entrypoint/parts", "entrypoint/assemble.py"]


def test_ci_also_tests_the_yaml_stack_at_the_floor_pyproject_declares():
    """The floor in tests/constraints/yaml-floor.txt is the floor pyproject.toml declares, and CI
    installs it and runs the parsing and limits tests with it."""
    floor_file = ROOT / "tests" / "constraints" / "yaml-floor.txt"
    pins = dict(line.split("==") for line in floor_file.read_text().splitlines() if line and not line.startswith("#"))
    declared = {}
    for dep in PYPROJECT["project"]["dependencies"]:
        name, sep, low = dep.partition(">=")
        if name in pins:
            declared[name] = low
    assert declared == pins  # every pinned package is declared with exactly this floor
    assert set(pins) == {"PyYAML", "ruamel.yaml", "ruamel.yaml.clib"}
    ci = (ROOT / ".ci" / "run").read_text()
    assert "-c tests/constraints/yaml-floor.txt" in ci and "tests/lint/test_limits.py" in ci
