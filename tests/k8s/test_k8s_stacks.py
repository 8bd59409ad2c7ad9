"""`kgen debug stacks` on a cluster run: every pod's entrypoint answers `--stacks` through the real API server's exec
(a WebSocket the API server passes on to the kubelet stand-in, which runs the command in the pod's namespaces), and
the rank stuck elsewhere comes first."""

from __future__ import annotations

import json

import pytest
from k8sutil import kgen, wait
from reformk8s import submit

pytestmark = pytest.mark.torch

STUCK = """\
import queue
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
print("KGEN_STUCK_READY rank", dist.get_rank(), flush=True)


def next_batch(q):
    return q.get()  # rank 1: a data loader that never delivers


if dist.get_rank() == 1:
    next_batch(queue.Queue())
dist.all_reduce(torch.ones(1))  # the others: waiting for rank 1 in a collective
"""


@pytest.mark.timeout(300)
def test_debug_stacks_names_the_rank_stuck_in_a_data_loader_through_the_api_exec(k8s, ns, tmp_path):
    script = tmp_path / "stuck.py"
    script.write_text(STUCK)
    submit(ns, "stk", 3, [str(script)])
    wait(lambda: k8s.kubelet.logs(ns).count("KGEN_STUCK_READY") >= 3, 180, "every rank initialised")
    res = kgen("debug", "stacks", "stk", "-n", ns, "-o", "json", timeout=120)
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    ranks = {r["rank"]: r for r in report["ranks"]}
    assert sorted(ranks) == [0, 1, 2], report["notes"]
    assert ranks[1]["what"] == "queue.get" and "next_batch" in json.dumps(ranks[1]["frames"]), ranks[1]
    assert all("all_reduce" in ranks[r]["what"] for r in (0, 2)), report
    text = kgen("debug", "stacks", "stk", "-n", ns, timeout=120)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    print("\n" + text.stdout)
    assert lines[0] == "run stk: stacks of 3/3 rank(s), 2 distinct", lines
    assert lines[1] == "rank 1: queue.get at stuck.py:10 (the one that differs)", lines
    assert "ranks 0, 2: distributed_c10d.all_reduce at stuck.py:15" in lines, lines
    stop = kgen("stop", "stk", "-n", ns, "--wait", "--timeout", "120", timeout=200)
    assert stop.returncode == 0, stop.stdout + stop.stderr


def test_debug_stacks_of_a_cluster_run_that_does_not_exist_is_one_line(k8s, ns):
    res = kgen("debug", "stacks", "nosuch", "-n", ns, "--on", "cluster", timeout=60)
    assert res.returncode == 2 and res.stdout == "", (res.stdout, res.stderr)
    assert len(res.stderr.strip().splitlines()) == 1 and "nosuch" in res.stderr, res.stderr
