"""Parse Kubernetes YAML the way kubectl does, keeping the node tree for line numbers.

PyYAML's C composer (libyaml) builds the node tree; ``_convert`` turns nodes into plain Python
values with kubectl's resolution rules (``sigs.k8s.io/yaml`` -> goyaml.v2), which differ from
PyYAML's SafeConstructor:

- ``y Y n N`` are booleans (PyYAML: strings); timestamps stay strings (PyYAML: datetime);
- ``0o17`` and Go-style numbers such as ``1e3`` are numbers; ``1:30`` (sexagesimal) is a string;
- a duplicate mapping key is an error (kubectl strict field validation), recorded as KG001.

Whether a boolean came from an unquoted ``yes``/``on``/... is read back from the node tree when a
schema error needs it (``Document.scalar_at``), so the happy path records nothing.
"""

from __future__ import annotations

import math
import re
from typing import Any

import yaml
from yaml.nodes import MappingNode, ScalarNode, SequenceNode

from kgen.errors import InputError
from kgen.findings import Finding, Severity
from kgen.lint.document import Document, format_path

_PLAIN = "!kgen-plain"  # our tag for untagged plain scalars; resolved by _plain() below
_MAP = "tag:yaml.org,2002:map"
_SEQ = "tag:yaml.org,2002:seq"

try:  # libyaml; PyYAML wheels ship it, the pure-Python fallback is ~8x slower
    _Base: type = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - depends on the PyYAML build
    _Base = yaml.SafeLoader


class _Loader(_Base):  # type: ignore[misc, valid-type]
    """Skips PyYAML's YAML-1.1 regex resolver: plain scalars are resolved kubectl's way later."""

    def descend_resolver(self, current_node: Any, current_index: Any) -> None:  # path resolvers: unused
        pass

    def ascend_resolver(self) -> None:
        pass

    def resolve(self, kind: Any, value: Any, implicit: Any) -> str:
        if kind is ScalarNode:
            return _PLAIN if implicit[0] else _STR
        return _MAP if kind is MappingNode else _SEQ


_STR = "tag:yaml.org,2002:str"
_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_BOOL = "tag:yaml.org,2002:bool"
_NULL = "tag:yaml.org,2002:null"
_MERGE = "tag:yaml.org,2002:merge"
_TIMESTAMP = "tag:yaml.org,2002:timestamp"

# goyaml.v2 resolve.go: every plain scalar that decodes as a boolean.
YAML11_BOOLS: dict[str, bool] = {
    **dict.fromkeys(("y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"), True),
    **dict.fromkeys(("n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"), False),
}
_EXPLICIT_NONSTR = frozenset((_INT, _FLOAT, _BOOL, _NULL))
_NULLS = frozenset(("", "~", "null", "Null", "NULL"))
_GO_NUMBER = re.compile(
    r"[-+]?(?:0[xXoObB][0-9a-fA-F_]+|[0-9][0-9_]*(?:\.[0-9_]*)?(?:[eE][-+]?[0-9]+)?|\.[0-9]+(?:[eE][-+]?[0-9]+)?)$"
)


def _go_int(text: str) -> int | None:
    s = text.replace("_", "")
    sign = -1 if s[:1] == "-" else 1
    if s[:1] in "+-":
        s = s[1:]
    try:
        low = s[:2].lower()
        if low in ("0x", "0o", "0b"):
            return sign * int(s, 0)
        if len(s) > 1 and s[0] == "0":
            return sign * int(s, 8)
        return sign * int(s, 10)
    except ValueError:
        return None


def _plain(node: ScalarNode) -> Any:
    """kubectl's value for a plain (unquoted) scalar."""
    value = node.value
    b = YAML11_BOOLS.get(value)
    if b is not None:
        return b
    if value in _NULLS:
        return None
    c = value[0]
    if c in "0123456789+-." and ":" not in value:
        low = value.lower()
        if low in (".inf", "+.inf"):
            return math.inf
        if low == "-.inf":
            return -math.inf
        if low == ".nan":
            return math.nan
        if _GO_NUMBER.match(value):
            i = _go_int(value)
            if i is not None:
                return i
            try:
                return float(value.replace("_", ""))
            except ValueError:
                return value
    return value


