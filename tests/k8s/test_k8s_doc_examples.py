"""Every `kgen render` example of README.md and docs/*.md (the lines of their code blocks that start with
`kgen render`, `$ kgen render`) meets the real API server: rendered as written (in a namespace of the test's
own; the values files the examples name exist with a documented value each), created by server-side apply
with strict field validation, and applied again byte for byte without a change. An example the docs show
failing (the next line is `kgen: error: ...`) must fail the same way. Slurm examples print sbatch scripts:
rendered, not applied."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml
from k8sutil import REPO, kgen
from test_k8s_accept import apply_twice

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```[a-z]*\n(.*?)^```$", re.M | re.S)
# what the examples' values files hold (each a value the docs show for it)
VALUES_FILES = {"prod.yaml": "nccl:\n  debug: WARN\n", "v.yaml": "port: 29501\n", "values.yaml": "nodes: 2\n"}


def examples(docs: list[Path] = DOCS) -> list[tuple[str, str, bool]]:
    """(file:line, the example as a shell line, whether the docs show it failing)."""
    out = []
    for path in docs:
        doc = path.read_text(encoding="utf-8")
        for block in FENCE.finditer(doc):
            first = doc.count("\n", 0, block.start(1)) + 1
            lines = block.group(1).splitlines()
            i = 0
            while i < len(lines):
                line = lines[i]
                start = line[2:] if line.startswith("$ ") else line
                if start.startswith("kgen render"):
                    text = start
                    while text.rstrip().endswith("\\") and i + 1 < len(lines):  # continued lines
                        i += 1
                        text = text.rstrip()[:-1] + " " + lines[i].strip()
                    at = f"{path.name}:{first + i}"
                    fails = i + 1 < len(lines) and lines[i + 1].startswith("kgen: error:")
                    out.append((at, text, fails))
                i += 1
    return out


def words(text: str) -> list[str]:
    """The render command's own words: no comment, nothing after a pipe or a redirection, no --output-file."""
    argv = shlex.split(text, comments=True)[2:]
    for stop in ("|", ">", "2>"):
        if stop in argv:
            argv = argv[: argv.index(stop)]
    if "--output-file" in argv:
        i = argv.index("--output-file")
        del argv[i : i + 2]
    return argv


EXAMPLES = examples()


def test_the_docs_have_render_examples():
    assert len(EXAMPLES) >= 12, EXAMPLES


@pytest.mark.parametrize("where, text, fails", EXAMPLES, ids=[f"{w}" for w, _, _ in EXAMPLES])
def test_every_render_example_applies_twice(k8s, inert_ns, tmp_path, where, text, fails):
    for name, content in VALUES_FILES.items():
        (tmp_path / name).write_text(content)
    argv = [(str(tmp_path / a) if a in VALUES_FILES else a) for a in words(text)]
    slurm = "slurm" in argv and "--kind" in argv
    if not slurm:
        cut = argv.index("--") if "--" in argv else len(argv)
        argv[cut:cut] = ["-n", inert_ns]  # the last -n wins: the test's namespace
    res = kgen("render", *argv)
    if fails:
        assert res.returncode == 2 and res.stdout == "" and res.stderr.startswith("kgen: error:"), res.stderr
        return
    assert res.returncode == 0, f"{where}: {text}\n{res.stderr}"
    if slurm:
        assert res.stdout.startswith("#!/bin/bash"), res.stdout[:200]
        return
    out = yaml.safe_load_all(res.stdout)
    docs = [d for d in out if d]
    if len(docs) == 1 and docs[0].get("kind") == "List":  # -o json
        docs = docs[0]["items"]
    assert any(d["kind"] in ("Job", "StatefulSet", "JobSet") for d in docs), [d["kind"] for d in docs]
    apply_twice(k8s, inert_ns, docs)


def test_examples_are_found_where_they_are(tmp_path):
    """The collector reads `$ ` lines, continued lines and the failing ones the docs show."""
    doc = tmp_path / "x.md"
    doc.write_text("```\n$ kgen render --nodes 0\nkgen: error: --nodes: ...\nkgen render --preset 4x8 \\\n"
                   "  --name a | kgen lint -\n```\n")  # fmt: skip
    found = examples([doc])
    assert [(t, f) for _, t, f in found] == [("kgen render --nodes 0", True),
                                             ("kgen render --preset 4x8  --name a | kgen lint -", False)]  # fmt: skip
    assert words(found[1][1]) == ["--preset", "4x8", "--name", "a"]
    assert [w for w, _, _ in found] == ["x.md:2", "x.md:5"]
