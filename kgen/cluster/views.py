"""Text and JSON for the cluster commands (pure: strings in, strings out; the CLI prints them)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime

from kgen.cluster.verdict import Verdict, parse_time


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    return ["  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in [header, *rows]]


def _clip(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def host_rows(v: Verdict) -> list[str]:
    """Bare metal: one row per rank with its ssh host, state, generation, exit code and last log line."""
    header = ["RANK", "HOST", "STATE", "GEN", "RESTARTS", "EXIT", "MEANING", "LAST LINE"]
    body = []
    for r in v.rows:
        host = r.host if not r.node or r.node == r.host else f"{r.host} ({r.node})"
        body.append(
            [
                "?" if r.rank is None else str(r.rank),
                host,
                r.state,
                str(r.generation),
                str(r.restarts),
                "-" if r.exit_code is None else str(r.exit_code),
                _clip(r.meaning, 60) or "-",
                _clip(r.last_line, 70) or "-",
            ]
        )
    return table(header, body)


def status_text(v: Verdict, rows: bool = True) -> str:
    out: list[str] = []
    if rows and v.rows and any(r.host for r in v.rows):
        out.extend(host_rows(v))
        out.append("")
    elif rows and v.rows:
        show_gen = any(r.generation > 1 for r in v.rows)
        header = ["RANK", "POD", "NODE", "STATE", "RESTARTS", "EXIT", "MEANING"]
        if show_gen:
            header.insert(1, "GEN")
        body = []
        for r in v.rows:
            line = [
                "?" if r.rank is None else str(r.rank),
                r.pod,
                r.node or "-",
                r.state,
                str(r.restarts),
                "-" if r.exit_code is None else str(r.exit_code),
                r.meaning or "-",
            ]
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


def list_rows(runs: list[dict]) -> list[str]:
    header = ["NAMESPACE", "NAME", "KIND", "SHAPE", "STATE", "AGE", "VERDICT"]
    body = [[r["namespace"], r["name"], r["kind"], r["shape"], r["state"], r["age"], r["headline"]] for r in runs]
    return table(header, body)
