"""Stacks of every rank: faulthandler's dump parsed, each stack summed up ("queue.get at data.py:88"), identical
stacks grouped and the odd ones out named first. One table for both copies of the grouping: the entrypoint's
(the hang report, node 0) and kgen.runs.stacks' (`kgen debug stacks`, `kgen status`); the entrypoint cannot
import kgen. The mechanism itself on plain Python processes (no torch): the sitecustomize registers, chains to
the one that was there before, and only registered processes are ever signalled."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from kgen.runs import stacks as S
from kgen.runs.exitcodes import TABLE
from kgen.runs.records import Row, RunRecords
from kgen.runs.verdict import judge

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("kgen_entrypoint_stacks", ROOT / "entrypoint" / "kgen_entrypoint.py")
assert _spec is not None and _spec.loader is not None
EP = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(EP)

LIB = sysconfig.get_paths()["stdlib"]  # the workers run the entrypoint's interpreter
SITE = "/opt/venv/lib/python3.11/site-packages"
DUMP = f"""Thread 0x00007f4a39ac46c0 (most recent call first):
  File "{LIB}/threading.py", line 331 in wait
  File "{LIB}/threading.py", line 1002 in _bootstrap

Current thread 0x00007f4a3b616b80 (most recent call first):
  File "{LIB}/threading.py", line 327 in wait
  File "{LIB}/queue.py", line 171 in get
  File "/work/code/data.py", line 88 in next_batch
  File "/work/code/train.py", line 40 in main
  File "/work/code/train.py", line 60 in <module>
