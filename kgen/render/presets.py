"""Presets: one values file per preset in presets/ (shipped inside the wheel)."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from kgen.errors import UsageError
from kgen.render.layering import flatten, load_values_text
from kgen.resources import presets_dir

DEFAULT_PRESET = "2node-test"


class Preset(NamedTuple):
    name: str
    path: Path
    text: str

    def mapping(self) -> tuple[dict, dict]:
        return load_values_text(self.text, f"preset {self.name}")

    def summary(self) -> dict[str, str]:
        raw, typed = self.mapping()
        flat = flatten(raw, typed, f"preset {self.name}")
        get = lambda k, d="": flat[k][0] if k in flat else d  # noqa: E731
        return {
            "name": self.name,
            "shape": f"{get('nodes', '?')} x {get('gpus', '?')}",
            "kind": get("kind", "job"),
            "description": get("description"),
        }


def names() -> list[str]:
    return sorted(p.stem for p in presets_dir().glob("*.yaml"))


def load(name: str) -> Preset:
    path = presets_dir() / f"{name}.yaml"
    if not path.is_file():
        import difflib  # only on the error path

        known = names()
        near = difflib.get_close_matches(name, known, n=1)
        hint = f'did you mean "{near[0]}"?' if near else f"choose one of: {', '.join(known)}"
        raise UsageError(f'unknown preset "{name}"', option="--preset", hint=hint)
    return Preset(name, path, path.read_text(encoding="utf-8"))
