"""kgen render / presets / --version through click's CliRunner: exact output and exit codes."""

import json

import pytest
import yaml
from click.testing import CliRunner

from kgen import __version__
from kgen.cli import cli
from tests.conftest import PRESETS


def run(*args, input=None):
    return CliRunner().invoke(cli, list(args), input=input, catch_exceptions=False)


def docs_of(text):
    return [d for d in yaml.safe_load_all(text) if d]


def test_render_without_arguments_is_the_2node_test_smoke_test():
    res = run("render")
    assert res.exit_code == 0, res.stderr
    docs = docs_of(res.stdout)
    assert [d["kind"] for d in docs] == ["ConfigMap", "Service", "NetworkPolicy", "Job"]
    job = docs[-1]
    assert job["spec"]["completions"] == 2
    trainer = job["spec"]["template"]["spec"]["containers"][0]
    assert trainer["args"] == ["--smoke-test"]
    assert trainer["resources"]["limits"]["nvidia.com/gpu"] == "8"
    env = {e["name"]: e.get("value") for e in trainer["env"]}
    assert env["NCCL_DEBUG"] == "INFO"


def test_readme_example_nodes_gpus():
    res = run("render", "--nodes", "4", "--gpus", "8")
    assert res.exit_code == 0
    job = docs_of(res.stdout)[-1]
    assert job["spec"]["parallelism"] == job["spec"]["completions"] == 4


def test_command_after_double_dash_reaches_args_verbatim():
    res = run("render", "--", "train.py", "--lr", "3e-4", "--name", "x y")
    assert res.exit_code == 0
    trainer = docs_of(res.stdout)[-1]["spec"]["template"]["spec"]["containers"][0]
    assert trainer["args"] == ["--", "train.py", "--lr", "3e-4", "--name", "x y"]


def test_version():
    res = run("--version")
    assert res.exit_code == 0
    assert res.stdout == f"kgen {__version__}\n"


def test_presets_list_names_every_preset_with_shape_and_kind():
    res = run("presets", "list")
    assert res.exit_code == 0
    lines = res.stdout.splitlines()
    assert [ln.split()[0] for ln in lines] == sorted(PRESETS)
    row = next(ln for ln in lines if ln.startswith("64x8"))
    assert "64 x 8" in row and "job" in row


@pytest.mark.parametrize("preset", PRESETS)
def test_presets_show_prints_a_usable_values_file(preset, tmp_path):
    res = run("presets", "show", preset)
    assert res.exit_code == 0
    values = tmp_path / "v.yaml"
    values.write_text(res.stdout)
    direct = run("render", "--preset", preset)
    via_file = run("render", "-f", str(values))
    assert via_file.exit_code == 0
    assert via_file.stdout == direct.stdout


def test_layering_order_later_wins(tmp_path):
    f1 = tmp_path / "a.yaml"
    f1.write_text("nodes: 3\nnccl:\n  debug: TRACE\nenv:\n  A: from-file\n  B: file\n")
    f2 = tmp_path / "b.yaml"
    f2.write_text("nodes: 5\n")
    res = run(
        "render",
        "--preset",
        "4x8",
        "-f",
        str(f1),
        "-f",
        str(f2),
        "--set",
        "nodes=6",
        "--set",
        "env.B=set",
        "--nodes",
        "7",
        "--env",
        "C=flag",
    )
    assert res.exit_code == 0, res.stderr
    job = docs_of(res.stdout)[-1]
    assert job["spec"]["completions"] == 7  # flag > --set > later file > earlier file > preset
    env = {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["NNODES"] == "7"
    assert env["NCCL_DEBUG"] == "TRACE"
    assert (env["A"], env["B"], env["C"]) == ("from-file", "set", "flag")


def test_json_output_is_a_kubectl_list():
    res = run("render", "--format", "json")
    assert res.exit_code == 0
    data = json.loads(res.stdout)
    assert data["kind"] == "List"
    assert [i["kind"] for i in data["items"]] == ["ConfigMap", "Service", "NetworkPolicy", "Job"]


def test_output_file_written_whole(tmp_path):
    out = tmp_path / "m.yaml"
    res = run("render", "--output-file", str(out))
    assert res.exit_code == 0 and res.stdout == ""
    assert out.read_text() == run("render").stdout
    assert [p.name for p in tmp_path.iterdir()] == ["m.yaml"]  # no temp file left behind


def test_output_file_untouched_on_error(tmp_path):
    out = tmp_path / "m.yaml"
    out.write_text("previous\n")
    res = run("render", "--nodes", "0", "--output-file", str(out))
    assert res.exit_code == 2
    assert out.read_text() == "previous\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.yaml"]


