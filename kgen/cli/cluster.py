"""The cluster verbs: `kgen status`, `logs`, `stop`, `submit`, `list` (issue 10).

Thin click commands: flags -> kgen.cluster.client (the only importer of `kubernetes`, imported
lazily here so that `kgen render`/`lint`/`--help` never load it) -> kgen.cluster.verdict -> views.

Exit codes of `kgen status` (and of `--watch`), contract C2, from kgen.runs.verdict.status_exit: 0 unless
the run failed (1); with --exit-code the state's own code: 0 succeeded, 1 failed, 3 running (starting,
running, degraded or restarting), 4 pending (unschedulable, image pull errors). 2 is always bad input or a
cluster error (no kubeconfig, unreachable, forbidden, unknown run), one line on stderr.
"""

from __future__ import annotations

import re
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import click

from kgen.cli.baremetal import bare_metal_run, on_option
from kgen.cli.options import KgenCommand, check_format, output_format_option
from kgen.cluster.errors import ClusterError, MissingClient
from kgen.errors import UsageError

STATUS_FORMATS = LIST_FORMATS = ("text", "wide", "json", "yaml")  # kgen.runs.views (not imported here: lazy)
SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
LOG_TAIL_FOR_VERDICT = 200  # lines: a FAIL-STOP line is followed by torchrun's ~35-line traceback
MAX_VERDICT_LOGS = 8  # log tails fetched for the root cause (victims tell who they lost)


def cluster_options(f):
    f = click.option("--kubeconfig", metavar="FILE", help="Kubeconfig file (default $KUBECONFIG, ~/.kube/config).")(f)
    f = click.option("--context", metavar="NAME", help="Kubeconfig context to use (default: the current one).")(f)
    f = click.option(
        "-n", "--namespace", metavar="NS", help="Namespace (default: the context's, in a pod its own, else default)."
    )(f)
    return f


def connect(namespace, context, kubeconfig, max_connections: int = 16):
    try:
        from kgen.cluster.client import Cluster
    except ImportError as exc:
        if (exc.name or "").split(".")[0] in ("kubernetes", "urllib3"):
            raise MissingClient() from None
        raise
    return Cluster.connect(kubeconfig=kubeconfig, context=context, namespace=namespace, max_connections=max_connections)


def _warn(text: str) -> None:
    click.echo(f"kgen: {text}", err=True)


# ------------------------------------------------------------------------------------------ status
def gather(cluster, name: str, with_logs: bool = True):
    """Everything the verdict needs, one list call per kind (+ a few log tails when something failed)."""
    from kgen.cluster import verdict as V

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
    return V.decide(name, pods, workload, events, logs), (pods, workload, events, logs)


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


STATUS_EPILOG = """\b
Examples:
  kgen status llama-70b                 # one row per node rank, then the verdict
  kgen status llama-70b -o wide         # ... with generation, pod IP and readiness
  kgen status llama-70b -o json | jq .root_cause
  kgen status llama-70b --watch         # follow until the run ends
  kgen status llama-70b -n team-a --context prod
  kgen status llama-70b --exit-code || echo "not done: $?"   # scripts: 3 running, 4 pending
  kgen status my-ssh-run                # a kgen launch run: every host asked over ssh

\b
Exit codes: 0 unless the run failed (1); 2 bad input, cluster error or no such run.
With --exit-code: 0 succeeded, 1 failed, 3 running (starting, running, degraded,
restarting), 4 pending (unschedulable, image pull errors).
"""


