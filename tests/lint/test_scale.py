"""kgen lint's work grows linearly with the documents: counted, not timed.

The work is the number of function calls (Python and C) that cProfile counts while linting the
bench corpus (bench/lint_scale: Service/Job/ConfigMap apps) -- deterministic for a given input, so
the test holds on a busy machine. 8x the documents must cost at most ~8x the calls: a pairwise
loop over workloads and Services (n^2/16 calls here) pushes the ratio past the bound.
"""

from __future__ import annotations

import cProfile
import importlib.util
import pstats
from importlib.machinery import SourceFileLoader
from pathlib import Path

from kgen.lint.api import LintOptions, lint_paths


def _bench():
    loader = SourceFileLoader("lint_scale", str(Path(__file__).parents[2] / "bench" / "lint_scale"))
    spec = importlib.util.spec_from_loader("lint_scale", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def _calls(folder: Path, docs: int) -> int:
    folder.mkdir()
    _bench().write_corpus(folder, docs)
    opts = LintOptions(kubernetes_version="1.33", jobs=1)  # calls of one process (workers are not profiled)
    lint_paths([str(folder)], opts)  # warm: schemas compiled, modules imported
    profile = cProfile.Profile()
    profile.enable()
    result = lint_paths([str(folder)], opts)
    profile.disable()
    assert len(result.documents) == docs and result.findings  # the corpus has defects: writers do work
    return pstats.Stats(profile).total_calls  # type: ignore[attr-defined]


def test_lint_work_grows_linearly_with_the_documents(tmp_path):
    small = _calls(tmp_path / "small", 300)
    large = _calls(tmp_path / "large", 2400)
    ratio = large / small
    assert ratio < 8.4, f"8x the documents cost {ratio:.2f}x the calls ({small} -> {large}): something is not linear"
