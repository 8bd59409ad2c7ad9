"""Values layering: built-in defaults < preset < values files (in order) < --set < explicit flags.

Every value remembers the layer it came from (``origins``), so an error can name the option or
the file and line. Values files are read with every scalar as a string and then converted by the
key's declared type (``kgen.render.values.VALUES``): `on`, `010` or `1e3` stay exactly what was written in
string fields, and nothing depends on YAML 1.1 vs 1.2 guessing. Pass-through Kubernetes fields
(tolerations, affinity, volumes, ...) are read as YAML 1.1, the way kubectl reads a manifest.
ruamel.yaml reads both (it is loaded for rendering anyway; PyYAML stays off the render path).
"""

from __future__ import annotations

import copy
import json
import re
import warnings
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from kgen.errors import InputError, UsageError
from kgen.render.values import VALUES

_PREFIXES = {k.rsplit(".", 1)[0] for k in VALUES if "." in k}
_NULLS = {"", "~", "null", "Null", "NULL"}
_TRUE = {"true", "True", "TRUE"}
_FALSE = {"false", "False", "FALSE"}


def defaults() -> tuple[dict[str, Any], dict[str, str]]:
    values = {k: copy.deepcopy(default) for k, (_, default, _) in VALUES.items()}
    return values, {k: "default" for k in values}


def _close(word: str, choices: list[str], cutoff: float) -> str | None:
    """The choice closest to word when it is a likely typo (case ignored), else None."""
    import difflib  # only on the error path

    by_lower = {c.lower(): c for c in choices}
    near = difflib.get_close_matches(word.lower(), list(by_lower), n=1, cutoff=cutoff)
    return by_lower[near[0]] if near else None


def suggest(key: str) -> str | None:
    """A did-you-mean only for a close match: a typo or a case slip, not a different word that
    shares a suffix ("runtimeClassName" is not "priorityClassName")."""
    match = _close(key, list(VALUES), 0.75)
    if match is None:  # the last segment alone: "debg" -> "nccl.debug"
        tails = {k.rsplit(".", 1)[-1]: k for k in VALUES if "." in k}
        near = _close(key.rsplit(".", 1)[-1], list(tails), 0.85)
        match = tails[near] if near else None
    return match


KEY_SHAPED = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,62}(?:\.[A-Za-z0-9_-]{1,63}){0,7}")


def unknown_key(key: str, where: str) -> UsageError:
    from_file = not where.startswith("--")  # --set shows what was typed; a file may be any file
    if from_file and not KEY_SHAPED.fullmatch(str(key)):  # `-f /etc/shadow`: its first line would be the "key"
        return UsageError(
            "a key that is no values key and does not look like one (not shown: is this a values file?)",
            option=where,
            hint="a values file is a YAML mapping of keys such as nodes, gpus or command; `kgen values` lists them",
        )
    near = suggest(key)
    hint = f'did you mean "{near}"?' if near else "`kgen values` lists every key"
    return UsageError(f'unknown key "{key}"', option=where, hint=hint)


def not_a_mapping(prefix: str, value: Any, where: str) -> UsageError:
    """`nccl: INFO`: the key exists, but it holds a mapping of sub-keys."""
    subkeys = [k.split(".", 1)[1] for k in VALUES if k.startswith(prefix + ".")]
    example = f"{prefix}: {{{subkeys[0]}: {value}}}" if value not in (None, "") else f"{prefix}: {{{subkeys[0]}: ...}}"
    named = "" if where.endswith(f" {prefix}") else f"{prefix}: "  # "--set nccl" names the key already
    return UsageError(
        f'{named}must be a mapping with the keys {", ".join(subkeys)}, got "{value}"',
        option=where,
        hint=f"for example {example}, or --set {prefix}.{subkeys[0]}=...",
    )


VALUE_FROM = re.compile(r"""\s*\{\s*["']?valueFrom["']?\s*:""")  # --set env.NAME={valueFrom: ...}
_SHELL_OPERATORS = {"|", "||", "&", "&&", ";", ";;", ">", ">>", "<", "<<", "(", ")"}


def split_command(text: str, where: str) -> list[str]:
    """A command given as one string is split the way a POSIX shell splits words; shell operators
    are refused (torchrun runs the command directly, no shell in between)."""
    import shlex

    try:
        words = shlex.split(text)
    except ValueError as exc:  # "No closing quotation"
        raise UsageError(
            f"cannot split {text!r} into arguments: {str(exc).lower()}",
            option=where,
            hint='close the quote, or give a list: command: [train.py, --lr, "3e-4"]',
        ) from None
    operator = shell_operator(text)
    if operator:
        raise UsageError(
            f"{operator!r} in {text!r} is a shell operator, but no shell runs the command",
            option=where,
            hint="put the pipeline in a script and run that, or give a list of arguments",
        )
    return words


