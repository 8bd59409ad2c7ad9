"""`kgen render` stays light: no torch, no Kubernetes client, no jsonschema, no run engine (bare-metal ssh code,
Slurm, the cluster) on the render path; and the run verbs of a run on this machine load neither the Kubernetes
client nor the render pipeline."""

import json
import os
import subprocess
import sys

HEAVY = ["torch", "kubernetes", "jsonschema", "requests", "numpy", "kubernetes_validate"]
HEAVY += ["kgen.baremetal", "kgen.slurm", "kgen.cluster", "kgen.runs", "kgen.sdk.runs"]  # the run engines


def test_render_imports_nothing_heavy(tmp_path):
    # Never a system path: `-o /dev/null` once replaced the machine's /dev/null.
    target = str(tmp_path / "out.yaml")
    code = (
        "import sys, json\n"
        "from kgen.cli import main\n"
        "try:\n"
        f"    main(['render', '--preset', '64x8', '--output-file', {target!r}])\n"
        "except SystemExit as e:\n"
        "    assert e.code in (0, None), e.code\n"
        f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_a_bare_metal_runs_status_loads_no_client_and_no_render_pipeline(tmp_path):
    """`kgen status NAME` of a run this machine keeps the record of: every engine is asked whether it knows the
    name, and none of them loads the ``kubernetes`` client, jinja2, YAML or the render pipeline to say no."""
    code = (
        "import sys, json\n"
        "from kgen.baremetal import record as B\n"
        "B.save(B.RunRecord(name='here', mode='local', python=sys.executable, nodes=[B.NodeRecord(0, 'localhost')]))\n"
        "from kgen.cli import main\n"
        "try:\n"
        "    main(['status', 'here'])\n"
        "except SystemExit as e:\n"
        "    assert e.code in (0, None), e.code\n"
        "heavy = ('kubernetes', 'jinja2', 'ruamel', 'yaml', 'kgen.render.pipeline', 'kgen.lint', 'torch')\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in heavy or m.startswith(heavy))))\n"
    )
    env = {**os.environ, "KUBECONFIG": str(tmp_path / "no-kubeconfig")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    assert "bare-metal run here" in out.stdout
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_the_check_can_fail():
    """The same probe sees a heavy import when one happens (the check is not vacuous)."""
    code = "import sys, json, jsonschema\nprint(json.dumps(['jsonschema' in sys.modules]))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert json.loads(out.stdout) == [True]
