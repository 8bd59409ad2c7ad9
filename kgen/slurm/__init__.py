"""Slurm runs (`kgen submit` with --on slurm, and the run verbs on them): I/O at the edge, decisions in the middle.

- ``commands``: the Slurm client (sbatch, squeue, scontrol, scancel, sacct where it works), typed answers;
- ``record``: the local record of a Slurm run and its folder on the shared file system (secret, entrypoint);
- ``adapter``: the job's state and each node's files -> the per-rank records of the one verdict (pure);
- ``engine``: submit, status, logs (merged, followed), stop, list; ``ENGINE``, the Slurm engine of the run verbs.

The sbatch script itself is kgen.render.sbatch's (pure: `kgen render --kind slurm` prints it). Nothing here
imports the ``kubernetes`` client or ssh; `kgen render`/`lint` import none of it.
"""
