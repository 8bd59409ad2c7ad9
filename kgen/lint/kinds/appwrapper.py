"""AppWrapper (workload.codeflare.dev/v1beta2, Kueue/CodeFlare): ``spec.components[].template``
holds whole objects (a PyTorchJob, a Job, a JobSet ...), which are linted as objects of their own
(every rule, findings located inside the AppWrapper); Kueue admits the AppWrapper as a whole."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kgen.lint.kinds.base import Adapter, get, unknown_fields

SPEC_KEYS = {"components", "suspend", "managedBy"}
COMPONENT_KEYS = {"template", "annotations", "podSets", "podSetInfos", "declaredPodSets"}


class AppWrapperAdapter(Adapter):
    kind = "AppWrapper"
    groups = ("workload.codeflare.dev",)

    def embedded(self, doc: Any) -> list[tuple[tuple, dict]]:
        items = get(doc.data, "spec", "components")
        out = []
        for i, comp in enumerate(items if isinstance(items, list) else []):
            tpl = get(comp, "template")
            if isinstance(tpl, dict):
                out.append((("spec", "components", i, "template"), tpl))
        return out

    def structure(self, doc: Any, ctx: Any) -> Iterator[tuple[tuple, str]]:
        spec = doc.data.get("spec")
        if not isinstance(spec, dict):
            yield ("spec",), "spec must be a mapping with components"
            return
        yield from unknown_fields(spec, SPEC_KEYS, ("spec",), "unknown field spec.{key} (AppWrapper has {allowed})")
        comps = spec.get("components")
        if not isinstance(comps, list) or not comps:
            yield ("spec",), "components must be a non-empty list"
            return
        for i, comp in enumerate(comps):
            path = ("spec", "components", i)
            if not isinstance(comp, dict):
                yield path, "each component must be a mapping with a template"
                continue
            yield from unknown_fields(comp, COMPONENT_KEYS, path, "unknown field {key!r} in a component")
            tpl = comp.get("template")
            if not isinstance(tpl, dict) or not tpl.get("apiVersion") or not tpl.get("kind"):
                yield (
                    path + ("template",),
                    "a component's template must be a Kubernetes object (apiVersion, kind, spec)",
                )


ADAPTERS = [AppWrapperAdapter()]
