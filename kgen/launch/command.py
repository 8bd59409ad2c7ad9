"""How a container launches training: the launch model every training rule reads.

A container's ``command`` + ``args`` is read the way the kubelet and the shell run it:

- wrappers are looked through: ``exec``, ``env A=1``, ``nohup``, ``time``, ``stdbuf``, ``timeout``,
  ``nice``, ``numactl``, ``tini --``, ``dumb-init --``;
- shells (``sh``, ``bash``, ``dash``, ``zsh``, ``ash``, ``ksh``) with any option cluster
  (``-c``, ``-xc``, ``-lc``, ``-ec``, ``-cxue``, ``-o pipefail -c``, ``-l -c``, ``--login``): the
  ``-c`` script is parsed (``kgen.launch.shell``), ``$0``, ``$1`` ... and ``"$@"`` come from the
  arguments after it, so a prologue ending in ``exec "$@"`` launches whatever ``args`` holds; every
  simple command of the script is read again (a nested ``bash -c "..."``, ``exec torchrun ...``);
- launchers: ``torchrun``, ``python[3] -m torch.distributed.run|launch``, ``deepspeed``,
  ``accelerate launch`` (their node count, rank, master and processes flags mapped onto torchrun's
  names: ``--num_machines`` is ``nnodes``, ``--machine_rank`` ``node_rank``, ``--main_process_ip``
  ``master_addr`` ...), kgen's entrypoint (``kgen_entrypoint.py -- CMD``), and a plain
  ``python[3] script.py`` (form ``python``: training when the pod's environment says so, env://);
- a launcher that runs another launcher (kgen's entrypoint ``-- torchrun ...``, ``torchrun
  --no-python torchrun ...``, ``torchrun -m torch.distributed.run``) is recorded as ``nested``;
- for each launcher inside a script, what the script does with its exit status (``|| echo
  failed``, ``; exit 0``, ``| tee log`` without ``pipefail`` ...) is recorded as ``swallowed``.
"""

from __future__ import annotations

import posixpath
from typing import Any

from kgen.launch import shell, shellexpand, shelltree
from kgen.launch.argv import Launch, _at, basename, read_launch, skip_wrappers
from kgen.launch.exitfate import exit_fate
from kgen.launch.launchers import MPI_LAUNCHERS, mpi_program

_SHELLS = {"bash", "sh", "zsh", "dash", "ash", "ksh", "mksh"}
_MAX_DEPTH = 8


class Scripted:
    """What reading one container's command found, besides its launches."""

    __slots__ = ("launches", "errors", "commands", "no_command", "scripts", "followed")

    def __init__(self) -> None:
        self.launches: list[Launch] = []
        self.errors: list[tuple[tuple, str]] = []  # (where, shell syntax error)
        self.commands: list[tuple[list[str], tuple]] = []  # every simple command run (argv, where)
        self.no_command = False  # the image's ENTRYPOINT/CMD runs: unknown launcher
        self.scripts: list[tuple[shelltree.Script, tuple]] = []  # parsed shell scripts and where they are
        self.followed: list[str] = []  # script files read (ConfigMap keys, here-documents), as described


# --- reading a container ------------------------------------------------------------------------


def read_container(container: dict, files: Any = None) -> Scripted:
    """Every launch, command and shell error of one container (memoized on the container dict's id
    by the caller). ``files`` (``kgen.lint.scripts.Files``) holds the script files the linted set
    gives the container (ConfigMap keys under its mounts): they are read like inline scripts."""
    out = Scripted()
    argv: list[str] = []
    src: list[tuple] = []
    for key in ("command", "args"):
        part = container.get(key)
        if isinstance(part, list):
            for i, x in enumerate(part):
                if isinstance(x, (str, int, float)) and not isinstance(x, bool):
                    argv.append(str(x))
                    src.append((key, i))
    if not isinstance(container.get("command"), list) or not container.get("command"):
        out.no_command = True  # the image's ENTRYPOINT runs (args, if any, are its arguments)
    if not argv:
        return out
    wd = container.get("workingDir")
    _Reader(out, files, wd if isinstance(wd, str) and wd.startswith("/") else "").run(argv, src, 0, None)
    return out


def find_launches(container: dict) -> list[Launch]:
    """The training launchers of a container's command (torchrun, deepspeed, accelerate, kgen's
    entrypoint); ``read_container`` also has plain ``python script.py`` runs."""
    return [launch for launch in read_container(container).launches if launch.training]


_Simple = shelltree.Simple  # (the reader's method `shell` hides the module inside the class)
_EXPORTING = {"export"}
_DECLARING = {"declare", "typeset", "local", "readonly"}
_LOOPS = {"while", "until", "for"}


