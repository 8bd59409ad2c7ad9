"""Real multi-node runs: `kgen render` output as local pods, real torch (gloo) on loopback.

Each test renders a CPU job with the real CLI and runs its pod template as N PID/mount namespaces
(see podharness.py). Times printed with -s are the measured fail-stop times.
"""

from __future__ import annotations

import re
import time

import pytest
from podharness import TRAINLOOP, free_port_pair, render_cpu_job

pytestmark = pytest.mark.torch

BOUND = 30.0  # the target: every survivor gone within 30 s of a fault (aim: 10 s)
LONG_RUN = [str(TRAINLOOP), "--steps", "3000", "--sleep", "0.1"]  # minutes: faults hit mid-run


def _exit_times(c, t0, pods):
    return {p.index: (p.returncode, None if p.exited_at is None else round(p.exited_at - t0, 2)) for p in pods}


@pytest.mark.timeout(150)
@pytest.mark.parametrize("kind, nodes", [("job", 2), ("statefulset", 2), ("job", 4), ("statefulset", 4)])
def test_smoke_test_all_ranks_join_and_all_reduce_is_right(cluster, kind, nodes):
    port = free_port_pair()
    c = cluster(render_cpu_job(f"sm{kind[0]}{nodes}", nodes, kind, port))  # default: --smoke-test
    assert c.container["args"] == ["--smoke-test"]
    t = time.monotonic()
    c.start()
    release_statefulset(c, 130)
    codes = c.wait_all(130)
    print(f"\n{kind} x{nodes}: all pods done in {time.monotonic() - t:.1f}s")
    assert codes == [0] * nodes, c.logs()
    logs = c.logs()
    world = nodes * 2
    for rank in range(world):
        assert f"[smoke rank {rank}/{world}] ok: backend gloo" in logs
    assert re.search(rf"kgen smoke-test: PASS world_size={world} backend=gloo .* busbw [0-9.]+ GB/s", logs)
    src = "JOB_COMPLETION_INDEX" if kind == "job" else "KGEN_POD_INDEX"
    for i, pod in enumerate(c.pods):
        assert f"node {i}/{nodes} (rank from {src}={i})" in pod.log()


HOLD = "run succeeded; holding idle so restartPolicy Always does not retrain; kgen stop NAME to remove"


def release_statefulset(c, timeout: float) -> None:
    """StatefulSet pods hold idle after a successful run: check, then stop them as
    `kgen stop` / a scale-down would (SIGTERM); they exit 0."""
    if c.kind != "StatefulSet":
        return
    assert c.wait_for_log(re.escape(HOLD), c.nodes, timeout), c.logs()
    for pod in c.pods:
        pod.term()


@pytest.mark.timeout(120)
def test_statefulset_holds_idle_after_success_and_never_trains_twice(cluster):
    port = free_port_pair()
    c = cluster(render_cpu_job("hold", 2, "statefulset", port, command=[str(TRAINLOOP)], nproc=1))
    c.start()
    assert c.wait_for_log(re.escape(HOLD), 2, 100), c.logs()
    time.sleep(3)
    assert all(p.running for p in c.pods), c.logs()  # restartPolicy Always would have restarted an exit
    for pod in c.pods:
        assert pod.log().count(HOLD) == 1
    assert len(re.findall(r"rank=\d+ done", c.logs())) == 2  # trained once
    for pod in c.pods:
        pod.term()
    assert c.wait_all(30) == [0, 0], c.logs()
    for pod in c.pods:
        assert pod.log().rstrip().endswith("kgen-entrypoint: stopped: succeeded")


@pytest.mark.timeout(120)
def test_statefulset_on_old_cluster_uses_hostname_ordinal(cluster):
    port = free_port_pair()
    c = cluster(render_cpu_job("old", 2, "statefulset", port, command=[str(TRAINLOOP)]), old_cluster=True)
    c.start()
    release_statefulset(c, 100)
    assert c.wait_all(100) == [0, 0], c.logs()
    assert "node 1/2 (rank from HOSTNAME=old-1)" in c.pods[1].log()
    assert len(re.findall(r"rank=\d+ done", c.logs())) == 4


