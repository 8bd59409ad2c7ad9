"""sbatch rules about what a job reports: a batch script whose training step's exit status is not the job's
(a command after it without set -e, `| tee` without pipefail, `|| echo`), so Slurm records a failed training as
COMPLETED (exit 0). Read by ``kgen.lint.sbatch`` (its steps and the parsed script) and the launch model's
``exit_fate``, the same reading KG126 gives a container's script.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from kgen.findings import Severity
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
    return {"srun": "the srun step", "mpirun": "the mpirun step", "mpiexec": "the mpiexec step"}.get(
        head, f"the {head} command"
    )


@rule(
    "KG191",
    Severity.WARNING,
    "An sbatch script loses its training step's exit status: a command runs after it without set -e (`echo "
    "done`, `rm ...`, an `if` that succeeds), its output is piped (`| tee log`) without set -o pipefail, or "
    "`|| echo failed` replaces it. The batch script's status is the job's, so a crashed training ends "
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
    fate = exit_fate(s.parsed, step.node, _errexit_shebang(s), False)
    if fate is None:
        return
    yield (
        step.line,
        f"{_what(step)}'s exit status is lost: {fate}; a failed training ends the job COMPLETED (exit 0). "
        "Use set -eo pipefail, or `|| exit 1` after the step",
    )