@click.command("status", cls=KgenCommand, epilog=STATUS_EPILOG, context_settings=SETTINGS)
@click.argument("name")
@cluster_options
@output_format_option(STATUS_FORMATS, "text", help="Output format (wide: also generation, pod IP, readiness).")
@click.option(
    "-w", "--watch", is_flag=True, help="Follow the run's pods and workload; print each change until it ends."
)
@click.option("--no-logs", is_flag=True, help="Do not read log tails (FAIL-STOP lines) for the root cause.")
@click.option("--brief", is_flag=True, help="Only the verdict, no row per rank.")
@click.option(
    "--exit-code",
    "state_codes",
    is_flag=True,
    help="Exit with the state's code: 0 succeeded, 1 failed or stopped, 3 running, 4 pending "
    "(default: 0 unless it failed or was stopped).",
)
@on_option
def status(name, namespace, context, kubeconfig, output_format, watch, no_logs, brief, state_codes, on):
    """Show a run: one row per node rank and one verdict line (root cause of a failure).

    NAME is the run name (kgen render --name, kgen launch --name): a bare-metal run of that name
    (kgen launch's local record) is asked on its hosts; otherwise its Job or StatefulSet and its pods
    are found on the cluster by kgen's labels.
    """
    from kgen.runs import views
    from kgen.runs.verdict import status_exit

    check_format(output_format, STATUS_FORMATS, files=False)
    rec = bare_metal_run(name, on, namespace, context, kubeconfig)
    if rec is not None:
        from kgen.cli.baremetal import status_baremetal

        sys.exit(status_baremetal(rec, output_format, watch, brief, state_codes))
    cluster = connect(namespace, context, kubeconfig)
    v, raw = gather(cluster, name, with_logs=not no_logs)
    if not watch:
        click.echo(views.status_view(v, output_format, rows=not brief), nl=False)
        sys.exit(status_exit(v.state, state_codes))
    v = watch_run(cluster, name, raw, output_format, brief, no_logs)
    sys.exit(status_exit(v.state, state_codes))


def watch_run(cluster, name, raw, output_format, brief, no_logs, until_running: bool = False, timeout=None, until=None):
    """Follow the pod and workload watches; print each new verdict line; return the final verdict.
    Ends when the run ends, when it runs (``until_running``), after ``timeout`` seconds, or once the
    threading.Event ``until`` is set (a caller that follows for its own reason)."""
    import queue

    from kgen.cluster.labels import pod_selector
    from kgen.cluster.state import RunState, terminal
    from kgen.runs import views

    pods, workload, events, logs = raw
    state = RunState(name, pods, workload, events, logs)
    v = state.verdict()
    click.echo(views.status_view(v, output_format, rows=not brief, document=True), nl=False)
    if terminal(v, state.workload) or (until_running and v.state == "running"):
        return v
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
                stamp = time.strftime("%H:%M:%S", time.gmtime())
                if output_format in ("text", "wide"):
                    click.echo(f"{stamp}  {v.headline}")
                else:
                    click.echo(views.status_view(v, output_format, document=True), nl=False)
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
        v = state.verdict()
        if output_format in ("text", "wide"):
            click.echo("")
        click.echo(views.status_view(v, output_format, rows=not brief, document=True), nl=False)
    return v


# ------------------------------------------------------------------------------------------ logs
LOGS_EPILOG = """\b
Examples:
  kgen logs llama-70b                       # every rank, merged by time, "[rank] " prefixes
  kgen logs llama-70b -f                    # follow all pods at once, and new pods of re-formed groups
  kgen logs llama-70b --rank 0 --rank 17-19 --tail 100
  kgen logs llama-70b --since 10m --timestamps
  kgen logs llama-70b --previous            # the containers before their last restart
  kgen logs my-ssh-run -f --rank 0          # a kgen launch run: every host's log over ssh
"""


def parse_ranks(values) -> set[int] | None:
    if not values:
        return None
    out: set[int] = set()
    for value in values:
        for part in str(value).split(","):
            part = part.strip()
            m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
            if not m:
                raise UsageError(f'expected N, N-M or a comma list, got "{value}"', option="--rank", hint="e.g. 0,3-5")
            lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
            if hi < lo:
                raise UsageError(f'empty range "{part}"', option="--rank", hint="write the lower rank first")
            out.update(range(lo, hi + 1))
    return out


