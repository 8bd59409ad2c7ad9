"""The SSH adapter (each host's run state -> per-rank records) and the one verdict over them (pure).

The states are what `kgen_entrypoint.py --run-dir DIR --state` answers; the log lines are the
entrypoint's own words (the same lines the cluster verdict reads from pods)."""

from __future__ import annotations

import pytest

from kgen.baremetal.adapter import NodeState, to_records
from kgen.baremetal.record import NodeRecord, RunRecord
from kgen.cluster.verdict import decide
from kgen.runs.verdict import judge

HOSTS = ["a", "b", "c"]


def ts(t: int) -> str:
    return f"2026-01-01T12:00:{t:02d}.000000Z"


def ev(t: int, rank: int, text: str) -> str:
    return f"{ts(t)} [kgen node {rank} 12:00:{t:02d} +{t}.0s] {text}"


def stopped(t: int, reason: str) -> str:
    return f"{ts(t)} kgen-entrypoint: stopped: {reason}"


def formed(rank: int, gen: int = 0, t: int = 1) -> list[str]:
    lines = [ev(t, rank, f"all 3 nodes connected after 0.1s: generation {gen}")] if rank == 0 else []
    return lines + [ev(t, rank, f"generation {gen}: starting: -m torch.distributed.run ...")]


def running(rank: int, events: list[str], frozen: bool = False) -> dict:
    return {
        "alive": True,
        "child": {"pid": 10, "state": "T" if frozen else "S"},
        "exit": None,
        "events": events,
        "tail": [f"{ts(30)} step 7 loss 0.1"],
        "host": HOSTS[rank],
    }


def ended(rank: int, code: int, reason: str, t: int, events: list[str], stopping: bool = False) -> dict:
    return {
        "alive": False,
        "child": {"state": None},
        "exit": {"code": code, "reason": reason, "time": ts(t), "restarts": 0},
        "events": [*events, stopped(t, reason)],
        "tail": [stopped(t, reason)],
        "host": HOSTS[rank],
        "stopping": stopping,
    }


def verdict(*states, unreachable: dict[int, str] | None = None):
    rec = RunRecord(name="demo", mode="ssh", nodes=[NodeRecord(i, h, f"/s/node{i}") for i, h in enumerate(HOSTS)])
    unreachable = unreachable or {}
    ns = [
        NodeState(rec.nodes[i], None if i in unreachable else st, unreachable.get(i, "")) for i, st in enumerate(states)
    ]
    return judge(to_records(rec, ns))


def test_running_group():
    v = verdict(*(running(r, formed(r)) for r in range(3)))
    assert v.state == "running" and v.headline == "Running: 3/3 ranks up, the group formed (node 0's log)"
    assert [r.host for r in v.rows] == HOSTS and all(r.meaning == "training, generation 0" for r in v.rows)
    assert v.rows[0].last_line == "step 7 loss 0.1"


def test_script_error_is_the_root_cause_and_the_others_followed():
    v = verdict(
        ended(
            0,
            5,
            "node 1's torchrun exited with code 1",
            12,
            [*formed(0), ev(12, 0, "FAIL-STOP: node 1's torchrun exited with code 1")],
        ),
        ended(1, 1, "torch failed with code 1", 10, formed(1)),
        ended(
            2,
            5,
            "node 0 ended the run",
            12,
            [*formed(2), ev(12, 2, "FAIL-STOP: node 0 ended the run: node 1's torchrun exited with code 1")],
        ),
    )
    assert v.state == "failed" and v.exit_code == 1
    assert v.root_cause.ranks == [1] and v.root_cause.hosts == ["b"] and v.root_cause.exit_code == 1
    assert v.headline.startswith("Failed: rank 1 (host b): exit 1: the training script failed")
    # the others ended with 5 (the run failed as a whole, re-formation on), not 75
    assert "2 ranks stopped by fail-stop (exit 5) " in v.headline, v.headline
    assert "kgen-entrypoint: stopped: torch failed with code 1" in v.details


