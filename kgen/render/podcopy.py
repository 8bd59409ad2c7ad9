"""The entrypoint as ``kgen render`` ships it: the pod copy of ``entrypoint/kgen_entrypoint.py``.

Every manifest carries the entrypoint in its ConfigMap, and client-side ``kubectl apply`` stores the whole
object once more in its ``last-applied-configuration`` annotation, whose size the API server caps (all
annotations of an object: 256 KiB). So the pods get what they run and nothing else (README, "Size"):

* the sections between a line starting ``# >>> not in pods`` and one starting ``# <<< not in pods`` (the
  bare-metal run directory of ``kgen launch``, the Slurm task's supervisor: the pods never use them) are
  left out;
* comments and the docstrings of functions and classes are left out (the module's docstring stays: it
  says what the file is, its environment and its exit codes);
* indentation is one space per level instead of four (a tab would cost two bytes in JSON);
* every line keeps its number: what is left out becomes an empty line, so a traceback's line N in a pod
  is line N of ``kgen entrypoint``'s file of the same kgen version;
* line 1 says what the file is and where the whole one is.

A pure function of the source text: no tokenizer or parser of the running Python is used (they differ
between versions), so the same kgen gives the same bytes everywhere. ``tests/test_size_budget.py`` checks
that the result is the same program (the same syntax tree but for the docstrings) and within budget.
Bare metal (``kgen launch``, ``kgen entrypoint``) gets the whole file, as before.
"""

from __future__ import annotations

import re
from typing import NamedTuple

OMIT_BEGIN = "# >>> not in pods"
OMIT_END = "# <<< not in pods"
HEADER = (
    "# kgen_entrypoint.py as kgen render ships it: comments, docstrings and the bare-metal and Slurm sections "
    "left out, one space per indentation level, line numbers kept; the whole file: `kgen entrypoint`"
)

# One pass over the text, left to right: a string (triple-quoted first) or a comment, whichever starts first.
# A backslash escapes the next character inside a string, in raw strings too (as Python's tokenizer reads them).
_TOKENS = re.compile(
    r'"""[^"\\]*(?:(?:\\.|"(?!""))[^"\\]*)*"""'
    r"|'''[^'\\]*(?:(?:\\.|'(?!''))[^'\\]*)*'''"
    r'|"[^"\\\n]*(?:\\.[^"\\\n]*)*"'
    r"|'[^'\\\n]*(?:\\.[^'\\\n]*)*'"
    r"|(?P<comment>#[^\n]*)",
    re.DOTALL,
)
_QUOTE = re.compile(r"""['"]""")
_LONE_STRING = re.compile(r"[ \t]*[rRuU]?S[ \t]*")  # a line that is one string, in the mask
_HEADER_START = re.compile(r"(?:async\s+)?(?:def|class)\s")


class PodCopyError(ValueError):
    """The source cannot be cut safely (an unclosed string or section): the file is kgen's own, so this is a bug."""


class _Masked(NamedTuple):
    code: list[str]  # the source's lines without comments (and without the whitespace before them)
    mask: list[str]  # the same lines with every string replaced by "S" (a multi-line one: "S", then empty lines)
    spans: dict[int, int]  # line index -> the last line index of the multi-line string that starts on it


def _mask(source: str) -> _Masked:
    code: list[str] = []
    mask: list[str] = []
    spans: dict[int, int] = {}
    commented: list[int] = []
    done = row = 0
    for m in _TOKENS.finditer(source):
        a, b = m.span()
        gap = source[done:a]
        code.append(gap)
        mask.append(gap)
        row += gap.count("\n")
        if m.group("comment") is not None:
            commented.append(row)
        else:
            breaks = source.count("\n", a, b)
            code.append(m.group())
            mask.append("S" + "\n" * breaks)
            if breaks:
                spans[row] = row + breaks
                row += breaks
        done = b
    code.append(source[done:])
    mask.append(source[done:])
    masked = "".join(mask)
    open_quote = _QUOTE.search(masked)
    if open_quote:
        raise PodCopyError(f"line {masked.count(chr(10), 0, open_quote.start()) + 1}: a string that never ends")
    lines = "".join(code).split("\n")
    for row in commented:  # the whitespace before a comment goes with it
        lines[row] = lines[row].rstrip()
    return _Masked(lines, masked.split("\n"), spans)


def _balance(line: str) -> int:
    """Closing minus opening brackets of a masked line."""
    return line.count(")") + line.count("]") + line.count("}") - line.count("(") - line.count("[") - line.count("{")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _docstrings(m: _Masked) -> list[tuple[int, int]]:
    """(first, last) line indexes of the docstrings of functions and classes with more than that in their body."""
    mask = m.mask
    found = []
    for first, line in enumerate(mask):
        if not _LONE_STRING.fullmatch(line):
            continue
        last = m.spans.get(first, first)
        prev = first - 1
        while prev >= 0 and not mask[prev].strip():
            prev -= 1
        if prev < 0 or not mask[prev].rstrip().endswith(":"):
            continue
        start, bal = prev, _balance(mask[prev])
        while bal > 0 and start > 0:  # up to the line where the header's brackets open
            start -= 1
            bal += _balance(mask[start])
        while start > 0 and mask[start - 1].rstrip().endswith("\\"):
            start -= 1
        if not _HEADER_START.match(mask[start].lstrip()):
            continue
        after = last + 1
        while after < len(mask) and not mask[after].strip():
            after += 1
        own = _indent(line)
        if own > _indent(mask[start]) and after < len(mask) and _indent(mask[after]) == own:
            found.append((first, last))
    return found


def _omitted(lines: list[str]) -> list[tuple[int, int]]:
    """(first, last) line indexes of the sections between the markers, markers included."""
    found, begin = [], None
    for i, text in enumerate(lines):
        if text.startswith(OMIT_BEGIN):
            if begin is not None:
                raise PodCopyError(f"line {i + 1}: {OMIT_BEGIN!r} inside a section already left out")
            begin = i
        elif text.startswith(OMIT_END):
            if begin is None:
                raise PodCopyError(f"line {i + 1}: {OMIT_END!r} without {OMIT_BEGIN!r} before it")
            found.append((begin, i))
            begin = None
    if begin is not None:
        raise PodCopyError(f"line {begin + 1}: {OMIT_BEGIN!r} without {OMIT_END!r} after it")
    return found


def pod_copy(source: str) -> str:
    """The entrypoint source as the ConfigMap carries it (see the module docstring); raises PodCopyError."""
    if not source.endswith("\n"):
        source += "\n"
    original = source.split("\n")
    m = _mask(source)
    lines = m.code
    if len(lines) != len(original):
        raise PodCopyError("the comments could not be cut line by line")
    if lines[0]:
        raise PodCopyError("line 1 is code: the pod copy says what it is there (a comment or #! line belongs there)")
    for first, last in _omitted(original) + _docstrings(m):
        lines[first : last + 1] = [""] * (last + 1 - first)
    inside = {row for first, last in m.spans.items() for row in range(first + 1, last + 1)}
    for row, line in enumerate(lines):
        if row not in inside:  # one space per level of four (inside a string every space is the string's)
            lines[row] = _one_space(line)
    lines[0] = HEADER
    return "\n".join(lines)


def _one_space(line: str) -> str:
    text = line.lstrip(" ")
    n = len(line) - len(text)
    return " " * (n // 4 + n % 4) + text
