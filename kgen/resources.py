"""The files kgen reads and writes: its bundled templates/, presets/ and entrypoint/, its cache
folder, and whole-or-nothing writes.

In a wheel the bundled folders are inside the package (kgen/_bundled/...); in a source checkout or an editable
install they are the top-level folders of the repository.
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

_PKG = Path(__file__).resolve().parent


@cache
def data_root() -> Path:
    for candidate in (_PKG / "_bundled", _PKG.parent):
        if (candidate / "templates").is_dir() and (candidate / "presets").is_dir():
            return candidate
    raise FileNotFoundError(f"kgen data folders (templates/, presets/) not found near {_PKG}")


def templates_dir() -> Path:
    return data_root() / "templates"


def presets_dir() -> Path:
    return data_root() / "presets"


def entrypoint_dir() -> Path:
    return data_root() / "entrypoint"


ENTRYPOINT_FILE = "kgen_entrypoint.py"


def entrypoint_path() -> Path:
    return entrypoint_dir() / ENTRYPOINT_FILE


def cache_dir() -> Path | None:
    """kgen's cache folder (compiled schemas and templates); None when caching is switched off."""
    if os.environ.get("KGEN_NO_CACHE"):
        return None
    explicit = os.environ.get("KGEN_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "kgen"


def write_atomic(path: str | Path, data: bytes, *, durable: bool = False) -> None:
    """Write all of data or nothing: a temp file in the same folder, then a rename.

    Raises OSError; the temp file never outlives a failure (whatever the exception)."""
    import tempfile  # lazily: only writers need it

    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
