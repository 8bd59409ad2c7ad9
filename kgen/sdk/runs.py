"""The run verbs as library functions: `kgen status`, `logs`, `stop` and `list` on a run wherever it runs (this
machine's record of a bare-metal or Slurm run first, else the cluster), `kgen submit` (a cluster, or Slurm with
kind slurm) and `kgen launch` (ssh hosts, or this machine).

Each takes a request dataclass and returns data, or yields it as it comes (``watch``, ``logs``). Lines about
the work in progress go to the caller's ``say`` (what the CLI prints on stdout) and ``note`` (stderr, after
"kgen: "); both default to saying nothing. Errors are ``kgen.errors.KgenError`` (one line; the CLI's exit 2).
The adapters (kgen.cluster, kgen.baremetal, kgen.slurm: through kgen.sdk.slurmruns) are imported only by the
function that uses them: `kgen launch` never loads the ``kubernetes`` client, `kgen status` of a cluster run no
ssh code.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kgen.errors import UsageError

if TYPE_CHECKING:
    from kgen.baremetal.engine import StopReport
    from kgen.render.pipeline import Checked, RenderRequest
    from kgen.runs.verdict import Verdict

Say = Callable[[str], None]
ON_CHOICES = ("cluster", "bare-metal", "slurm")
CLUSTER_CHECK_S = 3.0  # a run found in the local record is also looked for on a configured cluster this long
BARE_METAL_POLL_S = 2.0  # `kgen status --watch` of a bare-metal run asks every host this often


def _quiet(text: str) -> None:
    pass


@dataclass(frozen=True)
class RunRef:
    """Which run: its name, the cluster to ask (kubeconfig, context, namespace: kubectl's defaults when None)
    and ``on``: "cluster", "bare-metal", "slurm", or None (this machine's bare-metal or Slurm record of that name
    first, else the cluster; a name that is two of them is an error that asks to choose)."""

    name: str
    namespace: str | None = None
    context: str | None = None
    kubeconfig: str | None = None
    on: str | None = None


@dataclass
class RunStatus:
    """A run's verdict (kgen.runs.verdict.Verdict: state, headline, root cause, one row per rank) and where it
    runs: ``on`` is "cluster", "bare-metal" or "slurm"; ``where`` says which bare-metal or Slurm run it is (None
    on a cluster)."""

    verdict: Verdict
    on: str
    where: str | None = None


@dataclass
class StatusUpdate:
    """One step of ``watch``: ``first``; ``change`` (the headline changed); at the end ``final`` (the run ended
    and its verdict was re-read in full), ``ended`` (the run ended, as the last ``change`` already showed)
    or ``last`` (the watch ended before the run did)."""

    kind: str
    status: RunStatus


# ------------------------------------------------------------------------------------------ which run
def cluster_configured(kubeconfig: str | None, context: str | None) -> bool:
    if kubeconfig or context or os.environ.get("KUBERNETES_SERVICE_HOST"):
        return True
    files = os.environ.get("KUBECONFIG")
    paths = [p for p in files.split(os.pathsep) if p] if files else [os.path.expanduser("~/.kube/config")]
    return any(os.path.isfile(p) for p in paths)


def cluster_has(name: str, namespace, context, kubeconfig) -> str | None:
    """The namespace where a cluster run ``name`` exists, when a cluster is configured and answers in time."""
    if not cluster_configured(kubeconfig, context):
        return None
    found: list[str | None] = []

    def probe() -> None:
        try:
            from kgen.cluster.client import Cluster

            cluster = Cluster.connect(kubeconfig=kubeconfig, context=context, namespace=namespace)
            if cluster.workload(name) is not None or cluster.pods(name):
                found.append(cluster.namespace)
        except Exception:  # noqa: BLE001 - no client, no cluster, no answer: the bare-metal run is the one
            pass

    t = threading.Thread(target=probe, daemon=True)
    t.start()
    t.join(CLUSTER_CHECK_S)
    return found[0] if found else None


def _no_such_run(name: str, records: str, kubeconfig, context) -> None:
    """No local record of ``name``: when no cluster can be asked either (no client, no kubeconfig), one
    error says both, so a bare-metal or Slurm user's typo does not read as a cluster setup problem."""
    import importlib.util

    from kgen.cluster.errors import INSTALL_HINT

    here = f"no run {name}: no bare-metal or Slurm run of that name (no local record {records})"
    if importlib.util.find_spec("kubernetes") is None:
        raise UsageError(f"{here}; cluster runs need the kubernetes package: {INSTALL_HINT}", option="NAME")
    if not cluster_configured(kubeconfig, context):
        raise UsageError(
            f"{here}, and no kubeconfig found for a cluster run (not in a pod either)",
            option="NAME",
            hint="`kgen list` shows the runs kgen knows; a cluster run: pass --kubeconfig FILE or set KUBECONFIG",
        )


@dataclass(frozen=True)
class LocalRun:
    """A run this machine keeps the record of: ``on`` "bare-metal" (kgen.baremetal.record.RunRecord) or "slurm"
    (kgen.slurm.record.RunRecord)."""

    on: str
    record: Any

    @property
    def path(self) -> str:
        from kgen.baremetal import record as B
        from kgen.slurm import record as S

        return str((B if self.on == "bare-metal" else S).path(self.record.name))


def local_run(name: str, on: str | None, namespace=None, context=None, kubeconfig=None) -> LocalRun | None:
    """The bare-metal or Slurm run ``name`` when the verb should act on it (else None: the cluster's turn)."""
    from kgen.baremetal import record as B
    from kgen.runs.store import is_name
    from kgen.slurm import record as S

    if on == "cluster":
        return None
    bm = B.load(name) if is_name(name) and on in (None, "bare-metal") else None
    sl = S.load(name) if is_name(name) and on in (None, "slurm") else None
    for engine, rec, records in (("bare-metal", bm, B), ("slurm", sl, S)):
        if on == engine and rec is None:
            what = "bare-metal" if engine == "bare-metal" else "Slurm"
            raise UsageError(
                f"no {what} run {name} (no local record {records.path(name)})",
                option="--on",
                hint="`kgen list` shows the runs kgen knows",
            )
    if on is not None:
        return LocalRun(on, bm if on == "bare-metal" else sl)
    if bm is not None and sl is not None:
        raise UsageError(
            f"{name} is both a bare-metal run (local record {B.path(name)}) and a Slurm run (local record "
            f"{S.path(name)})",
            option="NAME",
            hint="say which with --on bare-metal or --on slurm",
        )
    if bm is None and sl is None:
        _no_such_run(name, f"{B.path(name)} or {S.path(name)}", kubeconfig, context)
        return None
    found = LocalRun("bare-metal", bm) if bm is not None else LocalRun("slurm", sl)
    ns = cluster_has(name, namespace, context, kubeconfig)
    if ns is not None:
        raise UsageError(
            f"{name} is both a {found.on} run (local record {found.path}) and a cluster run (namespace {ns})",
            option="NAME",
            hint=f"say which with --on {found.on} or --on cluster",
        )
    return found


def _local(ref: RunRef) -> LocalRun | None:
    from kgen.runs.store import check_name

    if not ref.name:
        raise UsageError("is empty: give the run's name", option="NAME", hint="`kgen list` shows the runs kgen knows")
    check_name(ref.name, "NAME")  # a name, never a path: nothing is looked up with it before this
    return local_run(ref.name, ref.on, ref.namespace, ref.context, ref.kubeconfig)


def _connect(ref: RunRef, max_connections: int = 16):
    from kgen.cluster.engine import connect

    return connect(ref.namespace, ref.context, ref.kubeconfig, max_connections=max_connections)


def _which(rec) -> str:
    from kgen.baremetal import record as R

    where = "this machine (--local)" if rec.mode == "local" else f"{len(rec.nodes)} host(s) over ssh"
    return f"bare-metal run {rec.name} on {where}, local record {R.path(rec.name)}"


# ------------------------------------------------------------------------------------------ status
def status(ref: RunRef, *, read_logs: bool = True) -> RunStatus:
    """`kgen status NAME`: the run's verdict, asked once (``read_logs``: a cluster run's log tails are read
    for the root cause, as without --no-logs)."""
    local = _local(ref)
    if local is not None and local.on == "slurm":
        from kgen.sdk import slurmruns

        return RunStatus(slurmruns.status(local.record), "slurm", slurmruns.which(local.record))
    rec = local.record if local is not None else None
    if rec is not None:
        from kgen.baremetal import engine as ops

        return RunStatus(ops.status(rec, ops.transport_for(rec)), "bare-metal", _which(rec))
    from kgen.cluster.engine import gather

    v, _ = gather(_connect(ref), ref.name, with_logs=read_logs)
    return RunStatus(v, "cluster")


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
    local = _local(ref)
    if local is not None and local.on == "slurm":
        from kgen.sdk import slurmruns

        where = slurmruns.which(local.record)
        for kind, v in slurmruns.watch(local.record, until_running, timeout):
            yield StatusUpdate(kind, RunStatus(v, "slurm", where))
        return
    rec = local.record if local is not None else None
    if rec is not None:
        yield from _watch_bare_metal(rec)
        return
    from kgen.cluster import engine as ops

    cluster = _connect(ref)
    _, raw = ops.gather(cluster, ref.name, with_logs=read_logs if first_logs is None else first_logs)
    for u in ops.watch(cluster, ref.name, raw, not read_logs, until_running=until_running, timeout=timeout):
        yield StatusUpdate(u.kind, RunStatus(u.verdict, "cluster"))


def _watch_bare_metal(rec) -> Iterator[StatusUpdate]:
    from kgen.baremetal import engine as ops

    transport = ops.transport_for(rec)
    v = ops.status(rec, transport)
    which = _which(rec)
    yield StatusUpdate("first", RunStatus(v, "bare-metal", which))
    if v.state in ("succeeded", "failed", "stopped"):  # over already: the first view was the last word
        yield StatusUpdate("last", RunStatus(v, "bare-metal", which))
        return
    last = v.headline
    while v.state not in ("succeeded", "failed", "stopped"):
        time.sleep(BARE_METAL_POLL_S)
        v = ops.status(rec, transport)
        if v.headline != last:
            last = v.headline
            yield StatusUpdate("change", RunStatus(v, "bare-metal", which))
    yield StatusUpdate("ended", RunStatus(v, "bare-metal", which))


# ------------------------------------------------------------------------------------------ logs
@dataclass(frozen=True)
class LogsRequest:
    """`kgen logs NAME`: ``ranks`` (global ranks; None: every rank), the last ``tail`` lines of each node's log,
    only lines newer than ``since_s`` seconds (0: from now on), ``timestamps`` shown, ``previous`` containers
    (cluster runs), ``follow`` until the run ends, at most ``max_streams`` log streams at once (cluster runs),
    ``full``: torchrun's shutdown tracebacks as written (by default one line each)."""

    run: RunRef
    ranks: frozenset[int] | None = None
    tail: int | None = None
    since_s: int | None = None
    timestamps: bool = False
    previous: bool = False
    follow: bool = False
    max_streams: int = 128
    full: bool = False


def logs(req: LogsRequest, note: Say = _quiet) -> Iterator[str]:
    """Every line of the run's logs, merged by time, each whole and after its process's prefix: ``[R]`` for
    training process R (its global rank), ``[node N]`` for node N's own (kgen, torchrun); a log that cannot be
    read is ``note``'d and left out."""
    if req.tail is not None and req.tail < 0:
        raise UsageError(f"must be 0 or more, got {req.tail}", option="--tail")
    ranks = set(req.ranks) if req.ranks is not None else None
    local = _local(req.run)
    if local is not None and local.on == "slurm":
        from kgen.sdk import slurmruns

        yield from slurmruns.logs(local.record, ranks, req.tail, req.since_s, req.timestamps, req.previous,
                                  req.follow, note, req.full)  # fmt: skip
        return
    rec = local.record if local is not None else None
    if rec is not None:
        yield from _logs_bare_metal(rec, req, ranks, note)
        return
    since_s, tail = req.since_s, req.tail
    if since_s == 0:  # from now on: the API's sinceSeconds must be > 0, and no line is newer than now
        since_s, tail = None, 0
    if req.max_streams < 1:
        raise UsageError(f"must be 1 or more, got {req.max_streams}", option="--max-streams")
    if req.follow and req.previous:
        raise UsageError("cannot follow a previous container", option="--previous", hint="drop -f or --previous")
    from kgen.cluster import engine as ops

    cluster = _connect(req.run, max_connections=req.max_streams + 4)
    yield from ops.logs(
        cluster,
        req.run.name,
        ranks,
        tail,
        since_s,
        req.timestamps,
        req.previous,
        req.follow,
        req.max_streams,
        note,
        full=req.full,
    )


def _logs_bare_metal(rec, req: LogsRequest, ranks: set[int] | None, note: Say) -> Iterator[str]:
    from kgen.baremetal import engine as ops

    if req.previous:
        raise UsageError("is for cluster runs (a bare-metal node's log goes on across restarts)", option="--previous")
    transport = ops.transport_for(rec)
    if ranks is not None:
        world = len(rec.nodes) * max(rec.nproc, 1)
        unknown = sorted(r for r in ranks if r >= world)
        if unknown:
            raise UsageError(f"run {rec.name} has ranks 0..{world - 1}, not {unknown}", option="--rank")
    if not req.follow:
        lines, warnings = ops.logs(rec, transport, ranks, req.tail, req.since_s, req.timestamps, req.full)
        for w in warnings:
            note(w)
        yield from lines
        return
    yield from ops.follow(rec, transport, ranks, req.tail, req.since_s, req.timestamps, req.full)


# ------------------------------------------------------------------------------------------ stop
@dataclass(frozen=True)
class StopRequest:
    """`kgen stop NAME`: ``wait`` (a cluster run: until its pods are gone, at most ``timeout`` s); a bare-metal
    run: SIGKILL what is left ``grace`` s after the stop began, then ``remove`` its run directories and record; a
    Slurm run: ``scancel`` what is left ``grace`` s after the group stop, then ``remove`` its folder and record.
    A cluster run of which nothing is left is an error unless ``ignore_not_found``."""

    run: RunRef
    wait: bool = False
    timeout: float = 300.0
    grace: float = 10.0
    remove: bool = False
    ignore_not_found: bool = False  # a cluster run with nothing left: 0 objects deleted, no error (kubectl's flag)


@dataclass
class StopResult:
    """What was stopped: ``on`` "cluster" (``deleted``: how many objects; 0 only with ``ignore_not_found``, in
    ``namespace``), "bare-metal" (``report``: each node's stop) or "slurm" (``job``: kgen.slurm.engine.StopReport,
    the job's stop); ``removed``: the problems of --rm (None: not done)."""

    on: str
    deleted: int = 0
    namespace: str = ""
    report: StopReport | None = None
    removed: list[str] | None = None
    job: Any = None

    @property
    def all_stopped(self) -> bool:
        if self.job is not None:
            return bool(self.job.stopped)
        return self.report is None or self.report.all_stopped


def check_timeout(timeout: float) -> None:
    if not timeout >= 0:  # also NaN
        raise UsageError(f"must be 0 or more seconds, got {timeout:g}", option="--timeout", hint="e.g. --timeout 600")


def stop(req: StopRequest, say: Say = _quiet, note: Say = _quiet) -> StopResult:
    """Stop a run: a cluster run's workload, Service, ConfigMap, Secret, NetworkPolicy, PDB and pods are deleted
    (each ``say``'d); a bare-metal run's processes end on every host (group stop, SIGTERM, SIGKILL after
    ``grace``)."""
    check_timeout(req.timeout)
    local = _local(req.run)
    if local is not None and local.on == "slurm":
        from kgen.sdk import slurmruns

        job, removed = slurmruns.stop(local.record, req.grace, req.remove)
        return StopResult("slurm", job=job, removed=removed)
    rec = local.record if local is not None else None
    if rec is not None:
        from kgen.baremetal import engine as ops

        if not 0 <= req.grace <= 3600:
            raise UsageError(f"must be between 0 and 3600 seconds, got {req.grace:g}", option="--grace")
        transport = ops.transport_for(rec)
        report = ops.stop(rec, transport, grace=req.grace)
        removed = ops.remove(rec, transport) if req.remove and report.all_stopped else None
        return StopResult("bare-metal", report=report, removed=removed)
    if req.remove:
        raise UsageError("is for bare-metal and Slurm runs (kgen launch, kgen submit --kind slurm)", option="--rm")
    from kgen.cluster.engine import stop_run
    from kgen.cluster.errors import ClusterError
    from kgen.cluster.labels import run_selector

    cluster = _connect(req.run)
    deleted = stop_run(cluster, req.run.name, req.wait, req.timeout, say, note)
    if not deleted and not req.ignore_not_found:
        raise ClusterError(
            f"no run {req.run.name} in namespace {cluster.namespace}: nothing labelled {run_selector(req.run.name)} "
            "(stopped already, or never there); nothing was stopped",
            option="NAME",
            hint="`kgen list -A` shows the runs kgen finds; --ignore-not-found makes this exit 0",
        )
    return StopResult("cluster", deleted=deleted, namespace=cluster.namespace)


# ------------------------------------------------------------------------------------------ submit
@dataclass(frozen=True)
class SubmitRequest:
    """`kgen submit`: ``render`` says what to run (as for `kgen render`; its namespace, else the cluster's),
    ``context``/``kubeconfig`` which cluster, ``replace`` an existing run of that name (stopped first, at most
    ``timeout`` s), ``dry_run`` "none", "client" (no cluster asked) or "server" (the API server's dry run).
    Kind slurm (``render.kind``): sbatch on this machine's Slurm cluster instead; ``run_dir`` is the run's
    folder on a file system every node shares (default ``$XDG_STATE_HOME/kgen/slurm/<name>``), "server" is
    `sbatch --test-only`."""

    render: RenderRequest
    namespace: str | None = None
    context: str | None = None
    kubeconfig: str | None = None
    replace: bool = False
    timeout: float = 600.0
    dry_run: str = "none"
    run_dir: str | None = None


@dataclass
class SubmitResult:
    """The rendered run (``checked``: spec, documents or sbatch script, warnings and notes) and what was done with
    it: ``applied`` (False for a dry run), ``documents`` (for a dry run: as the API server answered, or as
    rendered), ``outcome`` (a dry run's one line), ``namespace`` where it was applied; ``on`` "cluster" or
    "slurm" (then ``record``: the Slurm run's local record, kgen.slurm.record.RunRecord: job id, run folder)."""

    checked: Checked
    applied: bool
    documents: list[dict] = field(default_factory=list)
    outcome: str = ""
    namespace: str = ""
    on: str = "cluster"
    record: Any = None


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
    """Render, lint and apply a run (server-side apply, field manager "kgen": ConfigMap, Service, workload),
    after checking that the cluster serves its kinds and no run of that name exists (``replace`` stops it
    first). If an apply fails, what this submit created is deleted again. The manifest's notes and warnings
    are ``note``'d once the run can be applied. `kgen submit --wait` then follows it with ``watch`` (with
    ``until_running``)."""
    from kgen.render.pipeline import render_checked, stderr_lines

    check_submit(req.timeout, req.dry_run, False)
    if req.run_dir is not None and (req.render.kind or "").lower() != "slurm":
        raise UsageError("is for Slurm runs (--kind slurm)", option="--run-dir")
    checked = render_checked(req.render)
    spec, docs = checked.spec, checked.docs
    if spec.kind == "slurm":
        from kgen.sdk import slurmruns

        slurmruns.check_submit(req.context, req.kubeconfig)
        applied, outcome, sub = slurmruns.submit(checked, req.run_dir, req.replace, req.dry_run, say, note)
        return SubmitResult(checked, applied, [], outcome, "", "slurm", sub.record if sub else None)
    if req.dry_run == "client":  # what would be applied, as kgen render prints it; no cluster is asked
        for line in stderr_lines(checked):
            note(line)
        return SubmitResult(
            checked, False, docs, "nothing was sent to a cluster (--dry-run=server asks the API server)"
        )
    from kgen.cluster import engine as ops
    from kgen.cluster.errors import ClusterError

    cluster = ops.connect(spec.namespace or req.namespace, req.context, req.kubeconfig)
    ops.preflight(cluster, docs)  # before anything is stopped or applied
    for line in stderr_lines(checked):  # what `kgen render` says on stderr, once the run can be applied
        note(line)
    existing = cluster.workload(spec.name)
    if existing is not None and req.dry_run == "server" and req.replace:
        note(f"dry run: run {spec.name} exists; --replace would stop it first (not stopped)")
        existing = None
    secret = _run_secret(spec)  # a StatefulSet's <name>-auth: made here, fresh, before the pods can start
    if req.dry_run == "server":
        answers = []
        for doc in [*([secret] if secret else []), *docs]:
            doc.setdefault("metadata", {}).setdefault("namespace", cluster.namespace)
            answer = cluster.apply(doc, dry_run=True)
            if doc is not secret:  # its (random, never used) value is not shown
                answers.append(answer)
        outcome = "the API server accepted every object as a dry run; nothing was changed"
        if secret:
            outcome += f" (with secret/{spec.secret_name}, which kgen submit makes)"
        return SubmitResult(checked, False, answers, outcome, cluster.namespace)
    if existing is not None:
        if not req.replace:
            from kgen.cluster.verdict import decide

            v = decide(spec.name, cluster.pods(spec.name), existing)
            raise ClusterError(
                f"run {spec.name} already exists in namespace {cluster.namespace} "
                f"({existing.get('kind')}, {v.state}); a Job's pod template cannot be changed in place",
                option="--name",
                hint=f"`kgen stop {spec.name}` first, choose another --name, or pass --replace",
            )
        say(f"replacing run {spec.name}: stopping it first")
        ops.stop_run(cluster, spec.name, True, req.timeout, say, note)
    if secret:
        ops.drop_immutable_secret(cluster, spec.secret_name, say)
    to_apply = [*([secret] if secret else []), *docs]
    answers = ops.apply_all(cluster, to_apply, say, forced=("Secret",))
    if secret:
        workload = next(a for a, d in zip(answers, to_apply, strict=True) if d["kind"] == "StatefulSet")
        ops.own_run_secret(cluster, secret, workload, say, note)
    return SubmitResult(checked, True, docs, "", cluster.namespace)


def _run_secret(spec) -> dict | None:
    """The run's Secret that `kgen submit` makes: a StatefulSet's pods carry no Job UID to derive the secret
    from (kgen.render.runsecret); a fresh random value for every submit, never printed."""
    if not spec.secret_optional:
        return None
    import secrets

    from kgen.render.runsecret import secret_object

    return secret_object(spec.secret_name, spec.object_labels, secrets.token_hex(32))


# ------------------------------------------------------------------------------------------ list
@dataclass(frozen=True)
class ListRequest:
    """`kgen list`: the cluster to ask (namespace, context, kubeconfig; ``all_namespaces``)."""

    namespace: str | None = None
    context: str | None = None
    kubeconfig: str | None = None
    all_namespaces: bool = False


@dataclass
class RunList:
    """``runs``: one dict per run (namespace, name, kind, shape, state, age, headline, ranks_up,
    ranks_expected, reformations; bare-metal runs also hosts, Slurm runs their job id), bare-metal runs first,
    then Slurm runs; ``where``: what was looked at, for "no kgen runs in ..."."""

    runs: list[dict[str, Any]]
    where: str


def list_runs(req: ListRequest | None = None, note: Say = _quiet) -> RunList:
    """The kgen runs this machine knows (kgen launch's records, each asked on its hosts; kgen submit --kind
    slurm's, each asked of Slurm) and the cluster's (found by kgen's labels), when a cluster is configured (a
    cluster that cannot be asked is ``note``'d when there are runs of this machine to show, an error otherwise)."""
    from kgen.cluster.errors import ClusterError, MissingClient
    from kgen.sdk import slurmruns

    req = req if req is not None else ListRequest()
    runs = _bare_metal_entries() + slurmruns.entries(note)
    where = "this machine's bare-metal and Slurm records"
    try:
        from kgen.cluster import engine as ops

        cluster = ops.connect(req.namespace, req.context, req.kubeconfig)
        runs += ops.cluster_runs(cluster, req.all_namespaces)
        where = "any namespace" if req.all_namespaces else f"namespace {cluster.namespace}"
    except (ClusterError, MissingClient) as exc:
        configured = cluster_configured(req.kubeconfig, req.context)
        if not runs and configured:
            raise
        if configured:
            note(f"cluster runs not listed: {exc}")
    return RunList(runs, where)


def _bare_metal_entries() -> list[dict]:
    """One `kgen list` row per bare-metal run (its verdict from every host, all runs at once)."""
    from datetime import datetime, timezone

    from kgen.baremetal import engine as ops
    from kgen.runs import views

    now = datetime.now(timezone.utc)
    return [
        {
            "namespace": "-",
            "name": rec.name,
            "kind": rec.kind,
            "shape": f"{len(rec.nodes)}x{rec.nproc}",
            "state": v.state,
            "age": views.age(rec.created, now),
            "headline": v.headline,
            "ranks_up": v.ranks_up,
            "ranks_expected": v.ranks_expected,
            "reformations": v.reformations,
            "hosts": rec.hosts,
        }
        for rec, v in ops.list_runs()
    ]
