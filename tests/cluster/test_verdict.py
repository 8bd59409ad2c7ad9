"""The verdict of every recorded capture (real API objects from a real 1.36 control plane) is the
one shared/cluster-recordings/README.md gives; with and without the logs' FAIL-STOP lines."""

from __future__ import annotations

import copy
import json

import pytest
from recordings import captures, deleted_pods, load, watch_events

from kgen.cluster.state import RunState, terminal
from kgen.cluster.verdict import decide
from kgen.runs import exitcodes
from kgen.runs.verdict import fail_stop_blames, parse_time

# capture -> what the README says: state, root-cause ranks, its exit code, Job reason, re-formations,
# and words the verdict line must hold
EXPECTED = {
    "job-succeeded": dict(state="succeeded", ranks=None, reform=0, words=["Succeeded: 2/2"]),
    "job-running": dict(state="running", ranks=None, reform=0, words=["Running: 3/3 ranks up"]),
    "job-worker-killed": dict(
        state="failed",
        ranks=[1],
        code=137,
        reason="BackoffLimitExceeded",
        reform=0,
        words=["rank 1", "exit 137", "killed (SIGKILL)", "2 ranks stopped by fail-stop (exit 75)"],
    ),
    "job-master-killed": dict(
        state="failed",
        ranks=[0],
        code=137,
        reason="BackoffLimitExceeded",
        reform=0,
        words=["rank 0", "exit 137", "2 ranks stopped by fail-stop"],
    ),
    "job-pfp-killed": dict(
        state="failed",
        ranks=[1],
        code=137,
        reason="PodFailurePolicy",
        reform=0,
        words=["rank 1 (pod rec-pfp-killed-1-hx22q", "exit 137"],
    ),
    "job-pfp-evicted-reformed/t1-reformed-running": dict(
        state="running",
        ranks=[1],
        code=None,
        reform=1,
        words=["Running: 3/3", "1 re-formation"],
    ),
    "job-pfp-evicted-reformed/t2-complete": dict(
        state="succeeded",
        ranks=[1],
        code=None,
        reform=1,
        words=["Succeeded: 3/3", "1 re-formation"],
    ),
    "job-frozen-rank": dict(
        state="failed", ranks=[1], code=None, reason="PodFailurePolicy", reform=1, words=["rank 1"]
    ),
    "job-unschedulable": dict(
        state="pending",
        ranks=None,
        reform=0,
        words=["Pending: 0/3 placed", "3 unschedulable", "4 Insufficient nvidia.com/gpu"],
    ),
    "job-bad-service": dict(
        state="failed",
        ranks=[1, 2],
        code=3,
        reason="BackoffLimitExceeded",
        reform=0,
        words=["ranks 1, 2", "together", "exit 3", "node 0 never became reachable", "rank 0 deleted"],
    ),
    "statefulset-running": dict(state="running", ranks=None, reform=0, words=["Running: 2/2 ranks up"]),
    "statefulset-restarting/t1-after-first-restart": dict(
        state="running",
        ranks=[1],
        code=137,
        reform=1,
        words=["Running: 2/2", "1 re-formation"],
    ),
    "statefulset-restarting/t2-crashloopbackoff": dict(
        state="restarting",
        ranks=[1],
        code=137,
        reform=1,
        words=["CrashLoopBackOff", "re-formation 2 pending"],
    ),
    "job-scale-1000-pending": dict(
        state="pending",
        ranks=None,
        reform=0,
        words=["Pending: 16/1000 placed", "984 unschedulable", "16 Insufficient nvidia.com/gpu"],
    ),
}


def test_every_capture_has_an_expectation():
    assert sorted(captures()) == sorted(EXPECTED)


