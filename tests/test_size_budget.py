"""Every object kgen renders fits client-side `kubectl apply` with headroom, and the pod copy of the
entrypoint that makes that possible is the same program, line for line.

Client-side `kubectl apply` stores the whole object once more in its `kubectl.kubernetes.io/last-applied-
configuration` annotation, and the API server caps all annotations of an object at 256 KiB (262,144 bytes).
kubectl writes that annotation as Go's encoding/json does (compact, map keys sorted, `<`, `>` and `&` as
`\\u003c`, `\\u003e`, `\\u0026`, U+2028/U+2029 escaped, a newline at the end): `last_applied` does the same.
The budget is 150 KiB (it was half the cap, 128 KiB, until the hang watchdog and stacks, then 144 KiB until the
health gate, whose torch worker travels in the pod copy as a string: ~9 KiB), for the largest
configuration (64x8, every kind, a long command and environment, every optional object); the test fails loudly,
with the sizes, when the entrypoint outgrows it.
"""

from __future__ import annotations

import ast
import json

import pytest
import yaml
from click.testing import CliRunner

from kgen import RenderRequest
from kgen.cli import cli
from kgen.render.pipeline import manifest_text
from kgen.render.podcopy import HEADER, OMIT_BEGIN, OMIT_END, PodCopyError, pod_copy
from kgen.resources import entrypoint_path

BUDGET = 150 * 1024  # bytes of last-applied-configuration per object (the annotations' cap is 256 KiB)
ANNOTATIONS_CAP = 262144

LONG_COMMAND = ["train.py", *(f"--option-{i:03d}=value-{i:03d}-{'x' * 24}" for i in range(100))]  # ~5 KiB
LONG_ENV = [f"--env=TRAIN_SETTING_{i:03d}={'v' * 64}" for i in range(64)]  # ~5 KiB


def last_applied(obj: dict) -> bytes:
    """The object as kubectl's last-applied-configuration annotation holds it (Go's encoding/json)."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    for raw, go in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(raw, go)
    text = text.replace("\\b", "\\u0008").replace("\\f", "\\u000c")  # Go spells these two as \u00XX
    return (text + "\n").encode()


def test_last_applied_is_what_go_writes():
    assert last_applied({"b": 1, "a": "<x & y>\n\u2028"}) == b'{"a":"\\u003cx \\u0026 y\\u003e\\n\\u2028","b":1}\n'


def largest(kind: str) -> list[dict]:
    """The largest configuration, through the CLI (its own parsing of --env and the command)."""
    sets = ["podDisruptionBudget=true", "queue=team-a", "topology.required=cloud.google.com/gce-topology-block"]
    args = ["render", "--preset", "64x8", "--kind", kind, "--name", "llama-70b-pretraining-run-0042", "-n", "ml-team"]
    for s in sets:
        args += ["--set", s]
    res = CliRunner().invoke(cli, [*args, *LONG_ENV, "--", *LONG_COMMAND], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return [d for d in yaml.safe_load_all(res.stdout) if d]


@pytest.mark.parametrize("kind", ["job", "statefulset", "jobset"])
def test_every_object_of_the_largest_configuration_is_within_budget(kind):
    docs = largest(kind)
    sizes = {f"{d['kind']}/{d['metadata']['name']}": len(last_applied(d)) for d in docs}
    biggest = max(sizes, key=sizes.__getitem__)
    print(f"\n{kind}: " + ", ".join(f"{k} {v:,} B" for k, v in sizes.items()))
    assert sizes[biggest] <= BUDGET, (
        f"{biggest} is {sizes[biggest]:,} bytes as kubectl's last-applied-configuration, over the budget of "
        f"{BUDGET:,} (the API server refuses more than {ANNOTATIONS_CAP:,} for all annotations of an object): "
        f"keep the entrypoint lean, or mark code the pods never run with {OMIT_BEGIN!r} ... {OMIT_END!r} "
        f"(kgen/render/podcopy.py); sizes: {sizes}"
    )
    assert {d["kind"] for d in docs} >= {"ConfigMap", "NetworkPolicy", "PodDisruptionBudget"}


# ---- the pod copy: the same program, line for line ------------------------------------------------
def _without_omitted(source: str) -> str:
    out, omitting = [], False
    for line in source.split("\n"):
        omitting = omitting or line.startswith(OMIT_BEGIN)
        out.append("" if omitting else line)
        if line.startswith(OMIT_END):
            omitting = False
    return "\n".join(out)


class _DropDocstrings(ast.NodeTransformer):
    def _strip(self, node):
        self.generic_visit(node)
        body = node.body
        first = body[0]
        if len(body) > 1 and isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
            if isinstance(first.value.value, str):
                node.body = body[1:]
        return node

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _strip


def same_program(source: str, pod: str) -> None:
    expected = _DropDocstrings().visit(ast.parse(_without_omitted(source)))
    assert ast.dump(ast.parse(pod)) == ast.dump(expected)
    lines, pod_lines = source.split("\n"), pod.split("\n")
    if not source.endswith("\n"):
        lines.append("")
    assert len(pod_lines) == len(lines)  # a traceback's line N in a pod is line N of the whole file
    for n, (full, cut) in enumerate(zip(lines[1:], pod_lines[1:], strict=True), start=2):
        assert full.lstrip().startswith(cut.lstrip()), f"line {n}: {cut!r} is not the start of {full!r}"


def test_the_pod_copy_is_the_entrypoint_without_comments_docstrings_and_the_bare_metal_section():
    source = entrypoint_path().read_text()
    pod = pod_copy(source)
    same_program(source, pod)
    assert pod.startswith(HEADER + "\n")
    assert '"""kgen in-pod entrypoint' in pod  # the module docstring stays: what the file is
    assert "def launch_node(" in source and "def launch_node(" not in pod
    assert "def diagnose(" in pod and "def request_stop(" in pod and "def smoke_worker(" in pod
    assert source.count(OMIT_BEGIN) == source.count(OMIT_END) >= 1
    print(f"\nentrypoint {len(source.encode()):,} B, pod copy {len(pod.encode()):,} B")


