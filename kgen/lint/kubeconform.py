"""``--engine kubeconform``: run the kubeconform binary fully offline with the bundled schemas.

The kind files' ``$ref``s point at ``https://kubernetes.io/api/_definitions.json``; kubeconform
would download it. We seed kubeconform's HTTP cache instead (file name = sha256 of the URL, see
``pkg/cache/ondisk.go``), one cache folder per Kubernetes version and strictness because the URL is
the same for all of them. Kinds without any schema are skipped explicitly (``-skip``) and reported
as KG011 by kgen; any other missing schema is an error, never a silent skip.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from kgen import __version__
from kgen.errors import InputError, UsageError
from kgen.findings import Severity
from kgen.resources import cache_dir

DEFINITIONS_URL = "https://kubernetes.io/api/_definitions.json"
TEMPLATE = "{{ .NormalizedKubernetesVersion }}-local{{ .StrictSuffix }}/{{ .ResourceKind }}{{ .KindSuffix }}.json"


def cache_file_name(url: str = DEFINITIONS_URL) -> str:
    """kubeconform's on-disk cache names a file by sha256 of its URL."""
    return hashlib.sha256(url.encode()).hexdigest()


def seed_cache(version: str, strict: bool, base: Path | None = None) -> Path:
    """A kubeconform -cache folder holding this version's _definitions.json under its URL's name."""
    from kgen import schema

    dirname = f"v{version}.0-local" + ("-strict" if strict else "")
    root = base or (cache_dir() or Path(os.environ.get("TMPDIR", "/tmp")) / "kgen-cache")
    folder = root / "kubeconform" / f"{__version__}-{schema.bundled(version, strict).fingerprint()}" / dirname
    target = folder / cache_file_name()
    if not target.is_file():
        try:
            folder.mkdir(parents=True, exist_ok=True)
            tmp = folder / f".tmp-{os.getpid()}"
            shutil.copyfile(schema.schema_root() / dirname / "_definitions.json", tmp)
            os.replace(tmp, target)
        except OSError as err:
            raise InputError(
                f"cannot prepare the kubeconform schema cache in {folder}: {err.strerror}",
                hint="set KGEN_CACHE_DIR to a writable folder",
            ) from None
    return folder


def build_command(
    binary: str, version: str, strict: bool, cache: Path, schema_location: str | None, skip: list[str], files: list[str]
) -> list[str]:
    from kgen import schema

    cmd = [
        binary,
        "-output",
        "json",
        "-kubernetes-version",
        f"{version}.0",
        "-cache",
        str(cache),
        "-schema-location",
        f"{schema.schema_root()}/{TEMPLATE}",
    ]
    if strict:
        cmd.insert(1, "-strict")
    if schema_location:
        cmd += ["-schema-location", schema_location]
    if skip:
        cmd += ["-skip", ",".join(sorted(set(skip)))]
    return cmd + (files or ["-"])


def find_binary() -> str:
    path = shutil.which("kubeconform")
    if path is None:
        raise UsageError(
            "kubeconform is not on PATH; install it (github.com/yannh/kubeconform) or use --engine builtin",
            option="--engine",
        )
    return path


def parse_report(returncode: int, stdout: str, stderr: str) -> dict:
    """kubeconform's -output json report; exit 0 (valid) and 1 (invalid) are normal, anything else,
    or no report at all, is an error, never an empty (passing) result."""
    failed = InputError(f"kubeconform failed (exit {returncode}): {' '.join((stderr or stdout).split())[:300]}")
    if returncode not in (0, 1) or not stdout.strip():
        raise failed
    try:
        report = json.loads(stdout)
    except ValueError:
        raise failed from None
    if not isinstance(report, dict):
        raise failed
    return report


_AT = re.compile(r"- at '(/[^']*)': (.*?)\s*(?=- at '/|\Z)")


def _leaf_errors(msg: str) -> list[dict]:
    """kubeconform 0.7.0 lists a nested error's parent as "validation failed" in ``validationErrors``
    ({path: /spec}); its message has every level: "... - at '/spec': validation failed - at
    '/spec/completions': got string, want null or integer". The leaves, as validationErrors entries."""
    return [{"path": m.group(1), "msg": m.group(2)} for m in _AT.finditer(msg) if m.group(2) != "validation failed"]


def pointer_to_path(pointer: str) -> tuple:
    out: list[Any] = []
    for part in pointer.strip("/").split("/") if pointer.strip("/") else []:
        part = part.replace("~1", "/").replace("~0", "~")
        out.append(int(part) if part.isdigit() else part)
    return tuple(out)


class Runner:
    def __init__(self, version: str, strict: bool, schema_location: str | None):
        self.binary = find_binary()
        self.version = version
        self.strict = strict
        self.schema_location = schema_location
        self.streams: dict[str, dict] = {}  # filename -> {"text", "docs", "skip"}

    def add(self, doc: Any, text: str, has_schema: bool) -> None:
        entry = self.streams.setdefault(doc.file, {"text": text, "docs": [], "skip": set()})
        entry["docs"].append(doc)
        if not has_schema:
            entry["skip"].add(f"{doc.api_version}/{doc.kind}")  # kubeconform's GVK form: apiVersion/Kind

    def run(self, check: Any) -> list:
        """Run kubeconform once per file added since the last run; its findings, and ``check``'s
        (a ``kgen.lint.schemas.SchemaCheck``) KG011/KG012 for the kinds it was told to skip."""
        out: list = []
        streams, self.streams = self.streams, {}
        if not streams:
            return out
        cache = seed_cache(self.version, self.strict)
        for filename, entry in streams.items():
            docs = entry["docs"]
            for doc in docs:  # KG011/KG012 for kinds kubeconform is told to skip
                if f"{doc.api_version}/{doc.kind}" in entry["skip"]:
                    out.extend(check.findings(doc))
            is_file = os.path.isfile(filename)
            cmd = build_command(
                self.binary,
                self.version,
                self.strict,
                cache,
                self.schema_location,
                sorted(entry["skip"]),
                [filename] if is_file else [],
            )
            proc = subprocess.run(
                cmd, input=None if is_file else entry["text"], capture_output=True, text=True, timeout=300, check=False
            )
            report = parse_report(proc.returncode, proc.stdout, proc.stderr)
            out.extend(self.findings(report, docs))
        return out

    @staticmethod
    def findings(report: dict, docs: list) -> list:
        out = []
        by_key: dict[tuple[str, str], Any] = {}
        for doc in docs:
            by_key.setdefault((doc.kind, doc.name), doc)
        for res in report.get("resources", []):
            status = res.get("status")
            if status in ("statusValid", "statusEmpty"):
                continue
            doc = by_key.get((res.get("kind"), res.get("name"))) or (docs[0] if docs else None)
            if doc is None:
                continue
            msg = " ".join(str(res.get("msg", "")).split())
            if "already set in map" in msg:
                continue  # duplicate keys: kgen's parser reports KG001 with the line
            errors = _leaf_errors(msg) or res.get("validationErrors") or []
            if status == "statusSkipped":
                out.append(doc.finding("KG010", Severity.ERROR, f"kubeconform skipped this object: {msg}"))
            elif errors:
                for e in errors:
                    out.append(
                        doc.finding(
                            "KG010",
                            Severity.ERROR,
                            f"kubeconform: {e.get('msg', '')}",
                            pointer_to_path(str(e.get("path", ""))),
                        )
                    )
            else:
                out.append(doc.finding("KG010", Severity.ERROR, f"kubeconform: {msg}"))
        return out
