"""The verbs on a Slurm run: submit, status, logs (merged, followed), stop, list; ``ENGINE``, the Slurm engine of
the run verbs (kgen.runs.engine.Engine). Returns data; only the CLI prints.

The run's folder is on a file system the login node and every compute node share (kgen.slurm.record), so the
nodes' logs and exit records are read as files; the job's state comes from the controller (scontrol, sacct
where accounting exists). The decisions are pure (kgen.slurm.adapter -> kgen.runs.verdict.judge).
"""

from __future__ import annotations

import os
import secrets
import shutil
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kgen.errors import UsageError
from kgen.render.sbatch import check_run_dir
from kgen.resources import entrypoint_path
from kgen.runs import stamps
from kgen.runs.engine import (
    LocalRecordEngine,
    Located,
    LogsRequest,
    RunList,
    RunStatus,
    Say,
    StatusUpdate,
    StopReport,
    StopRequest,
    SubmitRequest,
    SubmitResult,
    check_grace,
    check_ranks,
)
from kgen.runs.logtext import TAIL_SLACK, NodeLines, nodes_of, prefix, wanted
from kgen.runs.safetext import lines as text_lines
from kgen.runs.stamps import record_stamp, split_ts
from kgen.runs.verdict import Verdict, judge
from kgen.runs.views import rank_width
from kgen.slurm import commands
from kgen.slurm import record as R
from kgen.slurm.adapter import NodeFiles, to_records

STATE_TAIL = 20
STATE_EVENTS = 400
STOP_GRACE = 20.0  # kgen stop: how long the group stop (SIGINT) gets before scancel
FOLLOW_POLL = 0.3
TAIL_BYTES = 64 << 20  # logs --tail N reads at most this much of each log's end
POLL_S = 2.0  # `kgen status --watch` asks Slurm and reads the run's folder this often
ENDED = ("succeeded", "failed", "stopped")


# ------------------------------------------------------------------------------------------ submit
@dataclass
class Submitted:
    record: R.RunRecord
    script: Path
    secret: Path


def prepare(name: str, run_dir: str | None) -> Path:
    """The run's folder for a new run ``name`` (checked, not made yet): ``run_dir``, else the default."""
    R.check_name(name)
    if R.load(name) is not None:
        raise UsageError(
            f'a Slurm run "{name}" exists already ({R.path(name)})',
            option="--name",
            hint=f"choose another name, or `kgen stop {name} --rm` first (or --replace)",
        )
    run = Path(check_run_dir(run_dir) if run_dir is not None else str(R.default_run_dir(name)))
    check_run_dir(str(run))
    if run.exists() and (not run.is_dir() or any(run.iterdir())):
        raise UsageError(
            f"{run} exists and is not an empty folder: choose another run folder or name", option="--run-dir"
        )
    return run


def submit(
    script: str,
    name: str,
    nodes: int,
    run_dir: str | None = None,
    workdir: str | None = None,
    env: Mapping[str, str] | None = None,
    nproc: int = 0,
    gpus: int = 0,
) -> Submitted:
    """Make the run's folder (``run_dir``, default ``$XDG_STATE_HOME/kgen/slurm/<name>``, 0700: the entrypoint, a
    new secret in a 0600 file, the script as given), sbatch the script from ``workdir`` with the folder as its
    argument and Slurm's output file in it, and keep the local record."""
    run = prepare(name, run_dir)
    workdir = os.path.abspath(workdir or os.getcwd())
    made = not run.exists()
    R.private_dir(run)
    secret = run / "secret"
    R.write_private(secret, secrets.token_hex(32) + "\n")
    R.write_private(run / "kgen_entrypoint.py", entrypoint_path().read_text())
    path = run / "job.sbatch"
    R.write_private(path, script)
    try:
        job = commands.sbatch(
            str(path), cwd=workdir, env=env, options=[f"--output={run}/slurm-%j.out"], args=[str(run)]
        )
    except commands.SlurmError:
        # nothing was submitted: the folder goes (the secret with it), so the same name can be submitted again
        for p in (secret, run / "kgen_entrypoint.py", path):
            p.unlink(missing_ok=True)
        if made:
            run.rmdir()
        raise
    rec = R.RunRecord(name=name, job_id=job, run_dir=str(run), nodes=nodes, workdir=workdir,
                      created=record_stamp(), nproc=nproc, gpus=gpus)  # fmt: skip
    R.save(rec)
    return Submitted(rec, path, secret)


