"""Assemble the entrypoint's parts into the two files kgen ships.

    python entrypoint/assemble.py           write entrypoint/kgen_entrypoint.py, entrypoint/pod/kgen_entrypoint.py
                                            and entrypoint/pod/kgen_entrypoint.pyz
    python entrypoint/assemble.py --check   exit 1 (naming the files) when they differ from a fresh assembly

entrypoint/parts/ holds the runtime's source, one job per module; each part imports what it uses (the standard
library, one `import x` a line, and `from .part import name` for the other parts), so ruff and mypy check every
part. The shipped file is the parts in the order of PARTS below: the first part's #! line and docstring, the
standard library imports of every part gathered once, then each part under a banner naming its source file and
line (`# ==== entrypoint/parts/hub.py:12 ====`: the next line is line 12 of hub.py; `kgen entrypoint --where`
reads these). The parts' imports and repeated `from __future__` lines are left out, found by `ast` by line range.
The pod parts come first, the parts only bare metal and Slurm run after them, and the `__main__` guard last.

The pod copy (what `kgen render` puts in the ConfigMap) is the pod parts and the guard, as small as Python
allows without moving a line: no comments, no docstrings of the parts, functions and classes (the file's own
stays), no annotations of functions (nothing evaluates them: `from __future__ import annotations`), one space
per indentation level, no spaces between tokens that do not need them, single quotes where a string has no
quote inside (a double quote costs two bytes in JSON), and every line at the number it has in the whole file
(line 1 says what the file is; where the pod copy has the guard, the whole file has a comment saying so). The
syntax tree is the whole file's but for what is left out (tests/test_entrypoint_assembly.py checks it, node by
node and line by line). Both files are pure functions of the parts (standard library, `ast` and `tokenize`, the
same bytes on Python 3.10 to 3.13), made at build time and committed; the test fails, naming the command above,
when they are stale.

What the ConfigMap holds is the pod copy zipped (entrypoint/pod/kgen_entrypoint.pyz: one member, __main__.py,
deflated, fixed time stamp and mode): Python runs a zip file given as the script, whatever its name, so the pod
still runs `python3 /opt/kgen/kgen_entrypoint.py`, at about 40 % of the text's size (an object kgen renders
stays far under kubectl's last-applied budget: tests/test_size_budget.py). Its frames read
`.../kgen_entrypoint.py/__main__.py", line N`, N the whole file's line. Deflate's bytes depend on the zlib
build, so the archive is committed and `--check` compares what it holds, not its bytes; it is written again only
when what it holds changed (render ships the committed bytes: the same on every machine).

A new part: a module in entrypoint/parts/ and one line in PARTS (before `main` if the pods run it, after it if
only bare metal or Slurm does), then the command above.
"""

from __future__ import annotations

import ast
import io
import sys
import tokenize
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PARTS_DIR = HERE / "parts"
WHOLE = HERE / "kgen_entrypoint.py"
POD = HERE / "pod" / "kgen_entrypoint.py"
POD_ZIP = HERE / "pod" / "kgen_entrypoint.pyz"
ZIP_MEMBER = "__main__.py"

# The parts, in the order the shipped file has them: (module in entrypoint/parts/, in pods). A new part is one
# line here; a part the pods run goes before the first one they do not.
PARTS = (
    ("header", True),
    ("config", True),
    ("proctree", True),
    ("pump", True),
    ("channel", True),
    ("reform", True),
    ("hub", True),
    ("spoke", True),
    ("command", True),
    ("standby", True),
    ("torchrun", True),
    ("smoke", True),
    ("diagnose", True),
    ("hang", True),
    ("healthgate", True),
    ("slurmenv", True),
    ("main", True),
    ("baremetal", False),
    ("nodeverbs", False),
    ("slurm", False),
)