@pytest.mark.timeout(150)
def test_master_starts_late_others_wait_and_succeed(cluster):
    port = free_port_pair()
    c = cluster(render_cpu_job("late", 3, "job", port, command=[str(TRAINLOOP)], master_wait=90))
    c.start(1, 2)
    time.sleep(12)  # past the first "still waiting" progress line (every 10 s)
    assert c.pods[1].running and c.pods[2].running, c.logs()
    t = time.monotonic()
    c.start(0)
    codes = c.wait_all(100)
    print(f"\nmaster 12 s late: all done {time.monotonic() - t:.1f}s after the master started")
    assert codes == [0, 0, 0], c.logs()
    log1 = c.pods[1].log()
    assert "still waiting for node 0" in log1 and "does not resolve" in log1  # DNS first
    assert re.search(r"node 0 reachable after ([1-9]\d)\.\ds", log1)  # the ~12 s, or more on a busy machine
    assert len(re.findall(r"rank=\d+ done", c.logs())) == 6


@pytest.mark.timeout(60)
def test_master_never_starts_others_exit_3_after_the_bound(cluster):
    port = free_port_pair()
    c = cluster(render_cpu_job("nomaster", 3, "job", port, master_wait=8))
    t = time.monotonic()
    c.start(1, 2)
    codes = c.wait_all(40, c.pods[1:])
    elapsed = time.monotonic() - t
    print(f"\nmaster never started: workers exited {codes} after {elapsed:.1f}s (bound 8 s)")
    assert codes == [3, 3], c.logs()
    assert 7.5 < elapsed < 20
    for pod in c.pods[1:]:
        assert "node 0 not reachable within KGEN_MASTER_WAIT_TIMEOUT=8s" in pod.log()
        assert "DNS: 'nomaster-0.nomaster' does not resolve" in pod.log()


def _fault_run(cluster, name, fault, victim, nodes=3):
    """Fail-stop with re-formation off (reform.maxReformations=0): every survivor exits 75 and the
    controller replaces the whole group. test_reform.py covers the default (survivors stay)."""
    port = free_port_pair()
    c = cluster(render_cpu_job(name, nodes, "job", port, command=LONG_RUN, sets=("reform.maxReformations=0",)))
    c.start()
    # mid-run: every rank has done a few all-reduce steps
    assert c.wait_for_log(r"rank=\d+ step 5(?!\d)", nodes * 2, 120), c.logs()
    t0 = time.time()
    getattr(c.pods[victim], fault)()
    survivors = [p for p in c.pods if p.index != victim]
    c.wait_all(BOUND + 30, survivors)
    times = _exit_times(c, t0, c.pods)
    worst = max((t for _, t in (times[p.index] for p in survivors) if t is not None), default=None)
    print(
        f"\n{fault} node {victim} of {nodes}: (exit code, seconds after the fault) per node "
        f"{times}; last survivor gone after {worst}s"
    )
    for p in survivors:
        assert p.returncode is not None, f"node {p.index} still running\n" + c.logs()
        assert p.returncode != 0, c.logs()
        assert p.exited_at - t0 < BOUND, c.logs()
    return c, t0, survivors


@pytest.mark.timeout(200)
@pytest.mark.parametrize("victim", [1, 0], ids=["worker", "master"])
def test_sigkill_pod_survivors_fail_stop(cluster, victim):
    _c, t0, survivors = _fault_run(cluster, f"kill{victim}", "kill", victim)
    for p in survivors:
        assert p.returncode == 75
        assert "FAIL-STOP:" in p.log()
        assert p.exited_at - t0 < 10


@pytest.mark.timeout(200)
@pytest.mark.parametrize("victim", [1, 0], ids=["worker", "master"])
def test_frozen_pod_survivors_fail_stop(cluster, victim):
    c, t0, survivors = _fault_run(cluster, f"frz{victim}", "freeze", victim)
    assert c.pods[victim].returncode is None  # still frozen, as a partitioned node would be
    for p in survivors:
        assert p.returncode == 75
        assert "silent for" in p.log() and "frozen or cut off" in p.log()
        # heartbeat timeout 5 s + teardown; the gloo default would be 30 min
        assert 3.5 < p.exited_at - t0 < 15  # silence is counted from the last heartbeat (<= 1 s before)


@pytest.mark.timeout(200)
@pytest.mark.parametrize("victim", [2, 0], ids=["worker", "master"])
def test_sigterm_pod_stops_promptly_rest_fail_stop(cluster, victim):
    c, t0, survivors = _fault_run(cluster, f"term{victim}", "term", victim)
    v = c.pods[victim]
    v.wait(30)
    assert v.returncode == 128 + 15, c.logs()
    assert v.exited_at - t0 < 10
    assert "received SIGTERM" in v.log()
    for p in survivors:
        assert p.returncode == 75
        assert "received SIGTERM" in p.log()  # the reason travels to every node