class _Reader:
    def __init__(self, out: Scripted, files: Any = None, working_dir: str = "") -> None:
        self.out = out
        self.files = files
        self.working_dir = working_dir
        self.written: dict[str, tuple[str, str]] = {}  # files a script writes from a here-document

    def run(
        self,
        argv: list[str],
        src: list[tuple],
        depth: int,
        in_script: tuple | None,
        stdin: str | None = None,
        cwd: str = "",
    ) -> Launch | None:
        """Read one command (already split into words); returns the launch it is, if any. ``stdin``: the
        text a here-document feeds it; ``cwd``: the folder a script ``cd``-ed into."""
        if depth > _MAX_DEPTH or not argv:
            return None
        i = skip_wrappers(argv)
        argv, src = argv[i:], src[i:]
        if not argv:
            return None
        self.out.commands.append((argv, src[0] if src else ()))
        head = basename(argv[0])
        if head in _SHELLS:
            return self.shell(argv, src, depth, in_script, stdin, cwd)
        if "/" in argv[0]:
            found = self.file(argv[0], cwd)
            if found is not None and _shebang_shell(found[0]):
                where = in_script if in_script is not None else src[0]
                return self.script(found[0], where, argv, src, False, False, depth, found[1], cwd)
        if head in MPI_LAUNCHERS:
            # mpirun starts its program on every rank: read the program (its exit status is mpirun's)
            start = 1 + mpi_program(argv[1:])
            before = len(self.out.launches)
            if start >= len(argv):
                return None
            program = self.run(argv[start:], src[start:], depth + 1, in_script, None, cwd)
            if program is None:  # a program of its own (a compiled benchmark, a training binary): the MPI world's
                program = _at(Launch("mpi"), src, start, in_script)
                program.child = argv[start:]
                program.words = argv
                self.out.launches.append(program)
            for new in self.out.launches[before:]:
                new.via = new.via or head
            return program
        launch = read_launch(argv, src, in_script)
        if launch is None:
            return None
        if launch.child and launch.form != "python":
            inner = _Reader(Scripted(), self.files, self.working_dir)
            inner.written = self.written
            child_src = src[len(argv) - len(launch.child) :]
            found_launch = inner.run(launch.child, child_src, depth + 1, in_script, None, cwd)
            if found_launch is not None and found_launch.training:
                launch.nested = found_launch
        self.out.launches.append(launch)
        return launch

    def file(self, path: str, cwd: str) -> tuple[str, str] | None:
        """(text, where it comes from) of a script file the manifest holds, or None."""
        base = cwd or self.working_dir
        full = (
            posixpath.normpath(path if path.startswith("/") else posixpath.join(base, path))
            if (path.startswith("/") or base)
            else None
        )
        if full is None:
            return None
        if full in self.written:
            return self.written[full]
        if self.files:
            return self.files.text(full)
        return None

    def shell(
        self,
        argv: list[str],
        src: list[tuple],
        depth: int,
        in_script: tuple | None,
        stdin: str | None = None,
        cwd: str = "",
    ) -> Launch | None:
        opts = _shell_options(argv)
        if opts is not None:
            script_text, script_index, errexit, pipefail = opts
            where = in_script if in_script is not None else src[script_index]
            positional = argv[script_index + 1 :]
            pos_src = src[script_index + 1 :]
            if not positional:
                positional, pos_src = [basename(argv[0])], [where]
            return self.script(script_text, where, positional, pos_src, errexit, pipefail, depth, "", cwd)
        operand = _shell_operand(argv)
        where = in_script if in_script is not None else (src[0] if src else ())
        if operand is not None:
            index, errexit, pipefail = operand
            found = self.file(argv[index], cwd)
            if found is None:
                return None  # a script file the manifest does not hold: its text is not known
            positional, pos_src = argv[index:], src[index:]
            if in_script is None and index < len(src):
                where = src[index]
            return self.script(found[0], where, positional, pos_src, errexit, pipefail, depth, found[1], cwd)
        if stdin is not None:
            errexit, pipefail = _shell_flags(argv)
            return self.script(
                stdin, where, [basename(argv[0])], [where], errexit, pipefail, depth, "a here-document", cwd
            )
        return None  # the shell reads its stdin: not in the manifest

    def script(
        self,
        text: str,
        where: tuple,
        positional: list[str],
        pos_src: list[tuple],
        errexit: bool,
        pipefail: bool,
        depth: int,
        origin: str,
        cwd: str,
    ) -> Launch | None:
        """Read a shell script: every simple command again, through the launch model."""
        if depth > _MAX_DEPTH:
            return None
        try:
            script = shell.parse(text)
        except shelltree.ShellSyntaxError as err:
            self.out.errors.append((where, f"{origin}: {err}" if origin else str(err)))
            return None
        except RecursionError:  # a hostile script the nesting bounds did not catch: never a crash
            self.out.errors.append((where, "the script is nested too deeply to read"))
            return None
        if origin:
            self.out.followed.append(origin)
        self.out.scripts.append((script, where))
        context = shelltree.enclosing(script)
        stdin_of = _heredoc_stdin(script)
        exports: list[str] = []
        assigned: list[str] = []
        sleeps: list[str] = []
        found: list[Launch] = []
        for cmd in script.simple_commands():
            around = context.get(id(cmd), ())
            names = [a.raw.split("=", 1)[0].split("[", 1)[0].rstrip("+") for a in cmd.assigns]
            (exports if cmd.words else assigned).extend(names)
            words, wsrc = _expand_words(cmd.words, positional, pos_src, where)
            self._record_written(cmd, words, cwd)
            if not words:
                continue
            if words[0] in _EXPORTING or (words[0] in _DECLARING and any(_has_x(w) for w in words[1:])):
                exports.extend(w.split("=", 1)[0] for w in words[1:] if not w.startswith(("-", "+")))
                continue
            if words[0] in _DECLARING:
                assigned.extend(w.split("=", 1)[0] for w in words[1:] if "=" in w and not w.startswith("-"))
                continue
            if words[0] == "sleep" and len(words) > 1:
                if not _LOOPS & set(around):
                    sleeps.append(" ".join(w.raw for w in cmd.words))  # a sleep in a loop polls: an active wait
                continue
            if words[0] == "cd" and len(words) > 1 and "cmdsub" not in around:
                base = cwd or self.working_dir
                target = words[1]
                if target.startswith("/") or base:
                    cwd = posixpath.normpath(posixpath.join(base, target))
                continue
            before = len(self.out.launches)
            if words[0] in ("source", ".") and len(words) > 1:
                got = self.file(words[1], cwd)
                launch = None
                if got is not None:
                    launch = self.script(got[0], where, positional, pos_src, errexit, pipefail, depth + 1, got[1], cwd)
            else:
                launch = self.run(words, wsrc, depth + 1, where, stdin_of.get(id(cmd)), cwd)
            if launch is not None:
                fate = exit_fate(script, cmd, errexit, pipefail)
                for new in self.out.launches[before:]:
                    new.sleeps = sleeps + new.sleeps  # a sleep before the launch staggers it; one after it does not
                    new.script = True
                    new.branch = new.branch or bool({"if", "case"} & set(around))
                    new.origin = new.origin or origin
                    if new.where == ():
                        new.where = where
                    if isinstance(fate, str) and new.swallowed is None:
                        new.swallowed = fate
                    found.append(new)
        for launch in found:
            launch.exports = exports + launch.exports  # an inner shell inherits what the outer one exports
            launch.assigned = assigned + launch.assigned
        return found[-1] if found else None

    def _record_written(self, cmd: _Simple, words: list[str], cwd: str) -> None:
        """``cat > FILE <<EOF ... EOF`` (or ``tee FILE <<EOF``): the script writes FILE from a
        here-document, so a later ``bash FILE`` runs that text."""
        body = next((r for r in cmd.redirects if r.heredoc is not None), None)
        if body is None or not words:
            return
        target = None
        if words[0] == "cat" and len(words) == 1:
            out = [r for r in cmd.redirects if r.op.lstrip("1") in (">", ">|") and r.target is not None]
            target = out[-1].target.literal if out else None  # type: ignore[union-attr]
        elif words[0] == "tee" and len(words) == 2:
            target = words[1]
        if not target:
            return
        base = cwd or self.working_dir
        if target.startswith("/") or base:
            full = posixpath.normpath(posixpath.join(base, target))
            text = body.script_text()
            if text is not None:
                self.written[full] = (text, f"{full}, written by a here-document")


