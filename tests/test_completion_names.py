"""`kgen completion`'s scripts complete run names for status, logs and stop: this machine's bare-metal and
Slurm records (and a configured cluster's runs); a cluster that cannot be asked offers nothing, quietly."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from click.shell_completion import ShellComplete

from kgen.baremetal import record as bare
from kgen.cli import cli
from kgen.slurm import record as slurm


@pytest.fixture
def records(monkeypatch, tmp_path):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))  # no cluster configured
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    bare.save(bare.RunRecord(name="alpha", mode="local", nodes=[bare.NodeRecord(0, "localhost", "/x/node0")]))
    bare.save(bare.RunRecord(name="beta", mode="ssh", nodes=[bare.NodeRecord(0, "gpu1", "/x/node0")]))
    slurm.save(slurm.RunRecord(name="llama", job_id="17", run_dir="/x/llama", nodes=2))


def completions(*args: str, incomplete: str = "") -> list[str]:
    return [c.value for c in ShellComplete(cli, {}, "kgen", "_KGEN_COMPLETE").get_completions(list(args), incomplete)]


@pytest.mark.parametrize("verb", ["status", "logs", "stop"])
def test_status_logs_and_stop_complete_run_names(records, verb):
    assert completions(verb) == ["alpha", "beta", "llama"]
    assert completions(verb, incomplete="al") == ["alpha"]


def test_on_narrows_the_names(records):
    assert completions("status", "--on", "slurm") == ["llama"]
    assert completions("logs", "--on", "bare-metal") == ["alpha", "beta"]


def test_an_unreachable_cluster_offers_nothing_and_says_nothing(records, tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:9'}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\nusers: [{name: u, user: {token: t}}]\n"
    )
    assert completions("status", "--kubeconfig", str(kubeconfig)) == ["alpha", "beta", "llama"]


@pytest.mark.timeout(60)
def test_the_bash_script_offers_them(records):
    env = {**os.environ, "_KGEN_COMPLETE": "bash_complete", "COMP_WORDS": "kgen logs b", "COMP_CWORD": "2"}
    res = subprocess.run([sys.executable, "-m", "kgen"], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and res.stdout.splitlines() == ["plain,beta"], res.stdout + res.stderr
