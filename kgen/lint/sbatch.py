"""kgen lint of sbatch scripts: how a Slurm batch script launches training, read the way sbatch, bash and srun do.

- **Which files**: a script whose first line is a shebang and that holds an ``#SBATCH`` line, or any file named
  ``*.sbatch`` / ``*.slurm`` (``is_sbatch``); in a folder, files named so or ``*.sh``, ``*.bash``, ``*.job``
  or without a suffix are looked at (``sbatch_candidate``: their first 64 KiB).
- **Directives**: ``#SBATCH`` lines up to the first command, as sbatch reads them (``-N 4``, ``--nodes=4``,
  ``--nodes 4``, trailing ``# comments``); a later ``#SBATCH`` line is ignored by sbatch (kept as ``late``).
- **The script**: parsed like bash (``kgen.launch.shell``); every command in source order, with the literal values
  the script assigns (``X=1``, ``export X=1``, ``declare -a ARGS=(...)``) so ``srun $TORCHRUN "${ARGS[@]}"``
  reads as written.
- **Steps**: each ``srun`` (or ``mpirun``/``mpiexec``) with its options and the command its tasks run, read by
  kgen's launcher model (``kgen.launch.command``: torchrun, ``python -m torch.distributed.run``, deepspeed,
  ``accelerate launch``, kgen's entrypoint, through ``bash -c '...'`` and wrappers); a launcher the batch
  script runs itself is a step of kind ``batch`` (it runs on the first node only).
  A step in a shell function is read at each call of the function (with the values assigned before the call).
- **Who expands what**: the batch script's shell expands the words of the srun line once, on the first node,
  before any task starts (``$SLURM_NODEID`` is 0 there; ``$(hostname)`` is the first node's name); what a task's
  own shell runs (``srun bash -c '...'``) is expanded on every node. Values the batch shell computes (command
  substitutions, arithmetic, variables it set from them) reach the tasks as ``BATCH_VALUE``; the node rank it
  expands is ``0``.

The rules (``kgen.lint.rules_sbatch``, ids KG170-KG180) read only this model. ``lint_script`` is the whole of it
for one text (what ``kgen render --kind slurm`` runs on its own output); ``lint_file`` is kgen lint's hook.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kgen.findings import Finding
from kgen.launch import command as torchcmd
from kgen.launch import shell, shelltree
from kgen.launch.argv import Launch
from kgen.launch.launchers import MPI_LAUNCHERS, mpi_program

SUFFIXES = (".sbatch", ".slurm")
CANDIDATE_SUFFIXES = (".sh", ".bash", ".job", ".batch")
PEEK = 64 << 10
BATCH_VALUE = "KGEN_BATCH_VALUE"  # what the batch shell computed (a command substitution, arithmetic ...)
SKIP_MARK = re.compile(r"kgen\.dev/lint-skip:\s*([A-Za-z0-9, ]+)")
DIRECTIVE = re.compile(r"^#SBATCH(?:\s|$)")
_SHELLS = {"bash", "sh", "zsh", "dash", "ash", "ksh", "mksh"}
# A node rank the batch shell expands: the first node's, the same on every node.
NODE_RANK_VARS = ("SLURM_NODEID", "SLURM_PROCID", "SLURM_LOCALID")
# Evaluated by the batch shell: the first node's values (batch host), not each node's.
BATCH_HOST_VARS = ("HOSTNAME", "SLURMD_NODENAME", "HOST", "SLURM_TOPOLOGY_ADDR")
ALLOC_NODE_VARS = ("SLURM_NNODES", "SLURM_JOB_NUM_NODES", "SLURM_STEP_NUM_NODES")

# sbatch's and srun's short options with a value, and the long names they stand for
SHORT = {
    "N": "nodes", "n": "ntasks", "c": "cpus-per-task", "t": "time", "p": "partition", "A": "account",
    "q": "qos", "o": "output", "e": "error", "J": "job-name", "D": "chdir", "G": "gpus", "w": "nodelist",
    "x": "exclude", "C": "constraint", "a": "array", "d": "dependency", "b": "begin", "M": "clusters",
    "L": "licenses", "i": "input", "m": "distribution", "F": "nodefile", "S": "core-spec", "W": "wait",
}  # fmt: skip
SHORT_FLAGS = {"k": "no-kill", "s": "oversubscribe", "H": "hold", "Q": "quiet", "v": "verbose", "l": "label",
               "u": "unbuffered", "X": "disable-status", "Z": "no-allocate", "E": "preserve-env", "h": "help",
               "V": "version", "I": "immediate", "K": "kill-on-bad-exit"}  # fmt: skip
# long options that never take the next word as their value (flags, and options whose value is optional)
LONG_FLAGS = {
    "requeue",
    "no-requeue",
    "exclusive",
    "overcommit",
    "contiguous",
    "hold",
    "spread-job",
    "use-min-nodes",
    "no-kill",
    "parsable",
    "test-only",
    "ignore-pbs",
    "oversubscribe",
    "quiet",
    "verbose",
    "reboot",
    "label",
    "unbuffered",
    "overlap",
    "pty",
    "multi-prog",
    "whole",
    "disable-status",
    "exact",
    "no-allocate",
    "preserve-env",
    "kill-on-bad-exit",
    "immediate",
    "get-user-env",
    "nice",
    "help",
    "usage",
    "version",
    "x11",
    "send-libs",
    "no-shell",
}  # fmt: skip  (sbatch's --wait is a flag too; srun's takes seconds)


# ---------------------------------------------------------------------------------------------- the model
@dataclass
class Directive:
    line: int
    name: str  # the long option, without "--" ("nodes" for -N)
    value: str | None
    text: str  # the line as written


@dataclass
class Step:
    """One command of the batch script that starts training processes, or may: an ``srun`` (``mpi``: mpirun)
    and the command its tasks run, or a launcher the batch script runs itself (``batch``)."""

    kind: str  # srun | mpi | batch
    line: int
    options: dict[str, str | None] = field(default_factory=dict)  # srun's, by long name
    argv: list[str] = field(default_factory=list)  # what each task runs (batch: the command)
    read: Any = None  # kgen.launch.command.Scripted of argv
    node_rank_vars: list[str] = field(default_factory=list)  # $SLURM_NODEID ... the batch shell expanded here
    in_cmdsub: bool = False  # inside $(...): its output is read, it is not the training
    in_loop: bool = False  # inside a for/while loop (a per-host `srun -N1 -w "$host" ... &` loop)
    node: Any = None  # the kgen.launch.shelltree.Simple command it was read from
    # in a shell function: (the function's body, the command in it) from the step out to the call at the
    # script's top level, ending (script body, that call); empty for a step written at the top level
    calls: list[tuple[Any, Any]] = field(default_factory=list)
    repeated: bool = False  # the same command runs as several steps (a function called more than once)

    @property
    def per_host(self) -> bool:
        """Run once per host, like a loop's `srun -N1 -w "$host" ... &`: its -N1 is one of several steps."""
        return self.in_loop or self.repeated

    @property
    def launches(self) -> list[Launch]:
        return list(self.read.launches) if self.read is not None else []

    def option(self, *names: str) -> tuple[bool, str | None]:
        """(given, value) of the first of ``names`` srun was given."""
        for name in names:
            if name in self.options:
                return True, self.options[name]
        return False, None


