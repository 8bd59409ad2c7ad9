"""Stage 0 of render, the request: what the caller asked for (a preset, values files, --set, flags, a
command), and which preset the values start from. kgen.render.pipeline runs the stages on it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kgen.errors import UsageError
from kgen.findings import Finding

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
    "hang.timeout": "--hang-timeout",
    "health.gate": "--health-gate",
}

# Values that describe what runs (the shape and the command). A request that sets any of them is
# not the smoke test, so it starts from the neutral built-in defaults, never from 2node-test.
SHAPE_KEYS = ("nodes", "gpus", "nprocPerNode", "command")


@dataclass(frozen=True)
class RenderRequest:
    """What to render, as `kgen render` takes it. Every field is optional: the 2node-test smoke test is what
    an empty request renders (``base_preset``).

    The flags (``nodes`` ... ``memory``) layer over everything else, like --nodes, --gpus ...; an int is
    taken as its decimal text, and text is checked as on the command line (``nodes="x"``: "--nodes: must
    be an integer"). ``flags`` is kgen 0.1's spelling of them (values key -> text); the fields win.

    Every field is checked when the request is made, with the CLI's messages (UsageError, naming the option
    or, for a wrong Python type, the field). A ``str`` where a sequence goes is read as the CLI would read
    it: ``command="train.py --lr 3e-4"`` is split as a values file's ``command:`` string is (shell words,
    no shell operators); ``values_files="prod.yaml"`` is one file, ``sets="nodes=4"`` one --set,
    ``env="K=V"`` one --env. Values files are read by ``render``, not here."""

    preset: str | None = None
    values_files: Sequence[str] = ()  # "-" reads ``stdin`` (the caller reads it: the text, or None)
    sets: Sequence[str] = ()  # KEY=VALUE, as --set
    nodes: int | str | None = None
    gpus: int | str | None = None
    kind: str | None = None  # job | statefulset | jobset
    name: str | None = None
    namespace: str | None = None
    image: str | None = None
    queue: str | None = None
    cpu: int | str | None = None
    memory: str | None = None
    hang_timeout: int | str | None = None  # values hang.timeout (--hang-timeout)
    health_gate: str | None = None  # values health.gate (--health-gate)
    env: Sequence[str] = ()  # KEY=VALUE from --env
    command: Sequence[str] = ()  # after "--"
    kubernetes_version: str | None = None
    output_format: str = "yaml"  # yaml | json
    lint: bool = True  # the self-check (kgen lint on the output)
    stdin: str | None = None  # the text of `-f -` (the CLI reads stdin; None = not read)
    flags: Mapping[str, str | None] | None = None

    def __post_init__(self) -> None:
        check_render_request(self)

    def flag_values(self) -> dict[str, str | None]:
        """The flags as the values layering takes them: values key -> text, in --help's order."""
        out = dict(self.flags or {})
        for key in FLAG_NAMES:
            value = getattr(self, key.replace(".", "_"))
            if value is not None:
                out[key] = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
        return out


QUOTE_NUMBERS = '; quote numbers: ["--lr", "3e-4"]'
_SEQUENCES = {"values_files": "-f/--values", "sets": "--set", "env": "--env", "command": "-- COMMAND"}


def _field_error(name: str, expected: str, value: Any) -> UsageError:
    """A Python caller's wrong type: named by the field (the CLI never passes one)."""
    shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
    return UsageError(f"must be {expected}, got {type(value).__name__} {shown}", option=f"RenderRequest.{name}")


def _strings(request: RenderRequest, name: str) -> tuple[str, ...]:
    """A sequence field as a tuple of strings; one ``str`` is one item (``command``: split like a shell)."""
    value = getattr(request, name)
    if isinstance(value, (str, os.PathLike)) and name == "values_files":
        value = [os.fspath(value)]
    elif isinstance(value, str) and name == "command":
        from kgen.render.layering import split_command

        value = split_command(value, f"RenderRequest.{name}") if value.strip() else []
    elif isinstance(value, str):
        value = [value]
    if isinstance(value, (bytes, Mapping)) or not isinstance(value, (Sequence, set, frozenset)):
        raise _field_error(name, "a list of strings", value)
    out = []
    for i, item in enumerate(value):
        if isinstance(item, os.PathLike) and name == "values_files":
            item = os.fspath(item)
        if not isinstance(item, str):
            raise UsageError(
                f"item {i} must be a string, got {type(item).__name__} {item!r}",
                option=f"RenderRequest.{name}",
                hint=f"{_SEQUENCES[name]} takes text" + (QUOTE_NUMBERS if name == "command" else ""),
            )
        out.append(item)
    return tuple(out)


