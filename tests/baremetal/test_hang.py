"""A run that is alive but stuck, and where every rank is (real torch, gloo, `kgen launch --local`).

- The hang watchdog: 2 nodes x 2 processes; rank 3 waits for a batch that never comes (queue.get) while
  ranks 0-2 wait for it in the next all_reduce. Within hang.timeout + 5 s of the last progress, node 0's
  report names rank 3 and its frame, every node exits 77, `kgen status` names the rank and the frame, and
  `kgen logs` holds the report.
- `kgen debug stacks` on a healthy run: every rank is in the training loop, text and -o json.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from sshlab import free_port_pair

from kgen.runs.records import parse_time
from kgen.runs.stamps import split_ts

pytestmark = [pytest.mark.torch, pytest.mark.slow]

HANGLOOP = Path(__file__).resolve().parents[1] / "entrypoint" / "hangloop.py"
TIMEOUT = 10  # hang.timeout: above the workers' start-up (import torch) on 2 busy cores
SOURCE = HANGLOOP.read_text().splitlines()
QUEUE_LINE = next(i + 1 for i, line in enumerate(SOURCE) if "return batches.get()" in line)
ALL_REDUCE_LINE = next(i + 1 for i, line in enumerate(SOURCE) if "dist.all_reduce(x)" in line)


def node_log(name: str, rank: int) -> list[tuple[str, str]]:
    path = Path(os.environ["XDG_STATE_HOME"], "kgen", "runs", name, f"node{rank}", "log")
    return [split_ts(line) for line in path.read_text(errors="replace").splitlines()]


@pytest.mark.timeout(180)
def test_a_rank_deadlocked_on_a_queue_is_named_with_its_frame_within_the_timeout(kgen, tmp_path, monkeypatch):
    shutil.copy(HANGLOOP, tmp_path / "hangloop.py")
    monkeypatch.chdir(tmp_path)
    port = free_port_pair()
    res = kgen(
        "launch", "--name", "stuck", "--local", "2", "--nproc-per-node", "2", "--port", str(port),
        "--hang-timeout", str(TIMEOUT), "--env", "PYTHONWARNINGS=ignore", "--follow",
        "--", "hangloop.py", "--stuck-rank", "3", "--stuck-at", "5", timeout=150,
    )  # fmt: skip
    try:
        assert res.returncode == 1, res.stdout[-4000:] + res.stderr
        logs = [node_log("stuck", r) for r in range(2)]
        # progress: the last line any rank wrote; the report: node 0's HANG line
        last = max(parse_time(ts) for log in logs for ts, text in log if "KGEN_EVT" in text)
        hang = [(ts, text) for ts, text in logs[0] if "] HANG: " in text]
        assert hang, "\n".join(t for _, t in logs[0][-60:])
        took = (parse_time(hang[0][0]) - last).total_seconds()
        print(f"\nhang report {took:.1f}s after the last progress (hang.timeout {TIMEOUT}s)")
        assert took <= TIMEOUT + 5
        report = "\n".join(text for _, text in logs[0] if "hang report: " in text)
        assert f"rank 3: queue.get at hangloop.py:{QUEUE_LINE} (the one that differs)" in report, report
        assert f"ranks 0-2: distributed_c10d.all_reduce at hangloop.py:{ALL_REDUCE_LINE}" in report, report
        # every rank's last kgen_progress(step), node 1's through its `stacks` lines
        assert "last steps reported: rank 0: 4, rank 1: 4, rank 2: 4, rank 3: 4" in report, report
        for log in logs:  # every node ended as a hang
            assert log[-1][1].startswith("kgen-entrypoint: stopped: "), log[-3:]
        ends = [json.loads(Path(os.environ["XDG_STATE_HOME"], "kgen", "runs", "stuck", f"node{r}", "exit").read_text())
                for r in range(2)]  # fmt: skip
        assert [e["code"] for e in ends] == [77, 77], ends
        v = json.loads(kgen("status", "stuck", "-o", "json").stdout)
        assert v["state"] == "failed"
        assert f"rank 3: queue.get at hangloop.py:{QUEUE_LINE} (the one that differs)" in v["headline"], v
        assert any(f"distributed_c10d.all_reduce at hangloop.py:{ALL_REDUCE_LINE}" in d for d in v["details"]), v
        out = kgen("logs", "stuck").stdout
        assert "HANG: no rank made progress" in out and "stack of rank 3" in out
        status = kgen("status", "stuck")  # the transcript in docs/entrypoint.md comes from these prints
        print("\n$ kgen status stuck\n" + status.stdout + status.stderr)
        print("$ kgen logs stuck | grep -A8 HANG\n" + "\n".join(ln for ln in out.splitlines() if "hang" in ln.lower()))
    finally:
        kgen("stop", "stuck", "--rm", timeout=60)


@pytest.mark.timeout(150)
def test_kgen_debug_stacks_shows_every_rank_of_a_healthy_run_in_the_training_loop(kgen, tmp_path, monkeypatch):
    shutil.copy(HANGLOOP, tmp_path / "hangloop.py")
    monkeypatch.chdir(tmp_path)
    port = free_port_pair()
    res = kgen(
        "launch", "--name", "healthy", "--local", "2", "--nproc-per-node", "2", "--port", str(port),
        "--hang-timeout", "8", "--", "hangloop.py", "--sleep", "0.2", "--quiet", timeout=60,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    try:
        import time

        deadline = time.monotonic() + 90
        while True:  # training: every rank has reported a step (kgen_progress)
            steps = [Path(os.environ["XDG_STATE_HOME"], "kgen", "runs", "healthy", f"node{n}", "hang", "progress")
                     for n in range(2)]  # fmt: skip
            if all(p.is_dir() and len(os.listdir(p)) == 2 for p in steps):
                training = time.monotonic()
                break
            assert time.monotonic() < deadline, kgen("logs", "healthy").stdout[-3000:]
            time.sleep(0.5)
        got = kgen("debug", "stacks", "healthy", "-o", "json")
        assert got.returncode == 0, got.stderr
        data = json.loads(got.stdout)
        assert sorted(r["rank"] for r in data["ranks"]) == [0, 1, 2, 3], data
        for r in data["ranks"]:  # in the training loop: main() of the script is on every stack
            assert any(f[0].endswith("hangloop.py") and f[2] == "main" for f in r["frames"]), r
            assert r["where"].rsplit("/", 1)[-1].startswith("hangloop.py:"), r
        assert not data["notes"], data["notes"]
        text = kgen("debug", "stacks", "healthy")
        assert text.returncode == 0 and text.stdout.startswith("run healthy: stacks of 4/4 rank(s)"), text.stdout
        print("\n" + text.stdout)
        # no line per step (--quiet): kgen_progress(step) alone keeps the watchdog (8 s) quiet, on both nodes
        time.sleep(max(0.0, training + 10 - time.monotonic()))
        v = json.loads(kgen("status", "healthy", "-o", "json").stdout)
        assert v["state"] == "running" and "hang" not in v["headline"], v
        assert "HANG" not in kgen("logs", "healthy").stdout
    finally:
        kgen("stop", "healthy", "--rm", timeout=60)


@pytest.mark.timeout(150)
def test_one_node_the_rank_that_is_not_in_the_collective_is_the_one_that_differs(kgen, tmp_path, monkeypatch):
    shutil.copy(HANGLOOP, tmp_path / "hangloop.py")
    monkeypatch.chdir(tmp_path)
    port = free_port_pair()
    res = kgen(
        "launch", "--name", "alone", "--local", "1", "--nproc-per-node", "2", "--port", str(port),
        "--hang-timeout", "8", "--follow", "--", "hangloop.py", "--stuck-rank", "1", timeout=120,
    )  # fmt: skip
    try:
        assert res.returncode == 1, res.stdout[-4000:] + res.stderr
        v = json.loads(kgen("status", "alone", "-o", "json").stdout)
        # 1 against 1: rank 0 waits inside torch.distributed for rank 1, so rank 1 is the one
        assert f"rank 1: queue.get at hangloop.py:{QUEUE_LINE} (the one that differs)" in v["headline"], v
        assert f"rank 0: distributed_c10d.all_reduce at hangloop.py:{ALL_REDUCE_LINE}" in v["details"], v
        end = json.loads(Path(os.environ["XDG_STATE_HOME"], "kgen", "runs", "alone", "node0", "exit").read_text())
        assert end["code"] == 77, end
    finally:
        kgen("stop", "alone", "--rm", timeout=60)
