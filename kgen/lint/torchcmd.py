"""Find torchrun launches in container commands and read their flags.

Recognised forms: ``torchrun ...``, ``python -m torch.distributed.run ...`` (and ``.launch``),
the same inside ``bash -c`` / ``sh -c`` scripts (with ``\\`` continuations, ``&&``, ``;``), and
kgen's own entrypoint (``python3 /opt/kgen/kgen_entrypoint.py``), which reads NNODES and
NPROC_PER_NODE from the environment and runs torchrun itself.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

_SHELLS = {"bash", "sh", "zsh", "dash", "ash"}
_BOOL_FLAGS = {
    "standalone",
    "no_python",
    "no-python",
    "run_path",
    "run-path",
    "module",
    "m",
    "use_env",
    "use-env",
    "redirects_all",
    "virtual-local-rank",
    "virtual_local_rank",
}
_SEPARATORS = {";", "&&", "||", "|", "&", "(", ")", ";;"}
_VAR = re.compile(r"^\$(?:\{(\w+)\}|\((\w+)\)|(\w+))$")
_SLEEP = re.compile(r"^[ \t]*(sleep[ \t]+[^;&|#\n]+)", re.M)
_PREFIX_WORDS = {"exec", "nohup", "time", "env", "stdbuf"}


class Launch:
    """One torchrun (or kgen entrypoint) launch found in a container's command."""

    __slots__ = ("form", "flags", "exports", "sleeps")

    def __init__(self, form: str, flags: dict[str, str | None] | None = None) -> None:
        self.form = form  # torchrun | kgen
        self.flags: dict[str, str | None] = flags if flags is not None else {}  # nnodes, nproc_per_node, ...
        self.exports: list[str] = []  # variables assigned/exported in the same script
        self.sleeps: list[str] = []  # sleep commands before/around the launch

    def flag(self, name: str) -> str | None:
        return self.flags.get(name)

    def has(self, name: str) -> bool:
        return name in self.flags


def _norm(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def _commands(script: str) -> list[list[str]]:
    """Simple commands of a shell script, as token lists (best effort, never raises)."""
    text = script.replace("\\\r\n", " ").replace("\\\n", " ")
    out: list[list[str]] = []
    for line in text.splitlines():
        try:
            lex = shlex.shlex(line, posix=True, punctuation_chars=";&|()")
            lex.whitespace_split = True
            lex.commenters = "#"
            tokens = list(lex)
        except ValueError:
            tokens = line.split()
        cur: list[str] = []
        for tok in tokens:
            if tok in _SEPARATORS or set(tok) <= set(";&|()"):
                if cur:
                    out.append(cur)
                cur = []
            else:
                cur.append(tok)
        if cur:
            out.append(cur)
    return out


def _launch_start(tokens: list[str]) -> tuple[str, int] | None:
    """('torchrun'|'kgen', index of the first flag) if ``tokens`` launches torchrun."""
    i = 0
    while i < len(tokens) and (tokens[i] in _PREFIX_WORDS or re.match(r"^\w+=", tokens[i])):
        i += 1
    if i >= len(tokens):
        return None
    base = tokens[i].rsplit("/", 1)[-1]
    if base == "torchrun":
        return "torchrun", i + 1
    if base.startswith("python"):
        rest = tokens[i + 1 :]
        for j, tok in enumerate(rest):
            if (
                tok == "-m"
                and j + 1 < len(rest)
                and rest[j + 1] in ("torch.distributed.run", "torch.distributed.launch")
            ):
                return "torchrun", i + 1 + j + 2
            if tok.endswith("kgen_entrypoint.py"):
                return "kgen", i + 1 + j + 1
            if not tok.startswith("-"):
                break
    if base.endswith("kgen_entrypoint.py"):
        return "kgen", i + 1
    return None


def _parse_flags(tokens: list[str]) -> dict[str, str | None]:
    flags: dict[str, str | None] = {}
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok == "--" or not tok.startswith("-") or tok == "-":
            break
        if "=" in tok:
            name, value = tok.split("=", 1)
            flags[_norm(name)] = value
        elif _norm(tok) in _BOOL_FLAGS:
            flags[_norm(tok)] = None
        else:
            flags[_norm(tok)] = tokens[i + 1] if i + 1 < len(tokens) else None
            i += 1
        i += 1
    return flags


def find_launches(container: dict) -> list[Launch]:
    parts = [container.get("command"), container.get("args")]
    argv = [str(x) for part in parts if isinstance(part, list) for x in part if isinstance(x, (str, int, float))]
    if not argv:
        return []
    scripts: list[tuple[list[list[str]], str]] = []
    if argv[0].rsplit("/", 1)[-1] in _SHELLS and "-c" in argv[1:]:
        idx = argv.index("-c", 1)
        if idx + 1 < len(argv):
            scripts.append((_commands(argv[idx + 1]), argv[idx + 1]))
    else:
        scripts.append(([argv], ""))
    launches: list[Launch] = []
    for commands, raw in scripts:
        exports: list[str] = []
        sleeps = [m.group(1).strip() for m in _SLEEP.finditer(raw)]
        found: list[Launch] = []
        for tokens in commands:
            if not tokens:
                continue
            head = tokens[0]
            if head == "export" or head == "declare":
                exports.extend(t.split("=", 1)[0] for t in tokens[1:] if "=" in t)
                continue
            if re.match(r"^[A-Za-z_]\w*=", head) and len(tokens) == 1:
                exports.append(head.split("=", 1)[0])
                continue
            if head == "sleep" and len(tokens) > 1:
                continue  # reported from the raw script text below
            start = _launch_start(tokens)
            if start:
                form, at = start
                found.append(Launch(form, _parse_flags(tokens[at:]) if form == "torchrun" else {}))
        for launch in found:
            launch.exports = exports
            launch.sleeps = sleeps
        launches.extend(found)
    return launches


def resolve(value: str | None, env: dict[str, Any]) -> str | None:
    """A flag value with a whole-token $VAR / ${VAR} / $(VAR) replaced by the env literal."""
    if value is None:
        return None
    m = _VAR.match(value)
    if m:
        name = m.group(1) or m.group(2) or m.group(3)
        lit = env.get(name)
        return lit if isinstance(lit, str) else None
    return None if "$" in value else value


def host_of(endpoint: str) -> str:
    if endpoint.startswith("["):
        return endpoint[1:].split("]", 1)[0]
    return endpoint.rsplit(":", 1)[0] if endpoint.count(":") == 1 else endpoint
