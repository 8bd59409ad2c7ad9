"""The standby agent (entrypoint/parts/standby.py): a survivor's next torchrun, started between generations.

End to end on one node: torchrun --standalone with one worker (the re-formation itself, on pods:
test_reform.py, which checks that the survivors' torchrun was their standby agent)."""

from __future__ import annotations

import os
import socket
import sys
import threading
import time

import pytest
from test_entrypoint_fast import ep

pytestmark = pytest.mark.torch


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def wait_child(child, timeout: float = 120) -> int | None:
    deadline = time.monotonic() + timeout
    while child.rc is None and time.monotonic() < deadline:
        child.reap()
        time.sleep(0.05)
    if child.rc is not None:
        child.kill_tree(2.0)
    return child.rc


@pytest.mark.timeout(180)
def test_the_standby_runs_torchrun_with_the_generations_arguments_and_environment(tmp_path, capsys):
    script = tmp_path / "show.py"
    script.write_text("import os, sys\nprint('gen', os.environ['KGEN_RESTART_COUNT'], sys.argv[1:])\n")
    standby = ep.Standby()
    standby.ready()
    time.sleep(0.5)  # the standby is importing torch meanwhile
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=1"]
    argv += ["--redirects=3", f"--log-dir={tmp_path / 'logs'}", str(script), "a b", "$x"]
    env = dict(os.environ, KGEN_RESTART_COUNT="7")
    child = standby.take(argv, env, str(tmp_path / "logs"), 0, None)
    assert child is not None and standby.proc is None
    assert wait_child(child) == 0
    out = capsys.readouterr()
    assert "[rank 0] gen 7 ['a b', '$x']" in out.out, out


def test_discard_ends_the_standby_and_a_gone_one_is_not_taken(tmp_path):
    standby = ep.Standby()
    standby.ready()
    pid = standby.proc.pid
    standby.discard()
    assert gone(pid) and standby.proc is None and standby.fd == -1
    standby.ready()
    os.killpg(standby.proc.pid, 9)
    standby.proc.wait()
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "x.py"]
    assert standby.take(argv, dict(os.environ), str(tmp_path), 0, None) is None  # torchrun starts anew


@pytest.mark.timeout(180)
def test_a_standby_on_another_node_starts_torchrun_once_node0s_port_accepts(tmp_path, capsys):
    """Every node but 0 waits for node 0's rendezvous port before torchrun (its store client, started early,
    would back off for seconds); here a listener that opens 3 s later, then --help to end at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    opened: list[float] = []

    def listen_later() -> None:
        time.sleep(3)
        srv = socket.create_server(("127.0.0.1", port))
        opened.append(time.monotonic())
        srv.settimeout(30)
        try:
            srv.accept()[0].close()
        finally:
            srv.close()

    threading.Thread(target=listen_later, daemon=True).start()
    standby = ep.Standby()
    standby.ready()
    argv = [sys.executable, "-m", "torch.distributed.run", "--help"]
    child = standby.take(argv, dict(os.environ), str(tmp_path / "logs"), 0, ("127.0.0.1", port, 60, 0.05))
    assert child is not None
    assert wait_child(child) == 0
    ended = time.monotonic()
    assert opened and ended >= opened[0], "torchrun waited for the port"
    assert "usage:" in capsys.readouterr().out
