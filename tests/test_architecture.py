"""The import contract: kgen's rooms import one way, and no module imports itself back.

Read from the code (every ``import`` and ``from ... import`` in kgen/, at module level or inside a function:
a lazy import is still an arrow), not from what a run happens to load. ``if TYPE_CHECKING:`` imports are
not arrows (they never run). The rooms:

    kgen.cli                                   the command line; imported by nothing (kgen.__main__ runs it)
    kgen.sdk                                   the Python API: one function per command; imports every room
    kgen.cluster | kgen.baremetal | kgen.slurm the run adapters; none imports another
    kgen.runs                                  what the adapters share: records, verdict, views
    kgen.render, kgen.lint                     never import a run adapter, kgen.runs, kgen.sdk or kgen.cli
    leaves (errors, findings, versions, yamlio, schema, launch/, k8s, inputs, resources, jobset, output)

An AST test rather than import-linter: no dependency, it names kgen.slurm before that package exists, and
it finds every circle at module level (import-linter's contracts are about packages and siblings).
"""

from __future__ import annotations

import ast
from pathlib import Path

KGEN = Path(__file__).resolve().parent.parent / "kgen"


# kgen/__init__.py is __version__ (a leaf every room may import) and the lazy face of kgen.sdk (PEP 562
# __getattr__): its own imports are the user's entry into the API, not an arrow between rooms.
FACADE = "kgen"

ADAPTERS = ("kgen.cluster", "kgen.baremetal", "kgen.slurm")
# room -> rooms it must never import (a room is a package and everything below it)
FORBIDDEN = {
    "kgen.render": (*ADAPTERS, "kgen.runs", "kgen.sdk", "kgen.cli", "kgen.api"),
    "kgen.lint": (*ADAPTERS, "kgen.runs", "kgen.render", "kgen.sdk", "kgen.cli", "kgen.api"),
    "kgen.runs": (*ADAPTERS, "kgen.render", "kgen.lint", "kgen.sdk", "kgen.cli", "kgen.api"),
    "kgen.cluster": ("kgen.baremetal", "kgen.slurm", "kgen.sdk", "kgen.cli", "kgen.api"),
    "kgen.baremetal": ("kgen.cluster", "kgen.slurm", "kgen.sdk", "kgen.cli", "kgen.api"),
    "kgen.slurm": ("kgen.cluster", "kgen.baremetal", "kgen.sdk", "kgen.cli", "kgen.api"),
    "kgen.sdk": ("kgen.cli",),
    "kgen.api": ("kgen.cli", "kgen.sdk"),
}
LEAVES = (
    "kgen.errors",
    "kgen.findings",
    "kgen.versions",
    "kgen.yamlio",
    "kgen.schema",
    "kgen.launch",
    "kgen.launch.shell",
    "kgen.launch.shelltree",
    "kgen.launch.shellwords",
    "kgen.launch.shellexpand",
    "kgen.launch.command",
    "kgen.launch.argv",
    "kgen.launch.exitfate",
    "kgen.launch.launchers",
    "kgen.k8s",
    "kgen.inputs",
    "kgen.resources",
    "kgen.jobset",
    "kgen.output",
)
# The CLI verb groups: each imports kgen.cli.options and the library, never another group or the root.
CLI_GROUPS = ("render", "lint", "runs", "baremetal", "completion", "debug")


def _modules() -> dict[str, tuple[Path, bool]]:
    out = {}
    for path in KGEN.rglob("*.py"):
        parts = list(path.relative_to(KGEN.parent).with_suffix("").parts)
        package = parts[-1] == "__init__"
        if package:
            parts = parts[:-1]
        out[".".join(parts)] = (path, package)
    return out


def _type_checking_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def import_graph() -> dict[str, dict[str, int]]:
    """module -> {imported kgen module: line}; ``from pkg import name`` is an arrow to pkg.name when that is a
    module, else to pkg."""
    modules = _modules()

    def resolve(name: str) -> str:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name

    graph: dict[str, dict[str, int]] = {}
    for module, (path, package) in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _type_checking_lines(tree)
        arrows: dict[str, int] = {}
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and node.lineno in skip:
                continue
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name == "kgen" or alias.name.startswith("kgen."):
                        arrows.setdefault(resolve(alias.name), node.lineno)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = module if package else module.rpartition(".")[0]
                    for _ in range(node.level - 1):
                        anchor = anchor.rpartition(".")[0]
                    base = f"{anchor}.{base}" if base else anchor
                if base != "kgen" and not base.startswith("kgen."):
                    continue
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    arrows.setdefault(full if full in modules else resolve(base), node.lineno)
        arrows.pop(module, None)
        graph[module] = arrows
    return graph


