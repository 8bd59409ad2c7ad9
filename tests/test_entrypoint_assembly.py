"""The entrypoint's parts and the two files assembled from them (entrypoint/assemble.py): the shipped whole
file and the pod copy are what a fresh assembly makes, the parts use the standard library only, the pod copy is
the pod parts line for line, and `kgen entrypoint --where` names the part and line of any line."""

from __future__ import annotations

import ast
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kgen.cli import cli

ROOT = Path(__file__).resolve().parents[1]
PARTS_DIR = ROOT / "entrypoint" / "parts"


def _assembler():
    spec = importlib.util.spec_from_file_location("kgen_entrypoint_assembler", ROOT / "entrypoint" / "assemble.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


asm = _assembler()
REGENERATE = "run `python entrypoint/assemble.py` and commit both files"


def test_the_committed_zip_holds_the_pod_copy_and_is_made_alike_everywhere():
    """What render ships (the ConfigMap's binaryData): the pod copy as the one member __main__.py, deflated, with
    a fixed time stamp and mode (a zip's bytes are a function of its text and the zlib build only)."""
    import io
    import zipfile

    pod = (ROOT / "entrypoint" / "pod" / "kgen_entrypoint.py").read_text()
    data = (ROOT / "entrypoint" / "pod" / "kgen_entrypoint.pyz").read_bytes()
    assert asm.zip_text(data) == pod, f"the pod zip is stale: {REGENERATE}"
    assert asm.pod_zip(pod) == asm.pod_zip(pod) and asm.zip_text(asm.pod_zip(pod)) == pod
    assert asm.zip_text(b"not a zip") is None
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        [info] = z.infolist()
    assert (info.filename, info.date_time, info.compress_type) == ("__main__.py", (1980, 1, 1, 0, 0, 0), 8)
    assert len(data) < len(pod.encode()) // 2


def test_the_committed_files_are_a_fresh_assembly_of_the_parts():
    whole, pod = asm.assemble()
    assert (ROOT / "entrypoint" / "kgen_entrypoint.py").read_text() == whole, f"the whole file is stale: {REGENERATE}"
    assert (ROOT / "entrypoint" / "pod" / "kgen_entrypoint.py").read_text() == pod, (
        f"the pod copy is stale: {REGENERATE}"
    )
    assert asm.assemble() == (whole, pod)  # deterministic


def test_the_check_mode_says_what_to_run():
    done = subprocess.run([sys.executable, "entrypoint/assemble.py", "--check"], cwd=ROOT, capture_output=True)
    assert done.returncode == 0, done.stdout


def test_every_part_is_assembled_and_the_pod_parts_come_first():
    files = {p.stem for p in PARTS_DIR.glob("*.py")} - {"__init__"}
    assert [name for name, _ in asm.PARTS] == sorted(files, key=[name for name, _ in asm.PARTS].index)
    assert {name for name, _ in asm.PARTS} == files
    pods = [pods for _, pods in asm.PARTS]
    assert pods == sorted(pods, reverse=True)


@pytest.mark.parametrize("part", sorted(p.name for p in PARTS_DIR.glob("*.py")))
def test_every_part_uses_the_standard_library_only(part):
    """The supervising parent imports nothing else; torch only inside the smoke-test worker and --diagnose's GPU
    check (a function each), never at the top of a part."""
    tree = ast.parse((PARTS_DIR / part).read_text())
    top = {id(node) for node in tree.body}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module or ""]
        else:
            continue
        for name in names:
            root = name.split(".")[0]
            allowed = root in sys.stdlib_module_names or (root == "torch" and id(node) not in top)
            assert allowed, f"entrypoint/parts/{part}:{node.lineno}: imports {name}: the entrypoint is stdlib-only"


