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
import re
from typing import Any

from kgen.launch import shell
from kgen.launch.launchers import (
    ACCELERATE_FLAGS,
    DEEPSPEED_FLAGS,
    LAUNCHER_MODULES,
    MPI_LAUNCHERS,
    PYTHON_VALUE_OPTIONS,
    TORCHRUN_FLAGS,
    mpi_program,
)

_SHELLS = {"bash", "sh", "zsh", "dash", "ash", "ksh", "mksh"}
TRAINING_FORMS = ("torchrun", "deepspeed", "accelerate", "kgen")
_DEEPSPEED_MAP = {"num_nodes": "nnodes", "num_gpus": "nproc_per_node", "num_procs": "nproc_per_node"}
_ACCELERATE_MAP = {
    "num_machines": "nnodes",
    "machine_rank": "node_rank",
    "main_process_ip": "master_addr",
    "main_process_port": "master_port",
    "num_processes": "world_processes",
}
_VAR = re.compile(r"^\$(?:\{(\w+)\}|\((\w+)\)|(\w+))$")
_MAX_DEPTH = 8


class Launch:
    """One launcher found in a container's command."""

    __slots__ = (
        "form",
        "flags",
        "exports",
        "sleeps",
        "where",
        "flag_where",
        "script",
        "opaque",
        "child",
        "nested",
        "swallowed",
        "words",
        "shell_words",
        "config_file",
        "spelled",
        "assigned",
        "branch",
        "origin",
        "via",
    )

    def __init__(self, form: str, flags: dict[str, str | None] | None = None) -> None:
        self.form = form  # torchrun | deepspeed | accelerate | kgen | python | mpi (a program mpirun starts)
        self.flags: dict[str, str | None] = flags if flags is not None else {}  # torchrun's names: nnodes, ...
        self.exports: list[str] = []  # variables the script exports (export, declare -x, A=1 cmd)
        self.sleeps: list[str] = []  # sleep commands of the script
        self.where: tuple = ()  # ("command"|"args", index) of the launcher (or of the shell script)
        self.flag_where: dict[str, tuple] = {}  # flag -> ("command"|"args", index) of the item holding it
        self.script = False  # found inside a shell script
        self.opaque = False  # some flags come from an expansion ($ARGS, "$@") or a config file
        self.child: list[str] = []  # what the launcher runs: the training script and its arguments
        self.nested: Launch | None = None  # a launcher this launcher runs (never right)
        self.swallowed: str | None = None  # how the script loses the launcher's exit status
        self.words: list[str] = []  # the launcher's own words, as written (after quote removal)
        self.shell_words: dict[str, list[str]] = {}  # flag -> the shell source of its value (for $RANDOM ...)
        self.config_file = False  # accelerate --config_file / deepspeed config: flags may live there
        self.spelled: dict[str, str] = {}  # flag -> how the command line wrote it ("--main_process_ip")
        self.assigned: list[str] = []  # plain shell variables the script sets (not exported)
        self.branch = False  # in an if/case branch: it runs in some pods only
        self.origin = ""  # the script file it is in (a ConfigMap key, a here-document), "" when inline
        self.via = ""  # the MPI launcher that starts it on every rank ("mpirun", "mpiexec"), "" when none

    def __repr__(self) -> str:
        return f"Launch({self.form!r}, {self.flags!r})"

    def at(self, flag: str | None = None) -> tuple:
        """Where in the container a flag (or the launch itself) is written: ("args", 3), ..."""
        if flag is not None and flag in self.flag_where:
            return self.flag_where[flag]
        return self.where

    def flag(self, name: str) -> str | None:
        return self.flags.get(name)

    def spelling(self, name: str) -> str:
        """The flag as written on the command line (``--main_process_ip`` for accelerate's master)."""
        return self.spelled.get(name, "--" + name.replace("_", "-"))

    def master_flags(self) -> list[tuple[str, str]]:
        """(key, value) of the flags that name the master (pod 0): --master-addr, and --rdzv-endpoint
        unless the rendezvous is etcd (then it names the etcd server)."""
        out = []
        for key in ("master_addr", "rdzv_endpoint"):
            raw = self.flags.get(key)
            if raw and not (key == "rdzv_endpoint" and (self.flags.get("rdzv_backend") or "").startswith("etcd")):
                out.append((key, raw))
        return out

    def has(self, name: str) -> bool:
        return name in self.flags

    @property
    def training(self) -> bool:
        return self.form in TRAINING_FORMS


