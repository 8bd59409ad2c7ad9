"""`kgen render` stays light: no torch, no Kubernetes client, no jsonschema, no bare-metal (ssh) code on the
render path."""

import json
import subprocess
import sys

HEAVY = ["torch", "kubernetes", "jsonschema", "requests", "numpy", "kubernetes_validate", "kgen.baremetal"]


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


def test_the_check_can_fail():
    """The same probe sees a heavy import when one happens (the check is not vacuous)."""
    code = "import sys, json, jsonschema\nprint(json.dumps(['jsonschema' in sys.modules]))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert json.loads(out.stdout) == [True]
