"""The ``kgen`` group: the verb groups' commands under one root, every error mapped to one line and an exit
code. kgen.cli is the only package that imports click, prints or exits.

Exit codes: 0 ok; 1 lint findings of error severity; 2 bad input (one line on stderr, nothing on
stdout, no traceback).
"""

from __future__ import annotations

import errno
import sys

import click

from kgen import __version__
from kgen.cli import baremetal, completion, debug, lint, render, runs
from kgen.cli.options import KgenCommand, KgenGroup, ReaderGone, check_format, output_format_option
from kgen.errors import KgenError


def _one_line_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """A Python warning (a library's, or kgen's own, such as a kubeconfig without TLS verification) as one
    line on stderr, never the source line and location Python's own format adds."""
    try:
        click.echo(f"kgen: warning: {' '.join(str(message).split())}", err=True)
    except OSError:
        pass


def _fail(message: str, code: int = 2) -> None:
    try:
        click.echo(f"kgen: error: {message}", err=True)
    except OSError:  # stderr is gone too: the exit code is all that is left to say it
        pass
    sys.exit(code)


EXIT_INTERRUPTED = 130  # 128 + SIGINT

# A write to stdout failed because the reader went away (EPIPE): kgen says nothing and ends as Unix tools
# do, by SIGPIPE (kgen.__main__ re-raises the signal; in-process callers see this exit code, 128 + 13).
EXIT_BROKEN_PIPE = 141


# Errors of a write to stdout that are not the reader's leaving: one line on stderr, exit 2.
STDOUT_ERRNOS = frozenset(
    {errno.ENOSPC, errno.EIO, errno.EBADF, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.ENXIO, errno.EINVAL}
)


def stdout_error(exc: OSError) -> str:
    """One line for a failed write to stdout; --output-file is suggested only where the command has it."""
    why = {errno.EBADF: "stdout is closed (>&-)"}.get(exc.errno or 0, exc.strerror or str(exc))
    running = KgenCommand.running
    has_file = running is not None and any(p.name == "output_file" for p in running.params)
    return f"cannot write to stdout: {why}; redirect it elsewhere" + (
        ", or write a file with --output-file FILE" if has_file else ""
    )


# An example value per option, for "needs a value" errors (options without one show their metavar).
OPTION_EXAMPLES = {
    "preset": "4x8",
    "cpu": "32",
    "memory": "256Gi",
    "queue": "team-a",
    "nodes": "4",
    "gpus": "8",
    "kind": "statefulset",
    "name": "llama-70b",
    "namespace": "training",
    "image": "ghcr.io/me/train:1.4",
    "env": "NCCL_DEBUG=INFO",
    "values_files": "prod.yaml",
    "sets": "nccl.debug=INFO",
    "kubernetes_version": "1.33",
    "output_file": "out.yaml",
    "skip": "KG102,KG111",
    "engine": "kubeconform",
    "schema_location": "schemas/",
}


def _param_for(ctx: click.Context | None, opt: str) -> click.Parameter | None:
    if ctx is None:
        return None
    for param in ctx.command.params:
        if opt in param.opts or opt in param.secondary_opts:
            return param
    return None


def _needs_value(exc: click.BadOptionUsage) -> str:
    """`--nodes: needs a value, e.g. --nodes 4` (the option as the user typed it). The example comes from
    OPTION_EXAMPLES, else the last of the choices (a click.Choice, or a metavar such as yaml|json), else
    the metavar is shown as the form."""
    opt = exc.option_name
    param = _param_for(exc.ctx, opt)
    if param is None:
        return f"{opt}: needs a value"
    metavar = param.metavar or ""
    example = OPTION_EXAMPLES.get(param.name or "")
    if example is None and isinstance(param.type, click.Choice) and param.type.choices:
        example = str(param.type.choices[-1])
    if example is None and "|" in metavar:
        example = metavar.split("|")[-1]
    if example is not None:
        return f"{opt}: needs a value, e.g. {opt} {example}"
    return f"{opt}: needs a value ({opt} {metavar})" if metavar else f"{opt}: needs a value"


def _script_start(exc: click.NoSuchOption) -> tuple[list[str], int | None]:
    """The raw arguments and where a training command given without `--` starts: the first token before
    the unknown option that is neither an option nor an option's value (None: no such token)."""
    ctx = exc.ctx
    argv: list[str] = list(ctx.meta.get("kgen.args", [])) if ctx is not None else []
    bad = next((i for i, tok in enumerate(argv) if tok.split("=", 1)[0] == exc.option_name), len(argv))
    i = 0
    while i < bad:
        tok = argv[i]
        if tok == "--":
            return argv, None
        if tok.startswith("-") and len(tok) > 1:
            param = _param_for(ctx, tok.split("=", 1)[0])
            takes_value = isinstance(param, click.Option) and not param.is_flag and "=" not in tok
            i += 2 if takes_value else 1
            continue
        return argv, i
    return argv, None


