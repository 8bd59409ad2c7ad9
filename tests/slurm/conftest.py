import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from slurmlab import SlurmLab, supported  # noqa: E402

NODES = 4  # a 3-node job plus a spare: a job requeued after a node died runs on the other three


@pytest.fixture(scope="session")
def _slurm_cluster():
    """One real Slurm cluster for the whole session (it starts in about a second); killed by PID at the end."""
    reason = supported()
    if reason:
        pytest.skip(reason)
    lab = SlurmLab(NODES)
    try:
        lab.start()
    except Exception:
        lab.cleanup()
        raise
    yield lab
    lab.cleanup()


@pytest.fixture
def slurm(_slurm_cluster, monkeypatch, request):
    """The cluster, with SLURM_CONF set for kgen's Slurm client. Afterwards: every job cancelled, crashed hosts
    back, every node idle again (so the next test gets the whole cluster); logs printed when the test failed."""
    lab = _slurm_cluster
    monkeypatch.setenv("SLURM_CONF", str(lab.conf))
    yield lab
    failed = getattr(request.node, "rep_call", None)
    if failed is not None and failed.failed:
        print(f"--- slurmctld.log\n{lab.ctld_log()[-3000:]}")
    lab.run("scancel", "--user=root", "--full")
    for h in lab.nodes:
        if not h.alive():
            lab.reboot(h.name)
        else:
            lab.thaw(h.name)
    lab.wait_idle(timeout=90)