@pytest.mark.timeout(60)
def test_rank_beyond_nnodes_in_a_pod_exits_2(cluster):
    port = free_port_pair()
    c = cluster(render_cpu_job("badrank", 2, "job", port))
    c.start(2)  # a third pod of a 2-node job: completions and NNODES out of sync
    assert c.wait_all(30, [c.pods[2]]) == [2], c.logs()
    assert "node rank 2 (from JOB_COMPLETION_INDEX=2) is outside [0, NNODES=2)" in c.pods[2].log()


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "override, message",
    [
        ({"NNODES": None}, "NNODES is not set"),
        ({"NNODES": "2x"}, "NNODES='2x' is not an integer"),
    ],
)
def test_bad_pod_environment_exits_2(cluster, override, message):
    port = free_port_pair()
    c = cluster(render_cpu_job("badenv", 2, "job", port), env_overrides=override)
    c.start(1)
    assert c.wait_all(30, c.pods[1:]) == [2], c.logs()
    assert message in c.pods[1].log()
    assert "Traceback" not in c.pods[1].log()


@pytest.mark.timeout(120)
def test_bare_metal_two_nodes_with_only_the_five_variables_and_the_secret(tmp_path):
    """No Kubernetes, no harness: two plain processes given NNODES, NPROC_PER_NODE, MASTER_ADDR,
    MASTER_PORT and NODE_RANK by hand, and KGEN_SECRET_FILE (plus PATH) behave like pods."""
    import os
    import subprocess
    import sys

    from podharness import REPO, write_secret

    port = free_port_pair()
    secret = write_secret(tmp_path)
    entry = REPO / "entrypoint" / "kgen_entrypoint.py"
    procs = []
    try:
        for rank in (1, 0):  # the worker first: it waits for node 0
            env = {
                "PATH": f"{os.path.dirname(sys.executable)}:/usr/bin:/bin",
                "NNODES": "2",
                "NPROC_PER_NODE": "1",
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port),
                "NODE_RANK": str(rank),
                "KGEN_SECRET_FILE": secret,
            }
            log = open(tmp_path / f"node{rank}.log", "w")
            procs.append(
                subprocess.Popen(
                    [sys.executable, str(entry), "--", str(TRAINLOOP)],
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
            log.close()
            time.sleep(1)
        codes = [p.wait(100) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()
    logs = "".join((tmp_path / f"node{r}.log").read_text() for r in (0, 1))
    assert codes == [0, 0], logs
    assert "node 1/2 (rank from NODE_RANK=1)" in logs and "liveness port " + str(port + 1) in logs
    assert len(re.findall(r"rank=\d+ done", logs)) == 2


@pytest.mark.timeout(120)
def test_missing_worker_named_after_rdzv_timeout_and_visible_to_diagnose(cluster):
    import subprocess
    import sys

    from podharness import REPO

    port = free_port_pair()
    c = cluster(render_cpu_job("miss", 3, "job", port, command=LONG_RUN, sets=("timeouts.rendezvous=12",)))
    t = time.monotonic()
    c.start(0, 1)  # node 2 never comes
    assert c.wait_for_log(r"node 1 joined the liveness channel", 1, 30, [c.pods[0]]), c.logs()
    env = c.host_env(2)  # we run outside the pods' mount namespace
    res = subprocess.run(
        [sys.executable, str(REPO / "entrypoint" / "kgen_entrypoint.py"), "--diagnose"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert re.search(
        rf"PASS master liveness port: 127\.0\.0\.1:{port + 1} accepts; node 0's "
        r"entrypoint \(run miss-\S+\) has 1 of 2 peers, missing \[2\]",
        res.stdout,
    ), res.stdout
    codes = c.wait_all(60, c.pods[:2])
    elapsed = time.monotonic() - t
    print(f"\nworker never started: nodes 0 and 1 exited {codes} after {elapsed:.1f}s (bound 12 s)")
    # node 0 exits 4 (a hard failure: FailJob) and so does the node that had joined (told by node 0)
    assert codes == [4, 4], c.logs()
    assert 11 < elapsed < 32
    assert "node rank(s) [2] did not connect within KGEN_RDZV_TIMEOUT=12s" in c.pods[0].log()
    assert "node 0 ended the run: node rank(s) [2] did not connect" in c.pods[1].log()
    for pod in c.pods[:2]:
        assert pod.log().rstrip().splitlines()[-1].startswith("kgen-entrypoint: stopped: ")
