"""What the CLI and Python users call to render: ``build`` (values -> spec) and ``render`` (spec -> text).

Linting lives in ``kgen.lint.api`` (``lint_paths``, ``lint_text``, ``lint_documents``); ``render``
runs it on the documents it is about to print.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from kgen.errors import RenderError, UsageError
from kgen.findings import Finding
from kgen.render import presets as presets_mod
from kgen.render.layering import Layers
from kgen.render.spec import TrainingSpec, build_spec, parse_k8s_version
from kgen.resources import ENTRYPOINT_FILE, entrypoint_path
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
    stdin: str | None = None  # the text of `-f -` (the CLI reads stdin; None = not read)


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
    cautions: list[str] = []  # values that render but likely do not do what was meant (printed as warnings)


def base_preset(request: RenderRequest) -> str | None:
    """The preset the values start from.

    --preset names it. Otherwise the 2node-test smoke test is the base only when nothing says
    what to run: no values file, no shape (--nodes, --gpus, --set nodes/gpus/nprocPerNode) and no
    command. `kgen render --nodes 4 --gpus 8` therefore starts from the built-in defaults (named
    kgen-train like every training preset) and carries nothing of the smoke test's identity.
    Placement flags (--name, --namespace, --image, --kind, --env, --set of other keys) keep it.
    """
    if request.preset is not None:
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
    spec = build_spec(values, origins, minor)
    if spec.renders_secret:  # the one input that is not in the values: the user's kgen key (a file)
        from kgen.render.runsecret import secret_data

        spec = spec._replace(run_secret_data=secret_data(spec.namespace, spec.name))
    return spec


def render_documents(spec: TrainingSpec, entrypoint_source: str | None = None) -> list[dict]:
    """The parsed documents; ``entrypoint_source`` overrides the bundled script (golden tests)."""
    from kgen.render.templating import render_text
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
        from kgen.render.patching import apply_patches

        docs = apply_patches(docs, spec.v("patches"), spec.origins)
    return docs


def render(request: RenderRequest) -> str:
    """The manifest text kgen prints; raises KgenError (nothing printed) on any problem."""
    return render_with_warnings(request).text


class Checked(NamedTuple):
    """The rendered documents after the self-check, with what the CLI says about them on stderr."""

    spec: TrainingSpec
    docs: list[dict]
    warnings: list[Finding]
    notes: list[str]
    cautions: list[str]


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
    docs = render_documents(spec)
    warnings = check_rendered(docs, spec) if request.lint else []
    return Checked(spec, docs, warnings, render_notes(spec), render_cautions(spec))


def render_with_warnings(request: RenderRequest) -> RenderResult:
    """The manifest text and the self-check's warnings (``kgen render`` prints them on stderr)."""
    from kgen.yamlio import dump_json, dump_yaml

    if request.output_format not in ("yaml", "json"):
        raise UsageError(f'must be yaml or json, got "{request.output_format}"', option="--format")
    checked = render_checked(request)
    docs = checked.docs
    text = dump_yaml(docs) if request.output_format == "yaml" else dump_json(docs)
    return RenderResult(text, checked.warnings, checked.notes, checked.cautions)


# Keys the chosen kind does not render: (key, kinds that use it, why).
KIND_ONLY_KEYS = (
    ("activeDeadlineSeconds", ("job", "jobset"), "a StatefulSet has no deadline"),
    ("ttlSecondsAfterFinished", ("job", "jobset"), "a StatefulSet never finishes"),
    ("jobset.maxRestarts", ("jobset",), "the Job or StatefulSet restarts the group itself"),
    (
        "reform.maxReformations",
        ("job", "statefulset"),
        "a JobSet restarts its whole group instead, see jobset.maxRestarts",
    ),
    (
        "reform.replacementTimeout",
        ("job", "statefulset"),
        "a JobSet restarts its whole group instead, see jobset.maxRestarts",
    ),
)


