"""Text and JSON for the run verbs, cluster and bare-metal runs alike (pure: strings in, strings out; the CLI
prints them)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from datetime import datetime

from kgen.runs.verdict import Verdict, parse_time


def rank_width(ranks: Iterable[int]) -> int:
    return len(str(max(ranks, default=0)))


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    return ["  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in [header, *rows]]


STATUS_FORMATS = ("text", "wide", "json", "yaml")
LIST_FORMATS = ("text", "wide", "json", "yaml")


def status_view(v: Verdict, fmt: str, rows: bool = True, document: bool = False) -> str:
    """`kgen status -o FMT`; ``document`` starts a YAML document (``---``) for each verdict of --watch."""
    if fmt == "json":
        return status_json(v)
    if fmt == "yaml":
        return ("---\n" if document else "") + to_yaml(status_document(v))
    return status_text(v, rows=rows, wide=fmt == "wide")


# The machine-readable views' schema (docs/cluster.md "Machine-readable status"). Version 1 was the output
# without a version field, whose node rows were called rank (``rows[].rank``, ``ranks_expected`` counting
# nodes); version 2 names nodes as nodes and ranks as ranks.
SCHEMA_VERSION = 2


def node_ranks(node_rank: int | None, nproc: int) -> list[int]:
    """The global ranks of node ``node_rank``: node_rank*nproc .. node_rank*nproc+nproc-1 (the RANKS cell)."""
    return [] if node_rank is None else list(range(node_rank * nproc, node_rank * nproc + max(nproc, 1)))


def status_document(v: Verdict) -> dict:
    """`kgen status -o json|yaml`: the verdict with nodes named as nodes and ranks as ranks. A node is one
    entry of ``nodes`` (a pod, or a node process on an ssh host), with its ``node_rank`` and the global
    ``ranks`` of its processes; ``machine`` is the Kubernetes node or the host it runs on."""
    nproc = max(v.nproc, 1)
    cause = None
    if v.root_cause is not None:
        rc = v.root_cause
        by_process = isinstance(rc.error, dict) and rc.error.get("rank") is not None
        # without a process's own error the verdict knows the failed nodes only: their ranks are all of theirs
        nodes_failed = list(rc.node_ranks) or ([] if by_process else list(rc.ranks))
        cause = {
            "ranks": list(rc.ranks) if by_process else [r for n in nodes_failed for r in node_ranks(n, nproc)],
            "node_ranks": nodes_failed,
            "pods": list(rc.pods),
            "machines": list(rc.nodes),
            "hosts": list(rc.hosts),
            "exit_code": rc.exit_code,
            "meaning": rc.meaning,
            "time": rc.time,
            "evidence": rc.evidence,
            "detail": rc.detail,
            "followers": rc.followers,
            "consequences": list(rc.consequences),
            "error": rc.error,
        }
    return {
        "version": SCHEMA_VERSION,
        "name": v.name,
        "kind": v.kind,
        "state": v.state,
        "exit_code": v.exit_code,
        "state_code": v.state_code,
        "headline": v.headline,
        "details": list(v.details),
        "nodes_expected": v.ranks_expected,
        "nodes_up": v.ranks_up,
        "processes_per_node": nproc,
        "ranks_expected": v.ranks_expected * nproc,
        "ranks_up": v.ranks_up * nproc,
        "reformations": v.reformations,
        "root_cause": cause,
        "job_reason": v.job_reason,
        "job_message": v.job_message,
        "incidents": list(v.incidents),
        "nodes": [
            {
                "node_rank": r.rank,
                "ranks": node_ranks(r.rank, nproc),
                "pod": r.pod,
                "host": r.host,
                "machine": r.node,
                "ip": r.ip,
                "state": r.state,
                "ready": r.ready,
                "generation": r.generation,
                "restarts": r.restarts,
                "exit_code": r.exit_code,
                "meaning": r.meaning,
                "last_line": r.last_line,
            }
            for r in v.rows
        ],
    }


def _shape_nproc(run: Mapping) -> int | None:
    """Processes per node where the SHAPE says it: NODESxNPROCcpu, and a bare-metal run's NODESxNPROC (a GPU
    shape counts GPUs, which need not be the processes)."""
    m = re.fullmatch(r"\d+x(\d+)(cpu)?", str(run.get("shape", "")))
    if m and (m.group(2) or run.get("kind") in ("bare-metal", "local")):
        return int(m.group(1))
    return None


def list_document(runs: list[dict]) -> dict:
    """`kgen list -o json|yaml`: ``runs``, each with its node counts named as nodes (and its rank counts where
    the run's processes per node are known)."""
    out = []
    for run in runs:
        row = {k: val for k, val in run.items() if k not in ("ranks_up", "ranks_expected", "nproc")}
        row["nodes_expected"] = run.get("ranks_expected", 0)
        row["nodes_up"] = run.get("ranks_up", 0)
        nproc = run.get("nproc", _shape_nproc(run))
        if isinstance(nproc, int) and nproc > 0:
            row["processes_per_node"] = nproc
            row["ranks_expected"] = row["nodes_expected"] * nproc
            row["ranks_up"] = row["nodes_up"] * nproc
        out.append(row)
    return {"version": SCHEMA_VERSION, "runs": out}


def to_yaml(data: dict | list) -> str:
    from kgen.yamlio import dump_yaml

    return dump_yaml([data])  # type: ignore[list-item]  # one document: a mapping, or a list of runs


def _ranks(row_rank: int | None, nproc: int) -> str:
    """The RANK(S) cell of a node's row: its rank, or with several processes per node its global ranks."""
    if row_rank is None:
        return "?"
    return str(row_rank) if nproc <= 1 else f"{row_rank * nproc}-{row_rank * nproc + nproc - 1}"


def _clip(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def host_rows(v: Verdict, wide: bool = False) -> list[str]:
    """Bare metal: one row per rank with its ssh host, state, generation, exit code and last log line
    (``wide``: the meaning and the last line unclipped)."""
    header = ["RANK" if v.nproc <= 1 else "RANKS", "HOST", "STATE", "GEN", "RESTARTS", "EXIT", "MEANING", "LAST LINE"]
    body = []
    for r in v.rows:
        host = r.host if not r.node or r.node == r.host else f"{r.host} ({r.node})"
        body.append(
            [
                _ranks(r.rank, v.nproc),
                host or "-",  # a Slurm node not placed yet (pending, or requeued)
                r.state,
                str(r.generation),
                str(r.restarts),
                "-" if r.exit_code is None else str(r.exit_code),
                (" ".join(r.meaning.split()) if wide else _clip(r.meaning, 60)) or "-",
                (" ".join(r.last_line.split()) if wide else _clip(r.last_line, 70)) or "-",
            ]
        )
    return table(header, body)


HOST_KINDS = ("bare-metal", "local", "slurm")  # runs whose rows are hosts, placed or not (never pods)


def status_text(v: Verdict, rows: bool = True, wide: bool = False) -> str:
    """One row per rank, then the verdict. ``wide`` adds the generation, readiness and pod IP columns."""
    out: list[str] = []
    if rows and v.rows and (v.kind in HOST_KINDS or any(r.host for r in v.rows)):
        out.extend(host_rows(v, wide=wide))
        out.append("")
    elif rows and v.rows:
        show_gen = wide or any(r.generation > 1 for r in v.rows)
        header = ["RANK" if v.nproc <= 1 else "RANKS", "POD", "NODE", "STATE", "RESTARTS", "EXIT", "MEANING"]
        if wide:
            header[3:3] = ["IP"]
            header[5:5] = ["READY"]
        if show_gen:
            header.insert(1, "GEN")
        body = []
        for r in v.rows:
            line = [
                _ranks(r.rank, v.nproc),
                r.pod,
                r.node or "-",
                r.state,
                str(r.restarts),
                "-" if r.exit_code is None else str(r.exit_code),
                r.meaning or "-",
            ]
            if wide:
                line[3:3] = [r.ip or "-"]
                line[5:5] = ["yes" if r.ready else "no"]
            if show_gen:
                line.insert(1, str(r.generation))
            body.append(line)
        out.extend(table(header, body))
        out.append("")
    out.append(v.headline)
    out.extend(f"  {d}" for d in v.details)
    return "\n".join(out) + "\n"


def status_json(v: Verdict) -> str:
    return json.dumps(status_document(v), indent=2, default=str) + "\n"


def age(created: str | None, now: datetime) -> str:
    t = parse_time(created)
    if not t:
        return "?"
    s = int((now - t).total_seconds())
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m"
    if s < 172800:
        return f"{s // 3600}h"
    return f"{s // 86400}d"


def shape(workload: Mapping) -> str:
    """NODESxGPUS (or NODESxcpu) from the Job/StatefulSet spec kgen rendered."""
    spec = workload.get("spec") or {}
    if spec.get("replicatedJobs"):  # JobSet: kgen renders one replicated Job
        spec = (spec["replicatedJobs"][0].get("template") or {}).get("spec") or {}
    nodes = spec.get("completions") or spec.get("parallelism") or spec.get("replicas") or 0
    containers = (((spec.get("template") or {}).get("spec") or {}).get("containers")) or [{}]
    trainer = next((c for c in containers if c.get("name") == "trainer"), containers[0])
    limits = (trainer.get("resources") or {}).get("limits") or {}
    gpus = next((v for k, v in limits.items() if k.endswith("/gpu")), None)
    if gpus is None:
        nproc = next((e.get("value") for e in trainer.get("env") or [] if e.get("name") == "NPROC_PER_NODE"), "1")
        return f"{nodes}x{nproc}cpu"
    return f"{nodes}x{gpus}"


def list_rows(runs: list[dict], wide: bool = False) -> list[str]:
    """`kgen list`: one row per run; ``wide`` adds the nodes up (of expected) and the re-formations."""
    header = ["NAMESPACE", "NAME", "KIND", "SHAPE", "STATE", "AGE", "VERDICT"]
    body = [[r["namespace"], r["name"], r["kind"], r["shape"], r["state"], r["age"], r["headline"]] for r in runs]
    if wide:
        header[5:5] = ["NODES", "REFORMED"]
        for row, r in zip(body, runs, strict=True):
            row[5:5] = [f"{r.get('ranks_up', 0)}/{r.get('ranks_expected', 0)}", str(r.get("reformations", 0))]
    return table(header, body)
