"""The verdict with real processes (`kgen launch --local`, real torch and gloo): the verdict names the failed
process, its exception, message and file:line, and the ranks that failed because of it; every log line is one
whole line of one process after its global rank, with 2 and 8 processes per node; torchrun's shutdown report
after a re-formation or a stop is one line (`--full`: as written)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from sshlab import free_port_pair

pytestmark = [pytest.mark.torch, pytest.mark.slow]

FAILING = Path(__file__).resolve().parent / "failing.py"
STEP = re.compile(r"^\[(\d+)\] rank (\d+)/(\d+) step (\d+) line (\d+) loss [\d.]+$")


def launch(kgen, tmp_path, monkeypatch, name: str, nodes: int, nproc: int, *command: str, timeout: float = 240):
    shutil.copy(FAILING, tmp_path / "failing.py")
    monkeypatch.chdir(tmp_path)
    res = kgen(
        "launch", "--name", name, "--local", str(nodes), "--nproc-per-node", str(nproc),
        "--port", str(free_port_pair()), "--follow", "--", *command, timeout=timeout,
    )  # fmt: skip
    return res


def status(kgen, name: str) -> dict:
    return json.loads(kgen("status", name, "-o", "json").stdout)


def whole_step_lines(lines: list[str], world: int) -> dict[int, int]:
    """Every line of a training process is whole and after its own rank: count them per rank."""
    seen: dict[int, int] = {}
    for line in lines:
        if not re.match(r"^\[\s*\d+\] ", line):
            assert line.startswith("[node "), line  # a node's own line (kgen, torchrun)
            assert not re.search(r"rank \d+/\d+ step", line), line  # no worker's text in it
            continue
        if " step " not in line or "line" not in line:
            continue
        m = STEP.match(re.sub(r"^\[\s+", "[", line))
        assert m, f"not one whole line of one process: {line!r}"
        assert m.group(1) == m.group(2) and int(m.group(3)) == world, line
        seen[int(m.group(1))] = seen.get(int(m.group(1)), 0) + 1
    return seen


@pytest.mark.timeout(300)
def test_an_exception_on_one_rank_is_the_root_cause_with_2_processes_per_node(kgen, tmp_path, monkeypatch):
    res = launch(kgen, tmp_path, monkeypatch, "boom", 2, 2, "failing.py", "--fail-rank", "3", "--steps", "8")
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr
    v = status(kgen, "boom")
    assert v["state"] == "failed"
    rc = v["root_cause"]
    assert rc["ranks"] == [3] and rc["node_ranks"] == [1]
    err = rc["error"]
    assert (err["type"], err["message"]) == ("RuntimeError", "deliberate failure on rank 3 at step 2")
    assert err["where"].endswith("failing.py:27") and err["local_rank"] == 1 and err["source"] == "traceback"
    assert not err["peer"]
    assert set(rc["consequences"]) == {0, 1, 2}  # the others failed because of it (peer errors, SIGTERM)
    text = kgen("status", "boom").stdout
    headline = next(line for line in text.splitlines() if line.startswith("Failed: "))
    assert headline.startswith("Failed: rank 3 (node 1, local rank 1; host localhost")
    assert "RuntimeError: deliberate failure on rank 3 at step 2 (" in headline and "failing.py:27)" in headline
    assert "ranks 0-2 failed because of it" in headline
    followed = kgen("logs", "boom", "-f", "--tail", "1")  # exits with the run's result, as launch --follow
    assert followed.returncode == 1 and followed.stderr.startswith("kgen: Failed: rank 3"), followed.stderr
    assert text.splitlines()[0].split()[0] == "RANKS" and text.splitlines()[2].split()[0] == "2-3"
    # the logs: whole lines, each after its global rank, up to the failure
    lines = kgen("logs", "boom").stdout.splitlines()
    counts = whole_step_lines(lines, 4)
    assert set(counts) == {0, 1, 2, 3} and counts[3] == 3
    assert "[3] RuntimeError: deliberate failure on rank 3 at step 2" in lines
    assert any(line.startswith("[node 1] kgen-entrypoint: worker failure: {") for line in lines)
    only3 = kgen("logs", "boom", "--rank", "3").stdout.splitlines()
    assert {line.split("]")[0] for line in only3} == {"[3"}  # node 1's own lines come with ranks 2 and 3
    assert "[3] RuntimeError: deliberate failure on rank 3 at step 2" in only3
    # --watch of a run that has ended prints it once (the table once came twice), with its exit code
    watched = kgen("status", "boom", "--watch")
    assert (
        watched.returncode == 1 and watched.stdout.count("RANKS  HOST") == 1 and watched.stdout.count("Failed: ") == 1
    )
    assert kgen("stop", "boom", "--rm").returncode == 0


@pytest.mark.timeout(400)
def test_eight_processes_per_node_whole_lines_and_the_error_file(kgen, tmp_path, monkeypatch):
    """8 workers on one node, each printing 6 lines per step as two writes each: no line of kgen logs is
    mangled; rank 5 raises under torch elastic's @record, so the root cause comes from its error file."""
    res = launch(
        kgen, tmp_path, monkeypatch, "eight", 1, 8,
        "failing.py", "--record", "--fail-rank", "5", "--fail-step", "3", "--steps", "6", "--lines", "6",
        "--sleep", "0",
        timeout=360,
    )  # fmt: skip
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr
    followed = [line for line in res.stdout.splitlines() if line.startswith("[")]  # after launch's own lines
    counts = whole_step_lines(followed, 8)
    assert set(counts) == set(range(8)) and counts[5] == 4 * 6
    logged = whole_step_lines(kgen("logs", "eight").stdout.splitlines(), 8)
    assert logged == counts
    err = status(kgen, "eight")["root_cause"]["error"]
    assert err["rank"] == 5 and err["source"] == "error file" and err["type"] == "RuntimeError"
    assert err["where"].endswith("failing.py:27") and err["message"] == "deliberate failure on rank 5 at step 3"
    assert kgen("stop", "eight", "--rm").returncode == 0


