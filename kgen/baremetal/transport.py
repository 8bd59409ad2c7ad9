"""How kgen reaches a host: the system OpenSSH client (ssh hosts) or a plain process (--local).

Every call runs kgen's entrypoint on the host with some arguments: ``--launch-node`` with the
entrypoint's own source on stdin (a host needs only python3 and torch; nothing is installed there), or
a query verb (``--run-dir DIR --state`` ...) that imports the node's copy of it from its run directory
(bytecode cached there after the first call). Over ssh:

* ``ssh [-F FILE] -o BatchMode=yes -o ConnectTimeout=N -o ServerAliveInterval=5 -T -- HOST CMD``: the
  user's ssh config, agent, ProxyJump and known_hosts apply; no password or passphrase prompt ever
  (BatchMode); host-key checking is never switched off (an unknown or changed key is an error that
  says so);
* connection sharing: ``ControlMaster=auto``, ``ControlPersist`` (default 300 s, ``KGEN_SSH_PERSIST``;
  0 turns sharing off), sockets in a private 0700 directory (``$XDG_RUNTIME_DIR/kgen-ssh``, else
  ``/tmp/kgen-ssh-UID``), so `kgen status` right after `kgen launch` costs no new handshake;
* CMD is one line for the remote user's POSIX shell, every word quoted with ``shlex.quote``; the run's
  data (the training command, environment, secret) never goes on it: it travels as JSON on stdin;
* every call has a wall-clock bound; a host that does not answer in time is "unreachable", with the
  reason ssh gave (refused key, unknown host key, connection refused, timeout, name not resolved).
"""

from __future__ import annotations

import hashlib
import os
import shlex
import stat
import subprocess
import sys
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

from kgen.errors import UsageError

T = TypeVar("T")
R = TypeVar("R")

DEFAULT_CONNECT_TIMEOUT = 10
MAX_PARALLEL = 64  # ssh processes at once

# Runs the entrypoint whose source comes first on stdin (a length line, then the source).
BOOTSTRAP = (
    "import sys\n"
    "if sys.version_info < (3, 9):\n"
    "    sys.exit('kgen: ' + sys.executable + ' is Python ' + sys.version.split()[0]"
    " + ': kgen needs Python 3.9 or newer on the host (--python)')\n"
    "b = sys.stdin.buffer\n"
    "n = int(b.readline())\n"
    "src = b.read(n).decode('utf-8')\n"
    "g = {'__name__': 'kgen_entrypoint', 'KGEN_SOURCE': src}\n"
    "exec(compile(src, 'kgen_entrypoint.py', 'exec'), g)\n"
    "sys.exit(g['main'](sys.argv[1:]))\n"
)


# The query verbs (--run-dir DIR --state/--log/--stop-node/--remove-node) import the node's own copy of the
# entrypoint from its run directory, so Python caches its bytecode there: a status of 64 hosts does not
# compile 2,500 lines 64 times. Without the copy there is no run there: say so in the verbs' own shape.
QUERY = (
    "import json, os, socket, sys\n"
    "d = sys.argv[2] if len(sys.argv) > 2 else ''\n"
    "if d and os.path.isfile(os.path.join(d, 'kgen_entrypoint.py')):\n"
    "    sys.path.insert(0, d)\n"
    "    import kgen_entrypoint\n"
    "    sys.exit(kgen_entrypoint.main(sys.argv[1:]))\n"
    "if sys.argv[3:4] == ['--log']:\n"
    "    sys.exit('kgen: no run directory ' + d + ' on ' + socket.gethostname())\n"
    "print(json.dumps({'dir': d, 'host': socket.gethostname(), 'missing': True, 'left': []}))\n"
)


def is_query(args: list[str]) -> bool:
    return args[:1] == ["--run-dir"]


@dataclass
class Result:
    host: str
    rc: int | None  # None: no answer within the bound (the process was killed)
    out: bytes
    err: str
    unreachable: str = ""  # why ssh could not run the command on the host ("" when it ran)

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.unreachable


def entrypoint_source() -> bytes:
    from kgen.resources import entrypoint_path

    return entrypoint_path().read_bytes()


