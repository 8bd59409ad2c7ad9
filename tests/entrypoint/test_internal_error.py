"""The runtime never blames the user for its own fault. An exception escaping kgen's own code (the
hub, a node's link, the bare-metal supervisor) ends that node with exit 70 and the line `kgen entrypoint
internal error on node N: <Type>: <message> (report it)`, its traceback in the log; the other nodes end with
5 naming that node (never "the training script failed"); no torch process is left behind.

The fault is injected into the real entrypoint of a real 2-node group training with torch and gloo: a small
wrapper loads the file, makes one method raise once a trigger file exists, and runs its main(). (There is no
known input that makes kgen's code raise any more: the fuzz campaign is how that is checked.)"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from podharness import REPO, TRAINLOOP, free_port_pair, write_secret

pytestmark = pytest.mark.torch

ENTRYPOINT = REPO / "entrypoint" / "kgen_entrypoint.py"
WRAPPER = """
import importlib.util, os, sys
spec = importlib.util.spec_from_file_location("kgen_entrypoint", {entrypoint!r})
ep = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ep)
cls = getattr(ep, {cls!r})
real = getattr(cls, {method!r})

def broken(self, *args, **kwargs):
    if os.path.exists({trigger!r}):
        raise {exc}
    return real(self, *args, **kwargs)

