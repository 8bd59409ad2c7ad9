"""`kgen logs` and `kgen status` never pass a control character to the terminal, whatever a log
holds (a stranger's words the entrypoint logged, a script's escape sequences, a pod's termination message),
and a line the entrypoint did not write cannot pass for one of its FAIL-STOP or last-word lines."""

from __future__ import annotations

import copy

from recordings import load

from kgen.cluster.logs import Follower, Source, merge
from kgen.cluster.verdict import decide
from kgen.runs.records import error_lines, fail_stop_blames, log_generation
from kgen.runs.safetext import UNSAFE, lines, printable

HOSTILE = "a\x1b[2J\x1b]0;pwned\x07b\rc\x9b31m\u202ed\u2028[kgen node 0 10:00:00 +1.0s] FAIL-STOP: node 2 forged"


def test_printable_escapes_what_moves_the_cursor_and_keeps_the_rest():
    assert printable(HOSTILE) == (
        "a\\x1b[2J\\x1b]0;pwned\\x07b\\rc\\x9b31m\\u202ed\\u2028[kgen node 0 10:00:00 +1.0s] FAIL-STOP: node 2 forged"
    )
    kept = "tab\there, ümlaut, 日本語, emoji 🙂, a backslash \\ and 'quotes'"
    assert printable(kept) is kept  # nothing to do: the same object back
    assert not UNSAFE.search(printable("".join(map(chr, range(0x20))) + "\x7f" + "".join(map(chr, range(0x80, 0xA0)))))


def test_lines_split_on_newline_only():
    assert lines("one\x0btwo\x0cthree\x1cfour\x85five\u2029six\r\nseven\n") == [
        "one\\x0btwo\\x0cthree\\x1cfour\\x85five\\u2029six",
        "seven",
    ]
    assert lines("") == [] and lines("x") == ["x"] and lines("x\n\n") == ["x", ""]


def test_kgen_logs_merge_and_follow_pass_no_control_character():
    merged = merge({0: f"2026-11-22T15:04:52Z {HOSTILE}\n", 1: "2026-11-22T15:04:53Z ok\n"})
    assert len(merged) == 2 and not any(UNSAFE.search(m) for m in merged)
    assert merged[0].startswith("[node 0] a\\x1b[2J") and merged[1] == "[node 1] ok"  # a node's own lines
    follower = Follower(lambda s: [HOSTILE.encode() + b"\n", b"\x1b[31mred\x1b[0m\r\n"], None, lambda: True)
    got = list(follower.run([Source(0, "p")]))
    assert got == [f"[node 0] {printable(HOSTILE)}", "[node 0] \\x1b[31mred\\x1b[0m"]
    worker = Follower(lambda s: [b"[rank 0] \x1b[31mred\r\n"], None, lambda: True)  # a training process's line
    assert list(worker.run([Source(0, "p")])) == ["[0] \\x1b[31mred"]


def test_only_the_entrypoints_own_lines_count():
    log = (
        "[kgen node 0 10:00:01 +1.0s] refused a connection from 1.2.3.4:5: sent 'hello' (FAIL-STOP: node 2 x)\n"
        "user script says FAIL-STOP: node 1 is bad, generation 99; kgen-entrypoint: stopped: forged\n"
        "[kgen node 0 10:00:02 +2.0s] generation 1: starting: ...\n"
        "2026-11-22T15:04:52Z [kgen node 0 10:00:03 +3.0s] FAIL-STOP: node 1 silent for 5.0s\n"
        "kgen-entrypoint: stopped: peer lost (node 1 silent)\n"
    )
    assert [(b.ranks, b.text) for b in fail_stop_blames(log)] == [([1], "node 1 silent for 5.0s")]
    assert error_lines(log) == ["kgen-entrypoint: stopped: peer lost (node 1 silent)"]
    assert log_generation({"p": log}) == 1


def test_kgen_status_escapes_what_the_pods_and_logs_say():
    d = load("job-worker-killed")
    pods = copy.deepcopy(d["pods"])
    rank1 = next(p for p in pods if p["metadata"]["name"].startswith("rec-worker-killed-1-"))
    rank1["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = HOSTILE  # the termination log
    logs = dict(d["logs"])
    logs[rank1["metadata"]["name"]] += f"kgen-entrypoint: stopped: {HOSTILE}\n"
    v = decide(d["name"], pods, d["workload"], d["events"], logs)
    texts = [v.headline, *v.details, *v.incidents, *(r.meaning for r in v.rows), v.root_cause.detail]
    assert any("pwned" in t for t in texts)  # it is shown, escaped
    assert not any(UNSAFE.search(t) for t in texts), texts


def test_an_internal_error_is_kgens_fault_not_the_scripts():
    """Exit 70 on a pod is named as kgen's own failure, with the entrypoint's words."""
    d = load("job-worker-killed")
    pods = copy.deepcopy(d["pods"])
    rank1 = next(p for p in pods if p["metadata"]["name"].startswith("rec-worker-killed-1-"))
    rank1["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] = 70
    reason = "kgen entrypoint internal error on node 1: RecursionError: maximum recursion depth exceeded (report it)"
    logs = dict(d["logs"])
    logs[rank1["metadata"]["name"]] += (
        f"Traceback (most recent call last):\n  ...\n{reason}\nkgen-entrypoint: stopped: {reason}\n"
    )
    v = decide(d["name"], pods, d["workload"], d["events"], logs)
    assert v.state == "failed" and v.root_cause.ranks == [1] and v.root_cause.exit_code == 70
    assert "exit 70: kgen entrypoint internal error: a bug in kgen, not the training script (report it)" in v.headline
    assert "the training script failed" not in v.headline
    assert f"kgen-entrypoint: stopped: {reason}" in v.details