def parallel(items: Iterable[T], fn: Callable[[T], R], limit: int = MAX_PARALLEL) -> list[R]:
    """fn over items, at most ``limit`` at a time, results in the items' order."""
    items = list(items)
    if len(items) <= 1:
        return [fn(i) for i in items]
    with ThreadPoolExecutor(max_workers=max(1, min(limit, len(items)))) as pool:
        return list(pool.map(fn, items))


class Transport:
    """Runs the entrypoint on a host. ``local`` says whether the hosts are this machine."""

    local = False

    def __init__(self, python: str = "python3") -> None:
        self.python = python

    def popen(self, host: str, args: list[str], stdin_data: bytes = b"") -> subprocess.Popen:
        raise NotImplementedError

    def classify(self, host: str, rc: int | None, err: str) -> str:
        return ""

    def call(self, host: str, args: list[str], stdin_data: bytes = b"", timeout: float = 30.0) -> Result:
        """Run the entrypoint with ``args`` on ``host``; stdout as bytes, stderr as text, within ``timeout``."""
        try:
            proc = self.popen(host, args, stdin_data)
        except OSError as exc:
            why = f"cannot start {exc.filename or 'ssh'}: {exc.strerror}"
            return Result(host, None, b"", str(exc), unreachable=why)
        try:
            out, err = proc.communicate(timeout=timeout)
            rc: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            rc = None
        text = err.decode("utf-8", "replace")
        return Result(host, rc, out, text, unreachable=self.classify(host, rc, text))


