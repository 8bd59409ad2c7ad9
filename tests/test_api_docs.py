"""docs/api.md's examples run as written (each Python block in its own process, in a temporary folder), and
the Python API is what the CLI calls."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "api.md").read_text(encoding="utf-8"), re.S)
LAUNCHES = [b for b in BLOCKS if "launch(" in b]  # starts torch: the torch-marked test below
OTHERS = [b for b in BLOCKS if b not in LAUNCHES]


def run_block(code: str, cwd: Path, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=timeout)


def test_the_docs_have_examples():
    assert len(OTHERS) >= 6 and len(LAUNCHES) == 1


@pytest.mark.parametrize("block", OTHERS, ids=[f"block{i}" for i in range(len(OTHERS))])
def test_docs_example_runs(block, tmp_path):
    res = run_block(block, tmp_path, timeout=120)
    assert res.returncode == 0, res.stderr


@pytest.mark.torch
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_docs_launch_example_runs(tmp_path):
    sys.path.insert(0, str(ROOT / "tests" / "baremetal"))
    from sshlab import free_port_pair

    (tmp_path / "port").write_text(str(free_port_pair()))
    try:
        res = run_block(LAUNCHES[0], tmp_path, timeout=200)
        assert res.returncode == 0, res.stderr
    finally:  # a run the example did not end is stopped by name (its processes, its files)
        from kgen import RunRef, StopRequest, stop

        try:
            stop(StopRequest(RunRef("api-demo", on="bare-metal"), remove=True))
        except Exception:  # noqa: BLE001 - nothing left to stop: the example removed it
            pass


def test_from_kgen_import_gives_the_functions_whatever_was_imported_before():
    code = (
        "import json, kgen.render.spec, kgen.lint.api\n"
        "from kgen.render import pipeline\n"
        "from kgen import render, lint, RenderRequest\n"
        "import kgen, kgen.sdk\n"
        "print(json.dumps([render is kgen.sdk.render, lint is kgen.sdk.lint, kgen.render is render,"
        " callable(kgen.lint), RenderRequest is kgen.sdk.RenderRequest]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [True] * 5


def test_import_kgen_loads_no_api():
    code = "import sys, json, kgen\nprint(json.dumps(sorted(m for m in sys.modules if m.startswith('kgen'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert json.loads(out.stdout) == ["kgen"]


def test_kgen_api_keeps_kgen_0_1_s_names():
    from kgen import api

    text = api.render(api.RenderRequest(preset="4x1", flags={"nodes": "3"}))
    assert isinstance(text, str) and "completions: 3" in text
    assert api.build(api.RenderRequest(preset="4x8")).nodes == 4


def test_the_cli_renders_what_the_api_renders(tmp_path):
    from click.testing import CliRunner

    from kgen import RenderRequest, render
    from kgen.cli import cli

    res = CliRunner().invoke(cli, ["render", "--preset", "4x8", "--nodes", "3", "--name", "x", "--", "train.py"])
    assert res.exit_code == 0, res.output
    assert res.stdout == render(RenderRequest(preset="4x8", nodes=3, name="x", command=["train.py"])).text