def check_render_request(request: RenderRequest) -> None:
    """``RenderRequest``'s checks (and its sequences made tuples): what the CLI checks before render reads a
    file. What depends on the layered values (a name too long for the node count, a --set key's value against
    the preset's) is checked by render, with the same messages."""
    set_field = object.__setattr__  # the request is frozen: the normalized values replace what was passed
    for name in _SEQUENCES:
        set_field(request, name, _strings(request, name))
    for name in ("preset", "kind", "name", "namespace", "image", "queue", "memory", "kubernetes_version", "stdin"):
        value = getattr(request, name)
        if value is not None and not isinstance(value, str):
            raise _field_error(name, "a string or None", value)
    for name in ("nodes", "gpus", "cpu"):
        value = getattr(request, name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, str))):
            raise _field_error(name, "an int, a string or None", value)
    if not isinstance(request.lint, bool):
        raise _field_error("lint", "True or False", request.lint)
    if not isinstance(request.output_format, str):
        raise _field_error("output_format", '"yaml" or "json"', request.output_format)
    if request.output_format not in ("yaml", "json"):
        raise UsageError(f'must be an output format, yaml or json; got "{request.output_format}"', option="-o/--output")
    if request.flags is not None:
        if not isinstance(request.flags, Mapping):
            raise _field_error("flags", "a mapping of values key -> text", request.flags)
        for key, value in request.flags.items():
            if key not in FLAG_NAMES:
                raise UsageError(
                    f"unknown flag key {key!r}", option="RenderRequest.flags", hint=f"one of {', '.join(FLAG_NAMES)}"
                )
            if value is not None and not isinstance(value, str):
                raise _field_error(f"flags[{key!r}]", "a string or None", value)
    if request.preset is not None and not request.preset.strip():
        raise UsageError("needs a preset name", option="--preset", hint="e.g. --preset 4x8; `kgen presets list`")
    if request.preset is not None:
        from kgen.render import presets as presets_mod

        presets_mod.load(request.preset)  # an unknown name: UsageError with the closest one
    if request.kubernetes_version is not None:
        from kgen.render.validate import parse_k8s_version

        parse_k8s_version(request.kubernetes_version)
    for path in request.values_files:
        if not path.strip():
            raise UsageError("needs a file name, got an empty string", option="-f/--values", hint="- reads stdin")
    if request.values_files.count("-") > 1:
        raise UsageError("stdin can be read once", option="-f -", hint="give -f - once")
    if "-" in request.values_files and request.stdin is None:
        raise UsageError(
            "this command does not read values from stdin",
            option="-f -",
            hint="save them to a file and pass -f FILE",  # Python callers: RenderRequest.stdin
        )
    _check_values(request)


def _check_values(request: RenderRequest) -> None:
    """--set, --env and the flags, each as the values layering takes it (a scratch layer: the CLI's messages)."""
    from kgen.render.layering import Layers

    scratch = Layers()
    for assignment in request.sets:
        scratch.apply_set(assignment)
    for item in request.env:
        if "=" not in item or not item.split("=", 1)[0]:
            raise UsageError(
                f'expected KEY=VALUE, got "{item}"', option="--env", hint="for example --env NCCL_DEBUG_SUBSYS=INIT"
            )
    for key, value in request.flag_values().items():
        if value is not None:
            scratch.apply_flag(key, value, FLAG_NAMES[key])
    kind = request.flag_values().get("kind")
    if kind is not None:
        from kgen.render.values import KINDS

        if kind.lower() not in KINDS:
            raise UsageError(f'must be job, statefulset, jobset or slurm, got "{kind.lower()}"', option="--kind")


@dataclass
class RenderResult:
    """The manifest ``text`` and what `kgen render` says about it on stderr: the self-check's ``warnings``
    (findings below error severity), ``notes`` (what the manifest alone does not say, e.g. a Kueue queue
    suspends it) and ``cautions`` (values that render but likely do not do what was meant); ``documents``:
    the objects as parsed (what the text is the YAML or JSON of)."""

    text: str
    warnings: list[Finding]
    notes: list[str]
    cautions: list[str] = field(default_factory=list)
    documents: list[dict] = field(default_factory=list)


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
    if any(v is not None for k, v in request.flag_values().items() if k in SHAPE_KEYS):
        return None
    set_keys = {a.split("=", 1)[0].strip() for a in request.sets}
    if set_keys & set(SHAPE_KEYS):
        return None
    from kgen.render.presets import DEFAULT_PRESET

    return DEFAULT_PRESET
