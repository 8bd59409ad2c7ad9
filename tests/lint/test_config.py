"""kgen lint's configuration file (kgen.lint.config): `[tool.kgen.lint]` in pyproject.toml or `.kgen.yaml`,
found upward from the first linted path up to the repository root; flags override it; an invalid file is one
line naming the file, the key and the fix (exit 2)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from lint_helpers import BASES, dump, hide_not_ready

from kgen.cli import cli
from kgen.lint import config

PYPROJECT = """[project]
name = "x"

[tool.kgen.lint]
skip = ["KG102"]  # the Service lives elsewhere
kubernetes-version = "1.31"
unit = "dir"
exclude = [
  "legacy/**",
]
[tool.kgen.lint.per-path-ignores]
"envs/dev/**" = ["KG047"]
[tool.kgen.lint.severity]
KG048 = "warning"
"""


def run(args, input=None):
    result = CliRunner().invoke(cli, ["lint", *args], input=input)
    return result.exit_code, result.stdout, result.stderr


def _job(memory: str = "512Gi", request: str | None = None) -> str:
    docs = hide_not_ready(BASES["job"]())  # KG102, a warning
    res = docs[1]["spec"]["template"]["spec"]["containers"][0]["resources"]
    res["limits"]["memory"] = memory
    if request:
        res.setdefault("requests", {})["memory"] = request
    return dump(docs)


@pytest.fixture
def repo(tmp_path):
    (tmp_path / ".git").mkdir()
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    for env in ("dev", "prod"):
        (tmp_path / "envs" / env).mkdir(parents=True)
        (tmp_path / "envs" / env / "train.yaml").write_text(_job("512GB"))
    (tmp_path / "legacy").mkdir()
    (tmp_path / "legacy" / "old.yaml").write_text("not: a manifest\n")
    return tmp_path


def test_the_pyproject_table_is_found_upward_and_applied(repo):
    code, out, err = run([str(repo / "envs")])
    lines = out.splitlines()
    assert code == 1 and err == ""
    # skip = KG102 everywhere; KG047 ignored below envs/dev only
    assert not any(" KG102 " in line for line in lines)
    assert [line.split(":")[0] for line in lines if " KG047 " in line] == [str(repo / "envs/prod/train.yaml")]


def test_severity_override_and_flags_override_the_file(repo):
    (repo / "envs" / "prod" / "train.yaml").write_text(_job("1Gi", request="2Gi"))  # request > limit: KG048
    code, out, _ = run([str(repo / "envs" / "prod")])
    assert code == 0 and " KG048 warning: " in out  # the file makes it a warning
    code, out, _ = run(["--strict", str(repo / "envs" / "prod")])
    assert code == 1
    code, out, _ = run(["--no-config", str(repo / "envs" / "prod")])
    assert code == 1 and " KG048 error: " in out and " KG102 " in out


def test_the_files_kubernetes_version_and_a_flag_over_it(repo):
    cfg = config.load(str(repo / "pyproject.toml"))
    assert (cfg.kubernetes_version, cfg.unit, cfg.skip, cfg.exclude) == ("1.31", "dir", ("KG102",), ("legacy/**",))
    # --kubernetes-version wins over the file's (an unsupported one is refused as the flag's)
    code, out, err = run(["--kubernetes-version", "1.99", str(repo / "envs")])
    assert code == 2 and "--kubernetes-version" in err


def test_the_kgen_yaml_file_is_read_and_skipped_as_a_manifest(tmp_path):
    (tmp_path / ".git").mkdir()
    (tmp_path / ".kgen.yaml").write_text("lint:\n  skip: [KG102, kg047]\n")
    (tmp_path / "train.yaml").write_text(_job("512GB"))
    code, out, err = run([str(tmp_path)])
    assert (code, out) == (0, "")
    assert ".kgen.yaml: skipped, kgen configuration" in err


def test_the_search_stops_at_the_repository_root(tmp_path):
    (tmp_path / ".kgen.yaml").write_text("lint:\n  skip: [KG102]\n")
    (tmp_path / "repo" / ".git").mkdir(parents=True)
    (tmp_path / "repo" / "deploy").mkdir()
    assert config.find(str(tmp_path / "repo" / "deploy")) is None
    assert config.find(str(tmp_path / "deploy-outside")) == str(tmp_path / ".kgen.yaml")


def test_a_pyproject_without_the_table_is_passed_over(tmp_path):
    (tmp_path / ".git").mkdir()
    (tmp_path / ".kgen.yaml").write_text("lint: {skip: [KG102]}\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "pyproject.toml").write_text('[project]\nname = "x"\n[tool.ruff]\nline-length = 1\n')
    assert config.find(str(tmp_path / "sub")) == str(tmp_path / ".kgen.yaml")


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("[tool.kgen.lint]\nskipp = ['KG102']\n", "unknown key 'skipp' in the lint settings; use one of skip"),
        ("[tool.kgen.lint]\nskip = ['KG999']\n", "skip: unknown rule id 'KG999'; use ids from"),
        ("[tool.kgen.lint]\nskip = 3\n", 'skip must be a list of strings, e.g. skip = ["KG102"]'),
        ("[tool.kgen.lint]\nunit = 'folder'\n", "unit must be one of dir, file, tree, got 'folder'"),
        ("[tool.kgen.lint]\nkubernetes-version = '1.99'\n", "kubernetes-version: unsupported version '1.99'"),
        ("[tool.kgen.lint.severity]\nKG118 = 'fatal'\n", "severity KG118 = 'fatal': write a rule id (not KG004)"),
        ("[tool.kgen.lint]\nper_path_ignores = {}\n", "unknown key 'per_path_ignores' in the lint settings; write"),
        ("[tool.kgen.lint]\nskip = 'KG102\n", "not valid TOML"),
    ],
)
def test_an_invalid_file_is_one_line_naming_file_key_and_fix(tmp_path, text, says):
    (tmp_path / ".git").mkdir()
    (tmp_path / "pyproject.toml").write_text(text)
    (tmp_path / "train.yaml").write_text(_job())
    code, out, err = run([str(tmp_path / "train.yaml")])
    assert code == 2 and out == ""
    assert err.startswith(f"kgen: error: {tmp_path / 'pyproject.toml'}: ") and says in err, err
    assert len(err.strip().splitlines()) == 1


def test_an_invalid_kgen_yaml_is_one_line(tmp_path):
    (tmp_path / ".git").mkdir()
    (tmp_path / ".kgen.yaml").write_text("lint: [KG102]\n")
    code, out, err = run([str(tmp_path)])
    assert code == 2 and out == "" and "'lint' must be a mapping" in err and len(err.splitlines()) == 1


def test_the_python_3_10_reader_agrees_with_tomllib():
    tomllib = pytest.importorskip("tomllib")
    expected = tomllib.loads(PYPROJECT)["tool"]["kgen"]["lint"]
    assert config.read_lint_table(PYPROJECT, "pyproject.toml") == expected
    assert config.read_lint_table("[tool.other]\nx = 1\n", "p") == {}