class Scripted:
    """What reading one container's command found, besides its launches."""

    __slots__ = ("launches", "errors", "commands", "no_command", "scripts", "followed")

    def __init__(self) -> None:
        self.launches: list[Launch] = []
        self.errors: list[tuple[tuple, str]] = []  # (where, shell syntax error)
        self.commands: list[tuple[list[str], tuple]] = []  # every simple command run (argv, where)
        self.no_command = False  # the image's ENTRYPOINT/CMD runs: unknown launcher
        self.scripts: list[tuple[shell.Script, tuple]] = []  # parsed shell scripts and where they are
        self.followed: list[str] = []  # script files read (ConfigMap keys, here-documents), as described


def _norm(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def _base(word: str) -> str:
    return word.rsplit("/", 1)[-1]


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


_Simple = shell.Simple  # (the reader's method `shell` hides the module inside the class)
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
        i = _skip_wrappers(argv)
        argv, src = argv[i:], src[i:]
        if not argv:
            return None
        self.out.commands.append((argv, src[0] if src else ()))
        head = _base(argv[0])
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
        launch = _launcher(argv, src, in_script)
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
                positional, pos_src = [_base(argv[0])], [where]
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
                stdin, where, [_base(argv[0])], [where], errexit, pipefail, depth, "a here-document", cwd
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
        except shell.ShellSyntaxError as err:
            self.out.errors.append((where, f"{origin}: {err}" if origin else str(err)))
            return None
        except RecursionError:  # a hostile script the nesting bounds did not catch: never a crash
            self.out.errors.append((where, "the script is nested too deeply to read"))
            return None
        if origin:
            self.out.followed.append(origin)
        self.out.scripts.append((script, where))
        context = shell.enclosing(script)
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
    if words and _base(words[0]) == "env":
        words = [w for w in words[1:] if not w.startswith("-")]
    return bool(words) and _base(words[0]) in _SHELLS


def _heredoc_stdin(script: shell.Script) -> dict[int, str]:
    """The simple commands whose stdin is a here-document or here-string (``bash <<EOF``, ``cat <<EOF |
    bash``), by id, with the text they read."""
    out: dict[int, str] = {}

    def seq(body: shell.Sequence) -> None:
        for ao in body.items:
            for _, pipe in ao.items:
                prev = None
                for node in pipe.commands:
                    if isinstance(node, shell.Simple):
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
    words: list[shell.Word], positional: list[str], pos_src: list[tuple], where: tuple
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
            shell.expand(w, None, positional)
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


_WRAPPERS = {
    "exec",
    "nohup",
    "time",
    "stdbuf",
    "timeout",
    "nice",
    "numactl",
    "tini",
    "dumb-init",
    "env",
    "sudo",
    "command",
    "builtin",
    "taskset",
    "chrt",
    "ionice",
}
_WRAPPER_VALUE_OPTS = {
    "timeout": {"-s", "--signal", "-k", "--kill-after"},
    "nice": {"-n", "--adjustment"},
    "env": {"-u", "--unset", "-C", "--chdir", "-S", "--split-string"},
    "sudo": {"-u", "-g", "-C", "-h", "-p"},
    "stdbuf": {"-i", "-o", "-e"},
    "exec": {"-a"},
    "time": {"-f", "-o"},
    "ionice": {"-c", "-n"},
    "numactl": {"-C", "-N", "-m", "-p", "-i"},
}


def _skip_wrappers(argv: list[str]) -> int:
    """Index of the real command after ``exec``, ``env A=1``, ``timeout 1h`` ... and assignments."""
    i = 0
    while i < len(argv):
        word = argv[i]
        base = _base(word)
        if re.match(r"^[A-Za-z_]\w*=", word):
            i += 1
            continue
        if base not in _WRAPPERS:
            return i
        i += 1
        values = _WRAPPER_VALUE_OPTS.get(base, set())
        while i < len(argv) and argv[i].startswith("-") and argv[i] != "-":
            opt = argv[i]
            i += 1
            if opt == "--":
                break
            if opt in values and "=" not in opt:
                i += 1
        if base == "timeout" and i < len(argv):
            i += 1  # the duration
        if base in ("taskset", "chrt") and i < len(argv):
            i += 1  # the mask / priority
    return i


def _launcher(argv: list[str], src: list[tuple], in_script: tuple | None) -> Launch | None:
    head = _base(argv[0])
    if head == "torchrun":
        return _torchrun(argv, src, 1, in_script)
    if head == "deepspeed":
        return _flagged("deepspeed", argv, src, 1, in_script, DEEPSPEED_FLAGS, _DEEPSPEED_MAP)
    if head == "accelerate" and len(argv) > 1 and argv[1] == "launch":
        launch = _flagged("accelerate", argv, src, 2, in_script, ACCELERATE_FLAGS, _ACCELERATE_MAP)
        _accelerate_nproc(launch)
        return launch
    if head.endswith("kgen_entrypoint.py"):
        return _kgen(argv, src, 1, in_script)
    if re.match(r"^python[0-9.]*$", head) or head == "pypy3":
        return _python(argv, src, in_script)
    return None


def _python(argv: list[str], src: list[tuple], in_script: tuple | None) -> Launch | None:
    i = 1
    while i < len(argv):
        tok = argv[i]
        if tok == "-m" and i + 1 < len(argv):
            module = argv[i + 1]
            form = LAUNCHER_MODULES.get(module)
            if form == "torchrun":
                return _torchrun(argv, src, i + 2, in_script)
            if form == "deepspeed":
                return _flagged("deepspeed", argv, src, i + 2, in_script, DEEPSPEED_FLAGS, _DEEPSPEED_MAP)
            if form == "accelerate":
                launch = _flagged("accelerate", argv, src, i + 2, in_script, ACCELERATE_FLAGS, _ACCELERATE_MAP)
                _accelerate_nproc(launch)
                return launch
            launch = _at(Launch("python"), src, i, in_script)
            launch.child = argv[i:]
            launch.words = argv
            return launch
        if tok == "-c":
            return None  # an inline program
        if tok in PYTHON_VALUE_OPTIONS:
            i += 2
            continue
        if tok.startswith("-"):
            i += 1
            continue
        if tok.endswith("kgen_entrypoint.py"):
            return _kgen(argv, src, i + 1, in_script)
        launch = _at(Launch("python"), src, i, in_script)
        launch.child = argv[i:]
        launch.words = argv
        return launch
    return None


def _at(launch: Launch, src: list[tuple], index: int, in_script: tuple | None) -> Launch:
    launch.where = src[index] if index < len(src) else (src[-1] if src else ())
    return launch


def _kgen(argv: list[str], src: list[tuple], start: int, in_script: tuple | None) -> Launch:
    launch = _at(Launch("kgen"), src, max(start - 1, 0), in_script)
    launch.words = argv
    if "--" in argv[start:]:
        launch.child = argv[argv.index("--", start) + 1 :]
        if launch.child and (launch.child[0].endswith(".py") or launch.child[0] == "-m"):
            launch.child = ["python3", *launch.child]  # the entrypoint runs torchrun on a script or module
    return launch


def _torchrun(argv: list[str], src: list[tuple], start: int, in_script: tuple | None) -> Launch:
    launch = _flagged("torchrun", argv, src, start, in_script, TORCHRUN_FLAGS, {})
    if launch.child:
        if launch.has("no_python"):
            pass  # the child is a program
        elif launch.has("module") or launch.has("m"):
            launch.child = ["python3", "-m", *launch.child]
        else:
            launch.child = ["python3", *launch.child]
    return launch


def _flagged(
    form: str,
    argv: list[str],
    src: list[tuple],
    start: int,
    in_script: tuple | None,
    booleans: frozenset[str],
    names: dict[str, str],
) -> Launch:
    """A launcher's flags (``--a=b``, ``--a b``, booleans) up to its script; the rest is the child."""
    launch = _at(Launch(form), src, max(start - 1, 0), in_script)
    launch.words = argv
    i = start
    while i < len(argv):
        tok = argv[i]
        if tok.startswith("$") and not tok.startswith("$("):
            if i > start and _norm(argv[i - 1]) in ("m", "module"):
                break  # torchrun -m ${MODULE_AND_ARGS}: the module (a positional), not more flags
            launch.opaque = True  # torchrun $DISTRIBUTED_ARGS train.py
            i += 1
            continue
        if tok == "--":
            i += 1
            break
        if not tok.startswith("-") or tok == "-":
            break
        if "=" in tok:
            name, value = tok.split("=", 1)
            key = _norm(name)
            used = i
        elif _norm(tok) in booleans:
            key, value, used = _norm(tok), None, i
        else:
            key = _norm(tok)
            value = argv[i + 1] if i + 1 < len(argv) else None
            used = i
            i += 1
        if key in ("config_file", "deepspeed_config", "hostfile"):
            launch.config_file = True
        spelled = tok.split("=", 1)[0]
        key = names.get(key, key)
        launch.flags[key] = value
        launch.spelled[key] = spelled
        if used < len(src):
            launch.flag_where[key] = src[used]
        i += 1
    launch.child = argv[i:]
    if form == "accelerate" and launch.config_file:
        launch.opaque = True
    return launch


def _accelerate_nproc(launch: Launch) -> None:
    """accelerate's --num_processes counts every process of every machine."""
    total = launch.flags.get("world_processes")
    machines = launch.flags.get("nnodes") or "1"
    if total and total.isdigit() and machines.isdigit() and int(machines) > 0 and int(total) % int(machines) == 0:
        launch.flags["nproc_per_node"] = str(int(total) // int(machines))


# --- what a script does with a command's exit status ----------------------------------------------

_BENIGN = {"echo", "printf", "true", ":", "logger", "touch", "date", "cat", "tee", "ls", "sleep", "wait"}
_HANDLED = "handled"


def exit_fate(script: shell.Script, target: shell.Simple, errexit: bool, pipefail: bool) -> str | None:
    """How ``script`` loses the exit status of ``target`` (a description such as "`|| echo failed`
    replaces its exit status"), or None when a failure of ``target`` fails the script (or the script
    handles it: ``if``, ``$?``, ``PIPESTATUS``, a loop, a function)."""
    state = {"errexit": errexit, "pipefail": pipefail or "PIPESTATUS" in script.source}
    got = _seq_fate(script.body, target, state)
    return got if isinstance(got, str) and got != _HANDLED else None


def _seq_fate(seq: shell.Sequence, target: shell.Simple, state: dict) -> Any:
    for idx, ao in enumerate(seq.items):
        got = _andor_fate(ao, target, state)
        if got is None:
            _apply_set(ao, state)
            continue
        if isinstance(got, str):
            return got
        if seq.background[idx]:
            return _HANDLED  # run in the background: `wait` decides, not looked into
        later = seq.items[idx + 1 :]
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


def _andor_fate(ao: shell.AndOr, target: shell.Simple, state: dict) -> Any:
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


def _pipe_fate(pipe: shell.Pipeline, target: shell.Simple, state: dict) -> Any:
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
            shown = " ".join(last.argv) if isinstance(last, shell.Simple) else "the last command"
            return f"the pipeline's exit status is `{shown}`'s (no set -o pipefail)"
        return got
    return None


def _node_fate(node: shell.Node, target: shell.Simple, state: dict) -> Any:
    if isinstance(node, shell.Simple):
        if node is target:
            return ("status", True)
        return _HANDLED if any(target is c for c in shell.walk_node(node)) else None
    if not any(target is c for c in shell.walk_node(node)):
        return None
    if node.kind in ("subshell", "group"):
        got = _seq_fate(node.bodies[0], target, dict(state))
        return got
    if node.kind in ("if", "case"):
        for k, body in enumerate(node.bodies):
            if any(target is c for c in shell.walk_seq(body)):
                if node.kind == "if" and k % 2 == 0 and k != len(node.bodies) - 1:
                    return _HANDLED  # in a condition: the script checks it
                return _seq_fate(body, target, dict(state))
    return _HANDLED  # loops, functions, tests: not followed


def _apply_set(ao: shell.AndOr, state: dict) -> None:
    if len(ao.items) != 1 or len(ao.items[0][1].commands) != 1:
        return
    cmd = ao.items[0][1].commands[0]
    if not isinstance(cmd, shell.Simple) or not cmd.words or cmd.argv[0] != "set":
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


def _fails(pipe: shell.Pipeline) -> bool:
    """Whether a fallback after ``||`` keeps the failure: ``exit 1``, ``exit $?``, ``false``,
    ``return 1``, a group ending in one of these, or anything not known to succeed."""
    last = pipe.commands[-1]
    if isinstance(last, shell.Compound):
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


def _first_simple(node: Any) -> shell.Simple | None:
    if isinstance(node, shell.AndOr):
        node = node.items[0][1]
    if isinstance(node, shell.Pipeline):
        node = node.commands[0]
    if isinstance(node, shell.Simple):
        return node
    return next(iter(shell.walk_node(node)), None)


def _source_of(items: list[shell.AndOr]) -> str:
    out: list[str] = []
    for ao in items:
        for _, pipe in ao.items:
            for node in pipe.commands:
                for cmd in shell.walk_node(node):
                    out.extend(w.raw for w in cmd.words + cmd.assigns)
                if isinstance(node, shell.Compound):
                    out.extend(w.raw for w in node.words)
    return " ".join(out)


# --- values ---------------------------------------------------------------------------------------


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
