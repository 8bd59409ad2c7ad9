"""Defects a QA tester reproduced on main (coord qa.md #2-#7, #10-#12, #16), render side: each value
is refused with kgen's one line (exit 2), or rendered with a warning on stderr."""

import importlib.util

import pytest
import yaml
from click.testing import CliRunner

from kgen.cli import cli
from tests.conftest import ROOT


def run(*args, input=None):
    return CliRunner().invoke(cli, list(args), input=input, catch_exceptions=False)


def one_line_error(res):
    assert res.exit_code == 2 and res.stdout == "", (res.exit_code, res.stdout[:200])
    assert res.stderr.startswith("kgen: error: ") and res.stderr.count("\n") == 1, res.stderr
    assert "Traceback" not in res.stderr
    return res.stderr


REFUSED = [
    # 6: kgen's own labels (selectors, kgen list/status/stop) and the controllers' labels
    (["--set", "labels.app.kubernetes.io/managed-by=helm"], "--set labels.app.kubernetes.io/managed-by: app.kube"),
    (["--set", "labels.app.kubernetes.io/instance=x"], "app.kubernetes.io/instance is set by --name"),
    (["--set", "labels.app.kubernetes.io/name=x"], "app.kubernetes.io/name is set by kgen"),
    (["--set", "labels.kgen.dev/role=x"], "kgen.dev/role is set by kgen (the selectors match it)"),
    (["--set", "labels.kueue.x-k8s.io/queue-name=q"], "kueue.x-k8s.io/queue-name is set by --queue"),
    (["--set", "labels.batch.kubernetes.io/job-name=x"], "is set by Kubernetes' controllers"),
    (["--set", "labels.controller-revision-hash=x"], "is set by Kubernetes' controllers"),
    # 7: the entrypoint's own command checks
    (["--", "-m"], "-- COMMAND: '-m' needs a module name"),
    (["--", "-m", "--lr", "3"], "-- COMMAND: '-m' needs a module name"),
    (["--", "--lr", "3"], "-- COMMAND: starts with the option '--lr'"),
    (["--", ""], "-- COMMAND: the program is an empty string"),
    (["--set", "command=[--lr, '3']"], "--set command: starts with the option '--lr'"),
    # 2: quantities
    (["--cpu", "-1"], '--cpu: must be a positive quantity like 32 or 500m (or auto), got "-1"'),
    (["--cpu", "0"], '--cpu: must be a positive quantity like 32 or 500m (or auto), got "0"'),
    (["--memory", "-5Gi"], '--memory: must be a positive quantity like 256Gi (or auto), got "-5Gi"'),
    (["--set", "shmSize=-1Gi"], '--set shmSize: must be a Kubernetes quantity > 0 such as 16Gi, got "-1Gi"'),
    (["--set", "shmSize=0"], "--set shmSize: must be a Kubernetes quantity > 0"),
    (["--set", "resources.requests.ephemeral-storage=-1Gi"], "ephemeral-storage: must be a Kubernetes quantity >= 0"),
    (["--set", "resources.limits.cpu=-4"], 'cpu: must be a Kubernetes quantity >= 0 such as 8 or 64Gi, got "-4"'),
    # 3: the API's int32/int64 ranges
    (
        ["--set", "terminationGracePeriodSeconds=99999999999999999999"],
        "--set terminationGracePeriodSeconds: must be an integer between 0 and 9223372036854775807",
    ),
    (
        ["--set", "activeDeadlineSeconds=99999999999999999999"],
        "--set activeDeadlineSeconds: must be an integer between 1 and 9223372036854775807",
    ),
    (["--set", "activeDeadlineSeconds=0"], "--set activeDeadlineSeconds: must be an integer between 1 and"),
    (
        ["--set", "ttlSecondsAfterFinished=3000000000"],
        "ttlSecondsAfterFinished: must be an integer between 0 and 2147483647",
    ),
    (["--set", "timeouts.rendezvous=3000000000"], "timeouts.rendezvous: must be an integer between 1 and 2147483647"),
    (["--set", "reform.nodeLostTolerationSeconds=99999999999999999999"], "between 0 and 9223372036854775807"),
    (["--set", "reform.replacementTimeout=2147483648"], "reform.replacementTimeout: must be an integer between 1"),
    # 5
    (["--set", "serviceAccountName=Bad_SA"], "--set serviceAccountName: must be a DNS subdomain (lower-case letters"),
    # 4: a patch that deletes what the object needs
    (["--set", "patches=[{target: {kind: Job}, patch: {spec: null}}]"], "patch: removes spec of Job/kgen-2node-test"),
    (
        ["--set", "patches=[{target: {kind: Job}, patch: {spec: {template: null}}}]"],
        "--set patches[0]: patch: removes spec.template of Job",
    ),
    (
        ["--set", "patches=[{target: {kind: ConfigMap}, patch: {binaryData: null}}]"],
        "patch: removes binaryData of ConfigMap",
    ),
    (
        ["--set", "patches=[{target: {kind: Service}, patch: {metadata: {labels: {app.kubernetes.io/instance: x}}}}]"],
        "patch: changes label app.kubernetes.io/instance of Service/kgen-2node-test, which is set by --name",
    ),
    (
        [
            "--set",
            "patches=[{target: {kind: Job}, patch: {spec: {template: {metadata: {labels: {kgen.dev/role: null}}}}}}]",
        ],
        "patch: changes label kgen.dev/role of Job/kgen-2node-test",
    ),
    # 10: empty values are mistakes, not "use the default"
    (["--kubernetes-version", ""], '--kubernetes-version: must look like 1.31, got ""'),
    (["--preset", ""], "--preset: needs a preset name"),
    (["--output-file", ""], "--output-file: needs a file name, got an empty string (- writes to stdout)"),
    (
        ["-o", ""],
        '-o/--output: must be an output format, yaml or json; got "" (to write a file use --output-file FILE)',
    ),
]


