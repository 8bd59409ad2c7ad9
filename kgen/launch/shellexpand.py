"""Expansion of parsed shell words: the fields a word becomes (parameters, positional parameters, command
substitutions through a callback, field splitting) after bash's brace expansion (``{a,b}``, ``{1..3}``).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from kgen.launch.shelltree import Part, Word
from kgen.launch.shellwords import NAME

# --- expansion ----------------------------------------------------------------------------------


def expand(
    word: Word,
    params: dict[str, str] | None = None,
    positional: list[str] | None = None,
    cmdsub: Callable[[Part], str | None] | None = None,
    split: bool = True,
) -> list[str] | None:
    """The fields ``word`` expands to, as the shell computes them: parameters from ``params`` and
    ``positional`` ($0, $1 ..., "$@"), command substitutions from ``cmdsub``; field splitting on
    blanks for unquoted expansions (no globbing, as with ``set -f``), after brace expansion
    (``{a,b}``, ``{1..3}``). None when a value is unknown."""
    if any(p.kind == "lit" and not p.quoted and "{" in p.text for p in word.parts):
        words = brace_expand(word)
        if words is None:
            return None
        if len(words) != 1 or words[0] is not word:
            out: list[str] = []
            for w in words:
                got = _expand_one(w, params, positional, cmdsub, split)
                if got is None:
                    return None
                out.extend(got)
            return out
    return _expand_one(word, params, positional, cmdsub, split)


def _expand_one(
    word: Word,
    params: dict[str, str] | None,
    positional: list[str] | None,
    cmdsub: Callable[[Part], str | None] | None,
    split: bool,
) -> list[str] | None:
    fields: list[list] = [["", False]]  # [text, keep even if empty]

    def new_field() -> None:
        if fields[-1][0] or fields[-1][1]:
            fields.append(["", False])

    def add(text: str, quoted: bool) -> None:
        if quoted or not split:
            fields[-1][0] += text
            fields[-1][1] = True
            return
        if not text:
            return
        if text[0] in " \t\n":
            new_field()
        tokens = text.split()
        for k, token in enumerate(tokens):
            if k:
                new_field()
            fields[-1][0] += token
        if text[-1] in " \t\n":
            new_field()

    for part in word.parts:
        if part.kind == "lit":
            fields[-1][0] += part.text
            fields[-1][1] = fields[-1][1] or part.quoted
            continue
        if part.kind == "param" and part.name in ("@", "*") and not part.op and positional is not None:
            args = positional[1:]
            if part.quoted and part.name == "@":
                for k, a in enumerate(args):
                    if k:
                        fields.append(["", True])
                    fields[-1][0] += a
                    fields[-1][1] = True
            else:
                add(" ".join(args), part.quoted)
            continue
        value = _value(part, params, positional, cmdsub)
        if value is None:
            return None
        add(value, part.quoted)
    return [text for text, keep in fields if text or keep]


def _value(part: Part, params: dict | None, positional: list | None, cmdsub: Callable | None) -> str | None:
    if part.kind in ("cmdsub", "procsub"):
        got = cmdsub(part) if cmdsub is not None else None
        return None if got is None else got.rstrip("\n")
    if part.kind != "param" or part.op.startswith("?") or part.op in ("#", "!"):
        return None
    name = part.name
    value: str | None
    if name.isdigit() and positional is not None:
        n = int(name)
        value = positional[n] if n < len(positional) else ""
    elif name == "#" and positional is not None:
        value = str(max(len(positional) - 1, 0))
    elif params is not None and name in params:
        value = params[name]
    elif params is not None and NAME.fullmatch(name) and part.op:
        value = None  # unset: the operator decides
    else:
        return None
    op = part.op
    if not op:
        return value
    unset_or_null = value is None or (op.startswith(":") and value == "")
    if op.endswith("-") or op.endswith("="):
        if unset_or_null:
            got = expand(part.arg, params, positional, cmdsub, split=False) if part.arg else [""]
            return None if got is None else "".join(got)
        return value
    if op.endswith("+"):
        if unset_or_null:
            return ""
        got = expand(part.arg, params, positional, cmdsub, split=False) if part.arg else [""]
        return None if got is None else "".join(got)
    return value


# --- brace expansion -------------------------------------------------------------------------------

MAX_BRACE_FIELDS = 10_000  # `{1..1000000000}`: bash would try; lint gives up (the value is unknown)
_SEQ_NUM = re.compile(r"^([+-]?\d+)\.\.([+-]?\d+)(?:\.\.([+-]?\d+))?$")
_SEQ_CHR = re.compile(r"^([A-Za-z])\.\.([A-Za-z])(?:\.\.([+-]?\d+))?$")


def brace_expand(word: Word) -> list[Word] | None:
    """The words bash's brace expansion makes of ``word`` (``a{b,c}d`` -> ``abd acd``, ``{1..3}``,
    ``{01..10}``, ``{a..e..2}``; quoted braces and commas, ``{}``, ``{a}`` and ``${`` stay as they
    are), in bash's order; the word itself when there is nothing to expand. None when it would make
    more than ``MAX_BRACE_FIELDS`` words."""
    tokens: list = []
    for part in word.parts:
        if part.kind == "lit" and not part.quoted:
            tokens.extend(part.text)  # one str per unquoted character: the only place braces count
        else:
            tokens.append(part)
    if not _has_brace(tokens):
        return [word]
    out: list[list] = []
    if not _brace(tokens, out):
        return None
    return [_to_word(t) for t in out]


def _has_brace(tokens: list) -> bool:
    return any(t == "{" for t in tokens) and any(t == "}" for t in tokens)


def _brace(tokens: list, out: list[list]) -> bool:
    """Append the expansions of ``tokens`` to ``out``; False past MAX_BRACE_FIELDS."""
    found = _first_brace(tokens)
    if found is None:
        out.append(tokens)
        return len(out) <= MAX_BRACE_FIELDS
    start, end, alternatives = found
    pre, post = tokens[:start], tokens[end + 1 :]
    for alt in alternatives:
        if not _brace(pre + alt + post, out):
            return False
    return True


def _first_brace(tokens: list) -> tuple[int, int, list] | None:
    """(index of '{', of its '}', the alternatives) of the first valid brace expression."""
    for i, t in enumerate(tokens):
        if t != "{" or (i and tokens[i - 1] == "$"):
            continue
        depth, commas, j = 0, [], i + 1
        while j < len(tokens):
            u = tokens[j]
            if u == "{":
                depth += 1
            elif u == "}":
                if depth == 0:
                    break
                depth -= 1
            elif u == "," and depth == 0:
                commas.append(j)
            j += 1
        if j >= len(tokens):
            continue
        if commas:
            bounds = [i, *commas, j]
            return i, j, [tokens[a + 1 : b] for a, b in zip(bounds, bounds[1:], strict=False)]
        inner = tokens[i + 1 : j]
        if all(isinstance(u, str) for u in inner):
            seq = _sequence("".join(inner))
            if seq is not None:
                if len(seq) > MAX_BRACE_FIELDS:
                    return i, j, [list("x")] * (MAX_BRACE_FIELDS + 1)
                return i, j, [list(x) for x in seq]
    return None


def _sequence(text: str) -> list[str] | None:
    """The items of a sequence expression ``x..y[..incr]``, or None if ``text`` is not one."""
    m = _SEQ_NUM.match(text)
    if m:
        a, b = int(m.group(1)), int(m.group(2))
        step = abs(int(m.group(3))) if m.group(3) else 1
        step = step or 1
        if abs(b - a) // step + 1 > MAX_BRACE_FIELDS:
            return ["x"] * (MAX_BRACE_FIELDS + 1)
        width = 0
        for raw in (m.group(1), m.group(2)):
            digits = raw.lstrip("+-")
            if len(digits) > 1 and digits.startswith("0"):
                width = max(width, len(m.group(1)), len(m.group(2)))
        values = range(a, b + 1, step) if a <= b else range(a, b - 1, -step)
        return [f"{v:0{width}d}" if width else str(v) for v in values]
    m = _SEQ_CHR.match(text)
    if m:
        a, b = ord(m.group(1)), ord(m.group(2))
        step = abs(int(m.group(3))) if m.group(3) else 1
        step = step or 1
        values = range(a, b + 1, step) if a <= b else range(a, b - 1, -step)
        return [chr(v) for v in values]
    return None


def _to_word(tokens: list) -> Word:
    parts: list[Part] = []
    lit: list[str] = []
    for t in tokens:
        if isinstance(t, str):
            lit.append(t)
            continue
        if lit:
            parts.append(Part("lit", "".join(lit)))
            lit = []
        parts.append(t)
    if lit or not parts:
        parts.append(Part("lit", "".join(lit)))
    return Word(parts, "".join(p.text for p in parts))
