"""kgen's command line. The only module that imports click, prints or exits.

Exit codes: 0 ok; 1 lint findings of error severity; 2 bad input (one line on stderr, nothing on
stdout, no traceback).
"""

from __future__ import annotations

import contextlib
import errno
import sys
from collections.abc import Iterator

import click

from kgen import __version__
from kgen.cli_options import (
    KgenCommand,
    check_format,
    check_output_file,
    completes,
    no_formats_option,
    output_file_option,
    output_format_option,
)
from kgen.errors import KgenError, NestedLauncherError
from kgen.versions import DEFAULT_KUBERNETES_VERSION


def _preset_names() -> list[str]:
    from kgen import presets as presets_mod

    return list(presets_mod.names())


def _render_versions() -> list[str]:
    from kgen.versions import MAX_K8S, MIN_K8S

    return [f"1.{minor}" for minor in range(MIN_K8S, MAX_K8S + 1)]


def _lint_versions() -> list[str]:
    from kgen.schema import supported_versions

    return list(supported_versions())


def _kinds() -> tuple[str, ...]:
    from kgen.spec import KINDS

    return KINDS


RENDER_EPILOG = """\b
Examples:
  kgen render                                   # the 2node-test preset: an all-reduce smoke test
  kgen render --nodes 4 --gpus 8 | kubectl apply -f -     # kgen-train, 4 x 8 (no preset)
  kgen render --preset 64x8 --name llama-70b --image ghcr.io/me/train:1.4 \\
      -- train.py --config configs/70b.yaml
  kgen render --preset 4x1 --kind statefulset -f prod.yaml --set nccl.debug=INFO
  kgen render --gpus 0 --set nprocPerNode=4 -- train.py   # CPU job (gloo)

\b
Layering, later wins: built-in defaults < --preset < -f files (in order) < --set < flags.
Without --preset, 2node-test is the base only when no -f, no shape (--nodes, --gpus) and
no command is given.
Values reference (every key, its type, default and meaning): kgen values
"""


def _fail(message: str, code: int = 2) -> None:
    try:
        click.echo(f"kgen: error: {message}", err=True)
    except OSError:  # stderr is gone too: the exit code is all that is left to say it
        pass
    sys.exit(code)


# A write to stdout failed because the reader went away (EPIPE): kgen says nothing and ends as Unix tools
# do, by SIGPIPE (kgen.__main__ re-raises the signal; in-process callers see this exit code, 128 + 13).
EXIT_BROKEN_PIPE = 141


class ReaderGone(Exception):
    """A write to stdout found no reader (EPIPE); not an OSError, so that click's main passes it on."""


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


RENDER_FORMATS = ("yaml", "json")
LINT_FORMATS = ("text", "json", "junit", "github", "sarif")


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
    """The text of `-f -` (bounded: kgen.layering.MAX_VALUES_BYTES); None when stdin is not named."""
    if "-" not in values_files:
        return None
    from kgen.inputs import read_text
    from kgen.layering import MAX_VALUES_BYTES

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

        from kgen.launchers import nested_launcher, problem

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
    if isinstance(exc, click.MissingParameter) and isinstance(exc.param, click.Argument):
        meta = exc.param.metavar or (exc.param.name or "").upper()
        return f"{cmd}: missing {meta} (see `{cmd} --help`)"
    if isinstance(exc, click.MissingParameter) and isinstance(exc.param, click.Option):
        opt = max(exc.param.opts, key=len)  # `kgen launch` without --name
        example = OPTION_EXAMPLES.get(exc.param.name or "") or exc.param.metavar or "VALUE"
        return f"{opt}: required, e.g. {opt} {example} (see `{cmd} --help`)"
    return f"{exc.format_message()} (see `{cmd} --help`)"


class KgenGroup(click.Group):
    """Maps every error to one line on stderr and an exit code (also under click's CliRunner).

    A group called without a command (bare `kgen`, `kgen presets`) prints its help on stdout and exits 0,
    as kubectl and helm do: nothing was asked for, so nothing failed."""

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

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        try:
            rv = super().main(args=args, prog_name="kgen", complete_var=complete_var, standalone_mode=False, **extra)
        except KgenError as exc:
            _fail(exc.one_line(), exc.exit_code)
        except click.exceptions.NoArgsIsHelpError as exc:
            click.echo(exc.ctx.get_help())
            sys.exit(0)
        except click.exceptions.Abort:
            _fail("aborted", 130)
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