def test_crashed_host_is_unreachable_and_named_by_the_survivors():
    lost = ev(
        20,
        0,
        "peer lost: node 2 closed its liveness connection (pod died, was deleted or its entrypoint "
        "was killed); stopping torch and re-forming (generation 1)",
    )
    v = verdict(
        running(0, [*formed(0), lost]),
        running(1, [*formed(1), ev(20, 1, "re-forming: node 0 says: generation 0 aborted; stopping torch")]),
        None,
        unreachable={2: "c: connection refused (ssh: connect to host c port 22: Connection refused): is sshd running"},
    )
    assert v.state == "degraded", v.headline
    assert v.rows[2].state == "Unreachable" and "connection refused" in v.rows[2].meaning
    assert v.root_cause.ranks == [2] and v.root_cause.hosts == ["c"]
    assert "unreachable over ssh" in v.headline and "closed its liveness connection" in v.headline
    assert any("rank 2 (c): unreachable" in d for d in v.details)


def test_reforming_nodes_say_so_while_they_wait_for_the_lost_one():
    """After a host crashed, the survivors log joins and reachability while they wait for it: their rows
    still say they re-form (and why), not "node 0 reachable after 0.0s"."""
    lost = "node 2 closed its liveness connection (pod died, was deleted or its entrypoint was killed)"
    events0 = [
        *formed(0),
        ev(20, 0, f"peer lost: {lost}; stopping torch and re-forming (generation 1)"),
        ev(21, 0, "node 1 joined the liveness channel (1/2 peers, host b, last generation 0)"),
    ]
    events1 = [
        *formed(1),
        ev(20, 1, f"re-forming: {lost}; stopping torch (generation 0)"),
        ev(21, 1, "waiting for node 0 at a:29501 (liveness port; bound KGEN_REPLACEMENT_TIMEOUT=300s)"),
        ev(21, 1, "node 0 reachable after 0.0s (1 attempt(s))"),
    ]
    v = verdict(running(0, events0), running(1, events1), None, unreachable={2: "c: connection refused (x)"})
    assert v.rows[0].meaning.startswith("peer lost: node 2 closed its liveness connection"), v.rows[0].meaning
    assert v.rows[1].meaning.startswith("re-forming: node 2 closed its liveness connection"), v.rows[1].meaning
    # the next generation started: training again
    v = verdict(running(0, [*events0, *formed(0, gen=1, t=22)]), running(1, [*events1, *formed(1, 1, 22)]), None)
    assert v.rows[0].meaning == v.rows[1].meaning == "training, generation 1"


def test_unreachable_host_of_an_intact_group_still_runs():
    """sshd died on a host, the node goes on: node 0's log says the group trains with every node."""
    v = verdict(running(0, formed(0)), running(1, formed(1)), None, unreachable={2: "c: connection refused (x)"})
    assert v.state == "running" and "kgen cannot see it" in v.headline and v.root_cause is None


def test_frozen_node_named_from_node_0s_log():
    silent = ev(
        25,
        0,
        "peer lost: node 1 silent for 5.0s (> KGEN_HEARTBEAT_TIMEOUT=5s): frozen or cut off; "
        "stopping torch and re-forming (generation 1)",
    )
    v = verdict(running(0, [*formed(0), silent]), running(1, formed(1), frozen=True), running(2, formed(2)))
    assert v.rows[1].state == "Frozen"
    assert v.state == "degraded" and v.root_cause.ranks == [1] and "silent for 5.0s" in v.headline


def test_deliberate_group_stop():
    why = "stopped by user on a"
    v = verdict(*(ended(r, 6, why, 30, formed(r)) for r in range(3)))
    assert v.state == "stopped" and v.exit_code == 1
    assert v.headline == "Stopped: by user on a; 3/3 ranks ended, 0 re-formations"
    assert all(r.state == "Stopped" for r in v.rows) and v.root_cause is None


def test_kgen_stop_without_the_group_stop():
    v = verdict(
        ended(0, 130, "signal SIGINT", 30, formed(0), stopping=True),
        ended(1, 143, "signal SIGTERM", 33, formed(1), stopping=True),
        None,
        unreachable={2: "c: no answer"},
    )
    assert v.state == "stopped" and v.headline.startswith("Stopped: by kgen stop; 2/3 ranks ended")


