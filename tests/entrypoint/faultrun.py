"""A bare-metal run on this machine for the fault matrix: every node under its real supervisor (the code
`kgen launch --local` detaches), the real entrypoint, real torchrun and gloo workers (trainloop.py); a signal
to one process of one node at one phase; the verdict through the real status path (``--state`` of every node
into kgen.baremetal.adapter and kgen.runs.verdict). Every process is ended by PID at cleanup."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from podharness import free_port_pair, write_secret
from test_entrypoint_fast import ENTRYPOINT, ep

TRAINLOOP = Path(__file__).resolve().parent / "trainloop.py"
SUPERVISE = (
    "import sys, importlib.util as u; s = u.spec_from_file_location('kgen_entrypoint', sys.argv[1]); "
    "m = u.module_from_spec(s); s.loader.exec_module(m); sup = m.Supervisor(sys.argv[2]); sup.write_pid(); "
    "sys.exit(sup.guarded_run())"
)


class Run:
    def __init__(self, tmp: Path, nodes: int = 2, steps: int = 16, sleep: float = 0.25, **env: str) -> None:
        self.tmp, self.nodes = Path(tmp), nodes
        self.port = free_port_pair()
        secret = write_secret(self.tmp, f"secret{self.port}")
        self.dirs: list[Path] = []
        self.sups: dict[int, subprocess.Popen] = {}
        for rank in range(nodes):
            d = self.tmp / f"run{self.port}" / f"node{rank}"
            d.mkdir(parents=True, mode=0o700)
            cmd = [str(TRAINLOOP), "--steps", str(steps), "--sleep", str(sleep)]
            (d / "node.json").write_text(json.dumps({"rank": rank, "command": cmd, "workdir": str(self.tmp)}))
            node_env = {
                "NNODES": str(nodes),
                "NPROC_PER_NODE": "1",
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(self.port),
                "NODE_RANK": str(rank),
                "KGEN_SECRET_FILE": secret,
                "GLOO_SOCKET_IFNAME": "lo",
                "PATH": f"{os.path.dirname(sys.executable)}:/usr/bin:/bin",
                "KGEN_RDZV_TIMEOUT": "60",
                "KGEN_REPLACEMENT_TIMEOUT": "60",
                "KGEN_HEALTH_GATE": "off",  # the gate's own tests: test_health_gate_netns.py
                **env,
            }
            (d / "env").write_text(json.dumps(node_env))
            (d / "kgen_entrypoint.py").write_text(ENTRYPOINT.read_text())
            self.dirs.append(d)

    # -- processes ------------------------------------------------------------------------------------
    def start(self, *ranks: int) -> None:
        for rank in ranks or range(self.nodes):
            d = self.dirs[rank]
            self.sups[rank] = subprocess.Popen(
                [sys.executable, "-c", SUPERVISE, str(d / "kgen_entrypoint.py"), str(d)],
                cwd=self.tmp,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=open(d / "supervisor.err", "w"),  # noqa: SIM115 - closed with the process
                start_new_session=True,
            )

    def pid(self, rank: int, kind: str) -> int | None:
        """The PID of node `rank`'s supervisor, entrypoint, torchrun or (its first) worker, None when none."""
        if kind == "supervisor":
            return self.sups[rank].pid
        child = ep._read_json(str(self.dirs[rank] / "child"))
        entry = child.get("pid") if child and ep._same_process(child) else None
        if kind == "entrypoint" or entry is None:
            return entry
        torchrun = next(iter(_children(entry)), None)
        if kind == "torchrun" or torchrun is None:
            return torchrun
        return next(iter(_children(torchrun)), None)

    def signal(self, rank: int, kind: str, sig: int) -> int:
        pid = self.pid(rank, kind)
        assert pid is not None, f"node {rank} has no {kind}\n{self.logs()}"
        os.kill(pid, sig)
        return pid

    def wait(self, timeout: float) -> dict[int, int | None]:
        """Every supervisor's exit status (None: still running after `timeout`)."""
        deadline = time.monotonic() + timeout
        out: dict[int, int | None] = {}
        for rank, proc in self.sups.items():
            try:
                out[rank] = proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                out[rank] = None
        return out

    def cleanup(self) -> None:
        for rank, proc in self.sups.items():
            for pid in ep.run_processes(str(self.dirs[rank])):
                try:
                    os.kill(pid, signal.SIGCONT)
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
                proc.kill()
            proc.wait(10)

    # -- what the run says ------------------------------------------------------------------------------
    def log(self, rank: int) -> str:
        try:
            return (self.dirs[rank] / "log").read_text(errors="replace")
        except OSError:
            return ""

    def logs(self) -> str:
        return "\n".join(f"--- node {r}\n{self.log(r)[-4000:]}" for r in range(self.nodes))

    def steps(self, rank: int) -> int:
        return len(re.findall(r"KGEN_EVT \S+ rank=\d+ step ", self.log(rank)))

    def wait_for(self, predicate, timeout: float = 90.0) -> float:
        t0 = time.monotonic()
        while not predicate():
            assert time.monotonic() - t0 < timeout, f"timed out\n{self.logs()}"
            time.sleep(0.1)
        return time.monotonic() - t0

    def exits(self) -> dict[int, dict | None]:
        return {r: ep._read_json(str(d / "exit")) for r, d in enumerate(self.dirs)}

    def verdict(self):
        from kgen.baremetal.adapter import NodeState, to_records
        from kgen.baremetal.record import NodeRecord, RunRecord
        from kgen.runs.verdict import judge

        rec = RunRecord(
            name="faults", mode="local", nodes=[NodeRecord(r, "localhost", str(d)) for r, d in enumerate(self.dirs)]
        )
        return judge(to_records(rec, [NodeState(n, ep.node_state(n.dir)) for n in rec.nodes]))


def _children(pid: int) -> list[int]:
    """Live children (a zombie not reaped yet is no process of the node any more)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            kids = [int(p) for p in fh.read().split()]
    except OSError:
        return []
    return [k for k in kids if (ep._proc_stat(k) or ["Z"])[0] not in ("Z", "X")]
