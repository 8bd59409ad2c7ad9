"""The run verbs as library functions: `kgen status`, `logs`, `stop` and `list` on a run wherever it runs (this
machine's record of a bare-metal or Slurm run first, else the cluster), `kgen submit` (a cluster, or Slurm with
kind slurm).

Each verb locates the run's engine once (``locate``) and makes one call to it (kgen.runs.engine.Engine: one per
package, kgen.cluster, kgen.baremetal, kgen.slurm). Each takes a request dataclass and returns data, or yields it
as it comes (``watch``, ``logs``). Lines about the work in progress go to the caller's ``say`` (what the CLI
prints on stdout) and ``note`` (stderr, after "kgen: "); both default to saying nothing. Errors are
``kgen.errors.KgenError`` (one line; the CLI's exit 2). The engines are imported only when a verb runs: `kgen
launch` never loads the ``kubernetes`` client (kgen.cluster.engine loads it in ``connect``).
"""

from __future__ import annotations

from collections.abc import Iterator

from kgen.errors import KgenError, UsageError
from kgen.runs.engine import (
    Engine,
    ListRequest,
    Located,
    LogsRequest,
    RunList,
    RunRef,
    RunStatus,
    Say,
    StatusUpdate,
    StopReport,
    StopRequest,
    SubmitRequest,
    SubmitResult,
    check_timeout,
)
from kgen.runs.engine import quiet as _quiet

__all__ = [
    "ON_CHOICES",
    "ListRequest",
    "LogsRequest",
    "RunList",
    "RunRef",
    "RunStatus",
    "StatusUpdate",
    "StopReport",
    "StopRequest",
    "StopResult",
    "SubmitRequest",
    "SubmitResult",
    "check_submit",
    "engines",
    "list_runs",
    "locate",
    "logs",
    "status",
    "stop",
    "submit",
    "watch",
]

ON_CHOICES = ("cluster", "bare-metal", "slurm")
StopResult = StopReport  # the name of kgen 0.1's stop result


def engines() -> list[Engine]:
    """Every engine: those that keep local records first (in this order when a run is looked for), then the one
    asked when no record names the run. A new engine is one package and one line here."""
    from kgen.baremetal.engine import ENGINE as BARE_METAL
    from kgen.cluster.engine import ENGINE as CLUSTER
    from kgen.slurm.engine import ENGINE as SLURM

    return [BARE_METAL, SLURM, CLUSTER]


# ------------------------------------------------------------------------------------------ which run
def locate(ref: RunRef) -> tuple[Engine, Located]:
    """The engine of run ``ref`` and the run it found: ``ref.on``'s when given, else the engine that keeps a local
    record of that name, else the cluster. A name two engines know is an error that asks to choose."""
    from kgen.runs.store import check_name

    if not ref.name:
        raise UsageError("is empty: give the run's name", option="NAME", hint="`kgen list` shows the runs kgen knows")
    check_name(ref.name, "NAME")  # a name, never a path: nothing is looked up with it before this
    every = engines()
    local = [e for e in every if e.local]
    remote = next(e for e in every if not e.local)
    name = ref.name
    if ref.on is not None:
        engine = next(e for e in every if e.name == ref.on)
        if not engine.local:
            return engine, Located(ref)
        found = engine.find(ref)
        if found is None:
            raise UsageError(
                f"no {engine.what} run {name} (no local record {engine.record_path(name)})",
                option="--on",
                hint="`kgen list` shows the runs kgen knows",
            )
        return engine, found
    hits = [(e, f) for e in local if (f := e.find(ref)) is not None]
    if len(hits) > 1:
        raise UsageError(
            f"{name} is both " + " and ".join(f"a {e.what} run ({f.place})" for e, f in hits),
            option="NAME",
            hint="say which with " + " or ".join(f"--on {e.name}" for e, _ in hits),
        )
    if not hits:
        whats = " or ".join(e.what for e in local)
        paths = " or ".join(e.record_path(name) for e in local)
        remote.check_askable(ref, f"no run {name}: no {whats} run of that name (no local record {paths})")
        return remote, Located(ref)
    engine, found = hits[0]
    there = remote.find(ref)
    if there is not None:
        raise UsageError(
            f"{name} is both a {engine.name} run ({found.place}) and a {remote.name} run ({there.place})",
            option="NAME",
            hint=f"say which with --on {engine.name} or --on {remote.name}",
        )
    return engine, found