@pytest.mark.parametrize("with_logs", [False, True], ids=["objects", "objects+logs"])
@pytest.mark.parametrize("capture", sorted(EXPECTED))
def test_recorded_verdict(capture, with_logs):
    d = load(capture)
    want = EXPECTED[capture]
    v = decide(d["name"], d["pods"], d["workload"], d["events"], d["logs"] if with_logs else None)
    assert v.state == want["state"], v.headline
    for word in want["words"]:
        assert word in v.headline + " " + " ".join(v.details), (word, v.headline, v.details)
    assert v.reformations == want["reform"]
    if want["ranks"] is None:
        assert v.root_cause is None
    else:
        assert v.root_cause is not None and v.root_cause.ranks == want["ranks"], v.headline
        if "code" in want:
            assert v.root_cause.exit_code == want["code"], v.headline
    assert v.job_reason == want.get("reason", "")
    assert v.state_code == {"succeeded": 0, "failed": 1, "running": 3, "restarting": 3, "pending": 4}[v.state]
    assert v.exit_code == (1 if v.state == "failed" else 0)
    json.dumps(v.to_dict())  # -o json never fails


def test_victims_are_never_the_root_cause():
    for capture in EXPECTED:
        d = load(capture)
        v = decide(d["name"], d["pods"], d["workload"], d["events"], d["logs"])
        if v.root_cause and v.root_cause.exit_code is not None:
            assert v.root_cause.exit_code != 75, capture


def test_frozen_rank_is_named_from_the_logs_and_the_failjob_message_is_flagged():
    d = load("job-frozen-rank")
    v = decide(d["name"], d["pods"], d["workload"], d["events"], d["logs"])
    assert "silent for 5.0s" in v.headline and "frozen or cut off" in v.headline
    assert "seen in the logs" in v.headline
    assert v.root_cause.pods == ["rec-frozen-1-tkprk"]  # known only from the Job's events: it was deleted
    assert any("names a rank that reacted, not the root cause" in x for x in v.details)
    # the second incident: the re-formation attempt failed with exit 4 at rank 0
    assert len(v.incidents) == 2 and "rank 0" in v.incidents[1] and "exit 4" in v.incidents[1]
    # without logs the pods alone still point at rank 1: the only rank of generation 1 that did not fail
    bare = decide(d["name"], d["pods"], d["workload"], d["events"])
    assert bare.root_cause.ranks == [1] and "only reacted" in bare.headline


def test_eviction_is_named_from_the_deleted_pod_a_watch_kept():
    cap = "job-pfp-evicted-reformed/t1-reformed-running"
    d = load(cap)
    v = decide(d["name"], d["pods"], d["workload"], d["events"], d["logs"], deleted=deleted_pods(cap))
    rc = v.root_cause
    assert rc.ranks == [1] and rc.exit_code == 143
    assert "EvictionByEvictionAPI" in rc.meaning and "DisruptionTarget" in rc.meaning
    assert rc.time == "15:06:01"  # when the eviction was decided, before the victims' 15:06:02
    # without the watch: the kubelet's Killing event on the gone pod still names rank 1
    v2 = decide(d["name"], d["pods"], d["workload"], d["events"])
    assert v2.root_cause.ranks == [1] and "Killing" in v2.root_cause.meaning


def test_bad_service_rank0_deletion_is_a_consequence_not_a_cause():
    d = load("job-bad-service")
    v = decide(d["name"], d["pods"], d["workload"], d["events"], d["logs"], deleted=deleted_pods("job-bad-service"))
    assert v.root_cause.ranks == [1, 2] and v.root_cause.exit_code == 3
    assert "does not resolve" in v.root_cause.detail  # the entrypoint's own words


def test_tie_in_the_same_second_is_broken_by_exit_codes():
    """finishedAt has 1 s resolution: put the crash and the fail-stop in the same second (an earlier
    take of statefulset-restarting did that) and the 137, not the 75, is the root cause."""
    d = load("statefulset-restarting/t1-after-first-restart")
    pods = copy.deepcopy(d["pods"])
    for p in pods:
        p["status"]["containerStatuses"][0]["lastState"]["terminated"]["finishedAt"] = "2026-11-22T15:23:21Z"
    v = decide(d["name"], pods, d["workload"], d["events"])
    assert v.root_cause.ranks == [1] and v.root_cause.exit_code == 137


