"""ruamel.yaml load/dump for rendered manifests.

Rendered text is re-parsed (a template bug or a stray string that changed the structure shows up
here, not in the cluster) and emitted again from the parsed documents. Strings are written plain
only when both YAML 1.1 (kubectl's decoder) and YAML 1.2 read them back as the same string;
everything else is double-quoted. Multi-line strings become literal blocks.
"""

from __future__ import annotations

import io
import json
import re
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.representer import SafeRepresenter

from kgen.errors import RenderError

# A plain scalar is safe when it starts with a letter or "/" and has only these characters, and is
# not one of the words YAML 1.1 resolves to a bool or null.
_PLAIN_SAFE = re.compile(r"^[A-Za-z/][A-Za-z0-9_./-]*$")
_YAML11_WORDS = {
    w
    for base in ("y", "yes", "n", "no", "true", "false", "on", "off", "null")
    for w in (base, base.capitalize(), base.upper())
}


def plain_is_safe(text: str) -> bool:
    return bool(_PLAIN_SAFE.match(text)) and text not in _YAML11_WORDS


class _Representer(SafeRepresenter):
    def represent_str(self, data: str) -> Any:  # type: ignore[override]
        if "\n" in data and _literal_block(data, "") is not None:
            return self.represent_scalar("tag:yaml.org,2002:str", data, style="|")
        style = None if plain_is_safe(data) else '"'
        return self.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Representer.add_representer(str, _Representer.represent_str)


def _loader() -> YAML:
    return YAML(typ="safe")  # libyaml-based when ruamel.yaml.clib is installed (5x faster)


def _dumper() -> YAML:
    y = YAML(typ="safe")
    y.Representer = _Representer
    y.default_flow_style = False
    y.width = 4096
    y.allow_unicode = False  # escape non-ASCII: \u2028 and \x85 would otherwise fold as line breaks
    y.indent(mapping=2, sequence=2, offset=0)
    y.sort_base_mapping_type_on_output = False  # type: ignore[assignment]  # keep template key order
    return y


def parse_documents(text: str) -> list[dict]:
    try:
        docs = [d for d in _loader().load_all(text) if d is not None]
    except Exception as exc:  # ruamel raises many types; a render bug either way
        raise RenderError(f"rendered templates are not valid YAML: {exc}") from None
    for d in docs:
        if not isinstance(d, dict) or "kind" not in d:
            raise RenderError("rendered templates produced a document that is not a Kubernetes object")
    return docs


_LITERAL_SAFE = re.compile(r"^[\t\n\x20-\x7e]*$")


def _literal_block(text: str, indent: str) -> str | None:
    """A literal block scalar for text, written by hand, or None when that is not exact.

    Exact when the text is printable ASCII, tabs and newlines, its first line does not start with a
    space (no indentation indicator needed) and no line is only white space before the end.
    """
    if not _LITERAL_SAFE.match(text) or text[:1] in (" ", "\t", "\n"):
        return None
    body = text.rstrip("\n")
    trailing = len(text) - len(body)
    chomp = {0: "-", 1: ""}.get(trailing, "+")
    lines = body.split("\n")
    if any(ln and not ln.strip() for ln in lines):
        return None
    out = [f"|{chomp}"]
    out += [f"{indent}{ln}" if ln else "" for ln in lines]
    out += [""] * (trailing - 1 if trailing > 1 else 0)
    return "\n".join(out)


def dump_yaml(docs: list[dict]) -> str:
    """Emit the documents. Long multi-line strings (the entrypoint script) are written as literal
    blocks by hand: ruamel's pure-Python emitter takes about a second for 50 KB."""
    spliced: dict[str, str] = {}
    staged = []
    for doc in docs:
        data = doc.get("data") if doc.get("kind") == "ConfigMap" else None
        if isinstance(data, dict):
            doc = dict(doc, data=dict(data))
            for key, val in data.items():
                if isinstance(val, str) and len(val) > 1024 and "\n" in val:
                    block = _literal_block(val, "    ")
                    if block is not None:
                        marker = f"kgen-literal-{len(spliced)}"
                        spliced[marker] = block
                        doc["data"][key] = marker
        staged.append(doc)
    buf = io.StringIO()
    _dumper().dump_all(staged, buf)
    text = buf.getvalue()
    for marker, block in spliced.items():
        text = text.replace(f": {marker}\n", f": {block}\n", 1)
    return text


def dump_json(docs: list[dict]) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}, indent=2, ensure_ascii=False) + "\n"
