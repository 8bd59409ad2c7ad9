"""click's usage errors as kgen's one line that names the option and the fix, bare groups
print their help (exit 0), and `kgen entrypoint`."""

import subprocess

import pytest
from click.testing import CliRunner

from kgen.cli import cli
from tests.conftest import ROOT


def run(*args, input=None):
    return CliRunner().invoke(cli, list(args), input=input, catch_exceptions=False)


USAGE_ERRORS = [
    (["render", "--nodes"], "--nodes: needs a value, e.g. --nodes 4"),
    (["render", "--gpus"], "--gpus: needs a value, e.g. --gpus 8"),
    (["render", "-o"], "-o: needs a value, e.g. -o json"),
    (["render", "--output-file"], "--output-file: needs a value, e.g. --output-file out.yaml"),
    (["render", "--format"], "--format: needs a value, e.g. --format json"),
    (["lint", "--format"], "--format: needs a value, e.g. --format sarif"),
    (["lint", "--skip"], "--skip: needs a value, e.g. --skip KG102,KG111"),
    (
        ["render", "train.py", "--lr", "3e-4"],
        "--lr: not an option of kgen render; put the training command after --: kgen render -- train.py --lr 3e-4",
    ),
    (
        ["render", "--nodes", "2", "-f", "v.yaml", "train.py", "--lr=3e-4", "--epochs", "3"],
        "--lr: not an option of kgen render; put the training command after --: "
        "kgen render --nodes 2 -f v.yaml -- train.py --lr=3e-4 --epochs 3",
    ),
    (
        ["render", "train.py", "--nam", "x"],
        "--nam: not an option of kgen render; put the training command after --: kgen render -- train.py --nam x",
    ),
    (
        ["render", "--name", "my job", "train.py", "--msg", "a b"],
        "--msg: not an option of kgen render; put the training command after --: "
        "kgen render --name 'my job' -- train.py --msg 'a b'",
    ),
    (
        ["render", "--lr", "3e-4"],
        "--lr: not an option of kgen render; put your training command and its arguments after --, "
        "e.g. kgen render -- train.py --lr 3e-4",
    ),
    (["render", "--nodez", "3"], "--nodez: not an option of kgen render; did you mean --nodes or --name or --kind?"),
    (["--bogus"], "--bogus: not an option of kgen (see `kgen --help`)"),
    (["rendr"], 'no such command "rendr" for kgen; did you mean render? (`kgen --help` lists them)'),
    (
        ["presets", "shw"],
        'no such command "shw" for kgen presets; did you mean show? (`kgen presets --help` lists them)',
    ),
    (["presets", "show"], "kgen presets show: missing NAME (see `kgen presets show --help`)"),
    # a required option: click's "Missing option '--name'." did not name the fix
    (["launch", "--local", "2", "--", "t.py"], "--name: required, e.g. --name llama-70b (see `kgen launch --help`)"),
    (["presets", "show", "4x9"], 'kgen presets show: unknown preset "4x9" (did you mean "4x8"?)'),
    (["entrypoint", "--path", "--output-file", "x.py"], "--path: cannot be used with --output-file; choose one"),
    (
        ["entrypoint", "-o", "x.py"],
        "-o/--output: kgen entrypoint has no output formats (to write a file use --output-file x.py)",
    ),
    # another command's format is a format asked of the wrong command, not a file name (no --output-file yaml)
    (
        ["lint", "-o", "yaml", "x.yaml"],
        '-o/--output: must be an output format, text, json, junit, github or sarif; got "yaml" '
        "(kgen lint has no yaml output)",
    ),
    (
        ["render", "-o", "text"],
        '-o/--output: must be an output format, yaml or json; got "text" (kgen render has no text output)',
    ),
    (
        ["lint", "-o", "report.yaml", "x.yaml"],
        '-o/--output: must be an output format, text, json, junit, github or sarif; got "report.yaml" '
        "(to write a file use --output-file report.yaml)",
    ),
    (
        ["render", "--kind", "slurm", "-o", "json"],
        "-o/--output: --kind slurm prints an sbatch script, not Kubernetes objects (drop -o json)",
    ),
]


@pytest.mark.parametrize("args,line", USAGE_ERRORS, ids=[" ".join(a) for a, _ in USAGE_ERRORS])
def test_usage_errors_are_one_line_that_names_the_option(args, line):
    res = run(*args)
    assert (res.exit_code, res.stdout, res.stderr) == (2, "", f"kgen: error: {line}\n")


def _value_options():
    import click

    def walk(cmd, path):
        if isinstance(cmd, click.Group):
            for name, sub in cmd.commands.items():
                yield from walk(sub, [*path, name])
            return
        for param in cmd.params:
            if not isinstance(param, click.Option) or param.is_flag or param.name == "help":
                continue
            if getattr(param, "_flag_needs_value", False):  # --dry-run[=server]: alone it is a flag
                continue
            for opt in param.opts:
                yield [*path, opt]

    return list(walk(cli, []))


@pytest.mark.parametrize("args", _value_options(), ids=" ".join)
def test_every_option_without_its_value_says_so_by_name(args):
    res = run(*args)
    assert res.exit_code == 2 and res.stdout == ""
    assert res.stderr.startswith(f"kgen: error: {args[-1]}: needs a value") and res.stderr.count("\n") == 1


@pytest.mark.parametrize("args", [[], ["presets"]])
def test_a_bare_group_prints_its_help_on_stdout_and_exits_0(args):
    """As kubectl and helm: nothing was asked for, so nothing failed; never `kgen: error: Usage: ...`."""
    res = run(*args)
    assert res.exit_code == 0 and res.stderr == ""
    assert res.stdout == run(*args, "--help").stdout
    assert res.stdout.startswith(f"Usage: {' '.join(['kgen', *args])} [OPTIONS] COMMAND [ARGS]...")


def test_the_real_process_says_the_same(kgen_cmd):
    done = subprocess.run([*kgen_cmd, "render", "--nodes"], capture_output=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (
        2,
        b"",
        b"kgen: error: --nodes: needs a value, e.g. --nodes 4\n",
    )
    bare = subprocess.run(kgen_cmd, capture_output=True, timeout=60)
    assert bare.returncode == 0 and bare.stderr == b"" and bare.stdout.startswith(b"Usage: kgen ")


# -- kgen entrypoint ----------------------------------------------------------------------------------

SHIPPED = ROOT / "entrypoint" / "kgen_entrypoint.py"


def test_entrypoint_prints_the_shipped_script():
    res = run("entrypoint")
    assert res.exit_code == 0 and res.stderr == ""
    assert res.stdout == SHIPPED.read_text()


def test_entrypoint_path_is_the_installed_file():
    res = run("entrypoint", "--path")
    assert res.exit_code == 0
    path = res.stdout.rstrip("\n")
    assert res.stdout.count("\n") == 1 and open(path).read() == SHIPPED.read_text()


def test_entrypoint_o_writes_it_with_the_safe_writer(tmp_path):
    out = tmp_path / "bin" / "kgen_entrypoint.py"
    out.parent.mkdir()
    link = tmp_path / "entry.py"
    link.symlink_to(out)
    out.write_text("old")
    out.chmod(0o755)
    res = run("entrypoint", "--output-file", str(link))
    assert res.exit_code == 0 and res.stdout == ""
    assert link.is_symlink() and out.read_text() == SHIPPED.read_text()
    assert out.stat().st_mode & 0o777 == 0o755  # still executable


def test_entrypoint_is_documented_in_the_readme():
    readme = (ROOT / "README.md").read_text()
    assert "kgen entrypoint --output-file" in readme and "kgen entrypoint --path" in readme
