import os
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from podharness import Cluster


def _pods_supported() -> str | None:
    if os.geteuid() != 0:
        return "needs root (unshare --pid --mount)"
    if shutil.which("unshare") is None:
        return "needs util-linux unshare"
    return None


@pytest.fixture
def cluster(request):
    """Factory: cluster(manifest, **kw) -> Cluster; every pod is killed at the end of the test and
    the pods' logs are printed when the test fails."""
    reason = _pods_supported()
    if reason:
        pytest.skip(reason)
    made: list[Cluster] = []

    def make(manifest: str, **kw) -> Cluster:
        c = Cluster(manifest, **kw)
        made.append(c)
        return c

    yield make
    failed = getattr(request.node, "rep_call", None)
    for c in made:
        if failed is not None and failed.failed:
            print(c.logs())
        c.cleanup()


# /opt/kgen on the host: tests/conftest.py checks it around every test.
