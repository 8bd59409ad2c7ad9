"""The transcripts of README.md and docs/*.md are what real runs print: each is recorded by a scenario of
tests/transcript_lab.py (bench/transcripts re-records them: --local, the ssh lab, the Slurm lab), and a fresh
recording of the --local failure differs from the README's only in times, ids and PIDs."""

from __future__ import annotations

import re

import pytest
from transcript_lab import DOCS, block_names, blocks, differences, normalized, record


def test_every_marked_transcript_has_the_scenario_that_records_it():
    marked = blocks()
    assert set(marked) == set(block_names()), "a marked transcript without a scenario, or a scenario not shown"
    for name, (_, text) in marked.items():
        assert text.startswith("$ kgen "), f"{name}: a transcript starts with its first command"


LAB_BLOCK = re.compile(
    r"(?:^(<!-- transcript: [a-z0-9-]+ -->)\n)?^```\n(\$ kgen (launch|submit --kind slurm) .*?)^```$", re.M | re.S
)


def test_every_transcript_of_launch_and_slurm_submit_is_marked():
    """A new transcript of a lab run cannot be added by hand: it needs its scenario and its marker."""
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for m in LAB_BLOCK.finditer(text):
            assert m.group(1), f"{path.name}: the transcript starting {m.group(2).splitlines()[0]!r} is not marked"


def test_times_ids_and_pids_do_not_count_but_words_do():
    shown = (
        "$ kgen status t3\n"
        "RANKS  HOST            STATE   PID    LAST LINE\n"
        "0-1    localhost (vm)  Failed  29631  [1] rank 1/4 step 30 loss 0.0323\n"
        "Failed: rank 3 at 10:29:06; 1 node stopped by fail-stop (exit 5) in the same second\n"
        "kgen: pre-flight passed in 0.1s; master 127.0.0.1:49487 (node 0 on localhost)\n"
        "Slurm job 1: RUNNING, +14.4s\n"
    )
    again = (
        "$ kgen status t3\n"
        "RANKS  HOST            STATE   PID     LAST LINE\n"
        "0-1    localhost (vm)  Failed  130022  [1] rank 1/4 step 40 loss 0.0211\n"
        "Failed: rank 3 at 11:02:59; 1 node stopped by fail-stop (exit 5) within 1 s\n"
        "kgen: pre-flight passed in 1.3s; master 127.0.0.1:50211 (node 0 on localhost)\n"
        "Slurm job 17: RUNNING, +2.0s\n"
    )
    assert differences(shown, again) == []
    clipped = "$ kgen status x\n4-5 gpu2 Unreachable connection refused (ssh: connect to host 127.0.153.156 po... -\n"
    assert differences(clipped, clipped.replace("127.0.153.156 po...", "127.0.3.4 port...")) == []
    assert differences(shown, again.replace("rank 3 at", "rank 2 at"))
    assert differences(shown, again.replace("Failed  130022", "Stopped 130022"))
    assert differences(shown, again.replace("$ kgen status t3", "$ kgen status t4"))
    assert normalized("generation 1 after 1 re-formation") != normalized("generation 2 after 1 re-formation")


def test_the_lines_of_kgen_logs_may_come_in_another_order_those_of_other_commands_may_not():
    logs = "$ kgen logs t5 --tail 1\n[node 0] a\n[node 1] b\n[exit 0]\n"
    assert differences(logs, "$ kgen logs t5 --tail 1\n[node 1] b\n[node 0] a\n[exit 0]\n") == []
    stop = "$ kgen stop t5\nrank 0: stopped\nrank 1: stopped\n[exit 0]\n"
    assert differences(stop, "$ kgen stop t5\nrank 1: stopped\nrank 0: stopped\n[exit 0]\n")


@pytest.mark.torch
@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("name", ["local-failure", "local-reform", "local-hang", "local-hang-follow"])
def test_the_local_transcripts_are_what_a_run_prints(tmp_path, name):
    """The README's and docs' --local runs again: the failure (2 nodes x 2 processes, rank 3 raises at step 35;
    about 15 s), the killed node, the re-formed group and the stop (about 15 s), the hang watchdog's run (about
    40 s) and the same followed, then a healthy run's stacks (about 50 s): the same lines but for times,
    ids and PIDs (`bench/transcripts --write local` re-records them; the ssh and Slurm labs' transcripts are
    re-recorded and checked by `bench/transcripts ssh slurm`, minutes of lab time)."""
    fresh = record(name, tmp_path)[name]
    diff = differences(blocks()[name][1], fresh)
    assert not diff, f"the README's transcript {name} differs from a fresh run:\n" + "\n".join(diff)


def test_the_transcripts_of_kgen_alone_are_what_it_prints(tmp_path):
    """render's one-line errors (README) and lint on a hand-written sbatch script (docs/slurm.md): no process but
    kgen's, a second or two."""
    for name, fresh in record("no-run", tmp_path).items():
        diff = differences(blocks()[name][1], fresh)
        assert not diff, f"the transcript {name} differs from a fresh run:\n" + "\n".join(diff)
