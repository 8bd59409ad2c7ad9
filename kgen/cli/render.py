"""`kgen render`, `kgen values`, `kgen presets list|show` and `kgen entrypoint`: flags -> kgen.render -> stdout."""

from __future__ import annotations

import sys

import click

from kgen.cli.options import (
    RENDER_FORMATS,
    KgenCommand,
    KgenGroup,
    check_format,
    check_output_file,
    completes,
    corrected_launcher,
    no_formats_option,
    output_file_option,
    output_format_option,
    read_stdin_values,
    write_output,
)
from kgen.errors import KgenError
from kgen.versions import DEFAULT_KUBERNETES_VERSION


def _preset_names() -> list[str]:
    from kgen.render import presets as presets_mod

    return list(presets_mod.names())


def _render_versions() -> list[str]:
    from kgen.versions import MAX_K8S, MIN_K8S

    return [f"1.{minor}" for minor in range(MIN_K8S, MAX_K8S + 1)]


def _set_keys() -> list[str]:
    """`--set` completes the values keys: KEY= for a value, KEY. for a mapping of your own keys (env, labels)."""
    from kgen.render.values import VALUES

    return [f"{k}." if kind in ("dict[str,str]", "env") else f"{k}=" for k, (kind, _, _) in VALUES.items()]


def _kinds() -> tuple[str, ...]:
    from kgen.render.values import KINDS

    return KINDS


RENDER_EPILOG = """\b
Examples:
  kgen render                                   # the 2node-test preset: an all-reduce smoke test
  kgen render --nodes 4 --gpus 8 | kubectl apply -f -     # kgen-train, 4 x 8 (no preset)
  kgen render --preset 64x8 --name llama-70b --image ghcr.io/me/train:1.4 \\
      -- train.py --config configs/70b.yaml
  kgen render --preset 4x1 --kind statefulset -f prod.yaml --set nccl.debug=INFO
  kgen render --gpus 0 --set nprocPerNode=4 -- train.py   # CPU job (gloo)
  kgen render --kind slurm --preset 4x8 --set slurm.partition=gpu -- train.py > job.sbatch

\b
Layering, later wins: built-in defaults < --preset < -f files (in order) < --set < flags.
Without --preset, 2node-test is the base only when no -f, no shape (--nodes, --gpus) and
no command is given.
Values reference (every key, its type, default and meaning): kgen values
"""