def parse_duration(value: str | None) -> int | None:
    """--since in seconds; 0 (0s, 0m ...) means from now on: no line written before."""
    if value is None:
        return None
    m = re.fullmatch(r"(\d+)([smhd]?)", value.strip())
    if not m:
        raise UsageError(f'expected a duration like 30s, 10m or 2h (0s: from now on), got "{value}"', option="--since")
    return int(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]


@click.command("logs", cls=KgenCommand, epilog=LOGS_EPILOG, context_settings=SETTINGS)
@click.argument("name")
@cluster_options
@click.option("-f", "--follow", is_flag=True, help="Follow every rank's log until the run ends.")
@click.option("--rank", "ranks", multiple=True, metavar="N[-M][,..]", help="Only these node ranks (repeatable).")
@click.option("--tail", type=int, metavar="N", help="The last N lines of each rank.")
@click.option(
    "--since", metavar="DURATION", help="Only lines newer than DURATION (30s, 10m, 2h; 0s: from now on, with -f)."
)
@click.option("--timestamps", is_flag=True, help="Show the API server's timestamp on every line.")
@click.option("-p", "--previous", is_flag=True, help="The previous container of each rank (after a restart).")
@click.option(
    "--max-streams", default=128, show_default=True, metavar="N", type=int, help="Concurrent log streams at most."
)
@on_option
def logs(name, namespace, context, kubeconfig, follow, ranks, tail, since, timestamps, previous, max_streams, on):
    """Every rank's log, merged, each line prefixed with its node rank."""
    from kgen.cluster import logs as L
    from kgen.cluster.labels import pod_selector
    from kgen.runs.views import rank_width

    rank_set = parse_ranks(ranks)
    since_s = parse_duration(since)
    if tail is not None and tail < 0:
        raise UsageError(f"must be 0 or more, got {tail}", option="--tail")
    rec = bare_metal_run(name, on, namespace, context, kubeconfig)
    if rec is not None:
        from kgen.cli.baremetal import logs_baremetal

        if previous:
            raise UsageError(
                "is for cluster runs (a bare-metal node's log goes on across restarts)", option="--previous"
            )
        logs_baremetal(rec, follow, rank_set, tail, since_s, timestamps)
        return
    if since_s == 0:  # from now on: the API's sinceSeconds must be > 0, and no line is newer than now
        since_s, tail = None, 0
    if max_streams < 1:
        raise UsageError(f"must be 1 or more, got {max_streams}", option="--max-streams")
    if follow and previous:
        raise UsageError("cannot follow a previous container", option="--previous", hint="drop -f or --previous")
    cluster = connect(namespace, context, kubeconfig, max_connections=max_streams + 4)
    pods = cluster.pods(name)
    workload = cluster.workload(name) if follow or not pods else None
    if not pods and workload is None:
        raise ClusterError(
            f"no run {name} in namespace {cluster.namespace}", hint="see `kgen list -A` for the runs kgen finds"
        )
    sources = L.select_sources(pods, rank_set, previous)
    expected = [p for p in pods if L.started(p) or previous]  # an unstarted container has no log yet
    if rank_set is not None and not sources:
        raise UsageError(f"no pod of run {name} has rank {sorted(rank_set)}", option="--rank")
    width = rank_width([s.rank for s in sources] or [0])
    if not follow:
        ok_sources = [s for s in sources if any(p["metadata"]["name"] == s.pod for p in expected)]

        def one(s):
            try:
                return s, cluster.log(s.pod, tail=tail, since=since_s, timestamps=True, previous=s.previous), None
            except ClusterError as exc:
                return s, "", exc

        with ThreadPoolExecutor(max_workers=max(1, min(max_streams, len(ok_sources) or 1))) as pool:
            results = list(pool.map(one, ok_sources))
        for s, _, exc in results:
            if exc is not None:
                _warn(f"rank {s.rank} (pod {s.pod}): log unavailable: {exc}")
        merged = L.merge({s.rank: text for s, text, exc in results if exc is None}, timestamps=timestamps)
        for line in merged:
            click.echo(line)
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
    )
    live = [s for s in sources if any(p["metadata"]["name"] == s.pod for p in expected)]
    if len(live) > max_streams:
        _warn(f"{len(live)} ranks, following {max_streams} at a time (--max-streams)")
    for line in follower.run(live):
        click.echo(line)


