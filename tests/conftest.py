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


@pytest.fixture(autouse=True, scope="session")
def _private_kgen_cache(tmp_path_factory):
    """No test writes kgen's cache into the real home (~/.cache/kgen): one private folder per session."""
    mp = pytest.MonkeyPatch()
    mp.setenv("KGEN_CACHE_DIR", str(tmp_path_factory.mktemp("kgen-cache")))
    yield
    mp.undo()
