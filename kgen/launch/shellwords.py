"""Shell words: the lexer under ``kgen.launch.shell``'s parser. A cursor over a script's source that skips
blanks, line continuations and comments, reads here-document bodies and operators, and reads one word the way
bash splits it (quotes, backslashes, ``$'...'``, ``${...}``, ``$((...))``, backquotes and ``$(...)``, whose
inner script it hands back to the parser through ``sequence``).
"""

from __future__ import annotations

import bisect
import re

from kgen.launch.shelltree import Part, Redirect, Script, Sequence, ShellSyntaxError, Word

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\[[^\]]*\])?\+?=")
_SPECIAL = "@*#?$!-0123456789"
_OPERATORS = ("&&", "||", ";;&", ";;", ";&", "|&", "&>>", "&>", ">>", "<<<", "<<-", "<<", "<&", ">&", "<>", ">|")


class ShellLexer:
    """The characters and words of one script (or of a substitution inside one); the grammar
    (``kgen.launch.shell``) is a subclass that adds ``sequence`` and the commands."""

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
                    and ASSIGN.match(s[start : self.i])
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
        m = NAME.match(s, self.i + 1)
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
            sub = type(self)(opm.group(2), self.depth + 1)
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
        inner = type(self)(self.s, self.depth + 1, self._newlines)
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
        sub = type(self)("".join(out), self.depth + 1)
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

    def sequence(self, closers: tuple[str, ...]) -> Sequence:
        """The commands up to ``closers`` (a command substitution's script): the grammar reads them."""
        raise NotImplementedError
