"""`kgen launch --local N`: N nodes on this machine (loopback, each its own process group and session),
the same verbs, and fault injection to rehearse what a lost node does to a run (real torch, gloo)."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from conftest import TRAINLOOP
from sshlab import free_port_pair

pytestmark = [pytest.mark.torch, pytest.mark.slow]


@pytest.mark.timeout(240)
def test_local_run_with_a_killed_node_reforms_and_succeeds(kgen, tmp_path, monkeypatch):
    shutil.copy(TRAINLOOP, tmp_path / "trainloop.py")
    monkeypatch.chdir(tmp_path)  # --workdir defaults to the current directory
    port = free_port_pair()
    res = kgen(
        "launch", "--name", "drill", "--local", "3", "--port", str(port), "--inject", "kill:1@6", "--follow",
        "--", "trainloop.py", "--steps", "25", "--sleep", "0.3", timeout=200,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr
    out = res.stdout
    assert "launched run drill on this machine: 3 node(s)" in out
    assert "inject kill: SIGKILL to node 1's" in out  # the supervisor says what it did, in node 1's log
    assert "replacing it in 1s" in out and "all 3 nodes connected" in out
    assert "Succeeded: 3/3 ranks completed, 1 re-formation" in res.stderr
    v = json.loads(kgen("status", "drill", "-o", "json").stdout)
    assert v["state"] == "succeeded" and v["reformations"] == 1
    assert [r["restarts"] for r in v["nodes"]] == [0, 1, 0]
    assert v["incidents"] and "rank 1" in v["incidents"][0] and "exit 137" in v["incidents"][0]
    # each node is its own session and process group, and its run directory is private
    pids = []
    for rank in range(3):
        d = os.path.join(os.environ["XDG_STATE_HOME"], "kgen", "runs", "drill", f"node{rank}")
        with open(os.path.join(d, "pid")) as fh:
            rec = json.load(fh)
        assert rec["pid"] == rec["sid"] or rec["pgid"] == rec["sid"]
        pids.append(rec["sid"])
        assert oct(os.stat(d).st_mode & 0o777) == "0o700"
    assert len(set(pids)) == 3
    listed = kgen("list").stdout.splitlines()
    assert listed[1].split()[:5] == ["-", "drill", "local", "3x1", "succeeded"]
    assert kgen("stop", "drill", "--rm").returncode == 0
    assert not os.path.exists(os.path.join(os.environ["XDG_STATE_HOME"], "kgen", "runs", "drill"))
