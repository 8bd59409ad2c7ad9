"""Loading the real API objects of /work/shared/cluster-recordings (or $KGEN_RECORDINGS)."""

from __future__ import annotations

import json
import os
from pathlib import Path

ROOT = Path(os.environ.get("KGEN_RECORDINGS", Path(__file__).resolve().parents[3] / "shared" / "cluster-recordings"))
if not ROOT.is_dir():
    ROOT = Path("/work/shared/cluster-recordings")


def captures() -> list[str]:
    """Every capture folder, relative to ROOT (a scenario, or scenario/t1-..., scenario/t2-...)."""
    out = []
    for scenario in sorted(p for p in ROOT.iterdir() if p.is_dir()):
        subs = sorted(p for p in scenario.iterdir() if p.is_dir() and p.name[:2] in ("t1", "t2"))
        out.extend(f"{scenario.name}/{s.name}" for s in subs) if subs else out.append(scenario.name)
    return out


def run_name(capture: str) -> str:
    scenario = ROOT / capture.split("/")[0]
    for line in (scenario / "timeline.txt").read_text().splitlines():
        if "run (Job/StatefulSet/Service) name:" in line:
            return line.split("name:")[1].split()[0]
    raise AssertionError(f"no run name in {scenario}/timeline.txt")


def load(capture: str) -> dict:
    d = ROOT / capture
    workload = json.loads((d / "workload.json").read_text())
    logs = {p.name[: -len(".log")]: p.read_text() for p in (d / "logs").glob("*.log")} if (d / "logs").is_dir() else {}
    return {
        "name": run_name(capture),
        "pods": json.loads((d / "pods.json").read_text())["items"],
        "workload": workload,
        "events": json.loads((d / "events.json").read_text())["items"],
        "logs": logs,
    }


def deleted_pods(capture: str) -> list[dict]:
    d = ROOT / capture.split("/")[0] / "deleted-pods"
    return [json.loads(p.read_text()) for p in sorted(d.glob("*.json"))] if d.is_dir() else []


def watch_events(capture: str, stream: str = "pods") -> list[dict]:
    path = ROOT / capture.split("/")[0] / "watch" / f"{stream}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