def test_tie_among_causes_is_broken_by_fail_stop_lines():
    """Two non-victim failures in the same second: the one the survivors' FAIL-STOP lines name wins."""
    d = load("job-worker-killed")
    pods = copy.deepcopy(d["pods"])
    rank0 = next(p for p in pods if p["metadata"]["name"].startswith("rec-worker-killed-0-"))
    term = rank0["status"]["containerStatuses"][0]["state"]["terminated"]
    term["exitCode"], term["finishedAt"] = 1, "2026-11-22T15:04:52Z"
    v = decide(d["name"], pods, d["workload"], d["events"], d["logs"])
    assert v.root_cause.ranks == [1], v.headline  # rank 2's log says node 1 closed its connection
    bare = decide(d["name"], pods, d["workload"], d["events"])
    assert bare.root_cause.ranks == [0, 1]  # without logs: both, together


def test_failure_target_before_failed():
    """During FailureTarget (Failed not yet set) the run is failed but not over."""
    events = watch_events("job-frozen-rank", "workload")
    target = [e["object"] for e in events if _conds(e["object"]) == {"FailureTarget"}]
    assert target, "the recording has the FailureTarget-only window"
    d = load("job-frozen-rank")
    v = decide(d["name"], d["pods"], target[-1], d["events"], d["logs"])
    assert v.state == "failed" and not terminal(v, target[-1])
    assert any("FailureTarget since" in x for x in v.details)


def _conds(obj):
    return {c["type"] for c in (obj.get("status") or {}).get("conditions") or [] if c["status"] == "True"}


def test_fail_stop_lines_parse():
    got = fail_stop_blames(
        "[kgen node 2 15:04:52 +15.0s] FAIL-STOP: node 0 stopped the job: node 1 closed its liveness connection (x)\n"
        "[kgen node 0 15:10:19 +40.1s] FAIL-STOP: node rank(s) [1, 3] did not connect within KGEN_RDZV_TIMEOUT=40s\n"
        "[kgen node 1 15:05:15 +15.1s] FAIL-STOP: the liveness connection to node 0 closed (node 0 died)\n"
    )
    assert [(b.ranks, b.reporter, b.at) for b in got] == [
        ([1], 2, "15:04:52"),
        ([1, 3], 0, "15:10:19"),
        ([0], 1, "15:05:15"),
    ]
    assert got[0].text.startswith("node 1 closed")


def test_exit_code_table():
    assert exitcodes.meaning(75).role == "victim"
    assert exitcodes.meaning(137, "OOMKilled").meaning.startswith("OOMKilled")
    assert exitcodes.meaning(137).meaning == "killed (SIGKILL)"
    assert exitcodes.meaning(143).role == "stopped"
    assert exitcodes.meaning(3).role == exitcodes.meaning(4).role == "cause"
    assert "signal 10" in exitcodes.meaning(138).meaning
    assert exitcodes.meaning(42).role == "cause"


def test_parse_time_resolutions():
    assert parse_time("2026-11-22T15:06:42.015560Z").microsecond == 15560
    assert parse_time("2026-11-22T15:06:42Z").second == 42
    assert parse_time(None) is None


# ------------------------------------------------------------------- intermediate states (watch replay)
def replay_states(scenario: str) -> list[str]:
    """Apply the recorded pod and workload watch events in etcd order (resourceVersion); the state
    after each event, consecutive repeats dropped."""
    evs = [e for e in watch_events(scenario, "pods") + watch_events(scenario, "workload") if e.get("object")]
    evs.sort(key=lambda e: int(e["object"]["metadata"]["resourceVersion"]))
    name = load(scenario if scenario in EXPECTED else next(c for c in EXPECTED if c.startswith(scenario)))["name"]
    st = RunState(name)
    seq: list[str] = []
    for e in evs:
        st.apply(e)
        s = st.verdict().state
        if not seq or seq[-1] != s:
            seq.append(s)
    return seq


