"""Stage 0 of render, the request: what the caller asked for (a preset, values files, --set, flags, a
command), and which preset the values start from. kgen.render.pipeline runs the stages on it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

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
    be an integer"). ``flags`` is kgen 0.1's spelling of them (values key -> text); the fields win."""

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
    env: Sequence[str] = ()  # KEY=VALUE from --env
    command: Sequence[str] = ()  # after "--"
    kubernetes_version: str | None = None
    output_format: str = "yaml"  # yaml | json
    lint: bool = True  # the self-check (kgen lint on the output)
    stdin: str | None = None  # the text of `-f -` (the CLI reads stdin; None = not read)
    flags: Mapping[str, str | None] | None = None

    def flag_values(self) -> dict[str, str | None]:
        """The flags as the values layering takes them: values key -> text, in --help's order."""
        out = dict(self.flags or {})
        for key in FLAG_NAMES:
            value = getattr(self, key.replace(".", "_"))
            if value is not None:
                out[key] = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
        return out


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