@dataclass
class SbatchScript:
    file: str
    text: str
    shebang: str = ""
    shell: bool = True  # the shebang runs a shell (else only the directives are read)
    directives: list[Directive] = field(default_factory=list)
    late: list[Directive] = field(default_factory=list)  # after the first command: sbatch ignores them
    first_command: int = 0  # line of the first command
    error: tuple[int, str] | None = None  # (line, why) when sbatch or bash refuses the script
    steps: list[Step] = field(default_factory=list)
    scalars: dict[str, str] = field(default_factory=dict)  # every literal the script assigns (the last)
    exports: set[str] = field(default_factory=set)  # the variables it exports
    skip: frozenset[str] = frozenset()  # ids in `# kgen.dev/lint-skip: KG177,...` comments
    parsed: Any = None  # the kgen.launch.shelltree.Script bash reads (None when it does not parse)

    lines: list[str] = field(default_factory=list)  # the text's lines (read once)

    def directive(self, name: str) -> Directive | None:
        """The directive sbatch uses for ``name`` (the last of several)."""
        found = [d for d in self.directives if d.name == name]
        return found[-1] if found else None

    @property
    def job_name(self) -> str:
        d = self.directive("job-name")
        return d.value if d and d.value else os.path.basename(self.file)

    @property
    def nodes(self) -> tuple[int, int] | None:
        """(min, max) of ``--nodes``, None when no directive says it."""
        d = self.directive("nodes")
        return node_range(d.value) if d else None

    def locate(self, start: int, *needles: str) -> int:
        """The first line from ``start`` on holding one of ``needles`` (a flag of a command that spans
        several lines), else ``start``."""
        lines = self.lines
        for i in range(max(start - 1, 0), min(len(lines), start + 200)):
            if any(n and n in lines[i] for n in needles):
                return i + 1
        return start