def _normal(tree: ast.AST) -> ast.AST:
    """Without what the pod copy leaves out: docstrings (of the parts, functions, classes) and annotations of
    functions."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            node.returns = None
            args = node.args
            for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
                if arg is not None:
                    arg.annotation = None
        if isinstance(node, ast.Module):  # the file's docstring stays, the parts' go
            node.body = node.body[:1] + [stmt for stmt in node.body[1:] if not _docstring(stmt)]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if len(node.body) > 1 and _docstring(node.body[0]):
                node.body = node.body[1:]
    return tree


def _docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


def same_program(expected_source: str, pod: str) -> None:
    """The same syntax tree but for what the pod copy leaves out, every node on the same line."""
    expected, got = _normal(ast.parse(expected_source)), _normal(ast.parse(pod))
    assert ast.dump(got) == ast.dump(expected)
    for a, b in zip(ast.walk(expected), ast.walk(got), strict=True):
        if hasattr(a, "lineno"):
            assert (a.lineno, a.end_lineno) == (b.lineno, b.end_lineno), ast.dump(a)[:200]


def test_the_pod_copy_is_the_pod_parts_line_for_line():
    whole = (ROOT / "entrypoint" / "kgen_entrypoint.py").read_text()
    pod = (ROOT / "entrypoint" / "pod" / "kgen_entrypoint.py").read_text()
    lines = whole.split("\n")
    note = lines.index(asm.GUARD_NOTE[0])
    expected = "\n".join(lines[:note] + asm.GUARD) + "\n"
    same_program(expected, pod)
    assert len(pod.split("\n")) == note + len(asm.GUARD) + 1  # a traceback's line N is line N of the whole file
    assert pod.startswith(asm.POD_HEADER + "\n")
    assert '"""kgen in-pod entrypoint' in pod  # the file's docstring stays: what the file is
    assert "def launch_node(" in whole and "def launch_node(" not in pod and "def slurm_node(" not in pod
    assert "def diagnose(" in pod and "def request_stop(" in pod and "def smoke_worker(" in pod
    assert whole.endswith("\n".join(asm.GUARD) + "\n")


TRICKY = '''#!/usr/bin/env python3
"""Module docstring # not a comment."""
import re

X = "a # b"  # a comment
Y = 'it''s' "#"  # two strings, then a comment
Z = r"\\\\" # raw, then a comment
W = """
    # inside a string: kept, with its spaces
"""  # after it: gone
R = re.compile(r"""['"]#""")
S = f"{X!r} {'#'}" r"x" "q"


def f(
    a: int = 1,  # an argument's comment
    *rest: str,
) -> int:
    """A docstring that goes.

    # with a line like a comment
    """
    return a if a else-1


def only_doc():
    """The only statement: kept, or the body would be empty."""


class C:
    """Class docstring: goes."""

    x: int = 1

    def g(self, other: "C", n: int = 2) -> "C":
        "single-quoted docstring: goes"
        return "not a docstring"


if X:
    """A string after if: not a docstring, kept."""
    pass
print(f"{X!r} # not a comment {'#'}", 1 .real, S if 0 else "x") if 0 else None
'''


def test_the_pod_copy_reads_strings_and_comments_as_python_does():
    pod = asm.pod_copy(TRICKY)
    same_program(TRICKY, pod)
    for kept in (
        "X='a # b'",
        "Y='it''s''#'",
        "Z=r'\\\\'",
        "    # inside a string: kept, with its spaces",
        "only statement",
        "A string after if",
        "x:int=1",
        "def g(self,other,n=2):",
        "else-1",
        "1 .real",
        "S=f\"{X!r} {'#'}\"r'x''q'",
        "S if 0 else'x'",
        '"""Module docstring',
    ):
        assert kept in pod, kept
    for gone in ("# a comment", "# two strings", "# raw,", "# an argument's", "# after it", "A docstring that goes"):
        assert gone not in pod, gone
    for gone in ("like a comment", "Class docstring", "single-quoted docstring", "-> int", ": str"):
        assert gone not in pod, gone


def test_where_names_the_part_and_line_of_every_line():
    whole = (ROOT / "entrypoint" / "kgen_entrypoint.py").read_text()
    lines = whole.split("\n")[:-1]
    parts = {p.name: p.read_text().split("\n") for p in PARTS_DIR.glob("*.py")}
    from kgen import sdk

    checked = 0
    for number, text in enumerate(lines, start=1):
        place = sdk.entrypoint_where(number, whole)
        m = re.fullmatch(r"entrypoint/parts/(\w+\.py):(\d+)", place)
        if not text.strip() or text.startswith("# ===="):
            continue
        if m is None:
            assert place.startswith("entrypoint/assemble.py: "), (number, place)
            continue
        assert parts[m.group(1)][int(m.group(2)) - 1] == text, (number, place)
        checked += 1
    assert checked > 0.8 * len(lines)


def test_kgen_entrypoint_where():
    whole = (ROOT / "entrypoint" / "kgen_entrypoint.py").read_text().split("\n")
    hub = (PARTS_DIR / "hub.py").read_text().split("\n")
    res = CliRunner().invoke(cli, ["entrypoint", "--where", str(whole.index("class Hub:") + 1)])
    assert res.exit_code == 0 and res.output == f"entrypoint/parts/hub.py:{hub.index('class Hub:') + 1}\n"
    res = CliRunner().invoke(cli, ["entrypoint", "--where", "2"])
    assert res.output == "entrypoint/parts/header.py:2\n"
    for bad in ("0", str(len(whole))):
        res = CliRunner().invoke(cli, ["entrypoint", "--where", bad])
        assert res.exit_code == 2
        assert res.output == (
            f"kgen: error: --where: must be a line of the entrypoint, 1 to {len(whole) - 1}, got {bad}\n"
        )