def test_only(script: str, workdir: str | None = None, env: Mapping[str, str] | None = None) -> str:
    """`sbatch --test-only`: Slurm checks the script against the cluster (partition, account, QoS, limits) and
    says when and where it would start; nothing is submitted. Its one line."""
    return commands.sbatch_test_only(script, cwd=os.path.abspath(workdir or os.getcwd()), env=env)


def remove(rec: R.RunRecord) -> list[str]:
    """Delete the run's folder (what kgen submit made and the nodes wrote) and its local record: the problems,
    if any (the record is kept then). Only for a job Slurm has ended."""
    problems = []
    run = Path(rec.run_dir)
    if run.is_dir():
        if (run / "job.sbatch").exists() or (run / "kgen_entrypoint.py").exists():
            shutil.rmtree(run, ignore_errors=True)
        if run.exists():
            problems.append(f"cannot remove the run's folder {run}")
    if not problems:
        R.remove(rec.name)
    return problems


# ------------------------------------------------------------------------------------------ status
def _tail_lines(path: Path, lines: int, limit: int = 256 << 10) -> list[str]:
    if lines <= 0:
        return []
    try:
        with open(path, "rb") as fh:
            end = fh.seek(0, os.SEEK_END)
            start = max(0, end - limit)
            fh.seek(start)
            data = fh.read()
    except OSError:
        return []
    text = text_lines(data.decode("utf-8", "replace"))  # split on "\n" only, escaped (kgen.runs.safetext)
    if start > 0 and text:
        text = text[1:]
    return text[-lines:]


def node_files(rec: R.RunRecord) -> list[NodeFiles]:
    run = Path(rec.run_dir)
    out = []
    for rank in range(rec.nodes):
        d = run / f"node{rank}"
        out.append(
            NodeFiles(
                rank,
                exit=R.read_json(d / "exit"),
                pid=R.read_json(d / "pid"),
                events=_tail_lines(d / "events", STATE_EVENTS),
                tail=_tail_lines(d / "log", STATE_TAIL, 64 << 10),
                attempts=R.read_jsonl(d / "attempts"),
            )
        )
    return out


def status(rec: R.RunRecord, env: Mapping[str, str] | None = None) -> Verdict:
    files = node_files(rec)
    unanswered = ""
    try:
        job = commands.job_info(rec.job_id, env)
    except commands.SlurmError as exc:
        # a finished run whose every node left its exit record needs no controller: those records speak
        if not all(isinstance((f.exit or {}).get("code"), int) for f in files) or len(files) < rec.nodes:
            raise
        job, unanswered = None, str(exc)
    run = Path(rec.run_dir)
    records = to_records(rec, job, files, end=R.read_json(run / "end"), stopping=(run / "stopping").exists())
    if unanswered:
        records.notes = [n for n in records.notes if "no longer known to Slurm" not in n]
        records.notes.append(f"Slurm did not answer ({unanswered}); every node's exit record speaks")
    return judge(records)


# ------------------------------------------------------------------------------------------ logs
def logs(
    rec: R.RunRecord,
    ranks: set[int] | None = None,
    tail: int | None = None,
    since_s: int | None = None,
    timestamps: bool = False,
    full: bool = False,
) -> tuple[list[str], list[str]]:
    """The chosen global ranks' lines (all attempts) merged in time order, each after its process's prefix
    (``[R]``, or ``[node N]`` for the node's own; kgen.runs.logtext); one warning per node whose log cannot be
    read. ``tail``: the last lines of each node's log."""
    chosen = _chosen_nodes(rec, ranks)
    texts: dict[int, list[str]] = {}
    warnings = []
    for node in chosen:
        path = Path(rec.run_dir) / f"node{node}" / "log"
        try:
            if tail is not None:  # the last lines only: read from the end (a long run's log can be large)
                if not path.exists():
                    raise FileNotFoundError(path)
                got = _tail_lines(path, tail + TAIL_SLACK if tail and not full else tail, TAIL_BYTES)
            else:
                got = text_lines(path.read_bytes().decode("utf-8", "replace"))
        except FileNotFoundError:
            warnings.append(f"node {node}: no log yet ({path}): its task has not started")
            continue
        except OSError as exc:
            warnings.append(f"node {node}: log unavailable: {path}: {exc.strerror}")
            continue
        texts[node] = got
    merged = stamps.merge(
        texts, since_s, timestamps, nproc=max(rec.nproc, 1), nnodes=rec.nodes, ranks=ranks, full=full, tail=tail
    )
    return merged, warnings