# ------------------------------------------------------------------------------------------ stop
STOP_EPILOG = """\b
Examples:
  kgen stop llama-70b                 # delete the workload, Service, ConfigMap, Secret, NetworkPolicy, PDB, pods
  kgen stop llama-70b --wait          # ... and wait (at most --timeout) until the pods are gone
  kgen stop llama-70b -n team-a       # stopping a stopped run says so and succeeds
  kgen stop my-ssh-run --rm           # a kgen launch run: every process on every host, then its files
"""

STOP_KINDS = ("Job", "StatefulSet", "JobSet", "Service", "ConfigMap", "Secret", "NetworkPolicy", "PodDisruptionBudget")


def stop_run(cluster, name: str, wait: bool, timeout: float) -> int:
    """Delete every object of the run (foreground propagation); returns how many were deleted."""
    from kgen.cluster.labels import run_selector

    deleted = 0
    for kind in STOP_KINDS:
        for obj in cluster.list(kind, run_selector(name)):
            if cluster.delete(kind, obj["metadata"]["name"], propagation="Foreground"):
                deleted += 1
                click.echo(f"{kind.lower()}/{obj['metadata']['name']} deleted")
    pods = cluster.pods(name)
    for p in pods:
        if not (p.get("metadata") or {}).get("deletionTimestamp") and cluster.delete("Pod", p["metadata"]["name"]):
            deleted += 1
    if pods:
        click.echo(f"{len(pods)} pod(s) deleting")
    if not wait:
        return deleted
    start = time.monotonic()
    last = None
    while True:
        left = cluster.pods(name)
        if not left:
            click.echo(f"all pods gone after {time.monotonic() - start:.0f}s")
            return deleted
        if time.monotonic() - start > timeout:
            names = ", ".join(p["metadata"]["name"] for p in left[:3]) + (" ..." if len(left) > 3 else "")
            raise ClusterError(
                f"{len(left)} pod(s) still there after {timeout:.0f}s ({names})",
                option="--timeout",
                hint="they may ignore SIGTERM until their grace period ends; check `kgen status`",
            )
        if len(left) != last:
            _warn(f"waiting: {len(left)} pod(s) terminating ({time.monotonic() - start:.0f}s)")
            last = len(left)
        time.sleep(1.0)


def check_timeout(timeout: float) -> None:
    if not timeout >= 0:  # also NaN
        raise UsageError(f"must be 0 or more seconds, got {timeout:g}", option="--timeout", hint="e.g. --timeout 600")


@click.command("stop", cls=KgenCommand, epilog=STOP_EPILOG, context_settings=SETTINGS)
@click.argument("name")
@cluster_options
@click.option("--wait", is_flag=True, help="Wait until the run's pods are gone.")
@click.option("--timeout", default=300.0, show_default=True, metavar="SECONDS", help="Bound for --wait.")
@click.option(
    "--grace",
    default=10.0,
    show_default=True,
    metavar="SECONDS",
    help="Bare metal: SIGKILL what is left this long after the stop began.",
)
@click.option("--rm", "remove", is_flag=True, help="Bare metal: then delete the run directories and the record.")
@on_option
def stop(name, namespace, context, kubeconfig, wait, timeout, grace, remove, on):
    """Stop a run: delete its workload, Service, ConfigMap, Secret, NetworkPolicy, PDB and pods (foreground);
    a bare-metal run: end every process of it on every host (group stop, SIGTERM, SIGKILL after --grace)."""
    check_timeout(timeout)
    rec = bare_metal_run(name, on, namespace, context, kubeconfig)
    if rec is not None:
        from kgen.cli.baremetal import stop_baremetal

        if not 0 <= grace <= 3600:
            raise UsageError(f"must be between 0 and 3600 seconds, got {grace:g}", option="--grace")
        sys.exit(stop_baremetal(rec, grace, remove))
    if remove:
        raise UsageError("is for bare-metal runs (kgen launch)", option="--rm")
    cluster = connect(namespace, context, kubeconfig)
    if not stop_run(cluster, name, wait, timeout):
        click.echo(f"run {name} is already stopped: nothing of it left in namespace {cluster.namespace}")


