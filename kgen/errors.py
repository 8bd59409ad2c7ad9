"""kgen's exceptions. Nothing outside kgen.cli prints or exits: it raises one of these.

Exit codes (mapped in kgen.cli.root only): 0 ok, 1 lint findings of error severity, 2 bad input
(usage, values, unreadable or unparsable files).
"""

from __future__ import annotations


class KgenError(Exception):
    """Base class. ``str(err)`` is one line: what is wrong and how to fix it."""

    exit_code = 2

    def __init__(self, message: str, *, option: str | None = None, hint: str | None = None):
        self.message = message
        self.option = option
        self.hint = hint
        super().__init__(self.one_line())

    def one_line(self) -> str:
        text = f"{self.option}: {self.message}" if self.option else self.message
        if self.hint:
            text = f"{text} ({self.hint})"
        return " ".join(text.split("\n"))


class UsageError(KgenError):
    """Bad flags, values, presets or --set keys."""


class InputError(KgenError):
    """A file that cannot be read or parsed (values files, manifests given to lint)."""


class RenderError(KgenError):
    """The templates produced something kgen refuses to print (a bug or an impossible spec)."""


class NestedLauncherError(UsageError):
    """The training command is itself a launcher (torchrun, accelerate launch, ...): kgen's entrypoint
    starts torchrun already. ``use`` is the corrected call (the CLI rewrites it into the full command
    line the user typed); ``command`` and ``add`` are its parts: the training command without the
    launcher, and the kgen options that carry what the launcher was asked for."""

    def __init__(self, problem: str, *, option: str, use: str, command: list[str], add: list[str], notes: list[str]):
        self.problem, self.use, self.command, self.add, self.notes = problem, use, command, add, notes
        super().__init__(problem, option=option)

    def one_line(self) -> str:
        notes = "".join(f"; {n}" for n in getattr(self, "notes", []))
        return f"{self.option}: {self.problem}{notes}; use: {getattr(self, 'use', '')}"