setattr(cls, {method!r}, broken)
sys.exit(ep.main(sys.argv[1:]))
"""


def marked(mark: str) -> list[int]:
    """Live processes whose environment holds KGEN_TEST_MARK=mark (every process of this test's group)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as fh:
                env = fh.read()
            with open(f"/proc/{name}/stat", "rb") as fh:
                state = fh.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if f"KGEN_TEST_MARK={mark}".encode() in env.split(b"\0") and state not in (b"Z", b"X"):
            found.append(int(name))
    return found


class Group:
    """Two plain entrypoint processes (bare-metal style) training trainloop.py; `broken` (rank, class,
    method, exception) runs that rank through the fault-injecting wrapper."""

    def __init__(self, tmp_path: Path, broken: tuple[int, str, str, str]) -> None:
        self.mark = uuid.uuid4().hex
        self.trigger = tmp_path / "trigger"
        port = free_port_pair()
        secret = write_secret(tmp_path)
        base = {
            "PATH": f"{os.path.dirname(sys.executable)}:/usr/bin:/bin",
            "NNODES": "2",
            "NPROC_PER_NODE": "1",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "KGEN_LIVENESS_PORT": str(port + 1),
            "KGEN_SECRET_FILE": secret,
            "KGEN_TEST_MARK": self.mark,
            "PYTHONUNBUFFERED": "1",
        }
        rank, cls, method, exc = broken
        wrapper = tmp_path / "broken_entrypoint.py"
        wrapper.write_text(
            WRAPPER.format(entrypoint=str(ENTRYPOINT), cls=cls, method=method, trigger=str(self.trigger), exc=exc)
        )
        cmd = ["--", str(TRAINLOOP), "--steps", "400", "--sleep", "0.1"]
        self.logs = [tmp_path / f"node{r}.log" for r in range(2)]
        self.procs = []
        for r in range(2):
            script = wrapper if r == rank else ENTRYPOINT
            with open(self.logs[r], "w") as log:
                self.procs.append(
                    subprocess.Popen(
                        [sys.executable, str(script), *cmd],
                        env={**base, "NODE_RANK": str(r), "HOSTNAME": f"host{r}"},
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )

    def log(self, r: int) -> str:
        return self.logs[r].read_text(errors="replace")

    def wait_training(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not all("step 3" in self.log(r) for r in range(2)):
            assert time.monotonic() < deadline, self.log(0)[-3000:] + self.log(1)[-3000:]
            assert all(p.poll() is None for p in self.procs), self.log(0)[-3000:] + self.log(1)[-3000:]
            time.sleep(0.2)

    def break_it(self, timeout: float = 60) -> tuple[list[int], float]:
        t = time.monotonic()
        self.trigger.touch()
        codes = [p.wait(timeout) for p in self.procs]
        return codes, time.monotonic() - t

    def cleanup(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(10)
        for pid in marked(self.mark):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    "rank, cls, method",
    [(0, "Hub", "tick"), (1, "Spoke", "tick")],
    ids=["node0-hub", "node1-link"],
)
def test_an_exception_in_kgens_code_is_reported_as_kgens_and_ends_the_group(tmp_path, rank, cls, method):
    group = Group(tmp_path, (rank, cls, method, 'RecursionError("maximum recursion depth exceeded (injected)")'))
    try:
        group.wait_training()
        codes, took = group.break_it()
        other = 1 - rank
        assert codes[rank] == 70 and codes[other] == 5, (codes, group.log(0)[-2000:], group.log(1)[-2000:])
        reason = (
            f"kgen entrypoint internal error on node {rank}: RecursionError: maximum recursion depth exceeded "
            "(injected) (report it)"
        )
        broken, survivor = group.log(rank), group.log(other)
        assert broken.rstrip().splitlines()[-1] == f"kgen-entrypoint: stopped: {reason}"
        assert "Traceback (most recent call last):" in broken and "in broken" in broken  # the traceback is in the log
        assert re.search(rf"FAIL-STOP: .*{re.escape(reason)}", survivor), survivor[-2000:]
        for log in (broken, survivor):
            assert "the training script failed" not in log and "torch failed with code" not in log
        deadline = time.monotonic() + 15
        while marked(group.mark) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert marked(group.mark) == [], "a torch process was left behind"
        print(f"\ninternal error on node {rank}: every node ended {took:.1f} s after the fault (exit {codes})")
    finally:
        group.cleanup()


@pytest.mark.timeout(180)
def test_the_bare_metal_supervisors_own_failure_is_recorded_as_kgens(tmp_path):
    """The detached supervisor of a node (`--run-dir DIR --detach`) fails: the traceback and the reason go into
    DIR/log, DIR/exit says 70 and why, and every process of the node is ended."""
    run_dir = tmp_path / "run" / "node0"
    run_dir.mkdir(parents=True, mode=0o700)
    mark = uuid.uuid4().hex
    env = {
        "NNODES": "1",
        "NPROC_PER_NODE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port_pair()),
        "NODE_RANK": "0",
        "KGEN_TEST_MARK": mark,
        "PATH": f"{os.path.dirname(sys.executable)}:/usr/bin:/bin",
    }
    (run_dir / "env").write_text(__import__("json").dumps(env))
    trigger = tmp_path / "trigger"
    wrapper = tmp_path / "broken_supervisor.py"
    wrapper.write_text(
        WRAPPER.format(
            entrypoint=str(ENTRYPOINT),
            cls="Supervisor",
            method="_take_signals",
            trigger=str(trigger),
            exc='RuntimeError("injected")',
        )  # fmt: skip
    )
    (run_dir / "kgen_entrypoint.py").write_bytes(ENTRYPOINT.read_bytes())
    res = subprocess.run(
        [sys.executable, str(wrapper), "--run-dir", str(run_dir), "--detach", "--", str(TRAINLOOP), "--steps", "400"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "KGEN_TEST_MARK": mark},
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr
    try:
        deadline = time.monotonic() + 120
        while "step 3" not in (run_dir / "log").read_text(errors="replace"):
            assert time.monotonic() < deadline, (run_dir / "log").read_text()[-3000:]
            time.sleep(0.2)
        trigger.touch()
        while not (run_dir / "exit").exists():
            assert time.monotonic() < deadline + 30, (run_dir / "log").read_text()[-3000:]
            time.sleep(0.2)
        rec = __import__("json").loads((run_dir / "exit").read_text())
        assert rec["code"] == 70
        assert rec["reason"] == "kgen supervisor internal error on node 0: RuntimeError: injected (report it)"
        log = (run_dir / "log").read_text(errors="replace")
        assert "Traceback (most recent call last):" in log
        assert "kgen-entrypoint: stopped: kgen supervisor internal error on node 0" in log
        deadline = time.monotonic() + 15
        while marked(mark) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert marked(mark) == [], "a process of the node was left behind"
    finally:
        for pid in marked(mark):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
