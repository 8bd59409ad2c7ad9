"""A lost node costs seconds, the group re-forms in place (real torch, gloo, local pods).

Every test renders a CPU Job with the real CLI, runs it as local pods (podharness.py) with a
training script that checkpoints every step (ckptloop.py), injects a fault mid-run and plays the
Job controller: a pod that exits is replaced by a new pod with the same index after
REPLACEMENT_DELAY seconds (0 here; on a cluster add the controller's first back-off step, 10 s).
The final result must equal an undisturbed run's. `-s` prints the time from the fault to every
rank training again ("reform" lines, also collected by bench/reform).
"""

from __future__ import annotations

import json
import re
import time

import pytest
from podharness import CKPTLOOP, free_port_pair, render_cpu_job

pytestmark = pytest.mark.torch

REPLACEMENT_DELAY = 0.0
BOUND = 30.0  # from the loss of a pod to every rank training again


def expected_total(steps: int, world: int) -> float:
    return sum(world * (world + 1) / 2 + world * s for s in range(steps))


def start_run(cluster, tmp_path, name, nodes=3, steps=60, sets=(), sleep=0.15, extra=()):
    port = free_port_pair()
    ckpt = tmp_path / "ckpt.json"
    cmd = [str(CKPTLOOP), "--steps", str(steps), "--sleep", str(sleep), "--ckpt", str(ckpt), *extra]
    manifest = render_cpu_job(name, nodes, "job", port, command=cmd, nproc=1, sets=("timeouts.heartbeat=5", *sets))
    c = cluster(manifest)
    c.start()
    return c, ckpt


def steps_seen(c, gen: int) -> int:
    return len(re.findall(rf"rank=\d+ step \d+ gen={gen}\b", c.logs()))


def wait_training(c, gen: int, timeout: float, nodes: int) -> float | None:
    """Until every rank has done a step in generation `gen`; returns the time.time() of that."""
    rx = re.compile(rf"KGEN_EVT (\S+) rank=(\d+) step \d+ gen={gen}\b")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        first: dict[int, float] = {}
        for t, r in rx.findall(c.logs()):
            first.setdefault(int(r), float(t))
        if len(first) == nodes:
            return max(first.values())
        time.sleep(0.1)
    return None


def replace_when_exited(c, index: int, timeout: float = 40.0):
    pod = c.pods[index]
    assert pod.wait(timeout) is not None, f"pod {index} did not exit\n" + c.logs()
    return c.replace(index, REPLACEMENT_DELAY)


def finish_and_check(c, ckpt, steps: int, nodes: int, timeout: float = 120.0) -> None:
    codes = c.wait_all(timeout)
    assert codes == [0] * nodes, c.logs()
    state = json.loads(ckpt.read_text())
    assert state["step"] == steps, c.logs()
    assert state["total"] == expected_total(steps, nodes)  # the same result as an undisturbed run
    for pod in c.pods:
        assert pod.log().rstrip().endswith("kgen-entrypoint: stopped: succeeded"), pod.log()[-2000:]


def report(what: str, nodes: int, t_fault: float, t_back: float | None) -> None:
    took = None if t_back is None else t_back - t_fault
    print(f"\nreform {what} N={nodes}: fault -> all ranks training again {took if took is None else f'{took:.1f}'} s")


def fault_and_reform(cluster, tmp_path, name, fault, victim, nodes=3, steps=30):
    c, ckpt = start_run(cluster, tmp_path, name, nodes, steps)
    assert wait_training(c, 0, 120, nodes), c.logs()
    assert c.wait_for_log(r"rank=\d+ step 8 gen=0", nodes, 60), c.logs()
    t0 = time.time()
    getattr(c.pods[victim], fault)()
    replace_when_exited(c, victim)
    t1 = wait_training(c, 1, 60, nodes)
    report(f"{fault} node {victim}", nodes, t0, t1)
    assert t1 is not None and t1 - t0 < BOUND, c.logs()
    for i, pod in enumerate(c.pods):  # a survivor's next torchrun is its standby agent; the replacement's is new
        assert ("torchrun is the standby agent" in pod.log()) == (i != victim), pod.log()[-3000:]
    finish_and_check(c, ckpt, steps, nodes)
    return c


