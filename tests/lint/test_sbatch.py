"""kgen lint of sbatch scripts (kgen.lint.sbatch, rules KG170-KG180): the fixtures in tests/lint/fixtures/sbatch/
(public scripts, verbatim where the licence allows, else modelled; README.md there) give exactly the findings a
reviewer expects (NAME.expected: `RULE LINE`, `# near miss KG...: why` for the rules a fixture must not trip);
every rule has a failing fixture and a near miss; which files are sbatch scripts (by their shebang and #SBATCH
lines, or their suffix), in folders and on stdin; and `kgen render --kind slurm` is clean under --strict.
Regenerate the expected findings with KGEN_UPDATE_SBATCH=1 and read the diff."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kgen.findings import Severity
from kgen.lint import sbatch
from kgen.lint.api import LintOptions, lint_paths
from kgen.lint.registry import load_rules
from kgen.lint.sbatch import lint_script, read
from tests.conftest import PRESETS

CORPUS = Path(__file__).resolve().parent / "fixtures" / "sbatch"
FILES = sorted(p for p in CORPUS.iterdir() if p.suffix in (".sbatch", ".slurm"))
SBATCH_RULES = sorted(r.id for r in load_rules().values() if r.scope == "sbatch")
NEAR = re.compile(r"#\s*near miss (KG\d{3})")


def _expected(path: Path) -> list[tuple[str, int]]:
    out = []
    for line in path.with_suffix(".expected").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            rule, lineno = line.split()
            out.append((rule, int(lineno)))
    return sorted(out)


def _near_misses(path: Path) -> set[str]:
    return set(NEAR.findall(path.with_suffix(".expected").read_text()))


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_exactly_the_expected_findings(path):
    result = lint_paths([str(path)], LintOptions())
    got = sorted((f.rule_id, f.line) for f in result.findings)
    if os.environ.get("KGEN_UPDATE_SBATCH"):
        keep = [ln for ln in path.with_suffix(".expected").read_text().splitlines() if ln.startswith("# ")]
        lines = keep + [f"{f.rule_id} {f.line}  # {f.severity.value}: {f.message[:90]}" for f in result.findings]
        path.with_suffix(".expected").write_text("\n".join(lines) + "\n")
    assert got == _expected(path), "\n".join(f.text() for f in result.findings)
    assert all(f.kind == "sbatch" and f.column == 1 for f in result.findings)
    assert not _near_misses(path) & {rule for rule, _ in got}, "a near miss trips its rule"


@pytest.mark.parametrize("path", [p for p in FILES if "# valid" in p.with_suffix(".expected").read_text()])
def test_valid_scripts_are_clean_under_strict(path):
    result = lint_paths([str(path)], LintOptions(fail_on_warnings=True))
    assert result.exit_code == 0, "\n".join(f.text() for f in result.findings)
    assert all(f.severity is Severity.INFO for f in result.findings)


def test_every_sbatch_rule_has_a_failing_fixture_and_a_near_miss():
    failing = {rule for p in FILES for rule, _ in _expected(p)}
    near = set().union(*(_near_misses(p) for p in FILES))
    assert set(SBATCH_RULES) == {f"KG{n}" for n in (*range(170, 181), 184, 185, 186, 191, 192, 193, 208, 209, 211)}
    assert set(SBATCH_RULES) - failing == set(), "rules without a failing fixture"
    assert set(SBATCH_RULES) - near == set(), "rules without a near miss"


def test_the_fixtures_readme_names_every_fixture_and_its_licence():
    readme = (CORPUS / "README.md").read_text()
    for p in FILES:
        row = next((ln for ln in readme.splitlines() if ln.startswith(f"| {p.name} |")), None)
        assert row is not None, f"{p.name} is not in tests/lint/fixtures/sbatch/README.md"
        assert re.search(r"verbatim|modelled|kgen", row), row


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize(
    "more", [[], ["--gpus", "0", "--set", "nprocPerNode=4"], ["--set", "reform.maxReformations=0"]]
)
def test_kgen_render_kind_slurm_is_clean_under_strict(preset, more):
    from kgen import RenderRequest, render

    sets = [more[i + 1] for i in range(len(more)) if more[i] == "--set"]
    gpus = more[more.index("--gpus") + 1] if "--gpus" in more else None
    text = render(RenderRequest(preset=preset, kind="slurm", gpus=gpus, sets=sets, command=["train.py"])).text
    assert lint_script(text, "job.sbatch", ()) == []
    model = read(text)
    [step] = [x for x in model.steps if x.kind == "srun"]
    assert [x.form for x in step.launches] == ["kgen"] and step.launches[0].child[-1] == "train.py"


# ---------------------------------------------------------------------------------------------- reading
def test_directives_as_sbatch_reads_them():
    s = read("#!/bin/bash\n# comment\n\n#SBATCH -N 4 --ntasks-per-node=1   # trailing\n#SBATCH --time 1:00:00 -p gpu\n"
             "##SBATCH --nodes=9\n#SBATCH --exclusive\necho hi\n#SBATCH --nodes=8\n")  # fmt: skip
    assert [(d.name, d.value) for d in s.directives] == [
        ("nodes", "4"),
        ("ntasks-per-node", "1"),
        ("time", "1:00:00"),
        ("partition", "gpu"),
        ("exclusive", None),
    ]
    assert [(d.line, d.name, d.value) for d in s.late] == [(9, "nodes", "8")]
    assert s.nodes == (4, 4) and s.first_command == 8


def test_the_batch_shell_expands_the_srun_line_once():
    s = read('#!/bin/bash\nP=29500\nA=(--nnodes=2 "--node_rank=$SLURM_NODEID")\nexport H=$(hostname)\n'
             'srun torchrun "${A[@]}" --master_addr=$H --master_port=$P t.py\n')  # fmt: skip
    [step] = s.steps
    [launch] = step.launches
    assert launch.flags["nnodes"] == "2" and launch.flags["node_rank"] == "0"
    assert launch.flags["master_addr"] == sbatch.BATCH_VALUE and launch.flags["master_port"] == "29500"
    assert step.node_rank_vars == ["SLURM_NODEID"]


def test_a_tasks_own_shell_expands_what_is_single_quoted():
    s = read("#!/bin/bash\nsrun bash -c 'torchrun --node_rank=$SLURM_NODEID --master_addr=$(hostname) t.py'\n")
    [step] = s.steps
    [launch] = step.launches
    assert launch.script and launch.flags["node_rank"] == "$SLURM_NODEID" and step.node_rank_vars == []


def test_a_python_shebang_is_read_for_its_directives_only():
    s = read("#!/usr/bin/env python3\n#SBATCH --nodes=2\nimport os\n")
    assert not s.shell and s.nodes == (2, 2) and s.steps == [] and s.error is None


def test_lint_skip_comments_and_skip_ids():
    text = (CORPUS / "bench-slurm-peer.sbatch").read_text()
    assert [f.rule_id for f in lint_script(text)] == ["KG178"]
    assert lint_script(text, skip=["KG178"]) == []
    assert lint_script("# kgen.dev/lint-skip: KG178\n".join(text.split("\n", 1))) == []


# ---------------------------------------------------------------------------------------------- which files
def test_which_files_are_sbatch_scripts(tmp_path):
    script = "#!/bin/bash\n#SBATCH --nodes=2\nsrun hostname\n"
    assert sbatch.is_sbatch("job.sh", script) and sbatch.is_sbatch("x.sbatch", "no shebang")
    assert not sbatch.is_sbatch("job.sh", "#!/bin/bash\necho no directives\n")
    assert not sbatch.is_sbatch("job.yaml", "apiVersion: v1\nkind: Pod\n")
    folder = tmp_path / "deploy"
    folder.mkdir()
    for name, text in [("train", script), ("train.sh", script), ("job.slurm", script), ("notes.txt", script),
                       ("helper.sh", "#!/bin/bash\necho hi\n"), ("svc.yaml", "apiVersion: v1\nkind: Namespace\n"
                       "metadata: {name: x}\n"), ("bin", "\x7fELF\x00")]:  # fmt: skip
        (folder / name).write_text(text)
    result = lint_paths([str(folder)], LintOptions())
    assert sorted(Path(f).name for f in result.files) == ["job.slurm", "svc.yaml", "train", "train.sh"]
    assert sorted(d.kind for d in result.documents) == ["Namespace", "sbatch", "sbatch", "sbatch"]


def test_cli_reads_sbatch_from_stdin_and_files(tmp_path):
    text = (CORPUS / "no-srun.sbatch").read_text()
    kgen = [sys.executable, "-m", "kgen"]
    out = subprocess.run([*kgen, "lint", "-"], input=text, capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "<stdin>:11:1: KG175 error:" in out.stdout, out.stdout + out.stderr
    (tmp_path / "ok.sbatch").write_text((CORPUS / "fail-stop-requeue.sbatch").read_text())
    out = subprocess.run([*kgen, "lint", "--strict", "-o", "json", str(tmp_path)], capture_output=True, text=True,
                         timeout=60)  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert '"documents": 1' in out.stdout


def test_hostile_scripts_end_quickly(tmp_path):
    deep = "#!/bin/bash\n#SBATCH --nodes=2\n" + "( " * 5000 + "srun torchrun t.py" + " )" * 5000 + "\n"
    many = "#!/bin/bash\n#SBATCH --nodes=2\n" + "srun torchrun --nnodes=3 t.py\n" * 5000
    found = lint_script(deep)
    assert [f.rule_id for f in found] == ["KG170"]
    assert len([f for f in lint_script(many) if f.rule_id == "KG172"]) == 5000


def test_a_shebang_below_a_licence_header_is_refused_and_the_script_still_read():
    text = (
        "# Copyright (c) the authors\n\n#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\n"
        'srun torchrun --nproc_per_node 4 --rdzv_backend c10d --rdzv_endpoint "$HEAD:29500" train.py\n'
    )
    found = {(f.rule_id, f.line) for f in lint_script(text)}
    assert {("KG170", 1), ("KG172", 6)} <= found
    # no shebang at all: the refusal alone (the shell is unknown)
    assert {f.rule_id for f in lint_script(text.replace("#!/bin/bash\n", ""))} == {"KG170"}