# ------------------------------------------------------------------------------------------ submit
JOBSET_MISSING = "the JobSet CRD is not installed on this cluster (install JobSet v0.10+ or use --kind job)"


def preflight(cluster, docs: list[dict]) -> None:
    """What would make the apply fail half-way, checked before anything is applied: a kind that is a CRD
    (JobSet) must be served; where it is not installed, discovery of its group version answers 404."""
    from kgen.cluster.client import CRD_KINDS

    for kind in dict.fromkeys(d["kind"] for d in docs):
        if kind in CRD_KINDS and not cluster.serves(kind):
            raise ClusterError(JOBSET_MISSING if kind == "JobSet" else f"the {kind} CRD is not installed")


def apply_all(cluster, docs: list[dict]) -> None:
    """Apply the documents in order (ConfigMap, Service, workload). When one fails, the objects this submit
    created (201) are deleted again, newest first, so that a failed submit leaves nothing behind; objects that
    already existed (200) are left as they were."""
    created: list[tuple[str, str]] = []
    for doc in docs:
        doc.setdefault("metadata", {}).setdefault("namespace", cluster.namespace)
        kind, name = doc["kind"], doc["metadata"]["name"]
        try:
            was_created = cluster.apply(doc, created=True)[1]
        except ClusterError as exc:
            if not created:
                raise
            undone = rollback(cluster, created)
            raise ClusterError(f"{exc.message}; {undone}", option=exc.option, hint=exc.hint) from None
        if was_created:
            created.append((kind, name))
        click.echo(f"{kind.lower()}/{name} applied (server-side, field manager kgen)")


def print_dry_run(docs: list[dict], outcome: str) -> None:
    """The objects of a dry run as YAML on stdout (the API server's answers for --dry-run=server), one line
    on stderr per object and what happened."""
    from kgen.yamlio import dump_yaml

    click.echo(dump_yaml(docs), nl=False)
    names = ", ".join(f"{d.get('kind', '?').lower()}/{(d.get('metadata') or {}).get('name')}" for d in docs)
    click.echo(f"kgen: dry run: {names} would be applied (server-side, field manager kgen); {outcome}", err=True)


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


SUBMIT_EPILOG = """\b
Examples:
  kgen submit --preset 4x8 --name llama-70b --image ghcr.io/me/train:1.4 -- train.py --lr 3e-4
  kgen submit --nodes 2 --gpus 0 --wait         # the smoke test; wait until every rank runs
  kgen submit -f prod.yaml --name llama-70b --replace   # stop the old run of that name first
  kgen submit --kind jobset --nodes 4 --gpus 8  # needs the JobSet CRD (checked before applying)
  kgen submit --preset 4x8 --dry-run -- train.py          # print what would be applied, change nothing
  kgen submit --preset 4x8 --dry-run=server -- train.py   # ... as the API server would take it

\b
Render options are those of `kgen render` (all but -o/--output and --output-file); the manifest is
linted, then applied with server-side apply (field manager "kgen"): ConfigMap, Service, workload.
If an apply fails, the objects this submit created are deleted again. A run of the same name must
be stopped first (a Job's pod template is immutable): `kgen stop NAME`, another --name, or --replace.
"""

