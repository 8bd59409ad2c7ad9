"""`kgen logs`: every pod's log merged, each line after its process's prefix (kgen.runs.logtext: ``[R]`` for
training process R, ``[node N]`` for pod N's own lines).

``merge`` (pure) orders the lines of several finished logs by their API timestamps (``timestamps=true``
is always requested; the prefix is dropped again unless --timestamps) and keeps each pod's own order.
``Follower`` follows all pods at once with a bounded thread pool, and picks up new pods (a re-formed
Job generation) and restarted containers (StatefulSet) from a pod watch. It yields text lines; only
the CLI prints. Lines are split on "\n" only and escaped (kgen.runs.safetext): a log never passes a
control character to the terminal.
"""

from __future__ import annotations

import heapq
import queue
import re
import signal
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from kgen.cluster.kube_records import pod_rank, trainer_status
from kgen.runs.logtext import NodeLines, nodes_of, prefix, shown, wanted
from kgen.runs.safetext import lines, printable
from kgen.runs.views import rank_width

TS = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z) ")


@dataclass(frozen=True)
class Source:
    """One log to show: a pod's current (or previous) container."""

    rank: int
    pod: str
    restarts: int = 0
    previous: bool = False
    created: str = ""  # the pod's creationTimestamp


def split_ts(line: str) -> tuple[str | None, str]:
    if len(line) < 21 or line[4] != "-" or line[10] != "T":  # cheap: most calls are on stamped lines
        return None, line
    m = TS.match(line)
    return (m.group(1), line[m.end() :]) if m else (None, line)


def _norm(ts: str) -> str:
    # 2026-11-22T15:04:52.123456789Z and ...:37Z sort right once the fraction is padded
    head, _, frac = ts.rstrip("Z").partition(".")
    return f"{head}.{(frac + '000000000')[:9]}"


def merge(
    logs: Mapping[int, str],
    timestamps: bool = False,
    *,
    full: bool = False,
    ranks: set[int] | None = None,
    nproc: int = 1,
    tail: int | None = None,
    width: int | None = None,
) -> list[str]:
    """Lines of finished logs (node rank -> text), ordered by time, each after its process's prefix. ``tail``:
    the last lines of each node's log as shown; ``ranks``: only those processes (and their nodes' own lines)."""
    width = width if width is not None else rank_width([(max(logs, default=0) + 1) * nproc - 1])
    streams = []
    for node, text in sorted(logs.items()):
        last = ""
        keyed = []
        for line in lines(text):  # split on "\n" only, escaped (kgen.runs.safetext)
            ts, body = split_ts(line)
            last = _norm(ts) if ts else last
            keyed.append(((last, ts or ""), body))
        out = [
            (key[0], node, i, prefix(rank, node, width) + (f"{key[1]} {body}" if timestamps and key[1] else body))
            for i, (key, rank, body) in enumerate(shown(keyed, full))
            if wanted(rank, node, ranks, nproc)
        ]
        streams.append(out[-tail:] if tail else out if tail is None else [])
    return [line for _, _, _, line in heapq.merge(*streams)]


def select_sources(pods: Iterable[Mapping], ranks: set[int] | None, previous: bool, nproc: int = 1) -> list[Source]:
    """The newest pod per node rank whose container has started (or, with --previous, restarted); ``ranks``:
    only the pods that hold those global ranks."""
    newest: dict[int, Mapping] = {}
    for p in pods:
        r = pod_rank(p)
        chosen = nodes_of(ranks, nproc)
        if r is None or (chosen is not None and r not in chosen):
            continue
        key = ((p.get("metadata") or {}).get("creationTimestamp") or "", p["metadata"]["name"])
        cur = newest.get(r)
        if cur is None or key > ((cur.get("metadata") or {}).get("creationTimestamp") or "", cur["metadata"]["name"]):
            newest[r] = p
    out = []
    for r, p in sorted(newest.items()):
        cs = trainer_status(p) or {}
        restarts = int(cs.get("restartCount") or 0)
        if previous and not (cs.get("lastState") or {}).get("terminated") and not restarts:
            continue
        out.append(Source(r, p["metadata"]["name"], restarts, previous, p["metadata"].get("creationTimestamp") or ""))
    return out


def start_deaf(thread: threading.Thread) -> None:
    """Start a thread that never takes SIGINT (it inherits a mask that blocks it). The kernel gives a process's
    signal to any thread that does not block it; one taken by a stream thread only marks it for the main thread,
    which then acts on it after its current call: up to a whole HTTP read timeout (run_over's request). With
    every kgen thread deaf to it, Ctrl-C always interrupts the main thread's call at once."""
    if not hasattr(signal, "pthread_sigmask"):  # Windows: no per-thread masks
        thread.start()
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        thread.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)  # a SIGINT that came meanwhile is delivered now


def started(pod: Mapping) -> bool:
    state = (trainer_status(pod) or {}).get("state") or {}
    return "running" in state or "terminated" in state


