"""`kgen launch` refuses bad input before anything runs: one line naming the option and the fix, exit 2,
nothing on stdout; and the other verbs say which run (bare metal or cluster) they use."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from kgen.baremetal import record as R
from kgen.cli import cli

BASE = ["launch", "--name", "demo"]


def run(*args):
    return CliRunner().invoke(cli, list(args))


def one_line_error(res, *words):
    assert res.exit_code == 2, (res.exit_code, res.stdout, res.stderr)
    assert res.stdout == ""
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("kgen: error: "), res.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])


@pytest.mark.parametrize(
    "args,words",
    [
        ([*BASE, "--", "train.py"], ["--hosts", "--local N"]),
        ([*BASE, "--hosts", "a,b", "--local", "2", "--", "t.py"], ["cannot be used together"]),
        ([*BASE, "--hosts", "a,b"], ["no training command", "-- train.py"]),
        ([*BASE, "--hosts", "a,,b", "--", "t.py"], ["--hosts", "empty host name"]),
        ([*BASE, "--hosts", "-oProxyCommand=x", "--", "t.py"], ["--hosts", "ssh would read it as an option"]),
        (["launch", "--name", "Bad_Name", "--hosts", "a", "--", "t.py"], ["--name", "DNS label"]),
        ([*BASE, "--hosts", "a", "--env", "NOEQUALS", "--", "t.py"], ["--env", "KEY=VALUE"]),
        ([*BASE, "--hosts", "a", "--env", "NNODES=3", "--", "t.py"], ["--env", "NNODES is set by kgen launch"]),
        ([*BASE, "--hosts", "a", "--env", "MASTER_ADDR=x", "--", "t.py"], ["--master-addr"]),
        ([*BASE, "--hosts", "a", "--inject", "kill:0@5", "--", "t.py"], ["--inject", "--local"]),
        ([*BASE, "--local", "2", "--inject", "kill:5@1", "--", "t.py"], ["--inject", "not one of the 2 nodes"]),
        ([*BASE, "--local", "2", "--inject", "boom:1@1", "--", "t.py"], ["--inject", "kill:RANK@SECONDS"]),
        ([*BASE, "--local", "2", "--inject", "kill:1@1+3", "--", "t.py"], ["--inject", "freeze only"]),
        ([*BASE, "--local", "0", "--", "t.py"], ["--local", "between 1 and 64"]),
        ([*BASE, "--hosts", "a", "--port", "65535", "--", "t.py"], ["--port", "P+1"]),
        ([*BASE, "--hosts", "a", "--nproc-per-node", "0", "--", "t.py"], ["--nproc-per-node"]),
        ([*BASE, "--hosts", "a", "--ssh-config", "/nonexistent/cfg", "--", "t.py"], ["--ssh-config", "does not exist"]),
        ([*BASE, "--local", "2", "--ssh-config", "/etc/hostname", "--", "t.py"], ["--ssh-config", "not --local"]),
        ([*BASE, "--hostfile", "/dev/zero", "--", "t.py"], ["--hostfile", "larger than"]),
        ([*BASE, "--hosts", "a", "--master-addr", "a b", "--", "t.py"], ["--master-addr"]),
        # a launcher as the command (nested launchers): refused before any host is asked, the launch to run instead
        (
            [*BASE, "--hosts", "unused-host", "--", "torchrun", "--nproc-per-node", "4", "t.py", "--lr", "3"],
            [
                "-- COMMAND: torchrun is a launcher",
                "use: kgen launch --name demo --hosts unused-host --nproc-per-node 4 -- t.py --lr 3",
            ],
        ),
        (
            [
                *BASE,
                "--hosts",
                "h1,h2",
                "--nproc-per-node",
                "2",
                "--",
                "python3",
                "-m",
                "torch.distributed.run",
                "--nproc_per_node=8",
                "t.py",
            ],
            [
                "python3 -m torch.distributed.run is a launcher",
                "disagrees with --nproc-per-node 2",
                "use: kgen launch --name demo --hosts h1,h2 --nproc-per-node 2 -- t.py",
            ],
        ),
        # what every node's entrypoint would refuse once started (exit 2 on every node)
        ([*BASE, "--hosts", "unused-host", "--", "-m"], ["--:", "'-m' needs a module name"]),
        ([*BASE, "--hosts", "unused-host", "--", "--lr", "3"], ["--:", "starts with the option '--lr'"]),
        ([*BASE, "--hosts", "unused-host", "--", ""], ["--:", "the program is an empty string"]),
    ],
)
def test_bad_input(args, words):
    one_line_error(run(*args), *words)


def test_an_existing_local_record_is_refused_before_any_ssh():
    R.save(R.RunRecord(name="demo", mode="ssh", nodes=[R.NodeRecord(0, "gpu1", "/x/node0")]))
    res = run(*BASE, "--hosts", "unused-host", "--", "t.py")
    one_line_error(res, "--name", "already exists", "gpu1", "kgen stop demo --rm")


def test_unknown_run_with_on_bare_metal():
    one_line_error(run("status", "nope", "--on", "bare-metal"), "no bare-metal run nope", "kgen list")


def test_unknown_run_without_a_cluster_says_where_it_looked(monkeypatch, tmp_path):
    """A bare-metal user's typo: not only "no kubeconfig", but that no bare-metal run has that name."""
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    for verb in (["status"], ["logs"], ["stop"]):
        one_line_error(
            run(*verb, "nope"),
            "NAME: no run nope: no bare-metal or Slurm run of that name",
            "kgen list",
            "--kubeconfig",
        )


