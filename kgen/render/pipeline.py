"""The render pipeline, top to bottom: the request (kgen.render.request) -> the values, layered
(kgen.render.layering: defaults < preset < -f files < --set < flags) -> checked (kgen.render.validate) and
derived into the spec (kgen.render.spec) -> the objects (kgen.render.templating, then re-parsed) ->
the patches (kgen.render.patching) -> the self-check (kgen.render.selfcheck) -> the text (kgen.yamlio).

``build`` (values -> spec), ``render_documents`` (spec -> documents), ``render_checked`` (both, and the
self-check) and ``render_with_warnings`` (the text and what is said about it) are what kgen.sdk calls;
``manifest_text`` is kgen 0.1's ``kgen.api.render``.
"""

from __future__ import annotations

import base64
from typing import NamedTuple

from kgen.errors import RenderError, UsageError
from kgen.findings import Finding
from kgen.render import presets as presets_mod
from kgen.render.layering import Layers
from kgen.render.request import FLAG_NAMES, SHAPE_KEYS, RenderRequest, RenderResult, base_preset
from kgen.render.selfcheck import (
    check_rendered,
    render_cautions,
    render_notes,
    self_check_hint,
    warning_line,
)
from kgen.render.spec import TrainingSpec, build_spec
from kgen.render.validate import parse_k8s_version
from kgen.resources import ENTRYPOINT_FILE, pod_entrypoint_zip_path
from kgen.versions import DEFAULT_K8S

__all__ = [  # the stages' names kgen.api re-exports
    "FLAG_NAMES",
    "SHAPE_KEYS",
    "RenderRequest",
    "RenderResult",
    "base_preset",
    "check_rendered",
    "render_cautions",
    "render_notes",
    "self_check_hint",
    "warning_line",
]

ENTRYPOINT_PLACEHOLDER = "@kgen-entrypoint-source@"


def build(request: RenderRequest) -> TrainingSpec:
    """Layer the values (defaults < preset < -f files < --set < flags) and build the spec."""
    kubernetes_version = request.kubernetes_version
    minor = parse_k8s_version(kubernetes_version) if kubernetes_version is not None else DEFAULT_K8S
    if request.preset is not None and not request.preset.strip():
        raise UsageError("needs a preset name", option="--preset", hint="e.g. --preset 4x8; `kgen presets list`")
    layers = Layers()
    name = base_preset(request)
    if name:
        preset = presets_mod.load(name)
        raw, typed = preset.mapping()
        layers.apply_mapping(raw, typed, f"preset {preset.name}")
    if list(request.values_files).count("-") > 1:
        raise UsageError("stdin can be read once", option="-f -", hint="give -f - once")
    for path in request.values_files:
        if path == "-":
            if request.stdin is None:
                raise UsageError(
                    "this command does not read values from stdin",
                    option="-f -",
                    hint="save them to a file and pass -f FILE",  # Python callers: RenderRequest.stdin
                )
            layers.apply_text(request.stdin, "<stdin>")
        else:
            layers.apply_file(path)
    for assignment in request.sets:
        layers.apply_set(assignment)
    for key, value in request.flag_values().items():
        if value is not None:
            layers.apply_flag(key, value, FLAG_NAMES[key])
    env: dict[str, str] = {}
    for item in request.env:
        if "=" not in item or not item.split("=", 1)[0]:
            raise UsageError(
                f'expected KEY=VALUE, got "{item}"', option="--env", hint="for example --env NCCL_DEBUG_SUBSYS=INIT"
            )
        key, value = item.split("=", 1)
        env[key] = value
    if env:
        layers.apply("env", env, "--env")
    if request.command:
        layers.apply("command", list(request.command), "-- COMMAND")
    values, origins = layers.result()
    return build_spec(values, origins, minor)


