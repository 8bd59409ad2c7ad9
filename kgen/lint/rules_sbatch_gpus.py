"""sbatch rules about GPUs the job never asks for: a batch script whose #SBATCH lines allocate no GPUs (no
--gres=gpu, --gpus*, and no --exclusive, which allocates a node's GPUs with it) while its steps start a GPU
launcher (KG192: on a cluster that constrains devices, ConstrainDevices=yes, the usual GPU setup, the tasks see no
GPU: torch.cuda finds none, NCCL refuses, and the job fails or trains on CPU); and a step that asks for more GPUs
than the job allocated (KG186: srun refuses the step). Read by ``kgen.lint.sbatch``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from kgen.findings import Severity
from kgen.lint.registry import rule
from kgen.lint.rules_sbatch import _gpus, job_gpus, name, step_nodes, steps, training
from kgen.lint.sbatch import SbatchScript

KINDS = ("sbatch",)
Found = Iterator[tuple[int, str]]

# What says the job runs on GPUs, outside the #SBATCH lines (comments left out); NCCL_DEBUG is set for any run.
_GPU_WORDS = re.compile(
    r"\bNCCL_(?!DEBUG)[A-Z_]+=|\bnvidia-smi\b|\bCUDA_VISIBLE_DEVICES\b|\$\{?SLURM_GPUS\w*|\bmodule\s+load\s+\S*cuda",
    re.IGNORECASE,
)


def _gpu_evidence(s: SbatchScript) -> str | None:
    for step in steps(s, "srun", "mpi", "batch"):
        for launch in step.launches:
            if training(launch) and (launch.flag("nproc_per_node") or "").lower() == "gpu":
                return f"{name(launch)} --nproc-per-node=gpu"
    for line in s.lines[1:]:
        code = line.split("#", 1)[0]
        m = _GPU_WORDS.search(code)
        if m:
            return m.group(0).strip()
    return None


@rule(
    "KG192",
    Severity.WARNING,
    "An sbatch script whose #SBATCH lines allocate no GPUs (no --gres=gpu:N, --gpus, --gpus-per-node, and no "
    "--exclusive, which brings a node's GPUs with it) while it starts a GPU launcher (torchrun --nproc-per-node=gpu, "
    "NCCL settings, $SLURM_GPUS_ON_NODE, CUDA_VISIBLE_DEVICES): where Slurm constrains devices, the usual GPU "
    "setup, the tasks see no GPU, so torch.cuda finds none and the job fails or trains on the CPU.",
    "Allocate the GPUs: #SBATCH --gpus-per-node=8 (or --gres=gpu:8), as many as the processes per node.",
    kinds=KINDS,
    scope="sbatch",
)
def gpu_launcher_without_gpus(s: SbatchScript) -> Found:
    if s.directive("exclusive") is not None:
        return
    if any(d.name.startswith(("gres", "gpus", "tres")) for d in s.directives):
        return  # GPUs allocated (or a ${VAR} in the directive: KG184's)
    allocated, _, _ = job_gpus(s)
    if allocated:
        return
    launchers = [(st, x) for st in steps(s, "srun", "mpi", "batch") for x in st.launches if training(x)]
    if not launchers:
        return
    evidence = _gpu_evidence(s)
    if evidence is None:
        return  # a CPU run (gloo) is fine without GPUs
    step, launch = launchers[0]
    yield (
        step.line,
        f"the job's #SBATCH lines allocate no GPUs, but it starts {name(launch)} for GPUs ({evidence}): where "
        "Slurm constrains devices the tasks see none; add #SBATCH --gpus-per-node=N (or --gres=gpu:N)",
    )


# ---------------------------------------------------------------------------------------------- KG186
@rule(
    "KG186",
    Severity.ERROR,
    "A step asks for GPUs (srun --gres=gpu:N, --gpus, --gpus-per-node, --gpus-per-task) that the job's #SBATCH "
    "directives never allocated, or more per node than they did: srun refuses the step ('Invalid generic "
    "resource (gres) specification' or 'Requested node configuration is not available') and nothing trains.",
    "Allocate the GPUs in the job (#SBATCH --gres=gpu:8 or --gpus-per-node=8); the steps inherit them "
    "(srun needs no --gres of its own).",
    kinds=KINDS,
    scope="sbatch",
)
def step_gpus_not_allocated(s: SbatchScript) -> Found:
    if any("$" in (d.value or "") for d in s.directives if d.name.startswith(("gres", "gpus"))):
        return  # KG184's
    allocated, per_job, said_job = job_gpus(s)
    for step in steps(s, "srun"):
        asked, per_step, said = _gpus(step.options, step_nodes(s, step))
        if not asked:
            continue
        where = s.locate(step.line, said.split("=", 1)[0])
        if not allocated:
            yield (
                where,
                f"srun {said} asks for GPUs, but the job's #SBATCH directives allocate none: srun refuses the step",
            )
        elif per_job is not None and per_step is not None and per_step > per_job:
            yield (
                where,
                f"srun {said} asks for {per_step} GPUs per node, but the job has {said_job}: srun refuses the step",
            )
