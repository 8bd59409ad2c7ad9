"""What kubectl, helm and kubeconform users type: `-o FORMAT` on every command and
`--output-file FILE` for files (kubectl's output convention), `kgen render -n`, `kgen lint -f`, `kgen completion`,
`kgen version`. The cluster side (`status -o yaml|wide`, its exit codes, `submit --dry-run=server`) is
tested against the replay server in tests/cluster/test_cli_replay.py."""

import json
import os
import shutil
import subprocess

import click
import pytest
from click.testing import CliRunner

from kgen import __version__
from kgen.cli import cli
from kgen.cli.options import LINT_FORMATS, RENDER_FORMATS


def run(*args, input=None):
    return CliRunner().invoke(cli, list(args), input=input)


def commands_with_o():
    """(command path, its -o option) of every kgen command that takes -o."""

    def walk(cmd, path):
        if isinstance(cmd, click.Group):
            for name, sub in sorted(cmd.commands.items()):
                yield from walk(sub, [*path, name])
            return
        for param in cmd.params:
            if isinstance(param, click.Option) and "-o" in param.opts:
                yield path, param

    return list(walk(cli, []))


ARGS = {
    "status": ["run-x", "--kubeconfig", "/nonexistent"],
    "list": ["--kubeconfig", "/nonexistent"],
    "debug": ["run-x"],
}


def test_o_is_a_format_on_every_command():
    seen = {" ".join(path): param for path, param in commands_with_o()}
    assert {"render", "lint", "status", "list", "values", "version", "entrypoint"} <= set(seen)
    for name, param in seen.items():
        if name == "entrypoint":
            assert param.hidden  # no formats: -o is only there to say so
            continue
        assert param.name == "output_format" and "|" in param.metavar, name
        assert "--output" in param.opts and "--format" in param.opts, name


