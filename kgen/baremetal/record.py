"""The local record of a bare-metal run: ``$XDG_STATE_HOME/kgen/runs/<RUN>.json`` (default ~/.local/state).

`kgen launch` writes it (0600, in a 0700 folder) before any node starts, so every verb works from
another terminal, and even after a launcher killed half-way: which hosts, in rank order, each node's
run directory on its host, the ssh config and interpreter to reach them, the ports. No secret and no
environment value is kept here (only the variable names).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kgen.errors import UsageError

NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
VERSION = 1


def check_name(name: str, option: str = "--name") -> str:
    if len(name) > 63:
        raise UsageError(f"is {len(name)} characters: a run name is a DNS label of at most 63", option=option)
    if not NAME.fullmatch(name):
        raise UsageError(
            f'must be a DNS label (lower-case letters, digits, "-"), got "{name}"', option=option, hint="e.g. llama-8n"
        )
    return name


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
        return json.dumps({"version": VERSION, **asdict(self)}, indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> RunRecord:
        data = json.loads(text)
        data.pop("version", None)
        nodes = [NodeRecord(**n) for n in data.pop("nodes")]
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(nodes=nodes, **known)


def state_home() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or ""
    return Path(base) if os.path.isabs(base) else Path.home() / ".local" / "state"


def runs_dir() -> Path:
    return state_home() / "kgen" / "runs"


def path(name: str) -> Path:
    return runs_dir() / f"{name}.json"


def _private_dir(p: Path) -> None:
    p.mkdir(parents=True, exist_ok=True)
    for d in (p, p.parent):
        try:
            if d.stat().st_uid == os.getuid():
                os.chmod(d, 0o700)
        except OSError:
            pass


def save(rec: RunRecord) -> Path:
    target = path(rec.name)
    _private_dir(target.parent)
    tmp = target.with_name(f".{target.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(rec.to_json())
    os.replace(tmp, target)
    return target


def load(name: str) -> RunRecord | None:
    p = path(name)
    try:
        text = p.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UsageError(f"cannot read the run record {p}: {exc.strerror}") from None
    try:
        return RunRecord.from_json(text)
    except (ValueError, TypeError, KeyError) as exc:
        raise UsageError(f"the run record {p} is damaged ({exc}): remove it") from None


def all_records() -> list[RunRecord]:
    out: list[RunRecord] = []
    d = runs_dir()
    if not d.is_dir():
        return out
    for p in sorted(d.glob("*.json")):
        if NAME.fullmatch(p.stem):
            try:
                rec = load(p.stem)
            except UsageError:
                continue
            if rec is not None:
                out.append(rec)
    return out


def remove(name: str) -> bool:
    try:
        path(name).unlink()
        return True
    except FileNotFoundError:
        return False
