"""Everything `kgen render` can produce -- each preset x kind x supported Kubernetes version -- lints
clean (no findings at all, not even warnings), checked through the real CLI."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from kgen.spec import MAX_K8S, MIN_K8S

PRESETS = ["2node-test", "4x8", "64x8", "4x1"]
KINDS = ["job", "statefulset"]

try:
    from kgen.cli import cli
except ImportError:  # pragma: no cover - render not merged yet
    cli = None


def _render(preset, kind, version):
    return CliRunner().invoke(cli, ["render", "--preset", preset, "--kind", kind, "--kubernetes-version", version])


@pytest.mark.skipif(cli is None or "render" not in getattr(cli, "commands", {}), reason="kgen render is not available")
# Every version render supports (lint itself supports 1.25 and 1.26 too; render's floor is 1.27).
@pytest.mark.parametrize("version", [f"1.{m}" for m in range(MIN_K8S, MAX_K8S + 1)])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("preset", PRESETS)
def test_render_output_lints_clean(preset, kind, version):
    rendered = _render(preset, kind, version)
    if rendered.exit_code == 2 and "supported versions" in rendered.stderr:
        pytest.skip(f"kgen render does not support Kubernetes {version}: {rendered.stderr.strip()}")
    assert rendered.exit_code == 0, rendered.stderr
    linted = CliRunner().invoke(cli, ["lint", "--kubernetes-version", version, "-"], input=rendered.stdout)
    assert (linted.exit_code, linted.stdout) == (0, ""), linted.stdout
