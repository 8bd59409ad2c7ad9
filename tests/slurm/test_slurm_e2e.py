"""Real Slurm daemons (tests/slurm/slurmlab.py) running kgen's sbatch script: CPU gloo training on 3 nodes,
a node killed mid-training (requeued, resumed from the checkpoint), a script error (failed at once with the
root cause), kgen stop (every node's processes gone). Each test has a hard timeout and cleans up by PID."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from kgen.render.sbatch import SbatchSpec, sbatch_text
from kgen.slurm import engine as ops
from kgen.slurm import record as R

REPO = Path(__file__).resolve().parents[2]
CKPTLOOP = REPO / "tests" / "entrypoint" / "ckptloop.py"
FAST = (
    ("NPROC_PER_NODE", "1"),
    ("KGEN_HEARTBEAT_INTERVAL", "0.5"),
    ("KGEN_HEARTBEAT_TIMEOUT", "3"),
    ("KGEN_MAX_REFORMATIONS", "2"),
)


def spec(name: str, tmp_path: Path, *args: str, nodes: int = 3, steps: int = 30) -> SbatchSpec:
    ckpt = tmp_path / f"{name}.ckpt.json"
    command = [str(CKPTLOOP), "--steps", str(steps), "--sleep", "0.2", "--ckpt", str(ckpt), *args]
    return SbatchSpec(name=name, nodes=nodes, command=command, python=sys.executable, step_wait=8, env=FAST)


def submit(s: SbatchSpec, workdir: str) -> ops.Submitted:
    return ops.submit(sbatch_text(s), s.name, s.nodes, workdir=workdir)


def wait_for(pred, timeout: float, what: str, poll: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")


def events(rec: R.RunRecord) -> list[str]:
    lines, _ = ops.logs(rec)
    return [ln for ln in lines if "KGEN_EVT" in ln]


def total(ckpt: Path) -> dict:
    return json.loads(ckpt.read_text())


def undisturbed_total(world: int, steps: int) -> float:
    return float(sum(sum(r + 1 + s for r in range(world)) for s in range(steps)))


@pytest.mark.timeout(240)
def test_training_on_three_nodes(slurm, tmp_path):
    sub = submit(spec("train3", tmp_path, steps=10), str(tmp_path))
    rec = sub.record
    assert sub.secret.read_text().strip() not in sub.script.read_text()
    assert oct(sub.secret.stat().st_mode & 0o777) == "0o600"
    followed = list(ops.follow(rec, tail=100000, poll=0.2))  # from the first lines until the job ended
    for rank in range(3):
        assert f"[node {rank}] kgen-entrypoint: stopped: succeeded" in followed, followed[-10:]
        assert any(ln.startswith(f"[{rank}] KGEN_EVT") for ln in followed)  # the training process's own lines
    assert sum("resume gen=0 step=0" in ln for ln in followed) == 3
    v = wait_for(lambda: (v := ops.status(rec)).state in ("succeeded", "failed", "stopped") and v, 180, "the end")
    assert v.state == "succeeded", (v.headline, v.details)
    assert v.headline == "Succeeded: 3/3 ranks completed, 0 re-formations"
    assert [(r.name, v.state) for r, v in ops.list_runs()] == [("train3", "succeeded")]
    assert sorted(r.host for r in v.rows) == ["n0", "n1", "n2"]
    assert total(tmp_path / "train3.ckpt.json") == {"step": 10, "total": undisturbed_total(3, 10)}
    lines, warnings = ops.logs(rec)
    assert not warnings
    assert {ln[:4] for ln in lines if not ln.startswith("[node ")} == {"[0] ", "[1] ", "[2] "}  # the processes'
    assert {ln[:9] for ln in lines if ln.startswith("[node ")} == {"[node 0] ", "[node 1] ", "[node 2] "}  # kgen's
    assert any("rank from SLURM_NODEID=2" in ln for ln in lines if ln.startswith("[node 2] "))
    assert any("MASTER_ADDR n0 (first host of n[0-2])" in ln for ln in lines)
    # the per-run output file has every node's lines, labelled by srun
    out = (Path(rec.run_dir) / f"slurm-{rec.job_id}.out").read_text()
    assert "kgen-slurm: job" in out and "succeeded" in out


@pytest.mark.timeout(300)
def test_node_killed_requeued_and_resumed(slurm, tmp_path):
    steps = 30
    sub = submit(spec("crash", tmp_path, steps=steps), str(tmp_path))
    rec = sub.record
    ckpt = tmp_path / "crash.ckpt.json"
    wait_for(lambda: ckpt.exists() and total(ckpt)["step"] >= 5, 120, "training to pass step 5")
    t_kill = time.monotonic()
    slurm.crash("n1")  # node 1: slurmd, slurmstepd, the entrypoint, torchrun, the worker: all at once
    v = wait_for(lambda: (v := ops.status(rec)).state in ("succeeded", "failed", "stopped") and v, 240, "the end")
    assert v.state == "succeeded", (v.headline, v.details)
    assert v.reformations == 1
    assert v.headline == "Succeeded: 3/3 ranks completed, 1 re-formation"
    assert "n1" not in {r.host for r in v.rows}  # requeued onto the three nodes left
    # resumed from the checkpoint: the total is an undisturbed run's, and attempt 1 started past step 0
    assert total(ckpt) == {"step": steps, "total": undisturbed_total(3, steps)}
    resumed = [ln for ln in events(rec) if " resume gen=1 " in ln]
    assert resumed and all("step=0" not in ln for ln in resumed), resumed
    # requeued by kgen (srun ended first: the batch script's --slurm-end decided) or by Slurm itself (node 1 was
    # DOWN first: Slurm requeues a --requeue job on node failure); either way attempt 1 ran to the end
    # (the batch script's --slurm-end writes attempt 1's entry after srun returns: the nodes' exit records, which
    # the status read, can come first)
    history = wait_for(lambda: (h := R.read_history(rec.run_dir)) and h[-1]["decision"] == "succeeded" and h, 30,
                       "the last attempt's entry in the run's history")  # fmt: skip
    assert [h["decision"] for h in history] in (["requeue", "succeeded"], ["succeeded"]), history
    if len(history) == 2:
        assert history[0]["codes"]["1"] is None and history[0]["codes"]["0"] == 75
    # the incident names the lost node as the cause and the survivors' fail-stop
    assert len(v.incidents) == 1 and v.incidents[0].startswith("1. rank 1 (host n1): "), v.incidents
    assert "stopped by fail-stop (exit 75)" in v.incidents[0], v.incidents
    print(f"killed n1 -> succeeded after {time.monotonic() - t_kill:.1f}s")


@pytest.mark.timeout(240)
def test_script_error_fails_at_once_with_root_cause(slurm, tmp_path):
    sub = submit(spec("bug", tmp_path, "--fail-at", "3", "--fail-rank", "2", steps=30), str(tmp_path))
    rec = sub.record
    v = wait_for(lambda: (v := ops.status(rec)).state in ("succeeded", "failed", "stopped") and v, 180, "the end")
    assert v.state == "failed", (v.headline, v.details)
    assert v.root_cause is not None and v.root_cause.ranks == [2], v.headline
    assert v.root_cause.exit_code == 1
    assert v.headline.startswith("Failed: rank 2 (host n2): exit 1: "), v.headline
    assert v.reformations == 0
    assert [h["decision"] for h in R.read_history(rec.run_dir)] == ["failed"]  # never requeued
    assert "Restarts=0" in slurm.run("scontrol", "show", "job", rec.job_id).stdout


@pytest.mark.timeout(240)
def test_stop_ends_every_node(slurm, tmp_path):
    sub = submit(spec("halt", tmp_path, steps=10000), str(tmp_path))
    rec = sub.record
    ckpt = tmp_path / "halt.ckpt.json"
    wait_for(lambda: ckpt.exists() and total(ckpt)["step"] >= 3, 120, "training to pass step 3")
    assert all(slurm.job_processes(n) for n in ("n0", "n1", "n2"))
    report = ops.stop(rec, grace=20)
    assert report.stopped, report.summary()
    assert report.steps[0] == "SIGINT to every task (group stop)", report.summary()
    wait_for(lambda: not any(slurm.job_processes(n) for n in ("n0", "n1", "n2", "n3")), 30, "no job process left")
    v = ops.status(rec)
    assert v.state == "stopped", (v.headline, v.details)
    assert v.headline.startswith("Stopped: "), v.headline
    assert all(r.exit_code == 6 for r in v.rows), [(r.rank, r.exit_code, r.meaning) for r in v.rows]
    assert [h["decision"] for h in R.read_history(rec.run_dir)] == ["stopped"]


def rank_tree(slurm, host: str, rec: R.RunRecord, rank: int) -> list[int]:
    """Node ``rank``'s entrypoint, torchrun and workers on ``host`` (not its srun task's supervisor, not slurmd)."""
    marker = f"KGEN_RUN_DIR={rec.run_dir}/node{rank}".encode()
    out = []
    for pid in slurm.host(host).pids():
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                env = fh.read().split(b"\0")
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read()
        except OSError:
            continue
        if marker in env and b"--slurm-node" not in cmd:
            out.append(pid)
    return out


@pytest.mark.timeout(240)
@pytest.mark.parametrize("fault", ["kill", "freeze"])
def test_a_killed_or_frozen_rank_ends_the_step_and_requeues(slurm, tmp_path, fault):
    """Node 1's processes (entrypoint, torchrun, worker) SIGKILLed, or SIGSTOPped as a wedged rank Slurm cannot
    see: the other nodes fail-stop within the liveness bound, the step ends, kgen requeues the job and it resumes."""
    steps = 30
    sub = submit(spec(f"rank-{fault}", tmp_path, steps=steps), str(tmp_path))
    rec = sub.record
    ckpt = tmp_path / f"rank-{fault}.ckpt.json"
    wait_for(lambda: ckpt.exists() and total(ckpt)["step"] >= 5, 120, "training to pass step 5")
    tree = rank_tree(slurm, "n1", rec, 1)
    assert len(tree) >= 3, tree
    for pid in tree:
        os.kill(pid, signal.SIGKILL if fault == "kill" else signal.SIGSTOP)
    t0 = time.monotonic()
    first = wait_for(lambda: (h := R.read_history(rec.run_dir)) and h[0], 60, "the attempt's decision")
    decided = time.monotonic() - t0
    assert first["decision"] == "requeue", first
    assert first["codes"]["0"] == 75 and first["codes"]["2"] == 75, first
    v = wait_for(lambda: (v := ops.status(rec)).state in ("succeeded", "failed", "stopped") and v, 180, "the end")
    assert v.state == "succeeded", (v.headline, v.details)
    assert v.reformations == 1
    assert total(ckpt) == {"step": steps, "total": undisturbed_total(3, steps)}
    # node 0's log blames node 1 (the verdict's incident names it)
    assert v.incidents and v.incidents[0].startswith("1. rank 1 (host n1): "), v.incidents
    print(f"{fault} rank 1: step decided after {decided:.1f}s")
    # killed: the step ends as soon as the others fail-stop; frozen: srun --wait (8 s here) ends the wedged task
    assert decided < (15 if fault == "kill" else 30)


@pytest.mark.timeout(240)
def test_two_jobs_share_the_same_nodes(slurm, tmp_path):
    """Two 2-node runs at once on n0 and n1 (1 CPU and 500 MB of each node apiece): each job has its own ports."""
    subs = []
    for name in ("share-a", "share-b"):
        s = spec(name, tmp_path, nodes=2, steps=15)
        s = SbatchSpec(**{**s.__dict__, "mem": "500M", "cpus_per_task": 1, "extra_sbatch": ("--nodelist=n0,n1",)})
        subs.append(submit(s, str(tmp_path)))
    both = wait_for(lambda: all(commands_state(slurm, s.record.job_id) == "RUNNING" for s in subs) or None, 60,
                    "both jobs running at once")  # fmt: skip
    assert both
    verdicts = [wait_for(lambda r=s.record: (v := ops.status(r)).state in ("succeeded", "failed") and v, 180, "the end")
                for s in subs]  # fmt: skip
    assert [v.state for v in verdicts] == ["succeeded", "succeeded"], [v.headline for v in verdicts]
    assert all(sorted(r.host for r in v.rows) == ["n0", "n1"] for v in verdicts)
    ports = set()
    for s in subs:
        lines, _ = ops.logs(s.record)
        ports |= {m for ln in lines for m in [ln.partition("master n0:")[2].split(",")[0]] if m}
    assert len(ports) == 2, ports


def commands_state(slurm, job: str) -> str:
    return slurm.run("squeue", "-h", "-t", "all", "-j", job, "-o", "%T").stdout.strip()
