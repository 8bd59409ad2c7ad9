"""Rendering with the real CLI and applying to the real API server (server-side apply, kgen's field manager)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def kgen(
    *args: str, input: str | None = None, timeout: float = 120, env: dict | None = None
) -> subprocess.CompletedProcess:
    """The real CLI in a process of its own (KUBECONFIG comes from the session fixture's environment)."""
    cmd = [sys.executable, "-c", "import sys; from kgen.cli import main; sys.exit(main())", *args]
    e = dict(os.environ, PYTHONPATH=str(REPO), **(env or {}))
    return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=timeout, input=input, env=e)


def render(*args: str) -> list[dict]:
    res = kgen("render", *args)
    assert res.returncode == 0, res.stderr
    return [d for d in yaml.safe_load_all(res.stdout) if d]


def plural(kind: str) -> str:
    k = kind.lower()
    return k[:-1] + "ies" if k.endswith("y") else k + "s"


def object_path(doc: dict, namespace: str) -> str:
    api = doc["apiVersion"]
    base = "/api/v1" if api == "v1" else f"/apis/{api}"
    ns = doc.get("metadata", {}).get("namespace") or namespace
    return f"{base}/namespaces/{ns}/{plural(doc['kind'])}/{doc['metadata']['name']}"


def apply(
    cp, doc: dict | bytes, namespace: str, dry_run: bool = False, manager: str = "kgen"
) -> tuple[int, dict | str]:
    """Server-side apply of one object (the bytes as given when bytes)."""
    d = yaml.safe_load(doc) if isinstance(doc, bytes) else doc
    body = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    q = f"?fieldManager={manager}&fieldValidation=Strict" + ("&dryRun=All" if dry_run else "")
    return cp.request("PATCH", object_path(d, namespace) + q, body, content_type="application/apply-patch+yaml")


def create(cp, doc: dict, namespace: str, dry_run: bool = True) -> tuple[int, dict | str]:
    """POST (create) with strict field validation, as `kubectl create --dry-run=server` would."""
    path = object_path(doc, namespace).rsplit("/", 1)[0]
    q = "?fieldValidation=Strict" + ("&dryRun=All" if dry_run else "")
    return cp.request("POST", path + q, doc)


def reason(out) -> str:
    return out.get("message", str(out)) if isinstance(out, dict) else str(out)


def wait(cond, timeout: float, what: str, every: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(every)
    raise AssertionError(f"not within {timeout:.0f} s: {what}")
