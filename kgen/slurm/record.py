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
from dataclasses import asdict, dataclass
from pathlib import Path

from kgen.runs import store
from kgen.runs.store import NAME, check_name, private_dir, read_json, read_jsonl, state_home, write_private

__all__ = ["NAME", "RunRecord", "all_records", "check_name", "default_run_dir", "load", "path", "private_dir",
           "read_history", "read_json", "read_jsonl", "records_dir", "remove", "save", "state_home",
           "write_private"]  # fmt: skip
VERSION = 1


@dataclass
class RunRecord:
    name: str
    job_id: str
    run_dir: str
    nodes: int
    workdir: str = ""
    created: str = ""
    nproc: int = 0  # processes per node (0: not recorded)
    gpus: int = 0  # GPUs per node

    @property
    def kind(self) -> str:
        return "slurm"

    def to_json(self) -> str:
        return store.to_json(asdict(self), VERSION)

    @classmethod
    def from_json(cls, text: str) -> RunRecord:
        data = json.loads(text)
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)


def records_dir() -> Path:
    return state_home() / "kgen" / "slurm"


def default_run_dir(name: str) -> Path:
    return records_dir() / name


def path(name: str) -> Path:
    return records_dir() / f"{name}.json"


def save(rec: RunRecord) -> Path:
    target = path(rec.name)
    private_dir(target.parent)
    write_private(target, rec.to_json())
    return target


def load(name: str) -> RunRecord | None:
    return store.load(path(name), RunRecord.from_json)


def all_records() -> list[RunRecord]:
    return store.all_records(records_dir(), load)


def remove(name: str) -> bool:
    try:
        path(name).unlink()
        return True
    except FileNotFoundError:
        return False


def read_history(run_dir: str) -> list[dict]:
    """Every decision ``--slurm-end`` took on the run (RUN/history), oldest first."""
    return read_jsonl(Path(run_dir) / "history")
