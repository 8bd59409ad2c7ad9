"""What a failed process said: one table for the entrypoint's ErrorScan (it writes the failure record)
and kgen.runs.errors.ErrorScan (it reads logs without one); the records, the log scan, and the fold of
torchrun's shutdown report (kgen.runs.logtext)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from kgen.runs import errors as E
from kgen.runs import logtext as T

ENTRYPOINT = Path(__file__).resolve().parents[1] / "entrypoint" / "kgen_entrypoint.py"
_spec = importlib.util.spec_from_file_location("kgen_entrypoint_errors", ENTRYPOINT)
ep = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ep)  # type: ignore[union-attr]

# lines of one process's stderr -> (type, message, where) of its last traceback, and its last other line
TABLE = [
    (
        "a traceback",
        ["Traceback (most recent call last):", '  File "/w/train.py", line 12, in <module>', "    boom()",
         '  File "/w/lib.py", line 3, in boom', "    raise RuntimeError('x')", "RuntimeError: deliberate failure"],
        ("RuntimeError", "deliberate failure", "/w/lib.py:3"), "",
    ),
    (
        "torch's [rankN]: prefix (its excepthook)",
        ["[rank3]: Traceback (most recent call last):", '[rank3]:   File "/w/t.py", line 9, in <module>',
         "[rank3]:     dist.all_reduce(t)", "[rank3]: RuntimeError: Connection closed by peer [127.0.0.1]:1"],
        ("RuntimeError", "Connection closed by peer [127.0.0.1]:1", "/w/t.py:9"), "",
    ),
    (
        "a SyntaxError has no Traceback line",
        ['  File "/w/t.py", line 3', "    x = (", "        ^", "SyntaxError: '(' was never closed"],
        ("SyntaxError", "'(' was never closed", "/w/t.py:3"), "",
    ),
    (
        "chained exceptions: the last one",
        ["Traceback (most recent call last):", '  File "/w/a.py", line 1, in <module>', "KeyError: 'k'", "",
         "During handling of the above exception, another exception occurred:", "",
         "Traceback (most recent call last):", '  File "/w/a.py", line 4, in <module>',
         "ValueError: no k"],
        ("ValueError", "no k", "/w/a.py:4"), "",
    ),
    (
        "python -m of a missing module: no traceback, the last line without the interpreter's path",
        ["/opt/venv/bin/python3: No module named nosuchmod"], None, "No module named nosuchmod",
    ),
    (
        "an exception without a message, then more output",
        ["Traceback (most recent call last):", '  File "/w/t.py", line 2, in <module>', "KeyboardInterrupt",
         "bye"],
        ("KeyboardInterrupt", "", "/w/t.py:2"), "bye",
    ),
    (
        "a dotted type, and a message line that goes on (the first line is kept)",
        ["Traceback (most recent call last):", '  File "/w/t.py", line 5, in <module>',
         "torch.distributed.DistBackendError: NCCL error in: x", "more detail"],
        ("torch.distributed.DistBackendError", "NCCL error in: x", "/w/t.py:5"), "more detail",
    ),
    ("plain output", ["step 1 loss 0.5", "step 2 loss 0.4"], None, "step 2 loss 0.4"),
]  # fmt: skip


@pytest.mark.parametrize("lines,error,last", [c[1:] for c in TABLE], ids=[c[0] for c in TABLE])
@pytest.mark.parametrize("scan", [E.ErrorScan, ep.ErrorScan], ids=["kgen", "entrypoint"])
def test_error_scan_table(scan, lines, error, last):
    s = scan()
    for line in lines:
        s.feed(line)
    got = s.error[:3] if s.error else None
    assert got == error
    assert s.last == last


def test_records_in_a_log_and_a_termination_message():
    line = E.FAILURE_MARK + json.dumps(
        {"rank": 9, "local_rank": 1, "exit": -9, "error": "", "message": "killed by SIGKILL", "where": "",
         "source": "exit status", "time": "2026-01-01T00:00:01.5Z", "peer": False,
         "others": [{"rank": 8, "peer": True}]}
    )  # fmt: skip
    recs = E.records(f"x\n[kgen node 1 00:00:02 +1s] worker failure: rank 9 ...\n{line}\ny\n", node=1)
    assert len(recs) == 1
    r = recs[0]
    assert (r.rank, r.node, r.local_rank, r.exit, r.peer) == (9, 1, 1, -9, False)
    assert r.text() == "killed by SIGKILL" and r.others == [{"rank": 8, "peer": True}]
    assert r.time is not None and r.time.microsecond == 500000
    assert E.records(E.FAILURE_MARK + "{not json") == [] and E.records(E.FAILURE_MARK + "[1]") == []


def test_scan_log_per_process_and_launcher_tracebacks_are_not_errors():
    log = "\n".join(
        [
            "[rank 2] Traceback (most recent call last):",
            '[rank 2]   File "/w/t.py", line 9, in <module>',
            "[rank 2] RuntimeError: Connection reset by peer",
            "[rank 3] Traceback (most recent call last):",
            '[rank 3]   File "/w/t.py", line 12, in <module>',
            "[rank 3] ValueError: bad batch",
            "Traceback (most recent call last):",  # torchrun's own, after kgen's SIGTERM
            '  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/run.py", line 1032, in <module>',
            "torch.distributed.elastic.multiprocessing.api.SignalException: Process 9 got signal: 15",
        ]
    )
    found = {e.rank: e for e in E.scan_log(log, node=1)}
    assert set(found) == {2, 3}
    assert found[2].peer and not found[3].peer
    assert E.node_error(log, 1).rank == 3  # the process that failed on its own


def test_fold_keeps_other_tracebacks_and_passes_process_lines_through():
    lines = [
        "W1122 15:04:52.820000 9 torch/distributed/elastic/agent/server/api.py:753] Received 15 death signal, "
        "shutting down workers",
        "[rank 0] a worker's line while torchrun reports",
        "Traceback (most recent call last):",
        '  File "<frozen runpy>", line 198, in _run_module_as_main',
        "torch.distributed.elastic.multiprocessing.api.SignalException: Process 9 got signal: 15",
        "Traceback (most recent call last):",
        '  File "/w/t.py", line 1, in <module>',
        "ValueError: a traceback that is not torchrun's shutdown",
        "after",
    ]
    got = T.shown([(i, line) for i, line in enumerate(lines)])
    assert got == [
        (1, 0, "a worker's line while torchrun reports"),
        (4, None, T.collapsed_line(15, 4)),
        (5, None, "Traceback (most recent call last):"),
        (6, None, '  File "/w/t.py", line 1, in <module>'),
        (7, None, "ValueError: a traceback that is not torchrun's shutdown"),
        (8, None, "after"),
    ]
    assert [t for _, _, t in T.shown([(0, line) for line in lines], full=True)][2] == lines[2]


def test_pump_writes_whole_lines_with_global_ranks_and_makes_the_record(tmp_path, capfd):
    """The entrypoint's Pump, without torch: torchrun's layout of worker files (a partial line completed later,
    a traceback on local rank 1), and torchrun's own summary on its stderr pipe."""
    import subprocess
    import sys
    import time

    attempt = tmp_path / "run_x" / "attempt_0"
    for lr in (0, 1):
        (attempt / str(lr)).mkdir(parents=True)
        (attempt / str(lr) / "stdout.log").write_text("")
        (attempt / str(lr) / "stderr.log").write_text("")
    summary = "  rank      : 5 (local_rank: 1)\\n  exitcode  : 1 (pid: 7)\\n"
    proc = subprocess.Popen(
        [sys.executable, "-c", f"import sys,time; time.sleep(0.5); sys.stderr.write('{summary}')"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    pump = ep.Pump(proc, str(tmp_path), base_rank=4)
    with open(attempt / "0" / "stdout.log", "a") as out0, open(attempt / "1" / "stderr.log", "a") as err1:
        out0.write("step 1 lo")
        out0.flush()
        time.sleep(0.3)  # a line's newline comes later: it is held, not cut
        out0.write("ss 0.5\n")
        out0.flush()
        err1.write("[rank5]: Traceback (most recent call last):\n")
        err1.write('[rank5]:   File "/w/t.py", line 7, in <module>\n[rank5]: ValueError: bad\n')
    proc.wait()
    assert pump.drained.wait(10)
    rec = pump.failure()
    pump.finish()
    out, err = capfd.readouterr()
    assert "[rank 4] step 1 loss 0.5\n" in out
    assert "[rank 5] Traceback (most recent call last):\n" in err and "[rank 5] ValueError: bad\n" in err
    assert "  rank      : 5 (local_rank: 1)\n" in err  # torchrun's own lines, unprefixed
    assert rec["rank"] == 5 and rec["local_rank"] == 1 and rec["exit"] == 1
    assert (rec["error"], rec["message"], rec["where"], rec["source"]) == (
        "ValueError",
        "bad",
        "/w/t.py:7",
        "traceback",
    )
    assert not tmp_path.exists()  # the workers' files are removed with the pump


def test_pump_marks_the_node_s_workers_that_failed_the_same_way(tmp_path):
    """`-m` of a module whose import fails: both workers of the node raise the same: the record's others say
    so (`same`), and the verdict names both ranks together instead of one as the other's consequence."""
    import subprocess
    import sys

    attempt = tmp_path / "run_x" / "attempt_0"
    for lr in (0, 1):
        (attempt / str(lr)).mkdir(parents=True)
        (attempt / str(lr) / "stdout.log").write_text("")
        (attempt / str(lr) / "stderr.log").write_text(
            'Traceback (most recent call last):\n  File "/w/m.py", line 2, in <module>\n'
            "ModuleNotFoundError: No module named 'dep'\n"
        )
    proc = subprocess.Popen([sys.executable, "-c", "pass"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    pump = ep.Pump(proc, str(tmp_path), base_rank=2)
    proc.wait()
    assert pump.drained.wait(10)
    rec = pump.failure()
    pump.finish()
    assert rec["rank"] == 2 and rec["others"] == [
        {"rank": 3, "error": "ModuleNotFoundError", "peer": False, "same": True}
    ]
    err = E.parse_record(json.dumps(rec), node=1)
    from kgen.runs.records import Failure
    from kgen.runs.rootcause import root_cause

    f = Failure(1, "", "n", 1, "", "the training script failed", "cause", err.time, "exit", error=err, host="h")
    rc = root_cause([f], {}, 2, {1: ["h"]}, by_host=True, nproc=2)
    assert rc.ranks == [2, 3] and rc.consequences == []