def node_range(value: str | None) -> tuple[int, int] | None:
    """``4`` -> (4, 4); ``2-4`` -> (2, 4); anything else (a size list, a variable) -> None."""
    m = re.fullmatch(r"(\d+)(?:-(\d+))?", (value or "").strip())
    if not m:
        return None
    lo = int(m.group(1))
    return lo, int(m.group(2) or lo)


def literal_int(value: str | None) -> int | None:
    return int(value) if value is not None and value.strip().isdigit() else None


# ---------------------------------------------------------------------------------------------- which files
def is_sbatch(path: str, text: str) -> bool:
    """Whether kgen lint reads ``text`` (from ``path``) as an sbatch script rather than YAML: named ``*.sbatch``
    or ``*.slurm``, or a shebang first line and an ``#SBATCH`` line."""
    if path.endswith(SUFFIXES):
        return True
    if not text.startswith("#!"):
        return False
    return any(DIRECTIVE.match(line) for line in text[:PEEK].splitlines())


def sbatch_candidate(path: str) -> bool:
    """A file found in a folder that kgen lint reads as an sbatch script: named ``*.sbatch``/``*.slurm``, or
    named ``*.sh``/``*.bash``/``*.job``/``*.batch`` or without a suffix and starting like one (its first 64 KiB)."""
    name = os.path.basename(path)
    if name.endswith(SUFFIXES):
        return True
    if not (name.endswith(CANDIDATE_SUFFIXES) or "." not in name.lstrip(".")):
        return False
    try:
        with open(path, "rb") as fh:
            head = fh.read(PEEK)
    except OSError:
        return False
    if not head.startswith(b"#!"):
        return False
    return any(DIRECTIVE.match(line) for line in head.decode("utf-8", "replace").splitlines())


# ---------------------------------------------------------------------------------------------- reading
_SHEBANG_LINES = 20  # how far below the first line a misplaced shebang is looked for


def read(text: str, file: str = "<stdin>") -> SbatchScript:
    """The model of one sbatch script (never raises: what sbatch or bash would refuse is ``error``)."""
    lines = text.splitlines()
    s = SbatchScript(file, text, lines=lines)
    marks = [m.group(1) for line in lines if line.lstrip().startswith("#") for m in [SKIP_MARK.search(line)] if m]
    s.skip = frozenset(x.strip().upper() for mark in marks for x in mark.split(",") if x.strip())
    s.shebang = lines[0] if text.startswith("#!") else ""
    if not s.shebang:
        s.error = (1, "the first line is not a shebang (#!/bin/bash): sbatch refuses the script "
                      "(\"This does not look like a batch script\")")  # fmt: skip
        # a shebang below a licence header: read the script as that shell, so the defects that remain once
        # the shebang moves up are reported too (its directives and steps; the refusal stays KG170's)
        late = next((line for line in lines[:_SHEBANG_LINES] if line.startswith("#!")), None)
        if late is None:
            return s
        s.shebang = late
    words = s.shebang[2:].split()
    if words and os.path.basename(words[0]) == "env":
        words = [w for w in words[1:] if not w.startswith("-")]
    s.shell = bool(words) and os.path.basename(words[0]) in _SHELLS
    _directives(s, lines)
    if not s.shell:
        return s
    try:
        script = shell.parse(text)
    except shelltree.ShellSyntaxError as err:
        m = re.search(r"line (\d+)", str(err))
        s.error = s.error or (int(m.group(1)) if m else 1, f"bash refuses the script: {err}")
        return s
    except RecursionError:
        s.error = s.error or (1, "the script nests too deeply to read")
        return s
    s.parsed = script
    _Walker(s, script).run()
    return s