BANNER = "# ==== {path}:{line} ===="
IMPORTS_BANNER = "# ==== entrypoint/assemble.py: the standard library imports of every part ===="
GUARD_BANNER = "# ==== entrypoint/assemble.py: the guard ===="
GUARD = ['if __name__ == "__main__":', "    sys.exit(main())"]
# Where the pod copy has the guard, the whole file says so (the same line numbers in both files).
GUARD_NOTE = [
    '# The pod copy ends here with the guard, `if __name__ == "__main__": sys.exit(main())`; the whole',
    "# file runs it at its end, after the parts only bare metal and Slurm run.",
]
POD_HEADER = (
    "# kgen_entrypoint.py as kgen render ships it: comments, docstrings and the bare-metal and Slurm parts "
    "left out, one space per indentation level, line numbers kept; the whole file: `kgen entrypoint`"
)


class AssemblyError(ValueError):
    """A part the assembler cannot place safely (a relative import inside a function, a part out of order)."""


def _dropped_lines(tree: ast.Module, first: bool, path: str, lines: list[str], imports: set[str]) -> set[int]:
    """Line numbers (1-based) of the part's imports at the top level (the standard library's go to `imports`) and,
    but in the first part, its `from __future__`."""
    top = set()
    dropped: set[int] = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == "__future__" and first:
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            top.add(id(node))
            span = range(node.lineno, (node.end_lineno or node.lineno) + 1)
            dropped.update(span)
            if isinstance(node, ast.Import) or (node.level == 0 and node.module != "__future__"):
                if len(span) > 1 or ";" in lines[node.lineno - 1]:
                    raise AssemblyError(f"{path}:{node.lineno}: one import a line, please (the assembler gathers them)")
                imports.add(lines[node.lineno - 1].strip())
    for inner in ast.walk(tree):
        if isinstance(inner, ast.ImportFrom) and inner.level > 0 and id(inner) not in top:
            raise AssemblyError(f"{path}:{inner.lineno}: a relative import below the top level of a part")
    return dropped


def _segments(lines: list[str], dropped: set[int]) -> list[tuple[int, list[str]]]:
    """Runs of kept lines as (first line number, lines), without blank lines at either end."""
    runs: list[tuple[int, list[str]]] = []
    current: list[str] = []
    start = 1
    for number, text in enumerate([*lines, None], start=1):
        if text is None or number in dropped:
            while current and not current[-1].strip():
                current.pop()
            if current:
                runs.append((start, current))
            current = []
            continue
        if not current:
            if not text.strip():
                continue
            start = number
        current.append(text)
    return runs


def assemble(parts_dir: Path = PARTS_DIR) -> tuple[str, str]:
    """(the whole file, the pod copy), both ending in a newline."""
    pods = [pods for _, pods in PARTS]
    if pods != sorted(pods, reverse=True):
        raise AssemblyError("PARTS: every pod part comes before the first part that pods do not run")
    out: list[str] = []
    imports: set[str] = set()
    pod_end = 0
    import_at = 0
    for index, (name, in_pods) in enumerate(PARTS):
        path = f"entrypoint/parts/{name}.py"
        text = (parts_dir / f"{name}.py").read_text(encoding="utf-8")
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        dropped = _dropped_lines(ast.parse(text, path), index == 0, path, lines, imports)
        for number, (start, run) in enumerate(_segments(lines, dropped)):
            if index == 0 and number == 0:
                if start != 1:
                    raise AssemblyError(f"{path}: the first part starts the file (#! line, docstring)")
                out.extend(run)
                out.extend(["", IMPORTS_BANNER])
                import_at = len(out)
                continue
            out.extend([""] * (1 if (index, number) == (0, 1) else 2))  # one after the imports (isort)
            out.append(BANNER.format(path=path, line=start))
            out.extend(run)
        if in_pods and (index + 1 == len(PARTS) or not PARTS[index + 1][1]):
            out.extend(["", "", GUARD_BANNER])
            pod_end = len(out)
            out.extend(GUARD_NOTE)
    out.extend(["", "", GUARD_BANNER, *GUARD])
    gathered = sorted(imports, key=lambda line: (line.startswith("from "), line))
    out[import_at:import_at] = gathered
    pod_end += len(gathered)
    whole = "\n".join(out) + "\n"
    pod_lines = out[:pod_end] + GUARD
    return whole, pod_copy("\n".join(pod_lines) + "\n")