class Follower:
    """Follow many pods' logs at once; yields ``[rank] line`` strings until every stream has ended
    and ``run_over()`` says the run will start no more pods.

    ``open_stream(source) -> iterable of bytes lines``, ``watch_pods() -> iterable of watch events``
    (may end; it is restarted while the run goes on), ``run_over() -> bool``.
    """

    def __init__(
        self,
        open_stream: Callable[[Source], Iterable[bytes]],
        watch_pods: Callable[[], Iterable[Mapping]] | None,
        run_over: Callable[[], bool],
        ranks: set[int] | None = None,
        max_streams: int = 128,
        width: int = 1,
        timestamps: bool = False,
        full: bool = False,
        nproc: int = 1,
    ):
        self.open_stream = open_stream
        self.watch_pods = watch_pods
        self.run_over = run_over
        self.ranks = ranks
        self.width = width
        self.timestamps = timestamps
        self.full = full
        self.nproc = nproc
        # daemon workers (not a ThreadPoolExecutor: its threads are joined at exit, so Ctrl-C would
        # wait for every followed stream to end); at most max_streams streams are open at once
        self.max_streams = max(1, max_streams)
        self.pending: queue.Queue = queue.Queue()
        self.workers: list[threading.Thread] = []
        self.lines: queue.Queue = queue.Queue(maxsize=4096)  # blocks of lines; bounded memory
        self.lock = threading.Lock()
        self.seen: set[tuple[str, int]] = set()
        self.newest: dict[int, str] = {}  # rank -> creationTimestamp of its newest followed pod
        self.restarts: dict[str, int] = {}  # pod -> restartCount of its newest followed container
        self.active = 0
        self.stopping = threading.Event()
        self.errors: list[str] = []

    def add(self, source: Source) -> None:
        key = (source.pod, source.restarts)
        with self.lock:
            chosen = nodes_of(self.ranks, self.nproc)
            if key in self.seen or (chosen is not None and source.rank not in chosen):
                return
            if source.created and source.created < self.newest.get(source.rank, ""):
                return  # an older generation of a rank already followed
            if source.restarts < self.restarts.get(source.pod, -1):
                return  # an earlier container of a pod already followed
            self.restarts[source.pod] = source.restarts
            self.newest[source.rank] = max(source.created, self.newest.get(source.rank, ""))
            self.seen.add(key)
            self.active += 1
            if len(self.workers) < self.max_streams:
                worker = threading.Thread(target=self._work, name="kgen-log", daemon=True)
                self.workers.append(worker)
                start_deaf(worker)
        self.pending.put(source)

    def _work(self) -> None:
        while not self.stopping.is_set():
            try:
                source = self.pending.get(timeout=0.5)
            except queue.Empty:
                continue
            self._pump(source)

    def _pump(self, source: Source) -> None:
        node = source.rank
        fold = NodeLines(self.full)
        heads: dict[int | None, str] = {}

        def show(items) -> list[str]:
            out = []
            for ts, rank, body in items:
                if self.ranks is not None and not wanted(rank, node, self.ranks, self.nproc):
                    continue
                head = heads.get(rank)
                if head is None:
                    head = heads[rank] = prefix(rank, node, self.width)
                out.append(head + (f"{ts} {body}" if self.timestamps and ts else body))
            return out

        try:
            for block in self.open_stream(source):  # whole lines, one or many per block
                if self.stopping.is_set():
                    break
                out: list[str] = []
                for line in lines(block.decode("utf-8", "replace")):  # escaped (kgen.runs.safetext)
                    ts, body = split_ts(line)
                    out.extend(show(fold.feed(ts or "", body)))
                if out:
                    self.lines.put(out)
            rest = show(fold.flush())
            if rest:
                self.lines.put(rest)
        except Exception as exc:  # one broken stream must not end the others: report it inline
            self.lines.put(
                [f"{prefix(None, node, self.width)}(kgen: log of pod {source.pod} unavailable: {printable(str(exc))})"]
            )
        finally:
            with self.lock:
                self.active -= 1
            self.lines.put(None)

    def _watch(self) -> None:
        while not self.stopping.is_set():
            try:
                for ev in self.watch_pods():  # type: ignore[misc]
                    if self.stopping.is_set():
                        return
                    pod = ev.get("object") or {}
                    rank = pod_rank(pod)
                    if ev.get("type") in ("ADDED", "MODIFIED") and started(pod) and rank is not None:
                        cs = trainer_status(pod) or {}
                        meta = pod["metadata"]
                        restarts = int(cs.get("restartCount") or 0)
                        self.add(Source(rank, meta["name"], restarts, False, meta.get("creationTimestamp") or ""))
            except Exception as exc:
                self.errors.append(str(exc))
                return
            if self.run_over():
                return
            self.stopping.wait(1.0)

    def run(self, initial: Iterable[Source]) -> Iterator[str]:
        for s in initial:
            self.add(s)
        watcher = None
        if self.watch_pods is not None:
            watcher = threading.Thread(target=self._watch, name="kgen-log-watch", daemon=True)
            start_deaf(watcher)
        try:
            while True:
                try:
                    item = self.lines.get(timeout=0.5)
                except queue.Empty:
                    item = None
                if item is not None:
                    yield from item
                    continue
                with self.lock:
                    idle = self.active == 0
                if idle and self.lines.empty() and (watcher is None or not watcher.is_alive()):
                    return
                if idle and self.lines.empty() and self.run_over():
                    return
        finally:
            self.stopping.set()
