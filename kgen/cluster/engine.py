"""The run verbs on a cluster: status (gather, watch), logs, stop, submit (preflight, apply, roll back), list;
``ENGINE``, the cluster engine of the run verbs (kgen.runs.engine.Engine).

One call per kind and verb where the API allows it; the decisions are pure (kgen.cluster.verdict.decide,
kgen.cluster.state). Returns data or yields it; progress lines go to the caller's ``say`` (kgen.sdk
passes them on; only kgen.cli prints). The ``kubernetes`` client is imported by ``connect`` only.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

from kgen.cluster.apply import apply_all, drop_immutable_secret, own_run_secret, preflight, run_secret
from kgen.cluster.errors import ClusterError, MissingClient
from kgen.errors import UsageError
from kgen.runs.engine import (
    ListRequest,
    Located,
    LogsRequest,
    RunList,
    RunRef,
    RunStatus,
    StatusUpdate,
    StopReport,
    StopRequest,
    SubmitRequest,
    SubmitResult,
)
from kgen.runs.verdict import Verdict

Say = Callable[[str], None]
LOG_TAIL_FOR_VERDICT = 200  # lines: a FAIL-STOP line is followed by torchrun's ~35-line traceback
MAX_VERDICT_LOGS = 8  # log tails fetched for the root cause (victims tell who they lost)
CLUSTER_CHECK_S = 3.0  # a run found in a local record is also looked for on a configured cluster this long


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


# ------------------------------------------------------------------------------------------ the engine
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


def _connect(ref: RunRef, max_connections: int = 16):
    return connect(ref.namespace, ref.context, ref.kubeconfig, max_connections=max_connections)


class ClusterEngine:
    """`kgen submit`'s runs on Kubernetes: asked of the API server (the ``kubernetes`` client, loaded by
    ``connect`` only), the engine asked when no local record names a run."""

    name = "cluster"
    what = "cluster"
    local = False
    kinds: tuple[str, ...] = ()  # every kind no other engine submits

    def find(self, ref: RunRef) -> Located | None:
        ns = cluster_has(ref.name, ref.namespace, ref.context, ref.kubeconfig)
        return Located(ref, ns, f"namespace {ns}") if ns is not None else None

    def record_path(self, name: str) -> str:
        return ""

    def check_askable(self, ref: RunRef, missing: str) -> None:
        """No local record of the run: when no cluster can be asked either (no client, no kubeconfig), one
        error says both, so a bare-metal or Slurm user's typo does not read as a cluster setup problem."""
        import importlib.util

        from kgen.cluster.errors import INSTALL_HINT

        if importlib.util.find_spec("kubernetes") is None:
            raise UsageError(f"{missing}; cluster runs need the kubernetes package: {INSTALL_HINT}", option="NAME")
        if not cluster_configured(ref.kubeconfig, ref.context):
            raise UsageError(
                f"{missing}, and no kubeconfig found for a cluster run (not in a pod either)",
                option="NAME",
                hint="`kgen list` shows the runs kgen knows; a cluster run: pass --kubeconfig FILE or set KUBECONFIG",
            )

    def status(self, run: Located, *, read_logs: bool = True) -> RunStatus:
        v, _ = gather(_connect(run.ref), run.ref.name, with_logs=read_logs)
        return RunStatus(v, self.name)

    def watch(
        self,
        run: Located,
        *,
        read_logs: bool = True,
        first_logs: bool | None = None,
        until_running: bool = False,
        timeout: float | None = None,
    ) -> Iterator[StatusUpdate]:
        """Followed by the run's pod and workload watches."""
        cluster = _connect(run.ref)
        name = run.ref.name
        _, raw = gather(cluster, name, with_logs=read_logs if first_logs is None else first_logs)
        for u in watch(cluster, name, raw, not read_logs, until_running=until_running, timeout=timeout):
            yield StatusUpdate(u.kind, RunStatus(u.verdict, self.name))

    def logs(self, run: Located, req: LogsRequest, note: Say) -> Iterator[str]:
        ranks = set(req.ranks) if req.ranks is not None else None
        since_s, tail = req.since_s, req.tail
        if since_s == 0:  # from now on: the API's sinceSeconds must be > 0, and no line is newer than now
            since_s, tail = None, 0
        if req.max_streams < 1:
            raise UsageError(f"must be 1 or more, got {req.max_streams}", option="--max-streams")
        if req.follow and req.previous:
            raise UsageError("cannot follow a previous container", option="--previous", hint="drop -f or --previous")
        cluster = _connect(run.ref, max_connections=req.max_streams + 4)
        yield from logs(
            cluster,
            run.ref.name,
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

    def stop(self, run: Located, req: StopRequest, say: Say, note: Say) -> StopReport:
        """Delete the run's objects (each ``say``'d); nothing left is an error unless ``ignore_not_found``."""
        from kgen.cluster.labels import run_selector

        if req.remove:
            raise UsageError("is for bare-metal and Slurm runs (kgen launch, kgen submit --kind slurm)", option="--rm")
        name = run.ref.name
        cluster = _connect(run.ref)
        deleted = stop_run(cluster, name, req.wait, req.timeout, say, note)
        if not deleted and not req.ignore_not_found:
            raise ClusterError(
                f"no run {name} in namespace {cluster.namespace}: nothing labelled {run_selector(name)} "
                "(stopped already, or never there); nothing was stopped",
                option="NAME",
                hint="`kgen list -A` shows the runs kgen finds; --ignore-not-found makes this exit 0",
            )
        nothing = [f"nothing of run {name} left in namespace {cluster.namespace}: nothing to stop"]
        return StopReport(self.name, lines=[] if deleted else nothing, deleted=deleted, namespace=cluster.namespace)

    def submit(self, checked, req: SubmitRequest, say: Say, note: Say) -> SubmitResult:
        """Apply the run (server-side apply, field manager "kgen": ConfigMap, Service, workload), after checking
        that the cluster serves its kinds and no run of that name exists (``replace`` stops it first). If an
        apply fails, what this submit created is deleted again. The manifest's notes and warnings are
        ``note``'d once the run can be applied."""
        from kgen.render.pipeline import stderr_lines

        spec, docs = checked.spec, checked.docs
        if req.dry_run == "client":  # what would be applied, as kgen render prints it; no cluster is asked
            for line in stderr_lines(checked):
                note(line)
            return SubmitResult(
                checked, False, docs, "nothing was sent to a cluster (--dry-run=server asks the API server)"
            )
        cluster = connect(spec.namespace or req.namespace, req.context, req.kubeconfig)
        preflight(cluster, docs)  # before anything is stopped or applied
        for line in stderr_lines(checked):  # what `kgen render` says on stderr, once the run can be applied
            note(line)
        existing = cluster.workload(spec.name)
        if existing is not None and req.dry_run == "server" and req.replace:
            note(f"dry run: run {spec.name} exists; --replace would stop it first (not stopped)")
            existing = None
        secret = run_secret(spec)  # a StatefulSet's <name>-auth: made here, fresh, before the pods can start
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
            stop_run(cluster, spec.name, True, req.timeout, say, note)
        if secret:
            drop_immutable_secret(cluster, spec.secret_name, say)
        to_apply = [*([secret] if secret else []), *docs]
        answers = apply_all(cluster, to_apply, say, forced=("Secret",))
        if secret:
            workload = next(a for a, d in zip(answers, to_apply, strict=True) if d["kind"] == "StatefulSet")
            own_run_secret(cluster, secret, workload, say, note)
        return SubmitResult(checked, True, docs, "", cluster.namespace)

    def list(self, req: ListRequest, note: Say) -> RunList:
        """The cluster's kgen runs (found by kgen's labels); nothing when no cluster is configured (one that is
        configured and cannot be asked raises)."""
        try:
            cluster = connect(req.namespace, req.context, req.kubeconfig)
            rows = cluster_runs(cluster, req.all_namespaces)
        except (ClusterError, MissingClient):
            if not cluster_configured(req.kubeconfig, req.context):
                return RunList([], "")
            raise
        return RunList(rows, "any namespace" if req.all_namespaces else f"namespace {cluster.namespace}")


ENGINE = ClusterEngine()
