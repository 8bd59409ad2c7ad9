"""The health gate on real torch (gloo) between test hosts in network namespaces (netlab.py): every node is
an entrypoint in a namespace of its own behind one bridge. A healthy group passes within 10 s with one ok
line per node; a node whose link is throttled (`tc tbf`, 20 Mbit/s: this kernel has no netem) is named,
and with fail the run stops before the training script's first step (its marker file never appears) with
exit 78 on every node; a node whose gate never answers is named within the gate's bound; off runs no gate.
`-s` prints the gate's time ("health gate N=3 ...")."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from netlab import NetLab, supported

pytestmark = [pytest.mark.torch, pytest.mark.slow]

ENTRYPOINT = Path(__file__).resolve().parents[2] / "entrypoint" / "kgen_entrypoint.py"
TRAIN = """import os
open(os.path.join(os.environ["MARKS"], "step" + os.environ["RANK"]), "w").write("first step")
print("first step of rank", os.environ["RANK"], flush=True)
"""
THROTTLE = "tbf rate 20mbit burst 16kb latency 200ms"  # what node 2 sends: ~100 ms per 256 KiB round trip
HANG_GATE = "import os, time\nif 'KGEN_HEALTH' in os.environ:\n    time.sleep(3600)\n"  # a gate that never answers


@pytest.fixture
def lab():
    reason = supported()
    if reason:
        pytest.skip(reason)
    made: list[NetLab] = []
    yield lambda n: made.append(NetLab(n)) or made[-1]
    for m in made:
        m.close()


def run_group(lab: NetLab, tmp_path: Path, n: int, gate: str, extra: dict | None = None, timeout: float = 90):
    """Every node's entrypoint in its namespace; -> (exit codes, logs, ranks that wrote their first step)."""
    (tmp_path / "train.py").write_text(TRAIN)
    secret = tmp_path / "secret"
    secret.write_text("a-test-secret-of-enough-length-0123456789")
    secret.chmod(0o600)
    marks = tmp_path / "marks"
    marks.mkdir()
    procs, logs = [], [tmp_path / f"node{i}.log" for i in range(n)]
    for i in range(n):
        env = dict(os.environ, NNODES=str(n), NODE_RANK=str(i), NPROC_PER_NODE="1", MASTER_ADDR=lab.addr(0),
                   MASTER_PORT="29500", KGEN_SECRET_FILE=str(secret), KGEN_HEALTH_GATE=gate, MARKS=str(marks),
                   GLOO_SOCKET_IFNAME="eth0", PYTHONWARNINGS="ignore", **(extra or {}).get(i, {}))  # fmt: skip
        with open(logs[i], "w") as out:
            argv = lab.argv(i, [sys.executable, str(ENTRYPOINT), "--", str(tmp_path / "train.py")])
            procs.append(subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True))
    deadline, codes = time.monotonic() + timeout, []
    try:
        for p in procs:
            codes.append(p.wait(max(1, deadline - time.monotonic())))
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    texts = [log.read_text(errors="replace") for log in logs]
    return codes, texts, sorted(int(f.name[4:]) for f in marks.iterdir())


def health_lines(log: str) -> list[str]:
    return re.findall(r"kgen health: (.*)", log)


def gate_time(log: str) -> float:
    return float(re.search(r"health gate passed in ([\d.]+)s", log).group(1))  # type: ignore[union-attr]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("n", [2, 3])
def test_a_healthy_group_passes_within_10_s_with_an_ok_line_per_node(lab, tmp_path, n):
    codes, logs, stepped = run_group(lab(n), tmp_path, n, "warn")
    assert codes == [0] * n, logs
    lines = health_lines(logs[0])
    assert [ln.split(":")[0] for ln in lines] == [f"node {r}" for r in range(n)], logs[0]
    assert all(": ok " in ln for ln in lines), lines
    for r in range(1, n):  # every other node logs its own line
        assert health_lines(logs[r]) == [lines[r]], logs[r]
    took = gate_time(logs[0])
    print(f"\nhealth gate N={n} healthy: {took:.1f} s on node 0")
    assert took <= 10
    assert stepped == list(range(n))