@pytest.mark.parametrize("path", [p for p, _ in commands_with_o()], ids=lambda p: " ".join(p))
def test_a_file_name_after_o_is_refused_and_never_written(path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = run(*path, *ARGS.get(path[0], []), "-o", "report.json")
    assert res.exit_code == 2 and res.stdout == ""
    assert res.stderr.startswith("kgen: error: -o/--output: ") and res.stderr.count("\n") == 1
    if path[0] in ("render", "lint", "entrypoint"):
        assert "to write a file use --output-file report.json" in res.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_format_name_never_becomes_a_file(tmp_path, monkeypatch):
    """`kgen render -o yaml` once created a file named yaml, `kgen lint -o json job.yaml` one named json."""
    monkeypatch.chdir(tmp_path)
    rendered = run("render", "-o", "yaml")
    assert rendered.exit_code == 0 and rendered.stdout.startswith("apiVersion: v1\n")
    (tmp_path / "job.yaml").write_text(rendered.stdout)
    linted = run("lint", "-o", "json", "job.yaml")
    findings = json.loads(linted.stdout)["findings"]
    assert linted.exit_code == 0 and findings == []
    assert json.loads(run("render", "-o", "json").stdout)["kind"] == "List"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.yaml"]


def test_format_stays_an_alias_and_output_file_writes_files(tmp_path):
    assert run("render", "--format", "json").stdout == run("render", "-o", "json").stdout
    out = tmp_path / "m.json"
    res = run("render", "-o", "json", "--output-file", str(out))
    assert res.exit_code == 0 and res.stdout == ""
    assert out.read_text() == run("render", "-o", "json").stdout
    report = tmp_path / "report.xml"
    res = run("lint", "-o", "junit", "--output-file", str(report), "-", input=run("render").stdout)
    assert res.exit_code == 0 and report.read_text().startswith("<?xml")
    script = tmp_path / "kgen_entrypoint.py"
    assert run("entrypoint", "--output-file", str(script)).exit_code == 0 and script.read_text().startswith("#!")


def test_the_format_lists_are_the_writers():
    from kgen.cli.runs import LIST_FORMATS, STATUS_FORMATS
    from kgen.output import FORMATS
    from kgen.runs import views

    assert LINT_FORMATS == FORMATS
    assert (STATUS_FORMATS, LIST_FORMATS) == (views.STATUS_FORMATS, views.LIST_FORMATS)
    assert RENDER_FORMATS == ("yaml", "json")


def test_render_takes_n_for_the_namespace():
    res = run("render", "-n", "ml-team")
    assert res.exit_code == 0, res.stderr
    assert res.stdout == run("render", "--namespace", "ml-team").stdout
    assert "namespace: ml-team" in res.stdout


def test_lint_takes_f_as_kubectl_does(tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text(run("render").stdout)
    by_f = run("lint", "-f", str(job), "-o", "json")
    assert by_f.exit_code == 0 and by_f.stdout == run("lint", str(job), "-o", "json").stdout
    stdin = run("lint", "-f", "-", input=job.read_text())
    assert stdin.exit_code == 0
    assert run("lint", "--filename", str(job)).exit_code == 0
    twice = run("lint", "-f", str(job), "-f", "-", "-o", "json", input=job.read_text())  # repeatable
    assert json.loads(twice.stdout)["summary"]["files"] == 2  # stdin is an apply unit of its own: no collision
    together = run("lint", "--unit", "tree", "-f", str(job), "-f", "-", "-o", "json", input=job.read_text())
    assert {f["file"] for f in json.loads(together.stdout)["findings"]} >= {"<stdin>"}  # one context: duplicates
    empty = run("lint", "-f", "-", input="")
    assert empty.exit_code == 2 and "<stdin>: empty input" in empty.stderr


def test_version_subcommand_and_option():
    assert run("version").stdout == f"kgen {__version__}\n" == run("--version").stdout
    assert json.loads(run("version", "-o", "json").stdout)["kgen"] == __version__


# ---- completion ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "shell,marker", [("bash", "_KGEN_COMPLETE=bash_complete"), ("zsh", "#compdef kgen"), ("fish", "complete")]
)
def test_completion_prints_a_script_for_each_shell(shell, marker):
    res = run("completion", shell)
    assert res.exit_code == 0 and marker in res.stdout


def test_completion_of_an_unknown_shell_is_one_line():
    res = run("completion", "tcsh")
    assert res.exit_code == 2 and res.stderr == 'kgen: error: kgen completion: must be bash, zsh or fish, got "tcsh"\n'


def test_bash_loads_the_script_and_completes(kgen_cmd, tmp_path):
    """Real bash: `source <(kgen completion bash)`, then the completion function as bash calls it on <TAB>
    (COMP_WORDS/COMP_CWORD), which runs kgen with _KGEN_COMPLETE=bash_complete."""
    bash = shutil.which("bash")
    assert bash, "bash is on every machine that runs this suite"
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "kgen").write_text("#!/bin/sh\nexec " + " ".join(f"'{c}'" for c in kgen_cmd) + ' "$@"\n')
    (bindir / "kgen").chmod(0o755)
    script = """
source <(kgen completion bash) || exit 9
complete -p kgen
ask() { COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 )); COMPREPLY=(); _kgen_completion kgen; echo "${COMPREPLY[*]}"; }
ask kgen ren
ask kgen render --pre
ask kgen render --preset ''
ask kgen completion ''
ask kgen st
ask kgen presets show ''
ask kgen render -o ''
ask kgen lint --output j
ask kgen status x -o ''
ask kgen render --kind ''
ask kgen lint --engine ''
ask kgen render --kubernetes-version 1.3
ask kgen logs x --on ''
"""
    env = dict(os.environ, PATH=f"{bindir}{os.pathsep}{os.environ['PATH']}")
    done = subprocess.run([bash, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "complete -o nosort -F _kgen_completion kgen"
    assert lines[1:6] == ["render", "--preset", "2node-test 4x1 4x8 64x8", "bash zsh fish", "status stop"]
    # the values of -o, --kind, --engine, --kubernetes-version, --on and presets show's NAME (they completed nothing)
    assert lines[6:] == [
        "2node-test 4x1 4x8 64x8",
        "yaml json",
        "json junit",
        "text wide json yaml",
        "job statefulset jobset slurm",
        "builtin kubeconform",
        "1.30 1.31 1.32 1.33 1.34 1.35 1.36 1.37",
        "cluster bare-metal slurm",
    ]


def _o_uses(text: str):
    """(command, -o value, line) for every -o/--output/--format after `kgen CMD` in a text (help, README, docs);
    a pipeline's or comment's later part is not that command's."""
    import re

    for line in text.splitlines():
        for part in re.split(r"[|#;]|&&", line):
            m = re.search(r"\bkgen ((?:presets )?[a-z]+)\b(.*)", part)
            if m:
                for value in re.findall(r"(?:^|\s)(?:-o|--output|--format)[ =](\S+)", m.group(2)):
                    yield m.group(1), value.strip("`'\",)"), line.strip()


def test_every_o_in_help_readme_and_docs_is_a_format_of_its_command():
    from tests.conftest import ROOT

    texts = [(ROOT / "README.md").read_text(), *(p.read_text() for p in (ROOT / "docs").glob("*.md"))]
    for path, _param in commands_with_o():
        texts.append(run(*path, "--help").stdout)
    formats = {" ".join(path): param.metavar.split("|") for path, param in commands_with_o() if param.metavar}
    seen = 0
    for text in texts:
        for command, value, line in _o_uses(text):
            if command not in formats or value.startswith(("FORMAT", "text|", "yaml|", "[")):
                continue
            seen += 1
            assert value in formats[command], f"-o {value} is not a format of kgen {command}: {line}"
    assert seen >= 10


# ---- kubectl's -o=json, -n=ml-team, -f=job.yaml (pflag reads the value after "=") ----------------------
def test_short_options_take_the_value_after_an_equals_sign_as_kubectl_does(tmp_path):
    """click kept the "=": `kgen render -o=json` was refused as format "=json", `-n=ml-team` as namespace
    "=ml-team", `kgen lint -f=job.yaml` looked for a file named "=job.yaml"."""
    assert run("render", "-o=json").stdout == run("render", "-o", "json").stdout != ""
    assert run("render", "-n=ml-team").stdout == run("render", "-n", "ml-team").stdout != ""
    job = tmp_path / "job.yaml"
    job.write_text(run("render").stdout)
    by_eq = run("lint", f"-f={job}", "-o=json")
    assert by_eq.exit_code == 0 and by_eq.stdout == run("lint", "-f", str(job), "-o", "json").stdout
    values = tmp_path / "v.yaml"
    values.write_text("nodes: 3\n")
    assert run("render", f"-f={values}").stdout == run("render", "-f", str(values)).stdout
    bad = run("render", "-o=job.yaml")
    assert bad.exit_code == 2 and bad.stderr == (
        'kgen: error: -o/--output: must be an output format, yaml or json; got "job.yaml" '
        "(to write a file use --output-file job.yaml)\n"
    )


def test_an_equals_sign_stays_where_it_is_a_value_or_after_the_separator():
    # the value of --set, --env or the training command is never split
    res = run("render", "--set", "name=x", "--set", "-o=1", "--", "train.py", "-n=3", "-o=json")
    assert res.exit_code == 2 and res.stderr.startswith('kgen: error: --set: unknown key "-o"')
    res = run("render", "--env", "-n=1", "--", "train.py", "-n=3", "-o=json")
    assert res.exit_code == 0, res.stderr
    assert '- "-n=3"\n        - "-o=json"\n' in res.stdout and '- name: "-n"\n          value: "1"' in res.stdout


def test_every_command_reads_the_equals_spelling():
    """The cluster and bare-metal verbs were plain click commands: `kgen status x -o=yaml` said got "=yaml"."""
    from kgen.cli.options import KgenCommand

    def leaves(cmd, path):
        if isinstance(cmd, click.Group):
            for name, sub in cmd.commands.items():
                yield from leaves(sub, [*path, name])
        else:
            yield " ".join(path), cmd

    assert [name for name, cmd in leaves(cli, []) if not isinstance(cmd, KgenCommand)] == []
    # --dry-run takes its value only when one follows: `-n=ml` after it is an option (kgen submit --dry-run -n=ml)
    assert "  namespace: ml\n" in run("submit", "--dry-run", "-n=ml").stdout
    for args in (["status", "run-x", "-o=yaml"], ["list", "-o=wide"], ["status", "run-x", "-n=ml", "-o=wide"]):
        res = run(*args, "--kubeconfig", "/nonexistent")
        assert res.exit_code == 2 and "-o/--output" not in res.stderr and '"=' not in res.stderr, res.stderr


@pytest.mark.parametrize(
    "args,hint",
    [
        (["render", "-o", "YAML"], "(did you mean yaml?)"),
        (["render", "-o", "yml"], "(did you mean yaml?)"),
        (["lint", "-o", "JUnit"], "(did you mean junit?)"),
        (["status", "x", "-o", "jsn"], "(did you mean json?)"),
        (["render", "-o", "out.yaml"], "(to write a file use --output-file out.yaml)"),
        (["lint", "-o", "report"], "(to write a file use --output-file report)"),
    ],
)
def test_a_mistyped_format_is_named_and_a_file_name_points_to_output_file(args, hint):
    """`-o YAML` said "to write a file use --output-file YAML": a format in the wrong case is not a file."""
    res = run(*args)
    assert res.exit_code == 2 and res.stdout == "" and res.stderr.rstrip("\n").endswith(hint), res.stderr
