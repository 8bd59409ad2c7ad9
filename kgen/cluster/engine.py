"""The run verbs on a cluster: status (gather, watch), logs, stop, submit (preflight, apply, roll back), list.

One call per kind and verb where the API allows it; the decisions are pure (kgen.cluster.verdict.decide,
kgen.cluster.state). Returns data or yields it; progress lines go to the caller's ``say`` (kgen.sdk
passes them on; only kgen.cli prints). The ``kubernetes`` client is imported by ``connect`` only.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

from kgen.cluster.errors import ClusterError, MissingClient
from kgen.errors import UsageError
from kgen.runs.verdict import Verdict

Say = Callable[[str], None]
LOG_TAIL_FOR_VERDICT = 200  # lines: a FAIL-STOP line is followed by torchrun's ~35-line traceback
MAX_VERDICT_LOGS = 8  # log tails fetched for the root cause (victims tell who they lost)


class Update(NamedTuple):
    """One step of ``watch``: ``first``, ``change`` (the headline changed), then ``final`` (the run ended:
    re-read in full) or ``last`` (the watch ended first)."""

    kind: str
    verdict: Verdict


def connect(namespace, context, kubeconfig, max_connections: int = 16):
    try:
        from kgen.cluster.client import Cluster
    except ImportError as exc:
        if (exc.name or "").split(".")[0] in ("kubernetes", "urllib3"):
            raise MissingClient() from None
        raise
    return Cluster.connect(kubeconfig=kubeconfig, context=context, namespace=namespace, max_connections=max_connections)


# ------------------------------------------------------------------------------------------ status
def gather(cluster, name: str, with_logs: bool = True):
    """Everything the verdict needs, one list call per kind (+ a few log tails when something failed)."""
    from kgen.cluster.verdict import decide

    workload = cluster.workload(name)
    pods = cluster.pods(name)
    if workload is None and not pods:
        raise ClusterError(
            f"no run {name} in namespace {cluster.namespace} (no Job or StatefulSet {name}, no pods labelled "
            f"app.kubernetes.io/instance={name})",
            hint="see `kgen list -A` for the runs kgen finds",
        )
    events = cluster.events()
    logs: dict[str, str] = {}
    if with_logs:
        logs = fetch_verdict_logs(cluster, pods, workload)
    return decide(name, pods, workload, events, logs), (pods, workload, events, logs)


def fetch_verdict_logs(cluster, pods, workload) -> dict[str, str]:
    """Tails of the logs that can tell the root cause: the first fail-stopped ranks and the failed ones;
    for a run without failures, the head of rank 0's log (whether the group formed)."""
    from kgen.cluster import kube_records as V
    from kgen.runs.records import parse_time

    failed = []
    for p in pods:
        for f in V.pod_failures(p):
            failed.append((f.time or parse_time("9999-12-31T00:00:00Z"), f.role != "victim", f.pod, f.source))
    failed.sort()
    wanted: dict[str, bool] = {}
    for _, _, pod, source in failed:
        if len(wanted) >= MAX_VERDICT_LOGS:
            break
        wanted.setdefault(pod, source == "previous container")
    jobs = [(pod, {"tail": LOG_TAIL_FOR_VERDICT, "previous": prev}) for pod, prev in wanted.items()]
    rank0 = [p for p in pods if V.pod_rank(p) == 0 and V.trainer_status(p)]
    if rank0:  # whether (and how often) the group formed: the start of node 0's log, and its end
        newest = max(rank0, key=lambda p: p["metadata"].get("creationTimestamp") or "")["metadata"]["name"]
        jobs += [(newest, {"limit_bytes": 64 * 1024}), (newest, {"tail": LOG_TAIL_FOR_VERDICT})]

    def one(job):
        pod, kw = job
        try:
            return pod, cluster.log(pod, **kw)
        except ClusterError:
            return pod, ""  # a deleted pod or an unreachable node: the verdict works without it

    logs: dict[str, str] = {}
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(jobs)))) as pool:
        for pod, text in pool.map(one, jobs):
            if text and text not in logs.get(pod, ""):
                logs[pod] = f"{logs[pod]}\n{text}" if pod in logs else text
    return logs


