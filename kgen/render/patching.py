"""Stage 5 of render, the `patches:` escape hatch: JSON merge patches (RFC 7396) on the rendered objects.

A patch is applied to every rendered object whose kind (any case) and, if given, name match its
target, after the templates are rendered and parsed and before kgen's lint self-check, so a
patched manifest is checked like everything else. Two target kinds name a role instead, so that one
values file works with every --kind: ``Workload`` (the Job, StatefulSet or JobSet) and ``PodTemplate``
(that workload's pod template: spec.template, or the JobSet's replicated Job's).

Merge rules, as RFC 7396 with one addition borrowed from Kubernetes' strategic merge patch:

- a mapping merges key by key; ``null`` removes a key; a scalar replaces;
- a list replaces the list, except when the patch list and the existing list both hold only
  mappings with a ``name`` (containers, env, volumes, volumeMounts, ports, initContainers ...):
  then items merge by name, new names are appended, and ``{name: x, $patch: delete}`` removes one.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from kgen.errors import UsageError
from kgen.render.validate import Patch, reserved_label

DELETE = "$patch"


def _named(items: Any) -> bool:
    return isinstance(items, list) and bool(items) and all(isinstance(i, dict) and "name" in i for i in items)


def merge_patch(target: Any, patch: Any) -> Any:
    """The result of applying ``patch`` to ``target`` (neither is modified)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif _named(value) and _named(out.get(key)):
            out[key] = _merge_named(out[key], value)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def _merge_named(items: list[dict], patch: list[dict]) -> list[dict]:
    out = [dict(i) for i in items]
    for item in patch:
        index = next((n for n, cur in enumerate(out) if cur["name"] == item["name"]), None)
        if item.get(DELETE) == "delete":
            if index is not None:
                del out[index]
            continue
        change = {k: v for k, v in item.items() if k != DELETE}
        if index is None:
            out.append(merge_patch({}, change))
        else:
            out[index] = merge_patch(out[index], change)
    return out


# Targets that name a role instead of a kind, so one values file patches every --kind alike.
WORKLOAD = "workload"  # the Job, StatefulSet or JobSet itself
POD_TEMPLATE = "podtemplate"  # the workload's pod template, wherever the kind keeps it
WORKLOAD_KINDS = ("Job", "StatefulSet", "JobSet")


def pod_template_path(doc: dict) -> tuple[str | int, ...]:
    """Where a workload keeps its pod template: spec.template (Job, StatefulSet), or the replicated Job's
    (JobSet: spec.replicatedJobs[0].template.spec.template; kgen renders one replicated Job)."""
    if doc.get("kind") == "JobSet":
        return ("spec", "replicatedJobs", 0, "template", "spec", "template")
    return ("spec", "template")


def _at(doc: Any, path: tuple[str | int, ...]) -> Any:
    for key in path:
        doc = doc[key]
    return doc


def _put(doc: dict, path: tuple[str | int, ...], value: Any) -> dict:
    """A copy of ``doc`` with ``value`` at ``path`` (the containers on the way copied, not the rest)."""
    out = copy.copy(doc)
    cur: Any = out
    for key in path[:-1]:
        cur[key] = copy.copy(cur[key])
        cur = cur[key]
    cur[path[-1]] = value
    return out


