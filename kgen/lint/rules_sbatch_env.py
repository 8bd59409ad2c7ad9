"""sbatch rules about values the batch shell gets wrong: a rendezvous port from a bare ``$RANDOM`` (KG211), a
``[`` test without its ``]`` (KG209), an assignment after srun that no shell reads (KG185), and
the variables a batch script reads from Slurm (KG208): one that Slurm sets in the job only when
the matching option was given (``$SLURM_GPUS`` without ``--gpus``: a ``--gres=gpu:2`` job has none), and one
of sbatch's *input* variables (``$SBATCH_GPUS_PER_NODE``), which sbatch reads from the submitter's environment
and never sets in the job. Either expands to nothing: ``srun --gpus-per-node=`` is refused, a test on it takes
the "no GPU" branch. What Slurm sets and when: sbatch(1), OUTPUT ENVIRONMENT VARIABLES. Read by
``kgen.lint.sbatch``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from kgen.findings import Severity
from kgen.launch.shelltree import unclosed_tests
from kgen.lint.registry import rule
from kgen.lint.rules_sbatch import steps
from kgen.lint.sbatch import SbatchScript

KINDS = ("sbatch",)
Found = Iterator[tuple[int, str]]

# Output variables sbatch sets in the job only when the option is given ("Only set if the ... option is
# specified"), and the options (long names, as kgen.lint.sbatch reads #SBATCH lines) that set them.
ONLY_WITH = {
    "SLURM_GPUS": ("gpus",),
    "SLURM_GPUS_PER_NODE": ("gpus-per-node",),
    "SLURM_GPUS_PER_TASK": ("gpus-per-task",),
    "SLURM_CPUS_PER_TASK": ("cpus-per-task",),
    "SLURM_NTASKS_PER_NODE": ("ntasks-per-node",),
    "SLURM_MEM_PER_NODE": ("mem",),
    "SLURM_MEM_PER_GPU": ("mem-per-gpu",),
    "SLURM_MEM_PER_CPU": ("mem-per-cpu",),
}
_INPUT = re.compile(r"SBATCH_[A-Z_]+")
# Operators that give the expansion a value of its own when the variable is unset: ${X:-2}, ${X-2}, ${X:=2} ...
_DEFAULTED = (":-", "-", ":=", "=", ":?", "?", ":+", "+")


def _assigned(s: SbatchScript, name: str) -> bool:
    return name in s.scalars or name in s.exports or re.search(rf"(?<![\w$]){name}\+?=", s.text) is not None


def _reads(s: SbatchScript) -> Iterator[tuple[int, str]]:
    """(line, name) of the first plain expansion of every variable the batch shell reads."""
    seen: set[str] = set()
    for cmd in s.parsed.simple_commands():
        for w in cmd.assigns + cmd.words:
            for p in w.parts:
                if p.kind != "param" or p.name in seen or p.op in _DEFAULTED or p.op.startswith("?"):
                    continue
                seen.add(p.name)
                yield cmd.line, p.name


@rule(
    "KG208",
    Severity.WARNING,
    "A batch script reads a Slurm variable the job does not get: an output variable sbatch sets only with its "
    "option ($SLURM_GPUS only with --gpus, not --gres=gpu:N; $SLURM_GPUS_PER_NODE only with --gpus-per-node; "
    "$SLURM_CPUS_PER_TASK, $SLURM_NTASKS_PER_NODE, $SLURM_MEM_PER_NODE likewise), or one of sbatch's input "
    "variables ($SBATCH_GPUS_PER_NODE), which sbatch reads from the submitter's environment and never sets in "
    "the job: it expands to nothing (srun --gpus-per-node= is refused; a test on it takes the no-GPU branch).",
    "Add the #SBATCH option that sets it, read the variable Slurm does set ($SLURM_GPUS_ON_NODE, "
    "$SLURM_JOB_NUM_NODES, SLURM_* for SBATCH_*), or give it a default (${SLURM_GPUS:-8}).",
    kinds=KINDS,
    scope="sbatch",
)
def unset_slurm_variable(s: SbatchScript) -> Found:
    if s.parsed is None:
        return
    for line, name in _reads(s):
        if _assigned(s, name):
            continue
        options = ONLY_WITH.get(name)
        if options is not None:
            if any(s.directive(o) is not None for o in options):
                continue
            yield (
                line,
                f"${name} is set by sbatch only with --{options[0]}, which no #SBATCH line gives: it expands to "
                f"nothing here (unless every sbatch command line passes --{options[0]}); add #SBATCH "
                f"--{options[0]}, or read a variable Slurm sets",
            )
        elif _INPUT.fullmatch(name):
            output = "SLURM_" + name[len("SBATCH_") :]
            yield (
                line,
                f"${name} is one of sbatch's input variables: sbatch reads it from the submitter's environment "
                f"and does not set it in the job, so it expands to nothing; read ${output} (set with its "
                "#SBATCH option) or write the value",
            )


@rule(
    "KG209",
    Severity.WARNING,
    "A `[` test in a batch script without its closing `]` word (`[ $shape == B200 || [ $shape == B300]`): bash's "
    "`[` fails with \"missing ']'\", so the test is never true and its branch (the settings of that GPU "
    "shape, the guard) never runs, while the job goes on.",
    'Close every `[` with a separate `]` word (`[ "$a" == x ] || [ "$b" == y ]`), or use `[[ ... ]]`.',
    kinds=KINDS,
    scope="sbatch",
)
def unclosed_test(s: SbatchScript) -> Found:
    if s.parsed is None:
        return
    for cmd, text in unclosed_tests(s.parsed):
        yield cmd.line, f"`{text}` has no closing `]` word: bash's [ fails (missing ']'), so the test is never true"


_RANDOM_WORD = re.compile(r'^"?\$(?:RANDOM|\{RANDOM\})"?$')


@rule(
    "KG211",
    Severity.WARNING,
    "A rendezvous port taken from $RANDOM as it is (MASTER_PORT=$RANDOM): $RANDOM is 0-32767, so about one run "
    "in 32 gets a privileged port below 1024 that a non-root master cannot bind, and any run may pick a port "
    "another job on the node holds; the rendezvous then fails at start.",
    "Derive the port from the job id in an unprivileged range: MASTER_PORT=$((20000 + SLURM_JOB_ID % 10000)).",
    kinds=KINDS,
    scope="sbatch",
)
def random_port(s: SbatchScript) -> Found:
    if s.parsed is None:
        return
    for cmd in s.parsed.simple_commands():
        words = [w.raw for w in cmd.words]
        pairs = [a.raw for a in cmd.assigns]
        if words and words[0] in ("export", "declare", "local", "readonly"):
            pairs += [w for w in words[1:] if "=" in w]
        for pair in pairs:
            name, _, value = pair.partition("=")
            if name.upper().endswith("PORT") and _RANDOM_WORD.match(value):
                yield (
                    cmd.line,
                    f"{name}={value}: $RANDOM is 0-32767, so the port may be privileged (< 1024) or held by "
                    "another job on the node; use e.g. $((20000 + SLURM_JOB_ID % 10000))",
                )


# ---------------------------------------------------------------------------------------------- KG185
_ASSIGNMENT = re.compile(r"^[A-Za-z_]\w*=")


@rule(
    "KG185",
    Severity.ERROR,
    "srun (or mpirun) followed by VAR=value: srun runs no shell, so it executes 'VAR=value' as the program of "
    "every task, which does not exist (execve: No such file or directory), and the step fails without training.",
    "Set the variable for the step with srun --export=ALL,VAR=value ... (or export it before srun, or run "
    "srun env VAR=value torchrun ...).",
    kinds=KINDS,
    scope="sbatch",
)
def srun_assignment(s: SbatchScript) -> Found:
    for step in steps(s, "srun", "mpi"):
        if step.argv and _ASSIGNMENT.match(step.argv[0]):
            program = "srun" if step.kind == "srun" else "mpirun"
            yield (
                s.locate(step.line, step.argv[0]),
                f"{program} runs {step.argv[0]!r} as the program of every task (no shell reads the assignment): "
                "the step fails; use srun --export=ALL," + step.argv[0].split("=", 1)[0] + "=... or env",
            )
