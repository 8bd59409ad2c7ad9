"""ruamel.yaml load/dump for rendered manifests.

Rendered text is re-parsed (a template bug or a stray string that changed the structure shows up
here, not in the cluster) and emitted again from the parsed documents. Strings are written plain
only when both YAML 1.1 (kubectl's decoder) and YAML 1.2 read them back as the same string;
everything else is double-quoted. Multi-line strings become literal blocks when that is exact.
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


_LITERAL_SAFE = re.compile(r"^[\t\n\x20-\x7e]*$")


def _literal_is_exact(text: str) -> bool:
    """A literal block (|) reads back exactly: printable ASCII, tabs and newlines only, no first
    line starting with white space (that would need an indentation indicator) and no line that is
    only white space."""
    if not _LITERAL_SAFE.match(text) or text[:1] in (" ", "\t", "\n"):
        return False
    return not any(ln and not ln.strip() for ln in text.rstrip("\n").split("\n"))


class _Representer(SafeRepresenter):
    def represent_str(self, data: str) -> Any:  # type: ignore[override]
        if "\n" in data and _literal_is_exact(data):
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


def dump_yaml(docs: list[dict]) -> str:
    buf = io.StringIO()
    _dumper().dump_all(docs, buf)
    return buf.getvalue()


def dump_json(docs: list[dict]) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}, indent=2, ensure_ascii=False) + "\n"
