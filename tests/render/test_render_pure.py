"""`kgen render` is a pure function: the same command, values files and kgen version give the
same bytes under any HOME, user, hostname, clock or machine, and it writes nothing but its own cache.

Each render is the real `kgen` process, started with an environment made from scratch (nothing of the test
run's own, such as the private KGEN_CACHE_DIR, leaks in): a fresh HOME, another fresh HOME, a read-only
one, one that does not exist, /dev/null, no HOME at all as a uid without a passwd entry (uid 54321, by
util-linux's setpriv: the test runs as root), CI=true, another time zone and locale, another host name
(a UTS namespace of its own), and a clock ten years ahead (Python's time functions shifted in the child).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

KGEN = str(Path(sys.executable).parent / "kgen")
NOBODY = 54321  # a uid with no passwd entry
# Another uid without a passwd entry, as util-linux's setpriv makes it: it may read every file (the ambient
# CAP_DAC_READ_SEARCH: this interpreter and the clone may live under a 0700 /root) but write only what that
# uid may, so a read-only HOME stays read-only.
AS_ANOTHER_UID = [
    "setpriv",
    f"--reuid={NOBODY}",
    f"--regid={NOBODY}",
    "--clear-groups",
    "--inh-caps=+dac_read_search",
    "--ambient-caps=+dac_read_search",
]
VALUES = "name: pure-run\nnodes: 3\ngpus: 0\nenv:\n  TRAIN_MODE: fast\n"
CLOCK_SHIFT = """\
import time as _t
_SHIFT = 10 * 365 * 86400
_time, _time_ns = _t.time, _t.time_ns
_t.time = lambda: _time() + _SHIFT
_t.time_ns = lambda: _time_ns() + _SHIFT * 10**9
"""

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not os.path.exists(KGEN) or not shutil.which("setpriv") or not shutil.which("unshare"),
    reason="needs root, the kgen script and util-linux (setpriv, unshare)",
)


@pytest.fixture(scope="module")
def world():
    """A folder every uid can read: the values file, the homes, the clock shim."""
    root = Path(tempfile.mkdtemp(prefix="kgen-pure-"))
    root.chmod(0o755)
    (root / "values.yaml").write_text(VALUES)
    (root / "values.yaml").chmod(0o644)
    shim = root / "shim"
    shim.mkdir(mode=0o755)
    (shim / "sitecustomize.py").write_text(CLOCK_SHIFT)
    (shim / "sitecustomize.py").chmod(0o644)
    readonly = root / "readonly-home"
    readonly.mkdir()
    readonly.chmod(0o555)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def render(world: Path, kind: str, env: dict[str, str], *, uid: int | None = None, hostname: str | None = None):
    """`kgen render` as a real process in the given environment (``uid``: NOBODY's, by setpriv); (stdout
    bytes, stderr text, the files it left in its working folder)."""
    assert uid in (None, NOBODY)
    cwd = Path(tempfile.mkdtemp(prefix="cwd-", dir=world))
    cwd.chmod(0o777)
    head = [*AS_ANOTHER_UID, KGEN] if uid is not None else [KGEN]
    argv = [*head, "render", "-f", str(world / "values.yaml"), "--kind", kind, "-n", "ml", "--", "train.py", "-v"]
    if hostname:
        argv = ["unshare", "--uts", "sh", "-c", f'hostname {hostname} && exec "$@"', "sh", *argv]
    base = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "LANG": "C.UTF-8"}
    res = subprocess.run(argv, env={**base, **env}, cwd=cwd, capture_output=True, timeout=120, check=False)
    assert res.returncode == 0, (env, uid, res.stderr.decode())
    return res.stdout, res.stderr.decode(), sorted(os.listdir(cwd))


def written_under(home: Path) -> list[str]:
    return sorted(str(p.relative_to(home)) for p in home.rglob("*") if p.is_file())


@pytest.mark.parametrize("kind", ["job", "statefulset", "jobset"])
def test_the_same_bytes_under_any_home_user_host_clock_and_ci(world, kind):
    first_home = Path(tempfile.mkdtemp(prefix="home-", dir=world))
    reference, ref_err, cwd_files = render(world, kind, {"HOME": str(first_home)})
    assert reference and cwd_files == []
    assert b"kind: Secret" not in reference and b"data:\n  secret:" not in reference
    other_home = Path(tempfile.mkdtemp(prefix="home-", dir=world))
    nobody_home = Path(tempfile.mkdtemp(prefix="home-", dir=world))
    os.chown(nobody_home, NOBODY, NOBODY)
    cases = {
        "another fresh HOME": ({"HOME": str(other_home)}, None, None),
        "a read-only HOME (another uid)": ({"HOME": str(world / "readonly-home")}, NOBODY, None),
        "a HOME that does not exist": ({"HOME": str(world / "no-such-home")}, None, None),
        "HOME=/dev/null": ({"HOME": "/dev/null"}, None, None),
        "no HOME, a uid without a passwd entry": ({}, NOBODY, None),
        "that uid with a HOME of its own": ({"HOME": str(nobody_home)}, NOBODY, None),
        "CI=true": ({"HOME": str(other_home), "CI": "true", "GITHUB_ACTIONS": "true"}, None, None),
        "another time zone and locale": (
            {"HOME": str(other_home), "TZ": "Pacific/Kiritimati", "LC_ALL": "C"},
            None,
            None,
        ),
        "another host name": ({"HOME": str(other_home)}, None, "elsewhere-build-7"),
        "a clock ten years ahead": ({"HOME": str(other_home), "PYTHONPATH": str(world / "shim")}, None, None),
        "XDG folders elsewhere": (
            {"HOME": str(other_home), "XDG_CONFIG_HOME": str(world / "cfg"), "XDG_CACHE_HOME": "relative/cache"},
            None,
            None,
        ),
    }
    for what, (env, uid, hostname) in cases.items():
        out, err, cwd_files = render(world, kind, env, uid=uid, hostname=hostname)
        assert out == reference, f"{kind}: the output differs with {what}"
        assert err == ref_err, f"{kind}: stderr differs with {what}"
        assert cwd_files == [], f"{kind}: {what}: render wrote {cwd_files} into the working folder"
    # Nothing written outside the cache (~/.cache/kgen), and no key or config file anywhere.
    for home in (first_home, other_home, nobody_home):
        assert all(p.startswith(".cache/kgen/") for p in written_under(home)), written_under(home)
    assert not (world / "cfg").exists() and not (world / "no-such-home").exists()
    assert stat.S_IMODE((world / "readonly-home").stat().st_mode) == 0o555 and not any(
        (world / "readonly-home").iterdir()
    )


def test_the_run_key_machinery_is_gone():
    """`~/.config/kgen/run-key` and KGEN_KEY_FILE (kgen 0.1's rendered Secret) are read by nothing now."""
    root = Path(__file__).resolve().parents[2]
    for path in [*root.joinpath("kgen").rglob("*.py"), *root.joinpath("templates").iterdir()]:
        text = path.read_text()
        assert "run-key" not in text and "KGEN_KEY_FILE" not in text, path
