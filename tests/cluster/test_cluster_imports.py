"""The cluster verbs are optional: `kgen render`, `lint` and every `--help` work without the
`kubernetes` package, and a cluster command without it says how to install it, in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from kgen.cli import cli

BLOCK = "import sys; sys.modules['kubernetes'] = None\n"  # `import kubernetes` now raises ImportError


def probe(code: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)


@pytest.mark.parametrize("command", ["status", "logs", "stop", "submit", "list", "launch"])
def test_help_does_not_import_kubernetes(command):
    code = (
        "import sys, json\nfrom kgen.cli import main\n"
        f"try:\n    main([{command!r}, '--help'])\nexcept SystemExit as e:\n    assert e.code in (0, None), e.code\n"
        "print(json.dumps([m for m in ('kubernetes', 'urllib3', 'kgen.baremetal') if m in sys.modules]))\n"
    )
    out = probe(code)
    assert out.returncode == 0, out.stderr
    assert "Examples:" in out.stdout
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


@pytest.mark.parametrize("args", [["status", "r"], ["logs", "r"], ["stop", "r"], ["list"]])
def test_missing_kubernetes_is_one_line_install_hint(args, tmp_path):
    """With a cluster configured (a kubeconfig; `kgen list` without one lists the bare-metal runs only)."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    code = BLOCK + f"from kgen.cli import main\nmain({args!r})\n"
    out = probe(code, env={**os.environ, "KUBECONFIG": str(kubeconfig)})
    assert out.returncode == 2
    assert out.stdout == ""
    hint = "the cluster commands need the kubernetes package: pip install 'kgen-k8s[cluster]'"
    if args[0] != "list":  # a name that is no bare-metal or Slurm run either: one line says both
        record = os.path.join(os.environ["XDG_STATE_HOME"], "kgen", "runs", "r.json")
        slurm = os.path.join(os.environ["XDG_STATE_HOME"], "kgen", "slurm", "r.json")
        hint = f"NAME: no run r: no bare-metal or Slurm run of that name (no local record {record} or {slurm}); "
        hint += "cluster runs need the kubernetes package: pip install 'kgen-k8s[cluster]'"
    assert out.stderr.splitlines() == [f"kgen: error: {hint}"]


def test_render_works_without_kubernetes(tmp_path):
    target = tmp_path / "out.yaml"
    out = probe(BLOCK + f"from kgen.cli import main\nmain(['render', '--output-file', {str(target)!r}])\n")
    assert out.returncode == 0, out.stderr
    assert "kind: Job" in target.read_text()


def test_lint_does_not_import_kubernetes(tmp_path):
    target = tmp_path / "run.yaml"
    code = (
        "import sys, json\nfrom kgen.cli import main\n"
        f"for argv in (['render', '--output-file', {str(target)!r}], ['lint', {str(target)!r}]):\n"
        "    try:\n        main(argv)\n    except SystemExit as e:\n        assert e.code in (0, None), e.code\n"
        "print(json.dumps([m for m in ('kubernetes', 'urllib3', 'kgen.baremetal') if m in sys.modules]))\n"
    )
    out = probe(code)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_bare_metal_code_never_imports_the_kubernetes_client():
    """kgen launch and a bare-metal status run without the kubernetes package (an ssh-only machine)."""
    code = BLOCK + (
        "import sys, json\n"
        "import kgen.baremetal.launch, kgen.baremetal.engine, kgen.baremetal.adapter, kgen.cli.baremetal\n"
        "print(json.dumps([m for m in ('kubernetes', 'urllib3') if sys.modules.get(m) is not None]))\n"
    )
    out = probe(code)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


@pytest.mark.parametrize("command", ["status", "logs", "stop", "submit", "list", "launch"])
def test_help_has_examples(command):
    res = CliRunner().invoke(cli, [command, "--help"])
    assert res.exit_code == 0
    assert "Examples:" in res.stdout and f"kgen {command}" in res.stdout