MAX_EXPANDED_NODES = 1_000_000  # goyaml also refuses "excessive aliasing"


class _Cycle(Exception):
    def __init__(self, node: Any):
        self.node = node


def _expanded_size(node: Any, sizes: dict[int, int]) -> int:
    """Nodes in the document once aliases are expanded; raises _Cycle for an alias to an ancestor."""
    got = sizes.get(id(node))
    if got is not None:
        if got < 0:
            raise _Cycle(node)
        return got
    sizes[id(node)] = -1  # in progress
    if isinstance(node, MappingNode):
        total = 1 + sum(_expanded_size(k, sizes) + _expanded_size(v, sizes) for k, v in node.value)
    elif isinstance(node, SequenceNode):
        total = 1 + sum(_expanded_size(v, sizes) for v in node.value)
    else:
        total = 1
    sizes[id(node)] = total
    return total


class _Converter:
    __slots__ = ("dups", "memo", "aliased")

    def __init__(self) -> None:
        self.dups: list[tuple[MappingNode, ScalarNode]] = []
        self.memo: dict[int, Any] = {}
        self.aliased = False

    def convert(self, node: Any) -> Any:
        cls = node.__class__
        if cls is ScalarNode:
            tag = node.tag
            if tag == _PLAIN:
                return _plain(node)
            if tag in _EXPLICIT_NONSTR:  # e.g. !!int "5"
                return _plain(node)
            return node.value  # quoted, block, !!str or a custom tag: a string
        memo = self.memo
        got = memo.get(id(node))
        if got is not None:  # an alias: same node object (cycles are checked after conversion)
            self.aliased = True
            return got
        if cls is MappingNode:
            out: dict = {}
            memo[id(node)] = out
            convert = self.convert
            for knode, vnode in node.value:
                if knode.tag == _PLAIN and knode.value == "<<" or knode.tag == _MERGE:
                    self._merge(out, vnode)
                    continue
                key = convert(knode)
                if not isinstance(key, str):
                    key = _key_string(key)
                if key in out:
                    self.dups.append((node, knode))
                out[key] = convert(vnode)
            return out
        if cls is SequenceNode:
            seq: list = []
            memo[id(node)] = seq
            seq.extend(self.convert(v) for v in node.value)
            return seq
        raise InputError(f"unsupported YAML node {node!r}")  # pragma: no cover

    def _merge(self, out: dict, vnode: Any) -> None:
        sources = vnode.value if isinstance(vnode, SequenceNode) else [vnode]
        for src in sources:
            value = self.convert(src)
            if isinstance(value, dict):
                for k, v in value.items():
                    out.setdefault(k, v)


def _key_string(key: Any) -> str:
    if key is True:
        return "true"
    if key is False:
        return "false"
    if key is None:
        return "null"
    return str(key)


def _node_path(root: Any, target: Any) -> tuple | None:
    """Path of the node ``target`` below ``root`` (used only for rare findings)."""
    stack: list[tuple[Any, tuple]] = [(root, ())]
    seen: set[int] = set()
    while stack:
        node, path = stack.pop()
        if node is target:
            return path
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, MappingNode):
            for k, v in node.value:
                stack.append((v, path + (k.value if isinstance(k, ScalarNode) else str(k),)))
        elif isinstance(node, SequenceNode):
            for i, v in enumerate(node.value):
                stack.append((v, path + (i,)))
    return None


class ParseError(InputError):
    """A file that is not valid YAML (or that kubectl would refuse to decode), with its position."""

    def __init__(self, file: str, line: int, column: int, problem: str) -> None:
        self.file, self.line, self.column, self.problem = file, line, column, problem
        where = f"{file}:{line}:{column}" if column else (f"{file}:{line}" if line else file)
        super().__init__(f"{where}: {problem}")


