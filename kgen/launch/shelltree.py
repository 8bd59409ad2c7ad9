"""The tree a parsed shell script is (``kgen.launch.shell.parse`` builds it): words made of parts, simple
and compound commands, pipelines, and-or lists and sequences, and the walks over it a lint rule asks with
(every simple command in the order bash runs them, every compound command, what encloses a command).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field


class ShellSyntaxError(ValueError):
    """The script is not valid shell syntax (bash refuses it too)."""


# --- the tree ----------------------------------------------------------------------------------


@dataclass
class Part:
    """One piece of a word: ``lit`` (quote-removed text), ``param`` ($x, ${x...}), ``cmdsub``
    ($(...) or `...`, with its parsed ``script``), ``arith`` ($((...))) or ``procsub`` (<(...))."""

    kind: str
    text: str  # lit: the literal text; otherwise the source text ("$HOME", "${R:-0}", "$(date)")
    quoted: bool = False  # inside double quotes (no field splitting)
    name: str = ""  # param: the parameter's name ("HOME", "1", "@")
    op: str = ""  # param: the operator of ${name<op>word} (":-", "-", ":=", "+", ...)
    arg: Word | None = None  # param: the word after the operator
    script: Script | None = None  # cmdsub/procsub: the parsed inner script


@dataclass
class Word:
    parts: list[Part]
    raw: str  # the source text of the word

    @property
    def text(self) -> str:
        """The word after quote removal, with every expansion kept as its source text:
        ``"--nnodes=$NNODES"`` for ``--nnodes="$NNODES"``."""
        return "".join(p.text for p in self.parts)

    @property
    def literal(self) -> str | None:
        """The word's value when it has no expansion, else None."""
        if all(p.kind == "lit" for p in self.parts):
            return "".join(p.text for p in self.parts)
        return None

    @property
    def expansions(self) -> list[Part]:
        return [p for p in self.parts if p.kind != "lit"]


@dataclass
class Redirect:
    op: str  # ">", ">>", "<", "2>&1" ... (the operator, with an io number in front if given)
    target: Word | None
    heredoc: str | None = None  # the body of a here-document
    quoted: bool = False  # a here-document whose delimiter is quoted: its body is not expanded

    def script_text(self) -> str | None:
        """The text a shell reading this here-document (or here-string) as its script gets: an
        unquoted delimiter's body has its ``\\$``, ``\\``` and ``\\\\`` escapes and line continuations
        removed by the shell that writes it; expansions are kept as written."""
        if self.heredoc is not None:
            if self.quoted:
                return self.heredoc
            return re.sub(r"\\\n|\\([$`\\])", lambda m: m.group(1) or "", self.heredoc)
        if self.op.endswith("<<<") and self.target is not None:
            return self.target.text + "\n"
        return None


@dataclass
class Simple:
    """A simple command: ``A=1 B=2 cmd word... >file``."""

    assigns: list[Word] = field(default_factory=list)
    words: list[Word] = field(default_factory=list)
    redirects: list[Redirect] = field(default_factory=list)
    line: int = 1  # 1-based line of the script where it starts

    @property
    def argv(self) -> list[str]:
        return [w.text for w in self.words]


@dataclass
class Pipeline:
    commands: list[Node]
    negated: bool = False
    stderr: list[bool] = field(default_factory=list)  # |& after command i


@dataclass
class AndOr:
    """``first [&&|| next]...``: ``items[0]`` has op ""."""

    items: list[tuple[str, Pipeline]]


@dataclass
class Sequence:
    """Commands run one after the other; ``background[i]``: item i ended with ``&``."""

    items: list[AndOr]
    background: list[bool] = field(default_factory=list)


@dataclass
class Compound:
    """``( )`` subshell, ``{ }`` group, ``if``, ``while``/``until``, ``for``, ``case``, ``function``,
    ``[[ ]]`` / ``(( ))`` tests (as ``test``, with ``words``)."""

    kind: str  # subshell | group | if | while | until | for | case | function | test | arith
    bodies: list[Sequence] = field(default_factory=list)  # if: cond, then, [cond, then]..., [else]
    words: list[Word] = field(default_factory=list)  # for: the list; case: the subject; test: its words
    name: str = ""  # for: the variable; function: its name
    redirects: list[Redirect] = field(default_factory=list)
    line: int = 1