def test_the_pod_copy_depends_on_the_text_only():
    source = entrypoint_path().read_text()
    assert pod_copy(source) == pod_copy(source)
    assert pod_copy(source.rstrip("\n")) == pod_copy(source)


TRICKY = '''#!/usr/bin/env python3
"""Module docstring # not a comment."""
import re

X = "a # b"  # a comment
Y = 'it''s' "#"  # two strings, then a comment
Z = r"\\\\" # raw, then a comment
W = """
# inside a string: kept
"""  # after it: gone
R = re.compile(r"""['"]#""")


def f(
    a: int = 1,  # an argument's comment
) -> int:
    """A docstring that goes.

    # with a line like a comment
    """
    return a


def only_doc():
    """The only statement: kept, or the body would be empty."""


class C:
    """Class docstring: goes."""

    x = 1

    def g(self):
        "single-quoted docstring: goes"
        return "not a docstring"


if X:
    """A string after if: not a docstring, kept."""
    pass
# >>> not in pods
def bare_metal():
    return 1
# <<< not in pods
print(f"{X!r} # not a comment {'#'}")
'''


def test_the_pod_copy_reads_strings_and_comments_as_python_does():
    pod = pod_copy(TRICKY)
    same_program(TRICKY, pod)
    for kept in (
        'X = "a # b"',
        "Y = 'it''s' \"#\"",
        'Z = r"\\\\"',
        "# inside a string: kept",
        "only statement",
        "A string after if",
        "print(f\"{X!r} # not a comment {'#'}\")",
        '"""Module docstring',
    ):
        assert kept in pod, kept
    for gone in (
        "# a comment",
        "# two strings",
        "# raw,",
        "# an argument's",
        "# after it",
        "A docstring that goes",
        "like a comment",
        "Class docstring",
        "single-quoted docstring",
        "bare_metal",
    ):
        assert gone not in pod, gone


@pytest.mark.parametrize(
    "source, message",
    [
        ("#\nx = '''never closed\n", "a string that never ends"),
        (f"#\n{OMIT_BEGIN}\nx = 1\n", "without '# <<< not in pods' after it"),
        (f"#\n{OMIT_END}\n", "without '# >>> not in pods' before it"),
        (f"#\n{OMIT_BEGIN}\n{OMIT_BEGIN}\n{OMIT_END}\n", "inside a section already left out"),
        ("x = 1\n", "line 1 is code"),
    ],
)
def test_a_source_that_cannot_be_cut_safely_is_refused(source, message):
    with pytest.raises(PodCopyError, match=message.replace("(", r"\(")):
        pod_copy(source)


def test_render_ships_the_pod_copy():
    docs = [d for d in yaml.safe_load_all(manifest_text(RenderRequest())) if d]
    assert docs[0]["data"]["kgen_entrypoint.py"] == pod_copy(entrypoint_path().read_text())


def test_a_traceback_in_the_pod_copy_shows_the_lines_of_the_whole_file(tmp_path):
    """Readable tracebacks: Python reads the lines from the pod copy itself, and line N is line N of
    `kgen entrypoint`'s file (here an internal call given a wrong argument)."""
    import subprocess
    import sys

    source = entrypoint_path().read_text()
    pod = tmp_path / "kgen_entrypoint.py"
    pod.write_text(pod_copy(source))
    code = (
        "import importlib.util, sys; s = importlib.util.spec_from_file_location('ep', sys.argv[1]); "
        "m = importlib.util.module_from_spec(s); s.loader.exec_module(m); m.secret_from_job_uid(None, 'ns', 'x')"
    )
    res = subprocess.run([sys.executable, "-c", code, str(pod)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 1 and "AttributeError" in res.stderr, res.stderr
    lines = res.stderr.splitlines()
    [at] = [i for i, ln in enumerate(lines) if f'File "{pod}"' in ln and "in secret_from_job_uid" in ln]
    number = int(lines[at].split(", line ")[1].split(",")[0])
    shown = lines[at + 1].strip()
    assert shown and shown == source.split("\n")[number - 1].strip(), (shown, number)


def test_every_name_the_pod_copy_uses_is_defined_in_it(tmp_path):
    """A helper defined only inside a left-out section (a bare-metal or Slurm part) and used by the pod's own
    code is a NameError in every pod, at the worst moment (found once: a failure record's time stamp). ruff's
    undefined-name check on the pod copy, as pods run it. The verbs of the left-out sections (`--launch-node`,
    `--run-dir`, `--slurm-node`, `--slurm-end`: bare-metal hosts and Slurm nodes run the whole file) are the
    only names main() may reach that a pod lacks."""
    import subprocess
    import sys

    copy = tmp_path / "kgen_entrypoint.py"
    copy.write_text(pod_copy(entrypoint_path().read_text()))
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--isolated", "--select", "F821,F822,F823",
         "--output-format", "concise", str(copy)],
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    verbs = {"launch_node", "run_dir_verb", "slurm_node", "slurm_end"}
    found = [line for line in done.stdout.splitlines() if ": F8" in line]
    assert done.returncode in (0, 1) and not done.stderr, done.stderr
    assert [line for line in found if line.split("`")[-2:-1] and line.split("`")[-2] not in verbs] == [], found