def parse_stream(text: str, file: str) -> list[Document]:
    """All non-empty documents of a YAML stream. Raises ParseError (an InputError) on the first
    syntax error."""
    docs, errors = parse_stream_partial(text, file)
    if errors:
        raise errors[0]
    return docs


def parse_stream_partial(text: str, file: str) -> tuple[list[Document], list[ParseError]]:
    """Like ``parse_stream``, but keeps going: the documents before a syntax error (which ends the
    stream: nothing after it can be trusted), and every document that parses around one that
    kubectl would refuse (alias cycles, excessive aliasing, too deep), plus the errors."""
    docs: list[Document] = []
    errors: list[ParseError] = []
    nodes = yaml.compose_all(text, Loader=_Loader)
    while True:
        try:
            node = next(nodes)
        except StopIteration:
            break
        except yaml.MarkedYAMLError as err:
            mark = err.problem_mark or err.context_mark
            problem = " ".join(str(err.problem or err.context or "invalid YAML").split())
            line, col = (mark.line + 1, mark.column + 1) if mark else (0, 0)
            errors.append(ParseError(file, line, col, f"YAML syntax error: {problem}"))
            break
        except yaml.YAMLError as err:
            errors.append(ParseError(file, 0, 0, f"YAML error: {' '.join(str(err).split())}"))
            break
        if node is None:
            continue
        try:
            _add_document(node, file, docs)
        except ParseError as err:
            errors.append(err)
    return docs, errors


def _add_document(node: Any, file: str, docs: list[Document]) -> None:
    line = node.start_mark.line + 1
    conv = _Converter()
    try:
        data = conv.convert(node)
    except RecursionError:
        raise ParseError(file, line, 0, "YAML nests too deeply (or an alias refers to itself)") from None
    try:
        expanded = _expanded_size(node, {}) if conv.aliased else 0
    except RecursionError:
        raise ParseError(file, line, 0, "YAML aliases nest too deeply") from None
    except _Cycle as cycle:
        mark = cycle.node.start_mark
        raise ParseError(
            file, mark.line + 1, mark.column + 1, "YAML alias refers to a node that contains it (kubectl rejects it)"
        ) from None
    if expanded > MAX_EXPANDED_NODES:
        raise ParseError(
            file,
            line,
            0,
            f"YAML aliases expand this document to more than {MAX_EXPANDED_NODES} nodes (excessive aliasing); "
            "refusing to lint it",
        )
    if data is None:
        return  # empty document (only comments or `---`)
    doc = Document(file, len(docs), node, data)
    for mapping, knode in conv.dups:
        parent = _node_path(node, mapping) or ()
        path = parent + (knode.value,)
        doc.findings.append(
            Finding(
                "KG001",
                Severity.ERROR,
                f"duplicate key {knode.value!r}: kubectl rejects it (strict field validation); keep one",
                file,
                knode.start_mark.line + 1,
                knode.start_mark.column + 1,
                format_path(path),
                doc.kind,
                doc.name,
            )
        )
    items = _list_items(doc)
    if items is None:
        docs.append(doc)
        return
    if doc.findings and items:  # duplicate keys found while converting the List: report them once
        items[0].findings.extend(doc.findings)
    elif doc.findings:
        docs.append(doc)
    for item in items:
        item.index = len(docs)
        docs.append(item)


def _list_items(doc: Document) -> list[Document] | None:
    """The items of a ``kind: List`` (or ``<Kind>List``) document as documents of their own, the
    way kubectl applies them; None for any other document. Paths of item findings are relative to
    the item; lines and columns are exact."""
    data = doc.data
    if not isinstance(data, dict) or not doc.kind.endswith("List") or not isinstance(data.get("items"), list):
        return None
    items_node = None
    if isinstance(doc.node, MappingNode):
        for k, v in doc.node.value:
            if isinstance(k, ScalarNode) and k.value == "items" and isinstance(v, SequenceNode):
                items_node = v
    if items_node is None or len(items_node.value) != len(data["items"]):
        return None
    return [Document(doc.file, 0, node, item) for node, item in zip(items_node.value, data["items"], strict=True)]
