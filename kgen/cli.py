"""kgen's command line. The only module that imports click, prints or exits.

Exit codes: 0 ok; 1 lint findings of error severity; 2 bad input (one line on stderr, nothing on
stdout, no traceback).
"""

from __future__ import annotations

import os
import sys

import click

from kgen import __version__
from kgen.errors import KgenError

RENDER_EPILOG = """\b
Examples:
  kgen render                                   # the 2node-test preset: an all-reduce smoke test
  kgen render --nodes 4 --gpus 8 | kubectl apply -f -
  kgen render --preset 64x8 --name llama-70b --image ghcr.io/me/train:1.4 \\
      -- train.py --config configs/70b.yaml
  kgen render --preset 4x1 --kind statefulset -f prod.yaml --set nccl.debug=INFO
  kgen render --gpus 0 --set nprocPerNode=4 -- train.py   # CPU job (gloo)

\b
Layering, later wins: built-in defaults < --preset < -f files (in order) < --set < flags.
Values reference: kgen presets show 4x8, and the README.
"""


def _fail(message: str, code: int = 2) -> None:
    click.echo(f"kgen: error: {message}", err=True)
    sys.exit(code)


def write_output(path: str, text: str) -> None:
    """-o FILE: all of the text or nothing (kgen.resources.write_atomic), errors as one line."""
    from kgen.resources import write_atomic

    try:
        write_atomic(os.path.abspath(path), text.encode("utf-8"), durable=True)
    except OSError as exc:
        raise KgenError(f"cannot write {path}: {exc.strerror}", option="-o/--output") from None