def _ordered(seq: list[str], *milestones: str) -> bool:
    it = iter(seq)
    return all(any(s == m for s in it) for m in milestones)


WATCH_EXPECTED = {
    "job-succeeded": ("running", "succeeded"),
    "job-running": ("running",),
    "job-worker-killed": ("running", "degraded", "failed"),
    "job-master-killed": ("running", "degraded", "failed"),
    "job-pfp-killed": ("running", "degraded", "failed"),
    "job-pfp-evicted-reformed": ("running", "degraded", "restarting", "running", "succeeded"),
    "job-frozen-rank": ("running", "degraded", "running", "degraded", "failed"),
    "job-unschedulable": ("pending",),
    "job-bad-service": ("running", "degraded", "failed"),
    "statefulset-running": ("running",),
    "statefulset-restarting": ("running", "restarting", "running"),
}


def test_degraded_names_the_crashed_rank_while_the_others_still_run():
    evs = [e for e in watch_events("job-worker-killed", "pods") + watch_events("job-worker-killed", "workload")]
    evs.sort(key=lambda e: int(e["object"]["metadata"]["resourceVersion"]))
    st = RunState("rec-worker-killed")
    for e in evs:
        st.apply(e)
        v = st.verdict()
        if v.state == "degraded":
            assert v.headline.startswith("Degraded: 2/3 ranks up") and "rank 1" in v.headline and "137" in v.headline
            return
    raise AssertionError("no degraded state in the replay")


@pytest.mark.parametrize("scenario", sorted(WATCH_EXPECTED))
def test_watch_replay_intermediate_states(scenario):
    seq = replay_states(scenario)
    assert _ordered(seq, *WATCH_EXPECTED[scenario]), seq
    assert "succeeded" not in seq or seq[-1] == "succeeded"
    if "failed" in seq:  # once the Job is failing, it never looks healthy again
        assert all(s == "failed" for s in seq[seq.index("failed") :]), seq
    assert seq[0] in ("starting", "pending"), seq  # every run begins before its ranks are up


def test_events_of_an_earlier_run_of_the_same_name_are_ignored():
    """`kgen stop NAME; kgen submit --name NAME`: the old Job's events stay for an hour; only the
    current Job's (by uid) may name pods that are gone."""
    d = load("job-frozen-rank")
    assert all(e["involvedObject"].get("uid") for e in d["events"] if e["involvedObject"]["kind"] == "Job")
    old_run = copy.deepcopy(d["workload"])
    old_run["metadata"]["uid"] = "another-job-of-the-same-name"
    v = decide(d["name"], d["pods"], old_run, d["events"])
    assert "rec-frozen-1-tkprk" not in [r.pod for r in v.rows]
    assert [r.state for r in v.rows if r.rank == 1] == ["NoPod"]
    same = decide(d["name"], d["pods"], d["workload"], d["events"])
    assert [r.pod for r in same.rows if r.rank == 1] == ["rec-frozen-1-tkprk"]


def test_in_place_reformation_codes_and_lines():
    """The re-forming entrypoint (survivors stay; KGEN_MAX_REFORMATIONS > 0) adds exit 5 (the run
    failed as a whole: a reaction) and 76 (this node was dropped: it froze or was cut off), relays
    with "node 0 ended the run:", and counts generations from 0 in its log lines."""
    from kgen.runs.verdict import log_generation

    assert exitcodes.meaning(5).role == "victim" and exitcodes.meaning(76).role == "cause"
    (b,) = fail_stop_blames("[kgen node 2 10:00:01 +9.0s] FAIL-STOP: node 0 ended the run: node 1 silent for 5.0s")
    assert b.ranks == [1] and b.text == "node 1 silent for 5.0s"
    assert log_generation({"p": "[kgen node 0 10:00:00 +0.1s] all 3 nodes connected after 0.1s: generation 2"}) == 2
    assert log_generation({"p": "[kgen node 0 15:04:37 +0.1s] all 3 nodes connected after 0.1s"}) == 0


