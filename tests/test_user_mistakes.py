"""The smaller mistakes a new user makes (a shell line after `--`, non-ASCII digits, a folder as the program, a
typo in a values file, YAML merge keys, a path as a run name ...): each answered in one clear line, one test each
(the ones that need a cluster replay or real processes live with those)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from kgen.cli import cli

ROOT = Path(__file__).resolve().parents[1]


def run(*args, env=None, input=None):
    return CliRunner().invoke(cli, [str(a) for a in args], env=env, input=input, catch_exceptions=False)


def one_line_error(res, *words) -> str:
    assert res.exit_code == 2, (res.exit_code, res.output)
    assert res.stdout == ""
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("kgen: error: "), res.stderr
    assert "Traceback" not in res.stderr
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


def launch_error(res, *words) -> str:
    """kgen launch says "pre-flight on ..." first (a note), then its one-line error."""
    assert res.exit_code == 2 and res.stdout == "", res.output
    lines = res.stderr.splitlines()
    assert lines[-1].startswith("kgen: error: ") and len(lines) == 2, res.stderr
    for w in words:
        assert w in lines[-1], lines[-1]
    return lines[-1]


# 6.1 ---------------------------------------------------------------------------------------------------
def test_a_shell_command_line_after_dashes_is_named_not_split_into_nonsense():
    line = one_line_error(
        run("render", "--nodes", "4", "--", "sleep 30; python train.py"),
        "-- COMMAND: 'sleep 30; python train.py' is a shell command line (';' is a shell operator)",
        "no shell runs the command",
    )
    assert "'30;'" not in line  # it suggested `-- sleep '30;' python train.py`
    one_line_error(run("render", "--", "train.py --lr 3 | tee x"), "'|' is a shell operator")
    # a command line without operators is still split for you, as before
    one_line_error(run("render", "--", "train.py --lr 3"), "drop the quotes: -- train.py --lr 3")


# 6.2 ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "args,option",
    [
        (["render", "--nodes", "４"], "--nodes"),  # FULLWIDTH DIGIT FOUR
        (["render", "--set", "nodes=٣"], "--set nodes"),  # ARABIC-INDIC DIGIT THREE
        (["render", "--set", "timeouts.heartbeat=５"], "--set timeouts.heartbeat"),
        (["launch", "--name", "x", "--local", "٣", "--", "t.py"], "--local"),
        (["logs", "x", "--tail", "４"], "--tail"),
    ],
)
def test_non_ascii_digits_are_no_integers(args, option):
    one_line_error(run(*args), f"{option}: must be an integer, got")


def test_ascii_digits_still_are():
    docs = [d for d in yaml.safe_load_all(run("render", "--nodes", "3", "--set", "gpus=0").stdout) if d]
    assert next(d for d in docs if d["kind"] == "Job")["spec"]["completions"] == 3


# 6.3 ---------------------------------------------------------------------------------------------------
def test_kubeconfig_that_is_no_kubeconfig_names_KUBECONFIG(tmp_path):
    """KUBECONFIG=/etc/passwd said "'str' object does not support item assignment", blamed on --kubeconfig
    (also tests/cluster/test_truth.py::test_a_file_that_is_not_a_kubeconfig_is_named_never_quoted)."""
    pytest.importorskip("kubernetes")
    passwd = tmp_path / "passwd"
    passwd.write_text("root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n")
    line = one_line_error(run("list", env={"KUBECONFIG": str(passwd)}), f"KUBECONFIG: {passwd}", "not a kubeconfig")
    assert "item assignment" not in line and "--kubeconfig" not in line and "root:x" not in line


# 6.4: Ctrl-C on `kgen logs -f` is quiet, exit 130: tests/cluster/test_cli_replay.py::
#      test_logs_follow_stops_at_once_on_ctrl_c (a real process and SIGINT); the root group's share:
def test_an_abort_is_quiet_with_exit_130():
    import click

    from kgen.cli.root import RootGroup

    @click.group(cls=RootGroup)
    def group():
        pass

    @group.command()
    def boom():
        raise KeyboardInterrupt

    res = CliRunner().invoke(group, ["boom"])
    assert res.exit_code == 130 and "error" not in res.output and "aborted" not in res.output


# 6.5 ---------------------------------------------------------------------------------------------------
def test_a_directory_as_the_program_is_named_a_directory(tmp_path, monkeypatch):
    """`kgen launch -- /etc`: the pre-flight (the real host side, on this machine) says it is a directory,
    not "not found"; nothing starts (the bare-metal pre-flight also finds -m modules: test_verdict_local)."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    folder = tmp_path / "adir"
    folder.mkdir()
    line = launch_error(
        run("launch", "--name", "dirprog", "--local", "1", "--port", "39871", "--", str(folder)),
        "pre-flight failed, nothing was started",
        f"program '{folder}' is a directory on this host, not a program to run",
    )
    assert "not found" not in line
    assert not (tmp_path / "state" / "kgen" / "runs" / "dirprog.json").exists()


