"""The verbs on a bare-metal run: status, logs (merged, followed), stop, remove, list; ``ENGINE``, the bare-metal
engine of the run verbs (kgen.runs.engine.Engine).

One ssh round trip per host and verb, every host at once (kgen.baremetal.transport.parallel); the
decisions are pure (kgen.baremetal.adapter -> kgen.runs.verdict.judge). Returns data; only
kgen.cli prints.
"""

from __future__ import annotations

import heapq
import json
import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from kgen.baremetal import record as R
from kgen.baremetal.adapter import NodeState, to_records
from kgen.baremetal.transport import LocalTransport, SshTransport, Transport, parallel
from kgen.errors import UsageError
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
    check_grace,
    check_ranks,
)
from kgen.runs.logtext import TAIL_SLACK, NodeLines, prefix, wanted
from kgen.runs.safetext import lines, printable
from kgen.runs.stamps import line_stamp, since_cut, split_ts
from kgen.runs.verdict import Verdict, judge
from kgen.runs.views import rank_width

STATE_TIMEOUT = 20.0
GROUP_WAIT = 3.0  # kgen stop: how long the other nodes get to end by the group stop before SIGTERM
DEFAULT_GRACE = 10.0
REORDER_S = 0.3  # kgen logs -f: lines are held this long to merge the hosts' streams in time order
POLL_S = 2.0  # `kgen status --watch` of a bare-metal run asks every host this often
ENDED = ("succeeded", "failed", "stopped")


def transport_for(rec: R.RunRecord) -> Transport:
    if rec.mode == "local":
        return LocalTransport(rec.python)
    return SshTransport(rec.python, rec.ssh_config, rec.connect_timeout)


def _json_line(out: bytes) -> dict | None:
    for line in reversed(out.decode("utf-8", "replace").splitlines()):
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                return None
            return value if isinstance(value, dict) else None
    return None


def _failed(host: str, result) -> str:
    """Why a host did not answer, in one printable line (ssh's and the host's words are escaped)."""
    if result.unreachable:
        return printable(result.unreachable)
    lines = [ln for ln in result.err.splitlines() if ln.strip()]
    last = lines[-1].strip() if lines else f"exit {result.rc}"
    return printable(f"{host}: the entrypoint on the host failed ({last})")


def _bound(transport: Transport) -> float:
    """A query's wall-clock bound: ssh's connect timeout, then a few seconds to answer."""
    return getattr(transport, "connect_timeout", 0) + 5.0 if isinstance(transport, SshTransport) else STATE_TIMEOUT


def query(rec: R.RunRecord, transport: Transport) -> list[NodeState]:
    """Every node's run state (``--state``), one call per host, all at once."""

    def one(node: R.NodeRecord) -> NodeState:
        if not node.dir:
            return NodeState(node, {"missing": True})
        res = transport.call(node.host, ["--run-dir", node.dir, "--state"], timeout=_bound(transport))
        answer = _json_line(res.out) if res.ok else None
        if answer is None:
            return NodeState(node, None, _failed(node.host, res))
        return NodeState(node, answer)

    return parallel(rec.nodes, one)


def status(rec: R.RunRecord, transport: Transport | None = None) -> Verdict:
    return judge(to_records(rec, query(rec, transport or transport_for(rec))))


# ------------------------------------------------------------------------------------------ logs
def _nodes_of(rec: R.RunRecord, ranks: set[int] | None) -> list[R.NodeRecord]:
    """The nodes whose logs hold the chosen global ranks (``--rank``)."""
    return [
        n for n in rec.nodes if ranks is None or any(n.rank * rec.nproc <= r < (n.rank + 1) * rec.nproc for r in ranks)
    ]


def _width(rec: R.RunRecord) -> int:
    return rank_width([len(rec.nodes) * max(rec.nproc, 1) - 1])


