"""One stray line never ends a run. The attack, replayed as it was made: an unprivileged
client of loopback against `kgen launch --local 2` while the group trains (real entrypoints, real torch and
gloo): the two one-line crashes (1,023 nested brackets: RecursionError; a lone surrogate as the MAC:
UnicodeEncodeError), terminal escapes and a forged log line in a field. The run must end as an undisturbed
run does (succeeded, no re-formation), node 0 must log each stranger once, escaped, and neither `kgen logs`
nor `kgen status` may pass a control character. The liveness channel listens on loopback only."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest
from sshlab import free_port_pair

pytestmark = [pytest.mark.torch, pytest.mark.slow]

TRAINLOOP = Path(__file__).resolve().parents[1] / "entrypoint" / "trainloop.py"

NONCE = b"0" * 32
ATTACKS = {
    "crash 1: nesting": b"[" * 1023 + b"\n",
    "crash 2: surrogate MAC": b'{"t":"auth","v":3,"n":"' + NONCE + b'","mac":"\\ud800"}\n',
    "escapes in a field": b'{"t":"auth","v":"\\u001b[2J\\u001b]0;pwned\\u0007","n":"' + NONCE + b'","mac":"x"}\n',
    "a forged log line": b'{"t":"hello\\n[kgen node 0 00:00:00 +0.0s] FAIL-STOP: node 1 silent"}\n',
    "raw escape bytes": b"\x1b[2J\x1b]0;pwned\x07\r[kgen node 0] FAIL-STOP: forged\n",
    "utf-8 separators": '{"t":"probe\u2028FAIL-STOP: x"}\n'.encode(),
}
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")


def attack(port: int, line: bytes) -> tuple[bytes, bytes]:
    """What the issue's one-liner did: connect, read the challenge, send one line; what node 0 said after."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        first = sock.recv(99)
        sock.sendall(line)
        sock.settimeout(5)
        rest = b""
        try:
            while data := sock.recv(4096):
                rest += data
        except OSError:
            pass
    return first, rest


def listening(port: int) -> set[str]:
    found = set()
    for path, v6 in (("/proc/net/tcp", False), ("/proc/net/tcp6", True)):
        with open(path) as fh:
            for row in fh.read().splitlines()[1:]:
                f = row.split()
                addr, _, p = f[1].rpartition(":")
                if f[3] == "0A" and int(p, 16) == port:
                    found.add(("v6:" if v6 else "") + addr)
    return found


@pytest.mark.timeout(300)
def test_the_issues_lines_against_a_local_run_change_nothing(kgen, tmp_path, monkeypatch):
    shutil.copy(TRAINLOOP, tmp_path / "trainloop.py")
    monkeypatch.chdir(tmp_path)
    port = free_port_pair()
    live = port + 1
    res = kgen(
        "launch", "--name", "hostile", "--local", "2", "--port", str(port),
        "--", "trainloop.py", "--steps", "28", "--sleep", "0.25", timeout=120,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    log0 = os.path.join(os.environ["XDG_STATE_HOME"], "kgen", "runs", "hostile", "node0", "log")
    try:
        deadline = time.monotonic() + 120
        while "rank=0 step 3" not in open(log0, errors="replace").read() and time.monotonic() < deadline:
            time.sleep(0.2)  # the group trains (a step is an all-reduce of both ranks)
        text = open(log0, errors="replace").read()
        assert "generation 0: starting" in text, text[-3000:]
        # --local: the liveness channel on loopback only, not 0.0.0.0 or [::]
        assert listening(live) == {"0100007F"}, listening(live)
        for what, line in ATTACKS.items():
            first, rest = attack(live, line)
            assert json.loads(first)["t"] == "challenge" and rest == b"", (what, rest)
        deadline = time.monotonic() + 200
        while time.monotonic() < deadline:
            v = json.loads(kgen("status", "hostile", "-o", "json").stdout)
            if v["state"] in ("succeeded", "failed", "stopped"):
                break
            time.sleep(1)
        assert v["state"] == "succeeded" and v["reformations"] == 0, v["headline"]
        text = open(log0, errors="replace").read()
        refusals = [ln for ln in text.splitlines() if "refused a connection from 127.0.0.1:" in ln]
        assert len(refusals) == len(ATTACKS), refusals
        assert not CONTROL.search(text.replace("\n", "")), "a control character reached node 0's log"
        for bad in ("Traceback", "internal error", "FAIL-STOP", "pwned", "re-forming"):
            assert bad not in text, bad
        assert text.rstrip().endswith("kgen-entrypoint: stopped: succeeded")
        logs = kgen("logs", "hostile")
        status = kgen("status", "hostile")
        assert logs.returncode == 0 and status.returncode == 0
        for out in (logs.stdout, status.stdout):
            assert not CONTROL.search(out.replace("\n", "")), out[-2000:]
        assert "Succeeded: 2/2 ranks completed, 0 re-formations" in status.stdout
    finally:
        kgen("stop", "hostile", "--rm", timeout=60)


def listening_in(pid: int, port: int) -> set[str]:
    """The listeners on `port` in the network namespace of process `pid` (its /proc/PID/net)."""
    found = set()
    for name in ("tcp", "tcp6"):
        with open(f"/proc/{pid}/net/{name}") as fh:
            for row in fh.read().splitlines()[1:]:
                f = row.split()
                addr, _, p = f[1].rpartition(":")
                if f[3] == "0A" and int(p, 16) == port:
                    found.add(addr)
    return found


@pytest.mark.timeout(300)
@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip"), reason="needs root, unshare and ip"
)
def test_a_private_network_namespace_holds_a_whole_local_run(kgen_cmd, kgen, tmp_path, monkeypatch):
    """Torch 2.13's store binds every interface. For a --local run, the documented recipe
    `unshare --net sh -c 'ip link set lo up && exec kgen launch --local ...'` (root, or any user with
    `unshare -rn` where user namespaces are allowed) keeps every port of the run, the store's included, out
    of the host's network; kgen status, logs and stop work from outside as usual."""
    shutil.copy(TRAINLOOP, tmp_path / "trainloop.py")
    monkeypatch.chdir(tmp_path)
    port = free_port_pair()
    launch = [*kgen_cmd, "launch", "--name", "netns", "--local", "2", "--port", str(port)]
    launch += ["--", "trainloop.py", "--steps", "24", "--sleep", "0.2"]
    res = subprocess.run(
        ["unshare", "--net", "sh", "-c", f"ip link set lo up && exec {shlex.join(launch)}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    node0 = os.path.join(os.environ["XDG_STATE_HOME"], "kgen", "runs", "netns", "node0")
    try:
        deadline = time.monotonic() + 120
        while "rank=0 step 3" not in open(os.path.join(node0, "log"), errors="replace").read():
            assert time.monotonic() < deadline, open(os.path.join(node0, "log")).read()[-3000:]
            time.sleep(0.2)
        inside = json.load(open(os.path.join(node0, "child")))["pid"]
        assert listening_in(inside, port) and listening_in(inside, port + 1) == {"0100007F"}  # in its namespace
        assert listening(port) == set() and listening(port + 1) == set()  # nothing in the host's
        for p in (port, port + 1):
            with pytest.raises(OSError):
                socket.create_connection(("127.0.0.1", p), timeout=2).close()
        deadline = time.monotonic() + 200
        while (v := json.loads(kgen("status", "netns", "-o", "json").stdout))["state"] not in ("succeeded", "failed"):
            assert time.monotonic() < deadline, v["headline"]
            time.sleep(1)
        assert v["state"] == "succeeded", v["headline"]
    finally:
        kgen("stop", "netns", "--rm", timeout=60)
