"""Apply units: the cross-document rules see one unit at a time -- a folder's own files,
a kustomization folder with what it lists, stdin -- so environments and apps kept side by side in
one repository do not collide, and a reference into another unit never satisfies a rule."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from click.testing import CliRunner
from lint_helpers import BASES, FIXTURES, dump

from kgen.cli import cli
from kgen.lint.api import LintOptions, lint_paths
from kgen.lint.check import Unit
from kgen.lint.units import STDIN, Entry, assign, groups

UNITS = FIXTURES / "units"


def run(args, input=None):
    result = CliRunner().invoke(cli, ["lint", *args], input=input)
    return result.exit_code, result.stdout, result.stderr


def rules(out: str) -> list[tuple[str, str]]:
    """(file, rule) of every finding line of a text report."""
    got = []
    for line in out.splitlines():
        where, _, rest = line.partition(": ")
        if rest[:2] == "KG":
            got.append((where.split(":")[0], rest.split()[0]))
    return got


@pytest.fixture
def layout(tmp_path, monkeypatch):
    """A copy of tests/lint/fixtures/units/ as the current folder (findings name relative paths)."""
    shutil.copytree(UNITS, tmp_path / "units")
    monkeypatch.chdir(tmp_path / "units")
    return tmp_path / "units"


@pytest.mark.parametrize(
    "folder,units",
    [("gitops", 2), ("envs", 2), ("monorepo", 3), (".", 7)],
)
def test_gitops_layouts_lint_clean_under_strict(layout, folder, units):
    code, out, _ = run(["--strict", "-o", "json", folder])
    report = json.loads(out)
    assert (code, report["findings"], report["summary"]["units"]) == (0, [], units)
    assert run(["--strict", folder])[:2] == (0, "")


def test_the_units_of_a_repository(layout):
    result = lint_paths(["."], LintOptions(kubernetes_version="1.33"))
    assert [(u.name, u.kind, len(u.files)) for u in result.units] == [
        ("envs/dev/", "directory", 2),
        ("envs/prod/", "directory", 2),
        ("gitops/overlays/dev/", "kustomization", 3),  # the base's three files (its patch is skipped)
        ("gitops/overlays/prod/", "kustomization", 4),  # the base's and its own quota.yaml
        ("monorepo/guestbook/", "directory", 2),
        ("monorepo/guestbook-go/", "directory", 2),
        ("monorepo/trainer/", "directory", 1),
    ]
    skipped = {s.path.removeprefix("./"): s.reason for s in result.skipped}
    assert skipped["gitops/overlays/dev/small.yaml"].startswith(
        "Kustomize patch, listed in gitops/overlays/dev/kustomization.yaml"
    )
    assert "gitops/overlays/prod/image.yaml" in skipped  # patchesStrategicMerge
    assert sorted(f.removeprefix("./") for f in result.files) == sorted(
        f for f in (str(p.relative_to(layout)) for p in layout.rglob("*.yaml")) if f not in skipped
    )


def test_unit_tree_is_one_context_as_before(layout):
    """What kgen did before units (as once reported): every document of the folder together."""
    code, out, _ = run(["--strict", "--unit", "tree", "envs"])
    assert code == 1
    found = rules(out)
    assert found.count(("envs/prod/train.yaml", "KG027")) == 3 and found.count(("envs/prod/web.yaml", "KG027")) == 2
    assert (
        "envs/prod/train.yaml",
        "KG140",
    ) in found  # one environment's Service also selects the other's Job (KG103 before the severity split)
    code, out, _ = run(["--strict", "--unit", "tree", "monorepo"])
    assert code == 1 and {r for _, r in rules(out)} == {"KG027"}


def test_a_missing_service_in_one_environment_is_reported(layout):
    prod = layout / "envs" / "prod" / "train.yaml"
    prod.write_text("---".join(part for part in prod.read_text().split("---") if "kind: Service" not in part))
    code, out, _ = run(["--strict", "envs"])
    assert code == 1 and rules(out) == [("envs/prod/train.yaml", "KG100")]
    assert "names Service 'llama', which is not among the linted files" in out
    assert run(["--strict", "--unit", "tree", "envs"])[0] == 1  # (collisions)
    assert ("envs/prod/train.yaml", "KG100") not in rules(run(["--unit", "tree", "envs"])[1])  # the old miss


def test_an_overlay_that_leaves_out_the_service_is_reported_with_its_unit(layout):
    """The base holds no Service; dev's overlay adds one, prod's does not: the Job of the base is
    wired in dev's unit and not in prod's."""
    base, dev = layout / "gitops" / "base", layout / "gitops" / "overlays" / "dev"
    (base / "service.yaml").rename(dev / "service.yaml")
    kust = base / "kustomization.yaml"
    kust.write_text(kust.read_text().replace("- service.yaml\n", ""))
    kust = dev / "kustomization.yaml"
    kust.write_text(kust.read_text().replace("- ../../base\n", "- ../../base\n- service.yaml\n"))
    code, out, _ = run(["--strict", "-o", "json", "gitops"])
    findings = json.loads(out)["findings"]
    assert code == 1 and [(f["rule"], f["file"], f["unit"]) for f in findings] == [
        ("KG100", "gitops/base/job.yaml", "gitops/overlays/prod/")
    ]
    code, out, _ = run(["--strict", "--summary", "gitops"])
    assert out.splitlines()[-2] == "Unit gitops/overlays/prod/ (kustomization, 3 files): 0 errors, 1 warning, 0 info"
    assert out.splitlines()[-1].endswith(" - 2 apply units")


def test_objects_in_different_explicit_namespaces_never_collide(tmp_path):
    docs = []
    for ns in ("team-a", "team-b"):
        for doc in BASES["job"]():
            doc["metadata"]["namespace"] = ns
            docs.append(doc)
    (tmp_path / "both.yaml").write_text(dump(docs))
    assert run(["--strict", str(tmp_path)]) == (0, "", "")
    for doc in docs:  # without namespaces they are the same objects
        del doc["metadata"]["namespace"]
    (tmp_path / "both.yaml").write_text(dump(docs))
    code, out, _ = run(["--strict", str(tmp_path)])
    assert code == 1 and {r for _, r in rules(out)} == {"KG027", "KG140"}


def test_unit_file_checks_each_file_alone(tmp_path):
    svc, job, netpol = BASES["job"]()
    (tmp_path / "svc.yaml").write_text(dump([svc, netpol]))
    (tmp_path / "job.yaml").write_text(dump([job]))
    assert run(["--strict", str(tmp_path)]) == (0, "", "")
    files = [str(tmp_path / "job.yaml"), str(tmp_path / "svc.yaml")]
    assert run(["--strict", *files]) == (0, "", "")  # files of one folder named one by one: one unit
    code, out, _ = run(["--strict", "--unit", "file", str(tmp_path)])
    job = str(tmp_path / "job.yaml")
    assert code == 1 and sorted(rules(out)) == [(job, "KG100"), (job, "KG134")]  # no Service, no NetworkPolicy


def test_explain_names_the_unit_when_a_run_has_several(layout):
    _, out, _ = run(["--explain", "envs"])
    lines = [line for line in out.splitlines() if " KG137 " in line]
    assert [line.split(":")[0] for line in lines] == ["envs/dev/train.yaml", "envs/prod/train.yaml"]
    assert lines[1].endswith("; apply unit: envs/prod/ (directory) [spec.template]")
    _, out, _ = run(["--explain", "envs/prod"])  # one unit: the message as before
    assert "apply unit" not in out and " KG137 " in out


def test_a_bad_unit_is_a_usage_error():
    code, out, err = run(["--unit", "folder", str(FIXTURES / "valid-job.yaml")])
    assert (code, out) == (2, "") and "--unit" in err and "dir, file, tree" in err and "Traceback" not in err


def test_assign_and_groups_are_pure_decisions():
    entries = [Entry("a/x.yaml", "/r/a", "a/"), Entry("a/y.yaml", "/r/a", "a/"), Entry(STDIN, STDIN, STDIN)]
    entries.append(Entry("b/z.yaml", "/r/b", "b/"))
    folders = [("/r/a", "a/"), (STDIN, STDIN), ("/r/b", "b/")]
    plain = assign(entries, folders, "dir", lambda folder, shown: None)
    assert plain == [
        Unit("a/", "directory", ("a/x.yaml", "a/y.yaml")),
        Unit(STDIN, "stdin", (STDIN,)),
        Unit("b/", "directory", ("b/z.yaml",)),
    ]
    assert [u.name for u in assign(entries, folders, "file", lambda f, s: None)] == [e.key for e in entries]
    everything = Unit("all inputs", "tree", tuple(e.key for e in entries))
    assert assign(entries, folders, "tree", lambda f, s: None) == [everything]
    assert [(files, [u.name for u in us]) for files, us in groups(plain)] == [
        (["a/x.yaml", "a/y.yaml"], ["a/"]),
        ([STDIN], [STDIN]),
        (["b/z.yaml"], ["b/"]),
    ]
    shared = [Unit("o1/", "kustomization", ("base/j.yaml", "o1/q.yaml")), Unit("x/", "directory", ("x/a.yaml",))]
    shared.append(Unit("o2/", "kustomization", ("base/j.yaml",)))
    assert [(files, [u.name for u in us]) for files, us in groups(shared)] == [
        (["base/j.yaml", "o1/q.yaml"], ["o1/", "o2/"]),
        (["x/a.yaml"], ["x/"]),
    ]


def test_a_kustomization_outside_the_folders_given_is_followed(layout):
    """``kgen lint gitops/overlays/prod`` lints what ``kubectl apply -k`` creates: the base too."""
    code, out, _ = run(["--strict", "-o", "json", os.path.join("gitops", "overlays", "prod")])
    report = json.loads(out)
    assert code == 0 and report["summary"]["files"] == 4 and report["summary"]["units"] == 1


def test_a_file_of_a_base_that_its_kustomization_does_not_list_is_still_linted(layout):
    base = layout / "gitops" / "base"
    (base / "extra.yaml").write_text((layout / "envs" / "dev" / "web.yaml").read_text())
    result = lint_paths(["gitops"], LintOptions(kubernetes_version="1.33"))
    assert "gitops/base/extra.yaml" in result.files and not result.findings
    assert [(u.name, u.kind, u.files) for u in result.units][-1] == (
        "gitops/base/",
        "directory",
        ("gitops/base/extra.yaml",),
    )
