"""The Jinja2 environment: strict undefined, and every interpolation quoted in one place.

``{{ value }}`` always emits a JSON scalar or a JSON flow collection, which is valid YAML: a
user string can never open a new key, document or block, whatever it contains. Templates cannot
read the environment, files or the clock: they only see the spec.
"""

from __future__ import annotations

import json
from typing import Any

import jinja2

from kgen.render.spec import TrainingSpec
from kgen.resources import cache_dir, templates_dir

_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def quote_string(text: str) -> str:
    """A YAML double-quoted scalar: printable ASCII as is, everything else escaped by code point
    (so U+2028, U+0085 or a non-BMP character can never be read as a line break or mangled)."""
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif 0x20 <= code < 0x7F:
            out.append(ch)
        elif code <= 0xFF:
            out.append(f"\\x{code:02x}")
        elif code <= 0xFFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def quote(value: Any) -> str:
    """Every ``{{ }}`` in a template goes through here: a YAML flow scalar or collection."""
    if isinstance(value, jinja2.Undefined):  # pragma: no cover - StrictUndefined raises first
        raise jinja2.UndefinedError("undefined value in template")
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return json.dumps(value)
    if isinstance(value, str):
        return quote_string(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{quote_string(str(k))}: {quote(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(quote(v) for v in value) + "]"
    raise TypeError(f"template value of type {type(value).__name__} cannot be placed in YAML")


_ENV: jinja2.Environment | None = None


class _QuietBytecodeCache(jinja2.FileSystemBytecodeCache):
    """Compiled templates kept between runs (keyed by template source checksum by Jinja2 itself);
    an unreadable or unwritable cache only costs speed, never a failed render."""

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().load_bytecode(bucket)
        except (OSError, ValueError, EOFError):
            bucket.reset()

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().dump_bytecode(bucket)
        except OSError:
            pass


def _bytecode_cache() -> jinja2.BytecodeCache | None:
    folder = cache_dir()
    if folder is None:
        return None
    folder = folder / f"templates-{jinja2.__version__}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return _QuietBytecodeCache(str(folder))


def environment() -> jinja2.Environment:
    global _ENV
    if _ENV is None:
        _ENV = jinja2.Environment(
            loader=jinja2.FileSystemLoader(str(templates_dir())),
            bytecode_cache=_bytecode_cache(),
            undefined=jinja2.StrictUndefined,
            finalize=quote,
            autoescape=False,
            keep_trailing_newline=True,
            trim_blocks=True,
            lstrip_blocks=True,
        )
    return _ENV


def template_names(spec: TrainingSpec) -> list[str]:
    names = ["configmap.yaml.j2"]
    if not spec.is_jobset:  # JobSet creates its own headless Service (network.enableDNSHostnames)
        names.append("service.yaml.j2")
    if spec.renders_network_policy:
        names.append("networkpolicy.yaml.j2")
    names.append("jobset.yaml.j2" if spec.is_jobset else "job.yaml.j2" if spec.is_job else "statefulset.yaml.j2")
    if spec.v("podDisruptionBudget"):
        names.append("pdb.yaml.j2")
    return names


def render_text(spec: TrainingSpec, entrypoint_source: str) -> str:
    """Render the templates in a fixed order into one multi-document YAML text."""
    env = environment()
    docs = []
    for name in template_names(spec):
        docs.append(env.get_template(name).render(spec=spec, entrypoint_source=entrypoint_source))
    return "---\n".join(docs)