def test_lost_node_without_exit_status():
    st = running(1, formed(1))
    st.update(alive=False)
    v = verdict(running(0, formed(0)), st, running(2, formed(2)))
    assert v.rows[1].state == "Lost" and v.state == "degraded" and v.root_cause.ranks == [1]


def test_replaced_node_counts_a_reformation():
    events1 = [
        *formed(1),
        ev(9, 1, "x"),
        f"{ts(9)} [kgen supervisor 1 12:00:09 +9.0s] node 1's entrypoint ended "
        "with code 137: replacing it in 1s (replacement 1 of 10, KGEN_MAX_REFORMATIONS), as the Job controller "
        "replaces a lost pod",
        *formed(1, gen=1, t=12),
    ]
    v = verdict(running(0, [*formed(0), *formed(0, gen=1, t=12)]), running(1, events1), running(2, formed(2, 1, 12)))
    assert v.state == "running" and v.reformations == 1 and v.rows[1].restarts == 1
    # the headline's generation is the GEN column's (they once disagreed, 2 vs 1)
    assert "generation 1 after 1 re-formation" in v.headline and max(r.generation for r in v.rows) == 1
    assert any(d.startswith("re-formed after: rank 1 (host b): exit 137: killed (SIGKILL)") for d in v.details)


def test_succeeded():
    v = verdict(*(ended(r, 0, "succeeded", 40, formed(r)) for r in range(3)))
    assert v.state == "succeeded" and v.headline == "Succeeded: 3/3 ranks completed, 0 re-formations"


def test_json_shape_is_the_cluster_verdicts():
    """-o json: the same keys as a cluster run's verdict (bare metal fills host and last_line)."""
    bare = verdict(*(running(r, formed(r)) for r in range(3))).to_dict()
    cluster = decide("x", [], {"kind": "Job", "spec": {"completions": 1}}).to_dict()
    assert set(bare) == set(cluster)
    row_keys = set(bare["rows"][0])
    assert row_keys >= {"rank", "pod", "node", "state", "exit_code", "meaning", "generation", "host", "last_line"}


@pytest.mark.parametrize("missing", [{"missing": True}])
def test_no_run_directory(missing):
    v = verdict(running(0, formed(0)), missing, running(2, formed(2)))
    assert v.rows[1].state == "NoRunDir" and "without a run directory" in v.headline


def record(t: int, **fields) -> str:
    """The entrypoint's failure record line (kgen_entrypoint.FAILURE_MARK), in a node's events."""
    import json

    return f"{ts(t)} kgen-entrypoint: worker failure: {json.dumps(fields)}"


def test_a_reforming_node_makes_the_headline_say_re_forming():
    """Every process runs, but one node re-forms: the headline says so, as its row does (it said
    "Running: 3/3 ranks up, the group formed" while the row said "re-forming")."""
    reform = ev(20, 1, "re-forming: node 0 lost: node 0 silent for 5.0s; stopping torch (generation 0)")
    v = verdict(running(0, formed(0)), running(1, [*formed(1), reform]), running(2, formed(2)))
    assert v.state == "restarting", v.headline
    assert v.headline.startswith("Re-forming: 3/3 ranks up, 1 not training yet (rank 1: re-forming: node 0 lost")
    assert [r.ready for r in v.rows] == [True, False, True]
    assert v.rows[1].meaning.startswith("re-forming")


