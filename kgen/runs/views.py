"""Text and JSON for the run verbs, cluster and bare-metal runs alike (pure: strings in, strings out; the CLI
prints them)."""

from __future__ import annotations

import json
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
        return ("---\n" if document else "") + to_yaml(v.to_dict())
    return status_text(v, rows=rows, wide=fmt == "wide")


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
                host,
                r.state,
                str(r.generation),
                str(r.restarts),
                "-" if r.exit_code is None else str(r.exit_code),
                (" ".join(r.meaning.split()) if wide else _clip(r.meaning, 60)) or "-",
                (" ".join(r.last_line.split()) if wide else _clip(r.last_line, 70)) or "-",
            ]
        )
    return table(header, body)


def status_text(v: Verdict, rows: bool = True, wide: bool = False) -> str:
    """One row per rank, then the verdict. ``wide`` adds the generation, readiness and pod IP columns."""
    out: list[str] = []
    if rows and v.rows and any(r.host for r in v.rows):
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
    return json.dumps(v.to_dict(), indent=2, sort_keys=True) + "\n"


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
    """`kgen list`: one row per run; ``wide`` adds the ranks up (of expected) and the re-formations."""
    header = ["NAMESPACE", "NAME", "KIND", "SHAPE", "STATE", "AGE", "VERDICT"]
    body = [[r["namespace"], r["name"], r["kind"], r["shape"], r["state"], r["age"], r["headline"]] for r in runs]
    if wide:
        header[5:5] = ["RANKS", "REFORMED"]
        for row, r in zip(body, runs, strict=True):
            row[5:5] = [f"{r.get('ranks_up', 0)}/{r.get('ranks_expected', 0)}", str(r.get("reformations", 0))]
    return table(header, body)
