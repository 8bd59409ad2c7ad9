"""`kgen debug stacks` on a Slurm run: one ``srun --overlap`` step in the running job, one task per node.

Each task runs the run's own entrypoint copy (the one the job's nodes run, in the shared run folder) as
``--run-dir RUN/node<SLURM_NODEID> --stacks``: it signals that node's training processes to dump their stacks
(the sitecustomize the entrypoint gave them) and writes its one JSON line to ``node<N>/stacks.answer`` in the
shared run folder (srun's own output would cut a long line into labelled pieces). The interpreter is the one
the job's script runs the entrypoint with.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from pathlib import Path

from kgen.errors import UsageError
from kgen.runs.safetext import printable
from kgen.runs.stacks import NodeStacks, StacksReport, parse_answer
from kgen.slurm import commands
from kgen.slurm import record as R

# the script's launch line (kgen.render.sbatch): `  PYTHON "$KGEN_SLURM_RUN/kgen_entrypoint.py" --slurm-node ...`
_LAUNCH = re.compile(r'^\s*(?P<python>\S.*?)\s+"\$KGEN_SLURM_RUN/kgen_entrypoint\.py" --slurm-node ', re.M)
ANSWER = "stacks.answer"
# one task per node; $0 the entrypoint, $1 the run folder, $2 the interpreter: the node from SLURM_NODEID
_TASK = f'd="$1/node$SLURM_NODEID"; "$2" "$0" --run-dir "$d" --stacks > "$d/{ANSWER}"'


def interpreter(rec: R.RunRecord) -> str:
    """The Python the job's script runs the entrypoint with (python3 when the script cannot be read)."""
    try:
        script = (Path(rec.run_dir) / "job.sbatch").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "python3"
    m = _LAUNCH.search(script)
    if not m:
        return "python3"
    try:
        words = shlex.split(m.group("python"))
    except ValueError:
        return "python3"
    return words[-1] if words else "python3"


def stacks(rec: R.RunRecord, timeout: float, env: Mapping[str, str] | None = None) -> StacksReport:
    info = commands.job_info(rec.job_id, env)
    state = info.state if info is not None else "gone from the controller"
    if info is None or not info.running:
        raise UsageError(
            f"{rec.name}: Slurm job {rec.job_id} is not running ({state}): stacks come from running processes",
            option="NAME",
            hint=f"`kgen status {rec.name}` says how it ended",
        )
    run = rec.run_dir
    argv = [
        "--overlap", f"--jobid={rec.job_id}", f"--nodes={rec.nodes}", f"--ntasks={rec.nodes}",
        "--ntasks-per-node=1", "--kill-on-bad-exit=0", "--mpi=none", f"--time={max(1, int(timeout // 60) + 1)}",
        "bash", "-c", _TASK, f"{run}/kgen_entrypoint.py", run, interpreter(rec),
    ]  # fmt: skip
    answers_at = [Path(run) / f"node{node}" / ANSWER for node in range(rec.nodes)]
    for path in answers_at:
        path.unlink(missing_ok=True)
    res = commands.srun(argv, env=env, timeout=timeout + 10)
    answers: dict[int, dict] = {}
    for node, path in enumerate(answers_at):
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for line in reversed(text.splitlines()):
            answer = parse_answer(line) if line.startswith("{") else None
            if answer is not None:
                answers[node] = answer
                break
    why = commands.last_words(res) if res.returncode or not answers else "no answer"
    nodes = []
    for node in range(rec.nodes):
        a = answers.get(node)
        if a is None:
            nodes.append(NodeStacks(node, "", note=printable(f"no answer: {why}")))
        else:
            nodes.append(NodeStacks(node, printable(str(a.get("host") or "")), a["ranks"], printable(a["note"])))
    return StacksReport(rec.name, rec.nodes * (rec.nproc or 1), nodes)
