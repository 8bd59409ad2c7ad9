"""sbatch rules about GPUs the job never asks for: a batch script whose #SBATCH lines allocate no GPUs (no
--gres=gpu, --gpus*, and no --exclusive, which allocates a node's GPUs with it) while its steps start a GPU
launcher. On a cluster that constrains devices (ConstrainDevices=yes, the usual GPU setup) the tasks see no GPU:
torch.cuda finds none, NCCL refuses, and the job fails or trains on CPU. Read by ``kgen.lint.sbatch``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from kgen.findings import Severity
from kgen.lint.registry import rule
from kgen.lint.rules_sbatch import job_gpus, name, steps, training
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