@click.command(cls=KgenCommand, epilog=RENDER_EPILOG, context_settings={"max_content_width": 100})
@click.option(
    "--preset",
    metavar="NAME",
    shell_complete=completes(_preset_names),
    help="Preset to start from (2node-test when nothing else says what to run; see `kgen presets list`).",
)
@click.option("--nodes", metavar="N", help="Number of nodes (pods).")
@click.option("--gpus", metavar="G", help="GPUs per node (0 = CPU job with gloo).")
@click.option(
    "--kind",
    metavar="job|statefulset|jobset|slurm",
    shell_complete=completes(_kinds),
    help="Indexed Job (default), StatefulSet, JobSet (needs the JobSet controller; docs/jobset.md), or slurm: "
    "an sbatch script (docs/slurm.md).",
)
@click.option("--name", metavar="NAME", help="Job/StatefulSet and Service name (a DNS label).")
@click.option("-n", "--namespace", metavar="NS", help="Namespace of every object.")
@click.option("--image", metavar="IMAGE", help="Container image with python3 and torch.")
@click.option(
    "--queue",
    metavar="NAME",
    help="Kueue LocalQueue (label kueue.x-k8s.io/queue-name): the workload waits until Kueue admits it.",
)
@click.option("--cpu", metavar="QTY", help="CPU request per pod, e.g. 32 (default auto: 2 per GPU).")
@click.option("--memory", metavar="QTY", help="Memory request per pod, e.g. 256Gi (default auto: 8Gi per GPU).")
@click.option(
    "--hang-timeout",
    metavar="S",
    help="Seconds without progress from any rank after which the run is a hang: stacks reported, exit 77 "
    "(values hang.timeout; default 0 = off).",
)
@click.option(
    "--health-gate",
    metavar="off|warn|fail",
    help="Before training, check every node's devices and links (values health.gate; default warn: report and "
    "go on; fail: stop with exit 78 naming the node).",
)
@click.option("--env", "env", metavar="KEY=VALUE", multiple=True, help="Extra environment variable (repeatable).")
@click.option(
    "-f",
    "--values",
    "values_files",
    metavar="FILE",
    multiple=True,
    help="Values file (repeatable, later wins; - reads stdin).",
)
@click.option(
    "--set",
    "sets",
    metavar="KEY=VALUE",
    multiple=True,
    shell_complete=completes(_set_keys),
    help="Set one value, e.g. nccl.debug=INFO (repeatable).",
)
@click.option(
    "--kubernetes-version",
    metavar="1.NN",
    shell_complete=completes(_render_versions),
    help=f"Oldest Kubernetes the output must run on (default {DEFAULT_KUBERNETES_VERSION}, 1.27 ... 1.37); "
    "1.31+ adds podFailurePolicy, 1.34+ podReplacementPolicy.",
)
@output_format_option(RENDER_FORMATS, "yaml", help="Output format (json: a kubectl List).")
@output_file_option()
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="[-- COMMAND [ARGS...]]")
def render_command(
    preset,
    nodes,
    gpus,
    kind,
    name,
    namespace,
    image,
    queue,
    cpu,
    memory,
    hang_timeout,
    health_gate,
    env,
    values_files,
    sets,
    kubernetes_version,
    output_format,
    output_file,
    command,
) -> None:
    """Render a ConfigMap, Service, NetworkPolicy and Job (or StatefulSet, JobSet; PodDisruptionBudget).

    The objects of one run: the entrypoint's ConfigMap, a headless Service (a JobSet makes its own), a
    NetworkPolicy that admits only the run's pods, the workload, and a PodDisruptionBudget when asked
    (values podDisruptionBudget). No Secret: a Job's pods derive the run's secret from their Job's UID; a
    StatefulSet's mount Secret <name>-auth, which `kgen submit` creates (render says how to otherwise).
    With --kind slurm: an sbatch script that runs the same entrypoint on every node (kgen submit --kind slurm).

    COMMAND is the training script and its arguments that torchrun runs on every worker
    (e.g. `-- train.py --lr 3e-4`); without it the pods run kgen's all-reduce smoke test.
    """
    from kgen import sdk
    from kgen.render.pipeline import stderr_lines

    check_format(output_format, RENDER_FORMATS)
    check_output_file(output_file)
    stdin = read_stdin_values(values_files)
    request = sdk.RenderRequest(
        stdin=stdin,
        preset=preset,
        values_files=values_files,
        sets=sets,
        env=env,
        command=command,
        nodes=nodes,
        gpus=gpus,
        kind=kind,
        name=name,
        namespace=namespace,
        image=image,
        queue=queue,
        cpu=cpu,
        memory=memory,
        hang_timeout=hang_timeout,
        health_gate=health_gate,
        kubernetes_version=kubernetes_version,
        output_format=output_format,
    )
    with corrected_launcher("kgen render"):
        result = sdk.render(request)
    for line in stderr_lines(result):  # the self-check's warnings: the manifest is printed, the user told
        click.echo(f"kgen: {line}", err=True)
    write_output(output_file, result.text)
    if (output_file is None or output_file == "-") and result.documents and _stdout_is_terminal():
        for line in object_summary(result.text, result.documents, output_format):
            click.echo(line, err=True)


def _stdout_is_terminal() -> bool:
    try:
        return bool(sys.stdout.isatty())
    except (OSError, ValueError):
        return False


def object_summary(text: str, documents: list[dict], output_format: str) -> list[str]:
    """What `kgen render` says on stderr when its output goes to a terminal: each object's kind, name and size
    in lines (the entrypoint's ConfigMap is most of the text), and how to see the script or apply the objects.
    Printed after the manifest, so that it is what the terminal shows last; stdout is the same bytes."""
    from kgen.resources import ENTRYPOINT_FILE

    if output_format == "yaml":
        sizes = [part.count("\n") + 1 for part in text.rstrip("\n").split("\n---\n")]
    else:
        import json

        sizes = [json.dumps(doc, indent=2, ensure_ascii=False).count("\n") + 1 for doc in documents]
    if len(sizes) != len(documents):
        sizes = [0] * len(documents)
    names = [f"{d.get('kind', '?')}/{(d.get('metadata') or {}).get('name', '?')}" for d in documents]
    width = max(len(n) for n in names)
    total = text.count("\n")
    out = [f"kgen: {len(documents)} objects, {total:,} lines on stdout:"]
    for name, size, doc in zip(names, sizes, documents, strict=True):
        what = ""
        if doc.get("kind") == "ConfigMap" and ENTRYPOINT_FILE in (doc.get("binaryData") or {}):
            what = f"  {ENTRYPOINT_FILE}, kgen's in-pod entrypoint (`kgen entrypoint` prints it)"
        out.append(f"kgen:   {name:<{width}}  {size:>6,} lines{what}")
    out.append("kgen: apply them with `kgen render ... | kubectl apply -f -` (this summary is on stderr only)")
    return out


