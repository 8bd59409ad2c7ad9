"""A Slurm run's two places: its local record and its folder on the shared file system.

- The record, ``$XDG_STATE_HOME/kgen/slurm/<RUN>.json`` (0600, default ~/.local/state): the job id, the
  run's folder, the node count. No secret and no environment value.
- The run's folder (default ``$XDG_STATE_HOME/kgen/slurm/<RUN>/``; it must be on a file system every node
  of the cluster shares, as home folders are on most clusters): the sbatch script, the one-file entrypoint,
  the run's secret (0600, generated at submit time: only its path is in the script) and what every node
  writes (entrypoint/kgen_entrypoint.py, "Slurm" section: node<R>/log, events, exit, pid; end, history).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from kgen.errors import UsageError

NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
VERSION = 1


def check_name(name: str, option: str = "--name") -> str:
    if len(name) > 63 or not NAME.fullmatch(name):
        raise UsageError(
            f'must be a DNS label (lower-case letters, digits, "-"; at most 63), got "{name}"',
            option=option,
            hint="e.g. llama-8n",
        )
    return name


@dataclass
class RunRecord:
    name: str
    job_id: str
    run_dir: str
    nodes: int
    workdir: str = ""
    created: str = ""

    @property
    def kind(self) -> str:
        return "slurm"

    def to_json(self) -> str:
        return json.dumps({"version": VERSION, **asdict(self)}, indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> RunRecord:
        data = json.loads(text)
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)


def state_home() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or ""
    return Path(base) if os.path.isabs(base) else Path.home() / ".local" / "state"


def records_dir() -> Path:
    return state_home() / "kgen" / "slurm"


def default_run_dir(name: str) -> Path:
    return records_dir() / name


def path(name: str) -> Path:
    return records_dir() / f"{name}.json"


def private_dir(p: Path) -> None:
    p.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(p, 0o700)


def write_private(p: Path, text: str) -> None:
    """A 0600 file written whole (atomically)."""
    tmp = p.with_name(f".{p.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, p)


def save(rec: RunRecord) -> Path:
    target = path(rec.name)
    private_dir(target.parent)
    write_private(target, rec.to_json())
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
    except (ValueError, TypeError) as exc:
        raise UsageError(f"the run record {p} is damaged ({exc}): remove it") from None


def all_records() -> list[RunRecord]:
    out: list[RunRecord] = []
    d = records_dir()
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


def read_json(p: Path) -> dict | None:
    try:
        with open(p) as fh:
            value = json.load(fh)
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def read_jsonl(p: Path, limit: int = 4 << 20) -> list[dict]:
    """The JSON objects of a JSON-lines file (at most its last ``limit`` bytes); unreadable lines are skipped."""
    out: list[dict] = []
    try:
        with open(p, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - limit))
            data = fh.read()
    except OSError:
        return out
    for line in data.decode("utf-8", "replace").splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            out.append(value)
    return out


def read_history(run_dir: str) -> list[dict]:
    """Every decision ``--slurm-end`` took on the run (RUN/history), oldest first."""
    return read_jsonl(Path(run_dir) / "history")
