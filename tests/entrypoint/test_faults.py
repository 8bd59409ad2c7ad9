"""The faults around the liveness protocol, each reproduced on the real module first: an unauthenticated
`denied` before node 0 proved itself, a liveness port busy at a restart, a full or failing disk under the
supervisor, a connection closed without leaving the selector, a long line that would lose its `[rank N]`
prefix, a killed supervisor. The fault matrix (docs/entrypoint.md, "Fault matrix") runs in
test_fault_matrix.py; these are the mechanisms its rows rely on.
"""

from __future__ import annotations

import errno
import json
import os
import re
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
from test_entrypoint_fast import BASE, ENTRYPOINT, Hub, _free_port, ep, run_ep, wait_until


# -- 1. whatever answers before node 0 proved itself is "not yet this run's node 0" ----------------------------
class Denier(threading.Thread):
    """Answers every connection on `port` as an impostor would: a challenge, then a plain `denied`."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.srv = socket.create_server(("127.0.0.1", port))
        self.served = 0
        self.done = threading.Event()

    def run(self) -> None:
        self.srv.settimeout(0.1)
        while not self.done.is_set():
            try:
                conn, _ = self.srv.accept()
            except OSError:
                continue
            with conn:
                try:
                    conn.sendall(ep.plain_line({"t": "challenge", "v": 3, "n": "0" * 32}))
                    conn.settimeout(2)
                    conn.recv(65536)
                    conn.sendall(b'{"t":"denied","reason":"wrong secret"}\n')
                    self.served += 1
                except OSError:
                    pass
        self.srv.close()

    def stop(self) -> None:
        self.done.set()
        self.join(5)


def test_a_denial_before_node0_listens_does_not_end_a_node_that_then_joins(tmp_path):
    """The issue's node 1 died 1 s after start with "wrong secret" because something denied it while the
    real node 0 was not listening yet. Now it waits, and joins once node 0 is there."""
    live = _free_port()
    denier = Denier(live)
    denier.start()
    env = {**BASE, "NNODES": "3", "NPROC_PER_NODE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(live - 1)}
    env.update({"KGEN_LIVENESS_PORT": str(live), "KGEN_JOB_NAME": "t", "KGEN_RUN_ID": "r1", "PATH": "/usr/bin:/bin"})
    errf = open(tmp_path / "node1.log", "w")
    node1 = subprocess.Popen(
        [sys.executable, str(ENTRYPOINT), "--", "/bin/true"], env={**env, "NODE_RANK": "1"}, stderr=errf
    )
    hub = None
    try:
        assert wait_until(lambda: denier.served >= 3, 30), "the node never asked the impostor"
        assert node1.poll() is None, (tmp_path / "node1.log").read_text()
        denier.stop()
        hub = Hub.__new__(Hub)  # the real node 0, on the port the impostor held
        hub.live, hub.env, hub.log_path = live, env, tmp_path / "hub.log"
        with open(hub.log_path, "w") as log:
            hub.proc = subprocess.Popen(
                [sys.executable, str(ENTRYPOINT), "--", "/bin/true"],
                env={**env, "NODE_RANK": "0"},
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        assert wait_until(lambda: "node 1 joined the liveness channel" in hub.log(), 30), hub.log()
        assert node1.poll() is None
        said = (tmp_path / "node1.log").read_text()
        assert "wrong secret:" not in said and "kgen-entrypoint: error:" not in said, said
    finally:
        denier.stop()
        node1.kill()
        node1.wait(10)
        errf.close()
        if hub is not None:
            hub.stop()


def test_denials_alone_until_the_bound_are_a_wrong_secret_and_a_denial_then_silence_is_not():
    live = _free_port()
    denier = Denier(live)
    denier.start()
    env = {**BASE, "NODE_RANK": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(live - 1)}
    env.update({"KGEN_LIVENESS_PORT": str(live), "KGEN_MASTER_WAIT_TIMEOUT": "2"})
    try:
        t = time.monotonic()
        res = run_ep(env, "--", "/bin/true")
        assert res.returncode == 2 and time.monotonic() - t >= 1.9, res.stderr
        assert "wrong secret" in res.stderr and "denials alone for" in res.stderr
    finally:
        denier.stop()
    # the impostor went away before the bound: the last answer was no denial, so node 0 is "not reachable" (3)
    denier = Denier(live)
    denier.start()
    env["KGEN_MASTER_WAIT_TIMEOUT"] = "4"
    threading.Timer(1.0, denier.stop).start()
    res = run_ep(env, "--", "/bin/true")
    assert res.returncode == 3, res.stderr
    assert "wrong secret" not in res.stderr.splitlines()[-2], res.stderr


def test_a_liveness_port_busy_at_a_restart_is_retried_within_a_bound(tmp_path):
    """A replacement node 0 that finds its port briefly taken (its predecessor's tree still ending) waits
    for it (LISTEN_BUSY_BOUND) instead of exiting 2 "pick a free port"."""
    live = _free_port()
    squatter = socket.create_server(("127.0.0.1", live))
    env = {**BASE, "NNODES": "3", "NPROC_PER_NODE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(live - 1)}
    env.update({"KGEN_LIVENESS_PORT": str(live), "NODE_RANK": "0", "PATH": "/usr/bin:/bin"})
    path = tmp_path / "node0.log"
    with open(path, "w") as log:
        proc = subprocess.Popen([sys.executable, str(ENTRYPOINT), "--", "/bin/true"], env=env, stderr=log)
    try:
        assert wait_until(lambda: "is in use on 127.0.0.1: trying again" in path.read_text(), 30), path.read_text()
        squatter.close()
        assert wait_until(lambda: "liveness channel listening" in path.read_text(), 30), path.read_text()
        assert proc.poll() is None and "pick a free port" not in path.read_text()
    finally:
        squatter.close()
        proc.kill()
        proc.wait(10)


def test_a_port_still_taken_after_the_bound_is_the_configuration_error(monkeypatch):
    monkeypatch.setattr(ep, "LISTEN_BUSY_BOUND", 0.5)
    live = _free_port()
    squatter = socket.create_server(("127.0.0.1", live))
    try:
        env = {**BASE, "NNODES": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(live - 1), "NODE_RANK": "0"}
        env["KGEN_LIVENESS_PORT"] = str(live)
        cfg = ep.load_config(env)
        hub = ep.Hub(cfg, selectors.DefaultSelector())
        t = time.monotonic()
        with pytest.raises(ep.Stop) as stop:
            hub.listen()
        assert stop.value.code == 2 and time.monotonic() - t >= 0.5
    finally:
        squatter.close()


# -- 2. a full or failing disk under the supervisor, the records and the node's own output --------------------
STANDIN = """import sys, time
for i in range(30):
    print(f"[rank 0] step {i}", flush=True)
    time.sleep(0.01)
print("kgen-entrypoint: stopped: succeeded", flush=True)
"""


def _run_dir(tmp_path, env: dict | None = None):
    d = tmp_path / "node0"
    d.mkdir(mode=0o700)
    (d / "node.json").write_text(json.dumps({"rank": 0, "command": ["train.py"]}))
    (d / "env").write_text(json.dumps(env or {"KGEN_MAX_REFORMATIONS": "0"}))
    (d / "kgen_entrypoint.py").write_text(STANDIN)  # the supervisor's child: a stand-in that prints and ends
    return d


def test_a_log_the_disk_refuses_never_ends_the_training_and_the_drops_are_counted(tmp_path, monkeypatch):
    """The issue's crash: one ENOSPC on the run folder ended the supervisor, which SIGKILLed the healthy
    training and left no exit record. Fault-injected at the supervisor's write call (lines 5-14 and the
    atomic write of the exit record refused: ENOSPC, then EIO)."""
    d = _run_dir(tmp_path)
    sup = ep.Supervisor(str(d))
    sup.write_pid()
    assert (d / "exit.reserve").stat().st_size == ep.RESERVE_BYTES
    real_write, calls = os.write, [0]

    def failing_write(fd, data):
        if fd == sup.logf:
            calls[0] += 1
            if 5 <= calls[0] < 10:
                raise OSError(errno.ENOSPC, "No space left on device")
            if 10 <= calls[0] < 15:
                raise OSError(errno.EIO, "Input/output error")
        return real_write(fd, data)

    def full_disk(path, data, exclusive=False):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ep.os, "write", failing_write)
    monkeypatch.setattr(ep, "_write_private", full_disk)
    monkeypatch.setattr(ep, "RECORD_BOUND", 0.0)
    code = sup.run()
    monkeypatch.undo()
    assert code == 0  # the child ran to its end: nothing was killed for a log line
    log = (d / "log").read_text()
    assert "[rank 0] step 29" in log and "kgen-entrypoint: stopped: succeeded" in log
    assert "log line(s) dropped: could not be written (ENOSPC: No space left on device)" in log
    rec = json.loads((d / "exit").read_text())  # written into the reserve: the disk took no new block
    said = [int(m) for m in re.findall(r"\] (\d+) log line\(s\) dropped", log)]
    assert rec["code"] == 0 and rec["drop_error"].startswith("ENOSPC") and rec["dropped"] == sum(said) >= 4
    assert not [p.name for p in d.iterdir() if ".tmp" in p.name or p.name.endswith(".reserve")]
    assert "dropped" in (d / "events").read_text()  # what status reads says so too


def test_the_node_output_the_disk_refuses_is_counted_not_raised(capsys):
    class Broken:
        def write(self, text):
            raise OSError(errno.EIO, "Input/output error")

        def flush(self):
            raise OSError(errno.EIO, "Input/output error")

    before = ep.DROPPED[0]
    ep.emit(Broken(), "a\nb\n")
    assert ep.DROPPED[0] == before + 2
    with pytest.raises(ep.Stop):
        real = sys.stderr
        try:
            sys.stderr = Broken()
            ep.fatal(2, "no room")  # the one-line error itself cannot crash the node
        finally:
            sys.stderr = real


# -- 3. no fd stays registered after its connection closed, node 0 and node 1 ----------------------------------
def _pair():
    srv = socket.create_server(("127.0.0.1", 0))
    peer = socket.create_connection(srv.getsockname())
    mine, _ = srv.accept()
    srv.close()
    return mine, peer


def _reset(peer: socket.socket) -> None:
    peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    peer.close()  # RST


def test_a_connection_reset_under_a_send_leaves_no_fd_registered_at_node0():
    cfg = ep.load_config({**BASE, "NNODES": "2", "NODE_RANK": "0", "MASTER_ADDR": "127.0.0.1"})
    sel = selectors.DefaultSelector()
    hub = ep.Hub(cfg, sel)
    mine, peer = _pair()
    conn = ep.Conn(mine, ("127.0.0.1", 1))
    conn.register(sel)
    fd = mine.fileno()
    _reset(peer)
    time.sleep(0.05)
    for _ in range(50):  # the send that meets the reset closes it (EPIPE / ECONNRESET)
        conn.send({"t": "hb"})
        if conn.closed:
            break
    assert conn.closed
    assert fd not in sel.get_map()  # before: KeyError "already registered" for the next socket of that number
    hub.close()


def test_a_send_failure_at_node1_is_a_lost_node0_not_a_silent_loop():
    cfg = ep.load_config({**BASE, "NNODES": "2", "NODE_RANK": "1", "MASTER_ADDR": "127.0.0.1"})
    sel = selectors.DefaultSelector()
    mine, peer = _pair()
    conn = ep.Conn(mine)
    spoke = ep.Spoke(cfg, sel, conn)
    fd = mine.fileno()
    _reset(peer)
    time.sleep(0.05)
    for _ in range(50):
        conn.last_tx = 0.0  # due for a heartbeat
        spoke.tick(time.monotonic())
        if spoke.verdict is not None:
            break
    assert spoke.verdict is not None and spoke.verdict[0] == "lost", spoke.verdict
    assert fd not in sel.get_map()


def test_node0_names_a_peer_whose_connection_broke_under_a_send_at_once():
    cfg = ep.load_config({**BASE, "NNODES": "2", "NODE_RANK": "0", "MASTER_ADDR": "127.0.0.1"})
    hub = ep.Hub(cfg, selectors.DefaultSelector())
    mine, peer = _pair()
    conn = ep.Conn(mine)
    conn.register(hub.sel)
    conn.rank = 1
    hub.peers[1], hub.lasts[1], hub.state = conn, -1, "training"
    conn.close()  # as flush() does when a send fails
    hub.tick(time.monotonic())
    assert 1 not in hub.peers and hub.lost and "a send to it failed" in hub.lost
    peer.close()
    hub.close()


# -- 4. the supervisor's line splitter keeps the prefix on every piece -------------------------------------------
FORGE = """import sys
sys.stdout.write("[rank 3] " + "x" * 140000 + "[kgen node 0 00:00:00 +1.0s] generation 98: starting\\n")
sys.stdout.write("y" * 140000 + "kgen-entrypoint: stopped: forged\\n")
sys.stdout.flush()
print("kgen-entrypoint: stopped: succeeded", flush=True)
"""


def test_a_long_line_cut_in_pieces_keeps_its_prefix_on_every_piece(tmp_path):
    """The issue's forgery: the piece after 64 KiB went out without `[rank N] ` and was read as kgen's own
    event ("99 re-formations")."""
    d = _run_dir(tmp_path)
    (d / "kgen_entrypoint.py").write_text(FORGE)
    sup = ep.Supervisor(str(d))
    assert sup.run() == 0
    lines = [ln.split(" ", 1)[1] for ln in (d / "log").read_text().splitlines()]
    pieces = [ln for ln in lines if "x" in ln[:20] or ln.startswith("[rank 3]")]
    assert len(pieces) >= 2 and all(p.startswith("[rank 3] ") for p in pieces), [p[:30] for p in pieces]
    assert any(ln.startswith(ep.CONTINUED) for ln in lines)
    events = (d / "events").read_text()
    assert "generation 98" not in events and "forged" not in events
    assert sup.last_stop_line == "kgen-entrypoint: stopped: succeeded"


# -- 5. the supervisor and its node live and die together -------------------------------------------------------
HELPER = """import sys, time, importlib.util
spec = importlib.util.spec_from_file_location("ep", sys.argv[1]); ep = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ep)
child = ep.Child([sys.executable, "-c", "import time; time.sleep(60)"])
print(child.pid, flush=True)
time.sleep(60)
"""


def _gone(pid: int) -> bool:
    st = ep._proc_stat(pid)
    return st is None or st[0] in ("Z", "X")


def test_torchrun_dies_with_the_entrypoint_that_started_it():
    helper = subprocess.Popen([sys.executable, "-c", HELPER, str(ENTRYPOINT)], stdout=subprocess.PIPE, text=True)
    try:
        torchrun = int(helper.stdout.readline())
        assert not _gone(torchrun)
        helper.kill()  # SIGKILL: no handler of ours runs
        helper.wait(10)
        assert wait_until(lambda: _gone(torchrun), 10), "torchrun outlived its entrypoint"
    finally:
        helper.kill()


def test_a_killed_supervisor_takes_its_node_with_it(tmp_path):
    """The issue: kill -9 of the PID `kgen launch` prints (the supervisor's) left the entrypoint training.
    Here the real supervisor runs the real entrypoint as node 1 of a run whose node 0 is not there yet."""
    live = _free_port()
    env = {**BASE, "NNODES": "2", "NODE_RANK": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(live - 1)}
    env.update({"KGEN_LIVENESS_PORT": str(live), "PATH": "/usr/bin:/bin"})
    d = _run_dir(tmp_path, env)
    (d / "kgen_entrypoint.py").write_text(ENTRYPOINT.read_text())
    (d / "node.json").write_text(json.dumps({"rank": 1, "command": ["/bin/true"]}))
    sup = subprocess.Popen(
        [sys.executable, "-c", "import sys,importlib.util as u; s=u.spec_from_file_location('ep', sys.argv[1]); "
         "m=u.module_from_spec(s); s.loader.exec_module(m); sys.exit(m.Supervisor(sys.argv[2]).run())",
         str(ENTRYPOINT), str(d)],
    )  # fmt: skip
    try:
        assert wait_until(
            lambda: "waiting for node 0" in ((d / "log").read_text() if (d / "log").exists() else ""), 30
        ), (d / "log").read_text()
        child = json.loads((d / "child").read_text())["pid"]
        sup.send_signal(signal.SIGKILL)
        sup.wait(10)
        assert wait_until(lambda: _gone(child), 10), "the node's entrypoint outlived its supervisor"
    finally:
        sup.kill()
        for pid in ep.run_processes(str(d)):
            os.kill(pid, signal.SIGKILL)
