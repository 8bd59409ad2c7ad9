"""A document as the lint rules see it: its value, plus a node tree for file positions.

Free of any YAML library: ``kgen.lint.parse`` builds documents from PyYAML node trees (files,
stdin), ``kgen.lint.api.lint_documents`` from values already in memory (``kgen render``'s
self-check), which have no node tree and so no line numbers. Nodes are read by their ``id``
("scalar", "sequence", "mapping"), which PyYAML's node classes carry.
"""

from __future__ import annotations

import re
from functools import cached_property
from typing import Any

from kgen.findings import Finding, Severity


class Document:
    """One YAML document of a stream: its value, node tree and where it came from."""

    def __init__(self, file: str, index: int, node: Any, data: Any) -> None:
        self.file = file
        self.index = index  # 0-based position in the stream (empty documents not counted)
        self.node = node  # yaml root node (PyYAML); None for documents built in memory (no positions)
        self.data = data
        self.findings: list[Finding] = []  # parse findings (duplicate keys)
        self.memo: dict = {}  # per-document caches for rules
        self.prefix: tuple = ()  # an object embedded in another (AppWrapper component): its path there

    def __repr__(self) -> str:
        return f"Document({self.file!r}, {self.index}, {self.kind or '?'}/{self.name or '?'})"

    @property
    def line(self) -> int:
        if self.node is None:
            return 0
        return self.locate(())[0] if self.prefix else self.node.start_mark.line + 1

    def child(self, path: tuple, data: object) -> Document:
        """The object at ``path`` inside this one (an AppWrapper component ...) as a document of its own:
        its findings' paths are shown from this document's root, their lines and columns exact."""
        child = Document(self.file, self.index, self.node, data)
        child.prefix = self.prefix + tuple(path)
        return child

    @cached_property
    def kind(self) -> str:
        v = self.data.get("kind") if isinstance(self.data, dict) else None
        return v if isinstance(v, str) else ""

    @cached_property
    def api_version(self) -> str:
        v = self.data.get("apiVersion") if isinstance(self.data, dict) else None
        return v if isinstance(v, str) else ""

    @cached_property
    def metadata(self) -> dict:
        m = self.data.get("metadata") if isinstance(self.data, dict) else None
        return m if isinstance(m, dict) else {}

    @cached_property
    def name(self) -> str:
        v = self.metadata.get("name")
        return v if isinstance(v, str) else ""

    @cached_property
    def namespace(self) -> str:
        v = self.metadata.get("namespace")
        return v if isinstance(v, str) else ""

    def _walk(self, path: tuple) -> tuple[Any, Any, bool]:
        """Follow ``path`` (keys and list indexes) down the node tree: the deepest node reached, the
        mark that locates it (a mapping entry's key, a list item's start) and whether all of
        ``path`` exists. Duplicate keys: the last wins, like the decoded value."""
        node = self.node
        mark = node.start_mark
        for step in self.prefix + tuple(path):
            nxt = None
            if node.id == "mapping":
                for k, v in node.value:
                    if k.id == "scalar" and k.value == step:
                        nxt, mark = v, k.start_mark
            elif node.id == "sequence" and isinstance(step, int) and 0 <= step < len(node.value):
                nxt = node.value[step]
                mark = nxt.start_mark
            if nxt is None:
                return node, mark, False
            node = nxt
        return node, mark, True

    def locate(self, path: tuple) -> tuple[int, int]:
        """1-based (line, column) of ``path``, or of its deepest existing ancestor; (0, 0) for
        documents without a node tree."""
        if self.node is None:
            return 0, 0
        _, mark, _ = self._walk(path)
        return mark.line + 1, mark.column + 1

    def scalar_at(self, path: tuple) -> Any:
        """The yaml ScalarNode at ``path``, or None (also for documents without a node tree)."""
        if self.node is None:
            return None
        node, _, found = self._walk(path)
        return node if found and node.id == "scalar" else None

    def finding(self, rule_id: str, severity: Severity, message: str, path: tuple = ()) -> Finding:
        line, col = self.locate(path)
        shown = format_path(self.prefix + tuple(path))
        return Finding(rule_id, severity, message, self.file, line, col, shown, self.kind, self.name)


_SIMPLE_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*$")


def format_path(path: tuple) -> str:
    out = []
    for step in path:
        if isinstance(step, int):
            out.append(f"[{step}]")
        elif _SIMPLE_KEY.match(step):
            out.append(f".{step}" if out else step)
        else:
            out.append(f'["{step}"]')
    return "".join(out)
