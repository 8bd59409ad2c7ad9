"""A document as the lint rules see it: its value, plus where its text is for file positions.

Free of any YAML library: ``kgen.lint.parse`` builds documents from files and stdin (with a
``Source``: the file's text and where the document sits in it), ``kgen.lint.api.lint_documents``
from values already in memory (``kgen render``'s self-check), which have no source and so no line
numbers. No node tree is kept: when a finding needs a line and column, ``locate`` has the source
read the document's text again into a small position tree (``Source.positions``: ``PosNode``s, both
defined by the parser, so this module imports no other lint module), and the last few such trees
are cached. So memory grows with the values only, and only documents with findings pay for
positions.
"""

from __future__ import annotations

import json
import re
from typing import Any

from kgen.findings import Finding, Severity

# A few recently read position trees, by (id(text), start, end); each entry keeps its text alive, so
# an id cannot be reused while it is cached. ``forget_positions`` empties it at the end of a run.
_TREES: dict[tuple, tuple[str, Any]] = {}
_TREES_KEPT = 16


def _tree(source: Any) -> Any:
    """The position tree of the document at ``source`` (a ``kgen.lint.parse.Source``), from the cache
    or read again."""
    key = (id(source.text), source.start, source.end)
    got = _TREES.get(key)
    if got is not None:
        return got[1]
    tree = source.positions()
    if len(_TREES) >= _TREES_KEPT:
        _TREES.pop(next(iter(_TREES)))
    _TREES[key] = (source.text, tree)
    return tree


def forget_positions() -> None:
    """Drop the cached position trees (and the texts they keep alive)."""
    _TREES.clear()


_UNSET: Any = object()


