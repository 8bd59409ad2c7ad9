import os
import shutil
import subprocess
import sys
import tempfile
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


@pytest.fixture(autouse=True)
def _private_state_dirs(monkeypatch):
    """No test writes kgen's run records or ssh sockets into the real home or /run: XDG_STATE_HOME and
    XDG_RUNTIME_DIR are private temp folders per test (short: ssh's control sockets live in the second).
    Connection-sharing ssh masters a test left behind are ended by their socket (ssh -O exit)."""
    state = tempfile.mkdtemp(prefix="kgst")
    runtime = tempfile.mkdtemp(prefix="kgrt")
    monkeypatch.setenv("XDG_STATE_HOME", state)
    monkeypatch.setenv("XDG_RUNTIME_DIR", runtime)
    yield
    sockets = Path(runtime) / "kgen-ssh"
    if sockets.is_dir():
        for sock in sockets.iterdir():
            argv = ["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "kgen-test"]
            subprocess.run(argv, capture_output=True, timeout=10, check=False)
    shutil.rmtree(state, ignore_errors=True)
    shutil.rmtree(runtime, ignore_errors=True)