def _directives(s: SbatchScript, lines: list[str]) -> None:
    header = True
    for no, line in enumerate(lines[1:], start=2):
        stripped = line.strip()
        if header and stripped and not stripped.startswith("#"):
            header = False
            s.first_command = no
        if not DIRECTIVE.match(line):
            continue
        try:
            tokens = shlex.split(line[len("#SBATCH") :], comments=True)
        except ValueError:
            tokens = line[len("#SBATCH") :].split("#", 1)[0].split()
        for name, value in parse_options(tokens, sbatch=True)[0].items():
            (s.directives if header else s.late).append(Directive(no, name, value, line.rstrip()))


def parse_options(argv: list[str], sbatch: bool = False) -> tuple[dict[str, str | None], int]:
    """sbatch's or srun's options at the start of ``argv``, by long name, and where the command starts."""
    out: dict[str, str | None] = {}
    i = 0
    while i < len(argv):
        tok = argv[i]
        if tok == "--":
            return out, i + 1
        if tok.startswith("--") and len(tok) > 2:
            name, eq, value = tok[2:].partition("=")
            if eq:
                out[name] = value
            elif name in LONG_FLAGS or (sbatch and name == "wait") or i + 1 >= len(argv):
                out[name] = None
            else:
                out[name] = argv[i + 1]
                i += 1
            i += 1
            continue
        if tok.startswith("-") and len(tok) > 1 and not tok.startswith(f"-{BATCH_VALUE}"):
            letter = tok[1]
            if letter in SHORT and not (sbatch and letter == "W"):
                if len(tok) > 2:
                    out[SHORT[letter]] = tok[2:]
                elif i + 1 < len(argv):
                    out[SHORT[letter]] = argv[i + 1]
                    i += 1
                i += 1
                continue
            for k, ch in enumerate(tok[1:]):
                if ch == "K" or ch == "I":  # an optional value, attached: -K1
                    out[SHORT_FLAGS[ch]] = tok[k + 2 :] or None
                    break
                out[SHORT_FLAGS.get(ch, ch)] = None
            i += 1
            continue
        if tok.startswith("$") or tok == BATCH_VALUE:  # srun ${AUTO_RESUME} ...: options we cannot read
            i += 1
            continue
        return out, i
    return out, i


_LAUNCH_WORDS = ("exec", "time", "nohup", "command", "builtin")