class LocalTransport(Transport):
    """--local: the nodes run on this machine; the bundled entrypoint file, no shell, no ssh."""

    local = True

    def popen(self, host: str, args: list[str], stdin_data: bytes = b"") -> subprocess.Popen:
        from kgen.resources import entrypoint_path

        head = [self.python, "-I", "-S", "-c", QUERY] if is_query(args) else [self.python, str(entrypoint_path())]
        proc = subprocess.Popen(
            [*head, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        _feed(proc, stdin_data)
        return proc

    def classify(self, host: str, rc: int | None, err: str) -> str:
        if rc is None:
            return "no answer in time (this machine is overloaded?)"
        return ""


class SshTransport(Transport):
    def __init__(
        self,
        python: str = "python3",
        ssh_config: str | None = None,
        connect_timeout: int = DEFAULT_CONNECT_TIMEOUT,
        persist: int | None = None,
    ) -> None:
        super().__init__(python)
        self.ssh_config = ssh_config
        self.connect_timeout = connect_timeout
        if persist is None:
            raw = os.environ.get("KGEN_SSH_PERSIST", "300")
            try:
                persist = max(0, int(raw))
            except ValueError:
                raise UsageError(f"must be whole seconds, got {raw!r}", option="KGEN_SSH_PERSIST") from None
        self.control_dir = control_dir() if persist else None
        self.persist = persist
        # shared connections are per ssh config too (%C hashes only local host, host, port and user)
        self.control_tag = hashlib.sha1((ssh_config or "").encode()).hexdigest()[:6]
        self._source: bytes | None = None

    @property
    def source(self) -> bytes:
        if self._source is None:
            self._source = entrypoint_source()
        return self._source

    def ssh_argv(self, host: str, command: str, mux: bool = True) -> list[str]:
        argv = ["ssh"]
        if self.ssh_config:
            argv += ["-F", self.ssh_config]
        argv += [
            "-o",
            "BatchMode=yes",
            "-o",
            f"ConnectTimeout={self.connect_timeout}",
            "-o",
            "ServerAliveInterval=5",
            "-o",
            "ServerAliveCountMax=3",
            "-o",
            "LogLevel=ERROR",
        ]
        if mux and self.control_dir:
            argv += [
                "-o",
                "ControlMaster=auto",
                "-o",
                f"ControlPath={self.control_dir}/{self.control_tag}-%C",
                "-o",
                f"ControlPersist={self.persist}",
            ]
        return [*argv, "-T", "--", host, command]

    def remote_command(self, args: list[str]) -> str:
        if is_query(args):
            return f"exec {shlex.quote(self.python)} -I -S -c {shlex.quote(QUERY)} {shlex.join(args)}"
        return f"exec {shlex.quote(self.python)} -c {shlex.quote(BOOTSTRAP)} {shlex.join(args)}"

    def popen(self, host: str, args: list[str], stdin_data: bytes = b"") -> subprocess.Popen:
        proc = subprocess.Popen(
            self.ssh_argv(host, self.remote_command(args)),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        prefix = b"" if is_query(args) else b"%d\n" % len(self.source) + self.source
        _feed(proc, prefix + stdin_data)
        return proc

    def classify(self, host: str, rc: int | None, err: str) -> str:
        return classify_ssh(host, rc, err, self.connect_timeout, self.ssh_config)

    def close_shared(self, hosts: Iterable[str]) -> None:
        """End the shared connections to ``hosts`` (ssh -O exit); used when a run is removed."""
        if not self.control_dir:
            return
        for host in dict.fromkeys(hosts):
            argv = self.ssh_argv(host, "true")[:-3]
            subprocess.run([*argv, "-O", "exit", "--", host], capture_output=True, timeout=10, check=False)


def _feed(proc: subprocess.Popen, data: bytes) -> None:
    """Write ``data`` to the process's stdin without closing it when it is a dialogue (the caller may go on)."""
    if proc.stdin is None:
        return
    if data:
        try:
            proc.stdin.write(data)
            proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass


def classify_ssh(host: str, rc: int | None, err: str, timeout: int, ssh_config: str | None) -> str:
    """Why ssh could not run the command on ``host`` (one line with the fix), or "" when it ran."""
    if rc is None:
        return f"{host}: no answer in time (host frozen, overloaded or cut off?)"
    if rc != 255:
        return ""
    lines = [ln.strip() for ln in err.splitlines() if ln.strip()]
    if not lines:  # LogLevel=ERROR: a connection cut by the other end (host or sshd gone) says nothing
        return f"{host}: the ssh connection ended without a message (exit 255): the host or its sshd went away?"
    last = lines[-1]
    text = " ".join(lines)
    cfg = f" (ssh config {ssh_config})" if ssh_config else ""
    if "Permission denied" in text:
        return (
            f"{host}: ssh refused the key ({last}): add your public key to the host's authorized_keys "
            f"(ssh-copy-id {host}) or load it into ssh-agent; kgen never uses passwords"
        )
    if "Host key verification failed" in text or "REMOTE HOST IDENTIFICATION HAS CHANGED" in text:
        return (
            f"{host}: host key unknown or changed ({last}): check it and accept it once with `ssh {host}`; "
            "kgen never turns host-key checking off"
        )
    if "Could not resolve hostname" in text:
        return f"{host}: the name does not resolve ({last}): check it, or its alias in your ssh config{cfg}"
    if "Connection refused" in text:
        return f"{host}: connection refused ({last}): is sshd running there, on the port your ssh config says?"
    if "timed out" in text or "Operation timed out" in text:
        return f"{host}: no answer within ConnectTimeout={timeout}s ({last}): host down or unreachable?"
    if "No route to host" in text or "Network is unreachable" in text:
        return f"{host}: unreachable ({last})"
    if "closed by remote host" in text or "Connection reset" in text or "Broken pipe" in text:
        return f"{host}: the connection dropped ({last})"
    return f"{host}: ssh failed ({last})"


def control_dir() -> str | None:
    """A private 0700 directory for ssh's connection-sharing sockets, or None (sharing off)."""
    uid = os.getuid()
    runtime = os.environ.get("XDG_RUNTIME_DIR") or ""
    candidates = [os.path.join(runtime, "kgen-ssh")] if os.path.isabs(runtime) else []
    candidates.append(f"/tmp/kgen-ssh-{uid}")
    for path in candidates:
        if len(path) > 56:  # a unix socket path is at most 107 bytes; the tag and %C add 48
            continue
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        except OSError:
            continue
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode) and st.st_uid == uid and stat.S_IMODE(st.st_mode) == 0o700:
            return path
    return None


def local_python() -> str:
    return sys.executable
