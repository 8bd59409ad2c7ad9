"""The command line on a real Slurm cluster (tests/slurm/slurmlab.py): the render -> lint -> submit -> status loop
of docs/slurm.md, then logs, list, stop and stop --rm through `--on slurm`; dry runs (the script; sbatch
--test-only); --replace. Each test has a hard timeout; the `slurm` fixture cancels every job after it."""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from kgen.cli import cli as kgen_cli
from kgen.slurm import record as R

REPO = Path(__file__).resolve().parents[2]
CKPTLOOP = REPO / "tests" / "entrypoint" / "ckptloop.py"
# CPU nodes of the lab (2 CPUs, 4000 MB): one process per node, the lab's short liveness and step bounds
FLAGS = ["--nodes", "3", "--gpus", "0", "--set", f"python={sys.executable}", "--set", "slurm.stepWait=8",
         "--set", "timeouts.heartbeat=3", "--set", "reform.maxReformations=2", "--memory", "500Mi"]  # fmt: skip


def kgen(*args: str):
    return CliRunner().invoke(kgen_cli, list(args))


def command(tmp_path: Path, name: str, steps: int) -> list[str]:
    return ["--", str(CKPTLOOP), "--steps", str(steps), "--sleep", "0.2", "--ckpt", str(tmp_path / f"{name}.json")]