def _has_x(word: str) -> bool:
    return word.startswith("-") and "x" in word[1:]


def _shebang_shell(text: str) -> bool:
    """A script whose first line runs a shell (``#!/bin/bash``, ``#!/usr/bin/env bash``)."""
    first = text.split("\n", 1)[0]
    if not first.startswith("#!"):
        return False
    words = first[2:].split()
    if words and basename(words[0]) == "env":
        words = [w for w in words[1:] if not w.startswith("-")]
    return bool(words) and basename(words[0]) in _SHELLS


def _heredoc_stdin(script: shelltree.Script) -> dict[int, str]:
    """The simple commands whose stdin is a here-document or here-string (``bash <<EOF``, ``cat <<EOF |
    bash``), by id, with the text they read."""
    out: dict[int, str] = {}

    def seq(body: shelltree.Sequence) -> None:
        for ao in body.items:
            for _, pipe in ao.items:
                prev = None
                for node in pipe.commands:
                    if isinstance(node, shelltree.Simple):
                        own = next((r.script_text() for r in node.redirects if r.script_text() is not None), None)
                        if own is not None:
                            out[id(node)] = own
                        elif prev is not None:
                            out[id(node)] = prev
                        prev = None
                        if node.argv[:1] == ["cat"] and len(node.argv) == 1 and own is not None:
                            prev = own
                    else:
                        prev = None
                        for body_ in node.bodies:
                            seq(body_)

    seq(script.body)
    return out