def test_the_failure_record_names_the_process_its_error_and_the_consequences():
    """Node 1's record: its worker of global rank 3 raised; node 0's workers failed because of it (peer
    errors) and node 0 exited 5: the root cause is rank 3's exception, ranks 0-2 its consequences."""
    err0 = record(11, rank=0, local_rank=0, exit=1, error="RuntimeError", message="Connection closed by peer",
                  where="c10d.py:9", source="traceback", time=ts(11), peer=True,
                  others=[{"rank": 1, "exit": -15, "peer": True}])  # fmt: skip
    err1 = record(10, rank=3, local_rank=1, exit=1, error="RuntimeError", message="boom at step 3",
                  where="/w/train.py:12", source="traceback", time="2026-01-01T12:00:09.500000Z", peer=False,
                  others=[{"rank": 2, "exit": -15, "peer": True}])  # fmt: skip
    rec = RunRecord(
        name="demo", mode="ssh", nproc=2, nodes=[NodeRecord(i, h, f"/s/node{i}") for i, h in enumerate(HOSTS[:2])]
    )
    states = [
        ended(0, 5, "script failed (node 1's torchrun exited with code 1)", 12, [*formed(0), err0]),
        ended(1, 1, "torch failed with code 1", 12, [*formed(1), err1]),
    ]
    v = judge(to_records(rec, [NodeState(n, st) for n, st in zip(rec.nodes, states, strict=True)]))
    rc = v.root_cause
    assert rc.ranks == [3] and rc.node_ranks == [1] and rc.consequences == [0, 1, 2]
    assert rc.error["type"] == "RuntimeError" and rc.error["where"] == "/w/train.py:12"
    assert rc.time == "12:00:09"  # the exception's own time, not the exit's
    assert v.headline.startswith(
        "Failed: rank 3 (node 1, local rank 1; host b): exit 1: RuntimeError: boom at step 3 (/w/train.py:12) at "
        "12:00:09; ranks 0-2 failed because of it; 1 node stopped by fail-stop (exit 5)"
    ), v.headline
    assert v.to_dict()["root_cause"]["error"]["message"] == "boom at step 3"  # -o json carries it


def test_the_same_error_on_every_node_is_one_cause_together():
    """`-m` of a module whose import fails: node 1 reported first, node 0 exited 5, but node 0's own record
    says its worker failed the same way (not a peer error): both are the cause, together."""
    same = dict(exit=1, error="ModuleNotFoundError", message="No module named 'dep'", where="m.py:2",
                source="traceback", peer=False)  # fmt: skip
    states = [
        ended(0, 5, "script failed (node 1's torchrun exited with code 1)", 12,
              [*formed(0), record(10, rank=0, local_rank=0, time=ts(10), **same)]),
        ended(1, 1, "torch failed with code 1", 12, [*formed(1), record(10, rank=1, local_rank=0, time=ts(9), **same)]),
        ended(2, 5, "node 0 ended the run", 12, [*formed(2), record(10, rank=2, local_rank=0, time=ts(10), **same)]),
    ]  # fmt: skip
    v = verdict(*states)
    assert v.root_cause.ranks == [0, 1, 2] and v.root_cause.consequences == []
    assert v.headline == (
        "Failed: ranks 0-2 (host a, b, c) together: ModuleNotFoundError: No module named 'dep' (m.py:2) at 12:00:09"
    ), v.headline
    assert "fail-stop" not in v.headline


def test_a_traceback_in_the_tail_when_there_is_no_record():
    """An older entrypoint (no record): the last traceback in the failed node's log tail is its error."""
    tail = [f"{ts(9)} Traceback (most recent call last):", f'{ts(9)}   File "/w/t.py", line 4, in <module>',
            f"{ts(9)}     f()", f"{ts(9)} ValueError: bad shard 7",
            stopped(10, "torch failed with code 1")]  # fmt: skip
    st = ended(1, 1, "torch failed with code 1", 10, formed(1))
    st["tail"] = tail
    v = verdict(ended(0, 5, "script failed (node 1's torchrun exited with code 1)", 12, formed(0)), st,
                ended(2, 5, "node 0 ended the run", 12, formed(2)))  # fmt: skip
    assert v.root_cause.error["type"] == "ValueError" and v.root_cause.error["source"] == "log"
    assert "ValueError: bad shard 7 (/w/t.py:4)" in v.headline


def test_an_internal_error_is_kgens_own_fault_not_the_scripts():
    """Node 0's entrypoint failed (exit 70), the others ended with 5 and name node 0."""
    reason = "kgen entrypoint internal error on node 0: RecursionError: maximum recursion depth exceeded (report it)"
    v = verdict(
        ended(0, 70, reason, 12, [*formed(0), ev(12, 0, reason)]),
        *(
            ended(
                r,
                5,
                f"node 0 ended the run ({reason})",
                12,
                [*formed(r), ev(12, r, f"FAIL-STOP: node 0 ended the run: {reason}")],
            )
            for r in (1, 2)
        ),
    )
    assert v.state == "failed" and v.root_cause.ranks == [0] and v.root_cause.exit_code == 70
    assert v.headline.startswith("Failed: rank 0 (host a): exit 70: kgen entrypoint internal error: a bug in kgen")
    assert "2 ranks stopped by fail-stop (exit 5)" in v.headline and "the training script failed" not in v.headline
    assert v.rows[0].meaning == reason and f"kgen-entrypoint: stopped: {reason}" in v.details


