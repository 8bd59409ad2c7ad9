"""What a shell script does with a command's exit status: ``exit_fate`` says how a script loses it (``||
echo failed``, ``; exit 0``, ``| tee log`` without ``pipefail`` ...), or that a failure fails the script.
"""

from __future__ import annotations

from typing import Any

from kgen.launch import shelltree

_BENIGN = {"echo", "printf", "true", ":", "logger", "touch", "date", "cat", "tee", "ls", "sleep", "wait"}
_HANDLED = "handled"


def exit_fate(script: shelltree.Script, target: shelltree.Simple, errexit: bool, pipefail: bool) -> str | None:
    """How ``script`` loses the exit status of ``target`` (a description such as "`|| echo failed`
    replaces its exit status"), or None when a failure of ``target`` fails the script (or the script
    handles it: ``if``, ``$?``, ``PIPESTATUS``, a loop, a function)."""
    state = {"errexit": errexit, "pipefail": pipefail or "PIPESTATUS" in script.source}
    got = _seq_fate(script.body, target, state)
    return got if isinstance(got, str) and got != _HANDLED else None


def _seq_fate(seq: shelltree.Sequence, target: shelltree.Simple, state: dict) -> Any:
    for idx, ao in enumerate(seq.items):
        got = _andor_fate(ao, target, state)
        if got is None:
            _apply_set(ao, state)
            continue
        if isinstance(got, str):
            return got
        later = seq.items[idx + 1 :]
        if seq.background[idx]:
            return _background_fate(later, state)
        if not later:
            return got
        if state["errexit"] and got[1]:
            return got
        rest = _source_of(later)
        if "$?" in rest or "${?}" in rest or "PIPESTATUS" in rest or "pipestatus" in rest:
            return _HANDLED
        first = _first_simple(later[0])
        shown = " ".join(first.argv) if first is not None else "the next command"
        return f"`{shown}` runs after it (no set -e), so the script's exit status is the last command's"
    return None


def _background_fate(later: list[shelltree.AndOr], state: dict) -> Any:
    """A command run in the background (``&``): the first plain ``wait`` after it decides. Without a PID it
    returns 0 whatever the command's status; ``wait $pid`` returns the command's, and is then followed like the
    command itself. No wait (or one in a branch or loop): the script does not wait for it here, not judged."""
    for k, ao in enumerate(later):
        pipe = ao.items[0][1]
        cmd = pipe.commands[0] if len(ao.items) == 1 and len(pipe.commands) == 1 else None
        if not isinstance(cmd, shelltree.Simple) or not cmd.words or cmd.argv[0] != "wait":
            continue
        if len(cmd.argv) == 1:
            return "`wait` (without a process id) returns 0 whatever the background command's status"
        sub = shelltree.Sequence(later[k:], [False] * len(later[k:]))
        got = _seq_fate(sub, cmd, state)
        return got if got is not None else _HANDLED
    return _HANDLED


def _andor_fate(ao: shelltree.AndOr, target: shelltree.Simple, state: dict) -> Any:
    for k, (_op, pipe) in enumerate(ao.items):
        got = _pipe_fate(pipe, target, state)
        if got is None:
            continue
        if isinstance(got, str):
            return got
        rest = ao.items[k + 1 :]
        fallback = next((p for op, p in rest if op == "||"), None)
        if fallback is not None:
            if _fails(fallback):
                return ("status", True)
            first = _first_simple(fallback)
            shown = " ".join(first.argv) if first is not None else "the next command"
            return f"`|| {shown}` replaces its exit status with that command's (0)"
        return ("status", got[1] and not rest)
    return None


def _pipe_fate(pipe: shelltree.Pipeline, target: shelltree.Simple, state: dict) -> Any:
    for j, node in enumerate(pipe.commands):
        got = _node_fate(node, target, state)
        if got is None:
            continue
        if isinstance(got, str):
            return got
        if pipe.negated:
            return "`!` inverts its exit status"
        if j != len(pipe.commands) - 1 and not state["pipefail"]:
            last = pipe.commands[-1]
            shown = " ".join(last.argv) if isinstance(last, shelltree.Simple) else "the last command"
            return f"the pipeline's exit status is `{shown}`'s (no set -o pipefail)"
        return got
    return None


def _node_fate(node: shelltree.Node, target: shelltree.Simple, state: dict) -> Any:
    if isinstance(node, shelltree.Simple):
        if node is target:
            return ("status", True)
        return _HANDLED if any(target is c for c in shelltree.walk_node(node)) else None
    if not any(target is c for c in shelltree.walk_node(node)):
        return None
    if node.kind in ("subshell", "group"):
        got = _seq_fate(node.bodies[0], target, dict(state))
        return got
    if node.kind in ("if", "case"):
        for k, body in enumerate(node.bodies):
            if any(target is c for c in shelltree.walk_seq(body)):
                if node.kind == "if" and k % 2 == 0 and k != len(node.bodies) - 1:
                    return _HANDLED  # in a condition: the script checks it
                return _seq_fate(body, target, dict(state))
    return _HANDLED  # loops, functions, tests: not followed


def _apply_set(ao: shelltree.AndOr, state: dict) -> None:
    if len(ao.items) != 1 or len(ao.items[0][1].commands) != 1:
        return
    cmd = ao.items[0][1].commands[0]
    if not isinstance(cmd, shelltree.Simple) or not cmd.words or cmd.argv[0] != "set":
        return
    args = cmd.argv[1:]
    for k, a in enumerate(args):
        if a[:1] in ("-", "+") and not a.startswith("--"):
            on = a[0] == "-"
            if "e" in a[1:]:
                state["errexit"] = on
            if "o" in a[1:] and k + 1 < len(args):
                if args[k + 1] == "pipefail":
                    state["pipefail"] = on
                if args[k + 1] == "errexit":
                    state["errexit"] = on


def _fails(pipe: shelltree.Pipeline) -> bool:
    """Whether a fallback after ``||`` keeps the failure: ``exit 1``, ``exit $?``, ``false``,
    ``return 1``, a group ending in one of these, or anything not known to succeed."""
    last = pipe.commands[-1]
    if isinstance(last, shelltree.Compound):
        if last.kind in ("group", "subshell") and last.bodies[0].items:
            return _fails(last.bodies[0].items[-1].items[-1][1])
        return True
    argv = last.argv
    if not argv:
        return False
    if argv[0] in ("exit", "return"):
        return len(argv) == 1 or argv[1] != "0"
    if argv[0] == "false":
        return True
    return argv[0] not in _BENIGN


def _first_simple(node: Any) -> shelltree.Simple | None:
    if isinstance(node, shelltree.AndOr):
        node = node.items[0][1]
    if isinstance(node, shelltree.Pipeline):
        node = node.commands[0]
    if isinstance(node, shelltree.Simple):
        return node
    return next(iter(shelltree.walk_node(node)), None)


def _source_of(items: list[shelltree.AndOr]) -> str:
    out: list[str] = []
    for ao in items:
        for _, pipe in ao.items:
            for node in pipe.commands:
                for cmd in shelltree.walk_node(node):
                    out.extend(w.raw for w in cmd.words + cmd.assigns)
                if isinstance(node, shelltree.Compound):
                    out.extend(w.raw for w in node.words)
    return " ".join(out)