"""
ALL_REDUCE = [
    [f"{SITE}/torch/distributed/distributed_c10d.py", 2950, "all_reduce"],
    [f"{SITE}/torch/distributed/c10d_logger.py", 81, "wrapper"],
    ["/work/code/train.py", 42, "main"],
    ["/work/code/train.py", 60, "<module>"],
]
QUEUE = [
    [f"{LIB}/threading.py", 327, "wait"],
    [f"{LIB}/queue.py", 171, "get"],
    ["/work/code/data.py", 88, "next_batch"],
    ["/work/code/train.py", 40, "main"],
    ["/work/code/train.py", 60, "<module>"],
]


def test_a_dump_is_parsed_into_threads_and_the_main_thread_summed_up():
    threads = EP.parse_dump(DUMP)
    assert [(hex(t[0]), len(t[1])) for t in threads] == [
        ("0x7f4a39ac46c0", 2),
        ("0x7f4a3b616b80", 5),
    ]
    assert threads[1][1] == QUEUE
    assert EP.stack_summary(threads[1][1]) == ("queue.get", "/work/code/data.py:88")
    # the decorator torch puts around its collectives is skipped; site-packages is a library without being told
    assert EP.stack_summary(ALL_REDUCE) == ("distributed_c10d.all_reduce", "/work/code/train.py:42")
    # a stack that is all user code (a busy loop, a C call without a Python frame): the innermost frame
    assert EP.stack_summary([["/work/code/train.py", 12, "spin"]]) == ("spin", "/work/code/train.py:12")
    assert EP.stack_summary([]) == ("", "")


def stack(rank, frames, what, where):
    return {"rank": rank, "frames": frames, "what": what, "where": where}


AR = ("distributed_c10d.all_reduce", "/work/code/train.py:42")
Q = ("queue.get", "/work/code/data.py:88")
GROUPING = [
    # (stacks, world, the lines, odd ones out first)
    (
        [stack(r, ALL_REDUCE, *AR) for r in range(7)] + [stack(7, QUEUE, *Q)],
        8,
        [
            "rank 7: queue.get at data.py:88 (the one that differs)",
            "ranks 0-6: distributed_c10d.all_reduce at train.py:42",
        ],
    ),
    (  # a tie: the rank not inside torch.distributed is the one the other waits for
        [stack(0, ALL_REDUCE, *AR), stack(1, QUEUE, *Q)],
        2,
        [
            "rank 1: queue.get at data.py:88 (the one that differs)",
            "rank 0: distributed_c10d.all_reduce at train.py:42",
        ],
    ),
    (  # all the same: nobody differs
        [stack(r, ALL_REDUCE, *AR) for r in range(4)],
        4,
        ["ranks 0-3: distributed_c10d.all_reduce at train.py:42"],
    ),
    (  # ranks that sent no stack are named first
        [stack(0, ALL_REDUCE, *AR), stack(1, ALL_REDUCE, *AR), {"rank": 2, "frames": [], "why": "no dump within 2s"}],
        4,
        [
            "rank 2: no dump within 2s",
            "rank 3: no stack: not registered",
            "ranks 0-1: distributed_c10d.all_reduce at train.py:42",
        ],
    ),
]


@pytest.mark.parametrize("stacks, world, lines", GROUPING)
def test_identical_stacks_are_grouped_and_the_odd_ones_out_come_first_in_both_copies(stacks, world, lines):
    assert [EP.group_line(g) for g in EP.group_stacks(stacks, world)] == lines
    assert [S.group_line(g) for g in S.group_stacks(stacks, world)] == lines


def test_rank_spans():
    assert S.rank_spans([7]) == EP.rank_spans([7]) == "rank 7"
    assert S.rank_spans([5, 0, 1, 2, 9, 10]) == EP.rank_spans([5, 0, 1, 2, 9, 10]) == "ranks 0-2, 5, 9-10"


def test_the_hang_report_is_read_back_and_kgen_status_names_the_rank_and_frame():
    stacks = GROUPING[0][0]
    groups = EP.group_stacks(stacks, 8)
    report = {"headline": f"no rank made progress for 31s; {EP.group_line(groups[0])}", "groups": groups}
    assert report["headline"] == "no rank made progress for 31s; rank 7: queue.get at data.py:88 (the one that differs)"
    log = "\n".join(
        ["[kgen node 0 10:00:00 +1.0s] HANG: ...", EP.HANG_MARK + json.dumps(report), "kgen-entrypoint: stopped: hang"]
    )
    found = S.hang_record(log)
    assert found is not None and found["groups"][0]["ranks"] == [7]
    assert S.hang_lines(found) == [
        "hang: no rank made progress for 31s; rank 7: queue.get at data.py:88 (the one that differs)",
        "  rank 7: queue.get at data.py:88 (the one that differs)",
        "  ranks 0-6: distributed_c10d.all_reduce at train.py:42",
    ]
    assert S.HANG_MARK == EP.HANG_MARK and S.EXIT_HANG == EP.EXIT_HANG == 77 and TABLE[77].role == "cause"
    rows = [Row(r, "", "h", "Failed", False, 0, 77, TABLE[77].meaning, 0) for r in range(2)]
    rec = RunRecords(name="r", kind="local", expected=2, rows=rows, failures=[], logs={"node0": log}, failed=True)
    v = judge(rec)
    assert (
        v.headline
        == "Failed: hang: no rank made progress for 31s; rank 7: queue.get at data.py:88 (the one that differs)"
    )
    assert v.details[:2] == [
        "rank 7: queue.get at data.py:88 (the one that differs)",
        "ranks 0-6: distributed_c10d.all_reduce at train.py:42",
    ]


def test_the_hang_timeout_is_checked(monkeypatch):
    for raw, ok in (("", 0.0), ("0", 0.0), ("30", 30.0), ("1.5", 1.5), ("0.5", None), ("x", None), ("inf", None)):
        problems: list[str] = []
        got = EP.Hang().configure({"KGEN_HANG_TIMEOUT": raw}, problems)
        assert (got if not problems else None) == ok, (raw, problems)
        if problems:
            assert (
                problems[0].startswith(f"KGEN_HANG_TIMEOUT={raw!r} is not 0 or a number of seconds")
                and "hang.timeout" in problems[0]
            )


def _hang_env(tmp_path: Path) -> tuple[object, dict]:
    hang = EP.Hang()
    hang.timeout = 5.0
    env = {"PATH": os.environ.get("PATH", ""), "KGEN_RUN_DIR": str(tmp_path / "node0")}
    return hang, {**env, **hang.worker_env(env)}


WORKER = """
import os, queue, sys, time
import mod_from_before  # put on the path by the sitecustomize that was there before kgen's
print("registered" if os.environ.get("KGEN_STACKS_PID") else "not registered", flush=True)
def next_batch(q):
    return q.get()
