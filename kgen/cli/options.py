"""Option decorators every kgen command shares (kubectl's output convention: -o FORMAT, --output-file FILE), and the
command class every kgen command is (``KgenCommand``: kubectl's `-o=json` spelling, the raw arguments).

``-o/--output FORMAT`` names a format, everywhere; ``--format`` is the same option under its old name.
A file is written with ``--output-file FILE`` (kgen.resources.write_file: never destroys what is at the
path). A ``-o`` value that is not one of the command's formats is refused (exit 2) with the hint to use
``--output-file``, so ``kgen lint -o report.json`` can never silently become a file named like a format
or a format named like a file. Also what more than one verb group needs: writing the output, reading
`-f -`, the launcher correction, and the group class. Imported by every module of kgen.cli.
"""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Callable, Iterator
from typing import Any

import click

from kgen.errors import KgenError, NestedLauncherError, UsageError

OUTPUT_OPTION = "-o/--output"


class AsciiInt(click.ParamType):
    """An integer option: ASCII digits only (``int()`` would take "４" or "٣"; a value kgen shows back must read
    as the user will see it everywhere else)."""

    name = "integer"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        text = str(value).strip()
        if not text.isascii() or not text.lstrip("+-").isdigit() or text.count("-") + text.count("+") > 1:
            self.fail(f'must be an integer, got "{value}"', param, ctx)
        return int(text)


ASCII_INT = AsciiInt()