def test_kind_from_the_pods_when_the_workload_is_gone():
    for capture, kind in (("job-running", "Job"), ("statefulset-running", "StatefulSet")):
        d = load(capture)
        assert decide(d["name"], d["pods"], None, d["events"]).kind == kind


def test_statefulset_rank_without_the_pod_index_label():
    """Clusters before 1.28 do not set apps.kubernetes.io/pod-index: the ordinal ends the pod name."""
    from kgen.cluster.kube_records import pod_rank

    d = load("statefulset-running")
    pods = copy.deepcopy(d["pods"])
    for p in pods:
        del p["metadata"]["labels"]["apps.kubernetes.io/pod-index"]
    assert sorted(pod_rank(p) for p in pods) == [0, 1]
    assert decide(d["name"], pods, d["workload"], d["events"]).state == "running"


# The JobSet kgen renders (templates/jobset.yaml.j2 on main: one replicatedJob "node" of N Indexed pods),
# reduced to the fields the verdict reads. No JobSet was recorded, so only the shape is tested here.
JOBSET = {
    "kind": "JobSet",
    "metadata": {"name": "rec-running", "labels": {"app.kubernetes.io/managed-by": "kgen"}},
    "spec": {
        "replicatedJobs": [
            {
                "name": "node",
                "replicas": 1,
                "template": {
                    "spec": {
                        "completions": 3,
                        "parallelism": 3,
                        "template": {"spec": {"containers": [{"name": "trainer", "env": []}]}},
                    }
                },
            }
        ]
    },
    "status": {"restarts": 2},
}


def test_jobset_shape_ranks_and_restarts():
    from kgen.runs.views import shape

    d = load("job-running")
    v = decide(d["name"], d["pods"], JOBSET, d["events"])
    assert v.kind == "JobSet" and v.ranks_expected == 3 and v.state == "running"
    assert v.reformations == 2  # status.restarts: the group restarts JobSet made
    done = copy.deepcopy(JOBSET)
    done["status"]["conditions"] = [{"type": "Completed", "status": "True"}]
    assert decide(d["name"], d["pods"], done, d["events"]).state == "succeeded"
    assert shape(JOBSET) == "3x1cpu"


def test_jobset_group_restarts_are_named_with_their_cause_and_rule():
    """A JobSet that succeeded on its second attempt: the pods of the first are gone with their child Job, so
    the verdict counts group restarts from status.restarts and tells why from the Events that outlive them
    (the child Job's failure, the JobSet's action and whether it counted against maxRestarts)."""
    d = load("job-running")
    js = copy.deepcopy(JOBSET)
    js["metadata"]["uid"] = "js-uid"
    js["spec"]["failurePolicy"] = {"maxRestarts": 3}
    done = [{"type": "Completed", "status": "True"}]
    js["status"] = {"restarts": 2, "restartsCountTowardsMax": 1, "conditions": done}
    name = js["metadata"]["name"]
    events = [
        {"involvedObject": {"kind": "Job", "name": f"{name}-node-0"}, "reason": "BackoffLimitExceeded",
         "message": "Job has reached the specified backoff limit", "lastTimestamp": "2026-11-28T10:00:01Z"},
        {"involvedObject": {"kind": "JobSet", "name": name, "uid": "js-uid"},
         "reason": "RestartJobSetFailurePolicyAction", "lastTimestamp": "2026-11-28T10:00:02Z",
         "message": f"applying RestartJobSet failure policy action (first failed job: {name}-node-0)"},
        {"involvedObject": {"kind": "JobSet", "name": name, "uid": "js-uid"},
         "reason": "RestartJobSetAndIgnoreMaxRestartsFailurePolicyAction", "lastTimestamp": "2026-11-28T10:05:00Z",
         "message": "applying RestartJobSetAndIgnoreMaxRestarts failure policy action"},
        {"involvedObject": {"kind": "JobSet", "name": name, "uid": "another-run"},
         "reason": "RestartJobSetFailurePolicyAction", "message": "an earlier run of this name"},
    ]  # fmt: skip
    v = decide(d["name"], d["pods"], js, d["events"] + events)
    assert v.state == "succeeded" and v.headline.endswith("2 group restarts"), v.headline
    text = "\n".join(v.details)
    assert "JobSet: 2 group restarts (every node's pod recreated), 1 counted against failurePolicy.maxRestarts 3" in (
        text
    )
    assert "10:00:01 child Job rec-running-node-0 failed: BackoffLimitExceeded" in text, text
    assert "10:00:02 JobSet RestartJobSetFailurePolicyAction, counted against maxRestarts" in text, text
    assert "10:05:00 JobSet RestartJobSetAndIgnoreMaxRestartsFailurePolicyAction, not counted" in text, text
    assert "an earlier run" not in text


