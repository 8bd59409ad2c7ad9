"""Real OpenSSH servers as simulated hosts (root, Linux, util-linux `unshare`, Debian openssh-server).

One host = `unshare --pid --uts --mount --fork --mount-proc` running hostinit.py as its PID 1: its own
host name, its own /proc and /etc/hosts, and `sshd -D -e -f <private config>` on its own loopback
address 127.0.0.X and a free port, with its own host key. The client side is a generated key, a
known_hosts with every host's key and an ssh_config (`Host h0` ... aliases) for `--ssh-config`: never
the machine's own sshd config, keys or ~/.ssh. Each host's remote user (root) gets HOME = the host's
own temp folder (sshd_config SetEnv), so its `~/.local/state/kgen` is private to that host.

Faults, as the issue lists them: crash (SIGKILL to the namespace's PID 1: every process of the host
dies at once), freeze/thaw (SIGSTOP/SIGCONT to every process of the host, sshd included), sshd dies
(SIGKILL to the host's sshd only; the run goes on), unreachable (an alias to a port nothing listens on),
refused key (an alias with a key the hosts do not accept). Everything is cleaned up by PID.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "entrypoint"))
from podharness import free_port_pair, ns_pids  # noqa: E402,F401 - one home (tests and bench import them here)

HOSTINIT = Path(__file__).resolve().parent / "hostinit.py"
SSHD = "/usr/sbin/sshd"


def supported() -> str | None:
    if os.geteuid() != 0:
        return "needs root (unshare --pid --uts --mount)"
    for tool in ("unshare", "ssh", "ssh-keygen"):
        if not any(os.access(os.path.join(d, tool), os.X_OK) for d in os.environ.get("PATH", "").split(":")):
            return f"needs {tool}"
    if not os.access(SSHD, os.X_OK):
        return "needs openssh-server (/usr/sbin/sshd): apt-get install -y openssh-server"
    return None


def keygen(path: Path) -> str:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "kgen-test", "-f", str(path)], check=True, timeout=30
    )
    return path.with_suffix(".pub").read_text().split()[0:2][1]


def free_port(addr: str) -> int:
    with socket.socket() as s:
        s.bind((addr, 0))
        return s.getsockname()[1]


def children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            return [int(x) for x in fh.read().split()]
    except OSError:
        return []


def comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as fh:
            return fh.read().strip()
    except OSError:
        return ""


@dataclass
class Host:
    name: str
    addr: str
    port: int
    dir: Path
    proc: subprocess.Popen | None = None
    init_pid: int = 0
    extra: dict = field(default_factory=dict)

    @property
    def home(self) -> Path:
        return self.dir / "home"

    def runs(self) -> Path:
        return self.home / ".local" / "state" / "kgen" / "runs"

    def pids(self) -> list[int]:
        return ns_pids(self.init_pid) if self.init_pid else []

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class SshLab:
    """N ssh hosts h0..hN-1 (plus the fault aliases `unreachable` and `badkey`)."""

    def __init__(self, root: Path, n: int, prefix: str = "h") -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self.client_key = root / "client_key"
        keygen(self.client_key)
        self.bad_key = root / "bad_key"
        keygen(self.bad_key)
        base = random.randint(2, 200)
        self.hosts = [
            Host(f"{prefix}{i}", f"127.0.{base % 250 + 1}.{(base + i) % 250 + 2}", 0, root / f"{prefix}{i}")
            for i in range(n)
        ]
        for h in self.hosts:
            h.port = free_port(h.addr)
        self.ssh_config = root / "ssh_config"
        self.known_hosts = root / "known_hosts"
        self.authorized = root / "authorized_keys"
        self.authorized.write_text((root / "client_key.pub").read_text())
        self.unreachable_port = free_port("127.0.0.1")
        self._write_hosts()

    # ------------------------------------------------------------------ setup
    def _write_hosts(self) -> None:
        known, config = [], []
        etc_hosts = "127.0.0.1 localhost\n" + "".join(f"{h.addr} {h.name}\n" for h in self.hosts)
        for h in self.hosts:
            (h.dir / "etc").mkdir(parents=True, exist_ok=True)
            h.home.mkdir(parents=True, exist_ok=True)
            (h.dir / "hosts").write_text(etc_hosts)
            key = h.dir / "etc" / "host_key"
            if not key.exists():
                keygen(key)
            pub = key.with_suffix(".pub").read_text().split()
            known.append(f"[{h.addr}]:{h.port} {pub[0]} {pub[1]}")
            (h.dir / "etc" / "sshd_config").write_text(
                f"ListenAddress {h.addr}:{h.port}\n"
                f"HostKey {key}\n"
                "PidFile none\n"
                f"AuthorizedKeysFile {self.authorized}\n"
                "PermitRootLogin prohibit-password\n"
                "PasswordAuthentication no\n"
                "KbdInteractiveAuthentication no\n"
                "UsePAM no\n"
                # the temp folders live under /tmp (world-writable): sshd's StrictModes would refuse them
                "StrictModes no\n"
                "PrintMotd no\n"
                "LogLevel ERROR\n"
                "MaxStartups 200\n"
                "MaxSessions 200\n"
                f"SetEnv HOME={h.home}\n"
            )
            config.append(self._alias(h.name, h.addr, h.port, self.client_key))
        config.append(self._alias("unreachable", "127.0.0.1", self.unreachable_port, self.client_key))
        h0 = self.hosts[0]
        config.append(self._alias("badkey", h0.addr, h0.port, self.bad_key))
        self.known_hosts.write_text("\n".join(known) + "\n")
        self.ssh_config.write_text("\n".join(config))

    def _alias(self, name: str, addr: str, port: int, key: Path) -> str:
        return (
            f"Host {name}\n"
            f"  HostName {addr}\n"
            f"  Port {port}\n"
            "  User root\n"
            f"  IdentityFile {key}\n"
            "  IdentitiesOnly yes\n"
            "  IdentityAgent none\n"
            f"  UserKnownHostsFile {self.known_hosts}\n"
            "  GlobalKnownHostsFile /dev/null\n"
            "  StrictHostKeyChecking yes\n"
        )

    def add_alias(self, name: str, host: Host) -> None:
        """One more name for ``host`` (the bench's 64 aliases over fewer sshd)."""
        with self.ssh_config.open("a") as fh:
            fh.write("\n" + self._alias(name, host.addr, host.port, self.client_key))

    def start(self, timeout: float = 20.0) -> SshLab:
        for h in self.hosts:
            self.start_host(h, timeout)
        return self

    def start_host(self, h: Host, timeout: float = 20.0) -> None:
        log = h.dir / "sshd.log"
        h.proc = subprocess.Popen(
            [
                "unshare",
                "--pid",
                "--uts",
                "--mount",
                "--fork",
                "--mount-proc",
                "--",
                sys.executable,
                str(HOSTINIT),
                h.name,
                str(h.dir / "hosts"),
                str(h.dir / "etc" / "sshd_config"),
                str(log),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        assert h.proc.stdout is not None
        line = h.proc.stdout.readline()
        if b"ready" not in line:
            raise RuntimeError(f"host {h.name} did not start: {line!r} {log.read_text() if log.exists() else ''}")
        while time.monotonic() < deadline:
            kids = children(h.proc.pid)
            if kids:
                h.init_pid = kids[0]
                break
            time.sleep(0.02)
        while time.monotonic() < deadline:
            try:
                with socket.create_connection((h.addr, h.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"sshd of {h.name} does not listen on {h.addr}:{h.port}: {log.read_text()}")

    # ------------------------------------------------------------------ client
    def ssh(self, host: str, command: str, timeout: float = 30) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["ssh", "-F", str(self.ssh_config), "-o", "BatchMode=yes", "-T", host, command],
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    @property
    def names(self) -> list[str]:
        return [h.name for h in self.hosts]

    # ------------------------------------------------------------------ faults
    def crash(self, i: int) -> None:
        """Every process of host i dies at once (SIGKILL to its PID 1, as a power cut)."""
        h = self.hosts[i]
        os.kill(h.init_pid, signal.SIGKILL)
        if h.proc is not None:
            h.proc.wait(timeout=10)

    def freeze(self, i: int) -> None:
        self._signal_host(i, signal.SIGSTOP)

    def thaw(self, i: int) -> None:
        self._signal_host(i, signal.SIGCONT)

    def _signal_host(self, i: int, sig: int) -> None:
        """``sig`` to every process of host i (its sshd included)."""
        for pid in self.hosts[i].pids():
            try:
                os.kill(pid, sig)
            except OSError:
                pass

    def kill_sshd(self, i: int) -> None:
        """Only the host's sshd listener dies; everything else on the host goes on."""
        h = self.hosts[i]
        for pid in children(h.init_pid):
            if comm(pid) == "sshd":
                os.kill(pid, signal.SIGKILL)

    def restart_sshd(self, i: int) -> None:
        """A new sshd inside host i's namespaces (it daemonizes; the host's init reaps it)."""
        h = self.hosts[i]
        subprocess.run(
            ["nsenter", "-t", str(h.init_pid), "-p", "-m", "-u", "--", SSHD, "-f", str(h.dir / "etc" / "sshd_config")],
            check=True,
            timeout=20,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection((h.addr, h.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"sshd of {h.name} did not come back")

    def processes(self, i: int) -> list[str]:
        """Command lines of host i's processes (its init and sshd excluded)."""
        h = self.hosts[i]
        out = []
        for pid in h.pids():
            if pid == h.init_pid or comm(pid) == "sshd":
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    out.append(fh.read().replace(b"\0", b" ").decode(errors="replace").strip())
            except OSError:
                pass
        return [c for c in out if c]

    # ------------------------------------------------------------------ cleanup
    def cleanup(self) -> None:
        for h in self.hosts:
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


def end_shared_connections(control_dir: Path) -> None:
    """Stop the ssh connection-sharing masters kgen left in ``control_dir`` (ssh -O exit per socket)."""
    if not control_dir.is_dir():
        return
    for sock in control_dir.iterdir():
        argv = ["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "kgen-test"]
        subprocess.run(argv, capture_output=True, timeout=10, check=False)