def render_documents(spec: TrainingSpec, entrypoint_source: bytes | None = None) -> list[dict]:
    """The parsed documents; ``entrypoint_source`` overrides the bundled script's zipped pod copy (golden tests)."""
    from kgen.render.templating import render_text

    if spec.kind == "slurm":
        raise UsageError("renders an sbatch script, not Kubernetes objects (kgen.render.slurmkind)", option="--kind")
    from kgen.yamlio import parse_documents

    if entrypoint_source is None:
        try:
            entrypoint_source = pod_entrypoint_zip_path().read_bytes()
        except OSError as exc:
            raise RenderError(f"cannot read kgen's pod entrypoint ({exc.strerror}): reinstall kgen") from None
    # The script is kgen's own file, not user input: it is placed into the parsed ConfigMap after
    # the re-parse, which saves quoting and re-parsing it on every render.
    docs = parse_documents(render_text(spec, ENTRYPOINT_PLACEHOLDER))
    configmap = docs[0]
    if (configmap.get("binaryData") or {}).get(ENTRYPOINT_FILE) != ENTRYPOINT_PLACEHOLDER:
        raise RenderError("the ConfigMap template lost the entrypoint placeholder")
    configmap["binaryData"][ENTRYPOINT_FILE] = base64.b64encode(entrypoint_source).decode("ascii")
    if spec.patches:
        from kgen.render.patching import apply_patches

        docs = apply_patches(docs, spec.patches)
    return docs


def manifest_text(request: RenderRequest) -> str:
    """The manifest text kgen prints; raises KgenError (nothing printed) on any problem."""
    return render_with_warnings(request).text


class Checked(NamedTuple):
    """The rendered documents (or, for kind slurm, the sbatch ``script``) after the self-check, with what the CLI
    says about them on stderr."""

    spec: TrainingSpec
    docs: list[dict]
    warnings: list[Finding]
    notes: list[str]
    cautions: list[str]
    script: str = ""  # kind slurm: the sbatch script (docs is empty)


def stderr_lines(result: Checked | RenderResult) -> list[str]:
    """What ``kgen render`` and ``kgen submit`` print on stderr about the manifest, each after "kgen: "."""
    return (
        [f"note: {n}" for n in result.notes]
        + [f"warning: {c}" for c in result.cautions]
        + [warning_line(f) for f in result.warnings]
    )


def render_checked(request: RenderRequest) -> Checked:
    """Build, render and self-check (unless ``request.lint`` is off): the one path of render and submit."""
    spec = build(request)
    if spec.kind == "slurm":
        return _slurm_checked(request, spec)
    docs = render_documents(spec)
    warnings = check_rendered(docs, spec) if request.lint else []
    return Checked(spec, docs, warnings, render_notes(spec), render_cautions(spec))


def _slurm_checked(request: RenderRequest, spec: TrainingSpec) -> Checked:
    """Kind slurm: the sbatch script (kgen.render.slurmkind), self-checked by kgen lint's sbatch rules."""
    from kgen.render import slurmkind

    if request.kubernetes_version is not None:
        raise UsageError(
            "is for Kubernetes manifests; --kind slurm renders an sbatch script", option="--kubernetes-version"
        )
    if request.output_format == "json":
        raise UsageError(
            "--kind slurm prints an sbatch script, not Kubernetes objects", option="-o/--output", hint="drop -o json"
        )
    script = slurmkind.render_script(spec)
    warnings = check_script(script, spec) if request.lint else []
    return Checked(spec, [], warnings, [], slurmkind.cautions(spec), script)


def check_script(script: str, spec: TrainingSpec) -> list[Finding]:
    """kgen lint's sbatch rules on the script render is about to print: an error stops it, warnings are shown."""
    from kgen.lint.sbatch import lint_script

    findings = lint_script(script, "<render>")
    errors = [f for f in findings if f.severity.value == "error"]
    if errors:
        first = errors[0]
        raise RenderError(
            f"the rendered sbatch script fails {first.rule_id}: {first.message} (line {first.line})",
            hint="check slurm.directives and the command",
        )
    return [f for f in findings if f.severity.value == "warning"]


def render_with_warnings(request: RenderRequest) -> RenderResult:
    """The manifest text and the self-check's warnings (``kgen render`` prints them on stderr)."""
    from kgen.yamlio import dump_json, dump_yaml

    if request.output_format not in ("yaml", "json"):
        raise UsageError(f'must be an output format, yaml or json; got "{request.output_format}"', option="-o/--output")
    checked = render_checked(request)
    if checked.spec.kind == "slurm":
        return RenderResult(checked.script, checked.warnings, checked.notes, checked.cautions, [])
    docs = checked.docs
    text = dump_yaml(docs) if request.output_format == "yaml" else dump_json(docs)
    return RenderResult(text, checked.warnings, checked.notes, checked.cautions, docs)
