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


RUN_KEY = ROOT / "tests" / "run-key"  # the fixed test key: rendered Secrets (and goldens) derive from it


@pytest.fixture(autouse=True, scope="session")
def _private_kgen_cache(tmp_path_factory):
    """No test writes kgen's cache into the real home (~/.cache/kgen): one private folder per session.
    Likewise the run key (~/.config/kgen/run-key): every render uses the fixed test key."""
    real_key = os.path.expanduser("~/.config/kgen/run-key")
    existed = os.path.exists(real_key)
    mp = pytest.MonkeyPatch()
    mp.setenv("KGEN_CACHE_DIR", str(tmp_path_factory.mktemp("kgen-cache")))
    mp.setenv("KGEN_KEY_FILE", str(RUN_KEY))
    yield
    mp.undo()
    assert os.path.exists(real_key) == existed, "a test created the run key in the real home"