Node = Simple | Compound


@dataclass
class Script:
    body: Sequence
    source: str

    def simple_commands(self) -> Iterator[Simple]:
        """Every simple command, in source order, command substitutions included (before the
        command whose words hold them, as bash runs them)."""
        yield from walk_seq(self.body)


def unclosed_tests(script: Script) -> Iterator[tuple[Simple, str]]:
    """``[`` commands whose last word is not ``]`` (``[ $a == x || [ $b == y]``): bash's ``[`` prints "missing
    ']'" and returns 2, so the test is never true. (command, the command as written)"""
    for cmd in script.simple_commands():
        words = [w.raw for w in cmd.words]
        if words and words[0] == "[" and words[-1] != "]":
            yield cmd, " ".join(words)


def walk_seq(seq: Sequence) -> Iterator[Simple]:
    for ao in seq.items:
        for _, pipe in ao.items:
            for node in pipe.commands:
                yield from walk_node(node)


def walk_node(node: Node) -> Iterator[Simple]:
    if isinstance(node, Simple):
        for w in node.words + [r.target for r in node.redirects if r.target] + node.assigns:
            yield from _walk_word(w)
        yield node
        return
    for w in node.words:
        yield from _walk_word(w)
    for body in node.bodies:
        yield from walk_seq(body)


def _walk_word(word: Word) -> Iterator[Simple]:
    for p in word.parts:
        if p.script is not None:
            yield from p.script.simple_commands()
        if p.arg is not None:
            yield from _walk_word(p.arg)


def compounds(script: Script) -> Iterator[Compound]:
    """Every compound command of ``script`` (loops, ifs, groups ...), outermost first, command
    substitutions included."""
    yield from _compounds_seq(script.body)


def _compounds_seq(seq: Sequence) -> Iterator[Compound]:
    for ao in seq.items:
        for _, pipe in ao.items:
            for node in pipe.commands:
                yield from _compounds_node(node)


def _compounds_node(node: Node) -> Iterator[Compound]:
    words = node.words + node.assigns if isinstance(node, Simple) else node.words
    for w in words:
        for p in w.parts:
            if p.script is not None:
                yield from _compounds_seq(p.script.body)
    if isinstance(node, Compound):
        yield node
        for body in node.bodies:
            yield from _compounds_seq(body)


def enclosing(script: Script) -> dict[int, tuple[str, ...]]:
    """For every simple command of ``script`` (by ``id``), the compound commands around it, outermost
    first: ``("while",)`` for a command in a loop's body or condition, ``("if",)`` in a branch or
    condition, ``("cmdsub",)`` inside a command substitution, ``("function",)`` in a function's body.
    ``("if-cond",)`` / ``("loop-cond",)`` mark a command in an ``if``'s / a loop's condition."""
    out: dict[int, tuple[str, ...]] = {}
    _enclose_seq(script.body, (), out)
    return out


def _enclose_seq(seq: Sequence, stack: tuple[str, ...], out: dict) -> None:
    for ao in seq.items:
        for _, pipe in ao.items:
            for node in pipe.commands:
                _enclose_node(node, stack, out)


def _enclose_node(node: Node, stack: tuple[str, ...], out: dict) -> None:
    if isinstance(node, Simple):
        for w in node.words + [r.target for r in node.redirects if r.target] + node.assigns:
            _enclose_word(w, stack, out)
        out[id(node)] = stack
        return
    for w in node.words:
        _enclose_word(w, stack, out)
    for k, body in enumerate(node.bodies):
        inner = stack + (node.kind,)
        if node.kind == "if" and k % 2 == 0 and k != len(node.bodies) - 1:
            inner += ("if-cond",)
        elif node.kind in ("while", "until") and k == 0:
            inner += ("loop-cond",)
        _enclose_seq(body, inner, out)


def _enclose_word(word: Word, stack: tuple[str, ...], out: dict) -> None:
    for p in word.parts:
        if p.script is not None:
            _enclose_seq(p.script.body, stack + ("cmdsub",), out)
        if p.arg is not None:
            _enclose_word(p.arg, stack, out)
