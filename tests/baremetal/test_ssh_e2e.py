"""kgen launch/status/logs/stop end to end through real OpenSSH servers (tests/baremetal/sshlab.py) and real
torch (gloo, CPU) on loopback, with the faults the issue lists: a crashed host, a frozen host, sshd dying
mid-run, the launcher killed right after launch, an unreachable host and a refused key at launch."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import TRAINLOOP
from sshlab import end_shared_connections, free_port_pair

pytestmark = [pytest.mark.torch, pytest.mark.slow]

RUN_PROCESS = re.compile(r"kgen_entrypoint\.py|torch\.distributed\.run|trainloop\.py|dump args\.py")


def code_dir(tmp_path: Path) -> Path:
    d = tmp_path / "code dir 'q'"
    d.mkdir()
    shutil.copy(TRAINLOOP, d / "trainloop.py")
    return d


def launch_args(lab, name: str, workdir: Path, port: int, *extra: str, hosts=None) -> list[str]:
    return [
        "launch",
        "--name",
        name,
        "--hosts",
        ",".join(hosts or lab.names),
        "--ssh-config",
        str(lab.ssh_config),
        "--python",
        sys.executable,
        "--workdir",
        str(workdir),
        "--port",
        str(port),
        "--connect-timeout",
        "3",
        *extra,
    ]


def wait_status(kgen, name: str, pred, timeout: float = 90.0) -> dict:
    deadline = time.monotonic() + timeout
    last: dict = {}
    while time.monotonic() < deadline:
        res = kgen("status", name, "-o", "json", timeout=60)
        if res.stdout.strip():
            last = json.loads(res.stdout)
            if pred(last):
                return last
        time.sleep(0.5)
    raise AssertionError(f"status never matched: {last.get('headline')}\n{json.dumps(last.get('rows'), indent=1)}")


def formed(v: dict) -> bool:
    return v["state"] == "running" and "the group formed" in v["headline"]


def run_processes(lab, i: int) -> list[str]:
    return [c for c in lab.processes(i) if RUN_PROCESS.search(c)]


@pytest.mark.timeout(240)
def test_three_hosts_launch_status_logs_crash_and_stop(lab, kgen, tmp_path):
    lab = lab(3)
    work = code_dir(tmp_path)
    port = free_port_pair()
    res = kgen(*launch_args(lab, "demo", work, port), "--", "trainloop.py", "--steps", "400", "--sleep", "0.1")
    assert res.returncode == 0, res.stderr
    assert "launched run demo on 3 host(s): 3 node(s) x 1 process(es)" in res.stdout
    assert "pre-flight passed" in res.stderr
    # every host's run directory: 0700, files 0600, the secret in a file, never on a command line
    secrets = set()
    for i, h in enumerate(lab.hosts):
        d = h.runs() / "demo" / f"node{i}"
        assert stat.S_IMODE(d.stat().st_mode) == 0o700
        for f in ("env", "secret", "node.json", "log", "pid", "kgen_entrypoint.py"):
            assert stat.S_IMODE((d / f).stat().st_mode) == 0o600, f
        env = json.loads((d / "env").read_text())
        assert env["KGEN_SECRET_FILE"] == str(d / "secret") and env["NODE_RANK"] == str(i)
        assert env["MASTER_ADDR"] == lab.hosts[0].addr  # where ssh reached host 0
        secrets.add((d / "secret").read_text().strip())
    (secret,) = secrets
    assert re.fullmatch(r"[0-9a-f]{64}", secret)

    v = wait_status(kgen, "demo", formed)
    assert [r["host"] for r in v["nodes"]] == ["h0", "h1", "h2"]
    assert {r["machine"] for r in v["nodes"]} == {"h0", "h1", "h2"}
    text = kgen("status", "demo").stdout
    assert text.splitlines()[0].split()[:3] == ["RANK", "HOST", "STATE"] and text.count("Running") >= 3
    assert "bare-metal run demo on 3 host(s) over ssh" in text
    for i in range(3):
        assert not any(secret in c for c in lab.processes(i)), "the secret is on a command line"
    assert secret not in (Path(os.environ["XDG_STATE_HOME"]) / "kgen" / "runs" / "demo.json").read_text()

    # logs: every rank's training process after "[R] ", its node's own lines after "[node N] ", in time order
    # (the workers import torch first: their first step comes seconds after the group formed)
    deadline = time.monotonic() + 90
    while True:
        logs = kgen("logs", "demo", "--timestamps").stdout.splitlines()
        steps = {
            r: [ln for ln in logs if ln.startswith(f"[{r}] ") and re.search(r"rank=\d+ step \d+", ln)] for r in range(3)
        }
        if all(steps.values()) or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    assert all(steps.values()), logs[-20:]
    assert any(ln.startswith("[node 0] ") and "generation 0: starting" in ln for ln in logs)
    stamps = [ln.split(" ", 2)[1] for ln in logs if re.match(r"\[\d\] \d{4}-", ln)]
    assert stamps == sorted(stamps)
    assert kgen("logs", "demo", "--rank", "2", "--tail", "2").stdout.count("[2] ") == 2

    # a host crashes: every process on it dies at once; the others lose it and say so
    lab.crash(2)
    v = wait_status(kgen, "demo", lambda v: v["state"] == "degraded" and v["root_cause"], timeout=60)
    assert v["nodes"][2]["state"] == "Unreachable" and v["root_cause"]["ranks"] == [2]
    assert v["root_cause"]["hosts"] == ["h2"] and "closed its liveness connection" in v["headline"]

    # stop: every process on the reachable hosts ends; the crashed host is reported, not fatal
    t0 = time.monotonic()
    res = kgen("stop", "demo")
    assert res.returncode == 1, res.stdout + res.stderr
    assert time.monotonic() - t0 < 10 + 5
    out = res.stdout.splitlines()
    # node 0's group stop reaches node 1 over the liveness channel too: when it ended before kgen's own ssh
    # call looked, that host says "already stopped"
    assert out[0].startswith("rank 0 (h0): stopped")
    assert out[1].startswith(("rank 1 (h1): stopped", "rank 1 (h1): already stopped")), out
    assert out[2].startswith("rank 2 (h2): unreachable")
    assert run_processes(lab, 0) == [] and run_processes(lab, 1) == []
    v = json.loads(kgen("status", "demo", "-o", "json").stdout)
    assert v["state"] == "stopped" and [r["state"] for r in v["nodes"]][:2] == ["Stopped", "Stopped"]


@pytest.mark.timeout(120)
def test_hostile_arguments_and_env_land_exactly_on_every_host(lab, kgen, tmp_path):
    from tests.render.test_render_strings import HOSTILE

    lab = lab(2)
    work = code_dir(tmp_path)
    (work / "dump args.py").write_text(
        "import json, os, sys\n"
        "env = {k: v for k, v in os.environ.items() if k.startswith('HOSTILE_')}\n"
        "with open(f\"out-{os.environ['RANK']}.json\", 'w') as fh:\n"
        "    json.dump({'argv': sys.argv[1:], 'env': env}, fh)\n"
    )
    values = [v for v in HOSTILE if "\x00" not in v]
    env_args = [a for i, v in enumerate(values) for a in ("--env", f"HOSTILE_{i}={v}")]
    res = kgen(*launch_args(lab, "argv", work, free_port_pair()), *env_args, "--follow", "--", "dump args.py", *values)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr
    for rank in range(2):
        got = json.loads((work / f"out-{rank}.json").read_text())
        assert got["argv"] == values
        assert got["env"] == {f"HOSTILE_{i}": v for i, v in enumerate(values)}
    assert "Succeeded: 2/2 ranks completed" in res.stderr


@pytest.mark.timeout(120)
def test_preflight_names_every_host_and_starts_nothing(lab, kgen, tmp_path, monkeypatch):
    monkeypatch.setenv("KGEN_SSH_PERSIST", "0")  # `badkey` is h0 with another key: no shared connection
    lab = lab(2)
    work = code_dir(tmp_path)
    nosite = tmp_path / "python-without-torch"
    nosite.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    nosite.chmod(0o755)
    (lab.hosts[1].runs() / "taken").mkdir(parents=True)
    port = free_port_pair()
    args = launch_args(lab, "taken", work, port, hosts=["h0", "h1", "unreachable", "badkey"])
    args[args.index("--python") + 1] = str(nosite)
    with socket.socket() as busy:
        busy.bind(("0.0.0.0", port))
        busy.listen()
        res = kgen(*args, "--", "missing.py")
    assert res.returncode == 2 and res.stdout == ""
    line = res.stderr.strip().splitlines()[-1]
    assert line.startswith("kgen: error: --hosts: pre-flight failed, nothing was started: ")
    for words in (
        "h0: torch is not installed for",
        f"h0: port {port} is in use on this host",
        "training script 'missing.py' not found in",
        "h1: a run named taken already exists on this host",
        "unreachable: connection refused",
        "badkey: ssh refused the key",
        "kgen never uses passwords",
    ):
        assert words in line, (words, line)
    assert not (lab.hosts[0].runs() / "taken").exists()
    assert [p.name for p in lab.hosts[1].runs().iterdir()] == ["taken"] and not any(
        (lab.hosts[1].runs() / "taken").iterdir()
    )
    assert not (Path(os.environ["XDG_STATE_HOME"]) / "kgen" / "runs" / "taken.json").exists()


@pytest.mark.timeout(240)
def test_detached_run_survives_the_launcher_and_ssh_then_stop_is_idempotent(lab, kgen, kgen_cmd, tmp_path):
    lab = lab(3)
    work = code_dir(tmp_path)
    args = launch_args(lab, "det", work, free_port_pair(), "--follow")
    launcher = subprocess.Popen(
        [*kgen_cmd, *args, "--", "trainloop.py", "--steps", "400", "--sleep", "0.1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert launcher.stdout is not None
        assert "launched run det" in launcher.stdout.readline()
    finally:
        launcher.send_signal(signal.SIGKILL)  # the laptop goes away right after launch
        launcher.wait(timeout=10)
    end_shared_connections(Path(os.environ["XDG_RUNTIME_DIR"]) / "kgen-ssh")  # and every ssh connection with it
    v = wait_status(kgen, "det", formed)
    assert v["ranks_up"] == 3

    # sshd dies on host 1: its node goes on; kgen says it cannot see it, and that the group is intact
    lab.kill_sshd(1)
    end_shared_connections(Path(os.environ["XDG_RUNTIME_DIR"]) / "kgen-ssh")
    v = wait_status(kgen, "det", lambda v: v["nodes"][1]["state"] == "Unreachable", timeout=30)
    assert v["state"] == "running" and "kgen cannot see it" in v["headline"]
    assert run_processes(lab, 1), "the node on host 1 should still run"

    res = kgen("stop", "det")
    assert res.returncode == 1 and "rank 1 (h1): unreachable" in res.stdout
    assert run_processes(lab, 0) == [] and run_processes(lab, 2) == []
    # ssh cannot reach host 1, but the group stop (C4) reaches its node over the run's own channel
    deadline = time.monotonic() + 60
    while run_processes(lab, 1) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert run_processes(lab, 1) == [], "the group stop should end the node kgen could not reach"
    lab.restart_sshd(1)
    res = kgen("stop", "det")  # again, once the host answers: nothing is left, and it says so
    assert res.returncode == 0, res.stdout + res.stderr
    assert "rank 0 (h0): already stopped" in res.stdout and "rank 1 (h1): already stopped" in res.stdout
    assert "stopped by user on" in kgen("logs", "det", "--rank", "1", "--tail", "3").stdout
    assert all(run_processes(lab, i) == [] for i in range(3))
    res = kgen("stop", "det", "--rm")
    assert res.returncode == 0 and "stopped and removed" in res.stdout
    assert not any((h.runs() / "det").exists() for h in lab.hosts)
    assert kgen("status", "det", "--on", "bare-metal").returncode == 2


@pytest.mark.timeout(240)
def test_frozen_host_is_dropped_then_replaced_and_the_group_reforms(lab, kgen, tmp_path):
    lab = lab(3)
    work = code_dir(tmp_path)
    res = kgen(
        *launch_args(lab, "frz", work, free_port_pair()), "--", "trainloop.py", "--steps", "2000", "--sleep", "0.1"
    )
    assert res.returncode == 0, res.stderr
    wait_status(kgen, "frz", formed)
    lab.freeze(2)  # sshd, the supervisor, the entrypoint, torch: everything on host 2 stops
    v = wait_status(kgen, "frz", lambda v: v["state"] == "degraded" and v["root_cause"], timeout=60)
    assert v["nodes"][2]["state"] == "Unreachable"
    assert re.search(r"ConnectTimeout=3s|no answer in time", v["nodes"][2]["meaning"])
    assert v["root_cause"]["ranks"] == [2] and "silent for" in v["headline"]
    lab.thaw(2)  # it learns it was dropped (exit 76); its supervisor replaces it; the group re-forms
    v = wait_status(kgen, "frz", lambda v: formed(v) and v["reformations"] >= 1, timeout=90)
    assert v["nodes"][2]["restarts"] == 1 and "generation 1 after 1 re-formation" in v["headline"]
    assert max(r["generation"] for r in v["nodes"]) == 1  # the headline's generation is the GEN column's
    assert any("re-formed after: rank 2 (host h2)" in d for d in v["details"])
    assert kgen("stop", "frz").returncode == 0
    assert all(run_processes(lab, i) == [] for i in range(3))