class Document:
    """One YAML document of a stream: its value and where it came from."""

    __slots__ = (
        "file",
        "index",
        "data",
        "_findings",
        "_memo",
        "_node",
        "_source",
        "_line",
        "_prefix",
        "_shown",
        "_kind",
        "_api_version",
        "_metadata",
        "_name",
        "_namespace",
    )

    def __init__(
        self,
        file: str,
        index: int,
        node: Any,
        data: Any,
        *,
        source: Any = None,  # kgen.lint.parse.Source
        line: int = 0,
        prefix: tuple = (),
        shown: tuple = (),
    ) -> None:
        self.file = file
        self.index = index  # 0-based position in the stream (empty documents not counted)
        self.data = data
        self._findings: list[Finding] | None = None
        self._memo: dict | None = None
        self._node = node  # a PosNode tree given directly (tests), else read from source on demand
        self._source = source
        self._line = line
        self._prefix = prefix  # path of this document inside the source's document (List items, child objects)
        self._shown = shown  # the part of that path findings show (an embedded object: its place in the wrapper)
        self._kind = self._api_version = self._metadata = self._name = self._namespace = _UNSET

    def __repr__(self) -> str:
        return f"Document({self.file!r}, {self.index}, {self.kind or '?'}/{self.name or '?'})"

    @property
    def findings(self) -> list[Finding]:
        """Parse findings (duplicate keys)."""
        if self._findings is None:
            self._findings = []
        return self._findings

    def parse_findings(self) -> list[Finding] | tuple:
        """``findings`` without creating a list for a document that has none."""
        return self._findings or ()

    @property
    def memo(self) -> dict:
        """Per-document caches for rules."""
        if self._memo is None:
            self._memo = {}
        return self._memo

    def child(self, path: tuple, data: Any, line: int = 0, embedded: bool = False) -> Document:
        """The object at ``path`` inside this one (a List item, a JobSet's child Job template ...) as a
        document of its own, with positions in the same file and exact lines and columns. Its findings'
        paths are relative to it, or, for an ``embedded`` object (an AppWrapper component), shown from the
        enclosing document's root, where the user finds it."""
        shown = self._shown + tuple(path) if embedded else ()
        return Document(
            self.file,
            self.index,
            None,
            data,
            source=self._source,
            line=line,
            prefix=self._prefix + tuple(path),
            shown=shown,
        )

    @property
    def line(self) -> int:
        """1-based line where the document (its root value) starts; 0 without a source."""
        if not self._line and (self._source is not None or self._node is not None):
            self._line = self.locate(())[0]
        return self._line

    @property
    def node(self) -> Any:
        """The position tree of this document (read on demand), or None."""
        if self._node is not None:
            return self._node
        if self._source is None:
            return None
        root = _tree(self._source)
        return self._descend(root, self._prefix)[0] if root is not None else None

    def _top(self, key: str) -> Any:
        return self.data.get(key) if isinstance(self.data, dict) else None

    @property
    def kind(self) -> str:
        if self._kind is _UNSET:
            v = self._top("kind")
            self._kind = v if isinstance(v, str) else ""
        return self._kind

    @property
    def api_version(self) -> str:
        if self._api_version is _UNSET:
            v = self._top("apiVersion")
            self._api_version = v if isinstance(v, str) else ""
        return self._api_version

    @property
    def metadata(self) -> dict:
        if self._metadata is _UNSET:
            m = self._top("metadata")
            self._metadata = m if isinstance(m, dict) else {}
        return self._metadata

    @property
    def name(self) -> str:
        if self._name is _UNSET:
            v = self.metadata.get("name")
            self._name = v if isinstance(v, str) else ""
        return self._name

    @property
    def namespace(self) -> str:
        if self._namespace is _UNSET:
            v = self.metadata.get("namespace")
            self._namespace = v if isinstance(v, str) else ""
        return self._namespace

    @staticmethod
    def _descend(node: Any, path: tuple) -> tuple[Any, tuple[int, int], bool]:
        """Follow ``path`` (keys and list indexes) down the position tree: the deepest node reached,
        the (line, column) that locates it (a mapping entry's key, a list item's start) and whether
        all of ``path`` exists. Duplicate keys: the last wins, like the decoded value."""
        where = (node.line, node.column)
        for step in path:
            nxt = None
            if node.id == "mapping":
                got = node.value.get(step) if isinstance(step, str) else None
                if got is not None:
                    nxt, where = got[2], (got[0], got[1])
            elif node.id == "sequence" and isinstance(step, int) and 0 <= step < len(node.value):
                nxt = node.value[step]
                where = (nxt.line, nxt.column)
            if nxt is None:
                return node, where, False
            node = nxt
        return node, where, True

    def locate(self, path: tuple) -> tuple[int, int]:
        """1-based (line, column) of ``path``, or of its deepest existing ancestor; (0, 0) for
        documents without a source."""
        src = self._source
        if self._node is not None:
            return self._descend(self._node, path)[1]
        if src is None:
            return 0, 0
        if not path and not self._prefix:
            return src.line + 1, src.column + 1
        root = _tree(src)
        if root is None:
            return src.line + 1, src.column + 1
        return self._descend(root, self._prefix + tuple(path))[1]

    def scalar_at(self, path: tuple) -> Any:
        """The scalar node at ``path`` (``.value``, ``.style``, ``.tag``), or None (also for documents
        without a source)."""
        node = self.node
        if node is None:
            return None
        found, _, ok = self._descend(node, path)
        return found if ok and found.id == "scalar" else None

    def finding(self, rule_id: str, severity: Severity, message: str, path: tuple = ()) -> Finding:
        line, col = self.locate(path)
        shown = format_path(self._shown + tuple(path))
        return Finding(rule_id, severity, message, self.file, line, col, shown, self.kind, self.name)


_SIMPLE_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


def format_path(path: tuple) -> str:
    """``spec.containers[0].env`` and ``data["a b"]``: a key that is not a plain name is written as a JSON
    string, so a newline, tab or quote in it is escaped and a finding stays one line."""
    out = []
    for step in path:
        if isinstance(step, int):
            out.append(f"[{step}]")
        elif _SIMPLE_KEY.fullmatch(step):
            out.append(f".{step}" if out else step)
        else:
            out.append(f"[{json.dumps(step, ensure_ascii=False)}]")
    return "".join(out)
