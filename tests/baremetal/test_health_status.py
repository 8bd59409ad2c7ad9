"""The health gate through `kgen launch --local` and `kgen status` (real torch, gloo): with --health-gate fail
and GPUs asked for that no node has (NVIDIA_VISIBLE_DEVICES names one; this machine has none), every node
exits 78 before its training script starts, and `kgen status` puts the gate's verdict in its headline with
one line per node. The gate's checks themselves: tests/entrypoint/test_health_gate_netns.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from sshlab import free_port_pair

pytestmark = [pytest.mark.torch, pytest.mark.slow]

TRAIN = "import pathlib\npathlib.Path('stepped').write_text('first step')\n"


@pytest.mark.timeout(150)
def test_a_failed_gate_stops_the_run_and_status_names_the_nodes(kgen, tmp_path, monkeypatch):
    (tmp_path / "train.py").write_text(TRAIN)
    monkeypatch.chdir(tmp_path)
    port = free_port_pair()
    res = kgen(
        "launch", "--name", "gate", "--local", "2", "--port", str(port), "--health-gate", "fail",
        "--env", "NVIDIA_VISIBLE_DEVICES=0", "--env", "PYTHONWARNINGS=ignore", "--follow", "--", "train.py",
        timeout=120,
    )  # fmt: skip
    try:
        assert res.returncode == 1, res.stdout[-4000:] + res.stderr
        assert not Path(tmp_path, "stepped").exists()  # no training script started
        v = json.loads(kgen("status", "gate", "-o", "json").stdout)
        assert v["state"] == "failed", v
        assert v["headline"] == "Failed: node 0: 0 GPU(s) visible, 1 expected (health gate)", v
        assert "health: node 1: 0 GPU(s) visible, 1 expected" in v["details"], v
        runs = Path(os.environ["XDG_STATE_HOME"], "kgen", "runs", "gate")
        assert [json.loads((runs / f"node{r}" / "exit").read_text())["code"] for r in range(2)] == [78, 78]
    finally:
        kgen("stop", "gate", "--rm", timeout=60)
