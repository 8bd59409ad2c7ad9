"""What `kgen status` says around the runtime's faults (pure: records in, verdict out): never Failed when every
rank exited 0, never Running before the group formed, a finished Slurm run judged from its exit records when
scontrol cannot answer, the same "failed because of it" list on every run of one failure, dropped log lines."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "slurm"))

from test_adapter import HOSTS, ended, ev, formed, running, stopped, ts, verdict

from kgen.baremetal.adapter import NodeState, to_records
from kgen.baremetal.record import NodeRecord, RunRecord
from kgen.runs.records import Row, RunRecords
from kgen.runs.verdict import judge
from kgen.slurm import commands
from kgen.slurm import engine as slurm_ops
from kgen.slurm.adapter import NodeFiles
from kgen.slurm.adapter import to_records as slurm_records
from kgen.slurm.commands import JobInfo
from kgen.slurm.record import RunRecord as SlurmRun


def test_every_rank_exited_0_is_never_failed():
    rows = [Row(r, "", "h", "Succeeded", False, 0, 0, "succeeded", 0, host="h") for r in range(3)]
    rec = RunRecords(name="r", kind="bare-metal", expected=3, rows=rows, failures=[], logs={}, where_by_rank={})
    rec.failed = True  # an adapter that thought otherwise (a lost supervisor, a controller's word)
    v = judge(rec)
    assert v.state == "succeeded" and v.headline.startswith("Succeeded: 3/3"), v.headline


def test_a_node_whose_supervisor_died_after_it_succeeded_is_succeeded():
    gone = ended(2, 0, "succeeded", 20, formed(2))
    gone.update(exit=None)  # the supervisor was SIGKILLed before it wrote the exit record
    v = verdict(ended(0, 0, "succeeded", 20, formed(0)), ended(1, 0, "succeeded", 20, formed(1)), gone)
    assert v.state == "succeeded", v.headline
    assert v.rows[2].state == "Succeeded"


DNS = "DNS: 'n0' does not resolve"


def test_slurm_nodes_up_before_the_group_formed_are_starting_not_running():
    job = JobInfo("12", "RUNNING", nodelist="n[0-2]")
    t = "2026-11-26T07:37:18.100000Z"
    files = [
        NodeFiles(
            r,
            pid={"host": f"n{r}", "attempt": 0, "job": "12", "pid": 100 + r},
            events=[f"{t} [kgen node {r} 07:37:01 +0.1s] still waiting for node 0 (10s of 600s): {DNS}"],
        )
        for r in range(3)
    ]
    v = judge(slurm_records(SlurmRun(name="demo", job_id="12", run_dir="/x", nodes=3), job, files))
    assert v.state == "starting" and not v.headline.startswith("Running"), v.headline
    assert "3 not training yet" in v.headline and "does not resolve" in v.headline


def test_a_finished_slurm_run_reads_its_exit_records_when_scontrol_cannot_answer(monkeypatch, tmp_path):
    rec = SlurmRun(name="demo", job_id="12", run_dir=str(tmp_path), nodes=2)
    files = [
        NodeFiles(r, exit={"code": 0, "attempt": 0, "job": "12", "reason": "succeeded", "time": ts(9)})
        for r in range(2)
    ]

    def down(job, env=None):
        raise commands.SlurmError("scontrol show job 12: slurm_load_jobs error: Unable to contact slurm controller")

    monkeypatch.setattr(commands, "job_info", down)
    monkeypatch.setattr(slurm_ops, "node_files", lambda rec: files)
    v = slurm_ops.status(rec)
    assert v.state == "succeeded", v.headline
    assert any("Slurm did not answer" in d for d in v.details), v.details
    # a run still without every exit record cannot be judged without Slurm: the error stays
    monkeypatch.setattr(slurm_ops, "node_files", lambda rec: files[:1] + [NodeFiles(1)])
    with pytest.raises(commands.SlurmError):
        slurm_ops.status(rec)


def _record(t: int, rank: int, error: str, message: str, peer: bool, others: list) -> str:
    import json

    rec = {"rank": rank, "local_rank": rank % 2, "exit": 1, "error": error, "message": message, "where": "t.py:9",
           "source": "traceback", "time": ts(t), "peer": peer, "others": others}  # fmt: skip
    return f"{ts(t)} kgen-entrypoint: worker failure: {json.dumps(rec)}"


def test_the_failed_because_of_it_list_is_the_same_on_every_run_of_one_failure():
    """Rank 3 (node 1) raises. Run A: node 0's workers noticed (a peer error record) before the fail-stop;
    run B: node 0 was stopped first (no record). Both name ranks 0-2."""
    rec = RunRecord(
        name="d", mode="ssh", nproc=2, nodes=[NodeRecord(i, h, f"/s/node{i}") for i, h in enumerate(HOSTS[:2])]
    )
    lead = _record(10, 3, "ValueError", "no labels", False, [{"rank": 2, "exit": -15, "peer": True}])
    node1 = ended(1, 1, "torch failed with code 1", 11, [*formed(1), lead])
    seen = _record(10, 0, "RuntimeError", "Connection closed by peer", True, [{"rank": 1, "exit": -15, "peer": True}])
    run_a = ended(0, 5, "the run failed", 11, [*formed(0), seen])
    run_b = ended(0, 5, "the run failed", 11, formed(0))
    heads = []
    for node0 in (run_a, run_b):
        v = judge(to_records(rec, [NodeState(rec.nodes[0], node0), NodeState(rec.nodes[1], node1)]))
        assert v.root_cause.ranks == [3] and v.root_cause.consequences == [0, 1, 2], v.headline
        heads.append(v.headline)
    assert all("ranks 0-2 failed because of it" in h for h in heads), heads


def test_dropped_log_lines_are_said_in_status():
    done = ended(1, 0, "succeeded", 20, formed(1))
    done["exit"].update(dropped=12, drop_error="ENOSPC: No space left on device")
    live = running(2, [*formed(2), f"{ts(9)} [kgen supervisor 2] 3 log line(s) dropped: could not be written "
                                   "(EIO: Input/output error); the training went on"])  # fmt: skip
    v = verdict(running(0, formed(0)), done, live)
    said = "\n".join(v.details)
    assert "rank 1 (b): 12 log line(s) dropped, the disk refused them (ENOSPC" in said, said
    assert "rank 2 (c): 3 log line(s) dropped, the disk refused them (EIO" in said, said
    assert stopped and ev  # the helpers this file shares with test_adapter.py


def test_a_node_that_gave_up_waiting_for_node0_follows_it():
    """Node 0's supervisor was told to end (SIGTERM, 143, nothing replaces it); the others, who had trained
    with it, waited KGEN_REPLACEMENT_TIMEOUT for it to come back and exited 3: node 0 is the cause."""
    back = "node 0 not back (after generation 0) within KGEN_REPLACEMENT_TIMEOUT=8s after 12 attempts"
    n0 = ended(0, 143, "signal SIGTERM", 10, formed(0))
    n1 = ended(1, 3, back, 19, [*formed(1), f"{ts(19)} kgen-entrypoint: error: {back}"])
    n2 = ended(2, 3, back, 19, [*formed(2), f"{ts(19)} kgen-entrypoint: error: {back}"])
    v = verdict(n0, n1, n2)
    assert v.state == "failed" and v.root_cause.node_ranks == [0], v.headline
    assert v.headline.startswith("Failed: rank 0"), v.headline
