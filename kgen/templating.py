"""The Jinja2 environment: strict undefined, and every interpolation quoted in one place.

``{{ value }}`` always emits a JSON scalar or a JSON flow collection, which is valid YAML: a
user string can never open a new key, document or block, whatever it contains. Templates cannot
read the environment, files or the clock: they only see the spec.
"""

from __future__ import annotations

import json
from typing import Any

import jinja2

from kgen.resources import templates_dir
from kgen.spec import TrainingSpec


def quote(value: Any) -> str:
    if isinstance(value, jinja2.Undefined):  # pragma: no cover - StrictUndefined raises first
        raise jinja2.UndefinedError("undefined value in template")
    if isinstance(value, bool) or value is None or isinstance(value, (int, float, str, list, dict, tuple)):
        return json.dumps(value, ensure_ascii=False)
    raise TypeError(f"template value of type {type(value).__name__} cannot be placed in YAML")


_ENV: jinja2.Environment | None = None


def environment() -> jinja2.Environment:
    global _ENV
    if _ENV is None:
        _ENV = jinja2.Environment(
            loader=jinja2.FileSystemLoader(str(templates_dir())),
            undefined=jinja2.StrictUndefined,
            finalize=quote,
            autoescape=False,
            keep_trailing_newline=True,
            trim_blocks=True,
            lstrip_blocks=True,
        )
    return _ENV


def template_names(spec: TrainingSpec) -> list[str]:
    workload = "job.yaml.j2" if spec.is_job else "statefulset.yaml.j2"
    return ["configmap.yaml.j2", "service.yaml.j2", workload]


def render_text(spec: TrainingSpec, entrypoint_source: str) -> str:
    """Render the templates in a fixed order into one multi-document YAML text."""
    env = environment()
    docs = []
    for name in template_names(spec):
        docs.append(env.get_template(name).render(spec=spec, entrypoint_source=entrypoint_source))
    return "---\n".join(docs)
