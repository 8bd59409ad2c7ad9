"""The README's kind table and clean-up commands, docs/cluster.md and docs/baremetal.md on
`kgen stop`, docs/design.md and `kgen render --help` name every object `kgen render` emits (and the Secret a
StatefulSet run uses), checked against what it actually emits for every kind."""

from __future__ import annotations

import re

import pytest
import yaml
from click.testing import CliRunner

from kgen.cli import cli
from kgen.cluster.engine import STOP_KINDS
from tests.conftest import ROOT

KINDS = ("job", "statefulset", "jobset")
README = (ROOT / "README.md").read_text()


def emitted(kind: str) -> list[str]:
    res = CliRunner().invoke(cli, ["render", "--preset", "4x8", "--kind", kind, "--set", "podDisruptionBudget=true"])
    assert res.exit_code == 0, res.output
    return [d["kind"] for d in yaml.safe_load_all(res.stdout) if d]


def used(kind: str) -> set[str]:
    """What a run of this kind is made of: what render emits, and a StatefulSet's Secret."""
    return set(emitted(kind)) | ({"Secret"} if kind == "statefulset" else set())


def mentions(text: str, kind: str) -> bool:
    return re.search(rf"\b{kind}\b", text) is not None


@pytest.mark.parametrize("column, kind", list(enumerate(KINDS, start=1)))
def test_the_readme_kind_table_lists_every_object(column, kind):
    [row] = [ln for ln in README.splitlines() if ln.startswith("| objects |")]
    cell = row.split("|")[column + 1]
    missing = [k for k in used(kind) if not mentions(cell, k)]
    assert not missing, f"README's kind table, {kind}: {missing} missing from {cell!r}"


@pytest.mark.parametrize("kind", KINDS)
def test_the_readme_clean_up_command_deletes_every_object(kind):
    commands = [ln for ln in README.splitlines() if f"kubectl delete {kind}," in ln]
    assert commands, f"no clean-up command for kind {kind} in the README"
    for line in commands:
        types = set(re.search(r"kubectl delete (\S+)", line).group(1).rstrip("`").split(","))
        missing = {k for k in used(kind) if k.lower() not in types}
        assert not missing, f"README: {line.strip()!r} leaves {missing} behind"


def test_kgen_stop_deletes_every_object_and_the_docs_say_so():
    everything = set().union(*(used(k) for k in KINDS))
    assert everything <= set(STOP_KINDS), everything - set(STOP_KINDS)
    stop = (ROOT / "docs" / "cluster.md").read_text().split("## `kgen stop`", 1)[1].split("\n## ", 1)[0]
    assert not [k for k in STOP_KINDS if not mentions(stop, k)], stop
    [row] = [ln for ln in (ROOT / "docs" / "baremetal.md").read_text().splitlines() if "| `kgen stop RUN` |" in ln]
    kube = row.split("|")[3]
    assert not [k for k in everything if not mentions(kube, k)], kube


def test_design_and_render_help_name_every_object():
    design = (ROOT / "docs" / "design.md").read_text().split("## What `kgen render` emits", 1)[1].split("\n## ")[0]
    help_text = CliRunner().invoke(cli, ["render", "--help"]).stdout
    first = help_text.split("\n\n")[1]
    for kind in set().union(*(emitted(k) for k in KINDS)):
        assert mentions(design, kind), f"docs/design.md does not name {kind}"
        assert mentions(first, kind), f"the first line of `kgen render --help` does not name {kind}: {first!r}"