@pytest.mark.timeout(240)
def test_a_throttled_node_is_named_and_fail_stops_the_run_before_the_first_step(lab, tmp_path):
    net = lab(3)
    net.sh(net.hosts[2], f"tc qdisc add dev eth0 root {THROTTLE}")
    t0 = time.monotonic()
    codes, logs, stepped = run_group(net, tmp_path, 3, "fail")
    print(f"\nhealth gate N=3, node 2 throttled: the run ended after {time.monotonic() - t0:.1f} s")
    assert codes == [78, 78, 78], logs
    assert stepped == [], logs  # no training script started anywhere
    lines = health_lines(logs[0])
    assert lines[2].startswith("node 2: ") and "slower than the median (links to nodes 0, 1:" in lines[2], lines
    assert lines[0].startswith("node 0: ok") and lines[1].startswith("node 1: ok"), lines
    for log in logs:
        assert log.rstrip().splitlines()[-1].startswith("kgen-entrypoint: stopped: "), log[-600:]
        assert "health gate: node 2: " in log.rstrip().splitlines()[-1]


@pytest.mark.timeout(240)
def test_warn_names_the_throttled_node_and_trains(lab, tmp_path):
    net = lab(3)
    net.sh(net.hosts[2], f"tc qdisc add dev eth0 root {THROTTLE}")
    codes, logs, stepped = run_group(net, tmp_path, 3, "warn")
    assert codes == [0, 0, 0], logs
    assert stepped == [0, 1, 2]
    assert "slower than the median" in health_lines(logs[0])[2], logs[0]


@pytest.mark.timeout(240)
def test_a_gate_that_never_answers_is_bounded_and_names_the_node(lab, tmp_path):
    hang = tmp_path / "hang"
    hang.mkdir()
    (hang / "sitecustomize.py").write_text(HANG_GATE)  # node 1's gate worker sleeps before it reaches the store
    extra = {r: {"KGEN_HEALTH_TIMEOUT": "8"} for r in range(3)}
    extra[1]["PYTHONPATH"] = str(hang)
    t0 = time.monotonic()
    codes, logs, stepped = run_group(lab(3), tmp_path, 3, "fail", extra)
    took = time.monotonic() - t0
    print(f"\nhealth gate N=3, node 1's gate silent: the run ended after {took:.1f} s (KGEN_HEALTH_TIMEOUT 8 s)")
    assert codes == [78, 78, 78], logs
    assert stepped == []
    lines = health_lines(logs[0])
    assert lines[1] == "node 1: no answer within 8s (stuck in the store)", lines
    assert lines[0] == "node 0: got past the store", lines
    assert took < 8 + 5 + 15  # the bound, the kill's margin, start-up


@pytest.mark.timeout(180)
def test_off_runs_no_gate(lab, tmp_path):
    codes, logs, stepped = run_group(lab(2), tmp_path, 2, "off")
    assert codes == [0, 0] and stepped == [0, 1], logs
    assert not any("health gate (" in log or "kgen health" in log for log in logs), logs


@pytest.mark.timeout(180)
def test_the_pod_copy_runs_the_gate_from_rendered_values(cluster):
    """Pods made from `kgen render --set health.gate=fail` (the pod copy of the entrypoint, loopback): the gate
    passes with an ok line per node and the training runs."""
    from podharness import TRAINLOOP, free_port_pair, render_cpu_job

    manifest = render_cpu_job("gatep", 2, "job", free_port_pair(), command=[str(TRAINLOOP)], nproc=1,
                              sets=("health.gate=fail",))  # fmt: skip
    c = cluster(manifest)
    assert {"name": "KGEN_HEALTH_GATE", "value": "fail"} in c.container["env"]
    c.start()
    assert c.wait_all(150) == [0, 0], c.logs()[-6000:]
    lines = health_lines(c.pods[0].log())
    assert [ln.split(":")[0] for ln in lines] == ["node 0", "node 1"] and all(": ok " in ln for ln in lines), lines
    assert "KGEN_EVT" in c.pods[1].log()