@pytest.mark.parametrize(
    "command,words",
    [
        (["-m", "kgen_no_such_module_x"], ["module 'kgen_no_such_module_x' (of -m kgen_no_such_module_x) not found"]),
        (["-m", "json.no_such_sub"], ["module 'json.no_such_sub'"]),
        (["-m", "json"], ["'json' is a package without __main__.py"]),
        (["broken.py"], ["training script 'broken.py' does not compile", "line 2"]),
    ],
)
def test_launch_pre_flight_checks_the_script_and_the_module(tmp_path, monkeypatch, command, words):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "broken.py").write_text("import os\nx = (\n")
    launch_error(run("launch", "--name", "pf", "--local", "2", "--port", "39873", "--", *command), *words)


# 6.6 ---------------------------------------------------------------------------------------------------
SECRET = "root:$6$kgen-secret-salt$HASHHASHHASH:19000:0:99999:7:::"


@pytest.mark.parametrize(
    "content",
    [
        SECRET + "\ndaemon:*:19000:0:99999:7:::\n",  # /etc/shadow's shape: its first line is a mapping key
        "ghp_kgensecrettoken0123456789\n",  # a token file: one scalar
        "kgen-secret-key\twith a tab: x\n",
        "- kgen-secret-item\n",
    ],
)
def test_an_error_never_prints_a_files_content(tmp_path, content):
    path = tmp_path / "secret-file"
    path.write_text(content)
    for args in (["render", "-f", str(path)], ["lint", str(path)], ["lint", "-f", str(path)]):
        res = run(*args)
        assert res.exit_code != 0
        out = res.stdout + res.stderr
        assert "kgen-secret" not in out and "HASH" not in out and "ghp_" not in out, out


def test_a_typo_in_a_values_file_is_still_named(tmp_path):
    path = tmp_path / "v.yaml"
    path.write_text("nccl.debg: INFO\n")
    one_line_error(run("render", "-f", str(path)), 'unknown key "nccl.debg"', 'did you mean "nccl.debug"?')


