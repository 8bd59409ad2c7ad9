"""`kgen launch`: start kgen's entrypoint on every host at once, detached, after a pre-flight of all of them.

Two steps over one ssh connection per host (the entrypoint's ``--launch-node`` dialogue):

1. every host at once: the run's shape goes out on stdin (command, working directory, ports); each host
   checks itself (the interpreter has torch, the working directory and script exist, the run name is
   new there, node 0's ports are free) and answers. Any problem anywhere, or a host that does not
   answer: the connections are closed, nothing was created anywhere, the error names every host and
   its fix.
2. the local record is written, then every host gets "go" with its environment and the run's secret
   (stdin, never a command line), writes its run directory (0700, files 0600) and detaches its node's
   supervisor. A host that fails here (a race with another launch) makes the launcher stop and remove
   what the others started.

Node rank = position in the host list; the master is the first host. Its address for the others is
``--master-addr`` (the fabric address: InfiniBand, a private network), else the address the launcher's
ssh connection reached on host 0 (``$SSH_CONNECTION`` there), else 127.0.0.1 with ``--local``.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import selectors
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from kgen.baremetal import record as R
from kgen.baremetal.transport import Transport, parallel
from kgen.errors import KgenError, UsageError
from kgen.runs.stamps import record_stamp

ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# set by kgen launch itself: --env cannot change them (the option that does is named)
RESERVED = {
    "NNODES": "--hosts / --local",
    "NPROC_PER_NODE": "--nproc-per-node",
    "MASTER_ADDR": "--master-addr",
    "MASTER_PORT": "--port",
    "KGEN_LIVENESS_PORT": "--port (the liveness port is --port + 1)",
    "NODE_RANK": "the position in --hosts",
    "KGEN_JOB_NAME": "--name",
    "KGEN_RUN_ID": "nothing: kgen launch makes one per launch",
    "KGEN_SECRET_FILE": "nothing: kgen launch writes the run's secret",
    "KGEN_RUN_DIR": "nothing: kgen launch sets it",
}
CHECK_TIMEOUT = 30.0  # a host's pre-flight answer, on top of ssh's connect timeout
START_TIMEOUT = 30.0


class LaunchError(KgenError):
    """Pre-flight or start failed: one line naming the hosts and the fix; nothing is left running."""


@dataclass
class LaunchRequest:
    name: str
    hosts: list[str]
    command: list[str]
    local: bool = False
    python: str = "python3"
    ssh_config: str | None = None
    nproc: int = 1
    workdir: str = ""
    env: dict[str, str] = field(default_factory=dict)
    port: int = 29500
    master_addr: str | None = None
    inject: dict[int, list[dict]] = field(default_factory=dict)  # rank -> injections (--local)


def parse_env(values: list[str] | tuple[str, ...]) -> dict[str, str]:
    env: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not ENV_KEY.fullmatch(key):
            raise UsageError(f'expected KEY=VALUE with KEY a variable name, got "{item}"', option="--env")
        if key in RESERVED:
            raise UsageError(f"{key} is set by kgen launch (use {RESERVED[key]})", option="--env")
        env[key] = value
    return env


INJECT = re.compile(r"(kill|freeze):([0-9]+)@([0-9]+(?:\.[0-9]+)?)(?:\+([0-9]+(?:\.[0-9]+)?))?")


def parse_inject(values: list[str] | tuple[str, ...], nodes: int) -> dict[int, list[dict]]:
    """--inject kill:RANK@SECONDS | freeze:RANK@SECONDS[+THAW_AFTER]"""
    out: dict[int, list[dict]] = {}
    for value in values:
        m = INJECT.fullmatch(value.strip())
        if not m:
            raise UsageError(
                f'expected kill:RANK@SECONDS or freeze:RANK@SECONDS[+SECONDS], got "{value}"',
                option="--inject",
                hint="e.g. kill:1@20 (SIGKILL node 1's processes 20 s after launch)",
            )
        rank = int(m.group(2))
        if rank >= nodes:
            raise UsageError(
                f"rank {rank} in {value!r} is not one of the {nodes} nodes (0..{nodes - 1})", option="--inject"
            )
        inj: dict = {"what": m.group(1), "at": float(m.group(3))}
        if m.group(4) is not None:
            if m.group(1) != "freeze":
                raise UsageError(f"+SECONDS (thaw after) is for freeze only, got {value!r}", option="--inject")
            inj["for"] = float(m.group(4))
        out.setdefault(rank, []).append(inj)
    return out


def node_env(req: LaunchRequest, rank: int, master_addr: str, run_id: str) -> dict[str, str]:
    env = {"PYTHONUNBUFFERED": "1"}  # the script's prints reach the log (and kgen logs) as they happen
    env.update(req.env)
    env.update(
        {
            "NNODES": str(len(req.hosts)),
            "NPROC_PER_NODE": str(req.nproc),
            "MASTER_ADDR": master_addr,
            "MASTER_PORT": str(req.port),
            "KGEN_LIVENESS_PORT": str(req.port + 1),
            "NODE_RANK": str(rank),
            "KGEN_JOB_NAME": req.name,
            "KGEN_RUN_ID": run_id,
        }
    )
    return env


class Dialogue:
    """One host's ``--launch-node`` conversation (JSON lines both ways) over one ssh connection."""

    def __init__(self, transport: Transport, rank: int, host: str) -> None:
        self.transport, self.rank, self.host = transport, rank, host
        self.buf = b""
        self.err = ""
        self.failed = ""
        try:
            self.proc: subprocess.Popen | None = transport.popen(host, ["--launch-node"])
        except OSError as exc:
            self.proc = None
            self.failed = f"{host}: cannot start ssh: {exc.strerror}"

    def send(self, msg: dict) -> None:
        if self.proc is None or self.proc.stdin is None:
            return
        try:
            self.proc.stdin.write(json.dumps(msg).encode() + b"\n")
            self.proc.stdin.flush()
        except OSError:
            pass

    def receive(self, timeout: float) -> dict | None:
        """The host's next JSON line, or None (and ``failed`` says why)."""
        if self.proc is None or self.proc.stdout is None:
            return None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        sel = selectors.DefaultSelector()
        sel.register(fd, selectors.EVENT_READ)
        try:
            while b"\n" not in self.buf:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    self.close(kill=True)
                    self.failed = self.transport.classify(self.host, None, self.err) or f"{self.host}: no answer"
                    return None
                data = os.read(fd, 65536)
                if not data:
                    self.close()
                    self.failed = self._why()
                    return None
                self.buf += data
        finally:
            sel.close()
        line, self.buf = self.buf.split(b"\n", 1)
        try:
            msg = json.loads(line)
        except ValueError:
            msg = None
        if not isinstance(msg, dict):
            self.close()
            self.failed = f"{self.host}: unexpected answer {line[:200]!r}" + (f" ({self._why()})" if self.err else "")
            return None
        return msg

    def _why(self) -> str:
        rc = self.proc.returncode if self.proc is not None else None
        reason = self.transport.classify(self.host, rc, self.err)
        if reason:
            return reason
        lines = [ln for ln in self.err.splitlines() if ln.strip()]
        said = next((ln for ln in reversed(lines) if "kgen" in ln), lines[-1] if lines else f"exit code {rc}")
        return f"{self.host}: {said.strip()}"

    def close(self, kill: bool = False, timeout: float = 15.0) -> None:
        if self.proc is None:
            return
        if kill:
            self.proc.kill()
        try:
            _, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        self.err += (err or b"").decode("utf-8", "replace")