@click.group(cls=KgenGroup, context_settings={"help_option_names": ["-h", "--help"]})
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


@cli.command(epilog=RENDER_EPILOG, context_settings={"max_content_width": 100})
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
    metavar="job|statefulset|jobset",
    shell_complete=completes(_kinds),
    help="Indexed Job (default), StatefulSet, or JobSet (needs the JobSet controller; docs/jobset.md).",
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
    "--set", "sets", metavar="KEY=VALUE", multiple=True, help="Set one value, e.g. nccl.debug=INFO (repeatable)."
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
def render(
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
    env,
    values_files,
    sets,
    kubernetes_version,
    output_format,
    output_file,
    command,
) -> None:
    """Render a headless Service, an Indexed Job (or StatefulSet) and the entrypoint ConfigMap.

    COMMAND is the training script and its arguments that torchrun runs on every worker
    (e.g. `-- train.py --lr 3e-4`); without it the pods run kgen's all-reduce smoke test.
    """
    from kgen.api import RenderRequest, render_with_warnings, stderr_lines

    check_format(output_format, RENDER_FORMATS)
    check_output_file(output_file)
    stdin = read_stdin_values(values_files)
    request = RenderRequest(
        stdin=stdin,
        preset=preset,
        values_files=values_files,
        sets=sets,
        env=env,
        command=command,
        flags={
            "nodes": nodes,
            "gpus": gpus,
            "kind": kind,
            "name": name,
            "namespace": namespace,
            "image": image,
            "queue": queue,
            "cpu": cpu,
            "memory": memory,
        },
        kubernetes_version=kubernetes_version,
        output_format=output_format,
    )
    with corrected_launcher("kgen render"):
        result = render_with_warnings(request)
    for line in stderr_lines(result):  # the self-check's warnings: the manifest is printed, the user told
        click.echo(f"kgen: {line}", err=True)
    write_output(output_file, result.text)


