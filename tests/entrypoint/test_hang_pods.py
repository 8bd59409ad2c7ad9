"""The hang watchdog in pods made from real `kgen render` output (the pod copy of the entrypoint: no comments
or docstrings, one space per indentation level): values hang.timeout reaches the entrypoint, rank 3 of 2
pods x 2 processes waits on a queue while the others wait in the next all_reduce; node 0's log names rank 3
and its frame, and every pod exits 77."""

from __future__ import annotations

from pathlib import Path

import pytest
from podharness import free_port_pair, render_cpu_job

pytestmark = pytest.mark.torch

HANGLOOP = Path(__file__).resolve().parent / "hangloop.py"
QUEUE_LINE = next(i + 1 for i, ln in enumerate(HANGLOOP.read_text().splitlines()) if "return batches.get()" in ln)


@pytest.mark.timeout(180)
def test_a_hang_in_rendered_pods_names_the_rank_and_every_pod_exits_77(cluster):
    port = free_port_pair()
    cmd = [str(HANGLOOP), "--stuck-rank", "3", "--stuck-at", "5"]
    c = cluster(render_cpu_job("hangp", 2, "job", port, command=cmd, nproc=2, sets=("hang.timeout=10",)))
    assert {"name": "KGEN_HANG_TIMEOUT", "value": "10"} in c.container["env"]
    c.start()
    codes = c.wait_all(150)
    log0 = c.pods[0].log()
    assert codes == [77, 77], c.logs()[-6000:]
    assert f"hang report: rank 3: queue.get at hangloop.py:{QUEUE_LINE} (the one that differs)" in log0, log0[-4000:]
    assert "hang report: ranks 0-2: distributed_c10d.all_reduce at hangloop.py:" in log0
    assert "kgen-entrypoint: hang: {" in log0  # the record kgen status reads
    assert "stack of rank 3 " in c.pods[1].log()  # node 1 logged its own ranks' stacks
