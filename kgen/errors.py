"""kgen's exceptions. Nothing below cli.py prints or exits: it raises one of these.

Exit codes (mapped in cli.py only): 0 ok, 1 lint findings of error severity, 2 bad input
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