def test_jobset_restarting_now_says_so():
    """While the JobSet controller recreates the group (condition RestartingJobSet True) the run is restarting,
    whatever the pods of either attempt look like at that moment."""
    d = load("job-running")
    js = copy.deepcopy(JOBSET)
    why = "applying RestartJobSet failure policy action (first failed job: rec-running-node-0)"
    restarting = {"type": "RestartingJobSet", "status": "True", "reason": "FailurePolicy_Restart", "message": why}
    js["status"] = {"restarts": 1, "restartsCountTowardsMax": 1, "conditions": [restarting]}
    v = decide(d["name"], d["pods"], js, d["events"])
    assert v.state == "restarting", v.headline
    assert v.headline.startswith("Restarting: the JobSet controller restarts the whole group (FailurePolicy_Restart)")
    assert any("JobSet restarting now: FailurePolicy_Restart: applying RestartJobSet" in x for x in v.details)


def test_statefulset_holding_idle_after_success_is_succeeded():
    """A finished StatefulSet run keeps its pods Running, idle; node 0's last line says so."""
    from kgen.runs.verdict import IDLE_AFTER_SUCCESS

    d = load("statefulset-running")
    running = decide(d["name"], d["pods"], d["workload"], d["events"], d["logs"])
    assert running.state == "running"  # the recorded log has no such line: still training
    logs = dict(d["logs"])
    rank0 = next(p for p in d["pods"] if p["metadata"]["name"].endswith("-0"))["metadata"]["name"]
    logs[rank0] = logs.get(rank0, "") + (
        f"kgen-entrypoint: {IDLE_AFTER_SUCCESS} so restartPolicy Always does not retrain; kgen stop NAME to remove\n"
    )
    v = decide(d["name"], d["pods"], d["workload"], d["events"], logs)
    assert v.state == "succeeded"
    assert v.headline.startswith("Succeeded:") and f"kgen stop {d['name']}" in v.headline


# ------------------------------------------------------------------------------ what users found wrong
RECORD = (
    'kgen-entrypoint: worker failure: {"error": "RuntimeError", "exit": 1, "local_rank": 0, "message": '
    '"deliberate failure on rank 1 at step 5", "others": [], "peer": false, "rank": 1, "source": "traceback", '
    '"time": "2026-11-22T15:04:52.412000Z", "where": "/app/train_loop.py:31"}'
)


def _script_error(d: dict) -> list[dict]:
    """job-worker-killed as if rank 1's script had raised (exit 1) instead of being killed: what its pod's
    status says with FallbackToLogsOnError (the end of its log, with the entrypoint's failure record)."""
    pods = copy.deepcopy(d["pods"])
    rank1 = next(p for p in pods if p["metadata"]["name"].startswith("rec-worker-killed-1-"))
    term = rank1["status"]["containerStatuses"][0]["state"]["terminated"]
    term["exitCode"], term["reason"] = 1, "Error"
    term["message"] = f"[rank 1] RuntimeError: deliberate failure on rank 1 at step 5\n{RECORD}\n" + (
        "kgen-entrypoint: stopped: torch failed with code 1\n"
    )
    return pods


