"""What the CLI and Python users call to render: ``build`` (values -> spec) and ``render`` (spec -> text).

Linting lives in ``kgen.lint.api`` (``lint_paths``, ``lint_text``, ``lint_documents``); ``render``
runs it on the documents it is about to print.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from kgen import presets as presets_mod
from kgen.errors import RenderError, UsageError
from kgen.findings import Finding
from kgen.layering import Layers
from kgen.resources import ENTRYPOINT_FILE, entrypoint_path
from kgen.spec import TrainingSpec, build_spec, parse_k8s_version
from kgen.versions import DEFAULT_K8S

ENTRYPOINT_PLACEHOLDER = "@kgen-entrypoint-source@"


class RenderRequest(NamedTuple):
    preset: str | None = None
    values_files: Sequence[str] = ()
    sets: Sequence[str] = ()
    flags: Mapping[str, str | None] | None = None  # values key -> flag value, e.g. {"nodes": "4"}
    env: Sequence[str] = ()  # KEY=VALUE from --env
    command: Sequence[str] = ()  # after "--"
    kubernetes_version: str | None = None
    output_format: str = "yaml"
    lint: bool = True


FLAG_NAMES = {
    "nodes": "--nodes",
    "gpus": "--gpus",
    "kind": "--kind",
    "name": "--name",
    "namespace": "--namespace",
    "image": "--image",
    "queue": "--queue",
    "cpu": "--cpu",
    "memory": "--memory",
}

# Values that describe what runs (the shape and the command). A request that sets any of them is
# not the smoke test, so it starts from the neutral built-in defaults, never from 2node-test.
SHAPE_KEYS = ("nodes", "gpus", "nprocPerNode", "command")


class RenderResult(NamedTuple):
    text: str
    warnings: list[Finding]  # the self-check's findings below error severity
    notes: list[str]  # what the manifest alone does not say (e.g. a Kueue queue suspends it)


def base_preset(request: RenderRequest) -> str | None:
    """The preset the values start from.

    --preset names it. Otherwise the 2node-test smoke test is the base only when nothing says
    what to run: no values file, no shape (--nodes, --gpus, --set nodes/gpus/nprocPerNode) and no
    command. `kgen render --nodes 4 --gpus 8` therefore starts from the built-in defaults (named
    kgen-train like every training preset) and carries nothing of the smoke test's identity.
    Placement flags (--name, --namespace, --image, --kind, --env, --set of other keys) keep it.
    """
    if request.preset:
        return request.preset
    if request.values_files or request.command:
        return None
    if any(v is not None for k, v in (request.flags or {}).items() if k in SHAPE_KEYS):
        return None
    set_keys = {a.split("=", 1)[0].strip() for a in request.sets}
    if set_keys & set(SHAPE_KEYS):
        return None
    return presets_mod.DEFAULT_PRESET


def build(request: RenderRequest) -> TrainingSpec:
    """Layer the values (defaults < preset < -f files < --set < flags) and build the spec."""
    minor = parse_k8s_version(request.kubernetes_version) if request.kubernetes_version else DEFAULT_K8S
    layers = Layers()
    name = base_preset(request)
    if name:
        preset = presets_mod.load(name)
        raw, typed = preset.mapping()
        layers.apply_mapping(raw, typed, f"preset {preset.name}")
    for path in request.values_files:
        layers.apply_file(path)
    for assignment in request.sets:
        layers.apply_set(assignment)
    for key, value in (request.flags or {}).items():
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


def render_documents(spec: TrainingSpec, entrypoint_source: str | None = None) -> list[dict]:
    """The parsed documents; ``entrypoint_source`` overrides the bundled script (golden tests)."""
    from kgen.templating import render_text
    from kgen.yamlio import parse_documents

    if entrypoint_source is None:
        entrypoint_source = entrypoint_path().read_text(encoding="utf-8")
    # The script is kgen's own file, not user input: it is placed into the parsed ConfigMap after
    # the re-parse, which saves quoting and re-parsing 50 KB (~7 ms) on every render.
    docs = parse_documents(render_text(spec, ENTRYPOINT_PLACEHOLDER))
    configmap = docs[0]
    if configmap["data"].get(ENTRYPOINT_FILE) != ENTRYPOINT_PLACEHOLDER:
        raise RenderError("the ConfigMap template lost the entrypoint placeholder")
    configmap["data"][ENTRYPOINT_FILE] = entrypoint_source
    if spec.v("patches"):
        from kgen.patching import apply_patches

        docs = apply_patches(docs, spec.v("patches"), spec.origins)
    return docs


def render(request: RenderRequest) -> str:
    """The manifest text kgen prints; raises KgenError (nothing printed) on any problem."""
    return render_with_warnings(request).text


def render_with_warnings(request: RenderRequest) -> RenderResult:
    """The manifest text and the self-check's warnings (``kgen render`` prints them on stderr)."""
    from kgen.yamlio import dump_json, dump_yaml

    if request.output_format not in ("yaml", "json"):
        raise UsageError(f'must be yaml or json, got "{request.output_format}"', option="--format")
    spec = build(request)
    docs = render_documents(spec)
    warnings = check_rendered(docs, spec) if request.lint else []
    text = dump_yaml(docs) if request.output_format == "yaml" else dump_json(docs)
    return RenderResult(text, warnings, render_notes(spec))


def render_notes(spec: TrainingSpec) -> list[str]:
    """What the user must know about the output that the manifest alone does not say."""
    notes = []
    queue = spec.v("queue")
    if queue and spec.suspended:
        what = "JobSet" if spec.is_jobset else "Job"
        notes.append(
            f"queue {queue}: the {what} is created suspended and starts only when Kueue admits it "
            f"from LocalQueue {queue!r}; on a cluster without Kueue it never starts"
        )
    elif queue:
        notes.append(
            f"queue {queue}: Kueue's webhook gates the StatefulSet's pods until it admits them (needs Kueue's "
            "pod and statefulset integrations); on a cluster without Kueue the StatefulSet starts at once, unqueued"
        )
    if spec.is_jobset:
        notes.append(
            "kind jobset: needs the JobSet controller (v0.10.0 or newer for onJobFailureMessagePatterns); "
            "JobSet creates the headless Service itself"
        )
    return notes


def check_rendered(docs: list[dict], spec: TrainingSpec) -> list[Finding]:
    """Run kgen lint (schema + rules) on the documents render is about to print.

    The documents are checked as parsed, not re-read from the printed text: the emitter writes a
    string plain only when YAML 1.1 (kubectl) and 1.2 read it back alike, and the string tests
    check that round trip through PyYAML for every hostile value.
    """
    from kgen.lint.api import LintOptions, lint_documents

    result = lint_documents(docs, "<render>", LintOptions(kubernetes_version=f"1.{spec.k8s.minor}"))
    errors = [f for f in result.findings if f.severity.value == "error"]
    if errors:
        first = errors[0]
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise RenderError(
            f"the rendered manifest fails {first.rule_id}: {first.message} "
            f"[{first.kind}/{first.name} {first.path}]{more}",
            hint="check the values named in that field" + (" and the patches" if spec.v("patches") else ""),
        )
    return [f for f in result.findings if f.severity.value != "error"]


def warning_line(finding: Finding) -> str:
    """One self-check finding as ``kgen render`` prints it on stderr (after "kgen: ")."""
    return (
        f"{finding.severity.value}: {finding.rule_id}: {finding.message} [{finding.kind}/{finding.name} {finding.path}]"
    )
