"""kgen.slurm.engine against the real controller, without running training: what submit makes and refuses, a held
job stopped, and the run's folder and record."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

from kgen.errors import UsageError
from kgen.render.sbatch import SbatchSpec, sbatch_text
from kgen.resources import entrypoint_path
from kgen.slurm import commands
from kgen.slurm import engine as ops
from kgen.slurm import record as R


def spec(name: str, **more) -> SbatchSpec:
    return SbatchSpec(name=name, nodes=3, command=["train.py"], python=sys.executable, **more)


def submit(s: SbatchSpec, workdir: str, run_dir: str | None = None) -> ops.Submitted:
    return ops.submit(sbatch_text(s), s.name, s.nodes, run_dir, workdir=workdir)


def test_submit_makes_a_private_folder_with_the_secret_outside_the_script(slurm, tmp_path):
    sub = submit(spec("held", extra_sbatch=("--hold",)), str(tmp_path))
    run = Path(sub.record.run_dir)
    assert stat.S_IMODE(run.stat().st_mode) == 0o700
    secret = sub.secret.read_text().strip()
    assert len(secret) == 64 and int(secret, 16) >= 0
    assert stat.S_IMODE(sub.secret.stat().st_mode) == 0o600
    assert secret not in sub.script.read_text()
    assert sub.script.read_text() == sbatch_text(spec("held", extra_sbatch=("--hold",)))  # the rendered bytes, as given
    assert str(run) in slurm.run("scontrol", "show", "job", sub.record.job_id).stdout  # its argument: the folder
    assert secret not in R.path("held").read_text()
    assert (run / "kgen_entrypoint.py").read_text() == entrypoint_path().read_text()
    assert R.load("held") == sub.record and sub.record.job_id.isdigit()
    info = commands.job_info(sub.record.job_id)
    assert info is not None and info.state == "PENDING"
    v = ops.status(sub.record)
    assert v.state == "starting" and v.headline == "Starting: 0/3 ranks up, 3 not started yet"
    assert any(f"Slurm job {sub.record.job_id}: PENDING" in d for d in v.details)
    # the same name again is refused before anything is made
    with pytest.raises(UsageError, match='a Slurm run "held" exists already'):
        submit(spec("held"), str(tmp_path))
    # a pending job is cancelled at once; its folder says it was stopped
    report = ops.stop(sub.record, grace=5)
    assert report.steps == ["scancel"] and report.state == "CANCELLED", report.summary()
    assert (run / "stopping").exists()
    v = ops.status(sub.record)
    assert v.state == "stopped" and v.headline.startswith("Stopped: by kgen stop"), v.headline
    assert [rec.name for rec, _ in ops.list_runs()] == ["held"]


def test_submit_refused_by_slurm_leaves_nothing(slurm, tmp_path):
    with pytest.raises(commands.SlurmError) as err:
        submit(spec("nopart", partition="nope"), str(tmp_path))
    assert str(err.value).startswith("sbatch refused the job: ")
    assert "invalid partition" in str(err.value).lower()
    assert "\n" not in str(err.value)
    assert not R.default_run_dir("nopart").exists() and R.load("nopart") is None


def test_without_the_slurm_client_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch on it
    with pytest.raises(commands.SlurmError) as err:
        submit(spec("noclient"), str(tmp_path))
    assert str(err.value) == (
        "sbatch: not found: run kgen on a Slurm login node (Debian/Ubuntu: apt-get install slurm-client)"
    )
    assert not R.default_run_dir("noclient").exists()


@pytest.mark.parametrize("name", ["Bad", "a_b", "-x", "x" * 64, ""])
def test_a_bad_run_name_is_refused_before_anything(name, tmp_path):
    run = tmp_path / "r"
    with pytest.raises(UsageError, match="--name: (must be a DNS label|is 64 characters)"):
        ops.submit("#!/bin/bash\n", name, 1, str(run), workdir=str(tmp_path))
    assert not run.exists()


@pytest.mark.parametrize("run_dir", ["relative/dir", "/a b", "/a,b", "/x%j"])
def test_a_bad_run_folder_is_refused_before_anything(run_dir, tmp_path):
    with pytest.raises(UsageError, match="--run-dir: must be"):
        ops.submit("#!/bin/bash\n", "ok", 1, run_dir, workdir=str(tmp_path))
    assert R.load("ok") is None


def test_a_run_folder_that_is_not_empty_is_refused(tmp_path):
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "data").write_text("x")
    with pytest.raises(UsageError, match="exists and is not an empty folder"):
        ops.submit("#!/bin/bash\n", "ok", 1, str(tmp_path / "r"), workdir=str(tmp_path))
    assert (tmp_path / "r" / "data").read_text() == "x"


def test_test_only_asks_slurm_and_submits_nothing(slurm, tmp_path):
    answer = ops.test_only(sbatch_text(spec("probe")), workdir=str(tmp_path))
    assert answer.startswith("Job ") and " to start at " in answer and "n[0-2]" in answer, answer
    assert slurm.run("squeue", "-h", "-o", "%i").stdout.strip() == ""
    with pytest.raises(commands.SlurmError, match="sbatch --test-only refused the job: .*(?i:invalid partition)"):
        ops.test_only(sbatch_text(spec("probe", partition="nope")), workdir=str(tmp_path))
