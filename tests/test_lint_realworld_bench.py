"""bench/lint_realworld: the labelled corpus is well-formed and the scoring script runs.

The corpus is real training manifests and sbatch scripts with hand-written labels; these checks keep
it honest (every file labelled, sources and licences recorded, the split a pure function of the
repository, line numbers inside the files) and run the script on a few cases.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench" / "lint_realworld"
CASES = sorted(BENCH.glob("cases/*/label.json"))
# licences that allow a copy here; share-alike (CC-BY-SA) and unlicensed sources are modelled
PERMISSIVE = {"Apache-2.0", "MIT", "MIT-0", "BSD-2-Clause", "BSD-3-Clause", "ISC", "Unlicense", "CC0-1.0", "UPL-1.0"}
KINDS = {
    "Job",
    "IndexedJob",
    "StatefulSet",
    "JobSet",
    "PyTorchJob",
    "TrainJob",
    "TrainingRuntime",
    "VolcanoJob",
    "LeaderWorkerSet",
    "AppWrapper",
    "MPIJob",
    "sbatch",
}


def load_classes_module():
    spec = importlib.util.spec_from_file_location("lint_realworld_classes", BENCH / "classes.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CLASSES = load_classes_module()


def load_run_module():
    spec = importlib.util.spec_from_file_location("lint_realworld_run", BENCH / "run.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_corpus_has_cases_from_many_repositories():
    labels = [json.loads(p.read_text()) for p in CASES]
    assert sum(len(label["files"]) for label in labels) >= 200
    assert len({label["source"]["repo"] for label in labels}) >= 80
    # every kind lint reads is in the corpus
    assert {label["kind"] for label in labels} == KINDS
    assert {label["split"] for label in labels} == {"train", "test"}


@pytest.mark.parametrize("label_path", CASES, ids=lambda p: p.parent.name[:60])
def test_label_is_well_formed(label_path: Path):
    label = json.loads(label_path.read_text())
    case = label_path.parent
    assert label["id"] == case.name
    assert label["kind"] in KINDS
    source = label["source"]
    assert re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", source["repo"])
    assert re.fullmatch(r"[0-9a-f]{40}", source["commit"])
    assert source["path"] and source["url"].startswith(f"https://github.com/{source['repo']}/blob/{source['commit']}/")
    # a copy only under a licence that allows redistribution; otherwise a modelled file
    assert label["stored"] in ("copy", "modelled")
    if label["stored"] == "copy":
        assert source["licence"] in PERMISSIVE
    # the test split is a pure function of the repository: one repository never in both splits
    digest = int(hashlib.sha256(source["repo"].lower().encode()).hexdigest(), 16)
    assert label["split"] == ("test" if digest % 3 == 0 else "train")
    # every file of the case is labelled, and every labelled file exists
    on_disk = {p.name for p in case.iterdir() if p.name != "label.json"}
    assert on_disk == set(label["files"])
    for name, entry in label["files"].items():
        labels = entry["labels"]
        if labels == "clean":
            continue
        assert isinstance(labels, list) and labels
        n_lines = len((case / name).read_text().splitlines())
        for defect in labels:
            assert defect["class"] in CLASSES.CLASSES, defect["class"]
            assert defect["note"]
            assert defect["severity"] in ("hard", "conditional")
            for line in [defect["line"], *defect.get("lines", [])]:
                assert 1 <= line <= n_lines, (name, defect)


def test_share_alike_and_unlicensed_sources_are_modelled():
    for path in CASES:
        label = json.loads(path.read_text())
        licence = label["source"]["licence"]
        if licence.startswith("CC-BY-SA") or licence not in PERMISSIVE:
            assert label["stored"] == "modelled", path.parent.name


def test_third_party_notices_list_every_repository_as_stored():
    rows = {}
    for line in (BENCH / "THIRD_PARTY_NOTICES.md").read_text().splitlines():
        m = re.match(r"\| \[([^\]]+)\]\(https://github.com/\1\) \| ([^|]+) \| (copy|modelled) \|", line)
        if m:
            rows[m.group(1)] = (m.group(2).strip(), m.group(3))
    corpus = {}
    for path in CASES:
        label = json.loads(path.read_text())
        corpus.setdefault(label["source"]["repo"], set()).add(label["stored"])
        if label["stored"] == "copy":
            assert label["source"]["licence"] == rows[label["source"]["repo"]][0], path.parent.name
    assert set(rows) == set(corpus)
    for repo, stored in corpus.items():
        # a repository is either copied (a licence allowing it) or modelled, never both
        assert stored == {rows[repo][1]}, repo
        if rows[repo][1] == "copy":
            assert rows[repo][0] in PERMISSIVE, repo


def test_script_scores_a_few_cases(tmp_path, capsys):
    run = load_run_module()
    wanted = [
        "kubernetes-sigs__jobset__site_static_examples_pytorch_resnet-cifar10_resnet.yaml",  # a defect
        "kubernetes-sigs__jobset__site_static_examples_pytorch_cnn-mnist_mnist.yaml",  # clean
        "meta-llama__llama-cookbook__getting-started_finetuning_multi_node.slurm",  # sbatch
    ]
    out = tmp_path / "records.json"
    argv = [arg for case in wanted for arg in ("--case", case)] + ["--list", "--json", str(out)]
    assert run.main(argv) == 0
    printed = capsys.readouterr().out
    assert "precision" in printed and "strict pass" in printed and "== split train" in printed
    assert "per class" in printed and "hard rec." in printed
    records = json.loads(out.read_text())
    assert {r["case"] for r in records} == set(wanted)
    for r in records:
        assert r["clean"] == (not r["defects"])
        for f in r["findings"]:
            assert f["severity"] in ("error", "warning") and isinstance(f["true"], bool)
        for d in r["defects"]:
            assert d["caught"] == bool(d["matched_by"])


def test_rule_mapping_names_known_classes():
    assert CLASSES.RULE_CLASSES
    for rule, classes in CLASSES.RULE_CLASSES.items():
        assert re.fullmatch(r"KG\d{3}", rule)
        assert classes and set(classes) <= set(CLASSES.CLASSES), rule
    assert CLASSES.classes_of("KG999") == ()


def test_strict_matching_needs_the_class_and_the_place():
    run = load_run_module()
    text = "a: 1\n---\nkind: Job\nspec:\n  x: 1\n  y: 2\n  z: 3\n  w: 4\n  v: 5\n  u: 6\n---\nkind: Service\n"
    starts = run.document_starts(text, "Job")
    assert starts == [1, 3, 12]
    defect = {"class": "no-shm", "line": 5, "severity": "conditional", "note": "n"}
    # a rule about the class, in the defect's object (even far from its line)
    assert run.matches_strict({"rule": "KG110", "line": 10, "path": ""}, defect, starts)
    # the right rule in another object, or the wrong rule next to the line: false
    assert not run.matches_strict({"rule": "KG110", "line": 12, "path": ""}, defect, starts)
    assert not run.matches_strict({"rule": "KG118", "line": 5, "path": ""}, defect, starts)
    # a rule without a class never matches
    assert not run.matches_strict({"rule": "KG999", "line": 5, "path": ""}, defect, starts)
    # an sbatch script is one object
    assert run.document_starts("#!/bin/bash\n---\n", "sbatch") == [1]


def test_matching_rule():
    run = load_run_module()
    defect = {"class": "x", "line": 10, "lines": [40], "severity": "hard", "note": "n"}
    assert run.matches({"line": 12, "path": ""}, defect)
    assert not run.matches({"line": 13, "path": ""}, defect)
    assert run.matches({"line": 39, "path": ""}, defect)
    assert run.matches({"line": 99, "path": "spec.runPolicy.backoffLimit"}, dict(defect, field="spec.runPolicy"))
    assert not run.matches({"line": 99, "path": "spec.template"}, dict(defect, field="spec.runPolicy"))
