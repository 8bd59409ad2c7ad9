"""Lint test configuration: a private schema cache for the whole session."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory):
    """Keep the schema compile cache inside the test session, never in the user's home."""
    mp = pytest.MonkeyPatch()
    mp.setenv("KGEN_CACHE_DIR", str(tmp_path_factory.mktemp("kgen-cache")))
    yield
    mp.undo()