def test_rm_is_for_bare_metal_runs(tmp_path):
    one_line_error(run("stop", "nope", "--rm", "--on", "cluster"), "--rm", "bare-metal")


def test_help_documents_launch():
    res = run("launch", "--help")
    assert res.exit_code == 0 and "Examples:" in res.stdout and "kgen launch --name" in res.stdout
    for opt in ("--hosts", "--hostfile", "--ssh-config", "--python", "--nproc-per-node", "--workdir", "--env",
                "--port", "--follow", "--local", "--inject", "--master-addr"):  # fmt: skip
        assert opt in res.stdout


def test_preflight_checks_a_program_path_and_starts_nothing(tmp_path, monkeypatch):
    """A program (not a .py script) given by path must exist and be executable in --workdir on every
    host: the pre-flight says so (torchrun --no-python would fail on every node after the start)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "run.sh").write_text("#!/bin/sh\necho hi\n")
    for program, words in (("./missing.sh", "program './missing.sh' not found in"), ("./run.sh", "not executable")):
        res = run(*BASE, "--local", "2", "--port", "29431", "--", program)
        try:
            assert res.exit_code == 2 and res.stdout == "", (res.stdout, res.stderr)
            error = res.stderr.splitlines()[-1]  # after the pre-flight's progress line
            assert error.startswith("kgen: error: pre-flight failed, nothing was started: localhost"), error
            assert words in error and error.count(words) == 1, error  # two nodes, one host: said once
        finally:
            if R.load("demo") is not None:  # started after all: end it (the test has failed already)
                run("stop", "demo", "--rm", "--grace", "1")
        assert R.load("demo") is None


def test_list_without_a_cluster_or_a_run_says_there_is_none(tmp_path, monkeypatch):
    """A bare-metal user with no cluster configured: `kgen list` once ended in "no kubeconfig found" (exit 2)
    as soon as the last run was removed; with runs it listed them. A configured cluster still errors."""
    monkeypatch.setenv("HOME", str(tmp_path))
    for var in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST"):
        monkeypatch.delenv(var, raising=False)
    res = run("list")
    assert (res.exit_code, res.stdout, res.stderr) == (
        0,
        "no kgen runs in this machine's bare-metal and Slurm records\n",
        "",
    )
    assert json.loads(run("list", "-o", "json").stdout) == {"version": 2, "runs": []}
    one_line_error(run("list", "--kubeconfig", str(tmp_path / "missing")), "--kubeconfig")
