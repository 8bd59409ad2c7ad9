"""`kgen completion bash|zsh|fish`: click's completion script for the whole kgen command."""

from __future__ import annotations

import click

from kgen.cli.options import KgenCommand, completes
from kgen.errors import KgenError

COMPLETION_SHELLS = ("bash", "zsh", "fish")


@click.command("completion", cls=KgenCommand)
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
    root = click.get_current_context().find_root().command  # the kgen group, not imported: arrows go one way
    click.echo(cls(root, {}, "kgen", "_KGEN_COMPLETE").source())
