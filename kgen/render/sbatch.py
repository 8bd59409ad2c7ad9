"""The sbatch script of a Slurm run: typed fields in, the script's text out (templates/slurm.sbatch.j2). Pure.

One task per node (`--ntasks-per-node=1` on sbatch and srun, `--ntasks="$SLURM_NNODES"` so the step cannot
inherit more), GPUs per node, CPUs, memory, time, partition, account, QoS, `--requeue`, `--open-mode=append`
(a requeued run adds to the log instead of truncating it), per-run output files, and a body that `srun`s kgen's
one-file entrypoint once per node and hands srun's exit status to `--slurm-end` (succeeded, failed, stopped or
requeued). The run's folder is the script's first argument (`sbatch SCRIPT RUN`: kgen submit makes the folder
at submit time and passes it; Slurm keeps the arguments across requeues), so the same fields give the same
text on any machine, and the run's secret is never in it: only the path of its 0600 file in that folder.

Every value lands in the script through one of two gates: `#SBATCH` values must be plain words of Slurm's own
alphabet (sbatch reads those lines without a shell), and every shell word is quoted by ``shlex.quote``. The same
fields give the same bytes on any machine.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING

from kgen.errors import UsageError
from kgen.resources import templates_dir

if TYPE_CHECKING:
    import jinja2

TEMPLATE = "slurm.sbatch.j2"
WORD = re.compile(r"[A-Za-z0-9@+=:,./_-]+")  # what shlex.quote leaves bare, less %: safe in #SBATCH and shell
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
TIME = re.compile(r"(?:\d+-)?\d+(?::\d\d){0,2}|\d+-\d+|UNLIMITED|INFINITE")  # Slurm's --time forms
MEM = re.compile(r"\d+[KMGT]?")
OUTPUT = re.compile(r"[A-Za-z0-9@+=:,./_%-]+")  # --output: a path with Slurm's %j, %x, %u ... patterns
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
STEP_WAIT_DEFAULT = 30  # srun --wait: s after the first node ended before the step's others are killed


@dataclass(frozen=True)
class SbatchSpec:
    """What the script says. ``command`` is the training command (a script, ``-m module``, a program, or
    ``--smoke-test``, as kgen's entrypoint takes it); ``env`` the exports, in order; ``output`` Slurm's output
    file (relative to the job's working directory, ``chdir``, else the submit directory)."""

    name: str
    nodes: int
    command: Sequence[str]
    gpus_per_node: int = 0
    cpus_per_task: int = 0
    mem: str = ""  # per node, Slurm's form: 16G, 64000M, 0 (all of it)
    time: str = ""  # Slurm's form: minutes, HH:MM:SS, D-HH:MM:SS
    partition: str = ""
    account: str = ""
    qos: str = ""
    requeue: bool = True
    output: str = "%x-%j.out"  # <job name>-<job id>.out: one file per job; requeues append
    chdir: str = ""  # the job's working directory (#SBATCH --chdir); "" = where it was submitted
    python: str = "python3"
    step_wait: int = STEP_WAIT_DEFAULT
    env: Sequence[tuple[str, str]] = field(default_factory=tuple)
    extra_sbatch: Sequence[str] = field(default_factory=tuple)  # more `--option=value` lines, checked as words


def _word(value: str, option: str, what: str = "a plain word (letters, digits, @ + = : , . / _ -)") -> str:
    if not WORD.fullmatch(value):
        raise UsageError(f"must be {what}, got {value!r}", option=option)
    return value


def check(spec: SbatchSpec) -> SbatchSpec:
    """The spec, or a UsageError naming the first bad field."""
    if not NAME.fullmatch(spec.name):
        raise UsageError(
            f"must start with a letter or digit and hold only letters, digits, . _ - (at most 128), got {spec.name!r}",
            option="name",
        )
    for option, value, lo in (
        ("nodes", spec.nodes, 1),
        ("gpus_per_node", spec.gpus_per_node, 0),
        ("cpus_per_task", spec.cpus_per_task, 0),
        ("step_wait", spec.step_wait, 1),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < lo:
            raise UsageError(f"must be an integer >= {lo}, got {value!r}", option=option)
    if spec.mem and not MEM.fullmatch(spec.mem):
        raise UsageError(f"must be Slurm's memory form (16G, 64000M, 0), got {spec.mem!r}", option="mem")
    if spec.time and not TIME.fullmatch(spec.time):
        raise UsageError(f"must be Slurm's time form (minutes, HH:MM:SS, D-HH:MM:SS), got {spec.time!r}", option="time")
    for option in ("partition", "account", "qos", "python"):
        value = getattr(spec, option)
        if value:
            _word(value, option)
    if not OUTPUT.fullmatch(spec.output):
        raise UsageError(f"must be a path of plain characters and Slurm's %j/%x/%u patterns, got {spec.output!r}",
                         option="output")  # fmt: skip
    if spec.chdir:
        check_run_dir(spec.chdir, "chdir")
    if not spec.command or not all(isinstance(a, str) and a and "\0" not in a for a in spec.command):
        raise UsageError("must be a non-empty list of non-empty arguments", option="command")
    for key, _ in spec.env:
        if not ENV_NAME.fullmatch(key):
            raise UsageError(f"is not an environment variable name: {key!r}", option="env")
    for line in spec.extra_sbatch:
        if not line.startswith("--"):
            raise UsageError(f"must be a long option (--name=value), got {line!r}", option="extra_sbatch")
        _word(line, "extra_sbatch")
    return spec


def _finalize(value: object) -> str:
    """Every ``{{ }}``: integers as they are, strings as one shell word (bare when already a plain word)."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError(f"a {type(value).__name__} cannot be placed in the sbatch script")
    return str(value) if isinstance(value, int) else shlex.quote(value)


class _Raw(str):
    """Already shell-safe text (the words filter's output): passed through ``_finalize`` as is."""


def _sbatch_value(value: object) -> str:
    """A value on an `#SBATCH` line (sbatch reads it without a shell): checked by ``check``, placed as is."""
    if isinstance(value, int) and not isinstance(value, bool):
        return _Raw(str(value))
    if not isinstance(value, str) or not OUTPUT.fullmatch(value):
        raise TypeError(f"{value!r} cannot be placed on an #SBATCH line")
    return _Raw(value)


@cache
def _environment() -> jinja2.Environment:
    import jinja2  # here, not at the top: the Slurm engine's checks (check_run_dir) need no template

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        finalize=lambda v: v if isinstance(v, _Raw) else _finalize(v),
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["sbatch"] = _sbatch_value
    env.filters["words"] = lambda args: _Raw(" ".join(shlex.quote(a) for a in args))
    env.filters["name"] = lambda key: _Raw(key) if ENV_NAME.fullmatch(key) else _finalize(key)
    return env


def check_run_dir(path: str, option: str = "--run-dir") -> str:
    """An absolute path of plain characters (the run's folder, the working directory): what sbatch's options
    and the script's arguments take without quoting."""
    _word(path, option, "an absolute path of plain characters (no spaces, quotes, commas or %)")
    if not path.startswith("/") or "," in path:
        raise UsageError(f"must be an absolute path without commas, got {path!r}", option=option)
    return path


def sbatch_text(spec: SbatchSpec) -> str:
    """The sbatch script for ``spec`` (checked first)."""
    check(spec)
    return _environment().get_template(TEMPLATE).render(s=spec)