def logs(
    rec: R.RunRecord,
    transport: Transport,
    ranks: set[int] | None = None,
    tail: int | None = None,
    since_s: int | None = None,
    timestamps: bool = False,
    full: bool = False,
) -> tuple[list[str], list[str]]:
    """The chosen ranks' lines merged in time order, each after its process's prefix (``[R]``, or ``[node N]``
    for the node's own; kgen.runs.logtext); and one warning per host that failed. ``tail``: the last lines of
    each node's log."""
    nodes = _nodes_of(rec, ranks)
    args = ["--tail", str(tail + TAIL_SLACK if tail and not full else tail)] if tail is not None else []

    def one(node: R.NodeRecord):
        return node, transport.call(node.host, ["--run-dir", node.dir, "--log", *args], timeout=120.0)

    warnings = []
    texts: dict[int, list[str]] = {}
    for node, res in parallel(nodes, one):
        if res.ok:
            texts[node.rank] = lines(res.out.decode("utf-8", "replace"))  # escaped: no control character passes
        else:
            warnings.append(f"node {node.rank}: log unavailable: {_failed(node.host, res)}")
    merged = stamps.merge(
        texts, since_s, timestamps, nproc=rec.nproc, nnodes=len(rec.nodes), ranks=ranks, full=full, tail=tail
    )
    return merged, warnings


class Merger:
    """`kgen logs -f`: every stream's lines are held ``REORDER_S``, then released in time order (the
    hosts stamp their lines in UTC). A stream's end notice is stamped when it ended, so it follows the
    lines that stream had sent."""

    def __init__(self, cut: str = "") -> None:
        self.cut = cut  # --since: lines older than this stamp are dropped
        self.held: list[tuple[str, int, int, str]] = []
        self.seq = 0

    def _push(self, ts: str, rank: int, text: str) -> None:
        self.seq += 1
        heapq.heappush(self.held, (ts, rank, self.seq, text))

    def line(self, rank: int, ts: str, text: str) -> None:
        """One line to show (``text``, its prefix included) stamped ``ts`` by its host."""
        if not self.cut or ts >= self.cut:
            self._push(ts, rank, text)

    def ended(self, rank: int, why: str, now: datetime, head: str = "") -> None:
        if why:
            self._push(line_stamp(now), rank, f"{head}(kgen: log stream ended: {printable(why)})")

    def ripe(self, now: datetime, flush: bool = False) -> list[tuple[int, str]]:
        """The lines older than ``now`` - REORDER_S (every line when ``flush``), oldest first."""
        cutoff = line_stamp(now - timedelta(seconds=REORDER_S))
        out = []
        while self.held and (flush or self.held[0][0] <= cutoff or len(self.held) > 4096):
            _, rank, _, text = heapq.heappop(self.held)
            out.append((rank, text))
        return out


def follow(
    rec: R.RunRecord,
    transport: Transport,
    ranks: set[int] | None = None,
    tail: int | None = None,
    since_s: int | None = None,
    timestamps: bool = False,
    full: bool = False,
) -> Iterator[str]:
    """The chosen ranks' lines as they come, until each node's run ended (or its host was lost), merged in time
    order within a short window (``REORDER_S``); the entrypoint re-forms in place, so a node's log goes on
    across re-formations and replacements."""
    nodes = _nodes_of(rec, ranks)
    width = _width(rec)
    args = ["--follow"] + (["--tail", str(tail)] if tail is not None else [])
    if since_s == 0:
        args = ["--follow", "--tail", "0"]
    cut = since_cut(since_s) if since_s else ""
    q: queue.Queue = queue.Queue(maxsize=8192)
    procs = []

    def pump(node: R.NodeRecord) -> None:
        try:
            proc = transport.popen(node.host, ["--run-dir", node.dir, "--log", *args])
        except OSError as exc:
            q.put((node.rank, None, f"cannot start ssh: {exc}"))
            return
        procs.append(proc)
        if proc.stdin is not None:
            try:
                proc.stdin.close()
            except OSError:
                pass
        assert proc.stdout is not None
        for raw in proc.stdout:  # one "\n"-ended line each, escaped (kgen.runs.safetext)
            q.put((node.rank, printable(raw.decode("utf-8", "replace").rstrip("\n").removesuffix("\r")), None))
        proc.wait()
        err = proc.stderr.read().decode("utf-8", "replace") if proc.stderr else ""
        why = transport.classify(node.host, proc.returncode, err) if proc.returncode else ""
        q.put((node.rank, None, why))

    threads = [threading.Thread(target=pump, args=(n,), daemon=True) for n in nodes]
    for t in threads:
        t.start()
    open_streams = len(threads)
    merger = Merger(cut)
    folds = {n.rank: NodeLines(full) for n in nodes}

    def push(node: int, items) -> None:
        for ts, rank, text in items:
            if wanted(rank, node, ranks, rec.nproc):
                merger.line(node, ts, prefix(rank, node, width) + (f"{ts} {text}" if timestamps and ts else text))

    try:
        while open_streams or merger.held:
            try:
                node_rank, line, why = q.get(timeout=0.1)
            except queue.Empty:
                node_rank = None
            now = datetime.now(timezone.utc)
            if node_rank is not None:
                if line is None:
                    open_streams -= 1
                    push(node_rank, folds[node_rank].flush())
                    merger.ended(node_rank, why, now, prefix(None, node_rank, width))
                else:
                    ts, text = split_ts(line)
                    push(node_rank, folds[node_rank].feed(ts, text))
            for _, text in merger.ripe(now, flush=not open_streams):
                yield text
    finally:
        for p in procs:
            try:
                p.kill()  # type: ignore[attr-defined]
            except OSError:
                pass


