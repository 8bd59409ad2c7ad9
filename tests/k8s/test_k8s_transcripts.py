"""The README's cluster transcripts ("The day of a run": k8s-day, k8s-failure, k8s-stop) are what the cluster
verbs print on the real control plane: recorded again here (tests/transcript_lab.py's scenario on the session's
control plane and kubelet stand-in, about 90 s) and compared but for times, ids, PIDs and pod placement
(`bench/transcripts --write k8s` re-records them with a control plane of its own)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import transcript_lab as lab  # noqa: E402

pytestmark = pytest.mark.torch


@pytest.mark.timeout(600)
def test_the_cluster_transcripts_are_what_a_run_on_the_real_control_plane_prints(k8s, tmp_path):
    fresh = lab.k8s_day(tmp_path, k8s)
    shown = lab.blocks()
    problems = []
    for name, text in fresh.items():
        diff = lab.differences(shown[name][1], text)
        if diff:
            problems.append(f"{name}:\n" + "\n".join(diff))
    assert not problems, "the README's cluster transcripts differ from a fresh run:\n" + "\n\n".join(problems)
