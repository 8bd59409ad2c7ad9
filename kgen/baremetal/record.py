"""The local record of a bare-metal run: ``$XDG_STATE_HOME/kgen/runs/<RUN>.json`` (default ~/.local/state).

`kgen launch` writes it (0600, in a 0700 folder) before any node starts, so every verb works from
another terminal, and even after a launcher killed half-way: which hosts, in rank order, each node's
run directory on its host, the ssh config and interpreter to reach them, the ports. No secret and no
environment value is kept here (only the variable names).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kgen.runs import store
from kgen.runs.store import NAME, check_name, state_home

__all__ = ["NAME", "NodeRecord", "RunRecord", "all_records", "check_name", "load", "path", "remove", "runs_dir",
           "save", "state_home"]  # fmt: skip
VERSION = 1


@dataclass
class NodeRecord:
    rank: int
    host: str  # the ssh destination ("localhost" with --local)
    dir: str = ""  # the node's run directory on its host
    hostname: str = ""  # the host's own name (socket.gethostname() there)
    pid: int | None = None  # its supervisor


@dataclass
class RunRecord:
    name: str
    mode: str  # "ssh" | "local"
    nodes: list[NodeRecord]
    python: str = "python3"
    ssh_config: str | None = None
    connect_timeout: int = 10
    master_addr: str = ""
    port: int = 29500
    liveness_port: int = 29501
    nproc: int = 1
    workdir: str = ""
    command: list[str] = field(default_factory=list)
    env_keys: list[str] = field(default_factory=list)
    created: str = ""
    launch_id: str = ""
    started: bool = False  # every node answered "started"

    @property
    def hosts(self) -> list[str]:
        return [n.host for n in self.nodes]

    @property
    def kind(self) -> str:
        return "local" if self.mode == "local" else "bare-metal"

    def to_json(self) -> str:
        return store.to_json(asdict(self), VERSION)

    @classmethod
    def from_json(cls, text: str) -> RunRecord:
        data = json.loads(text)
        data.pop("version", None)
        nodes = [NodeRecord(**n) for n in data.pop("nodes")]
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(nodes=nodes, **known)


def runs_dir() -> Path:
    return state_home() / "kgen" / "runs"


def path(name: str) -> Path:
    return runs_dir() / f"{name}.json"


def save(rec: RunRecord) -> Path:
    target = path(rec.name)
    store.private_dir(target.parent, parents=True)
    store.write_private(target, rec.to_json())
    return target


def load(name: str) -> RunRecord | None:
    return store.load(path(name), RunRecord.from_json)


def all_records() -> list[RunRecord]:
    return store.all_records(runs_dir(), load)


def remove(name: str) -> bool:
    try:
        path(name).unlink()
        return True
    except FileNotFoundError:
        return False
