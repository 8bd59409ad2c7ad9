"""The health gate's judgement and plumbing, without torch: the entrypoint's verdict on a worker's answer
(every node reads the same answer, so every node judges alike), its settings, health.gate from values to the
pod's environment and the sbatch script, and what `kgen status` says of node 0's record. The gate itself on
real torch in network namespaces: tests/entrypoint/test_health_gate_netns.py."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from kgen.api import RenderRequest, render
from kgen.cli import cli
from kgen.runs.exitcodes import TABLE
from kgen.runs.health import HEALTH_MARK, health_lines, health_record
from kgen.runs.records import Row, RunRecords
from kgen.runs.verdict import judge

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("kgen_entrypoint_health", ROOT / "entrypoint" / "kgen_entrypoint.py")
assert _spec is not None and _spec.loader is not None
EP = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(EP)


def answer(n: int, link: dict, up: dict | None = None) -> dict:
    """A worker's answer: every pair's round trip in ms as the lower rank timed it (default 1 ms)."""
    pp: list[dict] = [{} for _ in range(n)]
    for a in range(n):
        for b in range(a + 1, n):
            pp[a][str(b)] = link.get((a, b), 1.0)
            pp[b][str(a)] = 0.1  # the higher rank's view is not used (its send returns once buffered)
    return {"up": [(up or {}).get(r, "") for r in range(n)], "ar": [5.0] * n, "pp": pp}


def test_a_healthy_group_is_one_ok_line_per_node():
    lines, bad = EP.health_verdict(answer(4, {}), 4, 30)
    assert bad == []
    assert lines == [f"node {r}: ok 1.0 ms (all-reduce 5.0 ms)" for r in range(4)]


def test_a_node_whose_every_link_is_slow_is_the_slow_node():
    lines, bad = EP.health_verdict(answer(3, {(0, 2): 210.0, (1, 2): 230.0}), 3, 30)
    assert bad == [2]
    assert lines[2] == "node 2: 210x slower than the median (links to nodes 0, 1: 210.0-230.0 ms, median 1.0 ms)"
    assert lines[0].startswith("node 0: ok") and lines[1].startswith("node 1: ok")


def test_one_slow_link_between_two_good_nodes_names_both_ends():
    lines, bad = EP.health_verdict(answer(4, {(1, 3): 60.0}), 4, 30)
    assert bad == [1, 3]
    assert lines[1] == "node 1: slow link to node 3 (60.0 ms, median 1.0 ms)"
    assert lines[3] == "node 3: slow link to node 1 (60.0 ms, median 1.0 ms)"


def test_small_differences_and_noise_below_the_floor_pass():
    lines, bad = EP.health_verdict(answer(3, {(0, 1): 0.2, (1, 2): 9.0}), 3, 30)  # 45x, but 9 ms: not slow
    assert bad == [], lines


def test_two_nodes_cannot_tell_which_end_and_need_the_absolute_bound():
    assert EP.health_verdict(answer(2, {(0, 1): 80.0}), 2, 30)[1] == []
    lines, bad = EP.health_verdict(answer(2, {(0, 1): 150.0}), 2, 30)
    assert bad == [0, 1]
    assert lines[0] == "node 0: slow link to node 1 (150.0 ms, median 150.0 ms; 2 nodes: either end)"


def test_a_device_problem_names_its_node():
    lines, bad = EP.health_verdict(answer(2, {}, up={1: "0 GPU(s) visible, 8 expected"}), 2, 30)
    assert bad == [1] and lines[1] == "node 1: 0 GPU(s) visible, 8 expected"


def test_a_gate_that_timed_out_names_the_nodes_that_got_least_far():
    lines, bad = EP.health_verdict({"reached": [2, 2, 0]}, 3, 8)
    assert bad == [2]
    assert lines == [
        "node 0: got past the process group",
        "node 1: got past the process group",
        "node 2: no answer within 8s (stuck in the store)",
    ]
    lines, bad = EP.health_verdict({"error": "RuntimeError: boom"}, 2, 8)
    assert bad == [0, 1] and lines[0] == "node 0: the gate failed: RuntimeError: boom"


@pytest.mark.parametrize(
    "env, gate, problem",
    [
        ({}, "warn", ""),
        ({"KGEN_HEALTH_GATE": "FAIL "}, "fail", ""),
        ({"KGEN_HEALTH_GATE": "off"}, "off", ""),
        ({"KGEN_HEALTH_GATE": "maybe"}, "maybe", "KGEN_HEALTH_GATE='maybe' is not off, warn or fail"),
        ({"KGEN_HEALTH_TIMEOUT": "2"}, "warn", "KGEN_HEALTH_TIMEOUT='2' must be >= 5"),
    ],
)
def test_the_gate_settings_are_checked(env, gate, problem):
    problems: list[str] = []
    assert EP.Health().configure(env, problems) == gate
    assert problems[0].startswith(problem) if problem else problems == [], problems


def test_the_exit_code_is_in_the_table():
    assert EP.EXIT_HEALTH == 78 and "health gate" in TABLE[78].meaning


def _env(**kw) -> dict:
    docs = [d for d in yaml.safe_load_all(render(RenderRequest(nodes=2, gpus=0, **kw))) if d]
    job = next(d for d in docs if d["kind"] == "Job")
    return {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}


def test_health_gate_is_rendered_only_when_not_the_default():
    assert "KGEN_HEALTH_GATE" not in _env()
    assert "KGEN_HEALTH_GATE" not in _env(sets=("health.gate=warn",))
    assert _env(health_gate="fail")["KGEN_HEALTH_GATE"] == "fail"
    assert _env(sets=("health.gate=off",))["KGEN_HEALTH_GATE"] == "off"


def test_a_bad_health_gate_is_refused_and_the_flags_take_it():
    res = CliRunner().invoke(cli, ["render", "--nodes", "2", "--health-gate", "maybe", "--", "train.py"])
    assert res.exit_code == 2
    assert 'kgen: error: --health-gate: must be off, warn or fail, got "maybe"' in res.output, res.output
    res = CliRunner().invoke(cli, ["render", "--kind", "slurm", "--nodes", "2", "--health-gate", "off", "--", "t.py"])
    assert res.exit_code == 0 and "export KGEN_HEALTH_GATE=off\n" in res.output, res.output
    res = CliRunner().invoke(cli, ["launch", "--help"])
    assert "--health-gate [off|warn|fail]" in res.output


def _record(lines: list[str], bad: list[int], gate: str = "fail") -> str:
    return f"[kgen node 0 ...] ...\n{HEALTH_MARK}{json.dumps({'gate': gate, 'lines': lines, 'bad': bad})}\n"


def test_status_says_what_the_gate_found():
    log = _record(["node 0: ok 0.3 ms (all-reduce 9.0 ms)", "node 1: slow link to node 0 (150.0 ms, ...)"], [1])
    found = health_record([log])
    assert found is not None
    assert health_lines(found) == [
        "health gate (fail) found 1 node(s) at fault: the run stopped",
        "  health: node 1: slow link to node 0 (150.0 ms, ...)",
        "  health: node 0: ok 0.3 ms (all-reduce 9.0 ms)",
    ]
    passed = health_record([_record(["node 0: ok 1.0 ms", "node 1: ok 1.1 ms"], [], "warn")])
    assert passed is not None and health_lines(passed)[0] == "health gate passed: 2 node(s) ok"
    assert health_record(["no record\n", HEALTH_MARK + "{not json\n"]) is None


def test_a_failed_gate_is_the_headline_of_a_failed_run():
    log = _record(["node 0: ok 0.3 ms", "node 1: 40x slower than the median (links to nodes 0: 12 ms)"], [1])
    rows = [Row(r, "", "h", "Failed", False, 0, 78, TABLE[78].meaning, 0, host=f"h{r}") for r in range(2)]
    rec = RunRecords(name="r", kind="local", expected=2, rows=rows, failures=[], logs={"h0": log}, failed=True)
    v = judge(rec)
    assert v.state == "failed"
    assert v.headline == "Failed: node 1: 40x slower than the median (links to nodes 0: 12 ms) (health gate)", v
    assert "health: node 0: ok 0.3 ms" in v.details


def test_a_gate_that_passed_stays_out_of_status():
    log = _record(["node 0: ok 0.3 ms", "node 1: ok 0.4 ms"], [], "warn")
    rows = [Row(r, "", "h", "Succeeded", False, 0, 0, TABLE[0].meaning, 0, host=f"h{r}") for r in range(2)]
    rec = RunRecords(name="r", kind="local", expected=2, rows=rows, failures=[], logs={"h0": log}, complete=True)
    v = judge(rec)
    assert v.state == "succeeded" and not any("health" in d for d in v.details), v


def test_warn_with_a_node_at_fault_is_a_detail_of_a_run_that_goes_on():
    log = _record(["node 0: ok 0.3 ms", "node 1: slow link to node 0 (150.0 ms, median 150.0 ms)"], [1], "warn")
    rows = [Row(r, "", "h", "Running", True, 0, None, "", 0, host=f"h{r}") for r in range(2)]
    v = judge(RunRecords(name="r", kind="local", expected=2, rows=rows, failures=[], logs={"h0": log}))
    assert "health gate (warn) found 1 node(s) at fault" in v.details, v
    assert "health: node 1: slow link to node 0 (150.0 ms, median 150.0 ms)" in v.details