# Render's options that only say where render writes its text: submit applies instead.
RENDER_OUTPUT_OPTIONS = ("output_file", "output_format")
# RenderRequest's own fields; every other render option is a values flag (kgen.api.FLAG_NAMES).
REQUEST_FIELDS = ("preset", "values_files", "sets", "env", "command", "kubernetes_version")


def render_options(render_command: click.Command) -> list[click.Parameter]:
    """Copies of `kgen render`'s options as `kgen submit` takes them: all of them (same names, metavars and
    help, so the two cannot drift) except the output ones and --namespace (submit's -n/--namespace, from
    cluster_options, takes its place), and without the COMMAND argument (submit's own, last)."""
    import copy

    return [
        copy.copy(p)
        for p in render_command.params
        if isinstance(p, click.Option) and p.name not in (*RENDER_OUTPUT_OPTIONS, "namespace")
    ]


@click.command("submit", cls=KgenCommand, epilog=SUBMIT_EPILOG, context_settings=SETTINGS)
@cluster_options
@click.option("--replace", is_flag=True, help="Stop an existing run of the same name first (waits for its pods).")
@click.option("--wait", is_flag=True, help="Show progress until every rank runs or the run ends.")
@click.option("--timeout", default=600.0, show_default=True, metavar="SECONDS", help="Bound for --wait/--replace.")
@click.option(
    "--dry-run",
    "dry_run",
    is_flag=False,
    flag_value="client",
    default="none",
    metavar="[client|server]",
    help="Print what would be applied and change nothing: client (--dry-run alone) needs no cluster; "
    "server sends it to the API server as a dry run (admission, defaults, conflicts).",
)
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="[-- COMMAND [ARGS...]]")
def submit(namespace, context, kubeconfig, replace, wait, timeout, dry_run, command, **render_params):
    """Render, lint and apply a run in one step, after checking no run of that name exists."""
    import sys

    from kgen.cli.options import corrected_launcher, read_stdin_values
    from kgen.render.pipeline import RenderRequest, render_checked, stderr_lines

    check_timeout(timeout)
    if dry_run not in ("none", "client", "server"):
        raise UsageError(
            f'must be client or server, got "{dry_run}"', option="--dry-run", hint="--dry-run alone is client"
        )
    if dry_run != "none" and wait:
        raise UsageError("a dry run starts nothing to wait for", option="--wait", hint="drop --wait or --dry-run")
    fields = {k: render_params.pop(k) for k in REQUEST_FIELDS if k != "command"}

    stdin = read_stdin_values(fields.get("values_files") or ())  # `-f -`, as render
    request = RenderRequest(
        **fields,
        command=command,
        stdin=stdin,
        flags={**render_params, "namespace": namespace},  # every other render option is a values flag
    )
    with corrected_launcher("kgen submit"):
        checked = render_checked(request)
    spec, docs = checked.spec, checked.docs
    if dry_run == "client":  # what would be applied, as kgen render prints it; no cluster is asked
        for line in stderr_lines(checked):
            click.echo(f"kgen: {line}", err=True)
        print_dry_run(docs, "nothing was sent to a cluster (--dry-run=server asks the API server)")
        return
    cluster = connect(spec.namespace or namespace, context, kubeconfig)
    preflight(cluster, docs)  # before anything is stopped or applied
    for line in stderr_lines(checked):  # what `kgen render` says on stderr, once the run can be applied
        click.echo(f"kgen: {line}", err=True)
    existing = cluster.workload(spec.name)
    if existing is not None and dry_run == "server" and replace:
        click.echo(f"kgen: dry run: run {spec.name} exists; --replace would stop it first (not stopped)", err=True)
        existing = None
    if dry_run == "server":
        answers = []
        for doc in docs:
            doc.setdefault("metadata", {}).setdefault("namespace", cluster.namespace)
            answers.append(cluster.apply(doc, dry_run=True))
        print_dry_run(answers, "the API server accepted every object as a dry run; nothing was changed")
        return
    if existing is not None:
        if not replace:
            from kgen.cluster.verdict import decide

            v = decide(spec.name, cluster.pods(spec.name), existing)
            raise ClusterError(
                f"run {spec.name} already exists in namespace {cluster.namespace} "
                f"({existing.get('kind')}, {v.state}); a Job's pod template cannot be changed in place",
                option="--name",
                hint=f"`kgen stop {spec.name}` first, choose another --name, or pass --replace",
            )
        click.echo(f"replacing run {spec.name}: stopping it first")
        stop_run(cluster, spec.name, wait=True, timeout=timeout)
    apply_all(cluster, docs)
    if wait:
        from kgen.cluster.state import terminal

        v, raw = gather(cluster, spec.name, with_logs=False)
        v = watch_run(cluster, spec.name, raw, "text", True, False, until_running=True, timeout=timeout)
        if v.state == "running" or terminal(v, raw[1]):
            sys.exit(0 if v.state in ("running", "succeeded") else v.state_code)
        sys.exit(v.state_code)  # the wait ended before every rank ran: the state's own code (3, 4)