def shell_operator(text: str) -> str | None:
    """The first shell operator (``;``, ``&&``, ``|``, ``>`` ...) a POSIX shell would see in ``text``, or None
    (quoted ones are words); None too for text a shell could not split (an open quote)."""
    import shlex

    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        return next((w for w in lexer if w in _SHELL_OPERATORS), None)
    except ValueError:
        return None


def convert(key: str, raw: Any, typed: Any, where: str) -> Any:
    """Convert a raw value (strings from the loader, or typed for passthrough keys) to key's type."""
    kind = VALUES[key][0]

    def bad(expected: str) -> UsageError:
        return UsageError(f'must be {expected}, got "{raw}"', option=where)

    if kind in ("int", "int?"):
        if kind == "int?" and (raw is None or (isinstance(raw, str) and raw in _NULLS)):
            return None
        if isinstance(raw, str) and re.fullmatch(r"[+-]?[0-9]+", raw.strip()):
            return int(raw.strip())
        raise bad("an integer")
    if kind in ("bool", "bool?"):
        if kind == "bool?" and (raw is None or (isinstance(raw, str) and raw in _NULLS)):
            return None
        if raw in _TRUE:
            return True
        if raw in _FALSE:
            return False
        raise bad("true or false")
    if kind == "str":
        if raw is None:
            return ""
        if not isinstance(raw, str):
            raise bad("a string")
        return raw
    if kind == "argv":
        if raw is None or raw == "":
            return []
        if isinstance(raw, str):
            return split_command(raw, where)
        if not isinstance(raw, list) or not all(isinstance(x, str) for x in raw):
            raise bad("a list of strings (or one string, split like a shell would)")
        return list(raw)
    if kind == "list[str]":
        if raw is None or raw == "":
            return []
        if isinstance(raw, str):
            return [raw]
        if not isinstance(raw, list) or not all(isinstance(x, str) for x in raw):
            raise bad("a list of strings")
        return list(raw)
    if kind == "env":  # NAME: string, or NAME: {valueFrom: ...} (typed: `optional: true` is a boolean)
        if raw is None or raw == "":
            return {}
        if not isinstance(raw, dict):
            raise bad("a mapping of NAME: value (or NAME: {valueFrom: ...})")
        out: dict[str, Any] = {}
        for name, val in raw.items():
            # {valueFrom: ...} as written, every scalar a string (kgen.render.envvars converts `optional`)
            if isinstance(val, (str, dict)):
                out[str(name)] = val
            else:
                shown = "nothing" if val is None else f'"{val}"'
                raise UsageError(
                    f"{name}: must be a string or {{valueFrom: ...}}, got {shown}",
                    option=where,
                    hint='quote an empty value: NAME: ""',
                )
        return out
    if kind == "dict[str,str]":
        if raw is None or raw == "":
            return {}
        if not isinstance(raw, dict) or not all(isinstance(x, str) for x in raw.values()):
            raise bad("a mapping of strings")
        return {str(k): v for k, v in raw.items()}
    if kind == "list[dict]":
        if typed is None or typed == "":
            return []
        if not isinstance(typed, list) or not all(isinstance(x, dict) for x in typed):
            raise bad("a list of mappings")
        return typed
    if kind == "dict":
        if typed is None or typed == "":
            return {}
        if not isinstance(typed, dict):
            raise bad("a mapping")
        return typed
    raise AssertionError(kind)


# ----------------------------------------------------------------------------- values files
def _reader(typ: str) -> YAML:
    y = YAML(typ=typ)  # "base": every scalar a string; "safe": typed. Duplicate keys are errors.
    y.version = (1, 1)
    return y


# Bounds on one values input (-f FILE, -f -, a --set flow value). A values file is a few KB of at most
# a dozen levels (a pod affinity is the deepest Kubernetes form it passes through); these bounds are far
# above that and far below what hangs or crashes the parsers: ruamel composes recursively (a 400-deep
# mapping overflowed the stack) and the render expands every alias (a 9-level alias bomb is 10^9 nodes).
MAX_VALUES_BYTES = 1 << 20
MAX_DEPTH = 100
MAX_NODES = 100_000  # scalars and collections, aliases expanded