def _chosen_nodes(rec: R.RunRecord, ranks: set[int] | None) -> list[int]:
    """The nodes whose logs hold the chosen global ranks (``--rank``; every node without)."""
    picked = nodes_of(ranks, max(rec.nproc, 1))
    return [n for n in range(rec.nodes) if picked is None or n in picked]


def follow(
    rec: R.RunRecord,
    ranks: set[int] | None = None,
    tail: int | None = None,
    timestamps: bool = False,
    env: Mapping[str, str] | None = None,
    poll: float = FOLLOW_POLL,
    since_s: int | None = None,
    full: bool = False,
) -> Iterator[str]:
    """The chosen ranks' lines as they grow (each poll's new lines merged in time order), from the last ``tail``
    lines (or those newer than ``since_s`` seconds; 0: from now on), until the job ended (requeues included: a
    requeued job goes on in the same files)."""
    chosen = _chosen_nodes(rec, ranks)
    nproc = max(rec.nproc, 1)
    width = rank_width([max(rec.nodes, 1) * nproc - 1])
    if since_s != 0:
        default_tail = 10 if since_s is None else None
        first, _ = logs(rec, ranks, tail=tail if tail is not None else default_tail, since_s=since_s,
                        timestamps=timestamps, full=full)  # fmt: skip
        yield from first
    pos: dict[int, int] = {}
    partial: dict[int, bytes] = {}
    folds = {node: NodeLines(full) for node in chosen}
    for node in chosen:
        try:
            pos[node] = (Path(rec.run_dir) / f"node{node}" / "log").stat().st_size
        except OSError:
            pos[node] = 0

    def shown(node: int, items) -> list[tuple[str, int, str]]:
        return [
            (ts, node, prefix(rank, node, width) + (f"{ts} {text}" if timestamps and ts else text))
            for ts, rank, text in items
            if wanted(rank, node, ranks, nproc)
        ]

    ended_polls = 0
    while True:
        fresh: list[tuple[str, int, int, str]] = []
        for node in chosen:
            path = Path(rec.run_dir) / f"node{node}" / "log"
            try:
                with open(path, "rb") as fh:
                    fh.seek(pos[node])
                    data = fh.read(4 << 20)
            except OSError:
                continue
            pos[node] += len(data)
            whole, _, rest = (partial.get(node, b"") + data).rpartition(b"\n")
            partial[node] = rest
            if whole:
                items = []
                for ln in text_lines(whole.decode("utf-8", "replace") + "\n"):
                    items.extend(folds[node].feed(*split_ts(ln)))
                base = len(fresh)
                fresh.extend((ts, n, base + i, text) for i, (ts, n, text) in enumerate(shown(node, items)))
        for _, _, _, line in sorted(fresh):
            yield line
        if fresh:
            ended_polls = 0
        else:
            job = commands.job_info(rec.job_id, env)
            ended_polls = ended_polls + 1 if job is None or job.ended else 0
            if ended_polls >= 2:  # ended, and nothing more came in the poll after
                for node in chosen:
                    yield from (line for _, _, line in shown(node, folds[node].flush()))
                return
        time.sleep(poll)


