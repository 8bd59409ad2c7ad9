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

import re

from kgen.launch.shelltree import (
    AndOr,
    Compound,
    Node,
    Part,
    Pipeline,
    Redirect,
    Script,
    Sequence,
    ShellSyntaxError,
    Simple,
    Word,
)
from kgen.launch.shellwords import ASSIGN, ShellLexer

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


class _Parser(ShellLexer):
    """The command structure over the lexer's words: sequences, and-or lists, pipelines, compound commands and
    redirections."""

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
            if not cmd.words and ASSIGN.match(self.s[start : self.i]):
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