@pytest.mark.timeout(240)
@pytest.mark.parametrize("victim", [1, 0], ids=["worker", "master"])
def test_killed_pod_is_replaced_and_the_group_reforms(cluster, tmp_path, victim):
    c = fault_and_reform(cluster, tmp_path, f"rk{victim}", "kill", victim)
    assert c.retired[0].incarnation == 0 and c.pods[victim].incarnation == 1
    for pod in c.pods:
        if pod.index != victim:
            assert pod.incarnation == 0  # survivors stayed
            assert "re-forming" in pod.log()
            assert "KGEN_RDZV_ID" not in pod.log()
    assert re.search(r"rdzv-id=rk\d-\S+-g1 ", c.logs())


@pytest.mark.timeout(240)
@pytest.mark.parametrize("victim", [2, 0], ids=["worker", "master"])
def test_deleted_pod_sigterm_is_replaced_and_the_group_reforms(cluster, tmp_path, victim):
    c = fault_and_reform(cluster, tmp_path, f"rt{victim}", "term", victim)
    old = c.retired[0]
    assert old.returncode == 143  # podFailurePolicy: Ignore (replaced), not FailJob
    assert old.log().rstrip().endswith("kgen-entrypoint: stopped: signal SIGTERM")
    assert "received SIGTERM" in c.pods[1 if victim != 1 else 2].log()


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_frozen_worker_dropped_then_thawed_learns_it_is_stale_and_is_replaced(cluster, tmp_path):
    nodes, steps = 3, 30
    c, ckpt = start_run(cluster, tmp_path, "rfz", nodes, steps)
    assert c.wait_for_log(r"rank=\d+ step 8 gen=0", nodes, 120), c.logs()
    t0 = time.time()
    c.pods[1].freeze()
    # node 0 drops it after KGEN_HEARTBEAT_TIMEOUT and waits for a replacement; the survivors stay
    assert c.wait_for_log(r"node 1 silent for .* frozen or cut off", 1, 20, [c.pods[0]]), c.logs()
    dropped_after = time.time() - t0
    assert c.pods[0].running and c.pods[2].running
    time.sleep(3)
    c.pods[1].thaw()
    assert c.pods[1].wait(30) == ep_dropped(), c.logs()
    assert "was dropped from generation 0" in c.pods[1].log()
    assert c.pods[1].log().rstrip().splitlines()[-1].startswith("kgen-entrypoint: stopped: dropped from the group")
    replace_when_exited(c, 1)
    t1 = wait_training(c, 1, 60, nodes)
    report("freeze node 1 (thawed after ~8 s)", nodes, t0, t1)
    print(f"reform freeze: node 1 dropped {dropped_after:.1f} s after the freeze")
    assert dropped_after < 8.5
    finish_and_check(c, ckpt, steps, nodes)