def completes(words: Callable[[], Any] | tuple[str, ...]) -> Callable:
    """A ``shell_complete`` for ``kgen completion``: the words (or what ``words()`` returns) that start
    with what was typed so far."""

    def complete(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
        return [w for w in (words() if callable(words) else words) if w.startswith(incomplete)]

    return complete


def output_format_option(formats: tuple[str, ...], default: str, help: str = "Output format.") -> Callable:
    """``-o/--output FORMAT`` (also ``--format FORMAT``), checked by ``check_format``; completes the formats."""
    return click.option(
        "-o",
        "--output",
        "--format",
        "output_format",
        default=default,
        show_default=True,
        metavar="|".join(formats),
        shell_complete=completes(formats),
        help=help,
    )


def output_file_option(
    help: str = "Write to FILE (atomically, never destroying what is there) instead of stdout.",
) -> Callable:
    return click.option("--output-file", "output_file", metavar="FILE", help=help)


def check_format(value: str, formats: tuple[str, ...], *, files: bool = True) -> str:
    """``value`` when it is one of ``formats``; otherwise exit 2 naming them (and --output-file, where the
    command writes files: a -o value that is not a format is most likely a file name, as it used to be)."""
    if value in formats:
        return value
    choices = f"{', '.join(formats[:-1])} or {formats[-1]}" if len(formats) > 1 else formats[0]
    hint = f"to write a file use --output-file {value or 'FILE'}" if files else None
    if value and not any(c in value for c in "./"):  # a format's name mistyped (YAML, yml, jsn), not a file
        import difflib

        near = difflib.get_close_matches(value.lower(), formats, n=1, cutoff=0.6)
        if near:
            hint = f"did you mean {near[0]}?"
        elif value.lower() in FORMAT_NAMES:  # another command's format (lint -o yaml): not a file name
            ctx = click.get_current_context(silent=True)
            command = ctx.command_path if ctx is not None else "this command"
            hint = f"{command} has no {value} output"
    raise UsageError(f'must be an output format, {choices}; got "{value}"', option=OUTPUT_OPTION, hint=hint)


# Every output format of a kgen command (and their short spellings): a -o value among them that is not the
# command's own is a format asked of the wrong command, never a file name to suggest --output-file for.
FORMAT_NAMES = frozenset(("yaml", "yml", "json", "text", "txt", "wide", "markdown", "md", "junit", "github", "sarif"))


def check_output_file(path: str | None) -> None:
    """--output-file "": an empty file name is a mistake (a shell variable that was not set), not stdout."""
    if path is not None and not path.strip():
        raise UsageError("needs a file name, got an empty string", option="--output-file", hint="- writes to stdout")


def no_formats_option(command: str) -> Callable:
    """A hidden ``-o`` for commands without output formats (``kgen entrypoint``): it used to name a file."""

    def refuse(ctx: click.Context, param: click.Parameter, value: Any) -> None:
        if value is not None:
            raise UsageError(
                f"{command} has no output formats",
                option=OUTPUT_OPTION,
                hint=f"to write a file use --output-file {value or 'FILE'}",
            )

    return click.option(
        "-o", "--output", "no_output_format", metavar="FILE", hidden=True, expose_value=False, callback=refuse
    )


def pflag_short_values(command: click.Command, args: list[str]) -> list[str]:
    """kubectl's flag parser (pflag) reads `-o=json`, `-n=ml-team`, `-f=job.yaml` as the value after `=`;
    click would keep the `=` in the value. Split them as pflag does (before `--`, and not where the word is
    itself the value of the option before it)."""
    short: set[str] = set()
    takes_value: set[str] = set()
    optional: set[str] = set()  # options whose value may be left out (--dry-run [client|server])
    for param in command.params:
        if isinstance(param, click.Option) and not param.is_flag and not param.count:
            names = param.opts + param.secondary_opts
            takes_value.update(names)
            short.update(o for o in names if len(o) == 2)
            if getattr(param, "_flag_needs_value", False):
                optional.update(names)
    out: list[str] = []
    pending = ""  # "value": this word is the previous option's value; "optional": it is unless it is an option
    for i, word in enumerate(args):
        if pending == "optional" and word.startswith("-"):
            pending = ""  # click reads an option here, not the value
        if word == "--" and not pending:
            return out + args[i:]
        if not pending and word[:2] in short and word[2:3] == "=":
            out += [word[:2], word[3:]]
            continue
        out.append(word)
        pending = "" if pending else ("optional" if word in optional else "value" if word in takes_value else "")
    return out


class KgenCommand(click.Command):
    """Keeps the context on click's parse errors (for messages that name the command) and the raw arguments."""

    running: click.Command | None = None  # the command of this process (kgen.cli.stdout_error's hint)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        KgenCommand.running = self
        args = pflag_short_values(self, args)
        ctx.meta["kgen.args"] = list(args)
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            if exc.ctx is None:
                exc.ctx = ctx
            raise


class ReaderGone(Exception):
    """A write to stdout found no reader (EPIPE); not an OSError, so that click's main passes it on."""


class KgenGroup(click.Group):
    """A kgen group (`kgen presets`): its commands are KgenCommands, its parse errors keep the context, a
    reader gone away is ReaderGone. The root group (kgen.cli.root.RootGroup) maps the errors to exit codes."""

    command_class = KgenCommand
    group_class = type  # subgroups are KgenGroups too

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if ctx.parent is None:
            KgenCommand.running = None  # until a command is parsed (`kgen --help` has none)
        try:
            return super().parse_args(ctx, args)  # `kgen --help` / `--version` print here
        except click.UsageError as exc:
            if exc.ctx is None:
                exc.ctx = ctx
            raise
        except BrokenPipeError:
            raise ReaderGone() from None

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except BrokenPipeError:  # click's main would make it exit 1; kgen ends like Unix tools do
            raise ReaderGone() from None

    def resolve_command(self, ctx: click.Context, args: list[str]):
        ctx.meta["kgen.args"] = list(args[1:])  # the subcommand's raw arguments (ctx.meta is shared with it)
        return super().resolve_command(ctx, args)


RENDER_FORMATS = ("yaml", "json")
LINT_FORMATS = ("text", "json", "junit", "github", "sarif")


_WRITE_FIXES = {
    errno.EISDIR: "name a file (or - for stdout)",
    errno.ENOENT: "create the folder first",
    errno.ENOTDIR: "a part of the path is not a folder",
    errno.EACCES: "choose a writable location (or - for stdout)",
    errno.EPERM: "choose a writable location (or - for stdout)",
    errno.EROFS: "choose a writable location (or - for stdout)",
    errno.ENOSPC: "free some space",
    errno.ELOOP: "the symlinks form a loop",
    errno.ENXIO: "nothing reads that socket or device",
}


def write_output(path: str | None, text: str) -> None:
    """--output-file FILE: None or ``-`` is stdout; otherwise kgen.resources.write_file (never destroys what
    is at the path: devices and FIFOs are written, symlinks followed, regular files replaced all-or-nothing)."""
    if path is None or path == "-":
        click.echo(text, nl=False)
        return
    from kgen.resources import write_file

    try:
        write_file(path, text.encode("utf-8"), durable=True)
    except OSError as exc:
        problem = f"cannot write {path}: {exc.strerror or exc}"
        fix = _WRITE_FIXES.get(exc.errno or 0)
        raise KgenError(f"{problem}; {fix}" if fix else problem, option="--output-file") from None


def read_stdin_values(values_files: tuple[str, ...] | list[str]) -> str | None:
    """The text of `-f -` (bounded: kgen.render.layering.MAX_VALUES_BYTES); None when stdin is not named."""
    if "-" not in values_files:
        return None
    from kgen.inputs import read_text
    from kgen.render.layering import MAX_VALUES_BYTES

    try:
        return read_text("-", limit=MAX_VALUES_BYTES, what="values file")
    except KgenError as exc:
        exc.option = "-f -"
        raise


@contextlib.contextmanager
def corrected_launcher(cmd: str) -> Iterator[None]:
    """A launcher after `--` (torchrun ...): the error's `use:` becomes the whole command line as typed,
    with the launcher dropped and what it was asked for carried into kgen's options."""
    try:
        yield
    except NestedLauncherError as exc:
        if exc.option == "-- COMMAND":
            import shlex

            ctx = click.get_current_context(silent=True)
            argv: list[str] = list(ctx.meta.get("kgen.args", [])) if ctx is not None else []
            cut = (
                argv.index("--")
                if "--" in argv
                else max(0, len(argv) - len(ctx.params.get("command") or ()) if ctx else 0)
            )
            exc.use = shlex.join([*cmd.split(), *argv[:cut], *exc.add, "--", *exc.command])
        raise


def note(text: str) -> None:
    """A line on stderr after "kgen: " (progress, warnings): stdout stays the command's output."""
    click.echo(f"kgen: {text}", err=True)


def on_option(f):
    """--on cluster|bare-metal|slurm: which run a name means when two could (kgen.sdk.RunRef.on)."""
    return click.option(
        "--on",
        "on",
        type=click.Choice(("cluster", "bare-metal", "slurm")),
        default=None,
        help="Where the run is (default: this machine's bare-metal or Slurm record of that name, else the cluster).",
    )(f)


def complete_run_names(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    """`kgen status|logs|stop <TAB>`: the names of this machine's bare-metal and Slurm records, and of the
    cluster's kgen runs when a cluster is configured and answers within a few seconds (``--on`` narrows them;
    -n/--namespace, --context and --kubeconfig typed before are used). Never an error: completion stays quiet."""
    on = ctx.params.get("on")
    names: set[str] = set()
    try:
        from kgen.runs import store

        if on in (None, "bare-metal"):
            from kgen.baremetal import record as bare_record

            names.update(store.names(bare_record.runs_dir()))
        if on in (None, "slurm"):  # kgen.slurm.record.records_dir (only kgen.sdk imports the Slurm adapter)
            names.update(store.names(store.state_home() / "kgen" / "slurm"))
    except Exception:  # noqa: BLE001  (a damaged state folder must not break the shell's completion)
        pass
    if on in (None, "cluster"):
        names.update(
            _cluster_run_names(ctx.params.get("namespace"), ctx.params.get("context"), ctx.params.get("kubeconfig"))
        )
    return sorted(n for n in names if n.startswith(incomplete))


CLUSTER_COMPLETION_S = 3.0  # a cluster that does not answer by then offers nothing (the shell waits for it)


def _cluster_run_names(namespace: str | None, context: str | None, kubeconfig: str | None) -> list[str]:
    from kgen.cluster.engine import cluster_configured

    if not cluster_configured(kubeconfig, context):
        return []
    found: list[str] = []

    def ask() -> None:
        try:
            from kgen.cluster.client import Cluster
            from kgen.cluster.kube_records import INSTANCE_LABEL
            from kgen.cluster.labels import MANAGED_SELECTOR

            cluster = Cluster.connect(kubeconfig=kubeconfig, context=context, namespace=namespace)
            for kind in ("Job", "StatefulSet", "JobSet"):
                try:
                    workloads = cluster.list(kind, MANAGED_SELECTOR)
                except Exception:  # noqa: BLE001  (no JobSet API on this cluster, say)
                    continue
                for w in workloads:
                    meta = w.get("metadata") or {}
                    found.append((meta.get("labels") or {}).get(INSTANCE_LABEL) or meta.get("name", ""))
        except Exception:  # noqa: BLE001  (no client, no cluster, no access: nothing to offer)
            return

    import threading

    worker = threading.Thread(target=ask, daemon=True)
    worker.start()
    worker.join(CLUSTER_COMPLETION_S)
    return [n for n in list(found) if n] if not worker.is_alive() else []


@contextlib.contextmanager
def slurm_refusal_explained(request):
    """sbatch's "no node fits" (Requested node configuration is not available) names the kgen value behind the
    script's --mem and how to leave it out (kgen.render.slurmkind.explain_refusal); other errors pass as they are."""
    try:
        yield
    except KgenError as exc:
        if "sbatch" not in exc.message:
            raise
        from kgen.render.pipeline import build
        from kgen.render.slurmkind import explain_refusal

        try:
            spec = build(request)
        except KgenError:
            raise exc from None
        better = explain_refusal(exc.message, spec) if spec.kind == "slurm" else None
        if better:
            exc.message = better
            exc.args = (exc.one_line(),)
        raise


def cluster_options(f):
    f = click.option("--kubeconfig", metavar="FILE", help="Kubeconfig file (default $KUBECONFIG, ~/.kube/config).")(f)
    f = click.option("--context", metavar="NAME", help="Kubeconfig context to use (default: the current one).")(f)
    f = click.option(
        "-n", "--namespace", metavar="NS", help="Namespace (default: the context's, in a pod its own, else default)."
    )(f)
    return f
