"""Which run a name means (kgen.sdk.runs.locate), without Slurm daemons: this machine's bare-metal and Slurm
records, `--on` to choose, one line when a name is two runs or none."""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner

from kgen import RunRef, status
from kgen.baremetal import record as B
from kgen.cli import cli as kgen_cli
from kgen.errors import UsageError
from kgen.sdk.runs import locate
from kgen.slurm import record as S


@pytest.fixture
def no_cluster(monkeypatch, tmp_path):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))


def slurm_record(name: str) -> S.RunRecord:
    rec = S.RunRecord(
        name=name, job_id="7", run_dir=str(S.default_run_dir(name)), nodes=2, created="2026-11-26T08:00:00Z"
    )
    S.save(rec)
    return rec


def bare_metal_record(name: str) -> None:
    B.save(B.RunRecord(name=name, mode="local", nodes=[B.NodeRecord(0, "localhost")]))


def where(name: str, on: str | None) -> tuple[str, object]:
    engine, run = locate(RunRef(name, on=on))
    return engine.name, run.record


def test_a_slurm_record_is_found_first(no_cluster):
    rec = slurm_record("llama")
    assert where("llama", None) == ("slurm", rec)
    assert where("llama", "slurm") == ("slurm", rec)
    assert where("llama", "cluster") == ("cluster", None)
    with pytest.raises(UsageError, match=r"--on: no bare-metal run llama \(no local record "):
        where("llama", "bare-metal")


def test_a_name_that_is_both_asks_to_choose(no_cluster):
    slurm_record("twice")
    bare_metal_record("twice")
    with pytest.raises(UsageError) as err:
        where("twice", None)
    assert str(err.value).startswith("NAME: twice is both a bare-metal run (local record ")
    assert str(err.value).endswith("(say which with --on bare-metal or --on slurm)")
    assert where("twice", "bare-metal")[0] == "bare-metal"
    assert where("twice", "slurm")[0] == "slurm"


def test_no_such_run_names_both_records(no_cluster):
    with pytest.raises(UsageError) as err:
        status(RunRef("nope"))
    state = os.environ["XDG_STATE_HOME"]
    assert f"no local record {state}/kgen/runs/nope.json or {state}/kgen/slurm/nope.json" in str(err.value)


def test_without_a_slurm_client_one_line(no_cluster, monkeypatch, tmp_path):
    slurm_record("far")
    monkeypatch.setenv("PATH", str(tmp_path))
    res = CliRunner().invoke(kgen_cli, ["status", "far"])
    assert res.exit_code == 2 and res.stdout == ""
    assert res.stderr.splitlines() == [
        "kgen: error: scontrol: not found: run kgen on a Slurm login node (Debian/Ubuntu: apt-get install slurm-client)"
    ]
    res = CliRunner().invoke(kgen_cli, ["list"])
    assert res.exit_code == 0, res.output
    row = res.stdout.splitlines()[1].split()
    assert row[:5] == ["-", "far", "slurm", "2x1cpu", "unknown"], res.stdout
    assert (
        "kgen: Slurm did not answer for 1 run(s) (far): scontrol: not found" in res.stderr
    )  # one line, not one per run


def test_the_on_option_offers_slurm():
    res = CliRunner().invoke(kgen_cli, ["logs", "x", "--on", "mars"])
    assert res.exit_code == 2 and "'cluster', 'bare-metal', 'slurm'" in res.stderr


def test_list_says_once_that_slurm_did_not_answer(no_cluster, monkeypatch, tmp_path):
    for name in ("far", "farther", "farthest"):
        slurm_record(name)
    monkeypatch.setenv("PATH", str(tmp_path))
    res = CliRunner().invoke(kgen_cli, ["list"])
    assert res.exit_code == 0, res.output
    said = [line for line in res.stderr.splitlines() if "Slurm" in line]
    assert len(said) == 1 and said[0].startswith("kgen: Slurm did not answer for 3 run(s)"), res.stderr
    assert [row.split()[4] for row in res.stdout.splitlines()[1:]] == ["unknown"] * 3