def ep_dropped() -> int:
    return 76


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_frozen_for_good_fails_the_run_after_the_replacement_bound_naming_the_rank(cluster, tmp_path):
    c, _ = start_run(cluster, tmp_path, "rfg", 3, 400, sets=("reform.replacementTimeout=10",))
    assert c.wait_for_log(r"rank=\d+ step 5 gen=0", 3, 120), c.logs()
    t0 = time.time()
    c.pods[1].freeze()
    codes = c.wait_all(60, [c.pods[0], c.pods[2]])
    took = time.time() - t0
    print(f"\nreform frozen for good: run failed {took:.1f} s after the freeze with {codes} (bound 5 s + 10 s)")
    assert codes == [4, 4], c.logs()
    assert 14 < took < 30
    for pod in (c.pods[0], c.pods[2]):
        last = pod.log().rstrip().splitlines()[-1]
        assert last.startswith("kgen-entrypoint: stopped:") and "node rank(s) [1] did not come back" in last, last
        assert "KGEN_REPLACEMENT_TIMEOUT=10s" in last


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_replacement_that_never_comes_fails_the_run_bounded(cluster, tmp_path):
    c, _ = start_run(cluster, tmp_path, "rnc", 3, 400, sets=("reform.replacementTimeout=8",))
    assert c.wait_for_log(r"rank=\d+ step 5 gen=0", 3, 120), c.logs()
    t0 = time.time()
    c.pods[2].kill()
    codes = c.wait_all(60, c.pods[:2])
    took = time.time() - t0
    print(f"\nreform replacement never comes: run failed {took:.1f} s after the kill with {codes} (bound 8 s)")
    assert codes == [4, 4], c.logs()
    assert 7.5 < took < 20
    assert "node rank(s) [2] did not come back within KGEN_REPLACEMENT_TIMEOUT=8s" in c.pods[1].log()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_two_disruptions_in_a_row_then_the_limit(cluster, tmp_path):
    """Worker killed, then the master: two re-formations, each as fast as the first; a third
    disruption passes reform.maxReformations=2 and fails the run as a whole (exit 5)."""
    nodes, steps = 3, 400
    c, _ = start_run(cluster, tmp_path, "r2x", nodes, steps, sets=("reform.maxReformations=2",))
    assert c.wait_for_log(r"rank=\d+ step 5 gen=0", nodes, 120), c.logs()
    took = []
    for gen, victim in ((1, 1), (2, 0)):
        t0 = time.time()
        c.pods[victim].kill()
        replace_when_exited(c, victim)
        t1 = wait_training(c, gen, 60, nodes)
        report(f"disruption {gen} (kill node {victim})", nodes, t0, t1)
        assert t1 is not None and t1 - t0 < BOUND, c.logs()
        took.append(t1 - t0)
    assert "all 3 nodes connected after" in c.pods[0].log() and "generation 2" in c.pods[0].log()
    c.pods[2].kill()
    codes = c.wait_all(40, c.pods[:2])
    assert codes == [5, 5], c.logs()
    for pod in c.pods[:2]:
        assert "re-formation limit" in pod.log().rstrip().splitlines()[-1] or "KGEN_MAX_REFORMATIONS=2" in pod.log()


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_five_nodes_worker_killed(cluster, tmp_path):
    fault_and_reform(cluster, tmp_path, "r5k", "kill", 3, nodes=5, steps=30)