def pod_copy(source: str) -> str:
    """`source` without comments and docstrings, one space per indentation level, line 1 the pod header."""
    lines = source.split("\n")
    tree = ast.parse(source)
    blank: set[int] = set()
    keep_indent: set[int] = set()  # lines inside a string that spans lines: every space is the string's
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            body = node.body
            for position, stmt in enumerate(body):
                docstring = isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)
                if not docstring or not isinstance(stmt.value.value, str):  # type: ignore[attr-defined]
                    continue
                if isinstance(node, ast.Module):
                    if position == 0:
                        continue  # the file's docstring: what it is, its environment and exit codes
                elif position != 0 or len(body) == 1:
                    continue
                blank.update(range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1))
    edits: dict[int, list[tuple[int, int, str]]] = {}  # row -> (from column, to column, new text)
    previous: tuple[int, int, str] | None = None  # the last token's end row, column and text
    tokens = list(_tokens(source, lines))
    annotations = _annotations(tokens)
    for index, (start, end, text) in enumerate(tokens):
        keep_indent.update(range(start[0] + 1, end[0] + 1))
        if index in annotations:
            continue
        if text.startswith("#"):
            edits.setdefault(start[0], []).append((start[1], len(lines[start[0] - 1]), ""))
            continue
        if previous and previous[0] == start[0] and start[1] > previous[1]:
            spaced = _word(previous[2][-1]) and _word(text[0]) or _glued(previous[2], text)
            edits.setdefault(start[0], []).append((previous[1], start[1], " " if spaced else ""))
        if start[0] == end[0] and _swappable(text):
            at = len(text) - len(text.lstrip("rRuUfFbB"))
            edits.setdefault(start[0], []).append((start[1] + at, end[1], "'" + text[at + 1 : -1] + "'"))
        previous = (end[0], end[1], text)
    for row, changes in edits.items():
        line = lines[row - 1]
        for a, b, text in sorted(changes, reverse=True):
            line = line[:a] + text + line[b:]
        lines[row - 1] = line.rstrip()
    for number, text in enumerate(lines, start=1):
        if number in blank:
            lines[number - 1] = ""
        elif number not in keep_indent:
            rest = text.lstrip(" ")
            n = len(text) - len(rest)
            lines[number - 1] = " " * (n // 4 + n % 4) + rest
    lines[0] = POD_HEADER
    return "\n".join(lines)


def _tokens(source: str, lines: list[str]):
    """(start, end, text) of every token but the layout ones; an f-string is one token (Python 3.12 splits it)."""
    fstring_start = getattr(tokenize, "FSTRING_START", -1)
    fstring_end = getattr(tokenize, "FSTRING_END", -1)
    layout = (tokenize.NEWLINE, tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER)
    opened: list[tuple[int, int]] = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == fstring_start:
            opened.append(tok.start)
        elif tok.type == fstring_end:
            start = opened.pop()
            if not opened:
                yield start, tok.end, _text(lines, start, tok.end)
        elif not opened and tok.type not in layout:
            yield tok.start, tok.end, tok.string


def _annotations(tokens: list[tuple[tuple[int, int], tuple[int, int], str]]) -> set[int]:
    """Indexes of the tokens of functions' annotations (`: int`, `-> None`) that sit on one line with the tokens
    around them: the pods run the program, the type checkers read the parts (`from __future__ import
    annotations`: nothing evaluates them)."""
    found: set[int] = set()
    code = [i for i, (_, _, text) in enumerate(tokens) if not text.startswith("#")]
    k = 0
    while k < len(code):
        if tokens[code[k]][2] != "def":
            k += 1
            continue
        k += 2  # the name, then "("
        depth, in_default = 0, False
        run: list[int] = []
        while k < len(code):
            text = tokens[code[k]][2]
            if text in ("(", "[", "{"):
                depth += 1
            elif text in (")", "]", "}"):
                depth -= 1
            if depth == 1 and text in (",", "=") or depth == 0:
                if run:
                    _drop(tokens, code, run, k, found)
                    run = []
                in_default = text == "=" or (in_default and text != ",")
                if depth == 0:
                    break
            elif depth == 1 and text == ":" and not in_default and not run:
                run = [k]
            elif run:
                run.append(k)
            k += 1
        k += 1  # ")"
        run = []
        while k < len(code):
            text = tokens[code[k]][2]
            if text == ":" and (not run or _balanced(tokens, code, run)):
                break
            if text == "->" or run:
                run.append(k)
            k += 1
        if run:
            _drop(tokens, code, run, k, found)
    return found


def _balanced(tokens, code: list[int], run: list[int]) -> bool:
    depth = 0
    for k in run:
        text = tokens[code[k]][2]
        depth += text in ("(", "[", "{")
        depth -= text in (")", "]", "}")
    return depth == 0


def _drop(tokens, code: list[int], run: list[int], after: int, found: set[int]) -> None:
    """Drop the run of tokens when it, the token before and the token after it are on one line."""
    rows = {tokens[code[k]][0][0] for k in run} | {tokens[code[k]][1][0] for k in run}
    rows |= {tokens[code[run[0] - 1]][1][0], tokens[code[after]][0][0]}
    if len(rows) == 1:
        found.update(code[k] for k in run)


def _text(lines: list[str], start: tuple[int, int], end: tuple[int, int]) -> str:
    if start[0] == end[0]:
        return lines[start[0] - 1][start[1] : end[1]]
    middle = lines[start[0] : end[0] - 1]
    return "\n".join([lines[start[0] - 1][start[1] :], *middle, lines[end[0] - 1][: end[1]]])


def _word(char: str) -> bool:
    return char.isalnum() or char == "_" or not char.isascii()


def _glued(before: str, after: str) -> bool:
    """Two tokens that would read differently without the space between them (a name that is a string
    prefix before a string, a number before a dot, operators that would join)."""
    if after[:1] in "'\"" and before.lower() in ("r", "u", "f", "b", "rb", "br", "fr", "rf"):
        return True
    if before[:1].isdigit() and after.startswith("."):
        return True
    return not _word(before[-1]) and not _word(after[0]) and (before[-1] + after[0]) in _JOINING


_JOINING = {"**", "//", "<<", ">>", "<=", ">=", "==", "!=", "->", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=",
            "@=", ":=", "..", "<>"}  # fmt: skip


def _swappable(text: str) -> bool:
    """A one-line string in double quotes without quotes inside: single quotes save a byte of JSON."""
    body = text.lstrip("rRuUfFbB")
    return body[:1] == '"' and body[:3] != '"""' and '"' not in body[1:-1] and "'" not in body[1:-1]


def pod_zip(pod: str) -> bytes:
    """The pod copy as the ConfigMap ships it: a zip of one deflated member, __main__.py (fixed time and mode)."""
    info = zipfile.ZipInfo(ZIP_MEMBER, date_time=(1980, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_DEFLATED
    info.create_system = 3  # unix, whatever machine builds it
    info.external_attr = 0o100444 << 16
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr(info, pod.encode("utf-8"), compresslevel=9)
    return buf.getvalue()


def zip_text(data: bytes) -> str | None:
    """What a pod zip holds (its one member's text), or None when it is not one."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            names = z.namelist()
            return z.read(ZIP_MEMBER).decode("utf-8") if names == [ZIP_MEMBER] else None
    except (zipfile.BadZipFile, KeyError, UnicodeDecodeError, OSError):
        return None


def main(argv: list[str]) -> int:
    whole, pod = assemble()
    stale = [p for p, text in ((WHOLE, whole), (POD, pod)) if not p.is_file() or p.read_text(encoding="utf-8") != text]
    if not POD_ZIP.is_file() or zip_text(POD_ZIP.read_bytes()) != pod:
        stale.append(POD_ZIP)
    if argv[1:] == ["--check"]:
        for p in stale:
            print(f"{p.relative_to(HERE.parent)} differs from its parts: run python entrypoint/assemble.py")
        return 1 if stale else 0
    if argv[1:]:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    for p, text in ((WHOLE, whole), (POD, pod)):
        p.parent.mkdir(exist_ok=True)
        with open(p, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(text)
    if POD_ZIP in stale:
        POD_ZIP.write_bytes(pod_zip(pod))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