class KgenGroup(click.Group):
    """Maps every error to one line on stderr and an exit code (also under click's CliRunner)."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        try:
            rv = super().main(
                args=args, prog_name=prog_name or "kgen", complete_var=complete_var, standalone_mode=False, **extra
            )
        except KgenError as exc:
            _fail(exc.one_line(), exc.exit_code)
        except click.exceptions.Abort:
            _fail("aborted", 130)
        except click.exceptions.ClickException as exc:
            cmd = getattr(getattr(exc, "ctx", None), "command_path", None) or "kgen"
            _fail(f"{exc.format_message()} (see `{cmd} --help`)", 2)
        except BrokenPipeError:
            sys.stderr.close()
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)


@click.group(cls=KgenGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="kgen", message="%(prog)s %(version)s")
def cli() -> None:
    """kgen renders, lints and runs multi-node PyTorch (torchrun) training on Kubernetes.

    \b
      kgen render --nodes 4 --gpus 8 | kubectl apply -f -
      kgen lint manifests/
      kgen presets list
    """


@cli.command(epilog=RENDER_EPILOG, context_settings={"max_content_width": 100})
@click.option(
    "--preset",
    metavar="NAME",
    help="Preset to start from (default 2node-test, none when -f is given; see `kgen presets list`).",
)
@click.option("--nodes", metavar="N", help="Number of nodes (pods).")
@click.option("--gpus", metavar="G", help="GPUs per node (0 = CPU job with gloo).")
@click.option("--kind", metavar="job|statefulset", help="Indexed Job (default) or StatefulSet.")
@click.option("--name", metavar="NAME", help="Job/StatefulSet and Service name (a DNS label).")
@click.option("--namespace", metavar="NS", help="Namespace of every object.")
@click.option("--image", metavar="IMAGE", help="Container image with python3 and torch.")
@click.option("--env", "env", metavar="KEY=VALUE", multiple=True, help="Extra environment variable (repeatable).")
@click.option(
    "-f", "--values", "values_files", metavar="FILE", multiple=True, help="Values file (repeatable, later wins)."
)
@click.option(
    "--set", "sets", metavar="KEY=VALUE", multiple=True, help="Set one value, e.g. nccl.debug=INFO (repeatable)."
)
@click.option(
    "--kubernetes-version",
    metavar="1.NN",
    help="Oldest Kubernetes the output must run on (default 1.27); newer versions enable newer Job features.",
)
@click.option("-o", "--output", metavar="FILE", help="Write to FILE (atomically) instead of stdout.")
@click.option("--format", "output_format", default="yaml", metavar="yaml|json", help="Output format.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="[-- COMMAND [ARGS...]]")
def render(
    preset,
    nodes,
    gpus,
    kind,
    name,
    namespace,
    image,
    env,
    values_files,
    sets,
    kubernetes_version,
    output,
    output_format,
    command,
) -> None:
    """Render a headless Service, an Indexed Job (or StatefulSet) and the entrypoint ConfigMap.

    COMMAND is the training script and its arguments that torchrun runs on every worker
    (e.g. `-- train.py --lr 3e-4`); without it the pods run kgen's all-reduce smoke test.
    """
    from kgen.api import RenderRequest
    from kgen.api import render as render_manifest

    request = RenderRequest(
        preset=preset,
        values_files=values_files,
        sets=sets,
        env=env,
        command=command,
        flags={"nodes": nodes, "gpus": gpus, "kind": kind, "name": name, "namespace": namespace, "image": image},
        kubernetes_version=kubernetes_version,
        output_format=output_format,
    )
    text = render_manifest(request)
    if output:
        write_output(output, text)
    else:
        click.echo(text, nl=False)


@cli.command()
@click.argument("paths", nargs=-1, metavar="[PATH|DIR|-]...")
@click.option(
    "--kubernetes-version",
    default="1.37",
    show_default=True,
    metavar="1.NN",
    help="Kubernetes version whose schemas and rules apply (1.25 ... 1.37).",
)
@click.option(
    "--skip", "skip", metavar="KG012,...", multiple=True, help="Rule ids to skip (comma-separated, repeatable)."
)
@click.option(
    "--format", "output_format", default="text", show_default=True, metavar="text|json|junit", help="Output format."
)
@click.option(
    "--engine",
    default="builtin",
    show_default=True,
    metavar="builtin|kubeconform",
    help="Schema engine; kubeconform must be on PATH.",
)
@click.option(
    "--schema-location",
    metavar="DIR|TEMPLATE",
    help="Schemas for CRDs: a folder, or a kubeconform-style template such as "
    "'schemas/{{ .Group }}/{{ .ResourceKind }}_{{ .ResourceAPIVersion }}.json'.",
)
@click.option("-o", "--output", metavar="FILE", help="Write the report to FILE (atomically) instead of stdout.")
def lint(paths, kubernetes_version, skip, output_format, engine, schema_location, output) -> None:
    """Check manifests offline: Kubernetes JSON schemas plus the rules schemas miss.

    \b
    Examples:
      kgen lint deploy/                 # every *.yaml / *.yml below deploy/
      kgen render --preset 4x8 | kgen lint -
      kgen lint --format junit -o report.xml manifests/   (CI)
      kgen lint --skip KG102,KG111 manifests/
    Rules: docs/lint.md. Per object: annotation kgen.dev/lint-skip: "KG102,KG111".
    Exit 0 clean, 1 on error findings, 2 on usage or parse errors.
    """
    import io

    from kgen.lint.api import LintOptions, lint_paths
    from kgen.output import write_findings

    if output_format not in ("text", "json", "junit"):
        raise KgenError(f'must be text, json or junit, got "{output_format}"', option="--format")
    skipped = frozenset(s.strip() for item in skip for s in item.split(",") if s.strip())
    opts = LintOptions(
        kubernetes_version=kubernetes_version, skip=skipped, engine=engine, schema_location=schema_location
    )
    if not paths and sys.stdin.isatty():
        raise KgenError("no input: pass files or folders, or '-' to read stdin (e.g. kgen render | kgen lint -)")
    result = lint_paths(list(paths) or ["-"], opts)
    buf = io.StringIO()
    write_findings(result, output_format, buf)
    if output:
        write_output(output, buf.getvalue())
    else:
        click.echo(buf.getvalue(), nl=False)
    sys.exit(result.exit_code)


@cli.group()
def presets() -> None:
    """List and show the built-in presets."""


@presets.command("list")
def presets_list() -> None:
    """Name, nodes x GPUs, kind and purpose of every preset."""
    from kgen import presets as presets_mod

    rows = [presets_mod.load(n).summary() for n in presets_mod.names()]
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        click.echo(f"{r['name']:<{width}}  {r['shape']:<7}  {r['kind']:<11}  {r['description']}")


@presets.command("show")
@click.argument("name")
def presets_show(name: str) -> None:
    """Print a preset file, ready to copy and use with -f."""
    from kgen import presets as presets_mod

    click.echo(presets_mod.load(name).text, nl=False)


from kgen.cli_cluster import register as _register_cluster_verbs  # noqa: E402  (status/logs/stop/submit/list)

_register_cluster_verbs(cli)


def main(argv: list[str] | None = None) -> None:
    cli.main(args=argv)


if __name__ == "__main__":  # pragma: no cover
    main()
