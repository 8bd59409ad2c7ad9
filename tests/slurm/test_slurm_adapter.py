"""The Slurm adapter (pure): the job's state and the nodes' files -> the one verdict (kgen.runs.verdict.judge)."""

from __future__ import annotations

from kgen.runs.verdict import judge
from kgen.slurm.adapter import NodeFiles, to_records
from kgen.slurm.commands import JobInfo, parse_show_job
from kgen.slurm.record import RunRecord

REC = RunRecord(name="demo", job_id="12", run_dir="/shared/demo", nodes=3)
T = "2026-11-26T07:37:18.100000Z"


def pid(rank: int, attempt: int = 0) -> dict:
    return {"host": f"n{rank}", "attempt": attempt, "job": "12", "pid": 100 + rank}


def ex(code: int, attempt: int = 0, reason: str = "") -> dict:
    return {"code": code, "attempt": attempt, "job": "12", "reason": reason, "time": T, "host": "n?"}


def started(rank: int, attempt: int = 0) -> list[str]:
    return [
        f"{T} [kgen supervisor {rank} 07:37:00 +0.0s] Slurm job 12, attempt {attempt} (requeues up to 2) on n{rank}",
        f"{T} [kgen node {rank} 07:37:01 +0.1s] generation 0: starting: -m torch.distributed.run",
    ]


def verdict(job, files, **kw):
    return judge(to_records(REC, job, files, **kw))


def test_running():
    job = JobInfo("12", "RUNNING", nodelist="n[0-2]")
    v = verdict(job, [NodeFiles(r, pid=pid(r), events=started(r)) for r in range(3)])
    assert v.state == "running" and v.headline == "Running: 3/3 ranks up"
    assert [r.meaning for r in v.rows] == ["training"] * 3
    assert v.kind == "slurm"


def test_succeeded():
    job = JobInfo("12", "COMPLETED", nodelist="n[0-2]")
    files = [NodeFiles(r, pid=pid(r), exit=ex(0), events=started(r)) for r in range(3)]
    v = verdict(job, files, end={"attempt": 0, "job": "12", "decision": "succeeded"})
    assert v.headline == "Succeeded: 3/3 ranks completed, 0 re-formations"


def test_requeued_and_waiting_names_the_lost_node():
    job = JobInfo("12", "PENDING", reason="BeginTime", restarts=1)

    def attempts(r):
        out = [{"event": "start", "attempt": 0, "job": "12", "host": f"n{r}", "time": T}]
        return out + ([] if r == 1 else [{"event": "exit", "attempt": 0, "job": "12", "code": 75, "time": T}])

    files = [NodeFiles(r, pid=pid(r), exit=ex(75), events=started(r), attempts=attempts(r)) for r in range(3)]
    v = verdict(job, files)
    assert v.state == "starting"
    assert {r.state for r in v.rows} == {"Pending"}
    assert v.rows[0].meaning == "requeued: waiting for Slurm to start it again (BeginTime)"
    assert not any("pod" in d for d in v.details), v.details  # no Kubernetes words for a requeued job
    assert v.reformations == 1
    assert v.incidents[0].startswith("1. rank 1 (host n1): its node was lost in attempt 0 (no exit record)")
    assert "2 ranks stopped by fail-stop (exit 75)" in v.incidents[0]
    assert any(d.startswith("restarting after: rank 1") or d.startswith("re-formed after: rank 1") for d in v.details)
    # the table keeps the Slurm columns while no node is placed (no empty POD column of a Kubernetes table)
    from kgen.runs.views import status_text

    table = status_text(v).splitlines()
    assert table[0].split()[:3] == ["RANK", "HOST", "STATE"] and "POD" not in table[0]
    assert [line.split()[:3] for line in table[1:4]] == [[str(r), "-", "Pending"] for r in range(3)]


def test_a_script_error_fails_with_its_rank():
    job = JobInfo("12", "FAILED", nodelist="n[0-2]")
    files = [
        NodeFiles(0, pid=pid(0), exit=ex(5, reason="node 0 ended the run"), events=started(0)),
        NodeFiles(1, pid=pid(1), exit=ex(5), events=started(1)),
        NodeFiles(2, pid=pid(2), exit=ex(1, reason="torch failed with code 1"), events=started(2)),
    ]
    v = verdict(job, files, end={"attempt": 0, "job": "12", "decision": "failed", "reason": "node 2: exit 1"})
    assert v.state == "failed"
    assert v.root_cause.ranks == [2] and v.root_cause.exit_code == 1
    assert v.headline.startswith("Failed: rank 2 (host n2): exit 1: the training script failed")


