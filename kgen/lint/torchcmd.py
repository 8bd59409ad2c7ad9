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
_HOLD = "KgenSubst"  # placeholder for a $(...) / ${...} while a script line is split into words
_HELD = re.compile(_HOLD + r"(\d+)" + _HOLD)
_PREFIX_WORDS = {"exec", "nohup", "time", "env", "stdbuf"}


class Launch:
    """One torchrun (or kgen entrypoint) launch found in a container's command."""

    __slots__ = ("form", "flags", "exports", "sleeps", "where", "flag_where", "script", "opaque")

    def __init__(self, form: str, flags: dict[str, str | None] | None = None) -> None:
        self.form = form  # torchrun | kgen
        self.flags: dict[str, str | None] = flags if flags is not None else {}  # nnodes, nproc_per_node, ...
        self.exports: list[str] = []  # variables assigned/exported in the same script
        self.sleeps: list[str] = []  # sleep commands before/around the launch
        self.where: tuple = ()  # ("command"|"args", index) of the launcher (or of the shell script)
        self.flag_where: dict[str, tuple] = {}  # flag -> ("command"|"args", index) of the item holding it
        self.script = False  # found inside a `sh -c` script
        self.opaque = False  # some flags come from an expansion ($ARGS, "$@"): absent flags are unknown

    def at(self, flag: str | None = None) -> tuple:
        """Where in the container a flag (or the launch itself) is written: ("args", 3), ..."""
        if flag is not None and flag in self.flag_where:
            return self.flag_where[flag]
        return self.where

    def flag(self, name: str) -> str | None:
        return self.flags.get(name)

    def has(self, name: str) -> bool:
        return name in self.flags


def _norm(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def _shield(line: str) -> tuple[str, list[str]]:
    """``line`` with every ``$(...)``, ``$((...))`` and ``${...}`` (balanced, quotes ignored) replaced by a
    placeholder word, and the replaced texts: Kubernetes ``$(VAR)`` references and shell substitutions
    are parts of a word, not the ``(``/``)`` operators that end a command."""
    out: list[str] = []
    saved: list[str] = []
    i = 0
    n = len(line)
    while i < n:
        if line[i] == "$" and i + 1 < n and line[i + 1] in "({":
            opener = line[i + 1]
            closer = ")" if opener == "(" else "}"
            depth = 0
            j = i + 1
            while j < n:
                if line[j] == opener:
                    depth += 1
                elif line[j] == closer:
                    depth -= 1
                    if depth == 0:
                        break
                j += 1
            if j < n:
                out.append(f"{_HOLD}{len(saved)}{_HOLD}")
                saved.append(line[i : j + 1])
                i = j + 1
                continue
        out.append(line[i])
        i += 1
    return "".join(out), saved


def _unshield(token: str, saved: list[str]) -> str:
    if _HOLD not in token:
        return token
    return _HELD.sub(lambda m: saved[int(m.group(1))], token)


def _commands(script: str) -> list[list[str]]:
    """Simple commands of a shell script, as token lists (best effort, never raises)."""
    text = script.replace("\\\r\n", " ").replace("\\\n", " ")
    out: list[list[str]] = []
    for line in text.splitlines():
        shielded, saved = _shield(line)
        try:
            lex = shlex.shlex(shielded, posix=True, punctuation_chars=";&|()")
            lex.whitespace_split = True
            lex.commenters = "#"
            tokens = [_unshield(t, saved) for t in lex]
        except ValueError:
            tokens = [_unshield(t, saved) for t in shielded.split()]
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


def _parse_flags(
    tokens: list[str], where: list[tuple] | None = None
) -> tuple[dict[str, str | None], dict[str, tuple], bool]:
    """torchrun's flags up to the script; with ``where`` (the source of each token) also where each
    flag is written; and whether an expansion such as $ARGS may hold more flags."""
    flags: dict[str, str | None] = {}
    at: dict[str, tuple] = {}
    opaque = False
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok.startswith("$"):
            opaque = True  # torchrun $DISTRIBUTED_ARGS train.py
            i += 1
            continue
        if tok == "--" or not tok.startswith("-") or tok == "-":
            break
        if "=" in tok:
            name, value = tok.split("=", 1)
            key = _norm(name)
            flags[key] = value
        elif _norm(tok) in _BOOL_FLAGS:
            key = _norm(tok)
            flags[key] = None
        else:
            key = _norm(tok)
            flags[key] = tokens[i + 1] if i + 1 < len(tokens) else None
            i += 1
        if where is not None:
            at[key] = where[i if "=" in tok or key in _BOOL_FLAGS else i - 1]
        i += 1
    return flags, at, opaque


def find_launches(container: dict) -> list[Launch]:
    argv: list[str] = []
    src: list[tuple] = []  # ("command"|"args", index) of each argv item
    for key in ("command", "args"):
        part = container.get(key)
        if isinstance(part, list):
            for i, x in enumerate(part):
                if isinstance(x, (str, int, float)):
                    argv.append(str(x))
                    src.append((key, i))
    if not argv:
        return []
    scripts: list[tuple[list[list[str]], str]] = []
    script_at: tuple = ()
    if argv[0].rsplit("/", 1)[-1] in _SHELLS and "-c" in argv[1:]:
        idx = argv.index("-c", 1)
        if idx + 1 < len(argv):
            scripts.append((_commands(argv[idx + 1]), argv[idx + 1]))
            script_at = src[idx + 1]
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
                where = None if script_at else src[at:]
                flags, flag_where, opaque = _parse_flags(tokens[at:], where) if form == "torchrun" else ({}, {}, False)
                launch = Launch(form, flags)
                launch.opaque = opaque
                launch.script = bool(script_at)
                launch.where = script_at or src[max(at - 1, 0)]
                launch.flag_where = flag_where
                found.append(launch)
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