def test_the_termination_message_names_the_error_without_logs():
    """`kgen status --no-logs`: the pod's termination message (FallbackToLogsOnError) holds the failure
    record: the root cause is rank 1's exception, its message and file:line; -o json carries them."""
    d = load("job-worker-killed")
    v = decide(d["name"], _script_error(d), d["workload"], d["events"])
    assert v.root_cause.ranks == [1] and v.root_cause.exit_code == 1
    assert v.root_cause.error["type"] == "RuntimeError"
    assert v.root_cause.error["where"] == "/app/train_loop.py:31"
    assert v.headline.startswith(
        "Failed: rank 1 (pod rec-worker-killed-1-9wdcf; node sim-node-1): exit 1: RuntimeError: deliberate failure "
        "on rank 1 at step 5 (/app/train_loop.py:31) at 15:04:52"
    ), v.headline
    assert (
        json.loads(json.dumps(v.to_dict()))["root_cause"]["error"]["message"]
        == "deliberate failure on rank 1 at step 5"
    )


def test_a_traceback_in_the_log_tail_when_the_pod_has_no_message():
    """An older entrypoint (no record, no message): the traceback in the failed pod's log tail."""
    d = load("job-worker-killed")
    pods = _script_error(d)
    for p in pods:
        p["status"]["containerStatuses"][0]["state"]["terminated"].pop("message", None)
    logs = dict(d["logs"])
    name = "rec-worker-killed-1-9wdcf"
    logs[name] = logs[name] + (
        "Traceback (most recent call last):\n"
        '  File "/app/train_loop.py", line 31, in <module>\n'
        "    raise ValueError(bad)\n"
        "ValueError: bad shard 7\n"
    )
    v = decide(d["name"], pods, d["workload"], d["events"], logs)
    assert v.root_cause.error["type"] == "ValueError" and v.root_cause.error["source"] == "log"
    assert "ValueError: bad shard 7 (/app/train_loop.py:31)" in v.headline


def test_recorded_logs_hold_no_process_error():
    """The recordings (kgen 0.1) have torchrun's SignalException tracebacks after each fail-stop: those are the
    launcher's, never a process error; every recorded verdict keeps its README root cause."""
    from kgen.runs.errors import node_error

    for capture in captures():
        for text in load(capture)["logs"].values():
            assert node_error(text) is None, capture


def test_node_0s_group_end_is_the_cause_when_a_follower_was_recorded_first():
    """A hang (or a failed health gate) ends every node with node 0's code; node 1's record said "node 0 ended the
    run" and came first, in an earlier second: node 0, the one that decided, is chosen and its line is the detail."""
    from datetime import datetime, timezone

    from kgen.runs.records import Failure
    from kgen.runs.rootcause import root_cause

    t = datetime(2026, 11, 28, 21, 44, 33, tzinfo=timezone.utc)
    later = t.replace(second=34)
    zero = Failure(0, "", "", 77, "", "hang", "cause", later, "exit file", key="node0")
    one = Failure(1, "", "", 77, "", "hang", "cause", t, "exit file", key="node1")
    logs = {
        "node0": "kgen-entrypoint: stopped: hang: no rank made progress for 30s; rank 3: queue.get at train.py:27\n",
        "node1": "kgen-entrypoint: stopped: node 0 ended the run (hang: no rank made progress for 30s)\n",
    }
    cause = root_cause([one, zero], logs, 2, {0: ["node0"], 1: ["node1"]}, by_host=True, nproc=2)
    assert cause.detail.startswith("kgen-entrypoint: stopped: hang:"), cause
    assert cause.ranks == [0], cause
    # a follower that is not node 0's code (its own failure) stays the cause
    one.exit_code = 1
    cause = root_cause([one, zero], logs, 2, {0: ["node0"], 1: ["node1"]}, by_host=True, nproc=2)
    assert cause.ranks == [1], cause
