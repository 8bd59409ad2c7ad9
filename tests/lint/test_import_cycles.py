"""kgen/lint has no import cycle, counting every import a module makes: at the top, inside a function
(lazy imports are still edges: the two modules cannot be understood or moved apart) and in any
branch. An edge goes to the module named (``from kgen.lint import kinds`` -> kgen.lint.kinds, ``from
kgen.lint.kinds.base import X`` -> kgen.lint.kinds.base), not to the packages above it."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "kgen.lint"


def _modules() -> dict[str, Path]:
    out = {}
    base = ROOT / "kgen" / "lint"
    for path in sorted(base.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def import_graph() -> dict[str, set[str]]:
    """module -> the kgen.lint modules it imports anywhere in its source."""
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    here = name.split(".") if is_package else name.split(".")[:-1]
                    here = here[: len(here) - (node.level - 1)]
                    base = ".".join(here + ([base] if base else []))
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names
                ]
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name and target.startswith(PACKAGE):
                    graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def test_lint_has_no_import_cycle():
    assert cycles(import_graph()) == []


def test_the_check_sees_function_level_imports_and_finds_a_cycle():
    graph = import_graph()
    assert "kgen.lint.kinds" in graph["kgen.lint.model"]
    assert "kgen.lint.parse" in graph["kgen.lint.api"]  # imported inside a function only
    graph["kgen.lint.kinds.pytorchjob"] = graph["kgen.lint.kinds.pytorchjob"] | {"kgen.lint.model"}
    assert ["kgen.lint.kinds", "kgen.lint.kinds.pytorchjob", "kgen.lint.model"] in cycles(graph)