@cli.command()
@click.argument("paths", nargs=-1, metavar="[PATH|DIR|-]...")
@click.option(
    "-f",
    "--filename",
    "filenames",
    metavar="PATH|DIR|-",
    multiple=True,
    help="A file, folder or - (stdin) to lint, as kubectl apply -f takes it (repeatable; same as a PATH).",
)
@click.option(
    "--kubernetes-version",
    default=DEFAULT_KUBERNETES_VERSION,
    show_default=True,
    metavar="1.NN",
    shell_complete=completes(_lint_versions),
    help="Kubernetes version whose schemas and rules apply (1.25 ... 1.37).",
)
@click.option(
    "--skip",
    "skip",
    metavar="KG012,...",
    multiple=True,
    help="Rule ids to skip (comma-separated, repeatable, any case).",
)
@click.option("--strict", is_flag=True, help="Warnings fail too (exit 1), like `helm lint --strict`.")
@output_format_option(
    LINT_FORMATS,
    "text",
    help="Output format: github = GitHub Actions annotations, sarif = SARIF 2.1.0 (code scanning).",
)
@click.option(
    "--engine",
    default="builtin",
    show_default=True,
    metavar="builtin|kubeconform",
    shell_complete=completes(("builtin", "kubeconform")),
    help="Schema engine; kubeconform must be on PATH.",
)
@click.option(
    "--schema-location",
    metavar="DIR|TEMPLATE",
    help="Schemas for CRDs: a folder, or a kubeconform-style template such as "
    "'schemas/{{ .Group }}/{{ .ResourceKind }}_{{ .ResourceAPIVersion }}.json'.",
)
@output_file_option("Write the report to FILE (atomically) instead of stdout.")
@click.option("--list-rules", is_flag=True, help="Print every rule id, severity and summary, then exit.")
@click.option(
    "--explain",
    is_flag=True,
    help="Also report how lint reads each training workload (launcher, pods, DNS, rank source) as info (KG137).",
)
@click.option(
    "--exclude",
    "exclude",
    metavar="GLOB",
    multiple=True,
    help="Leave out files and folders matching GLOB (repeatable; .gitignore-like, relative to the folder given).",
)
@click.option(
    "--summary", is_flag=True, help="End the text report with a summary line (files, documents, findings by severity)."
)
@click.option(
    "--unit",
    default="dir",
    show_default=True,
    metavar="dir|file|tree",
    shell_complete=completes(("dir", "file", "tree")),
    help="What the cross-document rules see together: each folder's own files (and a kustomization's "
    "resources), each file, or everything given.",
)
def lint(
    paths,
    filenames,
    kubernetes_version,
    skip,
    strict,
    output_format,
    engine,
    schema_location,
    output_file,
    list_rules,
    explain,
    exclude,
    summary,
    unit,
) -> None:
    """Check manifests offline: Kubernetes JSON schemas plus the rules schemas miss.

    The cross-document rules see one apply unit at a time: a folder's own files (a Service in
    svc.yaml serves the Job in job.yaml next to it), a kustomization folder with what it lists,
    stdin (--unit file|tree: each file alone, or everything given together).

    \b
    Examples:
      kgen lint deploy/                 # every *.yaml / *.yml below deploy/
      kgen render --preset 4x8 | kgen lint -
      kgen lint --strict -o junit --output-file report.xml manifests/   (CI)
      kgen lint -o github deploy/       # annotations in a GitHub Actions run
      kgen lint --skip KG102,KG111 manifests/
      kgen lint --summary --exclude 'legacy/**' --exclude '*.tmpl.yaml' deploy/
    Rules: docs/lint.md. Per object: annotation kgen.dev/lint-skip: "KG102,KG111".
    Exit 0 clean, 1 on error findings (and warnings with --strict), 2 on usage errors or files
    that are not valid YAML (reported as KG004; the other files are still linted).
    """
    import io

    from kgen.lint.api import LintOptions, lint_paths
    from kgen.output import FORMATS, summary_line, write_findings

    if list_rules:
        from kgen.lint.registry import load_rules
        from kgen.output import rules_listing

        check_format(output_format, LINT_FORMATS)
        if output_format not in ("text", "json"):
            raise KgenError(f'must be text or json with --list-rules, got "{output_format}"', option="-o/--output")
        listing = rules_listing(sorted(load_rules().values(), key=lambda r: r.id), output_format)
        write_output(output_file, listing)
        return
    check_format(output_format, FORMATS)
    check_output_file(output_file)
    if summary and output_format != "text":
        raise KgenError(
            f"goes with the text format only (json always has a summary), got {output_format}", option="--summary"
        )
    skipped = frozenset(s.strip() for item in skip for s in item.split(",") if s.strip())
    opts = LintOptions(
        kubernetes_version=kubernetes_version,
        skip=skipped,
        engine=engine,
        schema_location=schema_location,
        fail_on_warnings=strict,
        explain=explain,
        exclude=tuple(exclude),
        unit=unit,
    )
    inputs = [*filenames, *paths]
    if not inputs and sys.stdin.isatty():
        raise KgenError("no input: pass files or folders, or '-' to read stdin (e.g. kgen render | kgen lint -)")
    result = lint_paths(inputs or ["-"], opts)
    for skipped in result.skipped:
        click.echo(f"kgen: info: {skipped.path}: skipped, {skipped.reason}", err=True)
    buf = io.StringIO()
    write_findings(result, output_format, buf)
    if summary and output_format == "text":
        buf.write(summary_line(result) + "\n")
    write_output(output_file, buf.getvalue())
    if result.input_errors:
        first = result.input_errors[0]
        more = f" (and {len(result.input_errors) - 1} more)" if len(result.input_errors) > 1 else ""
        where = f"{first.file}:{first.line}:{first.column}" if first.line else first.file
        click.echo(f"kgen: error: {where}: {first.message}{more}; the report lists every finding", err=True)
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
@click.argument("name", shell_complete=completes(_preset_names))
def presets_show(name: str) -> None:
    """Print a preset file, ready to copy and use with -f (all keys: `kgen values`)."""
    from kgen import presets as presets_mod

    try:
        preset = presets_mod.load(name)
    except KgenError as exc:
        exc.option = "kgen presets show"  # the NAME argument here, not render's --preset
        raise
    click.echo(preset.text, nl=False)


