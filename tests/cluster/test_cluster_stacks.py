"""`kgen debug stacks` on a cluster run, the parts decided without a cluster: the command each pod is asked, which
pods can answer, and a fake cluster's answers grouped (tests/k8s/test_k8s_stacks.py runs it on the real API server)."""

from __future__ import annotations

import json

from kgen.cluster.client import Exec
from kgen.cluster.errors import ClusterError
from kgen.cluster.stacks import node_stacks, stacks, stacks_command


def pod(name: str, index: int, phase: str = "Running", running: bool = True, command=None) -> dict:
    return {
        "metadata": {"name": name, "labels": {"batch.kubernetes.io/job-completion-index": str(index)}},
        "spec": {"containers": [{"name": "trainer", "command": command or ["python3", "/opt/kgen/kgen_entrypoint.py"],
                                 "args": ["--", "train.py"], "env": [{"name": "NPROC_PER_NODE", "value": "2"}]}]},
        "status": {"phase": phase, "containerStatuses": [{"name": "trainer", "state": {"running": {}} if running
                                                          else {"waiting": {}}}]},
    }  # fmt: skip


def answer(*ranks: tuple[int, str]) -> str:
    return json.dumps({"host": "h", "note": "", "ranks": [
        {"rank": r, "pid": 10 + r, "what": what, "where": "train.py:1", "frames": [["train.py", 1, what]]}
        for r, what in ranks]})  # fmt: skip


class FakeCluster:
    namespace = "ns"

    def __init__(self, pods, answers) -> None:
        self._pods, self.answers, self.asked = pods, answers, []

    def workload(self, name):
        return {"spec": {"completions": len(self._pods) + 1}}  # one rank has no pod yet

    def pods(self, name):
        return self._pods

    def exec(self, pod, command, container="trainer", timeout=30.0):
        self.asked.append((pod, command, container))
        a = self.answers[pod]
        if isinstance(a, Exception):
            raise a
        return a


def test_the_pod_is_asked_with_its_own_interpreter_and_script():
    assert stacks_command(pod("p", 0)) == ["python3", "/opt/kgen/kgen_entrypoint.py", "--stacks"]
    custom = pod("p", 0, command=["/venv/bin/python", "-u", "/opt/kgen/kgen_entrypoint.py"])
    assert stacks_command(custom) == ["/venv/bin/python", "-u", "/opt/kgen/kgen_entrypoint.py", "--stacks"]
    assert stacks_command(pod("p", 0, command=["torchrun", "train.py"])) is None


def test_each_rank_is_answered_or_says_why_not():
    pods = [pod("r-0", 0), pod("r-1", 1), pod("r-2", 2, phase="Pending"), pod("r-3", 3, running=False)]
    c = FakeCluster(pods, {"r-0": Exec(0, answer((0, "all_reduce"), (1, "all_reduce")), ""),
                           "r-1": ClusterError("exec in pod r-1: forbidden: no")})  # fmt: skip
    report = stacks(c, "r", 20.0)
    assert [p for p, _, _ in c.asked] == ["r-0", "r-1"]  # only running pods are asked
    assert report.world == 10 and [r["rank"] for r in report.ranks] == [0, 1]
    assert report.to_dict()["notes"] == [
        "node 1 (r-1): no answer: exec in pod r-1: forbidden: no",
        "node 2 (r-2): its pod is Pending",
        "node 3 (r-3): its trainer container is not running",
        "node 4 (-): no pod (not created yet, or deleted)",
    ]


def test_an_exec_without_an_answer_is_named():
    p = pod("r-0", 0)
    late = node_stacks(FakeCluster([p], {"r-0": Exec(None, "", "")}), 0, p, 5.0)
    assert late.note == "no answer: no answer within 5 s"
    old = node_stacks(
        FakeCluster([p], {"r-0": Exec(2, "", "kgen-entrypoint: error: unknown verb --stacks\n")}), 0, p, 5
    )
    assert "predates --stacks" in old.note