def watch(cluster, name, raw, no_logs: bool, until_running: bool = False, timeout=None, until=None) -> Iterator[Update]:
    """Follow the pod and workload watches: the verdict first, then each one whose headline changed, then
    the last one (``final``: re-read in full from fresh lists, events and log tails, when the run ended;
    else ``last``). Ends when the run ends, when it runs (``until_running``), after ``timeout`` seconds,
    or once the threading.Event ``until`` is set (a caller that follows for its own reason)."""
    import queue

    from kgen.cluster.labels import pod_selector
    from kgen.cluster.state import RunState, terminal

    pods, workload, events, logs = raw
    state = RunState(name, pods, workload, events, logs)
    v = state.verdict()
    yield Update("first", v)
    if terminal(v, state.workload) or (until_running and v.state == "running"):
        yield Update("last", v)
        return
    kind = (workload or {}).get("kind") or "Job"
    events_q: queue.Queue = queue.Queue()
    stop = threading.Event()

    def pump(kind_, selector=None, field=None):
        while not stop.is_set():
            try:
                for ev in cluster.watch(kind_, selector=selector, field=field):
                    events_q.put(ev)
                    if stop.is_set():
                        return
            except ClusterError as exc:
                events_q.put({"type": "ERROR", "error": str(exc)})
                return
            events_q.put({"type": "ENDED"})
            stop.wait(1.0)

    threads = [
        threading.Thread(target=pump, args=("Pod", pod_selector(name)), daemon=True),
        threading.Thread(target=pump, args=(kind, None, f"metadata.name={name}"), daemon=True),
    ]
    for t in threads:
        t.start()
    last = v.headline
    deadline = time.monotonic() + timeout if timeout is not None else None
    try:
        while True:
            try:
                ev = events_q.get(timeout=1.0)
            except queue.Empty:
                ev = None
            if deadline and time.monotonic() > deadline:
                break
            if until is not None and until.is_set():
                # the caller's event: what was queued before it happened still counts (drained, applied)
                pending = [ev] if ev is not None else []
                while not events_q.empty():
                    pending.append(events_q.get_nowait())
                for item in pending:
                    if item.get("type") not in ("ENDED", "ERROR"):
                        state.apply(item)
                v = state.verdict()
                break
            if ev is None or ev.get("type") == "ENDED":
                continue
            if ev.get("type") == "ERROR" and "error" in ev:
                raise ClusterError(ev["error"])
            state.apply(ev)
            v = state.verdict()
            if v.headline != last:
                last = v.headline
                yield Update("change", v)
            if terminal(v, state.workload) or (until_running and v.state == "running"):
                break
    finally:
        stop.set()
    if terminal(v, state.workload):
        # the final word from fresh lists, events and log tails (the root cause may be in them)
        state.pods = {p["metadata"]["name"]: p for p in cluster.pods(name)}
        state.workload = cluster.workload(name) or state.workload
        state.events = cluster.events()
        if not no_logs:
            state.logs.update(fetch_verdict_logs(cluster, list(state.pods.values()), state.workload))
        yield Update("final", state.verdict())
    else:
        yield Update("last", v)


# ------------------------------------------------------------------------------------------ stop
STOP_KINDS = ("Job", "StatefulSet", "JobSet", "Service", "ConfigMap", "Secret", "NetworkPolicy", "PodDisruptionBudget")


def stop_run(cluster, name: str, wait: bool, timeout: float, say: Say, note: Say) -> int:
    """Delete every object of the run (foreground propagation); returns how many were deleted. Each deletion
    is ``say``'d, the progress of --wait ``note``'d."""
    from kgen.cluster.labels import run_selector

    found = [(kind, obj) for kind in STOP_KINDS for obj in cluster.list(kind, run_selector(name))]
    pods = cluster.pods(name)
    if not found and not pods:
        return 0  # nothing of that name: the caller says so (never "stopped")
    deleted = 0
    for kind, obj in found:
        if cluster.delete(kind, obj["metadata"]["name"], propagation="Foreground"):
            deleted += 1
            say(f"{kind.lower()}/{obj['metadata']['name']} deleted")
    pods = cluster.pods(name)
    for p in pods:
        if not (p.get("metadata") or {}).get("deletionTimestamp") and cluster.delete("Pod", p["metadata"]["name"]):
            deleted += 1
    if pods:
        say(f"{len(pods)} pod(s) deleting")
    if not wait:
        return deleted
    start = time.monotonic()
    last = None
    while True:
        left = cluster.pods(name)
        if not left:
            say(f"all pods gone after {time.monotonic() - start:.0f}s")
            return deleted
        if time.monotonic() - start > timeout:
            names = ", ".join(p["metadata"]["name"] for p in left[:3]) + (" ..." if len(left) > 3 else "")
            raise ClusterError(
                f"{len(left)} pod(s) still there after {timeout:.0f}s ({names})",
                option="--timeout",
                hint="they may ignore SIGTERM until their grace period ends; check `kgen status`",
            )
        if len(left) != last:
            note(f"waiting: {len(left)} pod(s) terminating ({time.monotonic() - start:.0f}s)")
            last = len(left)
        time.sleep(1.0)