# ------------------------------------------------------------------------------------------ stop
@dataclass
class JobStopReport:
    job_id: str
    steps: list[str] = field(default_factory=list)
    state: str = ""  # the job's state at the end
    took: float = 0.0

    @property
    def stopped(self) -> bool:
        return self.state in commands.TERMINAL or self.state == ""

    def summary(self) -> str:
        """One line: what was done and how the job ended (Slurm's word: a group stop ends the batch script with
        kgen's exit 6, which Slurm calls FAILED; the verdict says "Stopped")."""
        slurm = f"Slurm: {self.state}" if self.state else "Slurm no longer knows it"
        if self.steps == ["already ended"]:
            return f"Slurm job {self.job_id} had ended already ({slurm})"
        steps = " then ".join(self.steps) or "nothing to do"
        done = "ended" if self.stopped else "NOT ended"
        return f"Slurm job {self.job_id} {done} after {self.took:.1f}s: {steps}; {slurm}"


def _wait_ended(job: str, until: float, env: Mapping[str, str] | None) -> commands.JobInfo | None:
    info = commands.job_info(job, env)
    while info is not None and not info.ended and time.monotonic() < until:
        time.sleep(0.3)
        info = commands.job_info(job, env)
    return info


def stop(rec: R.RunRecord, grace: float = STOP_GRACE, env: Mapping[str, str] | None = None) -> JobStopReport:
    """Stop the run on every node: mark the folder (nothing is requeued, a requeued attempt does not start),
    then the group stop (SIGINT to every task of the step: each node's entrypoint ends torch and exits 6, "stopped
    by user"), then `scancel` of whatever is left after ``grace`` seconds (Slurm: SIGTERM, SIGKILL after KillWait)."""
    t0 = time.monotonic()
    report = JobStopReport(rec.job_id)
    run = Path(rec.run_dir)
    if run.is_dir() and not (run / "stopping").exists():
        R.write_private(run / "stopping", record_stamp() + "\n")
    info = commands.job_info(rec.job_id, env)
    if info is None or info.ended:
        report.state = info.state if info else ""
        report.steps.append("already ended")
        return replace(report, took=time.monotonic() - t0)
    if info.state == "RUNNING":
        commands.scancel(rec.job_id, signal="INT", env=env)
        report.steps.append("SIGINT to every task (group stop)")
        info = _wait_ended(rec.job_id, time.monotonic() + grace, env)
    if info is not None and not info.ended:
        commands.scancel(rec.job_id, env=env)
        report.steps.append("scancel")
        info = _wait_ended(rec.job_id, time.monotonic() + 120.0, env)
    report.state = info.state if info else ""
    report.took = time.monotonic() - t0
    return report


# ------------------------------------------------------------------------------------------ list
def list_runs(env: Mapping[str, str] | None = None) -> list[tuple[R.RunRecord, Verdict]]:
    return [(rec, status(rec, env)) for rec in R.all_records()]


# ------------------------------------------------------------------------------------------ the engine
def which(rec: R.RunRecord) -> str:
    return f"Slurm run {rec.name}: job {rec.job_id}, run folder {rec.run_dir}, local record {R.path(rec.name)}"


def check_submit(context: str | None, kubeconfig: str | None) -> None:
    for option, value in (("--context", context), ("--kubeconfig", kubeconfig)):
        if value is not None:
            raise UsageError("is for cluster runs; --kind slurm submits with sbatch", option=option)


