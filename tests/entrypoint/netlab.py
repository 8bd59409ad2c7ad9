"""Test hosts in network namespaces (root, Linux, iproute2, util-linux `unshare` and `nsenter`).

One switch namespace holds a bridge; every host is a namespace of its own with one veth (`eth0`,
10.77.<net>.<i+1>/24) plugged into the bridge. Each namespace lives as long as a `sleep` that holds
it (started with `unshare --net`): ending those processes by PID removes the namespaces, their veths
and the bridge, so nothing is left in the host's own network. `tc netem` on a host's eth0 delays (or
drops) what that host sends: a slow node or link.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time

LIFETIME = 900  # seconds a namespace's holder lives at most, whatever happens to the test


def supported() -> str | None:
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    for tool in ("unshare", "nsenter", "ip", "tc"):
        if shutil.which(tool) is None and not os.path.exists(f"/usr/sbin/{tool}"):
            return f"needs {tool}"
    return None


def _holder() -> subprocess.Popen:
    """A process in a network namespace of its own, returned only once it is in it: `unshare` makes the namespace
    after it has started, and an `nsenter -t PID -n` before that enters the machine's own network (found once: a
    bridge made in the host's namespace)."""
    p = subprocess.Popen(["unshare", "--net", "--", "sleep", str(LIFETIME)], start_new_session=True)
    mine = os.readlink("/proc/self/ns/net")
    deadline = time.monotonic() + 10
    while True:
        try:
            if os.readlink(f"/proc/{p.pid}/ns/net") != mine:
                return p
        except OSError:
            pass
        if p.poll() is not None or time.monotonic() > deadline:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            raise RuntimeError("unshare --net made no network namespace within 10 s")
        time.sleep(0.005)


class NetLab:
    def __init__(self, hosts: int, net: int = 77) -> None:
        self.net = net
        self.switch = _holder()
        self.hosts = [_holder() for _ in range(hosts)]
        self.sh(self.switch, "ip link add br0 type bridge && ip link set br0 up && ip link set lo up")
        for i, h in enumerate(self.hosts):
            self.sh(self.switch, f"ip link add v{i} type veth peer name eth0 netns {h.pid}")
            self.sh(self.switch, f"ip link set v{i} master br0 && ip link set v{i} up")
            self.sh(h, f"ip link set lo up && ip addr add {self.addr(i)}/24 dev eth0 && ip link set eth0 up")

    def addr(self, i: int) -> str:
        return f"10.{self.net}.0.{i + 1}"

    @staticmethod
    def sh(holder: subprocess.Popen, script: str) -> None:
        if os.readlink(f"/proc/{holder.pid}/ns/net") == os.readlink("/proc/self/ns/net"):
            raise RuntimeError(f"holder {holder.pid} is in this machine's own network namespace: refusing {script!r}")
        env = dict(os.environ, PATH=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
        subprocess.run(["nsenter", "-t", str(holder.pid), "-n", "sh", "-ec", script], check=True, env=env, timeout=20)

    def netem(self, i: int, what: str) -> None:
        """e.g. netem(1, "delay 200ms") or netem(2, "loss 100%"): on what host i sends."""
        self.sh(self.hosts[i], f"tc qdisc add dev eth0 root netem {what}")

    def argv(self, i: int, argv: list[str]) -> list[str]:
        """`argv` run inside host i's network namespace."""
        return ["nsenter", "-t", str(self.hosts[i].pid), "-n", "--", *argv]

    def close(self) -> None:
        for h in [*self.hosts, self.switch]:
            if h.poll() is None:
                os.killpg(h.pid, signal.SIGKILL)
            h.wait()
