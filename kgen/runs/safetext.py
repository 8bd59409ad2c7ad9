"""Text from a run, made safe for a terminal: what `kgen logs` and `kgen status` print never moves the cursor,
rewrites the screen or a window title, or forges a line.

A run's logs hold what its processes wrote, and through them what a stranger managed to have logged (issue
23.4: the entrypoint escapes every peer value itself, and these functions are the reader's second line).
Escaped, as Python's repr writes them: the C0 controls but tab, DEL, the C1 controls (ESC, CSI and OSC
sequences start with these), the line and paragraph separators, and the bidirectional overrides and
isolates (which reorder what a line appears to say). Lines are split on "\\n" only: str.splitlines() would
also split on \\v, \\f, \\x1c-\\x1e, \\x85 and U+2028/9, which a single logged line may contain, and so
forge a second line. Everything else, any language's letters and symbols included, passes as it is.
"""

from __future__ import annotations

import re

UNSAFE = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")


def _escape(m: re.Match) -> str:
    return repr(m.group())[1:-1]


def printable(text: str) -> str:
    """``text`` with every unsafe character escaped (``\\x1b``, ``\\r``, ``\\u202e``)."""
    return UNSAFE.sub(_escape, text) if UNSAFE.search(text) else text


def lines(text: str) -> list[str]:
    """The lines of ``text`` (split on "\\n" only, a trailing "\\r" dropped), each printable."""
    out = text.split("\n")
    if out and out[-1] == "":
        out.pop()
    return [printable(line[:-1] if line.endswith("\r") else line) for line in out]