BAD_INPUT = [
    (["--nodes", "0"], '--nodes: must be an integer between 1 and 100000, got "0"'),
    (["--nodes", "-3"], '--nodes: must be an integer between 1 and 100000, got "-3"'),
    (["--nodes", "two"], '--nodes: must be an integer, got "two"'),
    (["--nodes", "2.5"], '--nodes: must be an integer, got "2.5"'),
    (["--gpus", "-1"], '--gpus: must be an integer between 0 and 1024, got "-1"'),
    (["--kind", "deployment"], '--kind: must be job, statefulset, jobset or slurm, got "deployment"'),
    (["--name", "Train_Job"], "--name: must be a DNS label"),
    (["--name", "train.llama"], "--name: must be a DNS label"),
    (["--name", "7b-train"], "--name: must start with a letter"),
    (["--name", "a" * 62, "--nodes", "10"], "--name: is too long: pod hostname"),
    (["--name", "a" * 53, "--kind", "statefulset"], "StatefulSet names must stay <= 52"),
    (["--namespace", "ML_Team"], "--namespace: must be a DNS label"),
    (["--image", ""], "--image: must be a non-empty image reference"),
    (["--preset", "8x8"], '--preset: unknown preset "8x8"'),
    (["--set", "nodez=3"], '--set: unknown key "nodez" (did you mean "nodes"?)'),
    (["--set", "timeouts.masterwait=3"], 'did you mean "timeouts.masterWait"?'),
    (["--set", "nodes"], "--set: expected KEY=VALUE"),
    (["--env", "NOVALUE"], '--env: expected KEY=VALUE, got "NOVALUE"'),
    (["--env", "1BAD=x"], '"1BAD" is not a valid environment variable name'),
    (["--env", "WORLD_SIZE=16"], "WORLD_SIZE is set by kgen"),
    (["--env", "RANK=0"], "RANK is set by kgen"),
    (["--set", "shmSize=lots"], "shmSize: must be a Kubernetes quantity"),
    (["--set", "resources.requests.memory=512GB"], "must be a Kubernetes quantity"),
    (["--set", "nccl.ibDisable=maybe"], '--set nccl.ibDisable: must be true or false, got "maybe"'),
    (["--set", "maxRestarts=3"], '--set maxRestarts: must be 0, got "3"'),
    (["--set", "port=70000"], "--set port: must be an integer between 1 and 65535"),
    (["--set", "livenessPort=29500"], "--set livenessPort: is 29500, already used by port (the default)"),
    (["--set", "port=29501"], "--set port: is 29501, already used by livenessPort (the default)"),
    (["--gpus", "8", "--set", "nprocPerNode=3"], "nprocPerNode: is 3 but gpus is 8: 8 GPUs do not split evenly"),
    (["--gpus", "8", "--set", "nprocPerNode=16"], "nprocPerNode: is 16 but gpus is 8: more processes than GPUs"),
    (["--kubernetes-version", "1.20"], "--kubernetes-version: supported versions are 1.27 to 1.37"),
    (["--kubernetes-version", "latest"], '--kubernetes-version: must look like 1.31, got "latest"'),
    (
        ["--format", "xml"],
        '-o/--output: must be an output format, yaml or json; got "xml" (to write a file use --output-file xml)',
    ),
    (
        ["-o", "job.yaml"],
        '-o/--output: must be an output format, yaml or json; got "job.yaml" '
        "(to write a file use --output-file job.yaml)",
    ),
    (["-f", "/nonexistent/values.yaml"], "-f/--values: cannot read /nonexistent/values.yaml"),
    (["--bogus"], "--bogus: not an option of kgen render"),
    # values that pass the values checks and are caught by the lint self-check on the documents
    (["--set", "labels.team=" + "a" * 70], "the rendered manifest fails KG024: label value"),
    (["--set", "tolerations=[{key: a, operator: Sometimes}]"], "fails KG056: operator 'Sometimes' must be"),
    (["--set", "affinity={nodeAffinity: {bogus: 1}}"], "fails KG010: unknown field 'bogus'"),
]


