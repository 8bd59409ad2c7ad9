"""kgen lint's configuration file, as teams expect of linters (ruff's ``[tool.ruff]``, kube-linter's config).

Found upward from the first linted path (stdin: the current folder): in each folder ``.kgen.yaml`` (its
``lint:`` mapping), then ``pyproject.toml`` (its ``[tool.kgen.lint]`` table; a pyproject.toml without one is
passed over); the search stops at the repository root (a folder holding ``.git``) or the filesystem root.

    [tool.kgen.lint]
    skip = ["KG102"]                       # rule ids, as --skip
    exclude = ["legacy/**"]                # globs, as --exclude (relative to the folder linted)
    kubernetes-version = "1.31"            # default for --kubernetes-version
    unit = "file"                          # default for --unit
    [tool.kgen.lint.per-path-ignores]      # globs relative to the config file's folder -> rule ids
    "envs/dev/**" = ["KG118", "KG134"]
    [tool.kgen.lint.severity]              # rule id -> error | warning | info
    KG177 = "warning"

Flags override the file (``--kubernetes-version``, ``--unit``); ``--skip`` and ``--exclude`` add to it. An invalid
file is a ``UsageError`` naming the file, the key and the fix (exit 2). Python 3.10 has no ``tomllib``: there
``tomli`` is used when installed, else a small reader of exactly the forms above (strings, lists of strings,
booleans, the two sub-tables, comments).
"""

from __future__ import annotations

import os
import re
from typing import Any

from kgen.errors import UsageError
from kgen.findings import Finding, Severity

KEYS = ("skip", "exclude", "kubernetes-version", "unit", "per-path-ignores", "severity")
UNITS = ("dir", "file", "tree")
_ID = re.compile(r"^KG\d{3}$")


class LintConfig:
    """The settings of one configuration file (a plain class: every `kgen lint` imports this module)."""

    __slots__ = ("path", "root", "skip", "exclude", "kubernetes_version", "unit", "per_path_ignores", "severity")

    def __init__(self, path: str, root: str) -> None:
        self.path = path  # the file it was read from
        self.root = root  # its folder: per-path-ignores are relative to it
        self.skip: tuple[str, ...] = ()
        self.exclude: tuple[str, ...] = ()
        self.kubernetes_version: str | None = None
        self.unit: str | None = None
        self.per_path_ignores: list[tuple[str, frozenset[str]]] = []
        self.severity: dict[str, Severity] = {}

    def apply(self, findings: list[Finding]) -> list[Finding]:
        """``findings`` without those a per-path ignore covers (KG004 stays), with overridden severities."""
        if not self.per_path_ignores and not self.severity:
            return findings
        from kgen.lint.files import Excludes

        patterns = [(Excludes([glob]), ids) for glob, ids in self.per_path_ignores]
        out = []
        for f in findings:
            rel = _relative(f.file, self.root)
            if rel is not None and f.rule_id != "KG004":
                if any(f.rule_id in ids or "ALL" in ids for globs, ids in patterns if _covers(globs, rel)):
                    continue
            new = self.severity.get(f.rule_id)
            out.append(f._replace(severity=new) if new is not None and f.rule_id != "KG004" else f)
        return out


def _covers(globs: Any, rel: str) -> bool:
    """A file at ``rel`` (relative to the config's folder) matched by a glob, itself or a folder above it."""
    parts = rel.split("/")
    return globs.matches(rel, False) or any(globs.matches("/".join(parts[:i]), True) for i in range(1, len(parts)))


def _relative(file: str, root: str) -> str | None:
    if file.startswith("<"):
        return None
    rel = os.path.relpath(os.path.abspath(file), root)
    return None if rel.startswith("..") else rel.replace(os.sep, "/")