def _expand_words(
    words: list[shelltree.Word], positional: list[str], pos_src: list[tuple], where: tuple
) -> tuple[list[str], list[tuple]]:
    """The fields of a command's words: ``"$@"``, ``$1`` ... replaced from the shell's arguments (with
    the command/args item each came from), other expansions kept as their source text."""
    out: list[str] = []
    src: list[tuple] = []
    for w in words:
        if len(w.parts) == 1 and w.parts[0].kind == "param" and not w.parts[0].op:
            name = w.parts[0].name
            if name in ("@", "*"):
                args, asrc = positional[1:], pos_src[1:]
                if w.parts[0].quoted and name == "@":
                    out.extend(args)
                    src.extend(asrc)
                else:
                    for a, s in zip(args, asrc, strict=False):
                        for piece in a.split():
                            out.append(piece)
                            src.append(s)
                continue
            if name.isdigit():
                n = int(name)
                if n < len(positional):
                    out.append(positional[n])
                    src.append(pos_src[n] if n < len(pos_src) else where)
                continue
        got = (
            shellexpand.expand(w, None, positional)
            if any(p.name in ("@", "*") or p.name.isdigit() for p in w.parts)
            else None
        )
        if got is not None:
            out.extend(got)
            src.extend([where] * len(got))
        else:
            out.append(w.text)
            src.append(where)
    return out, src


def _shell_options(argv: list[str]) -> tuple[str, int, bool, bool] | None:
    """(script, index of the script in argv, errexit, pipefail) of ``sh [options] -c SCRIPT [args]``;
    None when the shell reads a file or stdin."""
    got = _scan_shell(argv)
    if got is None:
        return None
    i, has_c, errexit, pipefail = got
    if not has_c or i >= len(argv):
        return None
    return argv[i], i, errexit, pipefail


def _shell_operand(argv: list[str]) -> tuple[int, bool, bool] | None:
    """(index of the script file, errexit, pipefail) of ``sh [options] FILE [args]``; None with -c or -s
    or no operand (the shell reads stdin)."""
    got = _scan_shell(argv)
    if got is None:
        return None
    i, has_c, errexit, pipefail = got
    if has_c or i >= len(argv):
        return None
    return i, errexit, pipefail


def _shell_flags(argv: list[str]) -> tuple[bool, bool]:
    got = _scan_shell(argv)
    return (got[2], got[3]) if got is not None else (False, False)


def _scan_shell(argv: list[str]) -> tuple[int, bool, bool, bool] | None:
    """(index of the first operand, -c given, errexit, pipefail) of a shell's command line; None with
    -s (the script is stdin whatever follows)."""
    has_c = errexit = pipefail = False
    i = 1
    while i < len(argv):
        a = argv[i]
        if a in ("--", "-"):
            i += 1
            break
        if a.startswith("--"):
            if a in ("--rcfile", "--init-file"):
                i += 2
                continue
            i += 1
            continue
        if a[:1] in ("-", "+") and len(a) > 1:
            letters = a[1:]
            takes = 0
            for ch in letters:
                if ch == "c":
                    has_c = True
                elif ch == "s" and a[0] == "-":
                    return None
                elif ch == "e" and a[0] == "-":
                    errexit = True
                elif ch in "oO":
                    takes += 1
            for k in range(takes):
                if i + 1 + k < len(argv):
                    value = argv[i + 1 + k]
                    if value == "pipefail" and a[0] == "-":
                        pipefail = True
                    if value == "errexit" and a[0] == "-":
                        errexit = True
            i += 1 + takes
            continue
        break
    return i, has_c, errexit, pipefail