@cli.command("entrypoint")
@click.option("--path", "show_path", is_flag=True, help="Print where the installed script is instead of its text.")
@output_file_option("Write the script to FILE (safely; - for stdout).")
@no_formats_option("kgen entrypoint")
def entrypoint(show_path: bool, output_file: str | None) -> None:
    """Print the in-pod entrypoint script (kgen_entrypoint.py), for bare metal and custom images.

    \b
    Examples:
      kgen entrypoint --output-file kgen_entrypoint.py  # bare metal: copy to every node, then on each
      python3 kgen_entrypoint.py -- train.py --lr 3e-4  #   with NNODES, NPROC_PER_NODE, NODE_RANK,
                                                        #   MASTER_ADDR, MASTER_PORT and (more than
                                                        #   one node) KGEN_SECRET_FILE set
      kgen entrypoint > docker/kgen_entrypoint.py       # custom image: COPY it in
      kgen entrypoint --path
    It is the same file `kgen render` ships in the <name>-entrypoint ConfigMap (docs/entrypoint.md).
    KGEN_SECRET_FILE names a file holding the run's secret, the same on every node (README, Security);
    `kgen launch` sets all of these itself.
    """
    from kgen.resources import entrypoint_path

    path = entrypoint_path()
    check_output_file(output_file)
    if show_path and output_file:
        raise KgenError("cannot be used with --output-file; choose one", option="--path")
    if show_path:
        click.echo(str(path))
        return
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise KgenError(f"cannot read the bundled entrypoint {path}: {exc.strerror}; reinstall kgen") from None
    write_output(output_file, text)


@cli.command("values")
@output_format_option(("text", "markdown"), "text")
def values_reference(output_format: str) -> None:
    """The values reference: every key of a values file (and of --set), with its type, default and meaning.

    \b
    Nested keys are dotted: nccl.debug is `nccl: {debug: INFO}` in a file, --set nccl.debug=INFO.
    Examples:
      kgen values
      kgen values -o markdown           # the README's table
    """
    from kgen.reference import values_reference as reference

    check_format(output_format, ("text", "markdown"), files=False)
    click.echo(reference(output_format), nl=False)


COMPLETION_SHELLS = ("bash", "zsh", "fish")


@cli.command("completion")
@click.argument(
    "shell",
    metavar="bash|zsh|fish",
    shell_complete=completes(COMPLETION_SHELLS),
)
def completion(shell: str) -> None:
    """Print the shell completion script for kgen (commands, options, preset names, files).

    \b
    Examples:
      source <(kgen completion bash)                            # this shell; bash 4.4+
      kgen completion bash > ~/.local/share/bash-completion/completions/kgen
      kgen completion zsh > "${fpath[1]}/_kgen"                  # then restart zsh
      kgen completion fish > ~/.config/fish/completions/kgen.fish
    The script calls kgen with _KGEN_COMPLETE set (click's completion protocol).
    """
    from click.shell_completion import get_completion_class

    if shell not in COMPLETION_SHELLS:
        raise KgenError(f'must be bash, zsh or fish, got "{shell}"', option="kgen completion")
    cls = get_completion_class(shell)
    assert cls is not None  # click ships all three
    click.echo(cls(cli, {}, "kgen", "_KGEN_COMPLETE").source())


@cli.command("version")
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


from kgen.cli_cluster import register as _register_cluster_verbs  # noqa: E402  (status/logs/stop/submit/list)

_register_cluster_verbs(cli)

from kgen.cli_baremetal import register as _register_baremetal  # noqa: E402  (launch)

_register_baremetal(cli)


def main(argv: list[str] | None = None) -> None:
    cli.main(args=argv)


if __name__ == "__main__":  # pragma: no cover
    main()
