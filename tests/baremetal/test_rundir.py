"""The entrypoint's run-directory verbs on one node, with real processes (no torch): --state, --log,
--stop-node (group stop asked, SIGTERM, SIGCONT for a frozen tree, SIGKILL after the grace, verified by
the run marker), --remove-node. The supervisor and launch are covered end to end with torch."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from kgen.resources import entrypoint_path

EP = str(entrypoint_path())


def verb(run_dir, *args, timeout=60):
    res = subprocess.run(
        [sys.executable, EP, "--run-dir", str(run_dir), *args], capture_output=True, text=True, timeout=timeout
    )
    assert res.returncode == 0, res.stderr
    return res.stdout


def spawn(run_dir, code):
    env = dict(os.environ, KGEN_RUN_DIR=str(run_dir))
    return subprocess.Popen([sys.executable, "-c", code], env=env, start_new_session=True)


def test_state_of_a_missing_run_directory(tmp_path):
    assert json.loads(verb(tmp_path / "nope", "--state")) == {
        "dir": str(tmp_path / "nope"),
        "host": os.uname().nodename,
        "missing": True,
    }


def test_stop_node_ends_every_marked_process_even_stubborn_and_frozen_ones(tmp_path):
    run_dir = tmp_path / "node0"
    run_dir.mkdir(mode=0o700)
    procs = [
        spawn(run_dir, "import time; time.sleep(60)"),
        spawn(run_dir, "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"),
        spawn(run_dir, "import time; time.sleep(60)"),
    ]
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        time.sleep(0.5)  # the interpreters are up and ignore SIGTERM where asked
        os.kill(procs[2].pid, signal.SIGSTOP)  # a frozen process
        t0 = time.monotonic()
        report = json.loads(verb(run_dir, "--stop-node", "--grace", "2"))
        took = time.monotonic() - t0
        assert report["found"] == 3 and report["left"] == []
        assert report["steps"] == ["SIGTERM all", "SIGKILL"] and took < 2 + 3
        assert [p.wait(timeout=5) for p in procs] == [-signal.SIGTERM, -signal.SIGKILL, -signal.SIGTERM]
        assert other.poll() is None  # a process without the run's marker is never touched
        exit_rec = json.loads((run_dir / "exit").read_text())
        assert exit_rec["code"] == 137 and exit_rec["reason"] == "killed by kgen stop"
        assert oct((run_dir / "exit").stat().st_mode & 0o777) == "0o600"
        again = json.loads(verb(run_dir, "--stop-node"))
        assert again["already"] is True and again["left"] == []  # idempotent
    finally:
        for p in [*procs, other]:
            p.kill()
            p.wait()


def test_log_tail_and_follow_end_with_the_node(tmp_path):
    run_dir = tmp_path / "node1"
    run_dir.mkdir()
    lines = [f"2026-01-01T12:00:{i:02d}.000000Z line {i}" for i in range(50)]
    (run_dir / "log").write_text("\n".join(lines) + "\n")
    assert verb(run_dir, "--log", "--tail", "3").splitlines() == lines[-3:]
    assert verb(run_dir, "--log").splitlines() == lines
    (run_dir / "exit").write_text('{"code": 0}')
    assert verb(run_dir, "--log", "--follow", "--tail", "1", timeout=10).splitlines() == lines[-1:]


def test_remove_node_refuses_while_the_run_lives(tmp_path):
    root = tmp_path / "runs" / "demo"
    run_dir = root / "node0"
    run_dir.mkdir(parents=True)
    (run_dir / "node.json").write_text("{}")
    (root / "launch.json").write_text("{}")
    p = spawn(run_dir, "import time; time.sleep(60)")
    try:
        time.sleep(0.3)
        assert "still alive" in json.loads(verb(run_dir, "--remove-node"))["error"]
    finally:
        p.kill()
        p.wait()
    assert json.loads(verb(run_dir, "--remove-node"))["removed"] is True
    assert not root.exists()  # the run's last node on this host: its folder goes too
    outside = tmp_path / "precious"
    outside.mkdir()
    assert "not a kgen node run directory" in json.loads(verb(outside, "--remove-node"))["error"]
    assert outside.exists()


def test_follow_merge_keeps_a_streams_end_after_its_last_lines():
    """`kgen logs -f`: lines wait REORDER_S to merge in time order; a stream that ended (its host
    crashed) says so after the lines it had sent, not before them."""
    from datetime import datetime, timedelta, timezone

    from kgen.baremetal.engine import REORDER_S, Merger

    t0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)

    def at(dt: float) -> str:
        return (t0 + timedelta(seconds=dt)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    m = Merger()
    m.line(1, at(0.2), "rank 1 step 9")
    m.line(2, at(0.1), "rank 2 step 9")
    m.line(2, at(0.3), "rank 2 step 10")
    m.ended(2, "h2: the ssh connection ended without a message", t0 + timedelta(seconds=0.35))
    assert m.ripe(t0 + timedelta(seconds=0.35)) == []  # held: newer than REORDER_S
    out = m.ripe(t0 + timedelta(seconds=0.4 + REORDER_S))
    assert [r for r, _ in out] == [2, 1, 2, 2]
    assert out[-1][1] == "(kgen: log stream ended: h2: the ssh connection ended without a message)"
    # --since: older lines are dropped; flush releases everything at the end
    m = Merger(cut=at(1))
    m.line(0, at(0.5), "old")
    m.line(0, at(2), "new")
    assert [t for _, t in m.ripe(t0, flush=True)] == ["new"]