class _Walker:
    """Every command of the batch script in source order, with the literal values assigned before it."""

    def __init__(self, s: SbatchScript, script: shelltree.Script) -> None:
        self.s = s
        self.script = script
        self.context = shelltree.enclosing(script)
        self.arrays: dict[str, list[str]] = {}
        self.rank_from: dict[str, list[str]] = {}  # a variable the batch shell set from $SLURM_NODEID ...: which
        self.functions = {c.name: c for c in shelltree.compounds(script) if c.kind == "function" and c.name}
        self.calls: list[tuple[Any, Any]] = []  # the function calls being followed: (call, function), outermost first
        self.positional: list[list[str]] = []  # the arguments of each followed call ($1 ... in its body)

    def run(self) -> None:
        self._walk(self.script.simple_commands(), ())
        count: dict[int, int] = {}
        for step in self.s.steps:
            count[id(step.node)] = count.get(id(step.node), 0) + 1
        for step in self.s.steps:
            step.repeated = count[id(step.node)] > 1

    def _walk(self, cmds: Iterable[shelltree.Simple], outer: tuple[str, ...]) -> None:
        """Follow ``cmds`` in order; ``outer`` is what encloses the call of the function they are the body of."""
        for cmd in cmds:
            around = self.context.get(id(cmd), ())
            if "function" in around:
                if not self.calls:
                    continue  # a function's body runs where it is called: followed there
                around = around[around.index("function") + 1 :]
                if "function" in around:
                    continue  # a function defined inside the one followed: runs when called
            around = outer + around
            for a in cmd.assigns:
                self.assign(a)
            words: list[str] = []
            params: list[str] = []
            for w in cmd.words:
                got, used = self.expand(w)
                words.extend(got)
                params.extend(used)
            if not words:
                continue
            if words[0] in ("export", "declare", "typeset", "readonly", "local"):
                for w in cmd.words[1:]:
                    if w.raw.startswith(("-", "+")):
                        continue
                    self.assign(w)
                    if words[0] == "export" or any("x" in x for x in words[1:] if x.startswith("-")):
                        self.s.exports.add(w.raw.split("=", 1)[0])
                continue
            if words[0] == "shift" and self.positional:
                n = int(words[1]) if len(words) > 1 and words[1].isdigit() else 1
                self.positional[-1] = self.positional[-1][n:]
                continue
            func = self.functions.get(words[0])
            if func is not None and func.bodies and len(self.calls) < 8 and all(f is not func for _, f in self.calls):
                self.calls.append((cmd, func))
                self.positional.append(words[1:])
                self._walk(shelltree.walk_seq(func.bodies[0]), around)
                self.positional.pop()
                self.calls.pop()
                continue
            step_count = len(self.s.steps)
            self.command(words, params, cmd.line, "cmdsub" in around)
            if len(self.s.steps) > step_count:
                step = self.s.steps[-1]
                step.node = cmd
                step.in_loop = any(k in ("for", "while", "until") for k in around)
                if self.calls:
                    called = [c for c, _ in self.calls[1:]] + [cmd]  # what each followed function runs next
                    inner = [(f.bodies[0], c) for (_, f), c in zip(self.calls, called, strict=True)]
                    step.calls = inner[::-1] + [(self.script.body, self.calls[0][0])]

    def assign(self, w: shelltree.Word) -> None:
        name, eq, _ = w.raw.partition("=")
        name = name.rstrip("+")
        if not eq or not re.fullmatch(r"[A-Za-z_]\w*", name):
            return
        value_raw = w.raw.split("=", 1)[1]
        if value_raw.startswith("("):  # an array: its words, as the shell splits them
            try:
                inner = shell.parse(value_raw[1:-1] if value_raw.endswith(")") else value_raw[1:])
            except (shelltree.ShellSyntaxError, RecursionError):
                return
            items: list[str] = []
            used: list[str] = []
            for c in inner.simple_commands():
                for x in c.assigns + c.words:
                    got, more = self.expand(x)
                    items.extend(got)
                    used.extend(more)
            self.arrays[name] = items
            self.rank_from[name] = used
            return
        used = []
        value = ""
        for part in w.parts:
            if part.kind == "lit":
                value += part.text
                continue
            got, more = self.expand(shelltree.Word([part], part.text), split=False)
            value += "".join(got)
            used.extend(more)
        self.s.scalars[name] = value.split("=", 1)[1] if "=" in value else ""
        self.rank_from[name] = used

    def expand(self, word: shelltree.Word, split: bool = True) -> tuple[list[str], list[str]]:
        """The fields the batch shell makes of ``word``: literals it assigned substituted, the node rank it
        expands as 0, what it computes as BATCH_VALUE, Slurm's allocation variables and unknown variables kept
        as written (the same on every node). Also the node-rank variables it expanded."""
        fields = [""]
        used: list[str] = []
        for p in word.parts:
            text = p.text
            if p.kind == "param" and self.positional and not p.op and (p.name.isdigit() or p.name in ("@", "*")):
                args = self.positional[-1]  # a followed function's arguments, as its call passed them
                if p.name.isdigit():
                    text = args[int(p.name) - 1] if 0 < int(p.name) <= len(args) else ""
                elif p.name == "@" and p.quoted:
                    for k, item in enumerate(args):
                        if k:
                            fields.append("")
                        fields[-1] += item
                    continue
                else:
                    text = " ".join(args)
            elif p.kind == "param":
                name = p.name
                used.extend(self.rank_from.get(name, []))
                if p.op == "?complex" and name in self.arrays and re.fullmatch(r"\$\{\w+\[[@*]\]\}", text):
                    items = self.arrays[name]
                    if p.quoted and "[@]" in text:
                        for k, item in enumerate(items):
                            if k:
                                fields.append("")
                            fields[-1] += item
                        continue
                    text = " ".join(items)
                elif p.op.startswith("?") or p.op in ("#", "!"):  # ${a[0]}, ${#x}, ${!x}: the batch shell's value
                    text = BATCH_VALUE
                elif name in NODE_RANK_VARS and not p.op:
                    used.append(name)
                    text = "0"
                elif name in self.s.scalars and not p.op.startswith("?"):
                    text = self.s.scalars[name]
                elif name in BATCH_HOST_VARS:
                    text = BATCH_VALUE
                elif p.op in (":-", "-") and p.arg is not None and name not in self.s.scalars:
                    got, more = self.expand(p.arg, split=False)
                    used.extend(more)
                    text = "".join(got)
            elif p.kind in ("cmdsub", "arith", "procsub"):
                text = BATCH_VALUE
            if split and not p.quoted and p.kind != "lit" and any(c in text for c in " \t\n"):
                pieces = text.split()
                if text[:1] in " \t\n" and fields[-1]:
                    fields.append("")
                for k, piece in enumerate(pieces):
                    if k:
                        fields.append("")
                    fields[-1] += piece
                if text[-1:] in " \t\n":
                    fields.append("")
                continue
            fields[-1] += text
        out = [f for f in fields if f]
        if not out and any(p.quoted for p in word.parts):
            out = [""]
        return out, used

    def command(self, words: list[str], params: list[str], line: int, in_cmdsub: bool) -> None:
        i = 0
        while i < len(words) - 1 and words[i] in _LAUNCH_WORDS:
            i += 1
        head = os.path.basename(words[i])
        if head == "srun":
            options, start = parse_options(words[i + 1 :])
            argv = words[i + 1 + start :]
            step = Step("srun", line, options, argv, torchcmd.read_container({"command": argv}) if argv else None,
                        params, in_cmdsub)  # fmt: skip
            self.s.steps.append(step)
            return
        if head in MPI_LAUNCHERS:
            rest = words[i + 1 :]
            argv = rest[mpi_program(rest) :]
            self.s.steps.append(Step("mpi", line, {}, argv, torchcmd.read_container({"command": argv}), params,
                                     in_cmdsub))  # fmt: skip
            return
        read = torchcmd.read_container({"command": words[i:]})
        if any(launch.training for launch in read.launches):
            self.s.steps.append(Step("batch", line, {}, words[i:], read, params, in_cmdsub))