# ------------------------------------------------------------------------------------------ submit
JOBSET_MISSING = "the JobSet CRD is not installed on this cluster (install JobSet v0.10+ or use --kind job)"


def preflight(cluster, docs: list[dict]) -> None:
    """What would make the apply fail half-way, checked before anything is applied: a kind that is a CRD
    (JobSet) must be served; where it is not installed, discovery of its group version answers 404."""
    from kgen.cluster.client import CRD_KINDS

    for kind in dict.fromkeys(d["kind"] for d in docs):
        if kind in CRD_KINDS and not cluster.serves(kind):
            raise ClusterError(JOBSET_MISSING if kind == "JobSet" else f"the {kind} CRD is not installed")


def apply_all(cluster, docs: list[dict], say: Say, forced: tuple[str, ...] = ()) -> list[dict]:
    """Apply the documents in order (ConfigMap, Service, workload) and return the server's answers. When one
    fails, the objects this submit created (201) are deleted again, newest first, so that a failed submit leaves
    nothing behind; objects that already existed (200) are left as they were. Kinds in ``forced`` are applied
    with force: kgen takes over their fields from another manager (a run Secret made by kubectl)."""
    created: list[tuple[str, str]] = []
    answers: list[dict] = []
    for doc in docs:
        doc.setdefault("metadata", {}).setdefault("namespace", cluster.namespace)
        kind, name = doc["kind"], doc["metadata"]["name"]
        try:
            answer, was_created = cluster.apply(doc, force=kind in forced, created=True)
        except ClusterError as exc:
            if not created:
                raise
            undone = rollback(cluster, created)
            raise ClusterError(f"{exc.message}; {undone}", option=exc.option, hint=exc.hint) from None
        if was_created:
            created.append((kind, name))
        answers.append(answer)
        say(f"{kind.lower()}/{name} applied (server-side, field manager kgen)")
    return answers


def drop_immutable_secret(cluster, name: str, say: Say) -> None:
    """An older kgen rendered the run's Secret immutable; one left behind (`kubectl delete statefulset` keeps
    it) can be neither updated nor used again: it is deleted before submit makes a fresh one."""
    old = cluster.get("Secret", name)
    if old is not None and old.get("immutable") and cluster.delete("Secret", name, propagation="Background"):
        say(f"secret/{name} deleted: an immutable one left by an older kgen")


def own_run_secret(cluster, secret: dict, workload: dict, say: Say, note: Say) -> None:
    """Give the run's Secret (applied before the workload, so no pod starts without it) an owner reference to
    the workload, so the garbage collector deletes it with the workload. Without one (the workload's answer has
    no uid, or the patch is refused), `kgen stop` still finds it by its labels."""
    from kgen.render.runsecret import owned_by

    uid = (workload.get("metadata") or {}).get("uid")
    name = secret["metadata"]["name"]
    try:
        if not uid:
            raise ClusterError("the API server's answer has no uid")
        cluster.apply(owned_by(secret, workload), force=True)
    except ClusterError as exc:
        note(
            f"warning: secret/{name} is not owned by {workload.get('kind', '').lower()} ({exc.message}); "
            f"`kgen stop` deletes it with the run"
        )
        return
    say(f"secret/{name} owned by {workload['kind'].lower()}/{workload['metadata']['name']} (deleted with it)")


def rollback(cluster, created: list[tuple[str, str]]) -> str:
    """Delete what this submit created, newest first; a one-line account of it."""
    done, failed = [], []
    for kind, name in reversed(created):
        try:
            cluster.delete(kind, name, propagation="Background")
            done.append(f"{kind.lower()}/{name}")
        except ClusterError:
            failed.append(f"{kind.lower()}/{name}")
    if not failed:
        return f"rolled back: {', '.join(done)} deleted again, nothing of this submit is left"
    deleted = f"{', '.join(done)} deleted again, but " if done else ""
    return f"rolled back: {deleted}{', '.join(failed)} could not be deleted (`kgen stop` the run)"