# ------------------------------------------------------------------------------------------ stop
@dataclass
class NodeStop:
    node: R.NodeRecord
    answer: dict | None
    unreachable: str = ""

    @property
    def stopped(self) -> bool:
        return self.answer is not None and not self.answer.get("left")

    def describe(self) -> str:
        a = self.answer
        if a is None:
            return f"unreachable: {self.unreachable}; its processes may still run: `kgen stop` again once it is back"
        if a.get("missing"):
            return "no run directory on the host (never started, or removed)"
        if a.get("already"):
            return "already stopped (no process of the run left)"
        steps = " then ".join(a.get("steps") or []) or "nothing to signal"
        if a.get("left"):
            return f"NOT stopped: {len(a['left'])} process(es) left after {steps} (pids {a['left'][:8]})"
        return f"stopped: {a.get('found', 0)} process(es) ended in {a.get('took', 0):.1f}s ({steps})"


@dataclass
class NodeStopReport:
    nodes: list[NodeStop]
    took: float = 0.0
    unit: str = "rank"  # what a node is called: "node" with several processes per node

    def who(self, n: NodeStop) -> str:
        return f"{self.unit} {n.node.rank} ({n.node.host})"

    @property
    def all_stopped(self) -> bool:
        return all(n.stopped for n in self.nodes)

    @property
    def unreachable(self) -> list[NodeStop]:
        return [n for n in self.nodes if n.answer is None]

    def summary(self) -> str:
        bad = [f"{self.who(n)}: {n.describe()}" for n in self.nodes if not n.stopped]
        return "; ".join(bad) if bad else "every node stopped"


def stop(
    rec: R.RunRecord,
    transport: Transport,
    grace: float = DEFAULT_GRACE,
    group_stop: bool = True,
) -> NodeStopReport:
    """End every process of the run on every host at once: node 0 gets the deliberate group stop (SIGINT,
    the entrypoint's exit 6, "stopped by user") and every node waits up to GROUP_WAIT s for it; then SIGTERM,
    SIGKILL at ``grace``; each host verifies with a /proc scan that nothing of its node is left."""
    t0 = time.monotonic()
    wait = min(GROUP_WAIT, grace) if group_stop else 0.0

    def one(node: R.NodeRecord) -> NodeStop:
        if not node.dir:
            return NodeStop(node, {"missing": True, "left": []})
        args = ["--run-dir", node.dir, "--stop-node", "--grace", str(grace), "--group-wait", str(wait)]
        if group_stop and node.rank == 0:
            args.append("--interrupt")
        res = transport.call(node.host, args, timeout=grace + 20.0)
        answer = _json_line(res.out) if res.ok else None
        if answer is None:
            return NodeStop(node, None, _failed(node.host, res))
        return NodeStop(node, answer)

    nodes = parallel(rec.nodes, one)
    return NodeStopReport(nodes, time.monotonic() - t0, "node" if rec.nproc > 1 else "rank")


def remove(rec: R.RunRecord, transport: Transport) -> list[str]:
    """Delete every node's run directory, then the local record; the problems, if any (record kept then)."""

    def one(node: R.NodeRecord) -> str:
        if not node.dir:
            return ""
        res = transport.call(node.host, ["--run-dir", node.dir, "--remove-node"], timeout=STATE_TIMEOUT)
        answer = _json_line(res.out) if res.ok else None
        if answer is None:
            return _failed(node.host, res)
        return f"{node.host}: {answer['error']}" if answer.get("error") else ""

    problems = [p for p in parallel(rec.nodes, one) if p]
    if not problems:
        R.remove(rec.name)
        if isinstance(transport, SshTransport):
            transport.close_shared(rec.hosts)
    return problems