# ---------------------------------------------------------------------------------------------- findings
def findings(s: SbatchScript, skip: Iterable[str] = ()) -> list[Finding]:
    """Every sbatch rule's findings on ``s`` (but the ``skip``ped ids and those its comments skip), by line."""
    from kgen.lint.registry import load_rules

    skipped = set(skip) | set(s.skip)
    out = []
    for rule in sorted(load_rules().values(), key=lambda r: r.id):
        if rule.scope != "sbatch" or rule.fn is None:
            continue
        if rule.id in skipped and rule.id != "KG170":
            continue
        seen = set()  # a step in a shell function called twice is read twice: one finding each
        for line, message in rule.fn(s):
            if (line, message) not in seen:
                seen.add((line, message))
                out.append(Finding(rule.id, rule.severity, message, s.file, line, 1, "", "sbatch", s.job_name))
    out.sort(key=lambda f: (f.line, f.rule_id))
    return out


def lint_script(text: str, file: str = "<render>", skip: Iterable[str] = ()) -> list[Finding]:
    """The sbatch rules' findings on one script's text."""
    return findings(read(text, file), skip)


def lint_file(file: str, text: str, skip: Iterable[str]) -> tuple[str, list[Finding]]:
    """kgen lint's hook (kgen.lint.api): one sbatch script's job name (its document's name) and findings."""
    s = read(text, file)
    return s.job_name, findings(s, skip)