def _no_such_option(exc: click.NoSuchOption, cmd: str) -> str:
    """`kgen render train.py --lr 3e-4` (forgot `--`) says where the training command goes."""
    head = f"{exc.option_name}: not an option of {cmd}"
    is_render = exc.ctx is not None and exc.ctx.command.name == "render"
    argv, start = _script_start(exc) if is_render else ([], None)
    if start is not None:
        import shlex  # only on this error path

        from kgen.launch.launchers import nested_launcher, problem

        nested = nested_launcher(argv[start:])
        if nested is not None:  # `kgen render torchrun --nproc-per-node 8 train.py`: both mistakes at once
            fixed = "kgen render " + shlex.join([*argv[:start], "--", *nested.command])
            carry = (
                f" (its {nested.option}: kgen's --gpus, or --set nprocPerNode for a CPU job)" if nested.option else ""
            )
            return f"{head}; {problem(nested)}{carry}; use: {fixed}"
        fixed = "kgen render " + shlex.join([*argv[:start], "--", *argv[start:]])
        return f"{head}; put the training command after --: {fixed}"
    close = [p for p in exc.possibilities or () if p not in ("--help", "-h")]
    if close:
        return f"{head}; did you mean {' or '.join(close)}?"
    if is_render:
        return f"{head}; put your training command and its arguments after --, e.g. kgen render -- train.py --lr 3e-4"
    return f"{head} (see `{cmd} --help`)"


def _usage_message(exc: click.UsageError) -> str:
    """click's usage errors as one line that names the option and its fix."""
    ctx = exc.ctx
    cmd = ctx.command_path if ctx is not None else "kgen"
    if isinstance(exc, click.BadOptionUsage) and "requires" in exc.message:
        return _needs_value(exc)
    if isinstance(exc, click.NoSuchOption):
        return _no_such_option(exc, cmd)
    if isinstance(exc, click.exceptions.NoSuchCommand):
        did = f"; did you mean {' or '.join(exc.possibilities)}?" if exc.possibilities else ""
        return f'no such command "{exc.command_name}" for {cmd}{did} (`{cmd} --help` lists them)'
    if exc.message.startswith("Got unexpected extra argument"):
        extra = exc.message.split("(", 1)[-1].rstrip(")")
        return f'"{extra}": {cmd} takes no such argument (see `{cmd} --help`)'
    if type(exc) is click.BadParameter and isinstance(exc.param, click.Option):  # an option's value (ASCII_INT)
        return f"{max(exc.param.opts, key=len)}: {exc.message}"
    if isinstance(exc, click.MissingParameter) and isinstance(exc.param, click.Argument):
        meta = exc.param.metavar or (exc.param.name or "").upper()
        return f"{cmd}: missing {meta} (see `{cmd} --help`)"
    if isinstance(exc, click.MissingParameter) and isinstance(exc.param, click.Option):
        opt = max(exc.param.opts, key=len)  # `kgen launch` without --name
        example = OPTION_EXAMPLES.get(exc.param.name or "") or exc.param.metavar or "VALUE"
        return f"{opt}: required, e.g. {opt} {example} (see `{cmd} --help`)"
    return f"{exc.format_message()} (see `{cmd} --help`)"


class RootGroup(KgenGroup):
    """Maps every error to one line on stderr and an exit code (also under click's CliRunner).

    A group called without a command (bare `kgen`, `kgen presets`) prints its help on stdout and exits 0,
    as kubectl and helm do: nothing was asked for, so nothing failed."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        import warnings

        warnings.showwarning = _one_line_warning
        try:
            rv = super().main(args=args, prog_name="kgen", complete_var=complete_var, standalone_mode=False, **extra)
        except KgenError as exc:
            _fail(exc.one_line(), exc.exit_code)
        except click.exceptions.NoArgsIsHelpError as exc:
            click.echo(exc.ctx.get_help())
            sys.exit(0)
        except click.exceptions.Abort:  # Ctrl-C: quiet, as Unix tools end on SIGINT
            sys.exit(EXIT_INTERRUPTED)
        except click.UsageError as exc:
            try:
                message = _usage_message(exc)
            except Exception:  # a message we did not foresee: click's own words, still one line
                message = exc.format_message()
            _fail(" ".join(message.split()), 2)
        except click.exceptions.ClickException as exc:
            _fail(exc.format_message(), exc.exit_code)
        except (BrokenPipeError, ReaderGone):  # the reader went away (`kgen render | head`): quiet
            sys.exit(EXIT_BROKEN_PIPE)
        except OSError as exc:
            if exc.filename is None and exc.errno in STDOUT_ERRNOS:  # e.g. `kgen render > /dev/full`
                _fail(stdout_error(exc))
            raise
        sys.exit(rv if isinstance(rv, int) else 0)


@click.group(cls=RootGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="kgen", message="%(prog)s %(version)s")
def cli() -> None:
    """kgen renders, lints and runs multi-node PyTorch (torchrun) training on Kubernetes.

    \b
      kgen render --nodes 4 --gpus 8 | kubectl apply -f -
      kgen lint --strict manifests/
      kgen presets list; kgen values
    \b
    The run after `kubectl apply` (pip install 'kgen-k8s[cluster]'):
      kgen submit --preset 4x8 --name llama -- train.py
      kgen status llama --watch; kgen logs llama -f; kgen stop llama; kgen list
    """


@cli.command("version", cls=KgenCommand)
@output_format_option(("text", "json"), "text")
def version(output_format: str) -> None:
    """Print kgen's version (the same as `kgen --version`); -o json for scripts."""
    import json
    import platform

    check_format(output_format, ("text", "json"), files=False)
    if output_format == "json":
        click.echo(json.dumps({"kgen": __version__, "python": platform.python_version()}, indent=2))
    else:
        click.echo(f"kgen {__version__}")


for _command in (*render.COMMANDS, lint.lint, completion.completion):
    cli.add_command(_command)
runs.register(cli)  # status/logs/stop/submit/list (submit takes render's options: registered after it)
baremetal.register(cli)  # launch
cli.add_command(debug.debug)  # debug stacks


def main(argv: list[str] | None = None) -> None:
    cli.main(args=argv)


if __name__ == "__main__":  # pragma: no cover
    main()
