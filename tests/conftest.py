import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PRESETS = ["2node-test", "4x8", "64x8", "4x1"]
KINDS = ["job", "statefulset"]


def pytest_addoption(parser):
    parser.addoption(
        "--update-goldens",
        action="store_true",
        help="rewrite tests/golden/*.yaml from the current templates (review the diff!)",
    )


@pytest.fixture
def update_goldens(request):
    return request.config.getoption("--update-goldens") or os.environ.get("KGEN_UPDATE_GOLDENS") == "1"


@pytest.fixture
def kgen_cmd():
    """The installed console script next to the running interpreter (a real process)."""
    script = Path(sys.executable).parent / "kgen"
    return [str(script)] if script.exists() else [sys.executable, "-m", "kgen"]
