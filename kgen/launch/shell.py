"""A POSIX/bash shell parser for the scripts containers run (``sh -c``, ``bash -lc``, ...).

Written by hand, as strict as the shell where it matters to lint: words are split exactly as
bash splits them (quotes, backslashes, ``$'...'``, line continuations, comments), ``$(...)``,
backquotes, ``${...}`` and ``$((...))`` stay inside their word and command substitutions are
parsed as scripts of their own, and the command structure (``;``, ``&``, ``&&``, ``||``,
pipelines, ``!``, subshells, ``{ }`` groups, ``if``/``while``/``until``/``for``/``case``,
functions, ``[[ ]]``, ``(( ))``, redirections and here-documents) is kept as a small tree, so
a rule can ask what runs after a command and what its exit status becomes. The tests compare the
words of every simple command with what real ``bash`` passes to the program.

Why not a library (measured by ``bench/shell_parsers`` on lint's corpus, docs/lint.md): bashlex is
GPL (kgen is Apache-2.0) and refuses ``$((...))``, ``case``, ``[[ ]]`` and most here-documents (100 of
112 verdicts agree with ``bash -n``); tree-sitter-bash (MIT) recovers from errors, so ``fi`` alone
parses (107 of 112), and leaves quote removal, escapes, ``"$@"`` and brace expansion to the caller,
which is most of the work here; this module agrees with bash on all 112, has no native dependency and
no import cost on the render path (tree-sitter is ~4x faster: 3 vs 10 ms for the whole corpus).

An unterminated quote, substitution or here-document raises ``ShellSyntaxError``: bash refuses
such a script too.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\[[^\]]*\])?\+?=")
_SPECIAL = "@*#?$!-0123456789"
_REDIRECT = re.compile(r"(\d+|\{[A-Za-z_]\w*\})?(&>>|&>|>>|<<<|<<-|<<|<&|>&|<>|>\||<|>)")
_META = set(" \t\n;&|()<>")
RESERVED = {
    "if",
    "then",
    "elif",
    "else",
    "fi",
    "do",
    "done",
    "case",
    "esac",
    "while",
    "until",
    "for",
    "in",
    "{",
    "}",
    "!",
}
_CLOSERS = {"then", "elif", "else", "fi", "do", "done", "esac", "}"}
_DECLARATIONS = {"declare", "typeset", "local", "export", "readonly"}
_OPERATORS = ("&&", "||", ";;&", ";;", ";&", "|&", "&>>", "&>", ">>", "<<<", "<<-", "<<", "<&", ">&", "<>", ">|")


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


# --- parser ---------------------------------------------------------------------------------------


def parse(source: str) -> Script:
    """Parse a script; ``ShellSyntaxError`` when bash would refuse it."""
    p = _Parser(source)
    body = p.sequence(())
    p.skip_blank(newlines=True)
    if p.i < len(p.s):
        raise ShellSyntaxError(f"unexpected {p.peek_token()!r} at line {p.line_at(p.i)}")
    return Script(body, source)


_MAX_NESTING = 100  # subshells, groups, if/while/for/case inside each other (bash has no limit; we bound it)


class _Parser:
    def __init__(self, s: str, depth: int = 0, newlines: list[int] | None = None) -> None:
        self.s = s
        self.i = 0
        self.depth = depth
        self.nesting = 0
        self._newlines = newlines  # offsets of "\n" in s, computed once (line numbers in O(log n))
        self.heredocs: list[tuple[Redirect, str, bool, bool]] = []  # pending: redirect, delimiter, strip tabs, quoted
        if depth > 50:
            raise ShellSyntaxError("substitutions nested too deeply")

    # -- characters
    def line_at(self, i: int) -> int:
        if self._newlines is None:
            self._newlines = [m.start() for m in re.finditer("\n", self.s)]
        return bisect.bisect_left(self._newlines, i) + 1

    def peek(self, k: int = 0) -> str:
        j = self.i + k
        return self.s[j] if j < len(self.s) else ""

    def startswith(self, text: str) -> bool:
        return self.s.startswith(text, self.i)

    def skip_blank(self, newlines: bool = False) -> None:
        """Skip blanks, line continuations and comments (and newlines, reading pending here-documents)."""
        while self.i < len(self.s):
            c = self.s[self.i]
            if c in " \t":
                self.i += 1
            elif c == "\\" and self.peek(1) == "\n":
                self.i += 2
            elif c == "#":
                while self.i < len(self.s) and self.s[self.i] != "\n":
                    self.i += 1
            elif c == "\n" and newlines:
                self.i += 1
                self.read_heredocs()
            else:
                break

    def read_heredocs(self) -> None:
        """Here-document bodies start on the line after their operator."""
        for redirect, delim, strip, _quoted in self.heredocs:
            lines = []
            while True:
                if self.i >= len(self.s):
                    break  # bash warns and takes the end of input as the delimiter
                end = self.s.find("\n", self.i)
                line = self.s[self.i : end if end >= 0 else len(self.s)]
                self.i = end + 1 if end >= 0 else len(self.s)
                check = line.lstrip("\t") if strip else line
                if check == delim:
                    break
                lines.append(check if strip else line)
            redirect.heredoc = "\n".join(lines) + ("\n" if lines else "")
        self.heredocs = []

    def peek_token(self) -> str:
        for op in _OPERATORS:
            if self.startswith(op):
                return op
        return self.peek() or "end of input"

    def at_operator(self) -> str | None:
        for op in ("&&", "||", ";;&", ";;", ";&", "|&", ";", "&", "|", "(", ")"):
            if self.startswith(op):
                if op == "&" and self.startswith("&>"):
                    return None
                return op
        return None

    def expect_end(self) -> bool:
        return self.i >= len(self.s)

    # -- grammar
    def sequence(self, closers: tuple[str, ...]) -> Sequence:
        """A list of and-or lists, up to a closing reserved word or operator in ``closers``."""
        seq = Sequence([])
        while True:
            self.skip_blank(newlines=True)
            if self.expect_end() or self.at_closer(closers):
                return seq
            ao = self.and_or(closers)
            if ao is None:
                return seq
            seq.items.append(ao)
            seq.background.append(False)
            self.skip_blank()
            op = self.at_operator()
            if op == ";" or op == "&":
                self.i += 1
                seq.background[-1] = op == "&"
            elif self.peek() == "\n":
                pass
            elif self.expect_end() or self.at_closer(closers):
                return seq
            else:
                raise ShellSyntaxError(f"unexpected {self.peek_token()!r} at line {self.line_at(self.i)}")

    def at_closer(self, closers: tuple[str, ...]) -> bool:
        for c in closers:
            if c in (")", ";;", ";&", ";;&"):
                if self.startswith(c):
                    return True
            elif self.startswith(c) and self._word_ends(self.i + len(c)):
                return True
        return False

    def _word_ends(self, j: int) -> bool:
        return j >= len(self.s) or self.s[j] in _META

    def and_or(self, closers: tuple[str, ...]) -> AndOr | None:
        first = self.pipeline(closers)
        if first is None:
            return None
        ao = AndOr([("", first)])
        while True:
            self.skip_blank()
            if self.startswith("&&") or self.startswith("||"):
                op = self.s[self.i : self.i + 2]
                self.i += 2
                self.skip_blank(newlines=True)
                nxt = self.pipeline(closers)
                if nxt is None:
                    raise ShellSyntaxError(f"nothing after {op!r} at line {self.line_at(self.i)}")
                ao.items.append((op, nxt))
            else:
                return ao

    def pipeline(self, closers: tuple[str, ...]) -> Pipeline | None:
        self.skip_blank()
        negated = False
        while self.startswith("!") and self._word_ends(self.i + 1):
            negated = not negated
            self.i += 1
            self.skip_blank()
        first = self.command(closers)
        if first is None:
            if negated:
                raise ShellSyntaxError(f"nothing after '!' at line {self.line_at(self.i)}")
            return None
        pipe = Pipeline([first], negated)
        while True:
            self.skip_blank()
            if self.startswith("|") and not self.startswith("||"):
                both = self.startswith("|&")
                self.i += 2 if both else 1
                pipe.stderr.append(both)
                self.skip_blank(newlines=True)
                nxt = self.command(closers)
                if nxt is None:
                    raise ShellSyntaxError(f"nothing after '|' at line {self.line_at(self.i)}")
                pipe.commands.append(nxt)
            else:
                return pipe

    def command(self, closers: tuple[str, ...]) -> Node | None:
        self.skip_blank()
        if self.expect_end() or self.at_closer(closers):
            return None
        self.nesting += 1
        try:
            if self.nesting > _MAX_NESTING:
                raise ShellSyntaxError(f"commands nested more than {_MAX_NESTING} deep")
            return self._command(closers)
        finally:
            self.nesting -= 1

    def _command(self, closers: tuple[str, ...]) -> Node | None:
        line = self.line_at(self.i)
        if self.startswith("(("):
            end = self._arith_end(self.i + 2)
            if end is not None:
                text = self.s[self.i + 2 : end]
                self.i = end + 2
                node = Compound("arith", words=[Word([Part("lit", text)], text)], line=line)
                node.redirects = self.redirects_after()
                return node
        if self.startswith("("):
            self.i += 1
            body = self.sequence((")",))
            if not self.startswith(")"):
                raise ShellSyntaxError(f"unclosed '(' from line {line}")
            self.i += 1
            node = Compound("subshell", [body], line=line)
            node.redirects = self.redirects_after()
            return node
        word = self.peek_reserved()
        if word == "{":
            self.i += 1
            body = self.sequence(("}",))
            self.reserved("}", line)
            node = Compound("group", [body], line=line)
            node.redirects = self.redirects_after()
            return node
        if word == "if":
            return self.if_clause(line)
        if word in ("while", "until"):
            self.i += len(word)
            cond = self.sequence(("do",))
            self.reserved("do", line)
            body = self.sequence(("done",))
            self.reserved("done", line)
            node = Compound(word, [cond, body], line=line)
            node.redirects = self.redirects_after()
            return node
        if word == "for":
            return self.for_clause(line)
        if word == "case":
            return self.case_clause(line)
        if word == "function":
            self.i += len("function")
            self.skip_blank()
            name = self.read_word()
            if name is None:
                raise ShellSyntaxError(f"function without a name at line {line}")
            self.skip_blank()
            if self.startswith("()"):
                self.i += 2
            return self.function_body(name.text, line)
        if word in _CLOSERS or word == "in":
            raise ShellSyntaxError(f"unexpected {word!r} at line {line}")
        if word == "[[":
            return self.double_bracket(line)
        return self.simple(line)

    def peek_reserved(self) -> str:
        m = re.compile(r"[^\s;&|()<>]+").match(self.s, self.i)
        return m.group(0) if m else ""

    def reserved(self, word: str, line: int) -> None:
        self.skip_blank(newlines=True)
        if not (self.startswith(word) and self._word_ends(self.i + len(word))):
            raise ShellSyntaxError(f"expected {word!r} (from line {line}), found {self.peek_token()!r}")
        self.i += len(word)

    def if_clause(self, line: int) -> Compound:
        self.i += 2
        bodies = [self.sequence(("then",))]
        self.reserved("then", line)
        bodies.append(self.sequence(("elif", "else", "fi")))
        while True:
            self.skip_blank(newlines=True)
            w = self.peek_reserved()
            if w == "elif":
                self.i += 4
                bodies.append(self.sequence(("then",)))
                self.reserved("then", line)
                bodies.append(self.sequence(("elif", "else", "fi")))
            elif w == "else":
                self.i += 4
                bodies.append(self.sequence(("fi",)))
                self.reserved("fi", line)
                break
            else:
                self.reserved("fi", line)
                break
        node = Compound("if", bodies, line=line)
        node.redirects = self.redirects_after()
        return node

    def for_clause(self, line: int) -> Compound:
        self.i += 3
        self.skip_blank()
        if self.startswith("(("):
            end = self._arith_end(self.i + 2)
            if end is None:
                raise ShellSyntaxError(f"unclosed '((' at line {line}")
            self.i = end + 2
            name, words = "((", list[Word]()
        else:
            w = self.read_word()
            if w is None:
                raise ShellSyntaxError(f"for without a variable at line {line}")
            name, words = w.text, []
            self.skip_blank(newlines=True)
            if self.peek_reserved() == "in":
                self.i += 2
                while True:
                    self.skip_blank()
                    if self.at_operator() in (";", "&") or self.peek() in ("\n", ""):
                        break
                    w = self.read_word()
                    if w is None:
                        break
                    words.append(w)
        self.skip_blank()
        if self.startswith(";"):
            self.i += 1
        self.skip_blank(newlines=True)
        if self.peek_reserved() == "{":
            self.i += 1
            body = self.sequence(("}",))
            self.reserved("}", line)
        else:
            self.reserved("do", line)
            body = self.sequence(("done",))
            self.reserved("done", line)
        node = Compound("for", [body], words=words, name=name, line=line)
        node.redirects = self.redirects_after()
        return node

    def case_clause(self, line: int) -> Compound:
        self.i += 4
        self.skip_blank()
        subject = self.read_word()
        if subject is None:
            raise ShellSyntaxError(f"case without a word at line {line}")
        self.skip_blank(newlines=True)
        self.reserved("in", line)
        bodies: list[Sequence] = []
        while True:
            self.skip_blank(newlines=True)
            if self.peek_reserved() == "esac":
                self.i += 4
                break
            if self.expect_end():
                raise ShellSyntaxError(f"case from line {line} has no esac")
            if self.startswith("("):
                self.i += 1
            while True:  # patterns: a | b )
                self.skip_blank()
                if self.read_word() is None:
                    raise ShellSyntaxError(f"bad case pattern at line {self.line_at(self.i)}")
                self.skip_blank()
                if self.startswith("|"):
                    self.i += 1
                    continue
                if self.startswith(")"):
                    self.i += 1
                    break
                raise ShellSyntaxError(f"expected ')' after a case pattern at line {self.line_at(self.i)}")
            bodies.append(self.sequence((";;&", ";;", ";&", "esac")))
            self.skip_blank(newlines=True)
            for op in (";;&", ";;", ";&"):
                if self.startswith(op):
                    self.i += len(op)
                    break
        node = Compound("case", bodies, words=[subject], line=line)
        node.redirects = self.redirects_after()
        return node

    def function_body(self, name: str, line: int) -> Compound:
        self.skip_blank(newlines=True)
        body = self.command(())
        if not isinstance(body, Compound):
            raise ShellSyntaxError(f"function {name!r} needs a compound body at line {line}")
        return Compound("function", [Sequence([AndOr([("", Pipeline([body]))])], [False])], name=name, line=line)

    def double_bracket(self, line: int) -> Compound:
        self.i += 2
        words: list[Word] = []
        while True:
            self.skip_blank(newlines=True)
            if self.startswith("]]") and self._word_ends(self.i + 2):
                self.i += 2
                break
            if self.expect_end():
                raise ShellSyntaxError(f"unclosed '[[' from line {line}")
            op = next((o for o in ("&&", "||", "(", ")", "!", "<", ">") if self.startswith(o)), None)
            if op is not None:
                self.i += len(op)
                words.append(Word([Part("lit", op)], op))
                continue
            w = self.read_word(in_test=True)
            if w is None:
                raise ShellSyntaxError(f"bad word in '[[' at line {self.line_at(self.i)}")
            words.append(w)
        node = Compound("test", words=words, line=line)
        node.redirects = self.redirects_after()
        return node

    def redirects_after(self) -> list[Redirect]:
        out: list[Redirect] = []
        while True:
            self.skip_blank()
            r = self.redirect()
            if r is None:
                return out
            out.append(r)

    def simple(self, line: int) -> Simple | Compound:
        cmd = Simple(line=line)
        while True:
            self.skip_blank()
            if self.expect_end() or self.peek() == "\n":
                break
            r = self.redirect()
            if r is not None:
                cmd.redirects.append(r)
                continue
            if self.at_operator() is not None:
                if self.startswith("(") and not cmd.words and len(cmd.assigns) == 0:
                    break
                if self.startswith("()") and len(cmd.words) == 1 and not cmd.assigns:
                    self.i += 2
                    return self.function_body(cmd.words[0].text, line)
                break
            start = self.i
            # declare/export/local/readonly/typeset take assignments too: `declare -a ARGS=(--x=1 --y=2)`
            w = self.read_word(assignment=not cmd.words or cmd.words[0].literal in _DECLARATIONS)
            if w is None:
                break
            if not cmd.words and _ASSIGN.match(self.s[start : self.i]):
                cmd.assigns.append(w)
            else:
                cmd.words.append(w)
        if not cmd.words and not cmd.assigns and not cmd.redirects:
            return None  # type: ignore[return-value]
        return cmd

    def redirect(self) -> Redirect | None:
        m = _REDIRECT.match(self.s, self.i)
        if not m or (m.group(2) in ("<", ">") and self.s.startswith("(", m.end())):
            return None  # <(...) is a process substitution
        self.i = m.end()
        op = m.group(0)
        self.skip_blank()
        target = self.read_word()
        if target is None:
            raise ShellSyntaxError(f"{op!r} without a target at line {self.line_at(self.i)}")
        r = Redirect(op, target)
        if m.group(2) in ("<<", "<<-"):
            delim = target.literal if target.literal is not None else target.text
            quoted = any(c in target.raw for c in "'\"\\")
            r.quoted = quoted
            self.heredocs.append((r, delim, m.group(2) == "<<-", quoted))
        return r

    # -- words
    def read_word(self, assignment: bool = False, in_test: bool = False) -> Word | None:
        """One word at self.i (None if an operator or the end is there)."""
        start = self.i
        parts: list[Part] = []
        lit: list[str] = []

        def flush(quoted: bool = False) -> None:
            if lit:
                parts.append(Part("lit", "".join(lit), quoted))
                lit.clear()

        s = self.s
        while self.i < len(s):
            c = s[self.i]
            if c in " \t\n" or (c in ";&|<>" and not in_test) or (c in "()" and not in_test):
                if (
                    c == "("
                    and assignment
                    and self.i > start
                    and s[self.i - 1] == "="
                    and _ASSIGN.match(s[start : self.i])
                ):
                    end = self._matching(self.i + 1, "(", ")")
                    lit.append(s[self.i : end + 1])  # an array assignment a=(1 2 3), kept as text
                    self.i = end + 1
                    continue
                if c in "<>" and self.peek(1) == "(":
                    flush()
                    parts.append(self.substitution(procsub=True))
                    continue
                break
            if in_test and (c in "()<>" or (c in "&|" and self.peek(1) == c)) and self.i > start:
                break
            if c == "~" and self.i == start:
                m = re.compile(r"~[A-Za-z0-9._-]*").match(s, self.i)
                assert m is not None
                if m.end() >= len(s) or s[m.end()] in "/ \t\n;&|<>()":
                    tilde = m.group(0)
                    name, op = ("HOME", "") if tilde == "~" else ("", "?user")
                    parts.append(Part("param", tilde, True, name=name, op=op))  # not field-split
                    self.i = m.end()
                    continue
            if c == "\\":
                nxt = self.peek(1)
                if nxt == "\n":
                    self.i += 2
                    continue
                if nxt == "":
                    lit.append("\\")
                    self.i += 1
                    continue
                lit.append(nxt)
                self.i += 2
            elif c == "'":
                end = s.find("'", self.i + 1)
                if end < 0:
                    raise ShellSyntaxError(f"unterminated ' from line {self.line_at(self.i)}")
                flush()
                parts.append(Part("lit", s[self.i + 1 : end], True))
                self.i = end + 1
            elif c == '"':
                flush()
                parts.extend(self.double_quoted())
            elif c == "$" and self.peek(1) == "'":
                flush()
                parts.append(Part("lit", self.ansi_c(), True))
            elif c == "$" and self.peek(1) == '"':
                self.i += 1
                flush()
                parts.extend(self.double_quoted())
            elif c == "$":
                part = self.dollar(quoted=False)
                if part is None:
                    lit.append("$")
                    self.i += 1
                else:
                    flush()
                    parts.append(part)
            elif c == "`":
                flush()
                parts.append(self.backquote(quoted=False))
            else:
                lit.append(c)
                self.i += 1
        flush()
        if self.i == start:
            return None
        return Word(parts, s[start : self.i])

    def double_quoted(self) -> list[Part]:
        start = self.i
        self.i += 1
        parts: list[Part] = []
        lit: list[str] = []
        s = self.s
        while True:
            if self.i >= len(s):
                raise ShellSyntaxError(f'unterminated " from line {self.line_at(start)}')
            c = s[self.i]
            if c == '"':
                self.i += 1
                break
            if c == "\\":
                nxt = self.peek(1)
                if nxt in ("$", "`", '"', "\\"):
                    lit.append(nxt)
                    self.i += 2
                elif nxt == "\n":
                    self.i += 2
                else:
                    lit.append("\\")
                    self.i += 1
            elif c == "$":
                part = self.dollar(quoted=True)
                if part is None:
                    lit.append("$")
                    self.i += 1
                else:
                    if lit:
                        parts.append(Part("lit", "".join(lit), True))
                        lit = []
                    parts.append(part)
            elif c == "`":
                if lit:
                    parts.append(Part("lit", "".join(lit), True))
                    lit = []
                parts.append(self.backquote(quoted=True))
            else:
                lit.append(c)
                self.i += 1
        if lit or not parts:
            parts.append(Part("lit", "".join(lit), True))
        return parts

    def ansi_c(self) -> str:
        """$'...' (bash): backslash escapes decoded."""
        start = self.i
        self.i += 2
        out: list[str] = []
        s = self.s
        simple = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "f": "\f", "v": "\v", "e": "\x1b", "E": "\x1b"}
        while True:
            if self.i >= len(s):
                raise ShellSyntaxError(f"unterminated $' from line {self.line_at(start)}")
            c = s[self.i]
            if c == "'":
                self.i += 1
                return "".join(out)
            if c == "\\" and self.i + 1 < len(s):
                n = s[self.i + 1]
                if n in simple:
                    out.append(simple[n])
                    self.i += 2
                elif n in "\\'\"?":
                    out.append(n)
                    self.i += 2
                elif n == "x":
                    m = re.compile(r"[0-9A-Fa-f]{1,2}").match(s, self.i + 2)
                    if m:
                        out.append(chr(int(m.group(0), 16)))
                        self.i = m.end()
                    else:
                        out.append("\\x")
                        self.i += 2
                elif n in "01234567":
                    m = re.compile(r"[0-7]{1,3}").match(s, self.i + 1)
                    assert m is not None
                    out.append(chr(int(m.group(0), 8) & 0xFF))
                    self.i = m.end()
                else:
                    out.append("\\" + n)
                    self.i += 2
            else:
                out.append(c)
                self.i += 1

    def dollar(self, quoted: bool) -> Part | None:
        """$name, $1, $@, ${...}, $(...), $((...)) at self.i; None for a lone '$'."""
        s = self.s
        start = self.i
        nxt = self.peek(1)
        if nxt == "(" and self.peek(2) == "(":
            end = self._arith_end(self.i + 3)
            if end is not None:
                self.i = end + 2
                return Part("arith", s[start : self.i], quoted)
        if nxt == "(":
            return self.substitution(quoted=quoted)
        if nxt == "{":
            end = self._matching(self.i + 2, "{", "}")
            self.i = end + 1
            return self._param(s[start : self.i], s[start + 2 : end], quoted)
        m = _NAME.match(s, self.i + 1)
        if m:
            self.i = m.end()
            return Part("param", s[start : self.i], quoted, name=m.group(0))
        if nxt and nxt in _SPECIAL:
            self.i += 2
            return Part("param", s[start : self.i], quoted, name=nxt)
        return None

    def _param(self, raw: str, inner: str, quoted: bool) -> Part:
        m = re.compile(r"^([#!]?)([A-Za-z_][A-Za-z0-9_]*|[0-9]+|[@*#?$!\-])(.*)$", re.S).match(inner)
        if not m:
            return Part("param", raw, quoted, name="", op="?complex")
        prefix, name, rest = m.groups()
        if prefix:
            return Part("param", raw, quoted, name=name, op=prefix)
        opm = re.compile(r"^(:?[-=?+])(.*)$", re.S).match(rest)
        if opm:
            sub = _Parser(opm.group(2), self.depth + 1)
            word = sub.read_word_all(quoted)
            return Part("param", raw, quoted, name=name, op=opm.group(1), arg=word)
        if rest:
            return Part("param", raw, quoted, name=name, op="?complex")
        return Part("param", raw, quoted, name=name)

    def read_word_all(self, quoted: bool) -> Word:
        """The whole text as one word (the word of ${x:-word}): quotes removed, no splitting."""
        parts: list[Part] = []
        lit: list[str] = []
        s = self.s
        while self.i < len(s):
            c = s[self.i]
            if c == "\\" and self.i + 1 < len(s):
                lit.append(s[self.i + 1])
                self.i += 2
            elif c == "'" and not quoted:
                end = s.find("'", self.i + 1)
                if end < 0:
                    raise ShellSyntaxError("unterminated ' in ${...}")
                lit.append(s[self.i + 1 : end])
                self.i = end + 1
            elif c == '"':
                if lit:
                    parts.append(Part("lit", "".join(lit), quoted))
                    lit = []
                parts.extend(self.double_quoted())
            elif c == "$":
                part = self.dollar(quoted)
                if part is None:
                    lit.append("$")
                    self.i += 1
                else:
                    if lit:
                        parts.append(Part("lit", "".join(lit), quoted))
                        lit = []
                    parts.append(part)
            else:
                lit.append(c)
                self.i += 1
        if lit or not parts:
            parts.append(Part("lit", "".join(lit), quoted))
        return Word(parts, s)

    def substitution(self, quoted: bool = False, procsub: bool = False) -> Part:
        """$(...) or <(...)/>(...): the inner script parsed in place."""
        start = self.i
        self.i += 2
        self.line_at(0)
        inner = _Parser(self.s, self.depth + 1, self._newlines)
        inner.i = self.i
        body = inner.sequence((")",))
        inner.skip_blank(newlines=True)
        if not inner.startswith(")"):
            raise ShellSyntaxError(f"unclosed $( from line {self.line_at(start)}")
        end = inner.i
        self.i = end + 1
        script = Script(body, self.s[start + 2 : end])
        return Part("procsub" if procsub else "cmdsub", self.s[start : self.i], quoted, script=script)

    def backquote(self, quoted: bool) -> Part:
        start = self.i
        j = self.i + 1
        out: list[str] = []
        s = self.s
        while j < len(s) and s[j] != "`":
            if s[j] == "\\" and j + 1 < len(s) and s[j + 1] in "$`\\" + ('"' if quoted else ""):
                out.append(s[j + 1])
                j += 2
            else:
                out.append(s[j])
                j += 1
        if j >= len(s):
            raise ShellSyntaxError(f"unterminated ` from line {self.line_at(start)}")
        self.i = j + 1
        sub = _Parser("".join(out), self.depth + 1)
        body = sub.sequence(())
        return Part("cmdsub", s[start : self.i], quoted, script=Script(body, "".join(out)))

    def _matching(self, j: int, opener: str, closer: str) -> int:
        """Index of the ``closer`` that balances an ``opener`` before j (quotes skipped)."""
        depth = 1
        s = self.s
        while j < len(s):
            c = s[j]
            if c == "\\":
                j += 2
                continue
            if c == "#" and closer == ")" and (j == 0 or s[j - 1] in " \t\n("):
                end = s.find("\n", j)  # a comment (in an array or a command substitution) ends at the line's end
                j = len(s) if end < 0 else end
                continue
            if c == "'" and closer == ")":
                end = s.find("'", j + 1)
                if end < 0:
                    break
                j = end + 1
                continue
            if c == '"':
                k = j + 1
                while k < len(s) and s[k] != '"':
                    k += 2 if s[k] == "\\" else 1
                j = k + 1
                continue
            if c == opener:
                depth += 1
            elif c == closer:
                depth -= 1
                if depth == 0:
                    return j
            j += 1
        raise ShellSyntaxError(f"unclosed {opener!r} from line {self.line_at(j if j < len(s) else len(s))}")

    def _arith_end(self, j: int) -> int | None:
        """Index of the '))' closing an arithmetic expression that starts at j, or None."""
        depth = 0
        s = self.s
        while j < len(s):
            c = s[j]
            if c == "(":
                depth += 1
            elif c == ")":
                if depth == 0:
                    return j if s.startswith("))", j) else None
                depth -= 1
            j += 1
        return None


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
    elif params is not None and _NAME.fullmatch(name) and part.op:
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
