"""The run verbs' one interface: the requests and results every engine takes and returns, and the ``Engine``
protocol that kgen.cluster, kgen.baremetal and kgen.slurm each implement once (their ``engine.ENGINE``).

kgen.sdk.runs locates a run's engine once (``Engine.find``: this machine's record of a bare-metal or Slurm run
first, else the cluster) and makes one call; the CLI prints what comes back. A new engine is one package with an
``engine.py`` whose ``ENGINE`` implements this protocol, and one line in kgen.sdk.runs.engines (after TorchX's
``Scheduler``: one interface, one module per backend).

Lines about the work in progress go to the caller's ``say`` (the CLI's stdout) and ``note`` (stderr, after
"kgen: "); errors are ``kgen.errors.KgenError`` (one line; the CLI's exit 2). Pure data here: no engine, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from kgen.errors import UsageError

if TYPE_CHECKING:
    from kgen.render.pipeline import Checked, RenderRequest
    from kgen.runs.verdict import Verdict

Say = Callable[[str], None]


def quiet(text: str) -> None:
    """The default ``say`` and ``note``: says nothing."""


# ------------------------------------------------------------------------------------------ requests
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


@dataclass(frozen=True)
class ListRequest:
    """`kgen list`: the cluster to ask (namespace, context, kubeconfig; ``all_namespaces``)."""

    namespace: str | None = None
    context: str | None = None
    kubeconfig: str | None = None
    all_namespaces: bool = False


# ------------------------------------------------------------------------------------------ results
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


@dataclass
class StopReport:
    """What a stop did, the same for every engine: ``lines``, one per node or job, said as written (a cluster
    says each deletion as it happens instead); ``stopped``: every process of the run is confirmed ended;
    ``left``: when not, what is left and what to do; ``removed``: the problems of --rm (None: not done, [] done)
    and ``removed_what`` (what --rm deleted); ``done``: the closing line of a stop without --rm ("" none);
    ``deleted`` and ``namespace``: a cluster run's deleted objects (0 only with ``ignore_not_found``)."""

    on: str
    lines: list[str] = field(default_factory=list)
    stopped: bool = True
    left: str = ""
    removed: list[str] | None = None
    removed_what: str = ""
    done: str = ""
    took: float = 0.0
    deleted: int = 0
    namespace: str = ""

    @property
    def all_stopped(self) -> bool:
        return self.stopped


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


@dataclass
class RunList:
    """``runs``: one dict per run (namespace, name, kind, shape, state, age, headline, ranks_up,
    ranks_expected, reformations; bare-metal runs also hosts, Slurm runs their job id), bare-metal runs first,
    then Slurm runs; ``where``: what was looked at, for "no kgen runs in ..."."""

    runs: list[dict[str, Any]]
    where: str


@dataclass(frozen=True)
class Located:
    """A run an engine found: the ``ref`` asked for, ``record`` (the engine's own: a local record, or the
    namespace a cluster answered from) and ``place``, where it was found in words ("local record PATH",
    "namespace NS"), for the message that asks to choose between two engines."""

    ref: RunRef
    record: Any = None
    place: str = ""


# ------------------------------------------------------------------------------------------ the protocol
class Engine(Protocol):
    """One way of running training (a cluster, ssh hosts, Slurm): the run verbs, each written once per engine.

    ``name`` is what --on says ("cluster", "bare-metal", "slurm"), ``what`` how a message names its runs
    ("bare-metal", "Slurm"); ``local``: it keeps a record of each run on this machine (a local engine is found
    by that record; the one engine that is not, the cluster, is asked when no record names the run);
    ``kinds``: the render kinds it submits (none: the cluster's are every other)."""

    name: str
    what: str
    local: bool
    kinds: tuple[str, ...]

    def find(self, ref: RunRef) -> Located | None:
        """This engine's run ``ref.name``, when it has one (a local record; a cluster answering within a few
        seconds); None when it has none or cannot tell."""
        ...

    def record_path(self, name: str) -> str:
        """Where a local engine keeps the record of run ``name`` ("" for the cluster)."""
        ...

    def check_askable(self, ref: RunRef, missing: str) -> None:
        """No local record names the run (``missing`` says so): raise when this engine cannot be asked either
        (no client, nothing configured), so one error says both. A local engine does nothing."""
        ...

    def status(self, run: Located, *, read_logs: bool = True) -> RunStatus: ...

    def watch(
        self,
        run: Located,
        *,
        read_logs: bool = True,
        first_logs: bool | None = None,
        until_running: bool = False,
        timeout: float | None = None,
    ) -> Iterator[StatusUpdate]: ...

    def logs(self, run: Located, req: LogsRequest, note: Say) -> Iterator[str]: ...

    def stop(self, run: Located, req: StopRequest, say: Say, note: Say) -> StopReport: ...

    def submit(self, checked: Checked, req: SubmitRequest, say: Say, note: Say) -> SubmitResult: ...

    def list(self, req: ListRequest, note: Say) -> RunList:
        """This engine's rows of `kgen list` and what was looked at ("" when nothing was)."""
        ...


class LocalRecordEngine:
    """What the local engines (bare metal, Slurm) share: a run is found by its local record in ``records`` (the
    engine's record module: ``load(name)``, ``path(name)``), and there is nothing else to ask."""

    records: Any

    def find(self, ref: RunRef) -> Located | None:
        from kgen.runs.store import is_name

        rec = self.records.load(ref.name) if is_name(ref.name) else None
        return Located(ref, rec, f"local record {self.records.path(ref.name)}") if rec is not None else None

    def record_path(self, name: str) -> str:
        return str(self.records.path(name))

    def check_askable(self, ref: RunRef, missing: str) -> None:
        return None


# ------------------------------------------------------------------------------------------ shared checks
def check_timeout(timeout: float) -> None:
    if not timeout >= 0:  # also NaN
        raise UsageError(f"must be 0 or more seconds, got {timeout:g}", option="--timeout", hint="e.g. --timeout 600")


def check_grace(grace: float) -> None:
    if not 0 <= grace <= 3600:
        raise UsageError(f"must be between 0 and 3600 seconds, got {grace:g}", option="--grace")


def check_ranks(name: str, ranks: set[int] | None, world: int) -> None:
    """--rank: every chosen rank exists in a run of ``world`` ranks."""
    unknown = sorted(r for r in ranks if r >= world) if ranks is not None else []
    if unknown:
        raise UsageError(f"run {name} has ranks 0..{world - 1}, not {unknown}", option="--rank")
