"""sbatch rules about what a job reports: a batch script whose training step's exit status is not the job's
(a command after it without set -e, `| tee` without pipefail, `|| echo`), so Slurm records a failed training as
COMPLETED (exit 0). Read by ``kgen.lint.sbatch`` (its steps and the parsed script) and the launch model's
``exit_fate``, the same reading KG126 gives a container's script.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator

from kgen.findings import Severity
from kgen.launch import shelltree
from kgen.launch.exitfate import exit_fate
from kgen.lint.registry import rule
from kgen.lint.sbatch import SbatchScript, Step

KINDS = ("sbatch",)
Found = Iterator[tuple[int, str]]


def _errexit_shebang(s: SbatchScript) -> bool:
    """``#!/bin/bash -e`` (or -xe ...): the batch shell starts with errexit."""
    return any(w.startswith("-") and not w.startswith("--") and "e" in w[1:] for w in s.shebang[2:].split()[1:])


def _training_step(s: SbatchScript) -> Step | None:
    """The step whose status should be the job's: the last one that runs a launcher or a Python program (else
    the last srun/mpirun), outside command substitutions and loops."""
    candidates = [st for st in s.steps if not st.in_cmdsub and not st.in_loop and st.node is not None]
    runs = [st for st in candidates if any(x.training or x.form == "python" for x in st.launches)]
    chosen = runs or [st for st in candidates if st.kind in ("srun", "mpi")]
    return chosen[-1] if chosen else None


def _what(step: Step) -> str:
    argv = step.node.argv if step.node is not None else []
    head = os.path.basename(argv[0]) if argv else step.kind
    what = {"srun": "the srun step", "mpirun": "the mpirun step", "mpiexec": "the mpiexec step"}.get(
        head, f"the {head} command"
    )
    if step.calls:
        call = step.calls[-1][1]
        return f"the exit status of {what} in function {call.argv[0]} (line {step.line}), called at line {call.line},"
    return f"{what}'s exit status"


_SET_E = re.compile(r"^\s*set\s+(-[A-Za-z]*e[A-Za-z]*\b|-o\s+errexit\b)", re.M)


def _fate(s: SbatchScript, step: Step) -> tuple[int, str] | None:
    """(the line, how) where the script loses the step's exit status: at the step, or for a step in a shell
    function, in the function's body after it or after the call (a function's status is its last command's)."""
    errexit = _errexit_shebang(s)
    if not step.calls:
        fate = exit_fate(s.parsed, step.node, errexit, False)
        return (step.line, fate) if fate is not None else None
    call = step.calls[-1][1]
    # set -e before the call holds in the function's body too
    inner_errexit = errexit or bool(_SET_E.search("\n".join(s.lines[: call.line - 1])))
    for k, (body, target) in enumerate(step.calls):
        top = k == len(step.calls) - 1
        fate = exit_fate(shelltree.Script(body, s.parsed.source), target, errexit if top else inner_errexit, False)
        if fate is not None:
            return target.line, fate
    return None


@rule(
    "KG191",
    Severity.WARNING,
    "An sbatch script loses its training step's exit status: a command runs after it without set -e (`echo "
    "done`, `rm ...`, an `if` that succeeds), its output is piped (`| tee log`) without set -o pipefail, "
    "`|| echo failed` replaces it, or it runs in the background (`&`) and a plain `wait` (which returns 0) "
    "ends the script. The batch script's status is the job's, so a crashed training ends "
    "COMPLETED (exit 0): afterok dependencies run on a broken checkpoint and nobody is told.",
    "Put `set -eo pipefail` near the top of the script, or end the step with `|| exit 1` (keep its status in a "
    "variable and `exit $rc` when cleanup must run after it).",
    kinds=KINDS,
    scope="sbatch",
)
def step_status_lost(s: SbatchScript) -> Found:
    if s.parsed is None:
        return
    step = _training_step(s)
    if step is None:
        return
    found = _fate(s, step)
    if found is None:
        return
    line, fate = found
    yield (
        line,
        f"{_what(step)} is lost: {fate}; a failed training ends the job COMPLETED (exit 0). "
        "Use set -eo pipefail, or `|| exit 1` after the step",
    )
