"""`kgen status -o json|yaml` and `kgen list -o json|yaml` name nodes as nodes and ranks as ranks, carry a
version, and say what the text view says (docs/cluster.md, "Machine-readable status")."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import yaml

from kgen.baremetal.adapter import NodeState, to_records
from kgen.baremetal.record import NodeRecord, RunRecord
from kgen.runs import views
from kgen.runs.verdict import judge

sys.path.insert(0, str(Path(__file__).resolve().parent / "baremetal"))
from test_adapter import ended, formed, running  # noqa: E402  (the bare-metal states the adapter tests use)

ROOT = Path(__file__).resolve().parent.parent
HOSTS = ["a", "b", "c"]


def verdict(*states, nproc: int = 2):
    rec = RunRecord(name="demo", mode="ssh", nodes=[NodeRecord(i, h, f"/s/node{i}") for i, h in enumerate(HOSTS)])
    rec.nproc = nproc
    return judge(to_records(rec, [NodeState(rec.nodes[i], st, "") for i, st in enumerate(states)]))


def text_rows(text: str) -> list[list[str]]:
    lines = text.splitlines()
    header = lines[0]
    starts = [m.start() for m in re.finditer(r"\S+", header)]
    rows = []
    for line in lines[1 : lines.index("")]:
        rows.append([line[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)])
    return [header.split(), *rows]


def test_three_nodes_of_two_processes_are_three_nodes_and_six_ranks_as_the_text_view_says():
    v = verdict(*(running(r, formed(r)) for r in range(3)))
    doc = json.loads(views.status_view(v, "json"))
    assert doc["version"] == views.SCHEMA_VERSION == 2
    assert (doc["nodes_expected"], doc["processes_per_node"], doc["ranks_expected"]) == (3, 2, 6)
    assert (doc["nodes_up"], doc["ranks_up"]) == (3, 6)
    assert "rows" not in doc and all("rank" not in node for node in doc["nodes"])
    header, *rows = text_rows(views.status_view(v, "text"))
    assert header[:3] == ["RANKS", "HOST", "STATE"]
    assert len(rows) == len(doc["nodes"])
    for cells, node in zip(rows, doc["nodes"], strict=True):
        assert cells[0] == f"{node['ranks'][0]}-{node['ranks'][-1]}"  # RANKS 0-1, 2-3, 4-5
        assert node["ranks"] == [2 * node["node_rank"], 2 * node["node_rank"] + 1]
        assert cells[1] == node["host"] and cells[2] == node["state"]
        assert cells[3] == str(node["generation"]) and cells[4] == str(node["restarts"])
    assert doc["headline"] in views.status_view(v, "text")


def test_one_process_per_node_the_node_rank_is_the_rank():
    v = verdict(*(running(r, formed(r)) for r in range(3)), nproc=1)
    doc = views.status_document(v)
    assert [n["ranks"] for n in doc["nodes"]] == [[0], [1], [2]] and doc["ranks_expected"] == 3
    header, *rows = text_rows(views.status_view(v, "text"))
    assert header[0] == "RANK" and [r[0] for r in rows] == ["0", "1", "2"]


def test_a_failure_names_its_global_ranks_and_its_node_ranks():
    v = verdict(running(0, formed(0)), ended(1, 1, "rank 3 exited with code 1", 20, formed(1)), running(2, formed(2)))
    doc = views.status_document(v)
    cause = doc["root_cause"]
    assert cause is not None and "nodes" not in cause  # where it ran is "machines": "nodes" are node ranks
    assert set(cause) >= {"ranks", "node_ranks", "machines", "hosts", "exit_code", "consequences"}
    assert all(r // 2 in cause["node_ranks"] for r in cause["ranks"])


def test_yaml_is_the_json_document():
    v = verdict(*(running(r, formed(r)) for r in range(3)))
    assert yaml.safe_load(views.status_view(v, "yaml")) == json.loads(views.status_view(v, "json"))


def test_list_counts_nodes_as_nodes():
    runs = [{"namespace": "-", "name": "a", "kind": "local", "shape": "2x2cpu", "state": "running", "age": "1m",
             "headline": "Running", "ranks_up": 2, "ranks_expected": 2, "reformations": 0}]  # fmt: skip
    doc = views.list_document(runs)
    assert doc["version"] == 2
    assert doc["runs"][0]["nodes_up"] == doc["runs"][0]["nodes_expected"] == 2
    assert doc["runs"][0]["ranks_up"] == 4  # the shape says 2 processes per node (2x2cpu)
    gpu = views.list_document([{**runs[0], "kind": "Job", "shape": "2x8"}])["runs"][0]
    assert "ranks_up" not in gpu and "processes_per_node" not in gpu  # 8 GPUs: not necessarily 8 processes
    known = views.list_document([{**runs[0], "nproc": 2}])["runs"][0]
    assert (known["ranks_up"], known["ranks_expected"], known["processes_per_node"]) == (4, 4, 2)
    wide = views.list_rows(runs, wide=True)
    assert wide[0].split()[5] == "NODES" and wide[1].split()[5] == "2/2"


def test_the_schema_is_documented_with_every_key():
    docs = (ROOT / "docs" / "cluster.md").read_text(encoding="utf-8")
    section = docs.split("## Machine-readable status", 1)[1].split("\n## ", 1)[0]
    v = verdict(running(0, formed(0)), ended(1, 1, "rank 3 exited with code 1", 20, formed(1)), running(2, formed(2)))
    doc = views.status_document(v)
    keys = set(doc) | set(doc["nodes"][0]) | set(doc["root_cause"] or {})
    missing = sorted(k for k in keys if f"`{k}`" not in section)
    assert not missing, f"docs/cluster.md's schema lacks {missing}"
