"""kgen.slurm is a run adapter beside kgen.cluster and kgen.baremetal (tests/test_architecture.py keeps the arrows
between rooms): here, what it may import at all, and that its verbs load neither the kubernetes client, the
other adapters nor torch."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# What every run adapter shares (the engine protocol and its requests, records, the one verdict, exit codes, views,
# local records, time stamps, text safe for a terminal, a failed process's error, a node's log as `kgen logs` shows,
# the ranks' stacks as `kgen debug stacks` groups them).
VERDICT_LEAVES = {"kgen.runs", "kgen.runs.engine", "kgen.runs.records", "kgen.runs.verdict", "kgen.runs.exitcodes",
                  "kgen.runs.views", "kgen.runs.store", "kgen.runs.stamps", "kgen.runs.safetext", "kgen.runs.errors",
                  "kgen.runs.logtext", "kgen.runs.stacks"}  # fmt: skip
LEAVES = {"kgen.errors", "kgen.resources"}
# the sbatch script, pure (kgen render --kind slurm prints the same); what `kgen render` says on stderr (submit)
RENDER = {"kgen.render.sbatch", "kgen.render.pipeline"}


def kgen_imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("kgen"):
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("kgen"))
    return out


def test_the_slurm_adapter_imports_only_leaves_the_verdict_and_itself():
    for path in sorted((ROOT / "kgen" / "slurm").glob("*.py")):
        for name in kgen_imports(path):
            ok = name.startswith("kgen.slurm") or name in LEAVES | VERDICT_LEAVES | RENDER or name == "kgen.slurm"
            assert ok, f"{path.name} imports {name}"


def test_nothing_outside_imports_it_but_the_python_api():
    """kgen.sdk (the API the CLI calls: the run verbs, `kgen debug stacks`) is the only way in: render, lint, the
    other adapters never import it."""
    importers = set()
    for path in sorted((ROOT / "kgen").rglob("*.py")):
        if "slurm" in path.relative_to(ROOT / "kgen").parts:
            continue
        if any(n.startswith("kgen.slurm") for n in kgen_imports(path)):
            importers.add(path.relative_to(ROOT / "kgen").as_posix())
    assert importers == {"sdk/runs.py", "sdk/debug.py"}


def test_slurm_verbs_run_without_the_kubernetes_client_or_ssh():
    code = (
        "import sys, json\nsys.modules['kubernetes'] = None\n"
        "import kgen.slurm.engine, kgen.slurm.adapter, kgen.render.sbatch\n"
        "print(json.dumps(sorted(m for m in sys.modules if m == 'kubernetes' and sys.modules[m] is not None"
        " or m.startswith(('kgen.baremetal', 'kgen.cli', 'kgen.cluster', 'torch', 'paramiko')))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