# ------------------------------------------------------------------------------------------ list
def cluster_runs(cluster, all_namespaces: bool) -> list[dict]:
    """One `kgen list` row per kgen run on the cluster (in every namespace with ``all_namespaces``)."""
    from datetime import datetime, timezone

    from kgen.cluster.kube_records import INSTANCE_LABEL
    from kgen.cluster.labels import MANAGED_SELECTOR
    from kgen.cluster.verdict import decide
    from kgen.runs import views

    workloads = [w for k in ("Job", "StatefulSet", "JobSet") for w in cluster.list(k, MANAGED_SELECTOR, all_namespaces)]
    pods = cluster.list("Pod", MANAGED_SELECTOR, all_namespaces)
    by_run: dict[tuple[str, str], list] = {}
    for p in pods:
        meta = p["metadata"]
        by_run.setdefault((meta.get("namespace", ""), (meta.get("labels") or {}).get(INSTANCE_LABEL, "")), []).append(p)
    now = datetime.now(timezone.utc)
    runs = []
    for wl in sorted(workloads, key=lambda w: (w["metadata"].get("namespace", ""), w["metadata"]["name"])):
        meta = wl["metadata"]
        kind = wl.get("kind") or ("Job" if "completions" in (wl.get("spec") or {}) else "StatefulSet")
        run = (meta.get("labels") or {}).get(INSTANCE_LABEL, meta["name"])
        v = decide(run, by_run.get((meta.get("namespace", ""), run), []), wl, kind=kind)
        runs.append(
            {
                "namespace": meta.get("namespace", ""),
                "name": run,
                "kind": kind,
                "shape": views.shape(wl),
                "state": v.state,
                "age": views.age(meta.get("creationTimestamp"), now),
                "headline": v.headline,
                "ranks_up": v.ranks_up,
                "ranks_expected": v.ranks_expected,
                "reformations": v.reformations,
            }
        )
    return runs


# ------------------------------------------------------------------------------------------ logs
def logs(
    cluster,
    name: str,
    ranks: set[int] | None,
    tail,
    since_s,
    timestamps: bool,
    previous: bool,
    follow: bool,
    max_streams: int,
    note: Say,
    full: bool = False,
) -> Iterator[str]:
    """Every pod's log, merged by time, each line after its process's prefix (kgen.runs.logtext); with ``follow``
    until the run ends (new pods of a re-formed group too). A log that cannot be read is ``note``'d and left out."""
    from kgen.cluster import logs as L
    from kgen.cluster.kube_records import pod_nproc
    from kgen.cluster.labels import pod_selector
    from kgen.runs.logtext import TAIL_SLACK
    from kgen.runs.views import rank_width

    rank_set = ranks
    pods = cluster.pods(name)
    workload = cluster.workload(name) if follow or not pods else None
    if not pods and workload is None:
        raise ClusterError(
            f"no run {name} in namespace {cluster.namespace}", hint="see `kgen list -A` for the runs kgen finds"
        )
    nproc = pod_nproc(pods)
    sources = L.select_sources(pods, rank_set, previous, nproc)
    expected = [p for p in pods if L.started(p) or previous]  # an unstarted container has no log yet
    if rank_set is not None and not sources:
        raise UsageError(f"no pod of run {name} has rank {sorted(rank_set)}", option="--rank")
    width = rank_width([(max((s.rank for s in sources), default=0) + 1) * nproc - 1])
    asked = tail + TAIL_SLACK if tail and not full else tail  # a cut shutdown report still folds
    if not follow:
        ok_sources = [s for s in sources if any(p["metadata"]["name"] == s.pod for p in expected)]

        def one(s):
            try:
                return s, cluster.log(s.pod, tail=asked, since=since_s, timestamps=True, previous=s.previous), None
            except ClusterError as exc:
                return s, "", exc

        with ThreadPoolExecutor(max_workers=max(1, min(max_streams, len(ok_sources) or 1))) as pool:
            results = list(pool.map(one, ok_sources))
        for s, _, exc in results:
            if exc is not None:
                note(f"rank {s.rank} (pod {s.pod}): log unavailable: {exc}")
        texts = {s.rank: text for s, text, exc in results if exc is None}
        yield from L.merge(texts, timestamps=timestamps, full=full, ranks=rank_set, nproc=nproc, tail=tail, width=width)
        return
    initial = {(s.pod, s.restarts) for s in sources}

    def open_stream(s):
        first = (s.pod, s.restarts) in initial
        return cluster.log_stream(
            s.pod, follow=True, tail=tail if first else None, since=since_s if first else None, timestamps=True
        )

    def run_over() -> bool:
        from kgen.cluster.state import terminal
        from kgen.cluster.verdict import decide

        wl = cluster.workload(name)
        if wl is None:
            return True
        return terminal(decide(name, [], wl), wl)

    follower = L.Follower(
        open_stream,
        lambda: cluster.watch("Pod", selector=pod_selector(name)),
        run_over,
        ranks=rank_set,
        max_streams=max_streams,
        width=width,
        timestamps=timestamps,
        full=full,
        nproc=nproc,
    )
    live = [s for s in sources if any(p["metadata"]["name"] == s.pod for p in expected)]
    if len(live) > max_streams:
        note(f"{len(live)} ranks, following {max_streams} at a time (--max-streams)")
    yield from follower.run(live)