def apply_patches(docs: list[dict], patches: Sequence[Patch]) -> list[dict]:
    """Apply each patch to the documents it targets; a patch that matches nothing is an error (naming the
    patch by its origin, ``Patch.origin``).

    ``kind: Workload`` targets the Job, StatefulSet or JobSet, ``kind: PodTemplate`` its pod template,
    whatever --kind rendered; any other kind is matched against the rendered objects' kinds (any case)."""
    for item in patches:
        kind, name = item.kind.lower(), item.name
        role = kind in (WORKLOAD, POD_TEMPLATE)
        hits = [
            n
            for n, doc in enumerate(docs)
            if (doc.get("kind") in WORKLOAD_KINDS if role else str(doc.get("kind", "")).lower() == kind)
            and (name is None or doc["metadata"].get("name") == name)
        ]
        if not hits:
            rendered = ", ".join(f"{d['kind']}/{d['metadata'].get('name')}" for d in docs)
            wanted = item.kind + (f"/{name}" if name is not None else "")
            if not role:
                rendered += "; kind Workload or PodTemplate targets the workload whatever its kind"
            raise UsageError(
                f"target {wanted} matches no rendered object (rendered: {rendered})",
                option=item.origin,
                hint="fix target.kind or target.name",
            )
        for n in hits:
            if kind == POD_TEMPLATE:
                path = pod_template_path(docs[n])
                patched = _put(docs[n], path, merge_patch(_at(docs[n], path), item.patch))
                template_labels = _changed_reserved_label(
                    {"metadata": _at(docs[n], path).get("metadata")}, {"metadata": _at(patched, path).get("metadata")}
                )
                if template_labels:
                    raise UsageError(
                        f"patch: changes label {template_labels[0]} of the pod template, which is set by "
                        f"{template_labels[1]}",
                        option=item.origin,
                        hint="patch other labels",
                    )
            else:
                patched = merge_patch(docs[n], item.patch)
            what = f"{docs[n]['kind']}/{docs[n]['metadata'].get('name')}"
            lost = [path for path in KEPT_PATHS if _has(docs[n], path) and not _has(patched, path)]
            if lost:
                raise UsageError(
                    f"patch: removes {lost[0]} of {what}, which the object needs",
                    option=item.origin,
                    hint="a patch may change these fields, not delete them: null deletes a key in a merge patch",
                )
            raised = _privileged(patched)
            if raised and not _privileged(docs[n]):
                raise UsageError(
                    f"patch: makes {raised} of {what} privileged; kgen never renders a privileged container",
                    option=item.origin,
                    hint="rdma: true adds the IPC_LOCK capability RDMA needs; a device plugin gives devices",
                )
            changed = _changed_reserved_label(docs[n], patched)
            if changed:
                raise UsageError(
                    f"patch: changes label {changed[0]} of {what}, which is set by {changed[1]}",
                    option=item.origin,
                    hint="patch other labels",
                )
            docs[n] = patched
    return docs


def _privileged(doc: dict) -> str:
    """The first container (or init container) of the object's pod template that runs privileged, or ""."""
    try:
        spec = _at(doc, pod_template_path(doc)).get("spec") or {}
    except (KeyError, IndexError, TypeError, AttributeError):
        return ""
    for field in ("initContainers", "containers", "ephemeralContainers"):
        for c in spec.get(field) or []:
            if isinstance(c, dict) and ((c.get("securityContext") or {}).get("privileged") is True):
                return f"{field[:-1]} {c.get('name')}"
    return ""


LABEL_PATHS = ("metadata", "spec.template.metadata")


def _changed_reserved_label(before: dict, after: dict) -> tuple[str, str] | None:
    """(key, what sets it) of a reserved label (kgen.render.validate.reserved_label) the patch changed or deleted."""
    for path in LABEL_PATHS:
        old, new = _get(before, f"{path}.labels"), _get(after, f"{path}.labels")
        if not isinstance(old, dict):
            continue
        new = new if isinstance(new, dict) else {}
        for key, value in old.items():
            owner = reserved_label(key)
            if owner and new.get(key) != value:
                return key, owner
    return None


def _get(doc: Any, path: str) -> Any:
    for key in path.split("."):
        if not isinstance(doc, dict):
            return None
        doc = doc.get(key)
    return doc


# Structure a rendered object cannot lose (a merge patch deletes a key with null): the API server
# rejects a Job without spec.template, and a workload without containers or selector never runs.
KEPT_PATHS = (
    "metadata.name",
    "spec",
    "spec.selector",
    "spec.template",
    "spec.template.spec",
    "spec.template.spec.containers",
    "spec.replicatedJobs",
    "spec.ports",
    "data",
    "binaryData",
)


def _has(doc: Any, path: str) -> bool:
    """Whether ``path`` (dotted keys) holds a non-empty value in ``doc``."""
    for key in path.split("."):
        if not isinstance(doc, dict) or doc.get(key) in (None, {}, []):
            return False
        doc = doc[key]
    return True
