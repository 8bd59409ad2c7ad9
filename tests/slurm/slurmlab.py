"""A real Slurm cluster on one machine (root, Linux, util-linux `unshare`, Debian slurmctld/slurmd/munge 22.05).

One controller and N compute hosts, each host = `unshare --pid --uts --mount --fork --mount-proc` running
nodeinit.py as its PID 1: its own host name (the controller's is the `SlurmctldHost` name, the nodes are
n0..nN-1), its own /proc and /etc/hosts, and its daemon (`slurmctld -D` / `slurmd -D`) on its own loopback
address 127.0.X.Y with a port of its own (`Port=` per node). One `munged` serves the lab on a private
socket with a private key. slurm.conf, the state and spool folders and every log live in one temp folder:
never /etc/slurm, /etc/munge or the system munge socket. Clients (sbatch, squeue, scontrol, scancel) find
the lab through SLURM_CONF (``env()``).

What a cluster on one machine needs: distinct `Port=` per node, `ProctrackType=proctrack/linuxproc`,
`TaskPlugin=task/none`, `SlurmdSpoolDir` with `%n`, slurmctld under the host name named in `SlurmctldHost`.
For fast tests: `cred_expire=5` (a requeued job waits this long, not 120 s), `SlurmdTimeout` short (a dead
node is DOWN in seconds), `KillWait=5`, and the scheduler woken every 2 s.

Faults: crash (SIGKILL to a host's PID 1: slurmd, slurmstepd and every task die at once), freeze/thaw
(SIGSTOP/SIGCONT to every process of the host). Everything is cleaned up by PID.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "entrypoint"))
from podharness import ns_pids  # noqa: E402

NODEINIT = Path(__file__).resolve().parent / "nodeinit.py"
DAEMONS = {"slurmctld": "/usr/sbin/slurmctld", "slurmd": "/usr/sbin/slurmd", "munged": "/usr/sbin/munged"}
CLIENTS = ("sbatch", "srun", "squeue", "scontrol", "scancel", "sinfo")
CONTROLLER = "kgenctl"
SLURMD_TIMEOUT = 6  # seconds before an unresponsive node is DOWN (default 300)
KILL_WAIT = 5  # SIGTERM -> SIGKILL (default 30)
INSTALL = "apt-get install -y slurmctld slurmd slurm-client munge"


def supported() -> str | None:
    if os.geteuid() != 0:
        return "needs root (unshare --pid --uts --mount; the Slurm daemons run as root here)"
    if not shutil.which("unshare"):
        return "needs unshare (util-linux)"
    for name, path in DAEMONS.items():
        if not os.access(path, os.X_OK):
            return f"needs {name} ({path}): {INSTALL}"
    for tool in CLIENTS:
        if not shutil.which(tool):
            return f"needs {tool} (slurm-client): {INSTALL}"
    return None


def free_port(addr: str) -> int:
    with socket.socket() as s:
        s.bind((addr, 0))
        return s.getsockname()[1]


def comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


@dataclass
class Host:
    name: str
    addr: str
    port: int
    daemon: list[str]
    log: Path
    proc: subprocess.Popen | None = None
    init_pid: int = 0

    def pids(self) -> list[int]:
        return ns_pids(self.init_pid) if self.init_pid else []

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class SlurmLab:
    """A controller and ``n`` compute nodes n0..n{n-1} (2 CPUs, 4000 MB each), one partition `main`."""

    def __init__(self, n: int = 4) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="kgen-slurm-", dir="/tmp"))
        # munged wants every folder above its socket searchable by all
        os.chmod(self.root, 0o755)
        self.conf = self.root / "slurm.conf"
        self.hosts_file = self.root / "hosts"
        for sub in ("munge", "state", "spool", "log"):
            (self.root / sub).mkdir(mode=0o755)
        (self.root / "munge-key").mkdir(mode=0o700)
        self.munge_key = self.root / "munge-key" / "munge.key"
        self.munge_socket = self.root / "munge" / "munge.socket"
        self.munged: subprocess.Popen | None = None
        base = random.randint(1, 240)
        net = f"127.{base}.{random.randint(1, 250)}"
        ctl_addr = f"{net}.2"
        self.controller = Host(CONTROLLER, ctl_addr, free_port(ctl_addr), [], self.root / "log" / "slurmctld.out")
        self.nodes = [Host(f"n{i}", f"{net}.{10 + i}", 0, [], self.root / "log" / f"slurmd-n{i}.out") for i in range(n)]
        for h in self.nodes:
            h.port = free_port(h.addr)
            (self.root / "spool" / h.name).mkdir(mode=0o755)
            h.daemon = [DAEMONS["slurmd"], "-D", "-f", str(self.conf), "-N", h.name]
        self.controller.daemon = [DAEMONS["slurmctld"], "-D", "-i", "-f", str(self.conf)]
        self._write_config()

    # ------------------------------------------------------------------ setup
    def _write_config(self) -> None:
        r = self.root
        self.hosts_file.write_text(
            "127.0.0.1 localhost\n"
            + f"{self.controller.addr} {CONTROLLER}\n"
            + "".join(f"{h.addr} {h.name}\n" for h in self.nodes)
        )
        nodes = "".join(
            f"NodeName={h.name} NodeAddr={h.addr} NodeHostname={h.name} Port={h.port} CPUs=2 RealMemory=4000 "
            "State=UNKNOWN\n"
            for h in self.nodes
        )
        names = ",".join(h.name for h in self.nodes)
        self.conf.write_text(
            "ClusterName=kgenlab\n"
            f"SlurmctldHost={CONTROLLER}({self.controller.addr})\n"
            f"SlurmctldPort={self.controller.port}\n"
            "SlurmUser=root\nSlurmdUser=root\n"
            "AuthType=auth/munge\nCredType=cred/munge\n"
            f"AuthInfo=socket={self.munge_socket},cred_expire=5\n"
            f"StateSaveLocation={r / 'state'}\n"
            f"SlurmdSpoolDir={r / 'spool'}/%n\n"
            f"SlurmctldPidFile={r / 'slurmctld.pid'}\n"
            f"SlurmdPidFile={r / 'spool'}/%n/slurmd.pid\n"
            f"SlurmctldLogFile={r / 'log' / 'slurmctld.log'}\n"
            f"SlurmdLogFile={r / 'log'}/slurmd-%n.log\n"
            "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
            "JobAcctGatherType=jobacct_gather/none\nAccountingStorageType=accounting_storage/none\n"
            "MpiDefault=none\nMailProg=/bin/true\n"
            "SchedulerType=sched/backfill\nSchedulerParameters=sched_interval=2,bf_interval=2\n"
            "SelectType=select/cons_tres\nSelectTypeParameters=CR_Core_Memory\n"
            f"ReturnToService=2\nSlurmdTimeout={SLURMD_TIMEOUT}\nKillWait={KILL_WAIT}\n"
            "InactiveLimit=0\nMinJobAge=300\n"
            + nodes
            + f"PartitionName=main Nodes={names} Default=YES MaxTime=INFINITE State=UP\n"
        )

    def env(self) -> dict[str, str]:
        """The environment a client of this cluster needs (SLURM_CONF)."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def start(self, timeout: float = 30.0) -> SlurmLab:
        self._start_munge(timeout)
        self._start_host(self.controller)
        self._wait_listen(self.controller, timeout)
        for h in self.nodes:
            self._start_host(h)
        self.wait_idle(timeout=timeout)
        return self

    def _start_munge(self, timeout: float) -> None:
        fd = os.open(self.munge_key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(os.urandom(1024))
        m = self.root / "munge"
        self.munged = subprocess.Popen(
            [DAEMONS["munged"], "-F", f"--socket={self.munge_socket}", f"--key-file={self.munge_key}",
             f"--pid-file={m / 'munged.pid'}", f"--log-file={self.root / 'log' / 'munged.log'}",
             f"--seed-file={m / 'munged.seed'}", "--num-threads=4"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=open(self.root / "log" / "munged.out", "ab"),
        )  # fmt: skip
        deadline = time.monotonic() + timeout
        while not self.munge_socket.exists():
            if self.munged.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"munged did not start: {(self.root / 'log' / 'munged.out').read_text()}")
            time.sleep(0.02)

    def _start_host(self, h: Host) -> None:
        h.proc = subprocess.Popen(
            ["unshare", "--pid", "--uts", "--mount", "--fork", "--mount-proc", "--", sys.executable, str(NODEINIT),
             h.name, str(self.hosts_file), str(h.log), "--", *h.daemon],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert h.proc.stdout is not None
        line = h.proc.stdout.readline()
        if b"ready" not in line:
            raise RuntimeError(f"host {h.name} did not start: {line!r} {h.log.read_text() if h.log.exists() else ''}")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with open(f"/proc/{h.proc.pid}/task/{h.proc.pid}/children") as fh:
                    kids = [int(x) for x in fh.read().split()]
            except OSError:
                kids = []
            if kids:
                h.init_pid = kids[0]
                return
            time.sleep(0.02)
        raise RuntimeError(f"host {h.name}: no init process")

    def _wait_listen(self, h: Host, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with socket.create_connection((h.addr, h.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"{h.name} does not listen on {h.addr}:{h.port}: {h.log.read_text()}")

    # ------------------------------------------------------------------ client
    def run(self, *argv: str, timeout: float = 30) -> subprocess.CompletedProcess:
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, env=self.env())

    def node_states(self) -> dict[str, str]:
        out = self.run("sinfo", "-h", "-N", "-o", "%N=%T").stdout.split()
        return dict(x.split("=", 1) for x in out if "=" in x)

    def wait_idle(self, names: list[str] | None = None, timeout: float = 60.0) -> None:
        """Until the named nodes (default: all) are idle: up and running no job."""
        names = names or [h.name for h in self.nodes]
        deadline = time.monotonic() + timeout
        states: dict[str, str] = {}
        while time.monotonic() < deadline:
            states = self.node_states()
            if all(states.get(n) == "idle" for n in names):
                return
            time.sleep(0.2)
        raise RuntimeError(f"nodes not idle after {timeout:g}s: {states}\n{self.ctld_log()[-3000:]}")

    def ctld_log(self) -> str:
        p = self.root / "log" / "slurmctld.log"
        return p.read_text(errors="replace") if p.exists() else ""

    # ------------------------------------------------------------------ faults
    def host(self, name: str) -> Host:
        return next(h for h in self.nodes if h.name == name)

    def crash(self, name: str) -> None:
        """Every process of the host dies at once (SIGKILL to its PID 1, as a power cut)."""
        h = self.host(name)
        os.kill(h.init_pid, signal.SIGKILL)
        if h.proc is not None:
            h.proc.wait(timeout=10)
            if h.proc.stdout:
                h.proc.stdout.close()
        h.init_pid = 0

    def reboot(self, name: str) -> None:
        """A crashed host comes back: a new namespace and slurmd (ReturnToService=2: it rejoins by itself)."""
        h = self.host(name)
        if h.init_pid:
            self.crash(name)
        self._start_host(h)

    def freeze(self, name: str) -> None:
        self._signal_host(name, signal.SIGSTOP)

    def thaw(self, name: str) -> None:
        self._signal_host(name, signal.SIGCONT)

    def _signal_host(self, name: str, sig: int) -> None:
        h = self.host(name)
        for pid in h.pids():
            try:
                os.kill(pid, sig)
            except OSError:
                pass

    def job_processes(self, name: str) -> list[str]:
        """Command lines of the host's processes other than its init and slurmd (a job's slurmstepd and tasks)."""
        h = self.host(name)
        out = []
        for pid in h.pids():
            if pid == h.init_pid or comm(pid) == "slurmd":
                continue
            line = cmdline(pid)
            if line:
                out.append(line)
        return out

    # ------------------------------------------------------------------ cleanup
    def cleanup(self) -> None:
        for h in [*self.nodes, self.controller]:
            if h.init_pid:
                try:
                    os.kill(h.init_pid, signal.SIGKILL)
                except OSError:
                    pass
            if h.proc is not None:
                try:
                    h.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    h.proc.kill()
                if h.proc.stdout:
                    h.proc.stdout.close()
        if self.munged is not None:
            self.munged.kill()
            self.munged.wait(timeout=10)
        shutil.rmtree(self.root, ignore_errors=True)