# 6.7 ---------------------------------------------------------------------------------------------------
def test_a_patch_cannot_make_a_container_privileged(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(
        "patches:\n- target: {kind: PodTemplate}\n  patch:\n    spec:\n      containers:\n"
        "      - name: trainer\n        securityContext: {privileged: true}\n"
    )
    one_line_error(run("render", "-f", str(path)), "patches[0]", "container trainer", "never renders a privileged")
    init = tmp_path / "i.yaml"
    init.write_text("initContainers:\n- name: prep\n  image: busybox\n  securityContext: {privileged: true}\n")
    one_line_error(run("render", "-f", str(init)), "initContainers: prep: securityContext.privileged: true")
    # what a patch may still do to the security context
    ok = tmp_path / "ok.yaml"
    ok.write_text(
        "patches:\n- target: {kind: PodTemplate}\n  patch:\n    spec:\n      containers:\n"
        "      - name: trainer\n        securityContext: {runAsNonRoot: true}\n"
    )
    assert run("render", "-f", str(ok)).exit_code == 0


# 6.8 ---------------------------------------------------------------------------------------------------
MERGE_CASES = [
    "x-defaults: &d\n  nodes: '3'\n  gpus: '0'\n<<: *d\n",
    "x-a: &a {nodes: '5', nprocPerNode: '2'}\nx-b: &b {nodes: '7', gpus: '0'}\n<<: [*a, *b]\n",  # earlier wins
    "x-a: &a {nodes: '5', gpus: '0'}\n<<: *a\nnodes: '2'\n",  # the mapping's own key wins
    "resources:\n  requests: &r {cpu: '4', memory: 8Gi}\n  limits:\n    <<: *r\n    memory: 16Gi\ngpus: '0'\n",
    "x-e: &e {A: '1', B: '2'}\nenv:\n  <<: *e\n  B: '3'\ngpus: '0'\n",
]


@pytest.mark.parametrize("text", MERGE_CASES)
def test_yaml_merge_keys_as_yaml_loaders_resolve_them(text):
    """`<<: *defaults` in a values file: resolved as ruamel.yaml's safe loader and PyYAML resolve it (the YAML
    1.1 merge type: kubectl's and Helm's readers take it too): same keys, same values, same order; x- keys hold
    anchors and are not values. In a list, an earlier mapping wins (the merge type's rule and ruamel's; PyYAML
    6.0.4 lets the later one win there, the one case where the two loaders differ)."""
    from ruamel.yaml import YAML

    from kgen.render.layering import load_values_text

    raw, typed = load_values_text(text, "v.yaml")
    loader = YAML(typ="safe")
    loader.version = (1, 1)
    by_ruamel = {k: v for k, v in loader.load(text).items() if not k.startswith("x-")}
    assert raw == by_ruamel and list(raw) == list(by_ruamel)
    assert typed == by_ruamel
    by_pyyaml = {k: v for k, v in yaml.safe_load(text).items() if not k.startswith("x-")}
    if "[*a, *b]" not in text:
        assert raw == by_pyyaml and list(raw) == list(by_pyyaml)
    else:
        assert set(raw) == set(by_pyyaml) and raw["nodes"] == "5" and by_pyyaml["nodes"] == "7"


def test_merge_keys_render(tmp_path):
    path = tmp_path / "v.yaml"
    path.write_text(MERGE_CASES[1])
    docs = [d for d in yaml.safe_load_all(run("render", "-f", str(path)).stdout) if d]
    job = next(d for d in docs if d["kind"] == "Job")
    assert job["spec"]["completions"] == 5
    env = {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["NPROC_PER_NODE"] == "2"


def test_a_bad_merge_key_is_one_line(tmp_path):
    path = tmp_path / "v.yaml"
    path.write_text("nodes: {<<: 3}\n")
    one_line_error(run("render", "-f", str(path)), "v.yaml:1", "merg")


# 6.9 ---------------------------------------------------------------------------------------------------
def test_set_keys_complete():
    res = CliRunner().invoke(
        cli, [], env={"_KGEN_COMPLETE": "bash_complete", "COMP_WORDS": "kgen render --set nccl.de", "COMP_CWORD": "3"}
    )
    assert res.output.split() == ["plain,nccl.debug="]
    res = CliRunner().invoke(
        cli, [], env={"_KGEN_COMPLETE": "bash_complete", "COMP_WORDS": "kgen submit --set en", "COMP_CWORD": "3"}
    )
    assert res.output.split() == ["plain,env.", "plain,envFrom="]


# 6.10 --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("verb", ["status", "logs", "stop"])
@pytest.mark.parametrize("name", ["", "a/../../x", "../x", "UPPER", "x y"])
def test_a_run_name_is_a_name_never_a_path(verb, name, tmp_path):
    line = one_line_error(run(verb, name, env={"XDG_STATE_HOME": str(tmp_path)}), "kgen: error: NAME: ")
    assert ".json" not in line and "runs/" not in line


# 6.11 --------------------------------------------------------------------------------------------------
def test_readme_says_idle_statefulset_pods_keep_their_gpus():
    text = " ".join((ROOT / "README.md").read_text().split())
    assert "use no GPU time" not in text
    assert re.search(r"each keeps its `nvidia.com/gpu` allocation\*\* \(and its cpu and memory requests\)", text)
    assert "to release the GPUs" in text
