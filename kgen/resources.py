"""Where kgen's bundled files live: templates/, presets/ and entrypoint/.

In a wheel they are inside the package (kgen/_bundled/...); in a source checkout or an editable
install they are the top-level folders of the repository.
"""

from __future__ import annotations

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
