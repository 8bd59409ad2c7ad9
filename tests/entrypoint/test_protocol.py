"""The liveness channel's membership proof and the group stop, without torch.

Wire format and threat model: docs/entrypoint.md ("Wire format", "Security"). The real node 0 here
is the entrypoint of a 3-node run waiting for its peers (test_entrypoint_fast.Hub); the attacks on a
training group are in test_security.py, the stops of a training group in test_stop.py.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
from test_entrypoint_fast import BASE, ENTRYPOINT, SECRET_FILE, Hub, _free_port, ep, run_ep

SECRET = b"s" * 64


# -- the session: every line authenticated, in order, once, in its direction --------------------------
def pair():
    ns, nc = ep.new_nonce(), ep.new_nonce()
    return ep.Session(SECRET, ns, nc, "client"), ep.Session(SECRET, ns, nc, "server")


def test_lines_verify_in_order_and_both_ways():
    client, server = pair()
    for i in range(3):
        assert server.open(client.seal({"t": "fail", "rc": i + 1}).rstrip(b"\n")) == {
            "t": "fail",
            "rc": i + 1,
            "internal": "",
        }
        assert client.open(server.seal({"t": "start", "gen": i}).rstrip(b"\n")) == {"t": "start", "gen": i}


@pytest.mark.parametrize("attack", ["replay", "reorder", "reflect", "change", "other session", "unsigned"])
def test_a_line_out_of_place_fails_verification(attack):
    client, server = pair()
    first, second = client.seal({"t": "hb"}).rstrip(b"\n"), client.seal({"t": "done"}).rstrip(b"\n")
    server.open(first)
    line = {
        "replay": first,
        "reorder": client.seal({"t": "fail", "rc": 1}).rstrip(b"\n"),  # skips `second`
        "reflect": server.seal({"t": "stop"}).rstrip(b"\n"),  # node 0's own line sent back to it
        "change": second.replace(b"done", b"fail"),
        "other session": pair()[0].seal({"t": "done"}).rstrip(b"\n"),
        "unsigned": b'{"t":"done"}',
    }[attack]
    with pytest.raises(ep.ProtocolError):
        server.open(line)
    assert server.open(second) == {"t": "done"} if attack != "change" else True


def test_the_proof_binds_both_nonces_and_the_secret():
    ns, nc = ep.new_nonce(), ep.new_nonce()
    proof = ep.membership_proof(SECRET, ns, nc)
    assert len(proof) == 64 and proof != ep.membership_proof(SECRET, ep.new_nonce(), nc)
    assert proof != ep.membership_proof(SECRET, ns, ep.new_nonce()) != ep.membership_proof(b"t" * 64, ns, nc)
    assert SECRET.decode() not in proof


# -- the secret file ----------------------------------------------------------------------------------
def _secret_env(tmp_path, content: bytes | None, name="secret") -> dict:
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
        path.chmod(0o600)
    return {**BASE, "NODE_RANK": "1", "KGEN_SECRET_FILE": str(path)}


@pytest.mark.parametrize(
    "content, expected",
    [
        (None, "cannot read it (No such file or directory)"),
        (b"short\n", "holds 5 characters: a run secret needs at least 32"),
        (b"x" * 5000, "is larger than 4096 bytes"),
    ],
)
def test_a_bad_secret_file_is_one_line_and_exit_2(tmp_path, content, expected):
    res = run_ep(_secret_env(tmp_path, content), "--", "/bin/true")
    assert res.returncode == 2
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("kgen-entrypoint: error:")]
    assert len(errors) == 1 and "KGEN_SECRET_FILE=" in errors[0] and expected in errors[0], res.stderr
    assert "token_hex(32)" in errors[0] and "Traceback" not in res.stderr


@pytest.mark.parametrize("path", ["/dev/zero", "/"])
def test_a_secret_that_is_not_a_regular_file_is_refused_without_reading_it(path):
    res = run_ep({**BASE, "NODE_RANK": "1", "KGEN_SECRET_FILE": path}, "--", "/bin/true", timeout=10)
    assert res.returncode == 2 and f"KGEN_SECRET_FILE='{path}' is not a regular file" in res.stderr


def test_secret_unset_and_whitespace():
    env = {k: v for k, v in BASE.items() if k != "KGEN_SECRET_FILE"}
    cfg = ep.load_config({**env, "NODE_RANK": "1"})
    assert cfg.problems == [cfg.secret_problem] and cfg.secret_problem.startswith("KGEN_SECRET_FILE is not set")
    assert ep.load_config({**env, "NNODES": "1", "NODE_RANK": "0"}).problems == []  # one node: no channel
    cfg = ep.load_config({**BASE, "NODE_RANK": "1"})
    assert cfg.secret == open(SECRET_FILE, "rb").read().strip() and len(cfg.secret) == 64


@pytest.mark.parametrize("mode, who", [(0o644, "any user of this host"), (0o606, "any user"), (0o620, "its group")])
def test_a_secret_others_can_read_or_change_is_refused_on_bare_metal(tmp_path, mode, who):
    env = _secret_env(tmp_path, b"k" * 64, name="my secret")
    os.chmod(env["KGEN_SECRET_FILE"], mode)
    res = run_ep(env, "--", "/bin/true")
    assert res.returncode == 2 and res.stdout == "" and "Traceback" not in res.stderr
    [error] = [ln for ln in res.stderr.splitlines() if ln.startswith("kgen-entrypoint: error:")]
    assert f"(mode {mode:04o}) can be read or changed by {who}" in error
    assert error.endswith(f"run: chmod 600 '{env['KGEN_SECRET_FILE']}'"), error  # quoted for the shell
    assert ep.load_config({**env, "KGEN_KIND": "job"}).problems == []  # a Secret volume's mode is render's


def test_a_secret_its_group_can_read_is_noted(tmp_path):
    env = _secret_env(tmp_path, b"k" * 64)
    os.chmod(env["KGEN_SECRET_FILE"], 0o640)
    cfg = ep.load_config(env)
    assert cfg.problems == [] and cfg.secret == b"k" * 64
    [note] = cfg.notes
    assert "can be read by its group" in note and note.endswith(f"run: chmod 600 {env['KGEN_SECRET_FILE']}")


# -- node 0 with a wrong secret, and a fake node 0 ----------------------------------------------------
def test_a_node_with_another_secret_learns_wrong_secret_and_exits_2(tmp_path):
    hub = Hub(tmp_path)
    try:
        t = time.monotonic()
        other = _secret_env(tmp_path, b"o" * 64)["KGEN_SECRET_FILE"]
        env = {**hub.env, "NODE_RANK": "1", "KGEN_SECRET_FILE": other, "KGEN_MASTER_WAIT_TIMEOUT": "2"}
        res = run_ep(env, "--", "/bin/true")
        assert res.returncode == 2 and 1.5 < time.monotonic() - t < 15  # denied until its bound: then it says so
        assert "kgen-entrypoint: error: wrong secret: node 0 at 127.0.0.1:" in res.stderr
        assert "denials alone for" in res.stderr
        assert res.stderr.rstrip().splitlines()[-1] == "kgen-entrypoint: stopped: configuration error"
        time.sleep(0.3)
        assert "wrong proof of the run secret" in hub.log() and "joined" not in hub.log()
    finally:
        hub.stop()


class FakeNode0(threading.Thread):
    """Listens on the liveness port and plays node 0 without the secret: a challenge, then forged
    answers (a plain welcome and start, and lines sealed with a guessed key)."""

    def __init__(self, port: int, answer: bytes | None = None) -> None:
        super().__init__(daemon=True)
        self.srv = socket.create_server(("127.0.0.1", port))
        self.answer = answer
        self.served = 0
        self.done = threading.Event()

    def run(self) -> None:
        self.srv.settimeout(0.2)
        while not self.done.is_set():
            try:
                conn, _ = self.srv.accept()
            except OSError:
                continue
            with conn:
                ns = ep.new_nonce()
                conn.sendall(ep.plain_line({"t": "challenge", "v": 3, "n": ns}))
                conn.settimeout(2)
                try:
                    got = conn.recv(65536)
                    nc = json.loads(got.split(b"\n")[0])["n"]
                    guess = ep.Session(b"g" * 64, ns, nc, "server")
                    conn.sendall(
                        self.answer
                        or guess.seal({"t": "welcome", "v": 3, "hb": 1}) + guess.seal({"t": "start", "gen": 0})
                    )
                    self.served += 1
                except (OSError, ValueError, KeyError):
                    pass
        self.srv.close()


@pytest.mark.parametrize("answer", [None, b'{"t":"welcome","v":3}\n{"t":"start","gen":0}\n'], ids=["sealed", "plain"])
def test_a_fake_node0_cannot_start_or_steer_a_node(answer):
    live = _free_port()
    fake = FakeNode0(live, answer)
    fake.start()
    try:
        env = {**BASE, "NODE_RANK": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(live - 1)}
        env.update(
            {"KGEN_LIVENESS_PORT": str(live), "KGEN_MASTER_WAIT_TIMEOUT": "1.5"}
        )  # a busy machine still connects in time
        res = run_ep(env, "--", "/bin/true")
    finally:
        fake.done.set()
        fake.join(5)
    assert fake.served >= 1
    assert res.returncode == 3, res.stderr  # it kept waiting for the real node 0, then gave up
    assert "did not prove it is this run's node 0" in res.stderr
    assert "generation 0: starting" not in res.stderr


# -- probe, --diagnose ---------------------------------------------------------------------------------
def test_probe_tells_a_stranger_nothing_and_a_member_the_status(tmp_path):
    hub = Hub(tmp_path)
    try:
        sock = socket.create_connection(("127.0.0.1", hub.live), timeout=5)
        sock.sendall(b'{"t":"probe"}\n')
        time.sleep(0.5)
        said = sock.recv(65536)
        sock.close()
        assert json.loads(said)["t"] == "challenge" and b"t-r1" not in said and b"nnodes" not in said
        no_secret = {k: v for k, v in hub.env.items() if k != "KGEN_SECRET_FILE"}
        res = run_ep({**no_secret, "NODE_RANK": "2"}, "--diagnose")
        assert "FAIL run secret: KGEN_SECRET_FILE is not set" in res.stdout
        assert re.search(
            r"PASS master liveness port: 127\.0\.0\.1:\d+ accepts \(kgen liveness protocol 3\)", res.stdout
        )
        assert "t-r1" not in res.stdout and "peers" not in res.stdout
        res = run_ep({**hub.env, "NODE_RANK": "2"}, "--diagnose")
        assert "PASS run secret: KGEN_SECRET_FILE=" in res.stdout
        assert "entrypoint (run t-r1) has 0 of 2 peers, missing [1, 2]" in res.stdout, res.stdout
        wrong = _secret_env(tmp_path, b"w" * 64)["KGEN_SECRET_FILE"]
        res = run_ep({**hub.env, "NODE_RANK": "2", "KGEN_SECRET_FILE": wrong}, "--diagnose")
        assert "FAIL master liveness port" in res.stdout and "refused this host's proof" in res.stdout
    finally:
        hub.stop()


def test_diagnose_on_node0_says_who_can_reach_the_ports(tmp_path):
    hub = Hub(tmp_path, extra={"KGEN_LIVENESS_BIND": "*"})  # widened: every interface
    try:
        assert "listening on port" in hub.log() and "every interface: KGEN_LIVENESS_BIND=*" in hub.log()
        res = run_ep({**hub.env, "NODE_RANK": "0"}, "--diagnose")
        line = next(ln for ln in res.stdout.splitlines() if "exposure of the liveness port" in ln)
        assert f"{hub.live} listens on all interfaces (0.0.0.0" in line and "authenticates every connection" in line
        line = next(ln for ln in res.stdout.splitlines() if "exposure of the rendezvous port" in ln)
        assert "nothing listens on it yet" in line and "once it runs: torch's store does not authenticate" in line
        store = socket.create_server(("0.0.0.0", hub.live - 1))  # what torch 2.13's TCPStore does
        try:
            res = run_ep({**hub.env, "NODE_RANK": "0"}, "--diagnose")
        finally:
            store.close()
        line = next(ln for ln in res.stdout.splitlines() if "exposure of the rendezvous port" in ln)
        assert f"{hub.live - 1} listens on all interfaces (0.0.0.0)" in line
        assert "torch 2.13 cannot bind it to one address" in line and "fence this port" in line
        assert "FAIL" not in res.stdout.replace("FAIL summary", ""), res.stdout
    finally:
        hub.stop()


def test_node0_listens_only_where_master_addr_reaches_it(tmp_path):
    """Bare metal: the hub binds the address MASTER_ADDR names on node 0 (loopback for --local), not every
    interface; --diagnose on node 0 still finds it and says so."""
    hub = Hub(tmp_path)
    try:
        assert f"listening on port {hub.live} at 127.0.0.1 (where MASTER_ADDR=127.0.0.1 reaches this host" in hub.log()
        assert ep.listening_addresses(hub.live) == ["127.0.0.1"]
        res = run_ep({**hub.env, "NODE_RANK": "0"}, "--diagnose")
        assert f"PASS exposure of the liveness port: {hub.live} is bound to loopback only (127.0.0.1)" in res.stdout
        assert f"PASS master liveness port: {hub.live} is in use by this job: node 0's entrypoint" in res.stdout
    finally:
        hub.stop()


@pytest.mark.parametrize(
    "env, hosts, why",
    [
        ({"MASTER_ADDR": "127.0.0.1"}, ["127.0.0.1"], "where MASTER_ADDR=127.0.0.1 reaches this host"),
        ({"MASTER_ADDR": "localhost"}, None, "where MASTER_ADDR=localhost reaches this host"),
        ({"MASTER_ADDR": "192.0.2.7"}, ep.EVERY_INTERFACE, "MASTER_ADDR=192.0.2.7 is 192.0.2.7 here, not an address"),
        ({"KGEN_KIND": "job"}, ep.EVERY_INTERFACE, "every interface of the pod"),
        ({"KGEN_LIVENESS_BIND": "*"}, ep.EVERY_INTERFACE, "KGEN_LIVENESS_BIND=*"),
        ({"KGEN_LIVENESS_BIND": "127.0.0.2, ::1"}, ["127.0.0.2", "::1"], "KGEN_LIVENESS_BIND"),
    ],
)
def test_where_node0_listens(env, hosts, why):
    cfg = ep.load_config({**BASE, "NODE_RANK": "0", **env})
    assert cfg.problems == []
    got, said = ep.bind_addresses(cfg)
    assert why in said and (hosts is None or got == hosts), (got, said)


@pytest.mark.parametrize("value", ["eth0", "10.0.0.1:29501", "*,10.0.0.1", ","])
def test_a_bad_liveness_bind_is_one_line(value):
    res = run_ep({**BASE, "NODE_RANK": "1", "KGEN_LIVENESS_BIND": value}, "--", "/bin/true")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    [error] = [ln for ln in res.stderr.splitlines() if ln.startswith("kgen-entrypoint: error:")]
    assert f"KGEN_LIVENESS_BIND={value!r} is not '*' or IP addresses" in error


def test_strangers_are_counted_beyond_a_burst():
    lines: list[str] = []
    real_log = ep.log
    ep.log = lines.append
    try:
        strangers = ep.StrangerLog()
        for i in range(25):
            strangers.note(f"stranger {i}")
        strangers.roll(time.monotonic(), final=True)
    finally:
        ep.log = real_log
    assert lines[:10] == [f"stranger {i}" for i in range(10)]
    assert len(lines) == 11 and lines[10].startswith("refused 15 more connection(s) from outside the run")


# -- the group stop without torch: --stop, Ctrl-C on node 0, Ctrl-C on a node waiting for node 0 ----------
def test_stop_from_another_shell_ends_node0_with_exit_6(tmp_path):
    hub = Hub(tmp_path)
    try:
        res = run_ep({**hub.env}, "--stop")  # no node rank needed
        assert res.returncode == 0, res.stderr
        host = socket.gethostname()
        said = "node 0 is stopping the group (0 other node(s) connected: []); every node exits 6"
        assert f"{said} (stopped by user on {host})" in res.stdout
        assert hub.proc.wait(15) == 6  # it told nobody (no node joined) and waited STOP_LINGER for them
        assert hub.log().rstrip().splitlines()[-1] == f"kgen-entrypoint: stopped: stopped by user on {host}"
        assert "kgen_entrypoint.py --stop from 127.0.0.1:" in hub.log()
    finally:
        hub.stop()


def test_stop_when_node0_is_unreachable_says_so_with_exit_3():
    live = _free_port()
    env = {**BASE, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(live - 1), "KGEN_LIVENESS_PORT": str(live)}
    t = time.monotonic()
    res = run_ep(env, "--stop")
    assert res.returncode == 3 and time.monotonic() - t < 15
    assert f"--stop: node 0 at 127.0.0.1:{live} not reachable within 5s" in res.stderr
    assert "nothing was stopped" in res.stderr and res.stdout == ""
    assert len(res.stderr.splitlines()) == 1, res.stderr  # said once (no node stopped: no "stopped:" line)


def test_stop_with_a_wrong_secret_is_refused(tmp_path):
    hub = Hub(tmp_path)
    try:
        res = run_ep({**hub.env, "KGEN_SECRET_FILE": _secret_env(tmp_path, b"w" * 64)["KGEN_SECRET_FILE"]}, "--stop")
        assert res.returncode == 2 and "wrong secret" in res.stderr
        assert hub.proc.poll() is None  # still running
    finally:
        assert hub.stop() == 143


@pytest.mark.parametrize("args, message", [(["--stop", "x"], "--stop takes no arguments")])
def test_stop_usage(args, message):
    res = run_ep({**BASE, "NNODES": "1"}, *args)
    assert res.returncode == 2 and message in res.stderr
    res = run_ep({**BASE, "NNODES": "1"}, "--stop")
    assert res.returncode == 2 and "NNODES=1 has no liveness channel" in res.stderr


def test_ctrl_c_on_node0_forming_the_group_exits_6(tmp_path):
    hub = Hub(tmp_path)
    try:
        hub.proc.send_signal(signal.SIGINT)
        assert hub.proc.wait(15) == 6
        assert hub.log().rstrip().endswith(f"stopped by user on {socket.gethostname()}")
    finally:
        hub.stop()


def test_ctrl_c_on_a_node_waiting_for_node0_ends_it_at_once_with_exit_6():
    live = _free_port()
    env = {"PATH": "/usr/bin:/bin", **BASE, "NODE_RANK": "1", "MASTER_ADDR": "127.0.0.1"}
    env.update({"MASTER_PORT": str(live - 1), "KGEN_LIVENESS_PORT": str(live)})
    proc = subprocess.Popen(
        [sys.executable, str(ENTRYPOINT), "--", "/bin/true"], env=env, stderr=subprocess.PIPE, text=True
    )
    try:
        time.sleep(1.0)
        t = time.monotonic()
        proc.send_signal(signal.SIGINT)
        rc = proc.wait(10)
        err = proc.stderr.read()
    finally:
        proc.kill()
    assert rc == 6 and time.monotonic() - t < 5
    assert "node 0 not told" in err  # node 0 is not there: nobody to tell
    assert err.rstrip().splitlines()[-1] == f"kgen-entrypoint: stopped: stopped by user on {socket.gethostname()}"


# -- a node facing a bad or fake node 0 ends with the documented code and one line ---------------
class HostileNode0(threading.Thread):
    """Listens on the liveness port and answers every connection with `first` (instead of a challenge) and,
    once the node has said something, `then`; then it closes."""

    def __init__(self, port: int, first: bytes, then: bytes | None = None) -> None:
        super().__init__(daemon=True)
        self.srv = socket.create_server(("127.0.0.1", port))
        self.first, self.then = first, then
        self.served = 0
        self.done = threading.Event()

    def run(self) -> None:
        self.srv.settimeout(0.2)
        while not self.done.is_set():
            try:
                conn, _ = self.srv.accept()
            except OSError:
                continue
            with conn:
                try:
                    conn.sendall(self.first)
                    if self.then is not None:
                        conn.settimeout(2)
                        conn.recv(65536)
                        conn.sendall(self.then)
                    self.served += 1
                except OSError:
                    pass
        self.srv.close()


CHALLENGE = ep.plain_line({"t": "challenge", "v": 3, "n": "0" * 32})
ESCAPES = "\\u001b[2J\\u001b]0;pwned\\u0007\\r\\n[kgen node 0] FAIL-STOP: forged"


@pytest.mark.parametrize(
    "first, then, code, said",
    [
        (b"[" * 1023 + b"\n", None, 3, "did not prove it is this run's node 0"),  # the crash 3
        (b"SSH-2.0-OpenSSH_9.2p1\r\n", None, 3, "did not prove it is this run's node 0"),
        (b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n", None, 3, "did not prove"),
        (b"x" * 5000, None, 3, "did not prove it is this run's node 0"),
        (b"", None, 3, "resolved but not accepting"),  # accepts, then closes at once
        (ep.plain_line({"t": "challenge", "v": 99, "n": "0" * 32}), None, 3, "liveness protocol 99"),
        (CHALLENGE, b"[" * 60000 + b"\n", 3, "did not prove it is this run's node 0"),
        (CHALLENGE, b'{"t":"welcome","v":3}\n{"t":"start","gen":0}\n', 3, "not authenticated"),
        (CHALLENGE, b"f" * 64 + b' {"t":"welcome","v":3,"hb":1}\n', 3, "failed verification"),
        (CHALLENGE, ('{"t":"denied","reason":"' + ESCAPES + '"}\n').encode(), 3, "field 'reason' of 'denied'"),
        (CHALLENGE, ('{"t":"denied","reason":"' + "no " * 1000 + '"}\n').encode(), 2, "wrong secret: node 0 at"),
    ],
    ids=[
        "nesting",
        "ssh",
        "http",
        "no-newline",
        "closes",
        "protocol-99",
        "deep-answer",
        "plain-start",
        "bad-mac",
        "denied-escapes",
        "denied",
    ],
)
def test_a_fake_node0_ends_a_node_with_its_code_and_one_line(first, then, code, said):
    live = _free_port()
    fake = HostileNode0(live, first, then)
    fake.start()
    try:
        env = {**BASE, "NODE_RANK": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(live - 1)}
        env.update(
            {"KGEN_LIVENESS_PORT": str(live), "KGEN_MASTER_WAIT_TIMEOUT": "1.5"}
        )  # a busy machine still connects in time
        res = run_ep(env, "--", "/bin/true")
    finally:
        fake.done.set()
        fake.join(5)
    assert res.returncode == code, res.stderr
    assert "Traceback" not in res.stderr and res.stdout == ""
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("kgen-entrypoint: error:")]
    assert len(errors) == 1 and said in errors[0], res.stderr
    assert res.stderr.rstrip().splitlines()[-1].startswith("kgen-entrypoint: stopped:")
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", res.stderr), "a control character from node 0 reached the log"
    assert "generation 0: starting" not in res.stderr
    if code == 2:  # a denial cannot be authenticated (documented): what it says is shown, bounded
        assert "refused this node's proof of the run secret (no no no" in errors[0] and len(errors[0]) < 700