next_batch(queue.Queue())
"""


@pytest.mark.timeout(60)
def test_a_registered_process_dumps_its_stack_and_the_earlier_sitecustomize_still_runs(tmp_path):
    hang, env = _hang_env(tmp_path)
    before = tmp_path / "before"
    before.mkdir()
    (before / "sitecustomize.py").write_text("import sys\nsys.modules['mod_from_before'] = sys\n")
    env["PYTHONPATH"] += os.pathsep + str(before)
    (tmp_path / "w.py").write_text(WORKER)
    p = subprocess.Popen([sys.executable, str(tmp_path / "w.py")], env={**env, "RANK": "3", "LOCAL_RANK": "1"},
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "registered"
        time.sleep(0.5)  # on to its queue.get
        got = EP.collect_stacks(hang.home)
        assert [(r["rank"], r["pid"], r["what"], os.path.basename(r["where"])) for r in got] == [
            (3, p.pid, "queue.get", "w.py:6")
        ]
        assert os.environ.get("KGEN_PROGRESS_FILE") is None  # set in the worker only
        assert p.poll() is None  # dumping does not disturb it
    finally:
        p.kill()
        p.wait(10)


@pytest.mark.timeout(60)
def test_only_registered_live_processes_are_ever_signalled(tmp_path):
    hang, env = _hang_env(tmp_path)
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)  # RANK unset: not a worker
    try:
        time.sleep(0.3)
        # a forged record for a live process with another start time (a reused PID): never signalled
        forged = {"rank": 0, "pid": p.pid, "start": "1", "signal": int(EP.STACKS_SIGNAL), "main": 1, "libs": []}
        Path(hang.home, "stacks", f"{p.pid}.json").write_text(json.dumps(forged))
        assert EP.collect_stacks(hang.home, wait=0.3) == []
        assert p.poll() is None  # the signal's default action would have ended it
    finally:
        p.kill()
        p.wait(10)


def test_progress_files_and_rank_lines_count_as_progress(tmp_path):
    hang, _ = _hang_env(tmp_path)
    hang.armed = True
    start = hang.last
    assert not hang.due(start + 4.9) and hang.due(start + 5.0)
    Path(hang.home, "progress", "2").write_text("17\n")
    hang.next_poll = 0.0
    hang.poll(start + 4.0)
    assert hang.steps == {2: "17"} and hang.last == start + 4.0
    assert not hang.due(start + 8.9)
    hang.saw("[rank 5] ")
    assert not hang.due(hang.last + 4.0)
    hang.nodes[1] = hang.last + 100  # node 0: another node's `prog`
    assert not hang.due(hang.last + 104.0)


def test_hang_messages_pass_the_protocol_gate():
    frames = [["/work/train.py", 42, "main"]]
    ok = EP._decode(json.dumps({"t": "stacks", "rank": 3, "frames": frames, "what": "q.get"}).encode(), "bad")
    assert ok["frames"] == frames and ok["why"] == ""
    for bad in ({"t": "stacks", "rank": 3, "frames": [["a\nb", 1, "f"]]}, {"t": "stacks", "rank": -1},
                {"t": "stacks", "rank": 1, "frames": [["a", "1", "f"]]}):  # fmt: skip
        with pytest.raises(EP.ProtocolError):
            EP._decode(json.dumps(bad).encode(), "bad")
    assert EP._decode(b'{"t":"prog"}', "bad") == {"t": "prog"}
    assert int(EP.STACKS_SIGNAL) not in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM, signal.SIGINT)


def test_hang_timeout_is_rendered_only_when_set():
    import yaml

    from kgen.api import RenderRequest, render

    def env_of(**kw) -> dict:
        docs = [d for d in yaml.safe_load_all(render(RenderRequest(nodes=2, gpus=0, **kw))) if d]
        job = next(d for d in docs if d["kind"] == "Job")
        return {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}

    assert "KGEN_HANG_TIMEOUT" not in env_of()
    assert env_of(hang_timeout=600)["KGEN_HANG_TIMEOUT"] == "600"
    assert env_of(sets=("hang.timeout=90",))["KGEN_HANG_TIMEOUT"] == "90"


def test_kgen_debug_stacks_bad_input_is_one_line_and_exit_2(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from kgen.cli import cli

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    for args, words in (
        (["nosuch"], "no run nosuch"),
        (["Bad/Name"], "must be a DNS label"),
        (["x", "-o", "yaml"], "-o/--output: must be an output format, text or json"),
    ):
        res = CliRunner().invoke(cli, ["debug", "stacks", *args])
        assert res.exit_code == 2 and res.stdout == "", (args, res.output)
        lines = res.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("kgen: error: ") and words in lines[0], (args, lines)
