"""A deliberate stop stops the whole group. Ctrl-C (SIGINT) on node 0 or on
a worker, or `kgen_entrypoint.py --stop` from a third shell, ends every node within seconds: exit 6
and the last line `kgen-entrypoint: stopped: stopped by user on <host>`. A lost node (SIGTERM, SIGKILL)
still re-forms (test_reform.py). Real torch (gloo), local pods or plain processes; `-s` prints times.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest
from podharness import REPO, TRAINLOOP, free_port_pair, render_cpu_job, write_secret

pytestmark = pytest.mark.torch

ENTRYPOINT = REPO / "entrypoint" / "kgen_entrypoint.py"
NODES = 3
BOUND = 10.0  # "within a few seconds": SIGTERM ends the training processes at once; 10 s on a loaded machine
LONG_RUN = [str(TRAINLOOP), "--steps", "3000", "--sleep", "0.1"]


def training_group(cluster, name: str, kind: str = "job"):
    c = cluster(render_cpu_job(name, NODES, kind, free_port_pair(), command=LONG_RUN, nproc=1))
    c.start()
    assert c.wait_for_log(r"rank=\d+ step 3\b", NODES, 120), c.logs()
    return c


def assert_all_stopped(c, t0: float, host: str, what: str) -> None:
    codes = c.wait_all(BOUND + 20)
    times = {p.index: None if p.exited_at is None else round(p.exited_at - t0, 2) for p in c.pods}
    print(f"\n{what}: every node exited {codes} after {times} s")
    assert codes == [6] * NODES, c.logs()
    for pod in c.pods:
        assert pod.exited_at - t0 < BOUND, c.logs()
        assert pod.log().rstrip().splitlines()[-1] == f"kgen-entrypoint: stopped: stopped by user on {host}"
        assert "re-forming" not in pod.log() and "gen=1" not in pod.log()
    assert len(c.retired) == 0  # nothing was replaced: a stop is not a lost node


@pytest.mark.timeout(200)
@pytest.mark.parametrize("victim", [0, 1], ids=["node0", "worker"])
def test_ctrl_c_on_a_node_stops_every_node(cluster, victim):
    c = training_group(cluster, f"ctrlc{victim}")
    t0 = time.time()
    os.kill(c.pods[victim].init_pid, signal.SIGINT)  # Ctrl-C in that node's terminal
    assert_all_stopped(c, t0, c.pods[victim].name, f"Ctrl-C on node {victim}")
    if victim:
        assert f"stop requested by user on {c.pods[victim].name} (node {victim})" in c.pods[0].log()


@pytest.mark.timeout(200)
def test_stop_from_a_third_shell_stops_every_node(cluster):
    c = training_group(cluster, "stop3")
    t0 = time.time()
    res = subprocess.run(
        [sys.executable, str(ENTRYPOINT), "--stop"], env=c.host_env(1), capture_output=True, text=True, timeout=60
    )
    host = socket.gethostname()
    assert res.returncode == 0, res.stderr
    assert "node 0 is stopping the group (2 other node(s) connected: [1, 2])" in res.stdout
    assert_all_stopped(c, t0, host, "--stop from a third shell")


@pytest.mark.timeout(200)
def test_stop_of_a_bare_metal_group_leaves_no_process_behind(tmp_path):
    """Plain processes (no PID namespace that would reap leftovers): after --stop, no training process
    of the run is left (the classic complaint about pdsh-style launchers)."""
    port = free_port_pair()
    secret = write_secret(tmp_path)
    marker = f"kgen-stop-{os.getpid()}-{port}"
    procs, logs = {}, {}
    base = {
        "PATH": f"{os.path.dirname(sys.executable)}:/usr/bin:/bin",
        "NNODES": str(NODES),
        "NPROC_PER_NODE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "KGEN_SECRET_FILE": secret,
        "GLOO_SOCKET_IFNAME": "lo",
        "PYTHONWARNINGS": "ignore",
    }
    try:
        for rank in range(NODES):
            logs[rank] = tmp_path / f"node{rank}.log"
            with open(logs[rank], "w") as log:
                procs[rank] = subprocess.Popen(
                    [sys.executable, str(ENTRYPOINT), "--", *LONG_RUN],
                    env={**base, "NODE_RANK": str(rank), "KGEN_TEST_MARKER": marker},
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
        deadline = time.monotonic() + 120
        steps = re.compile(r"step 3\b")
        while time.monotonic() < deadline and sum(len(steps.findall(f.read_text())) for f in logs.values()) < 6:
            time.sleep(0.2)
        assert len(run_processes(marker)) >= NODES * 4  # entrypoint, torchrun and 2 workers per node
        t0 = time.monotonic()
        res = subprocess.run(
            [sys.executable, str(ENTRYPOINT), "--stop"], env=base, capture_output=True, text=True, timeout=60
        )
        assert res.returncode == 0, res.stderr
        codes = [procs[r].wait(BOUND + 20) for r in range(NODES)]
        took = time.monotonic() - t0
        left = run_processes(marker)
    finally:
        for p in procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        for pid in run_processes(marker):
            os.kill(pid, signal.SIGKILL)
    print(f"\nbare metal --stop: every node exited {codes} within {took:.1f} s; processes left: {left}")
    assert codes == [6] * NODES and took < BOUND
    assert left == []
    for rank in range(NODES):
        last = logs[rank].read_text().rstrip().splitlines()[-1]
        assert last == f"kgen-entrypoint: stopped: stopped by user on {socket.gethostname()}"


def run_processes(marker: str) -> list[int]:
    """Every live process that inherited the run's marker variable (entrypoints, torchrun, workers)."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as fh:
                if f"KGEN_TEST_MARKER={marker}".encode() not in fh.read().split(b"\0"):
                    continue
            with open(f"/proc/{name}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    continue
        except OSError:
            continue
        out.append(int(name))
    return out


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_a_stopped_statefulset_holds_idle_instead_of_training_again(cluster):
    """restartPolicy Always would restart a pod that exits 6 and train again: the pods hold idle
    (like after success) until they are deleted (`kgen stop`), then exit 6 with the stop's line."""
    c = training_group(cluster, "stopss", kind="statefulset")
    os.kill(c.pods[2].init_pid, signal.SIGINT)
    hold = "stopped by user; holding idle so restartPolicy Always does not retrain"
    assert c.wait_for_log(re.escape(hold), NODES, BOUND + 10), c.logs()
    time.sleep(1)
    assert all(p.running for p in c.pods)
    for pod in c.pods:
        pod.term()  # kgen stop / kubectl delete
    assert c.wait_all(30) == [6] * NODES, c.logs()
    for pod in c.pods:
        assert pod.log().rstrip().endswith(f"kgen-entrypoint: stopped: stopped by user on {c.pods[2].name}")
