"""`kgen launch` as a library function: a bare-metal run on ssh hosts (or --local nodes on this machine), every
host checked first, then every node started at once, detached. kgen.sdk.runs has the verbs that follow it
(status, logs, stop, list find the run by its local record).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kgen.errors import NestedLauncherError, UsageError

if TYPE_CHECKING:
    from kgen.baremetal.record import RunRecord

Say = Callable[[str], None]


def _quiet(text: str) -> None:
    pass


# ------------------------------------------------------------------------------------------ launch
@dataclass(frozen=True)
class LaunchRequest:
    """`kgen launch`: run ``name`` of ``command`` (script and arguments) on ``hosts`` (ssh destinations in rank
    order), the hosts of ``hostfile``, or ``local`` nodes on this machine: exactly one of the three.

    The types are checked when the request is made (a wrong one names the field); one ``str`` for ``command``
    is split as a shell splits words (a shell operator is refused), for ``env`` and ``inject`` it is one item.
    What needs the hosts is checked by ``launch``, with `kgen launch`'s messages."""

    name: str
    command: Sequence[str]
    hosts: str | None = None  # "H1,H2,..." as --hosts takes it
    hostfile: str | None = None
    local: int | None = None
    ssh_config: str | None = None
    python: str | None = None  # the hosts' interpreter [python3; --local: this one]
    nproc_per_node: int | None = None  # [the hostfile's slots, else 1]
    workdir: str | None = None  # [the current directory]
    env: Sequence[str] = ()  # K=V
    port: int = 29500
    master_addr: str | None = None
    inject: Sequence[str] = ()  # --local only: kill:R@S, freeze:R@S[+T]
    connect_timeout: int = 10

    def __post_init__(self) -> None:
        set_field = object.__setattr__  # frozen: the normalized sequences replace what was passed
        for key in ("command", "env", "inject"):
            value = getattr(self, key)
            if isinstance(value, str) and key == "command":
                from kgen.render.layering import split_command

                value = split_command(value, "LaunchRequest.command") if value.strip() else []
            elif isinstance(value, str):
                value = [value]
            if isinstance(value, (bytes, dict)) or not isinstance(value, (list, tuple)):
                raise UsageError(
                    f"must be a list of strings, got {type(value).__name__}", option=f"LaunchRequest.{key}"
                )
            bad = next((x for x in value if not isinstance(x, str)), None)
            if bad is not None:
                raise UsageError(f"must hold strings, got {type(bad).__name__} {bad!r}", option=f"LaunchRequest.{key}")
            set_field(self, key, tuple(value))
        if not isinstance(self.name, str):
            raise UsageError(f"must be a string, got {type(self.name).__name__}", option="LaunchRequest.name")
        for key in ("local", "nproc_per_node", "port", "connect_timeout"):
            value = getattr(self, key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise UsageError(f"must be an int, got {type(value).__name__} {value!r}", option=f"LaunchRequest.{key}")
        for key in ("hosts", "hostfile", "ssh_config", "python", "workdir", "master_addr"):
            value = getattr(self, key)
            if value is not None and not isinstance(value, str):
                raise UsageError(f"must be a string or None, got {type(value).__name__}", option=f"LaunchRequest.{key}")


def _resolve_hosts(hosts, hostfile, local_n):
    from kgen.baremetal.hosts import parse_hosts, read_hostfile

    given = [o for o, v in (("--hosts", hosts), ("--hostfile", hostfile), ("--local", local_n)) if v is not None]
    if not given:
        raise UsageError(
            "where should the nodes run? give --hosts H1,H2,... or --hostfile FILE (ssh), or --local N",
            option="--hosts",
        )
    if len(given) > 1:
        raise UsageError(f"{' and '.join(given)} cannot be used together: choose one", option=given[1])
    if local_n is not None:
        if not 1 <= local_n <= 64:
            raise UsageError(f"must be between 1 and 64 nodes, got {local_n}", option="--local")
        return ["localhost"] * local_n, None
    parsed = parse_hosts(hosts) if hosts is not None else read_hostfile(hostfile)
    return list(parsed.hosts), parsed.slots


def launch(req: LaunchRequest, say: Say = _quiet) -> RunRecord:
    """Check every host (ssh, the interpreter has torch, the working directory and script exist, the run name
    is new, node 0's ports are free), then start every node at once, detached; the run's local record.
    Any problem: nothing starts anywhere, and the error names the host. A launcher as the command
    (torchrun ...) is refused with the command to run instead (kgen.errors.NestedLauncherError)."""
    from kgen.baremetal import launch as L
    from kgen.baremetal.record import check_name
    from kgen.baremetal.transport import LocalTransport, SshTransport

    name, hosts, hostfile, local_n = req.name, req.hosts, req.hostfile, req.local
    ssh_config, python, nproc_per_node, workdir = req.ssh_config, req.python, req.nproc_per_node, req.workdir
    env, port, master_addr, inject, connect_timeout = (
        req.env,
        req.port,
        req.master_addr,
        req.inject,
        req.connect_timeout,
    )
    command = req.command
    check_name(name)
    host_list, slots = _resolve_hosts(hosts, hostfile, local_n)
    local = local_n is not None
    if not command:
        raise UsageError(
            "no training command: put it after --, e.g. kgen launch --name NAME --hosts a,b -- train.py --lr 3e-4",
            option="--",
        )
    nproc = nproc_per_node if nproc_per_node is not None else (slots or 1)
    if nproc < 1:
        raise UsageError(f"must be 1 or more, got {nproc}", option="--nproc-per-node")
    _refuse_nested_launcher(list(command), nproc, nproc_per_node is not None or slots is not None, len(host_list))
    from kgen.render.validate import command_problem

    problem = command_problem(list(command))
    if problem:  # what every node's entrypoint would refuse (exit 2) once started
        raise UsageError(problem, option="--")
    if not 1 <= port <= 65534:
        raise UsageError(f"must be between 1 and 65534 (the liveness port is P+1), got {port}", option="--port")
    if not 1 <= connect_timeout <= 600:
        raise UsageError(f"must be between 1 and 600 seconds, got {connect_timeout}", option="--connect-timeout")
    if inject and not local:
        raise UsageError("fault injection is for --local runs (rehearsal on this machine)", option="--inject")
    if ssh_config is not None:
        if local:
            raise UsageError("is for ssh hosts, not --local", option="--ssh-config")
        if not os.path.isfile(ssh_config):
            raise UsageError(f"{ssh_config} does not exist", option="--ssh-config")
        ssh_config = os.path.abspath(ssh_config)
    if master_addr is not None and (not master_addr or any(c.isspace() for c in master_addr) or "/" in master_addr):
        raise UsageError(f"must be a host name or IP address, got {master_addr!r}", option="--master-addr")
    if workdir is None:
        workdir = os.getcwd()
    elif "\x00" in workdir or not workdir:
        raise UsageError("must be a directory path", option="--workdir")
    elif local:
        workdir = os.path.abspath(workdir)
    py = python or (sys.executable if local else "python3")
    plan = L.LaunchRequest(
        name=name,
        hosts=host_list,
        command=list(command),
        local=local,
        python=py,
        ssh_config=ssh_config,
        nproc=nproc,
        workdir=workdir,
        env=L.parse_env(tuple(env)),
        port=port,
        master_addr=master_addr,
        inject=L.parse_inject(tuple(inject), len(host_list)),
    )
    transport = LocalTransport(py) if local else SshTransport(py, ssh_config, connect_timeout)
    return L.launch(plan, transport, say=say)


def _refuse_nested_launcher(command: list[str], nproc: int, nproc_set: bool, nodes: int) -> None:
    """A launcher as the command (torchrun, accelerate launch, ...; kgen.launch.launchers) is refused before any host
    is asked, in render's words, with the launch command to run instead (its process count carried as
    --nproc-per-node): every node's entrypoint would refuse it anyway, after the run had started."""
    from kgen.launch.launchers import correction, nested_launcher, problem

    nested = nested_launcher(command)
    if nested is None:
        return
    fix = correction(nested, gpus=0, nproc=nproc, nproc_set=nproc_set, nodes=nodes, nodes_set=True)
    add = ["--nproc-per-node", str(fix.nproc)] if fix.nproc is not None else []
    raise NestedLauncherError(
        problem(nested),
        option="-- COMMAND",
        use="",
        command=fix.command,
        add=add,
        notes=[n.replace("nprocPerNode", "--nproc-per-node") for n in fix.notes],
    )
