import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def shipped_pod_copy(configmap: dict) -> str:
    """The entrypoint text a rendered ConfigMap ships: its binaryData zip's one member, __main__.py."""
    import base64
    import io
    import zipfile

    with zipfile.ZipFile(io.BytesIO(base64.b64decode(configmap["binaryData"]["kgen_entrypoint.py"]))) as z:
        assert z.namelist() == ["__main__.py"], z.namelist()
        return z.read("__main__.py").decode("utf-8")


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


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    """``item.rep_call``: the call phase's report, for fixtures that print their processes' logs when the
    test failed (tests/baremetal and tests/entrypoint)."""
    rep = yield
    if rep.when == "call":
        item.rep_call = rep
    return rep


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


# System paths no test may create on the host (the brief: never /opt/kgen). The pod harness makes
# /opt/kgen exist only inside each pod's own mount namespace.
HOST_PATHS = ("/opt/kgen",)
FS_CLOCK_SLACK = 0.05  # seconds


def describe_path(path: str, since: float) -> str:
    """What is at ``path`` and when it appeared, for the message of a test that must not have made it."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        return f"gone again ({exc.strerror})"
    kind = (
        "a symlink to " + os.readlink(path)
        if stat.S_ISLNK(st.st_mode)
        else "a folder"
        if stat.S_ISDIR(st.st_mode)
        else "a file"
    )
    what = f"{kind} (owner uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):04o})"
    if stat.S_ISDIR(st.st_mode):
        try:
            entries = sorted(os.listdir(path))
            what += f" holding {entries[:5]}" + (f" and {len(entries) - 5} more" if len(entries) > 5 else "")
        except OSError:
            pass
    made = st.st_ctime - since
    when = (  # file times come from the kernel's coarse clock: up to a tick behind time.time()
        f"changed {max(made, 0.0):.1f} s after this test started"
        if made >= -FS_CLOCK_SLACK
        else f"changed {-made:.1f} s before this test started: made by another process on this machine "
        "(another session's tests?), seen first here"
    )
    return f"{what}, {when}"


@pytest.fixture(autouse=True)
def _no_system_path_created(request):
    """Checked around every test (one lstat per path): names the test during which a system path appeared,
    and what it is. A path that was there before the test is the host's, not this test's."""
    before = [p for p in HOST_PATHS if not os.path.lexists(p)]
    since = time.time()
    yield
    made = [p for p in before if os.path.lexists(p)]
    if made:
        found = "; ".join(f"{p}: {describe_path(p, since)}" for p in made)
        pytest.fail(f"{request.node.nodeid} left a system path on the host: {found}", pytrace=False)


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