def launch(req: LaunchRequest, transport: Transport, say: Callable[[str], None] = lambda _: None) -> R.RunRecord:
    """Pre-flight every host, then start every node detached; returns the run's record (already saved)."""
    existing = R.load(req.name)
    if existing is not None:
        raise LaunchError(
            f"a run named {req.name} already exists (local record {R.path(req.name)}, hosts "
            f"{', '.join(existing.hosts)})",
            option="--name",
            hint=f"`kgen stop {req.name} --rm` removes it, or choose another --name",
        )
    run_id = secrets.token_hex(6)
    launch_id = f"{req.name}-{run_id}"
    where = "this machine" if req.local else f"{len(req.hosts)} host(s)"
    say(f"pre-flight on {where}: interpreter and torch, working directory, run name, ports")
    t0 = time.monotonic()
    timeout = CHECK_TIMEOUT + getattr(transport, "connect_timeout", 0)

    def check(rank_host: tuple[int, str]) -> tuple[Dialogue, dict | None]:
        rank, host = rank_host
        d = Dialogue(transport, rank, host)
        d.send(
            {
                "run": req.name,
                "rank": rank,
                "launch_id": launch_id,
                "command": req.command,
                "workdir": req.workdir,
                "ports": [req.port, req.port + 1] if rank == 0 else [],
                "check_torch": True,
                "pythonpath": req.env.get("PYTHONPATH", ""),  # where `-m module` is looked for
            }
        )
        return d, d.receive(timeout)

    checked = parallel(list(enumerate(req.hosts)), check)
    problems: list[str] = []
    for d, answer in checked:
        if answer is None:
            problems.append(d.failed)
        elif not answer.get("ok"):
            host = answer.get("host") or d.host
            label = d.host if host == d.host else f"{d.host} ({host})"
            problems.extend(f"{label}: {p}" for p in answer.get("problems") or ["not ready"])
    if problems:
        parallel(checked, lambda c: c[0].close())  # EOF: every host drops the launch, nothing was created
        raise LaunchError(
            f"pre-flight failed, nothing was started: {'; '.join(dict.fromkeys(problems))}",
            option=None if req.local else "--hosts",
        )
    answers = [a for _, a in checked]
    assert all(a is not None for a in answers)
    master = req.master_addr or ("127.0.0.1" if req.local else (answers[0] or {}).get("addr") or req.hosts[0])
    say(f"pre-flight passed in {time.monotonic() - t0:.1f}s; master {master}:{req.port} (node 0 on {req.hosts[0]})")
    rec = R.RunRecord(
        name=req.name,
        mode="local" if req.local else "ssh",
        nodes=[
            R.NodeRecord(rank=i, host=h, dir=(a or {}).get("dir", ""), hostname=(a or {}).get("host", ""))
            for i, (h, a) in enumerate(zip(req.hosts, answers, strict=True))
        ],
        python=req.python,
        ssh_config=req.ssh_config,
        connect_timeout=int(getattr(transport, "connect_timeout", 10)),
        master_addr=master,
        port=req.port,
        liveness_port=req.port + 1,
        nproc=req.nproc,
        workdir=req.workdir,
        command=list(req.command),
        env_keys=sorted(req.env),
        created=record_stamp(),
        launch_id=launch_id,
    )
    R.save(rec)  # before anything starts: a launcher killed from here on leaves a run `kgen stop` finds
    secret = secrets.token_hex(32)  # the run's secret: to every node through stdin only

    def start(c: tuple[Dialogue, dict | None]) -> dict | None:
        d = c[0]
        d.send(
            {
                "go": True,
                "env": node_env(req, d.rank, master, run_id),
                "secret": secret,
                "inject": req.inject.get(d.rank, []),
            }
        )
        answer = d.receive(START_TIMEOUT)
        d.close()
        return answer

    started = parallel(checked, start)
    failed = []
    for (d, _), answer in zip(checked, started, strict=True):
        node = rec.nodes[d.rank]
        if answer and answer.get("started"):
            node.pid = answer.get("pid")
            node.dir = answer.get("dir") or node.dir
        else:
            failed.append((answer or {}).get("error") or d.failed or f"{d.host}: did not start")
    if failed:
        from kgen.baremetal import engine as ops

        report = ops.stop(rec, transport, grace=5.0, group_stop=False)
        ops.remove(rec, transport)
        left = "" if report.all_stopped else f"; {report.summary()}"
        raise LaunchError(f"start failed: {'; '.join(failed)}; the nodes that had started were stopped again{left}")
    rec.started = True
    R.save(rec)
    return rec