def test_the_time_limit():
    job = JobInfo("12", "TIMEOUT", nodelist="n[0-2]")
    files = [NodeFiles(r, pid=pid(r), exit=ex(143), events=started(r)) for r in range(3)]
    v = verdict(job, files)
    assert v.state == "failed"
    assert "Job reason: TIMEOUT: Slurm's time limit (--time) ended the job" in v.details


def test_cancelled_by_scancel_is_stopped():
    job = JobInfo("12", "CANCELLED", nodelist="n[0-2]")
    files = [NodeFiles(r, pid=pid(r), exit=ex(143), events=started(r)) for r in range(3)]
    v = verdict(job, files)
    assert v.state == "stopped" and v.headline.startswith("Stopped: cancelled (scancel)")


def test_a_purged_job_is_judged_from_the_folder():
    files = [NodeFiles(r, pid=pid(r), exit=ex(0), events=started(r)) for r in range(3)]
    v = verdict(None, files, end={"attempt": 0, "job": "12", "decision": "succeeded"})
    assert v.state == "succeeded"
    assert "no longer known to Slurm" in v.details[-1]


def test_scontrol_show_job_fields_with_spaces():
    line = ("JobId=12 JobName=demo UserId=root(0) JobState=PENDING Reason=Nodes required for job are DOWN, "
            "DRAINED Dependency=(null) Requeue=1 Restarts=2 BatchFlag=1 ExitCode=0:0 NodeList=(null) "
            "Command=/x/job.sbatch a=b StdOut=/x/slurm-12.out")  # fmt: skip
    f = parse_show_job(line)
    assert f["Reason"] == "Nodes required for job are DOWN, DRAINED"
    assert (f["Restarts"], f["JobState"], f["ExitCode"]) == ("2", "PENDING", "0:0")
    assert f["StdOut"] == "/x/slurm-12.out"


def test_logs_merge_every_rank_in_time_order(tmp_path):
    from kgen.slurm import engine as ops

    run = tmp_path / "run"
    for rank, stamps in ((0, ["08:00:01", "08:00:03"]), (1, ["08:00:02", "08:00:04"])):
        (run / f"node{rank}").mkdir(parents=True)
        text = "".join(f"2026-11-26T{s}.000000Z [rank {rank}] line {s} of {rank}\n" for s in stamps)
        (run / f"node{rank}" / "log").write_text(f"2026-11-26T08:00:00.000000Z [kgen node {rank}] up\n{text}")
    rec = RunRecord(name="m", job_id="1", run_dir=str(run), nodes=3)
    lines, warnings = ops.logs(rec)
    assert lines == ["[node 0] [kgen node 0] up", "[node 1] [kgen node 1] up", "[0] line 08:00:01 of 0",
                     "[1] line 08:00:02 of 1", "[0] line 08:00:03 of 0", "[1] line 08:00:04 of 1"]  # fmt: skip
    assert warnings == [f"node 2: no log yet ({run}/node2/log): its task has not started"]
    lines, _ = ops.logs(rec, ranks={1}, tail=1, timestamps=True)
    assert lines == ["[1] 2026-11-26T08:00:04.000000Z line 08:00:04 of 1"]
    assert ops.logs(rec, tail=0)[0] == []


def test_a_node_the_others_lost_is_named_lost_in_its_row():
    """A crashed node's task still runs for Slurm (until SlurmdTimeout): its row says the group lost it."""
    job = JobInfo("12", "RUNNING", nodelist="n[0-2]")
    lost = f"{T} [kgen node 0 07:37:09 +8.0s] FAIL-STOP: node 1 closed its liveness connection (pod died, was deleted"
    files = [NodeFiles(0, pid=pid(0), exit=ex(75), events=[*started(0), lost]),
             NodeFiles(1, pid=pid(1), events=started(1)),
             NodeFiles(2, pid=pid(2), exit=ex(75), events=started(2))]  # fmt: skip
    v = verdict(job, files)
    assert v.rows[1].state == "Running" and v.rows[1].meaning.startswith("lost by the group (rank 0's log): node 1 "), (
        v.rows[1]
    )
    assert v.headline.startswith("Degraded: ") and "rank 1 (host n1)" in v.headline, v.headline