@pytest.mark.parametrize("args,message", REFUSED, ids=[" ".join(a)[:50] for a, _ in REFUSED])
def test_refused_with_one_line(args, message):
    assert message in one_line_error(run("render", *args))


def test_reserved_label_in_a_values_file_names_the_file(tmp_path):
    path = tmp_path / "v.yaml"
    path.write_text("labels:\n  team: ml\n  app.kubernetes.io/managed-by: helm\n")
    err = one_line_error(run("render", "-f", str(path)))
    assert f"{path}: labels: app.kubernetes.io/managed-by is set by kgen" in err


def test_free_labels_and_a_module_command_still_render():
    res = run("render", "--set", "labels.team=ml", "--set", "labels.example.com/owner=me", "--", "-m", "pkg.train")
    assert res.exit_code == 0, res.stderr
    job = [d for d in yaml.safe_load_all(res.stdout) if d][-1]
    assert job["metadata"]["labels"]["team"] == "ml"
    assert job["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "kgen"


def test_a_patch_may_add_and_change_other_labels():
    patch = "patches=[{target: {kind: Job}, patch: {metadata: {labels: {team: a}}, spec: {suspend: true}}}]"
    res = run("render", "--set", patch)
    assert res.exit_code == 0, res.stderr
    job = [d for d in yaml.safe_load_all(res.stdout) if d][-1]
    assert job["metadata"]["labels"]["team"] == "a" and job["spec"]["suspend"] is True


def test_int_bounds_are_inclusive():
    res = run(
        "render",
        "--set",
        "terminationGracePeriodSeconds=9223372036854775807",
        "--set",
        "ttlSecondsAfterFinished=2147483647",
    )
    assert res.exit_code == 0, res.stderr


def test_entrypoint_output_empty_and_extra_argument():
    assert "--output-file: needs a file name" in one_line_error(run("entrypoint", "--output-file", ""))
    err = one_line_error(run("entrypoint", "extra"))
    assert err == 'kgen: error: "extra": kgen entrypoint takes no such argument (see `kgen entrypoint --help`)\n'


# ---- 7: render's command check and the entrypoint's agree ------------------------------------
def _entrypoint_module():
    spec = importlib.util.spec_from_file_location("kgen_entrypoint_qa", ROOT / "entrypoint" / "kgen_entrypoint.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


COMMANDS = [
    (["-m"], True),
    (["-m", "--lr"], True),
    (["-m", "-x", "pkg"], True),
    (["--lr", "3"], True),
    (["-x"], True),
    (["-m", "pkg.train", "--lr", "3"], False),
    (["./run.sh", "--lr", "3"], False),
    (["python3", "-c", "print(1)"], False),
    (["bash", "-c", "echo $(X)"], False),
    # launchers nest inside the entrypoint's own torchrun; tests/test_launchers.py has the rest
    (["torchrun", "--standalone", "--nproc-per-node", "8", "train.py"], True),
    (["python3", "-m", "torch.distributed.run", "train.py"], True),
    (["-m", "torch.distributed.launch", "train.py"], True),
    (["accelerate", "launch", "train.py"], True),
    (["deepspeed", "train.py"], True),
    (["python3", "train.py"], False),
]


@pytest.mark.parametrize("command,refused", COMMANDS, ids=[" ".join(c) for c, _ in COMMANDS])
def test_render_and_entrypoint_agree_on_commands(command, refused):
    from kgen.render.validate import command_problem

    ep = _entrypoint_module()
    try:
        ep.check_command(command)
        entrypoint_refuses = False
    except ep.Stop as stop:
        entrypoint_refuses = stop.code == ep.EXIT_CONFIG
    assert entrypoint_refuses is refused
    assert (command_problem(command) is not None) is refused
    if command_problem(command) and ep.launcher_problem(command, {}):  # a launcher: the same words
        assert ep.launcher_problem(command, {}).startswith(command_problem(command) + "; ")


def test_render_is_stricter_only_on_an_empty_program():
    """'' passes the entrypoint (torchrun --no-python ''), fails in the pod; render refuses it. The empty
    command is the smoke test for render, while the entrypoint needs one after '--'."""
    from kgen.render.validate import command_problem

    assert command_problem([""]) is not None
    assert command_problem([]) is None


# ---- 11, 16: rendered, with a warning on stderr -----------------------------------------------
def test_keys_the_kind_ignores_warn_and_render_goes_on():
    res = run(
        "render", "--kind", "statefulset", "--set", "activeDeadlineSeconds=100", "--set", "ttlSecondsAfterFinished=5"
    )
    assert res.exit_code == 0
    assert [d["kind"] for d in yaml.safe_load_all(res.stdout) if d][-1] == "StatefulSet"
    note, *warnings = res.stderr.splitlines()
    assert note.startswith("kgen: note: kind statefulset: its pods carry no Job UID")  # how to make its Secret
    assert warnings == [
        "kgen: warning: --set activeDeadlineSeconds: has no effect with kind statefulset: "
        "a StatefulSet has no deadline",
        "kgen: warning: --set ttlSecondsAfterFinished: has no effect with kind statefulset: "
        "a StatefulSet never finishes",
    ]


def test_kind_only_keys_from_a_file_and_no_warning_where_they_apply(tmp_path):
    path = tmp_path / "v.yaml"
    path.write_text("jobset:\n  maxRestarts: 5\nactiveDeadlineSeconds: 60\n")
    res = run("render", "-f", str(path))
    assert res.exit_code == 0
    assert (
        res.stderr == f"kgen: warning: {path}: jobset.maxRestarts: has no effect with kind job: "
        "the Job or StatefulSet restarts the group itself\n"
    )
    err = run("render", "--kind", "statefulset").stderr  # defaults never warn; the one note: the run's Secret
    assert err.startswith("kgen: note: kind statefulset: its pods carry no Job UID") and err.count("\n") == 1


def test_guaranteed_memory_not_above_shm_warns():
    res = run("render", "--preset", "4x8", "--set", "guaranteed=true")
    assert res.exit_code == 0 and res.stdout
    assert res.stderr.startswith("kgen: warning: memory limit 64Gi <= shmSize 64Gi: ")
    assert res.stderr.count("\n") == 1
    assert run("render", "--preset", "4x8", "--set", "guaranteed=true", "--memory", "96Gi").stderr == ""
    assert run("render", "--preset", "4x8").stderr == ""


def test_shm_above_the_memory_request_warns():
    res = run("render", "--preset", "4x8", "--set", "shmSize=1Ti")
    assert res.exit_code == 0
    assert res.stderr.startswith("kgen: warning: shmSize 1Ti is above the memory request 64Gi: ")
    assert run("render", "--preset", "4x8", "--set", "shmSize=1Ti", "--set", "hostIPC=true").stderr == ""


# ---- 16: -f - reads stdin --------------------------------------------------------------------
def test_values_from_stdin():
    res = run("render", "-f", "-", "--name", "from-stdin", input="nodes: 3\ngpus: 0\n")
    assert res.exit_code == 0, res.stderr
    job = [d for d in yaml.safe_load_all(res.stdout) if d][-1]
    assert job["spec"]["completions"] == 3 and job["metadata"]["name"] == "from-stdin"
    err = one_line_error(run("render", "-f", "-", input="nodes: 0\n"))
    assert '<stdin>: nodes: must be an integer between 1 and 100000, got "0"' in err
    assert "-f -: stdin can be read once" in one_line_error(run("render", "-f", "-", "-f", "-", input="nodes: 2\n"))


# ---- 12: a self-check error points back at the values ------------------------------------------
def test_yaml_boolean_in_a_string_field_says_quote_it_and_names_the_file(tmp_path):
    path = tmp_path / "v.yaml"
    path.write_text("tolerations: [{key: d, operator: Equal, value: yes, effect: NoSchedule}]\n")
    err = one_line_error(run("render", "-f", str(path)))
    assert "fails KG010: expected string, got boolean true" in err
    assert f"({path}: tolerations: quote it in the values" in err


def test_self_check_error_names_the_layer():
    err = one_line_error(run("render", "--set", "tolerations=[{key: a, operator: Sometimes}]"))
    assert err.endswith("(check --set tolerations)\n")


def test_library_callers_without_stdin_text_get_a_clear_error():
    from kgen import RenderRequest
    from kgen.errors import UsageError
    from kgen.render.pipeline import build

    with pytest.raises(UsageError) as exc:
        build(RenderRequest(values_files=["-"]))
    assert exc.value.one_line() == (
        "-f -: this command does not read values from stdin (save them to a file and pass -f FILE)"
    )
    assert build(RenderRequest(values_files=["-"], stdin="nodes: 5\ngpus: 0\n")).nodes == 5


def test_kgens_own_defaults_raise_no_shm_caution():
    """A plain CPU job (auto memory 2Gi per process, default shmSize cap 16Gi) is kgen's own choice:
    render prints it without a warning (the caution is for a user's shmSize/memory)."""
    for args in (("--nodes", "3", "--gpus", "0"), ("--nodes", "4", "--gpus", "1"), ("--preset", "4x1")):
        res = run("render", *args)
        assert res.exit_code == 0 and res.stderr == "", (args, res.stderr)


def test_every_preset_and_kind_renders_with_a_quiet_stderr():
    """Render prints its self-check's warnings, not its infos: kgen's own JobSet has no bundled CRD schema
    (KG011, info) and is checked by the JobSet rules instead; only the JobSet/Kueue notes remain."""
    for preset in ("2node-test", "4x8", "64x8", "4x1"):
        for kind in ("job", "statefulset", "jobset"):
            res = run("render", "--preset", preset, "--kind", kind)
            assert res.exit_code == 0
            assert [line for line in res.stderr.splitlines() if not line.startswith("kgen: note: ")] == [], (
                preset,
                kind,
                res.stderr,
            )
