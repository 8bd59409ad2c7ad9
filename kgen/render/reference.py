"""The values reference (`kgen values`), generated from ``kgen.render.values.VALUES``.

The README's values table is this module's markdown output; a test keeps the two identical.
"""

from __future__ import annotations

import json
from typing import Any

from kgen.render.values import VALUES


def format_default(value: Any) -> str:
    """A default as it would be written in a values file (JSON flow style, valid YAML)."""
    if isinstance(value, str) and value and value.strip() == value and value[0] not in "[{\"'":
        return value
    return json.dumps(value)


def values_reference(fmt: str = "text") -> str:
    rows = [(key, kind, format_default(default), doc) for key, (kind, default, doc) in VALUES.items()]
    if fmt == "markdown":
        lines = ["| key | type | default | what it does |", "|---|---|---|---|"]
        lines += [f"| `{k}` | {t} | `{d}` | {doc} |" for k, t, d, doc in rows]
        return "\n".join(lines) + "\n"
    width = max(len(k) for k, *_ in rows)
    type_width = max(len(t) for _, t, *_ in rows)
    out = [
        "Values keys (a values file, -f; or --set KEY=VALUE). Nested keys are dotted: nccl.debug is",
        "`nccl: {debug: INFO}` in a file. Layering, later wins: built-in defaults < --preset < -f files",
        "< --set < flags. Kubernetes-form keys take what the Kubernetes API takes in that field.",
        "",
        f"{'KEY':<{width}}  {'TYPE':<{type_width}}  DEFAULT",
    ]
    for key, kind, default, doc in rows:
        out.append(f"{key:<{width}}  {kind:<{type_width}}  {default}")
        out.append(f"{'':<{width}}  {doc}")
    return "\n".join(out) + "\n"