def check_shape(text: str, where: str) -> bool:
    """One streaming pass over the parser's events (no recursion, no tree), before anything is composed:
    at most one document, nesting at most MAX_DEPTH, at most MAX_NODES nodes with aliases expanded.
    False when the input holds no document at all (empty, or only comments); raises InputError otherwise."""
    from ruamel.yaml.events import (
        AliasEvent,
        CollectionEndEvent,
        CollectionStartEvent,
        DocumentStartEvent,
        ScalarEvent,
    )

    documents = total = 0
    sizes: dict[str, int] = {}  # anchor -> nodes it stands for, expanded
    open_nodes: list[tuple[str | None, int]] = []  # collections being read: (anchor, total before it)
    try:
        for event in _reader("base").parse(text):
            if isinstance(event, ScalarEvent):
                total += 1
                if event.anchor:
                    sizes[event.anchor] = 1
            elif isinstance(event, CollectionStartEvent):
                total += 1
                open_nodes.append((event.anchor, total - 1))
                if len(open_nodes) > MAX_DEPTH:
                    raise InputError(
                        f"{where}:{event.start_mark.line + 1}: nests deeper than {MAX_DEPTH} levels",
                        hint="a values file is a mapping of a few levels; is it the right file?",
                    )
            elif isinstance(event, CollectionEndEvent):
                anchor, before = open_nodes.pop()
                if anchor:
                    sizes[anchor] = total - before
            elif isinstance(event, AliasEvent):
                total += sizes.get(event.anchor, 1)  # an unknown alias: the parse below names it
            elif isinstance(event, DocumentStartEvent):
                documents += 1
                if documents > 1:
                    raise InputError(
                        f"{where}:{event.start_mark.line + 1}: a second YAML document starts here (---); "
                        "a values file is one mapping of values",
                        hint="merge the documents, or put each in its own file and give -f once per file",
                    )
            if total > MAX_NODES:
                raise InputError(
                    f"{where}: more than {MAX_NODES} values with its YAML aliases expanded (an alias bomb?)",
                    hint="write the values out, or use fewer aliases",
                )
    except MarkedYAMLError:
        return True  # a syntax error: the load below reports it with its line
    except YAMLError:
        return True
    return documents > 0


def load_values_text(text: str, where: str) -> tuple[dict, dict]:
    """Parse a values document twice: strings-only (for typed conversion) and YAML-1.1 typed."""
    if not text.strip():
        if where == "<stdin>":
            raise InputError("<stdin>: empty input; no values to read", hint="did the command before the pipe fail?")
        raise InputError(f"{where}: empty file; no values in it", hint="did the command that wrote it fail?")
    if not check_shape(text, where):
        return {}, {}  # comments only: a values file that sets nothing yet
    try:
        raw = _reader("base").load(text)
        with warnings.catch_warnings():  # ruamel warns that YAML 1.1 floats need a dot (1e3)
            warnings.simplefilter("ignore")
            typed = _reader("safe").load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f":{mark.line + 1}" if mark else ""
        problem = " ".join(str(exc.problem or exc.context).split())
        hint = "keep one of them" if "duplicate key" in problem else "fix the YAML syntax"
        raise InputError(f"{where}{line}: {problem}", hint=hint) from None
    except YAMLError as exc:
        raise InputError(f"{where}: {str(exc).splitlines()[0]}", hint="fix the YAML syntax") from None
    if raw is None or raw == "" and typed is None:  # only `---`: a document with nothing in it
        raise InputError(
            f"{where}: holds an empty YAML document (only ---): no values in it",
            hint="write values such as nodes: 4 below the ---, or drop this -f",
        )
    if isinstance(raw, dict):
        raw = resolve_merge_keys(raw, where)
    if isinstance(raw, dict) and isinstance(typed, dict):  # x-...: anchors' home (`<<: *defaults`), not values
        raw = {k: v for k, v in raw.items() if not str(k).startswith(EXTENSION)}
        typed = {k: v for k, v in typed.items() if not str(k).startswith(EXTENSION)}
    if not isinstance(raw, dict):  # its content is never shown: the file may be any file (a token, a key)
        what = "a list" if isinstance(typed, list) else "one single value (not shown)"
        raise InputError(f"{where}: must be a mapping of values (key: value, e.g. nodes: 4), got {what}")
    return raw, typed


EXTENSION = "x-"  # top-level keys a values file may hold for YAML anchors, as Compose files do (ignored)
MERGE = "<<"


def resolve_merge_keys(tree: Any, where: str) -> Any:
    """YAML 1.1 merge keys (``<<: *defaults``, ``<<: [*a, *b]``) in a tree the "base" loader made (it keeps
    ``<<`` as a key): as PyYAML and ruamel's safe loader resolve them, the mapping's own keys win over merged
    ones and, in a list, an earlier mapping wins over a later one; key order is theirs too. Aliases share one
    object: each is resolved once."""
    done: dict[int, Any] = {}

    def walk(node: Any) -> Any:
        if id(node) in done:
            return done[id(node)]
        if isinstance(node, list):
            done[id(node)] = node
            node[:] = [walk(x) for x in node]
            return node
        if not isinstance(node, dict):
            return node
        done[id(node)] = node
        for key in list(node):
            node[key] = walk(node[key])
        if MERGE not in node:
            return node
        merged = node[MERGE]
        sources = merged if isinstance(merged, list) else [merged]
        if not sources or not all(isinstance(m, dict) for m in sources):
            raise InputError(
                f"{where}: <<: a YAML merge key takes a mapping or a list of mappings (an alias such as *defaults)",
                hint="write <<: *anchor, or <<: [*a, *b]",
            )
        pairs = [kv for m in reversed(sources) for kv in m.items()] + [kv for kv in node.items() if kv[0] != MERGE]
        out: dict = {}
        for key, value in pairs:
            out[key] = value
        node.clear()
        node.update(out)
        return node

    return walk(tree)


