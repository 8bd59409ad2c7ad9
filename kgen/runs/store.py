"""The local records of runs on this machine, whatever they run on: ``$XDG_STATE_HOME/kgen/<ENGINE>/<RUN>.json``
(default ~/.local/state), 0600 files in 0700 folders, written whole (atomically).

Each adapter keeps its own record type (kgen.baremetal.record, kgen.slurm.record) and its own folder; what
they share is here: where the state lives, what a run name may be, writing a private file, loading a record
(a damaged one is a one-line error naming it) and listing the records of a folder. No secret and no
environment value is ever kept in a record.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from kgen.errors import UsageError

NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")  # a run name: a DNS label
T = TypeVar("T")


def check_name(name: str, option: str = "--name") -> str:
    """``name`` when it is a DNS label of at most 63 characters (what every engine can name a run by)."""
    if len(name) > 63:
        raise UsageError(f"is {len(name)} characters: a run name is a DNS label of at most 63", option=option)
    if not NAME.fullmatch(name):
        raise UsageError(
            f'must be a DNS label (lower-case letters, digits, "-"), got "{name}"', option=option, hint="e.g. llama-8n"
        )
    return name


def is_name(name: str) -> bool:
    return len(name) <= 63 and NAME.fullmatch(name) is not None


def state_home() -> Path:
    """``$XDG_STATE_HOME`` when it is an absolute path (the XDG rule), else ~/.local/state."""
    base = os.environ.get("XDG_STATE_HOME") or ""
    return Path(base) if os.path.isabs(base) else Path.home() / ".local" / "state"


def private_dir(p: Path, parents: bool = False) -> None:
    """Make ``p`` (and its parents) and keep it 0700 (``parents``: its parent too) where this user owns it."""
    p.mkdir(parents=True, exist_ok=True, mode=0o700)
    for d in (p, p.parent) if parents else (p,):
        try:
            if d.stat().st_uid == os.getuid():
                os.chmod(d, 0o700)
        except OSError:
            pass


def write_private(p: Path, text: str) -> None:
    """A 0600 file written whole: a reader sees the old text or the new one, never a part."""
    tmp = p.with_name(f".{p.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, p)


def load(p: Path, parse: Callable[[str], T]) -> T | None:
    """The record at ``p`` (``parse``: its text -> the record), None when there is none; an unreadable or
    damaged record is a one-line UsageError that names it."""
    try:
        text = p.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UsageError(f"cannot read the run record {p}: {exc.strerror}") from None
    try:
        return parse(text)
    except (ValueError, TypeError, KeyError) as exc:
        raise UsageError(f"the run record {p} is damaged ({exc}): remove it") from None


def names(folder: Path) -> list[str]:
    """The run names that have a record in ``folder`` (``<name>.json``), sorted."""
    if not folder.is_dir():
        return []
    return [p.stem for p in sorted(folder.glob("*.json")) if is_name(p.stem)]


def all_records(folder: Path, load_one: Callable[[str], T | None]) -> list[T]:
    """Every readable record of ``folder``, by name; damaged ones are left out (``load_one`` names them)."""
    out: list[T] = []
    for name in names(folder):
        try:
            rec = load_one(name)
        except UsageError:
            continue
        if rec is not None:
            out.append(rec)
    return out


def to_json(data: dict, version: int) -> str:
    return json.dumps({"version": version, **data}, indent=2, sort_keys=True) + "\n"


def read_json(p: Path) -> dict | None:
    """A JSON object from a file, or None (missing, unreadable, not JSON, not an object)."""
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
