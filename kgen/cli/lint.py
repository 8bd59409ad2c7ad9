"""`kgen lint`: paths and flags -> kgen.lint -> a report on stdout (or --output-file), exit 0/1/2."""

from __future__ import annotations

import sys

import click

from kgen.cli.options import (
    LINT_FORMATS,
    KgenCommand,
    check_format,
    check_output_file,
    completes,
    output_file_option,
    output_format_option,
    write_output,
)
from kgen.errors import KgenError
from kgen.versions import DEFAULT_KUBERNETES_VERSION


def _lint_versions() -> list[str]:
    from kgen.schema import supported_versions

    return list(supported_versions())


@click.command(cls=KgenCommand)
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
@click.option(
    "--config",
    "config_file",
    metavar="FILE",
    type=click.Path(dir_okay=False),
    help="Read the lint settings from FILE (.kgen.yaml, or pyproject.toml's [tool.kgen.lint]) instead of the one "
    "found upward from the first path.",
)
@click.option("--no-config", is_flag=True, help="Ignore .kgen.yaml and pyproject.toml's [tool.kgen.lint].")
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
    config_file,
    no_config,
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

    from kgen import sdk
    from kgen.output import FORMATS, checked_line, summary_line, write_findings

    if list_rules:
        from kgen.output import rules_listing

        check_format(output_format, LINT_FORMATS)
        if output_format not in ("text", "json"):
            raise KgenError(f'must be text or json with --list-rules, got "{output_format}"', option="-o/--output")
        listing = rules_listing(sdk.lint_rules(), output_format)
        write_output(output_file, listing)
        return
    check_format(output_format, FORMATS)
    check_output_file(output_file)
    if summary and output_format != "text":
        raise KgenError(
            f"goes with the text format only (json always has a summary), got {output_format}", option="--summary"
        )
    inputs = [*filenames, *paths]
    if not inputs and sys.stdin.isatty():
        raise KgenError("no input: pass files or folders, or '-' to read stdin (e.g. kgen render | kgen lint -)")
    cfg = _config(config_file, no_config, inputs)
    if cfg is not None:  # flags override the file; --skip and --exclude add to it
        source = click.get_current_context().get_parameter_source
        if cfg.kubernetes_version and source("kubernetes_version") is click.core.ParameterSource.DEFAULT:
            kubernetes_version = cfg.kubernetes_version
        if cfg.unit and source("unit") is click.core.ParameterSource.DEFAULT:
            unit = cfg.unit
        skip = (*cfg.skip, *skip)
        exclude = (*cfg.exclude, *exclude)
    request = sdk.LintRequest(
        inputs or ["-"],
        kubernetes_version=kubernetes_version,
        skip=skip,
        strict=strict,
        engine=engine,
        schema_location=schema_location,
        explain=explain,
        exclude=exclude,
        unit=unit,
    )
    result = sdk.lint(request)
    if cfg is not None:
        result.findings = cfg.apply(result.findings)
    for skipped in result.skipped:
        click.echo(f"kgen: info: {skipped.path}: skipped, {skipped.reason}", err=True)
    buf = io.StringIO()
    write_findings(result, output_format, buf)
    if summary and output_format == "text":
        buf.write(summary_line(result) + "\n")
    elif output_format == "text" and not result.findings and output_file is None and sys.stdout.isatty():
        buf.write(checked_line(result) + "\n")  # a clean run in a terminal says what it checked, as ruff does
    write_output(output_file, buf.getvalue())
    if result.input_errors:
        first = result.input_errors[0]
        more = f" (and {len(result.input_errors) - 1} more)" if len(result.input_errors) > 1 else ""
        where = f"{first.file}:{first.line}:{first.column}" if first.line else first.file
        click.echo(f"kgen: error: {where}: {first.message}{more}; the report lists every finding", err=True)
    sys.exit(result.exit_code)


def _config(config_file: str | None, no_config: bool, inputs: list[str]):
    """The lint configuration that applies: --config FILE, else the one found upward from the first path."""
    from kgen.lint import config

    if config_file:
        if no_config:
            raise KgenError("goes with --config or without it, not both", option="--no-config")
        return config.load(config_file)
    if no_config:
        return None
    first = next((p for p in inputs if p != "-"), ".")
    found = config.find(first)
    return config.load(found) if found else None