def flatten(raw: dict, typed: dict, where: str, prefix: str = "") -> dict[str, tuple[Any, Any]]:
    """Nested mapping -> {dotted key: (raw, typed)}; unknown keys are errors with a suggestion."""
    out: dict[str, tuple[Any, Any]] = {}
    for key, val in raw.items():
        dotted = f"{prefix}{key}"
        typed_val = typed.get(key) if isinstance(typed, dict) else None
        if dotted in VALUES:
            out[dotted] = (val, typed_val)
        elif dotted in _PREFIXES and isinstance(val, dict):
            out.update(flatten(val, typed_val or {}, where, prefix=f"{dotted}."))
        elif dotted in _PREFIXES:
            raise not_a_mapping(dotted, val, where)
        else:
            raise unknown_key(dotted, where)
    return out


class Layers:
    """Accumulates the layers in order; ``result()`` gives (values, origins)."""

    def __init__(self) -> None:
        self.values, self.origins = defaults()

    def apply(self, key: str, value: Any, origin: str, merge: bool = True) -> None:
        if merge and VALUES[key][0] in ("dict[str,str]", "env"):
            merged = dict(self.values[key])
            merged.update(value)
            value = merged
        self.values[key] = value
        self.origins[key] = origin

    def apply_mapping(self, raw: dict, typed: dict, where: str) -> None:
        for key, (r, t) in flatten(raw, typed, where).items():
            origin = f"{where}: {key}"
            self.apply(key, convert(key, r, t, origin), origin)

    def apply_file(self, path: str) -> None:
        from kgen.inputs import read_text

        try:
            text = read_text(path, limit=MAX_VALUES_BYTES, what="values file")
        except InputError as exc:
            exc.option = "-f/--values"
            raise
        self.apply_text(text, path)

    def apply_text(self, text: str, where: str) -> None:
        """A values document given as text (``-f -``: the CLI reads stdin); ``where`` names it in errors."""
        raw, typed = load_values_text(text, where)
        self.apply_mapping(raw, typed, where)

    def apply_flag(self, key: str, value: Any, flag: str) -> None:
        """An explicit flag (--nodes 4): strings converted by the key's type, like --set."""
        self.apply(key, convert(key, value, value, flag), flag)

    def apply_set(self, assignment: str) -> None:
        if "=" not in assignment:
            raise UsageError(
                f'expected KEY=VALUE, got "{assignment}"', option="--set", hint="for example --set nccl.debug=INFO"
            )
        key, value = assignment.split("=", 1)
        where = f"--set {key.strip()}"
        parts = [p.replace("\\.", ".") for p in re.split(r"(?<!\\)\.", key.strip())]
        dotted = ".".join(parts)
        if dotted in VALUES:
            kind = VALUES[dotted][0]
            if kind in ("argv", "list[str]", "list[dict]", "dict", "dict[str,str]", "env") and value.strip().startswith(
                ("[", "{")
            ):
                raw, typed = load_values_text(f"v: {value}", where)
                self.apply(dotted, convert(dotted, raw["v"], typed["v"], where), where, merge=False)
            else:
                self.apply(dotted, convert(dotted, value, value, where), where)
            return
        if dotted in _PREFIXES:
            raise not_a_mapping(dotted, value, where)
        # dict[str,str] entry: env.FOO=bar, labels.team=ml, nodeSelector.pool=a100
        for n in range(len(parts) - 1, 0, -1):
            head = ".".join(parts[:n])
            if head in VALUES and VALUES[head][0] in ("dict[str,str]", "env"):
                entry = ".".join(parts[n:])
                if VALUES[head][0] == "env" and VALUE_FROM.match(value):  # env.HF_TOKEN={valueFrom: ...}
                    raw, typed = load_values_text(f"v: {{{json.dumps(entry)}: {value}}}", where)
                    self.apply(head, convert(head, raw["v"], typed["v"], where), where)
                else:
                    self.apply(head, {entry: value}, where)
                return
        raise unknown_key(dotted, "--set")

    def result(self) -> tuple[dict[str, Any], dict[str, str]]:
        return self.values, self.origins