def render_cautions(spec: TrainingSpec) -> list[str]:
    """Values that render but do nothing, or likely not what was meant: keys the kind ignores (set by
    the user, not the defaults), and a memory limit that /dev/shm alone can fill."""
    from kgen.lint.k8s import parse_quantity

    out = []
    for key, kinds, why in KIND_ONLY_KEYS:
        origin = spec.origins.get(key, "default")
        if origin != "default" and spec.kind not in kinds:
            where = origin if origin.endswith(key) else f"{origin} ({key})"
            out.append(f"{where}: has no effect with kind {spec.kind}: {why}")
    resources = spec.resources or {}
    limit = resources.get("limits", {}).get("memory")
    request = resources.get("requests", {}).get("memory")
    shm = spec.v("shmSize")
    shm_bytes = parse_quantity(shm)
    if spec.shm_volume and shm_bytes is not None:
        if limit is not None and (limit_bytes := parse_quantity(str(limit))) is not None and limit_bytes <= shm_bytes:
            out.append(
                f"memory limit {limit} <= shmSize {shm}: what the processes write to the memory-backed /dev/shm "
                "counts against the memory limit, so the pod can be OOM-killed before /dev/shm is full; "
                "raise memory above shmSize plus the processes' own use, or lower shmSize"
            )
        elif limit is None and request is not None and (req := parse_quantity(str(request))) is not None:
            # a sizeLimit caps /dev/shm, it reserves nothing: only a user's own shmSize/memory choice is
            # questioned here, not kgen's defaults or a preset's (e.g. a CPU job's 2Gi with the default 16Gi cap)
            chosen = any(
                not spec.origins.get(k, "default").startswith(("default", "preset ")) for k in ("shmSize", "memory")
            )
            if chosen and req < shm_bytes:
                out.append(
                    f"shmSize {shm} is above the memory request {request}: /dev/shm is memory of the node, "
                    "and a pod using far more than it requested is the first evicted under memory pressure; "
                    "raise memory above shmSize plus the processes' own use, or lower shmSize"
                )
    return out


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
    if spec.v("hostNetwork") and spec.v("networkPolicy.enabled"):
        notes.append(
            "hostNetwork: NetworkPolicies do not apply to host-network pods, so none is rendered; fence the "
            "rendezvous and liveness ports on the nodes (a host firewall; README, Security)"
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
            hint=self_check_hint(first, spec),
        )
    return [f for f in result.findings if f.severity.value == "warning"]  # info (e.g. KG011 for a CRD) stays quiet


# Pass-through values keys, by the field of the rendered manifest they land in (the last match wins).
FIELD_KEYS = (
    ("tolerations", "tolerations"),
    ("nodeSelector", "nodeSelector"),
    ("affinity", "affinity"),
    ("topologySpreadConstraints", "topologySpreadConstraints"),
    ("initContainers", "initContainers"),
    ("volumes", "volumes"),
    ("volumeMounts", "volumeMounts"),
    ("envFrom", "envFrom"),
    ("imagePullSecrets", "imagePullSecrets"),
    ("spec.securityContext", "podSecurityContext"),
    ("labels", "labels"),
    ("annotations", "annotations"),
    ("ingress", "networkPolicy.extraIngress"),
)


def self_check_hint(finding: Finding, spec: TrainingSpec) -> str:
    """Point a self-check error back at the values: the layer that set the field's key, and for a
    YAML 1.1 boolean or number where the API wants a string (`value: yes`), "quote it"."""
    key = None
    for field, values_key in FIELD_KEYS:
        if f".{field}" in f".{finding.path}":
            key = values_key
    if key is not None and key == "volumeMounts" and "initContainers" in finding.path:
        key = "initContainers"
    origin = spec.origins.get(key, "default") if key else "default"
    where = (origin if origin.endswith(key or "") else f"{origin} ({key})") if key and origin != "default" else ""
    typed = re.search(r"expected string, got (boolean|integer|number)", finding.message)
    if typed:
        fix = "quote it in the values (YAML reads yes/no/on/off/true and numbers unquoted as non-strings)"
        return f"{where}: {fix}" if where else fix
    if where:
        return f"check {where}" + (" and the patches" if spec.v("patches") else "")
    return "check the values named in that field" + (" and the patches" if spec.v("patches") else "")


def warning_line(finding: Finding) -> str:
    """One self-check finding as ``kgen render`` prints it on stderr (after "kgen: ")."""
    return (
        f"{finding.severity.value}: {finding.rule_id}: {finding.message} [{finding.kind}/{finding.name} {finding.path}]"
    )
