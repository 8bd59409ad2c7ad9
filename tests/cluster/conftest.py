import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from recordings import ROOT  # noqa: E402


def pytest_collection_modifyitems(config, items):
    if not ROOT.is_dir():
        skip = pytest.mark.skip(reason=f"the cluster recordings are not at {ROOT} (set KGEN_RECORDINGS)")
        for item in items:
            if "tests/cluster" in str(item.fspath):
                item.add_marker(skip)