# ---------------------------------------------------------------------------------------------- finding it
def find(start: str) -> str | None:
    """The configuration file that governs ``start`` (a file or folder), or None."""
    folder = os.path.abspath(start if os.path.isdir(start) else os.path.dirname(os.path.abspath(start)) or ".")
    while True:
        candidate = os.path.join(folder, ".kgen.yaml")
        if os.path.isfile(candidate):
            return candidate
        candidate = os.path.join(folder, "pyproject.toml")
        if os.path.isfile(candidate) and _has_table(candidate):
            return candidate
        parent = os.path.dirname(folder)
        if os.path.exists(os.path.join(folder, ".git")) or parent == folder:
            return None
        folder = parent


def _has_table(path: str) -> bool:
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read(1 << 20)
    except (OSError, UnicodeDecodeError):
        return False
    return re.search(r"^\s*\[\s*tool\.kgen\.lint\s*[\].]", text, re.M) is not None


# ---------------------------------------------------------------------------------------------- reading it
def load(path: str) -> LintConfig:
    """Read and check the configuration at ``path`` (raises UsageError naming the file, key and fix)."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError) as err:
        raise UsageError(f"{path}: cannot read the configuration file ({err})") from None
    if path.endswith(".toml"):
        table = _toml_table(text, path)
    else:
        table = _yaml_table(text, path)
    return _check(table, path)


def _yaml_table(text: str, path: str) -> dict:
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise UsageError(
            f"{path}: not valid YAML{where}; fix the syntax (the lint settings go under 'lint:')"
        ) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UsageError(f"{path}: must be a mapping with a 'lint:' mapping, e.g. lint: {{skip: [KG102]}}")
    lint = data.get("lint", {})
    if lint is None:
        return {}
    if not isinstance(lint, dict):
        raise UsageError(f"{path}: 'lint' must be a mapping, e.g. lint: {{skip: [KG102]}}")
    return lint


def _toml_table(text: str, path: str) -> dict:
    try:
        import tomllib as toml  # type: ignore[import-not-found,unused-ignore]
    except ModuleNotFoundError:  # Python 3.10
        try:
            import tomli as toml  # type: ignore[import-not-found,no-redef,unused-ignore]
        except ModuleNotFoundError:
            return read_lint_table(text, path)
    try:
        data = toml.loads(text)
    except toml.TOMLDecodeError as err:
        raise UsageError(f"{path}: not valid TOML ({err}); fix the syntax") from None
    lint = data.get("tool", {}).get("kgen", {}).get("lint", {})
    if not isinstance(lint, dict):
        raise UsageError(f"{path}: [tool.kgen.lint] must be a table")
    return lint


_HEADER = re.compile(r"^\s*\[\s*([^\]]+?)\s*\]\s*(?:#.*)?$")
_KEY = re.compile(r'^\s*("(?:[^"\\]|\\.)*"|\'[^\']*\'|[A-Za-z0-9_.-]+)\s*=\s*(.*)$')


def read_lint_table(text: str, path: str) -> dict:
    """``[tool.kgen.lint]`` and its sub-tables from pyproject.toml's text, for Python 3.10 without tomli: the
    forms the configuration uses (strings, lists of strings over several lines, booleans, comments)."""
    out: dict[str, Any] = {}
    current: dict | None = None
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        m = _HEADER.match(line)
        if m and not line.lstrip().startswith("[["):
            name = m.group(1).replace(" ", "")
            if name == "tool.kgen.lint":
                current = out
            elif name.startswith("tool.kgen.lint."):
                current = out.setdefault(name[len("tool.kgen.lint.") :].strip('"'), {})
            else:
                current = None
            continue
        if current is None or not line.strip() or line.lstrip().startswith("#"):
            continue
        km = _KEY.match(line)
        if not km:
            raise UsageError(f"{path}: line {i} of [tool.kgen.lint] is not 'key = value'; fix the syntax")
        key, raw = km.group(1).strip("\"'"), km.group(2)
        while raw.count("[") > raw.count("]") and i < len(lines):  # a list over several lines
            raw += " " + lines[i]
            i += 1
        current[key] = _value(_strip_comment(raw).strip(), path, key)
    return out


def _strip_comment(raw: str) -> str:
    quote = None
    for k, ch in enumerate(raw):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch == "#":
            return raw[:k]
    return raw


def _value(raw: str, path: str, key: str) -> Any:
    if raw in ("true", "false"):
        return raw == "true"
    if raw.startswith("[") and raw.endswith("]"):
        items = re.findall(r'"((?:[^"\\]|\\.)*)"|\'([^\']*)\'', raw)
        return [a or b for a, b in items]
    m = re.fullmatch(r'"((?:[^"\\]|\\.)*)"|\'([^\']*)\'', raw)
    if m:
        return m.group(1) if m.group(1) is not None else m.group(2)
    raise UsageError(f"{path}: [tool.kgen.lint] {key} = {raw}: write a quoted string or a list of strings")


# ---------------------------------------------------------------------------------------------- checking it
def _strings(value: Any, path: str, key: str, example: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [v for v in value.split(",")]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UsageError(f"{path}: {key} must be a list of strings, e.g. {key} = {example}")
    return tuple(v.strip() for v in value if v.strip())


def _rule_ids(values: tuple[str, ...], path: str, key: str) -> tuple[str, ...]:
    from kgen.lint.registry import RENUMBERED, load_rules

    known = set(load_rules()) | set(RENUMBERED)
    out = []
    for v in values:
        rid = v.upper()
        if rid != "ALL" and rid not in known:
            raise UsageError(f"{path}: {key}: unknown rule id {v!r}; use ids from `kgen lint --list-rules`")
        out.append(rid)
    return tuple(out)


def _check(table: dict, path: str) -> LintConfig:
    cfg = LintConfig(path, os.path.dirname(os.path.abspath(path)))
    for key in table:
        if key not in KEYS:
            near = [k for k in KEYS if k.replace("-", "_") == str(key).replace("-", "_")]
            fix = f"write {near[0]!r}" if near else f"use one of {', '.join(KEYS)}"
            raise UsageError(f"{path}: unknown key {key!r} in the lint settings; {fix}")
    if "skip" in table:
        cfg.skip = _rule_ids(_strings(table["skip"], path, "skip", '["KG102"]'), path, "skip")
    if "exclude" in table:
        cfg.exclude = _strings(table["exclude"], path, "exclude", '["legacy/**"]')
    if "kubernetes-version" in table:
        from kgen.errors import KgenError
        from kgen.schema import normalize_version

        value = table["kubernetes-version"]
        if not isinstance(value, str):
            raise UsageError(f'{path}: kubernetes-version must be a quoted string, e.g. kubernetes-version = "1.31"')
        try:
            cfg.kubernetes_version = normalize_version(value)
        except KgenError as err:
            raise UsageError(f"{path}: kubernetes-version: {err.message}") from None
    if "unit" in table:
        if table["unit"] not in UNITS:
            raise UsageError(
                f'{path}: unit must be one of {", ".join(UNITS)}, got {table["unit"]!r}; e.g. unit = "dir"'
            )
        cfg.unit = table["unit"]
    ignores = table.get("per-path-ignores", {})
    if not isinstance(ignores, dict):
        raise UsageError(
            f'{path}: per-path-ignores must be a table of glob = [rule ids], e.g. "envs/dev/**" = ["KG118"]'
        )
    for glob, ids in ignores.items():
        got = _rule_ids(_strings(ids, path, f"per-path-ignores {glob!r}", '["KG118"]'), path, "per-path-ignores")
        cfg.per_path_ignores.append((str(glob), frozenset(_expand(got))))
    severity = table.get("severity", {})
    if not isinstance(severity, dict):
        raise UsageError(f'{path}: severity must be a table of rule id = "error" | "warning" | "info"')
    for rid, value in severity.items():
        [checked] = _rule_ids((str(rid),), path, "severity")
        if checked in ("ALL", "KG004") or value not in ("error", "warning", "info"):
            raise UsageError(
                f'{path}: severity {rid} = {value!r}: write a rule id (not KG004) = "error", "warning" or "info"'
            )
        for one in _expand((checked,)):
            cfg.severity[one] = Severity(value)
    return cfg


def _expand(ids: tuple[str, ...]) -> frozenset[str]:
    from kgen.lint.registry import expand_ids

    return expand_ids(frozenset(ids))
