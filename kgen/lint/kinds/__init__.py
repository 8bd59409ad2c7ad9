"""Adapters: one module per kind of workload lint reads, each turning an object into the same views.

An adapter says, for one object, which pod templates it creates pods from (with how many pods per
template), and what the controller does around them: the DNS names pods get and who makes the
Service, the environment it injects (``MASTER_ADDR``, ``PET_NNODES`` ...), the node-rank sources
the pods have, whether the workload runs to completion, how it restarts, and its own structural
checks (written from the kind's API reference). The training rules read only these views
(``kgen.lint.model``), so a rule is written once for every kind.

Adapters match on API group *and* kind: a ``kind: JobSet`` of another group is not a JobSet.
"""

from __future__ import annotations

from typing import Any

from kgen.lint.kinds.base import Adapter, Facts, Template

_ADAPTERS: dict[tuple[str, str], Adapter] | None = None


def _registry() -> dict[tuple[str, str], Adapter]:
    global _ADAPTERS
    if _ADAPTERS is None:
        from kgen.lint.kinds import appwrapper, builtin, jobset, lws, mpijob, pytorchjob, trainer, volcano

        table: dict[tuple[str, str], Adapter] = {}
        for module in (builtin, jobset, pytorchjob, mpijob, trainer, volcano, lws, appwrapper):
            for adapter in module.ADAPTERS:
                for group in adapter.groups:
                    table[(group, adapter.kind)] = adapter
        _ADAPTERS = table
    return _ADAPTERS


def group_of(api_version: str) -> str:
    return api_version.rsplit("/", 1)[0] if "/" in api_version else ""


def adapter_for(doc: Any) -> Adapter | None:
    """The adapter of a document's (API group, kind), or None."""
    return _registry().get((group_of(doc.api_version), doc.kind))


def templates(doc: Any) -> list[Template]:
    """Every pod template of ``doc`` (memoized per document)."""
    memo = doc.memo
    if "kg_templates" not in memo:
        adapter = adapter_for(doc)
        found: list[Template] = []
        if adapter is not None and isinstance(doc.data, dict):
            try:
                found = adapter.templates(doc)
            except (TypeError, AttributeError, KeyError, IndexError, ValueError):
                found = []  # a field of the wrong type: the structure/schema finding says so
        memo["kg_templates"] = found
    return memo["kg_templates"]


def facts(doc: Any) -> Facts | None:
    memo = doc.memo
    if "kg_facts" not in memo:
        adapter = adapter_for(doc)
        value = None
        if adapter is not None and isinstance(doc.data, dict):
            try:
                value = adapter.facts(doc)
            except (TypeError, AttributeError, KeyError, IndexError, ValueError):
                value = None
        memo["kg_facts"] = value
    return memo["kg_facts"]


def pod_templates(doc: Any) -> list[tuple[dict, tuple]]:
    """Every pod template of ``doc`` with its path, for every kind lint has an adapter for (JobSet
    replicatedJobs, PyTorchJob replicas, Volcano tasks, LWS leader/worker ...); a Pod is its own
    template at ()."""
    return [(t.template, t.path) for t in templates(doc) if t.containers is None]


def pod_specs(doc: Any) -> list[tuple[dict, tuple]]:
    """(pod spec, its path) of every pod template of ``doc`` (once per document: every pod rule
    asks; do not change the list)."""
    memo = doc.memo
    if "pod_specs" not in memo:
        out = []
        for tpl, path in pod_templates(doc):
            spec = tpl.get("spec")
            if isinstance(spec, dict):
                out.append((spec, path + ("spec",)))
        memo["pod_specs"] = out
    return memo["pod_specs"]


__all__ = [
    "Adapter",
    "Facts",
    "Template",
    "adapter_for",
    "facts",
    "group_of",
    "pod_specs",
    "pod_templates",
    "templates",
]