@pytest.mark.timeout(180)
def test_script_error_fails_the_run_fast_by_default(cluster, tmp_path):
    c, _ = start_run(cluster, tmp_path, "rse", 3, 400, extra=("--fail-at", "6", "--fail-rank", "1"))
    codes = c.wait_all(150)
    # Node 1 has the bug; node 2's torchrun fails too, a moment later, of the lost peer (gloo: "Connection
    # closed by peer"). Node 0 names the node whose report came first (within the 0.1 s of torchrun's monitor:
    # either), and that node exits its own code 1 (FailJob); what each worker said is in its node's failure
    # record, from which `kgen status` names rank 1 as the cause and rank 2 as a consequence (tests/test_errors.py).
    blamed = codes.index(1) if codes.count(1) == 1 else None
    assert blamed in (1, 2) and codes[0] == 5 and codes.count(5) == 2, (codes, c.logs())
    assert c.pods[blamed].log().rstrip().endswith("kgen-entrypoint: stopped: torch failed with code 1")
    assert f"node {blamed}'s torchrun exited with code 1" in c.pods[0].log().rstrip().splitlines()[-1]
    assert '"peer": false, "rank": 1' in c.pods[1].log()  # node 1's record: its own exit, no peer error
    assert "gen=1" not in c.logs()  # never retried


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_script_error_reforms_when_values_say_so(cluster, tmp_path):
    nodes, steps = 3, 20
    c, ckpt = start_run(
        cluster,
        tmp_path,
        "rsr",
        nodes,
        steps,
        sets=("reform.onScriptError=reform",),
        extra=("--fail-at", "6", "--fail-rank", "2", "--fail-once"),
    )
    finish_and_check(c, ckpt, steps, nodes, timeout=200)
    # node 2 has the bug, node 1 fails of the lost peer a moment later: node 0 names the first report (either)
    assert re.search(r"script failed: node [12]'s torchrun exited with code 1", c.pods[0].log()), c.pods[0].log()
    assert all(p.incarnation == 0 for p in c.pods)  # nobody was replaced: the group re-formed in place


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_bare_metal_node_restarted_by_hand_rejoins(tmp_path):
    """No Kubernetes: three plain processes given the five variables and KGEN_SECRET_FILE; node 2 is
    killed and started again by hand (as systemd would), and the group re-forms."""
    import os
    import subprocess
    import sys

    from podharness import REPO, write_secret

    port = free_port_pair()
    secret = write_secret(tmp_path)
    ckpt = tmp_path / "ckpt.json"
    entry = REPO / "entrypoint" / "kgen_entrypoint.py"
    steps = 30
    cmd = [sys.executable, str(entry), "--", str(CKPTLOOP), "--steps", str(steps), "--sleep", "0.15"]
    cmd += ["--ckpt", str(ckpt)]
    procs: dict[int, subprocess.Popen] = {}
    logs = []

    def start(rank: int) -> None:
        env = {
            "PATH": f"{os.path.dirname(sys.executable)}:/usr/bin:/bin",
            "NNODES": "3",
            "NPROC_PER_NODE": "1",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "NODE_RANK": str(rank),
            "KGEN_SECRET_FILE": secret,
            "GLOO_SOCKET_IFNAME": "lo",
        }
        path = tmp_path / f"node{rank}.{len(logs)}.log"
        logs.append(path)
        with open(path, "w") as log:
            procs[rank] = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def text() -> str:
        return "".join(p.read_text() for p in logs)

    try:
        for rank in (0, 1, 2):
            start(rank)
        deadline = time.monotonic() + 120
        while len(re.findall(r"step 8 gen=0", text())) < 3 and time.monotonic() < deadline:
            time.sleep(0.2)
        t0 = time.time()
        os.killpg(procs[2].pid, 9)
        procs[2].wait(10)
        start(2)
        codes = [procs[r].wait(150) for r in (0, 1, 2)]
    finally:
        for p in procs.values():
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()
    back = [float(t) for t in re.findall(r"KGEN_EVT (\S+) rank=\d+ step \d+ gen=1\b", text())]
    print(f"\nreform bare metal restart N=3: fault -> first step of generation 1 after {min(back) - t0:.1f} s")
    assert codes == [0, 0, 0], text()
    state = json.loads(ckpt.read_text())
    assert state == {"step": steps, "total": expected_total(steps, 3)}


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_frozen_master_thawed_knows_it_was_dropped_and_its_replacement_takes_over(cluster, tmp_path):
    nodes, steps = 3, 30
    c, ckpt = start_run(cluster, tmp_path, "rfm", nodes, steps)
    assert c.wait_for_log(r"rank=\d+ step 8 gen=0", nodes, 120), c.logs()
    t0 = time.time()
    c.pods[0].freeze()
    assert c.wait_for_log(r"node 0 silent for .* frozen or cut off", 2, 20, c.pods[1:]), c.logs()
    c.pods[0].thaw()
    assert c.pods[0].wait(30) == ep_dropped(), c.logs()
    assert "this node was frozen for" in c.pods[0].log()
    replace_when_exited(c, 0)
    t1 = wait_training(c, 1, 60, nodes)
    report("freeze node 0 (thawed after ~6 s)", nodes, t0, t1)
    assert t1 is not None, c.logs()
    finish_and_check(c, ckpt, steps, nodes)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_statefulset_only_the_lost_pod_restarts(cluster, tmp_path):
    """restartPolicy Always: the kubelet restarts the killed container in place (played here by a
    new pod with the same name); the survivors never exit, so they never enter CrashLoopBackOff."""
    nodes, steps = 3, 30
    port = free_port_pair()
    ckpt = tmp_path / "ckpt.json"
    cmd = [str(CKPTLOOP), "--steps", str(steps), "--sleep", "0.15", "--ckpt", str(ckpt)]
    c = cluster(render_cpu_job("rss", nodes, "statefulset", port, command=cmd, nproc=1))
    c.start()
    assert c.wait_for_log(r"rank=\d+ step 8 gen=0", nodes, 120), c.logs()
    t0 = time.time()
    c.pods[2].kill()
    replace_when_exited(c, 2)
    t1 = wait_training(c, 1, 60, nodes)
    report("statefulset kill node 2", nodes, t0, t1)
    assert t1 is not None and t1 - t0 < BOUND, c.logs()
    hold = "run succeeded; holding idle"
    assert c.wait_for_log(hold, nodes, 120), c.logs()
    assert [p.incarnation for p in c.pods] == [0, 0, 1]
    state = json.loads(ckpt.read_text())
    assert state == {"step": steps, "total": expected_total(steps, nodes)}
    for pod in c.pods:
        pod.term()
    assert c.wait_all(30) == [0] * nodes, c.logs()