def circles(graph: dict[str, dict[str, int]]) -> list[frozenset[str]]:
    """The strongly connected components with more than one module (Tarjan), the facade left out."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, {}) if v != FACADE else {}:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _in(module: str, room: str) -> bool:
    return module == room or module.startswith(room + ".")


def test_no_import_circles():
    """None anywhere in kgen/ (the three lint circles once found are gone: lint/api <-> lint/kubeconform,
    lint/document <-> lint/parse, lint/k8s -> lint/kinds -> lint/kinds/pytorchjob -> lint/k8s)."""
    found = sorted(sorted(c) for c in circles(import_graph()))
    assert not found, f"import circles: {found}"


def test_the_rooms_import_one_way():
    graph = import_graph()
    wrong = [
        f"{module}:{line} imports {target}"
        for module, arrows in graph.items()
        for room, forbidden in FORBIDDEN.items()
        if _in(module, room)
        for target, line in arrows.items()
        if any(_in(target, f) for f in forbidden)
    ]
    assert not wrong, "\n".join(wrong)


def test_the_leaves_import_no_room():
    graph = import_graph()
    rooms = ("kgen.render", "kgen.runs", "kgen.sdk", "kgen.cli", "kgen.api", *ADAPTERS)
    wrong = [
        f"{leaf}:{line} imports {target}"
        for leaf in LEAVES
        for target, line in graph[leaf].items()
        if any(_in(target, room) for room in rooms)
    ]
    assert not wrong, "\n".join(wrong)


def test_the_shared_models_import_kgen_leaves_only():
    """The launch model (kgen.launch) and the Kubernetes facts (kgen.k8s) are read by render and lint alike:
    they import no room, lint included."""
    graph = import_graph()
    shared = [m for m in graph if _in(m, "kgen.launch") or m == "kgen.k8s"]
    launch = ("shell", "shelltree", "shellwords", "shellexpand", "command", "argv", "exitfate", "launchers")
    assert {*(f"kgen.launch.{m}" for m in launch), "kgen.k8s"} <= set(shared)
    wrong = [
        f"{m}:{line} imports {target}"
        for m in shared
        for target, line in graph[m].items()
        if not (_in(target, "kgen.launch") or target in LEAVES)
    ]
    assert not wrong, "\n".join(wrong)


def test_the_cli_is_imported_by_nothing_but_its_entry_point():
    graph = import_graph()
    importers = sorted(
        f"{module}:{line}"
        for module, arrows in graph.items()
        if not _in(module, "kgen.cli") and module != "kgen.__main__"
        for target, line in arrows.items()
        if _in(target, "kgen.cli")
    )
    assert not importers, importers


def test_the_cli_groups_import_options_and_the_library_only():
    """The root imports the groups; a group imports kgen.cli.options, never another group or the root."""
    graph = import_graph()
    for group in CLI_GROUPS:
        cli_arrows = {t for t in graph[f"kgen.cli.{group}"] if _in(t, "kgen.cli")}
        assert cli_arrows <= {"kgen.cli.options"}, (group, cli_arrows)
    assert {f"kgen.cli.{g}" for g in CLI_GROUPS} <= set(graph["kgen.cli.root"])
    assert not {t for t in graph["kgen.cli.options"] if _in(t, "kgen.cli")}


def test_only_the_cli_imports_click():
    """The CLI is the only place that imports click (and so prints and exits through it)."""
    users = []
    for module, (path, _) in _modules().items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            if any(n == "click" or n.startswith("click.") for n in names) and not _in(module, "kgen.cli"):
                users.append(f"{module}:{node.lineno}")
    assert not users, users


def test_no_plain_import_of_a_subpackage_named_like_a_function():
    """kgen.render and kgen.lint are functions as attributes of kgen (kgen/__init__.py): `import kgen.lint.x`
    followed by `kgen.lint.x.y`, or `import kgen.render.x as x`, would reach the function. Use `from ...
    import`."""
    bad = []
    for path in [*KGEN.rglob("*.py"), *(KGEN.parent / "tests").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                bad += [
                    f"{path.relative_to(KGEN.parent)}:{node.lineno}"
                    for a in node.names
                    if a.name.startswith(("kgen.render", "kgen.lint", "kgen.launch"))
                ]
    assert not bad, bad


def test_the_check_can_fail():
    """The graph reader sees arrows (lazy ones too) and the circle finder finds a planted circle."""
    graph = import_graph()
    assert "kgen.cluster.client" in graph["kgen.cluster.engine"]  # imported inside connect()
    assert "kgen.sdk" not in graph["kgen.cli.options"]
    planted = {**graph, "kgen.errors": {**graph["kgen.errors"], "kgen.render.spec": 1}}
    assert any("kgen.errors" in c for c in circles(planted))