@click.group(cls=KgenGroup)
def presets() -> None:
    """List and show the built-in presets."""


@presets.command("list")
def presets_list() -> None:
    """Name, nodes x GPUs, kind and purpose of every preset."""
    from kgen import sdk

    rows = [p.summary() for p in sdk.presets()]
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        click.echo(f"{r['name']:<{width}}  {r['shape']:<7}  {r['kind']:<11}  {r['description']}")


@presets.command("show")
@click.argument("name", shell_complete=completes(_preset_names))
def presets_show(name: str) -> None:
    """Print a preset file, ready to copy and use with -f (all keys: `kgen values`)."""
    from kgen import sdk

    try:
        preset = sdk.preset(name)
    except KgenError as exc:
        exc.option = "kgen presets show"  # the NAME argument here, not render's --preset
        raise
    click.echo(preset.text, nl=False)


@click.command("entrypoint", cls=KgenCommand)
@click.option("--path", "show_path", is_flag=True, help="Print where the installed script is instead of its text.")
@click.option(
    "--where",
    "where",
    type=int,
    metavar="LINE",
    help="Print the source (entrypoint/parts/PART.py:N) of line LINE of the script or of a pod's traceback.",
)
@output_file_option("Write the script to FILE (safely; - for stdout).")
@no_formats_option("kgen entrypoint")
def entrypoint(show_path: bool, where: int | None, output_file: str | None) -> None:
    """Print the in-pod entrypoint script (kgen_entrypoint.py), for bare metal and custom images.

    \b
    Examples:
      kgen entrypoint --output-file kgen_entrypoint.py  # bare metal: copy to every node, then on each
      python3 kgen_entrypoint.py -- train.py --lr 3e-4  #   with NNODES, NPROC_PER_NODE, NODE_RANK,
                                                        #   MASTER_ADDR, MASTER_PORT and (more than
                                                        #   one node) KGEN_SECRET_FILE set
      kgen entrypoint > docker/kgen_entrypoint.py       # custom image: COPY it in
      kgen entrypoint --path
      kgen entrypoint --where 2210                      # a traceback's line 2210: its source part and line
    `kgen render` ships its pod copy in the <name>-entrypoint ConfigMap: the same program and line
    numbers, without comments, docstrings and the bare-metal and Slurm parts (docs/entrypoint.md).
    KGEN_SECRET_FILE names a file holding the run's secret, the same on every node (README, Security);
    `kgen launch` sets all of these itself.
    """
    from kgen import sdk

    path = sdk.entrypoint_path()
    check_output_file(output_file)
    if show_path and output_file:
        raise KgenError("cannot be used with --output-file; choose one", option="--path")
    if where is not None:
        if show_path or output_file:
            raise KgenError("cannot be used with --path or --output-file; choose one", option="--where")
        click.echo(sdk.entrypoint_where(where))
        return
    if show_path:
        click.echo(str(path))
        return
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise KgenError(f"cannot read the bundled entrypoint {path}: {exc.strerror}; reinstall kgen") from None
    write_output(output_file, text)


@click.command("values", cls=KgenCommand)
@output_format_option(("text", "markdown"), "text")
def values_reference(output_format: str) -> None:
    """The values reference: every key of a values file (and of --set), with its type, default and meaning.

    \b
    Nested keys are dotted: nccl.debug is `nccl: {debug: INFO}` in a file, --set nccl.debug=INFO.
    Examples:
      kgen values
      kgen values -o markdown           # the README's table
    """
    from kgen import sdk

    check_format(output_format, ("text", "markdown"), files=False)
    click.echo(sdk.values_reference(output_format), nl=False)


COMMANDS = (render_command, presets, entrypoint, values_reference)