@pytest.mark.timeout(300)
def test_the_same_error_everywhere_is_one_cause_on_every_rank(kgen, tmp_path, monkeypatch):
    """`-m` of a module whose own import fails: every rank fails the same way; node 0 (told to stop by node
    1's report, exit 5) is shown failing the same way, not as a follower of node 1."""
    (tmp_path / "needsdep.py").write_text("import torch\nimport no_such_dependency_kgen\n")
    res = launch(kgen, tmp_path, monkeypatch, "dep", 2, 1, "-m", "needsdep")
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr
    rc = status(kgen, "dep")["root_cause"]
    assert rc["ranks"] == [0, 1]
    assert rc["error"]["type"] == "ModuleNotFoundError"
    assert rc["error"]["message"] == "No module named 'no_such_dependency_kgen'"
    assert rc["error"]["where"].endswith("needsdep.py:2")
    headline = kgen("status", "dep").stdout
    assert "ranks 0, 1 (" in headline and "together: " in headline and "fail-stop" not in headline
    assert kgen("stop", "dep", "--rm").returncode == 0


@pytest.mark.timeout(300)
def test_a_process_killed_by_a_signal_is_named_with_its_last_line(kgen, tmp_path, monkeypatch):
    """No traceback (a native abort): the root cause is the signal, with what the process said last."""
    res = launch(kgen, tmp_path, monkeypatch, "abrt", 2, 1, "failing.py", "--fail-rank", "1", "--abort")
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr
    rc = status(kgen, "abrt")["root_cause"]
    assert rc["ranks"] == [1], rc
    assert rc["error"]["message"] == "killed by SIGABRT (its last line: giving up on rank 1: shard index missing)"
    assert "killed by SIGABRT (its last line: giving up on rank 1" in kgen("status", "abrt").stdout
    assert kgen("stop", "abrt", "--rm").returncode == 0


@pytest.mark.timeout(300)
def test_reformation_and_stop_fold_torchrun_shutdown_reports(kgen, tmp_path, monkeypatch):
    """A lost node (SIGKILL): node 0 stops torch (SIGTERM) and re-forms; then `kgen stop`: torchrun's report of
    each SIGTERM is one kgen line in `kgen logs` and its status shows the run stopped; --full shows them."""
    shutil.copy(FAILING, tmp_path / "failing.py")
    monkeypatch.chdir(tmp_path)
    started = kgen(
        "launch", "--name", "fold", "--local", "2", "--nproc-per-node", "2", "--port", str(free_port_pair()),
        "--inject", "kill:1@12", "--", "failing.py", "--steps", "2000", "--sleep", "0.1",
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    import time

    deadline = time.monotonic() + 200
    while time.monotonic() < deadline:
        v = status(kgen, "fold")
        if v["reformations"] >= 1 and v["state"] == "running":
            break
        time.sleep(2)
    assert v["reformations"] == 1 and v["state"] == "running", v["headline"]
    # headline and rows agree: every row trains in the generation the headline names
    assert f"generation {max(r['generation'] for r in v['nodes'])} after 1 re-formation" in v["headline"]
    assert all(r["ready"] for r in v["nodes"])
    stopped = kgen("stop", "fold")
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    lines = kgen("logs", "fold").stdout.splitlines()
    assert not any("SignalException" in line or line.endswith("Traceback (most recent call last):") for line in lines)
    folds = [line for line in lines if "kgen: torchrun stopped by" in line]
    assert any(line.startswith("[node 0] kgen: torchrun stopped by SIGTERM") for line in folds)  # the re-formation
    full = kgen("logs", "fold", "--full").stdout
    assert full.count("SignalException: Process") >= len(folds)
    tail = kgen("logs", "fold", "--tail", "3", "--rank", "0,1").stdout.splitlines()  # node 0: its own lines too
    assert tail[-1] == "[node 0] kgen-entrypoint: stopped: stopped by user on " + tail[-1].rsplit(" ", 1)[-1]
    assert not any(line.startswith("[node 0]   File ") for line in tail)
    assert status(kgen, "fold")["state"] == "stopped"
    assert kgen("stop", "fold", "--rm").returncode == 0