def wait_for(pred, timeout: float, what: str, poll: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")


@pytest.mark.timeout(240)
def test_render_lint_submit_status_logs_list_stop(slurm, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cmd = command(tmp_path, "loop", 10)
    res = kgen("render", "--kind", "slurm", "--name", "loop", *FLAGS, "--output-file", "loop.sbatch", *cmd)
    assert res.exit_code == 0 and res.stderr == "", res.output
    res = kgen("lint", "--strict", "loop.sbatch")
    assert res.exit_code == 0 and res.stdout == "", res.output
    res = kgen("submit", "--kind", "slurm", "--name", "loop", *FLAGS, *cmd)
    assert res.exit_code == 0, res.output
    m = re.fullmatch(r"Slurm job (\d+) submitted: run loop, 3 node\(s\); run folder (\S+)\n"
                     r"next: kgen status loop · kgen logs loop -f · kgen stop loop\n", res.stdout)  # fmt: skip
    assert m, res.stdout
    job, run = m.groups()
    assert run == str(R.default_run_dir("loop"))
    # what was submitted is what render printed and lint read, byte for byte
    assert (Path(run) / "job.sbatch").read_text() == (tmp_path / "loop.sbatch").read_text()
    res = kgen("status", "loop", "--exit-code")
    assert res.exit_code in (0, 3), res.output
    assert f"Slurm run loop: job {job}, run folder {run}" in res.stdout
    watched = kgen("status", "loop", "--on", "slurm", "--watch", "--exit-code")  # until it ends
    assert watched.exit_code == 0, watched.output
    assert watched.stdout.rstrip().splitlines()[-2:][0].startswith("Succeeded: 3/3 ranks completed"), watched.stdout
    done = kgen("status", "loop")
    assert "Succeeded: 3/3 ranks completed, 0 re-formations" in done.stdout, done.stdout
    rows = [ln.split() for ln in done.stdout.splitlines()[1:4]]
    assert [r[0] for r in rows] == ["0", "1", "2"] and all("Succeeded" in r for r in rows), done.stdout
    res = kgen("status", "loop", "-o", "json")
    assert res.exit_code == 0 and '"state": "succeeded"' in res.stdout
    res = kgen("logs", "loop", "--tail", "1")
    heads = sorted(ln[:9] for ln in res.stdout.splitlines())  # each node's last line: its own "stopped"
    assert res.exit_code == 0 and heads == ["[node 0] ", "[node 1] ", "[node 2] "], res.stdout
    # node 2's log is whole once its last line is written (the job's end does not wait for the file system)
    log2 = Path(run) / "node2" / "log"
    stopped = "kgen-entrypoint: stopped: succeeded"
    wait_for(lambda: log2.read_text().rstrip("\n").endswith(stopped), 30, "node 2's last log line")
    # one process per node: rank 2's lines and node 2's own; --tail past the log's length: every line (the default
    # 10 hold no rank 2 line when a busy machine adds node lines at the end); nothing lost, nothing reordered
    res = kgen("logs", "loop", "-f", "--rank", "2", "--tail", "1000")
    lines = res.stdout.splitlines()
    assert res.exit_code == 0 and lines[-1] == f"[node 2] {stopped}", res.stdout
    ranked = [ln[len("[2] ") :] for ln in lines if ln.startswith("[2] ")]
    written = [ln.split(" [rank 2] ", 1)[1] for ln in log2.read_text().splitlines() if " [rank 2] " in ln]
    assert ranked == written and sum(" rank=2 step " in ln for ln in ranked) == 10, (res.stdout, log2.read_text())
    assert not any(ln.startswith(("[0]", "[1]")) for ln in lines), res.stdout
    res = kgen("list")
    assert res.exit_code == 0
    row = next(ln for ln in res.stdout.splitlines() if ln.split()[1:2] == ["loop"])
    assert row.split()[:5] == ["-", "loop", "slurm", "3x1cpu", "succeeded"], res.stdout
    for bad, error in (
        (["logs", "loop", "--previous"], "--previous: is for cluster runs"),
        (["logs", "loop", "--rank", "5"], "--rank: run loop has ranks 0..2, not [5]"),
        (["status", "nope", "--on", "slurm"], "--on: no Slurm run nope (no local record"),
    ):
        res = kgen(*bad)
        assert res.exit_code == 2 and res.stdout == "" and error in res.stderr, res.output
    res = kgen("stop", "loop", "--rm")
    assert res.exit_code == 0, res.output
    removed = "run loop stopped and removed (its run folder and the local record)"
    assert res.stdout.splitlines() == [f"Slurm job {job} had ended already (Slurm: COMPLETED)", removed]
    assert not Path(run).exists() and R.load("loop") is None


@pytest.mark.timeout(300)
def test_stop_from_the_command_line(slurm, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = kgen("submit", "--kind", "slurm", "--name", "halt", "--wait", *FLAGS, *command(tmp_path, "halt", 10000))
    assert res.exit_code == 0, res.output  # --wait: until every rank runs
    assert res.stdout.splitlines()[-2].startswith("Running: 3/3 ranks up"), res.stdout

    # kgen debug stacks through one `srun --overlap` step in the running job: every rank in the training loop
    def in_the_loop():  # every rank's stack has ckptloop's main(); the first asks may find torch still importing
        res = kgen("debug", "stacks", "halt", "-o", "json")
        assert res.exit_code == 0, res.output
        data = json.loads(res.stdout)
        looping = sorted(r["rank"] for r in data["ranks"] if any(f[0].endswith("ckptloop.py") and f[2] == "main"
                                                                 for f in r["frames"]))  # fmt: skip
        return data if looping == [0, 1, 2] else None

    data = wait_for(in_the_loop, 90, "every rank's stack in the training loop", poll=2)
    assert data["groups"] and not data["notes"], data
    res = kgen("stop", "halt", "--grace", "20")
    assert res.exit_code == 0, res.output
    assert re.fullmatch(r"Slurm job \d+ ended after [\d.]+s: SIGINT to every task \(group stop\); Slurm: \w+\n",
                        res.stdout), res.stdout  # fmt: skip
    wait_for(lambda: not any(slurm.job_processes(n) for n in ("n0", "n1", "n2", "n3")), 30, "no job process left")
    res = kgen("status", "halt", "--exit-code")
    assert res.exit_code == 1 and "Stopped: " in res.stdout, res.output
    res = kgen("debug", "stacks", "halt")
    assert res.exit_code == 2 and res.stdout == "" and "is not running" in res.stderr, res.output


@pytest.mark.timeout(120)
def test_dry_runs_and_replace(slurm, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = kgen("submit", "--kind", "slurm", "--name", "dry", *FLAGS, "--dry-run", "--", "train.py")
    assert res.exit_code == 0 and res.stdout.startswith("#!/bin/bash\n"), res.output
    assert "kgen: dry run: the sbatch script above would be submitted; nothing was sent to Slurm" in res.stderr
    res = kgen("submit", "--kind", "slurm", "--name", "dry", *FLAGS, "--dry-run=server", "--", "train.py")
    assert res.exit_code == 0, res.output
    assert re.search(r"sbatch --test-only: Job \d+ to start at .* nothing was submitted", res.stderr), res.stderr
    assert R.load("dry") is None and slurm.run("squeue", "-h").stdout.strip() == ""
    res = kgen("submit", "--kind", "slurm", "--name", "dry", *FLAGS, "--dry-run=server", "--set",
               "slurm.partition=nope", "--", "train.py")  # fmt: skip
    assert res.exit_code == 2 and "sbatch --test-only refused the job" in res.stderr, res.output
    held = [*FLAGS, "--set", "slurm.directives=[--hold]", "--", "train.py"]
    first = kgen("submit", "--kind", "slurm", "--name", "held", *held)
    assert first.exit_code == 0, first.output
    again = kgen("submit", "--kind", "slurm", "--name", "held", *held)
    assert again.exit_code == 2 and 'a Slurm run "held" exists already' in again.stderr, again.output
    replaced = kgen("submit", "--kind", "slurm", "--name", "held", "--replace", *held)
    assert replaced.exit_code == 0, replaced.output
    old_job = first.stdout.split()[2]
    assert replaced.stdout.startswith(f"replacing Slurm run held (job {old_job}): stopping it first\n")
    assert R.load("held").job_id != old_job  # type: ignore[union-attr]
    for bad, error in (
        (["--context", "prod"], "--context: is for cluster runs; --kind slurm submits with sbatch"),
        (["--run-dir", "rel"], "--run-dir: must be an absolute path"),
    ):
        res = kgen("submit", "--kind", "slurm", "--name", "bad", *bad, *FLAGS, "--", "train.py")
        assert res.exit_code == 2 and error in res.stderr, res.output
    res = kgen("submit", "--name", "bad", "--run-dir", "/tmp/x", "--dry-run", "--", "train.py")
    assert res.exit_code == 2 and "--run-dir: is for Slurm runs (--kind slurm)" in res.stderr, res.output
