"""The rule registry: every rule is a small function registered with a stable id and severity.

Document rules get one ``Document`` and yield ``(path, message)``; stream rules get the objects of
one apply unit (``kgen.lint.units``: one folder's files, a Kustomize directory and what it lists,
one file, stdin, or one render) and yield ``(document, path, message)``. Paths are tuples of
keys and list indexes; the registry turns them into Findings with file, line and column.
Ids that are produced by the parser or the schema engine are registered as ``builtin`` rules
(no function) so ``--skip``, the docs and the tests know about them.

Every module ``kgen/lint/rules_*.py`` is imported by ``load_rules`` (sorted by name), so a new rule
family is one new module: no list to edit here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from kgen.findings import Severity


class Context(NamedTuple):
    kubernetes_version: str  # "1.37"
    explain: bool = False  # `kgen lint --explain`: report how lint reads each training workload (KG137)
    unit: str = ""  # the apply unit a stream rule sees, named when a run has several (kgen.lint.units)

    @property
    def minor(self) -> int:
        return int(self.kubernetes_version.split(".")[1])


class Rule(NamedTuple):
    id: str
    severity: Severity
    summary: str  # one sentence for the docs
    fix: str  # one sentence: how to fix it
    kinds: frozenset[str] | None = None  # None: every kind
    scope: str = "document"  # document | stream | builtin
    fn: Callable[..., Iterable[Any]] | None = None
    needs_all_inputs: bool = False  # reports something *missing*: skipped when an input did not parse
    # reads only the object's pod templates (kgen.lint.kinds: pod_specs, templates): objects of a kind
    # lint has no adapter for have none, so the rule is not called for them (ConfigMaps, Services ...)
    templates_only: bool = False


RULES: dict[str, Rule] = {}

# Rule ids that were merged into the rules written once over the workload model (docs/lint.md,
# "Renumbered rules"); --skip and the kgen.dev/lint-skip annotation still take them.
RENUMBERED = {
    "KG153": ("KG106", "KG107", "KG139", "KG115", "KG116"),
    "KG154": ("KG104", "KG105"),
    "KG155": ("KG102",),
    "KG156": ("KG110", "KG138"),
    "KG157": ("KG117",),
}


def expand_ids(ids: frozenset) -> frozenset:
    """``ids`` with every renumbered id replaced by the ids that took it over."""
    out = set(ids)
    for old, new in RENUMBERED.items():
        if old in out:
            out.discard(old)
            out.update(new)
    return frozenset(out)


def _add(rule: Rule) -> None:
    if rule.id in RULES:
        raise ValueError(f"duplicate rule id {rule.id}")
    RULES[rule.id] = rule


def rule(
    rule_id: str,
    severity: Severity,
    summary: str,
    fix: str,
    kinds: Iterable[str] | None = None,
    scope: str = "document",
    needs_all_inputs: bool = False,
    templates_only: bool = False,
) -> Callable:
    """Decorator: register a document (or stream) rule."""

    def wrap(fn: Callable) -> Callable:
        kind_set = frozenset(kinds) if kinds else None
        _add(Rule(rule_id, severity, summary, fix, kind_set, scope, fn, needs_all_inputs, templates_only))
        fn.rule_id = rule_id  # type: ignore[attr-defined]
        return fn

    return wrap


def builtin(rule_id: str, severity: Severity, summary: str, fix: str) -> None:
    """Register an id reported by the parser or the schema engine."""
    _add(Rule(rule_id, severity, summary, fix, None, "builtin", None))


def load_rules() -> dict[str, Rule]:
    """Import every rule module ``kgen.lint.rules_*`` (registration happens at import) and return the
    registry."""
    import importlib
    import pkgutil

    lint_package = importlib.import_module("kgen.lint")  # kgen.lint as an attribute is kgen's lint function

    for info in sorted(pkgutil.iter_modules(lint_package.__path__), key=lambda m: m.name):
        if info.name.startswith("rules_"):
            importlib.import_module(f"kgen.lint.{info.name}")
    return RULES
