"""sbatch's "no node fits" (Requested node configuration is not available) says which kgen value set the
script's --mem and how to leave it out; other refusals pass as sbatch said them. A stand-in sbatch on PATH."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from kgen.cli import cli

NO_NODE = "sbatch: error: Batch job submission failed: Requested node configuration is not available"


@pytest.fixture
def refusing_sbatch(tmp_path, monkeypatch):
    def install(words: str) -> None:
        sbatch = tmp_path / "bin" / "sbatch"
        sbatch.parent.mkdir(exist_ok=True)
        sbatch.write_text(f"#!/bin/sh\necho '{words}' >&2\nexit 1\n")
        sbatch.chmod(0o755)
        monkeypatch.setenv("PATH", f"{sbatch.parent}:/usr/bin:/bin")

    monkeypatch.chdir(tmp_path)
    return install


def submit(*args: str):
    return CliRunner().invoke(cli, ["submit", "--kind", "slurm", "--name", "mem", *args, "--", "train.py"])


@pytest.mark.parametrize(
    "args, said",
    [
        (["--gpus", "4"], "--mem=32G is kgen's automatic memory request (8Gi per GPU x 4 GPUs)"),
        (["--gpus", "0", "--set", "nprocPerNode=3"], "--mem=6G is kgen's automatic memory request (2Gi per process"),
        (["--gpus", "2", "--memory", "500Gi"], "--mem=500G is kgen's memory request 500Gi (from --memory)"),
        (["--gpus", "2", "--set", "resources.requests.memory=1Ti"], "--mem=1024G is resources.requests.memory"),
    ],
)
def test_no_node_fits_names_the_kgen_value_and_how_to_leave_it_out(refusing_sbatch, args, said):
    refusing_sbatch(NO_NODE)
    res = submit(*args)
    assert res.exit_code == 2 and res.stdout == ""
    line = res.stderr.splitlines()[-1]  # (resources.requests: render's warning that only cpu and memory count)
    assert line.startswith(f"kgen: error: sbatch refused the job: {NO_NODE}; {said}"), line
    assert sum(ln.startswith("kgen: error: ") for ln in res.stderr.splitlines()) == 1
    if "resources.requests" not in said:
        assert line.endswith("leave it out with --memory '' (Slurm's default applies) or ask less: --memory QTY")


def test_without_mem_or_for_another_refusal_sbatch_speaks_alone(refusing_sbatch):
    refusing_sbatch(NO_NODE)
    res = submit("--gpus", "2", "--memory", "")
    assert res.stderr.strip() == f"kgen: error: sbatch refused the job: {NO_NODE}"
    refusing_sbatch("sbatch: error: invalid partition specified: gpu")
    res = submit("--gpus", "2")
    assert res.stderr.strip() == "kgen: error: sbatch refused the job: sbatch: error: invalid partition specified: gpu"
