"""Option decorators every kgen command shares (contract C1: kubectl's output convention).

``-o/--output FORMAT`` names a format, everywhere; ``--format`` is the same option under its old name.
A file is written with ``--output-file FILE`` (kgen.resources.write_file: never destroys what is at the
path). A ``-o`` value that is not one of the command's formats is refused (exit 2) with the hint to use
``--output-file``, so ``kgen lint -o report.json`` can never silently become a file named like a format
or a format named like a file. Imported by kgen.cli and kgen.cli_cluster (this module imports click).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from kgen.errors import UsageError

OUTPUT_OPTION = "-o/--output"


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
    raise UsageError(f'must be an output format, {choices}; got "{value}"', option=OUTPUT_OPTION, hint=hint)


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