class SlurmEngine(LocalRecordEngine):
    """`kgen submit --kind slurm`'s runs: found by their local record, asked of Slurm and the run's folder."""

    name = "slurm"
    what = "Slurm"
    local = True
    records = R
    kinds: tuple[str, ...] = ("slurm",)

    def status(self, run: Located, *, read_logs: bool = True) -> RunStatus:
        return RunStatus(status(run.record), self.name, which(run.record))

    def watch(
        self,
        run: Located,
        *,
        read_logs: bool = True,
        first_logs: bool | None = None,
        until_running: bool = False,
        timeout: float | None = None,
    ) -> Iterator[StatusUpdate]:
        """``first``, each ``change`` of the headline, then ``ended`` (the run ended, or runs with
        ``until_running``) or ``last`` (``timeout`` passed first)."""
        rec = run.record
        where = which(rec)
        deadline = time.monotonic() + timeout if timeout is not None else None
        v = status(rec)
        yield StatusUpdate("first", RunStatus(v, self.name, where))
        last = v.headline

        def done(v: Verdict) -> bool:
            return v.state in ENDED or (until_running and v.state == "running")

        while not done(v):
            if deadline is not None and time.monotonic() >= deadline:
                yield StatusUpdate("last", RunStatus(v, self.name, where))
                return
            time.sleep(POLL_S)
            v = status(rec)
            if v.headline != last:
                last = v.headline
                yield StatusUpdate("change", RunStatus(v, self.name, where))
        yield StatusUpdate("ended", RunStatus(v, self.name, where))

    def logs(self, run: Located, req: LogsRequest, note: Say) -> Iterator[str]:
        rec = run.record
        ranks = set(req.ranks) if req.ranks is not None else None
        if req.previous:
            raise UsageError("is for cluster runs (a Slurm node's log goes on across requeues)", option="--previous")
        check_ranks(rec.name, ranks, rec.nodes * max(rec.nproc, 1))
        if req.follow:
            yield from follow(rec, ranks, req.tail, req.timestamps, since_s=req.since_s, full=req.full)
            return
        lines, warnings = logs(rec, ranks, req.tail, req.since_s, req.timestamps, req.full)
        for w in warnings:
            note(w)
        yield from lines

    def stop(self, run: Located, req: StopRequest, say: Say, note: Say) -> StopReport:
        """The job's stop and, with ``remove``, the problems of removing the run's folder and record (None: not
        asked, or the job did not end)."""
        rec = run.record
        check_grace(req.grace)
        report = stop(rec, grace=req.grace)
        removed = remove(rec) if req.remove and report.stopped else None
        return StopReport(
            self.name,
            lines=[report.summary()],
            stopped=report.stopped,
            left=f"run {rec.name}: Slurm job {report.job_id} not confirmed ended; `kgen stop {rec.name}` again",
            removed=removed,
            removed_what="its run folder and the local record",
            took=report.took,
        )

    def submit(self, checked, req: SubmitRequest, say: Say, note: Say) -> SubmitResult:
        """sbatch the script; ``dry_run`` "client" (nothing asked), "server" (`sbatch --test-only`: Slurm's
        answer); ``replace`` stops and removes a Slurm run of that name first."""
        from kgen.render.pipeline import stderr_lines

        check_submit(req.context, req.kubeconfig)
        spec = checked.spec
        if req.run_dir is not None:
            check_run_dir(req.run_dir)  # before anything, a dry run too
        for line in stderr_lines(checked):
            note(line)
        if req.dry_run == "client":
            outcome = "nothing was sent to Slurm (--dry-run=server asks sbatch --test-only)"
            return SubmitResult(checked, False, [], outcome, "", self.name)
        if req.dry_run == "server":
            answer = test_only(checked.script)
            outcome = f"sbatch --test-only: {answer}; nothing was submitted"
            return SubmitResult(checked, False, [], outcome, "", self.name)
        old = R.load(spec.name)
        if old is not None and req.replace:
            say(f"replacing Slurm run {spec.name} (job {old.job_id}): stopping it first")
            report = stop(old)
            if not report.stopped:
                raise UsageError(f"Slurm job {old.job_id} did not end ({report.summary()})", option="--replace")
            problems = remove(old)
            if problems:
                raise UsageError("; ".join(problems), option="--replace")
        sub = submit(checked.script, spec.name, spec.nodes, req.run_dir, workdir=os.getcwd(),
                     nproc=spec.nproc_per_node, gpus=spec.gpus)  # fmt: skip
        rec = sub.record
        say(f"Slurm job {rec.job_id} submitted: run {rec.name}, {rec.nodes} node(s); run folder {rec.run_dir}")
        return SubmitResult(checked, True, [], "", "", self.name, rec)

    def list(self, req, note: Say) -> RunList:
        """One `kgen list` row per Slurm run of this machine's records (each asked of Slurm)."""
        from datetime import datetime, timezone

        from kgen.runs import views

        records = R.all_records()
        if not records:
            return RunList([], "")
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
                v = status(rec)
            except commands.SlurmError as exc:
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
        return RunList(rows, "")


ENGINE = SlurmEngine()
