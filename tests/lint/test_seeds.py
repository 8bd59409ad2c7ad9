"""The seeds' manifests (tests/lint/fixtures/seed*.yaml, extracted from ../shared/seeds/) produce
the findings the seeds README lists."""

from __future__ import annotations

import pytest
from lint_helpers import FIXTURES

from kgen.lint.api import LintOptions, lint_paths


def _lint(name):
    return lint_paths([str(FIXTURES / name)], LintOptions())


def _by_rule(result):
    out: dict[str, list] = {}
    for f in result.findings:
        out.setdefault(f.rule_id, []).append(f)
    return out


def test_seed000_2node_job_defects():
    result = _lint("seed000-2node-test-job.yaml")
    found = _by_rule(result)
    assert result.exit_code == 1
    # role: master on every pod: the Service resolves to any pod (a warning: KG105 reports the master address)
    assert "role=master" in found["KG140"][0].message and found["KG140"][0].path == "spec.selector.role"
    # MASTER_ADDR is the Service, not <job>-0.<service>
    assert "opensora-2node-test-0.training-master-service" in found["KG105"][0].message
    assert found["KG105"][0].line == 64
    # the Job sets no subdomain, so <job>-0.<service> would not even resolve
    assert found["KG104"][0].kind == "Job"
    # sleep $((JOB_COMPLETION_INDEX * 30 + 30)) staggering
    assert "JOB_COMPLETION_INDEX * 30" in found["KG111"][0].message
    # exported RANK / LOCAL_RANK and a container-wide WORLD_SIZE
    assert {
        m
        for f in found["KG109"]
        for m in ("RANK", "LOCAL_RANK", "WORLD_SIZE")
        if f"exports {m}," in f.message or f.message.startswith(f"{m} is set")
    } == {"RANK", "LOCAL_RANK", "WORLD_SIZE"}
    # c10d flags mixed with --node_rank / --master_addr / --master_port
    assert "--node-rank" in found["KG112"][0].message and "--master-addr" in found["KG112"][0].message
    assert "your-opensora-image:latest" in found["KG181"][0].message  # the sample's placeholder image never pulls
    # no failure policy: the default backoffLimit retries one pod alone, which cannot rejoin the world
    assert "default backoffLimit (6)" in found["KG117"][0].message and found["KG117"][0].path == "spec"
    assert "BestEffort" in found["KG118"][0].message  # GPU limits only: no cpu/memory requests
    assert set(found) == {
        "KG102",
        "KG104",
        "KG105",
        "KG109",
        "KG111",
        "KG112",
        "KG117",
        "KG118",
        "KG134",  # info: no NetworkPolicy fences the run
        "KG140",
        "KG181",
    }


def test_seed001_multinode_guide_defects():
    result = _lint("seed001-multinode-guide.yaml")
    found = _by_rule(result)
    # the Service selects role: master, which no pod carries: it selects nothing (no workload names it, and
    # KG105 reports the MASTER_ADDR that uses it: a warning)
    assert "lacks role=master" in found["KG140"][0].message
    assert "sleep $((RANDOM % 30 + 30))" in found["KG111"][0].message  # random-sleep staggering
    assert "names the Service" in found["KG105"][0].message
    assert {"KG104", "KG109", "KG112", "KG117", "KG118"} <= set(found)
    assert result.exit_code == 1


def test_seed003_statefulset_guide_defects():
    result = _lint("seed003-statefulset-guide.yaml")
    found = _by_rule(result)
    # the rendezvous endpoint is the Service name, which resolves to any pod
    assert found["KG105"][0].message.startswith("MASTER_ADDR=train-rdzv names the Service")
    assert "train-llm-0.train-rdzv" in found["KG105"][0].message
    assert "--node-rank" in found["KG112"][0].message
    assert {"KG102", "KG213", "KG129"} <= set(found)  # OrderedReady, no probe: pods start one by one (info)
    assert found["KG138"][0].severity.value == "info"  # a 1-GPU pod without /dev/shm: a condition, not a defect


@pytest.mark.parametrize("replicas,expected", [(4, False), (3, True)])
def test_seed003_nnodes_must_track_replicas(tmp_path, replicas, expected):
    """The guide's 'remember to sync NNODES with replicas' step: out of sync is KG106."""
    text = (FIXTURES / "seed003-statefulset-guide.yaml").read_text().replace("replicas: 4", f"replicas: {replicas}")
    path = tmp_path / "sts.yaml"
    path.write_text(text)
    result = lint_paths([str(path)], LintOptions())
    assert ("KG106" in {f.rule_id for f in result.findings}) is expected


@pytest.mark.parametrize("name", ["valid-job.yaml", "valid-statefulset.yaml", "valid-web-app.yaml"])
def test_realistic_fixtures_are_clean(name):
    assert _lint(name).findings == []