def test_words_inside_a_logged_line_cannot_pass_for_the_entrypoints_own():
    """What a stranger or a script put inside a line is not a generation start, a loss or a
    replacement; and nothing a host answers reaches the terminal with a control character."""
    forged = [
        ev(5, 0, "refused a connection from 1.2.3.4:9: sent 'generation 7: starting' (FAIL-STOP: node 2 x)"),
        ev(6, 0, "note: peer lost: node 2 closed; node 2's entrypoint ended with code 1: replacing it"),
    ]
    st = running(0, [*formed(0), *forged])
    st["tail"] = [f"{ts(30)} step \x1b[2J\x1b]0;pwned\x07 7\r"]
    v = verdict(st, running(1, formed(1)), running(2, formed(2)))
    assert v.state == "running" and v.reformations == 0 and [r.generation for r in v.rows] == [0, 0, 0]
    assert all(r.restarts == 0 for r in v.rows) and v.root_cause is None
    assert v.rows[0].last_line == "step \\x1b[2J\\x1b]0;pwned\\x07 7"  # (a line's end \\r is whitespace)


LIBRARY_TAILS = [
    "[W1128 12:00:31.123456 4242 socket.cpp:207] [c10d] The hostname of the client socket cannot be retrieved. err=-3",
    "[W socket.cpp:464] [c10d] The server socket has failed to bind to [::]:29500 (errno: 98 - Address in use).",
    "W1128 12:00:31.553000 140 torch/distributed/run.py:793] Setting OMP_NUM_THREADS environment variable to 1",
    "*****************************************",
    "/usr/lib/python3/dist-packages/scipy/__init__.py:146: UserWarning: A NumPy version >=1.17.3 and <1.25.0 "
    "is required for this version of SciPy (detected version 1.26.4)\n"
    '  warnings.warn(f"A NumPy version >={np_minversion} and <{np_maxversion}"',
    "/opt/torch/_tensor.py:12: UserWarning: Failed to initialize NumPy: _ARRAY_API not found "
    "(Triggered internally at ../torch/csrc/utils/tensor_numpy.cpp:84.)",
]


@pytest.mark.parametrize("noise", LIBRARY_TAILS, ids=[f"library{i}" for i in range(len(LIBRARY_TAILS))])
def test_a_library_warning_is_not_the_rows_last_line(noise):
    """A node's row shows kgen's or the script's last meaningful line: torch's and NumPy's own warnings
    (written by the libraries, not by the script) are passed over, the script's line before them shown."""
    state = running(0, formed(0))
    state["tail"] = [f"{ts(30)} step 7 loss 0.1", *(f"{ts(31)} {line}" for line in noise.split("\n"))]
    v = verdict(state, running(1, formed(1)), running(2, formed(2)))
    assert v.rows[0].last_line == "step 7 loss 0.1"


def test_a_worker_warning_after_its_rank_prefix_is_passed_over_too_and_a_tail_of_warnings_still_shows_one():
    from kgen.runs.logtext import last_line

    tail = [
        "[rank 3] step 9 loss 0.2",
        f"[rank 3] {LIBRARY_TAILS[0]}",
        *(f"[rank 2] {t}" for t in LIBRARY_TAILS[4].split("\n")),
    ]
    assert last_line(tail) == "[3] step 9 loss 0.2"
    assert last_line([LIBRARY_TAILS[0]]) == LIBRARY_TAILS[0]  # nothing else: the warning rather than nothing
    assert last_line(["kgen-entrypoint: stopped: succeeded", LIBRARY_TAILS[2], LIBRARY_TAILS[3]]) == (
        "kgen-entrypoint: stopped: succeeded"
    )
