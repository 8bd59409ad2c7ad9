"""One contract, four places: the entrypoint's EXIT_* codes, the Job's podFailurePolicy, the JobSet's
not-retriable codes and `kgen status`'s table of meanings must agree (the entrypoint is a standalone
file users copy, so it cannot import kgen: this test is what keeps them in step)."""

from __future__ import annotations

import ast

import yaml

from kgen import RenderRequest, jobset
from kgen.render.pipeline import manifest_text
from kgen.resources import entrypoint_path
from kgen.runs.exitcodes import TABLE


def entrypoint_codes() -> dict[str, int]:
    tree = ast.parse(entrypoint_path().read_text())
    return {
        node.targets[0].id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and isinstance(node.targets[0], ast.Name)
        and node.targets[0].id.startswith("EXIT_")
        and isinstance(node.value, ast.Constant)
    }


def test_every_entrypoint_code_has_a_meaning_in_kgen_status():
    codes = entrypoint_codes()
    assert {"EXIT_CONFIG", "EXIT_PEERS_MISSING", "EXIT_PEER_LOST", "EXIT_DROPPED", "EXIT_STOPPED"} <= set(codes)
    assert set(codes.values()) <= set(TABLE), sorted(set(codes.values()) - set(TABLE))
    assert TABLE[codes["EXIT_PEER_LOST"]].role == "victim"  # never the root cause
    assert codes["EXIT_STOPPED"] == 6 and TABLE[6].role == "stopped"  # the group stop: stopped by user


def test_the_jobs_failure_policy_replaces_exactly_the_lost_dropped_killed_and_deleted_pods():
    codes = entrypoint_codes()
    job = next(d for d in yaml.safe_load_all(manifest_text(RenderRequest(preset="4x8"))) if d and d["kind"] == "Job")
    rules = job["spec"]["podFailurePolicy"]["rules"]
    ignored = {v for r in rules if r["action"] == "Ignore" and "onExitCodes" in r for v in r["onExitCodes"]["values"]}
    assert ignored == {codes["EXIT_PEER_LOST"], codes["EXIT_DROPPED"], 128 + 9, 128 + 15}
    # a user's stop (6) is not a lost node: the Job fails at once (FailJob), the JobSet does not restart
    internal, fail = [r for r in rules if r["action"] == "FailJob"]
    assert fail["onExitCodes"] == {"containerName": "trainer", "operator": "NotIn", "values": [0]}
    assert codes["EXIT_STOPPED"] not in ignored
    # kgen's own failure has its own rule, before the catch-all: the Job's message names it
    assert internal["onExitCodes"] == {"containerName": "trainer", "operator": "In", "values": [codes["EXIT_INTERNAL"]]}
    assert rules.index(internal) == rules.index(fail) - 1
    assert TABLE[codes["EXIT_INTERNAL"]].role == "cause" and "internal error" in TABLE[codes["EXIT_INTERNAL"]].meaning
    assert jobset.NOT_RETRIABLE_EXIT_CODES == (codes["EXIT_CONFIG"], codes["EXIT_PEERS_MISSING"], codes["EXIT_STOPPED"])
