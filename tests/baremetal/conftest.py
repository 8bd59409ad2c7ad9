import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sshlab import SshLab, supported  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TRAINLOOP = REPO / "tests" / "entrypoint" / "trainloop.py"


@pytest.fixture
def lab(request, tmp_path):
    """Factory: lab(n) -> SshLab with n real sshd hosts started; every host is killed (by PID) at the end,
    and the hosts' sshd logs are printed when the test failed."""
    reason = supported()
    if reason:
        pytest.skip(reason)
    made: list[SshLab] = []

    def make(n: int = 3) -> SshLab:
        lab = SshLab(tmp_path / f"lab{len(made)}", n)
        made.append(lab)
        try:
            return lab.start()
        except Exception:
            lab.cleanup()
            raise

    yield make
    failed = getattr(request.node, "rep_call", None)
    for lab in made:
        if failed is not None and failed.failed:
            for h in lab.hosts:
                log = h.dir / "sshd.log"
                if log.exists():
                    print(f"--- {h.name} sshd.log\n{log.read_text()[-2000:]}")
        lab.cleanup()


@pytest.fixture
def kgen(kgen_cmd):
    """kgen as a real process with the test's environment; returns CompletedProcess (text)."""

    def run(*args: str, timeout: float = 120, check: bool = False) -> subprocess.CompletedProcess:
        if args[:1] == ("launch",) and "--health-gate" not in args:  # the gate's own tests: test_health_gate_netns.py
            args = ("launch", "--health-gate", "off", *args[1:])
        res = subprocess.run([*kgen_cmd, *args], capture_output=True, text=True, timeout=timeout, env=dict(os.environ))
        if check and res.returncode != 0:
            raise AssertionError(f"kgen {' '.join(args)}: exit {res.returncode}\n{res.stdout}\n{res.stderr}")
        return res

    return run


@pytest.fixture(autouse=True, scope="session")
def _real_home_untouched():
    """The hosts' remote user is root with a private HOME: nothing of kgen may appear in the real one."""
    target = Path.home() / ".local" / "state" / "kgen"
    before = target.exists()
    yield
    assert target.exists() == before, f"a test wrote {target} (the real home)"