# ------------------------------------------------------------------------------------------ list
def list_runs(records: list[R.RunRecord] | None = None) -> list[tuple[R.RunRecord, Verdict]]:
    records = R.all_records() if records is None else records
    return parallel(records, lambda rec: (rec, status(rec)), limit=8)


# ------------------------------------------------------------------------------------------ the engine
def which(rec: R.RunRecord) -> str:
    where = "this machine (--local)" if rec.mode == "local" else f"{len(rec.nodes)} host(s) over ssh"
    return f"bare-metal run {rec.name} on {where}, local record {R.path(rec.name)}"


class BareMetalEngine(LocalRecordEngine):
    """`kgen launch`'s runs (ssh hosts, or this machine): found by their local record, asked on every host."""

    name = "bare-metal"
    what = "bare-metal"
    local = True
    records = R
    kinds: tuple[str, ...] = ()  # started by `kgen launch` (kgen.sdk.launching), never submitted

    def status(self, run: Located, *, read_logs: bool = True) -> RunStatus:
        rec = run.record
        return RunStatus(status(rec, transport_for(rec)), self.name, which(rec))

    def watch(
        self,
        run: Located,
        *,
        read_logs: bool = True,
        first_logs: bool | None = None,
        until_running: bool = False,
        timeout: float | None = None,
    ) -> Iterator[StatusUpdate]:
        """The verdict first, then each change (every host asked every POLL_S), then ``ended`` (the run ended, or
        runs with ``until_running``) or ``last`` (over already at the first look, or ``timeout`` passed first)."""
        rec = run.record
        transport = transport_for(rec)
        deadline = time.monotonic() + timeout if timeout is not None else None
        v = status(rec, transport)
        where = which(rec)
        yield StatusUpdate("first", RunStatus(v, self.name, where))
        if v.state in ENDED:  # over already: the first view was the last word
            yield StatusUpdate("last", RunStatus(v, self.name, where))
            return
        last = v.headline
        while not (v.state in ENDED or (until_running and v.state == "running")):
            if deadline is not None and time.monotonic() >= deadline:
                yield StatusUpdate("last", RunStatus(v, self.name, where))
                return
            time.sleep(POLL_S)
            v = status(rec, transport)
            if v.headline != last:
                last = v.headline
                yield StatusUpdate("change", RunStatus(v, self.name, where))
        yield StatusUpdate("ended", RunStatus(v, self.name, where))

    def logs(self, run: Located, req: LogsRequest, note: Say) -> Iterator[str]:
        rec = run.record
        ranks = set(req.ranks) if req.ranks is not None else None
        if req.previous:
            raise UsageError(
                "is for cluster runs (a bare-metal node's log goes on across restarts)", option="--previous"
            )
        transport = transport_for(rec)
        check_ranks(rec.name, ranks, len(rec.nodes) * max(rec.nproc, 1))
        if not req.follow:
            lines, warnings = logs(rec, transport, ranks, req.tail, req.since_s, req.timestamps, req.full)
            for w in warnings:
                note(w)
            yield from lines
            return
        yield from follow(rec, transport, ranks, req.tail, req.since_s, req.timestamps, req.full)

    def stop(self, run: Located, req: StopRequest, say: Say, note: Say) -> StopReport:
        rec = run.record
        check_grace(req.grace)
        transport = transport_for(rec)
        report = stop(rec, transport, grace=req.grace)
        removed = remove(rec, transport) if req.remove and report.all_stopped else None
        not_stopped = ", ".join(f"{report.unit} {n.node.rank} on {n.node.host}" for n in report.nodes if not n.stopped)
        name = rec.name
        return StopReport(
            self.name,
            lines=[f"{report.who(n)}: {n.describe()}" for n in report.nodes],
            stopped=report.all_stopped,
            left=f"run {name}: not confirmed stopped: {not_stopped}; `kgen stop {name}` again once the host answers",
            removed=removed,
            removed_what="run directories on every host and the local record",
            done=f"run {name} stopped on every node in {report.took:.1f}s (logs kept: kgen logs {name})",
            took=report.took,
        )

    def submit(self, checked, req, say: Say, note: Say):
        raise UsageError("bare-metal runs start with `kgen launch`", option="--kind")

    def list(self, req, note: Say) -> RunList:
        """One `kgen list` row per bare-metal run (its verdict from every host, all runs at once)."""
        from kgen.runs import views

        now = datetime.now(timezone.utc)
        rows = [
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
            for rec, v in list_runs()
        ]
        return RunList(rows, "")


ENGINE = BareMetalEngine()