# ------------------------------------------------------------------------------------------ list
LIST_EPILOG = """\b
Examples:
  kgen list                 # kgen runs in the current namespace
  kgen list -A              # in every namespace
  kgen list -o json

\b
Bare-metal runs (kgen launch, from this machine's records) come first, each asked on its hosts;
then the cluster's, when a cluster is configured.
"""


@click.command("list", cls=KgenCommand, epilog=LIST_EPILOG, context_settings=SETTINGS)
@cluster_options
@click.option("-A", "--all-namespaces", is_flag=True, help="Runs in every namespace.")
@output_format_option(LIST_FORMATS, "text", help="Output format (wide: also ranks up and re-formations).")
def list_runs(namespace, context, kubeconfig, all_namespaces, output_format):
    """The kgen-managed runs: bare-metal runs (kgen launch) and the cluster's (found by kgen's labels):
    shape, kind, state, age and verdict."""
    import json

    from kgen.runs import views

    check_format(output_format, LIST_FORMATS, files=False)
    from kgen.cli.baremetal import cluster_configured, list_entries

    runs = list_entries()  # bare-metal runs (kgen launch's local records), asked on their hosts
    where = "this machine's bare-metal records"
    try:
        cluster = connect(namespace, context, kubeconfig)
        runs += cluster_runs(cluster, all_namespaces)
        where = "any namespace" if all_namespaces else f"namespace {cluster.namespace}"
    except (ClusterError, MissingClient) as exc:
        configured = cluster_configured(kubeconfig, context)
        if not runs and configured:
            raise
        if configured:
            _warn(f"cluster runs not listed: {exc}")
    if output_format == "json":
        click.echo(json.dumps(runs, indent=2))
    elif output_format == "yaml":
        click.echo(views.to_yaml(runs), nl=False)
    elif not runs:
        click.echo(f"no kgen runs in {where}")
    else:
        for line in views.list_rows(runs, wide=output_format == "wide"):
            click.echo(line)


def cluster_runs(cluster, all_namespaces: bool) -> list[dict]:
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


COMMANDS = (status, logs, stop, submit, list_runs)
SUBMIT_OWN_PARAMS = list(submit.params)  # -n/--namespace, --context, --kubeconfig, --replace, --wait, --timeout


def register(group: click.Group) -> None:
    """Add the cluster verbs to ``group``; `kgen submit` takes `kgen render`'s options (``group``'s render)."""
    render_command = group.commands.get("render")
    if render_command is None:
        raise RuntimeError("register the render command before the cluster verbs")
    submit.params = render_options(render_command) + SUBMIT_OWN_PARAMS
    for command in COMMANDS:
        group.add_command(command)
