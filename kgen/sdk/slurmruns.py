"""The Slurm side of the run verbs: what kgen.sdk.runs calls once it knows a name is a Slurm run (the local record
`kgen submit --kind slurm` wrote). kgen.slurm does the work (sbatch, scontrol, scancel, the run's folder); this
module checks the requests the way the other engines' verbs do and returns plain values, which kgen.sdk.runs
wraps into its results (RunStatus, StatusUpdate, StopResult, SubmitResult).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from kgen.errors import UsageError

if TYPE_CHECKING:
    from kgen.render.pipeline import Checked
    from kgen.runs.verdict import Verdict
    from kgen.slurm.record import RunRecord

POLL_S = 2.0  # `kgen status --watch` asks Slurm and reads the run's folder this often
ENDED = ("succeeded", "failed", "stopped")
Say = Callable[[str], None]


def which(rec: RunRecord) -> str:
    from kgen.slurm import record as R

    return f"Slurm run {rec.name}: job {rec.job_id}, run folder {rec.run_dir}, local record {R.path(rec.name)}"


def status(rec: RunRecord) -> Verdict:
    from kgen.slurm import ops

    return ops.status(rec)


def watch(rec: RunRecord, until_running: bool = False, timeout: float | None = None) -> Iterator[tuple[str, Verdict]]:
    """(kind, verdict): ``first``, each ``change`` of the headline, then ``ended`` (the run ended, or runs with
    ``until_running``) or ``last`` (``timeout`` passed first)."""
    deadline = time.monotonic() + timeout if timeout is not None else None
    v = status(rec)
    yield "first", v
    last = v.headline

    def done(v: Verdict) -> bool:
        return v.state in ENDED or (until_running and v.state == "running")

    while not done(v):
        if deadline is not None and time.monotonic() >= deadline:
            yield "last", v
            return
        time.sleep(POLL_S)
        v = status(rec)
        if v.headline != last:
            last = v.headline
            yield "change", v
    yield "ended", v


def logs(
    rec: RunRecord,
    ranks: set[int] | None,
    tail: int | None,
    since_s: int | None,
    timestamps: bool,
    previous: bool,
    follow: bool,
    note: Say,
    full: bool = False,
) -> Iterator[str]:
    from kgen.slurm import ops

    if previous:
        raise UsageError("is for cluster runs (a Slurm node's log goes on across requeues)", option="--previous")
    if ranks is not None:
        world = rec.nodes * max(rec.nproc, 1)
        unknown = sorted(r for r in ranks if r >= world)
        if unknown:
            raise UsageError(f"run {rec.name} has ranks 0..{world - 1}, not {unknown}", option="--rank")
    if follow:
        yield from ops.follow(rec, ranks, tail, timestamps, since_s=since_s, full=full)
        return
    lines, warnings = ops.logs(rec, ranks, tail, since_s, timestamps, full)
    for w in warnings:
        note(w)
    yield from lines


def stop(rec: RunRecord, grace: float, remove: bool) -> tuple[Any, list[str] | None]:
    """The stop's report (kgen.slurm.ops.StopReport) and, with ``remove``, the problems of removing the run's
    folder and record (None: not asked, or the job did not end)."""
    from kgen.slurm import ops

    if not 0 <= grace <= 3600:
        raise UsageError(f"must be between 0 and 3600 seconds, got {grace:g}", option="--grace")
    report = ops.stop(rec, grace=grace)
    removed = ops.remove(rec) if remove and report.stopped else None
    return report, removed


def check_submit(context: str | None, kubeconfig: str | None) -> None:
    for option, value in (("--context", context), ("--kubeconfig", kubeconfig)):
        if value is not None:
            raise UsageError("is for cluster runs; --kind slurm submits with sbatch", option=option)


def submit(
    checked: Checked, run_dir: str | None, replace: bool, dry_run: str, say: Say, note: Say
) -> tuple[bool, str, Any]:
    """(submitted, one line about it, the Submitted record or None): ``dry_run`` "client" (nothing asked),
    "server" (`sbatch --test-only`: Slurm's answer), else sbatch; ``replace`` stops and removes a Slurm run of
    that name first."""
    from kgen.render.pipeline import stderr_lines
    from kgen.slurm import ops
    from kgen.slurm import record as R

    spec = checked.spec
    if run_dir is not None:
        from kgen.render.sbatch import check_run_dir

        check_run_dir(run_dir)  # before anything, a dry run too
    for line in stderr_lines(checked):
        note(line)
    if dry_run == "client":
        return False, "nothing was sent to Slurm (--dry-run=server asks sbatch --test-only)", None
    if dry_run == "server":
        answer = ops.test_only(checked.script)
        return False, f"sbatch --test-only: {answer}; nothing was submitted", None
    old = R.load(spec.name)
    if old is not None and replace:
        say(f"replacing Slurm run {spec.name} (job {old.job_id}): stopping it first")
        report = ops.stop(old)
        if not report.stopped:
            raise UsageError(f"Slurm job {old.job_id} did not end ({report.summary()})", option="--replace")
        problems = ops.remove(old)
        if problems:
            raise UsageError("; ".join(problems), option="--replace")
    sub = ops.submit(checked.script, spec.name, spec.nodes, run_dir, workdir=os.getcwd(),
                     nproc=spec.nproc_per_node, gpus=spec.gpus)  # fmt: skip
    rec = sub.record
    say(f"Slurm job {rec.job_id} submitted: run {rec.name}, {rec.nodes} node(s); run folder {rec.run_dir}")
    return True, "", sub


def entries(note: Say) -> list[dict]:
    """One `kgen list` row per Slurm run of this machine's records (each asked of Slurm)."""
    from datetime import datetime, timezone

    from kgen.runs import views
    from kgen.slurm import ops
    from kgen.slurm import record as R
    from kgen.slurm.commands import SlurmError

    records = R.all_records()
    if not records:
        return []
    now = datetime.now(timezone.utc)
    rows = []
    unanswered: list[tuple[str, str]] = []  # said once below, not once per run
    for rec in records:
        row: dict[str, Any] = {
            "namespace": "-",
            "name": rec.name,
            "kind": "slurm",
            "shape": f"{rec.nodes}x{rec.gpus}" if rec.gpus else f"{rec.nodes}x{rec.nproc or 1}cpu",
            "age": views.age(rec.created, now),
            "job": rec.job_id,
        }
        try:
            v = ops.status(rec)
        except SlurmError as exc:
            unanswered.append((rec.name, str(exc)))
            row.update(state="unknown", headline="Slurm did not answer", ranks_up=0, ranks_expected=rec.nodes,
                       reformations=0)  # fmt: skip
        else:
            row.update(state=v.state, headline=v.headline, ranks_up=v.ranks_up, ranks_expected=v.ranks_expected,
                       reformations=v.reformations)  # fmt: skip
        rows.append(row)
    if unanswered:
        names = ", ".join(n for n, _ in unanswered[:5]) + (" ..." if len(unanswered) > 5 else "")
        note(f"Slurm did not answer for {len(unanswered)} run(s) ({names}): {unanswered[0][1]}")
    return rows