@pytest.mark.parametrize("args,message", BAD_INPUT, ids=[" ".join(a)[:40] for a, _ in BAD_INPUT])
def test_bad_input_one_line_exit_2_nothing_on_stdout(args, message):
    res = run("render", *args)
    assert res.exit_code == 2
    assert res.stdout == ""
    err = res.stderr
    assert err.startswith("kgen: error: ") and err.endswith("\n")
    assert err.count("\n") == 1, err
    assert message in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "content,message",
    [
        ("nodes: [1\n", "v.yaml:"),  # YAML syntax error, with the line
        ("- 1\n- 2\n", "must be a mapping of values"),
        ("nodes: 2\nnodes: 3\n", 'duplicate key "nodes"'),
        ("nccl:\n  debg: INFO\n", 'unknown key "nccl.debg" (did you mean "nccl.debug"?)'),
        ("nodes: 0\n", 'v.yaml: nodes: must be an integer between 1 and 100000, got "0"'),
        ("env: [A, B]\n", "v.yaml: env: must be a mapping of NAME: value (or NAME: {valueFrom: ...})"),
    ],
)
def test_bad_values_file(tmp_path, content, message):
    path = tmp_path / "v.yaml"
    path.write_text(content)
    res = run("render", "-f", str(path))
    assert res.exit_code == 2 and res.stdout == ""
    assert res.stderr.count("\n") == 1 and message in res.stderr, res.stderr


def test_every_command_is_documented_in_the_readme():
    import click

    from tests.conftest import ROOT

    readme = (ROOT / "README.md").read_text()

    def walk(cmd, path):
        if isinstance(cmd, click.Group):
            for name, sub in cmd.commands.items():
                yield from walk(sub, [*path, name])
        else:
            yield " ".join(path)

    for command in [*walk(cli, ["kgen"]), "kgen --version"]:
        assert command in readme, command
    for preset in PRESETS:
        assert f"`{preset}`" in readme, preset


def test_every_values_key_is_in_the_readme_values_reference():
    from kgen.render.values import VALUES
    from tests.conftest import ROOT

    readme = (ROOT / "README.md").read_text()
    missing = [k for k in VALUES if f"`{k}`" not in readme]
    assert not missing, f"values keys missing from README: {missing}"


def test_template_cache_is_used_and_an_unusable_cache_changes_nothing(tmp_path, kgen_cmd):
    import os
    import subprocess

    def render_with_cache(cache):
        env = dict(os.environ, KGEN_CACHE_DIR=str(cache))
        return subprocess.run(
            [*kgen_cmd, "render", "--preset", "4x8"], env=env, capture_output=True, text=True, timeout=60
        )

    good = render_with_cache(tmp_path / "cache")
    assert good.returncode == 0
    assert list((tmp_path / "cache").glob("templates-*/*.cache")), "no compiled templates were cached"
    again = render_with_cache(tmp_path / "cache")
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    broken = render_with_cache(blocker / "cache")  # cannot be created: a file is in the way
    assert again.returncode == broken.returncode == 0
    assert good.stdout == again.stdout == broken.stdout
    assert broken.stderr == ""


@pytest.mark.parametrize("nproc, share", [(4, 2), (2, 4), (1, 8)])
def test_fewer_processes_than_gpus_set_explicitly_render_with_a_note(nproc, share):
    """--gpus 8 --set nprocPerNode=4: 2 GPUs per process, as model-parallel scripts use them. Allowed when set
    explicitly and the GPUs split evenly; render says how the processes share them, and its self-check does not
    call the GPUs idle (KG139)."""
    res = run("render", "--gpus", "8", "--set", f"nprocPerNode={nproc}", "--", "train.py")
    assert res.exit_code == 0, res.output
    job = next(d for d in docs_of(res.stdout) if d["kind"] == "Job")
    trainer = job["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in trainer["env"]}
    assert env["NPROC_PER_NODE"] == str(nproc) and trainer["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert res.stderr == (
        f"kgen: note: nprocPerNode {nproc} with 8 GPUs per node: each process sees all 8 GPUs and drives {share} of "
        f"them (model parallel); the script picks its own (from cuda:LOCAL_RANK*{share} on)\n"
    )