# ------------------------------------------------------------------------------------------ the verbs
def status(ref: RunRef, *, read_logs: bool = True) -> RunStatus:
    """`kgen status NAME`: the run's verdict, asked once (``read_logs``: a cluster run's log tails are read
    for the root cause, as without --no-logs)."""
    engine, run = locate(ref)
    return engine.status(run, read_logs=read_logs)


def watch(
    ref: RunRef,
    *,
    read_logs: bool = True,
    first_logs: bool | None = None,
    until_running: bool = False,
    timeout: float | None = None,
) -> Iterator[StatusUpdate]:
    """`kgen status NAME --watch`: the verdict first, then each change until the run ends (or runs, with
    ``until_running``; or ``timeout`` seconds passed), then the last word. A cluster run is followed by its
    pod and workload watches, a bare-metal run asked every 2 s. ``first_logs`` (default ``read_logs``):
    whether the first look reads a cluster run's log tails."""
    engine, run = locate(ref)
    yield from engine.watch(
        run, read_logs=read_logs, first_logs=first_logs, until_running=until_running, timeout=timeout
    )


def logs(req: LogsRequest, note: Say = _quiet) -> Iterator[str]:
    """Every line of the run's logs, merged by time, each whole and after its process's prefix: ``[R]`` for
    training process R (its global rank), ``[node N]`` for node N's own (kgen, torchrun); a log that cannot be
    read is ``note``'d and left out."""
    if req.tail is not None and req.tail < 0:
        raise UsageError(f"must be 0 or more, got {req.tail}", option="--tail")
    engine, run = locate(req.run)
    yield from engine.logs(run, req, note)


def stop(req: StopRequest, say: Say = _quiet, note: Say = _quiet) -> StopReport:
    """Stop a run: a cluster run's workload, Service, ConfigMap, Secret, NetworkPolicy, PDB and pods are deleted
    (each ``say``'d); a bare-metal run's processes end on every host (group stop, SIGTERM, SIGKILL after
    ``grace``); a Slurm job gets the group stop, then scancel."""
    check_timeout(req.timeout)
    engine, run = locate(req.run)
    return engine.stop(run, req, say, note)


def check_submit(timeout: float, dry_run: str, wait: bool) -> None:
    """`kgen submit`'s options that need no rendering: checked before anything is read or rendered."""
    check_timeout(timeout)
    if dry_run not in ("none", "client", "server"):
        raise UsageError(
            f'must be client or server, got "{dry_run}"', option="--dry-run", hint="--dry-run alone is client"
        )
    if dry_run != "none" and wait:
        raise UsageError("a dry run starts nothing to wait for", option="--wait", hint="drop --wait or --dry-run")


def submit(req: SubmitRequest, say: Say = _quiet, note: Say = _quiet) -> SubmitResult:
    """Render, lint and hand the run to the engine of its kind: sbatch for kind slurm, else the cluster
    (server-side apply, after checking that the cluster serves its kinds and no run of that name exists;
    ``replace`` stops it first). The manifest's notes and warnings are ``note``'d once the run can be applied.
    `kgen submit --wait` then follows it with ``watch`` (with ``until_running``)."""
    from kgen.render.pipeline import render_checked

    check_submit(req.timeout, req.dry_run, False)
    if req.run_dir is not None and (req.render.kind or "").lower() != "slurm":
        raise UsageError("is for Slurm runs (--kind slurm)", option="--run-dir")
    checked = render_checked(req.render)
    every = engines()
    engine = next((e for e in every if checked.spec.kind in e.kinds), next(e for e in every if not e.local))
    return engine.submit(checked, req, say, note)


def list_runs(req: ListRequest | None = None, note: Say = _quiet) -> RunList:
    """The kgen runs this machine knows (kgen launch's records, each asked on its hosts; kgen submit --kind
    slurm's, each asked of Slurm) and the cluster's (found by kgen's labels), when a cluster is configured (a
    cluster that cannot be asked is ``note``'d when there are runs of this machine to show, an error otherwise)."""
    req = req if req is not None else ListRequest()
    every = engines()
    runs: list[dict] = []
    where = "this machine's " + " and ".join(e.what for e in every if e.local) + " records"
    for engine in every:
        try:
            found = engine.list(req, note)
        except KgenError as exc:  # the cluster cannot be asked: said when this machine has runs to show
            if engine.local or not runs:
                raise
            note(f"{engine.name} runs not listed: {exc}")
            continue
        runs += found.runs
        where = found.where or where
    return RunList(runs, where)
