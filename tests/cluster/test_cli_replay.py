"""The cluster verbs end to end through the real `kubernetes` client against a local HTTP server that
replays the recorded API responses (tests/cluster/replay.py): status, logs, stop, submit, list and
the one-line errors."""

from __future__ import annotations

import base64
import json
import socket
import threading
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from recordings import load
from replay import Replay

from kgen.cli import cli
from kgen.cluster.verdict import decide
from kgen.runs.views import status_document


def run(*args, env=None):
    return CliRunner().invoke(cli, [str(a) for a in args], env=env, catch_exceptions=False)


@pytest.fixture
def served(tmp_path):
    opened = []

    def serve(capture, **kw):
        r = Replay(capture, **kw).__enter__()
        opened.append(r)
        return r, r.kubeconfig(tmp_path)

    yield serve
    for r in opened:
        r.__exit__()


CAPTURES = [
    ("job-worker-killed", 1, "Failed: rank 1 (pod rec-worker-killed-1-9wdcf; node sim-node-1): exit 137"),
    ("job-bad-service", 1, "Failed: ranks 1, 2"),
    ("job-frozen-rank", 1, "Failed: rank 1 (pod rec-frozen-1-tkprk): node 1 silent for 5.0s"),
    ("job-succeeded", 0, "Succeeded: 2/2 ranks completed"),
    ("job-running", 3, "Running: 3/3 ranks up, the group formed"),
    ("job-unschedulable", 4, "Pending: 0/3 placed"),
    ("statefulset-restarting/t2-crashloopbackoff", 3, "Restarting: 0/2 ranks up; 2 in CrashLoopBackOff"),
    ("job-scale-1000-pending", 4, "Pending: 16/1000 placed"),
]


@pytest.mark.parametrize("capture,code,headline", CAPTURES)
def test_status_over_replay(served, capture, code, headline):
    """Exit codes: 0 unless the run failed (1); --exit-code gives the state's own code."""
    r, kc = served(capture)
    res = run("status", r.name, "--kubeconfig", kc)
    assert res.exit_code == (1 if code == 1 else 0), res.output
    assert headline in res.stdout
    assert res.stderr == ""
    # one list call per kind: workload, pods, events (+ a few log tails, never one per pod at scale)
    gets = [p for m, p, _, _ in r.requests if m == "GET"]
    assert sum("/pods?" in p for p in gets) == 1 and sum("/events" in p for p in gets) == 1
    assert sum("/log?" in p for p in gets) <= 10  # 8 failed ranks at most, and node 0's head and tail
    assert run("status", r.name, "--kubeconfig", kc, "--exit-code").exit_code == code


def test_status_json_is_the_pure_verdict(served):
    r, kc = served("job-pfp-killed")
    res = run("status", r.name, "--kubeconfig", kc, "-o", "json")
    got = json.loads(res.stdout)
    d = load("job-pfp-killed")
    want = status_document(decide(d["name"], d["pods"], d["workload"], d["events"], d["logs"]))
    assert got == json.loads(json.dumps(want, default=str))
    assert got["version"] == 2 and got["state"] == "failed" and got["exit_code"] == got["state_code"] == 1
    assert got["root_cause"]["ranks"] == [1]
    assert [node["node_rank"] for node in got["nodes"]] == [0, 1, 2]


def test_status_rows_one_per_rank(served):
    r, kc = served("job-worker-killed")
    lines = run("status", r.name, "--kubeconfig", kc).stdout.splitlines()
    assert lines[0].split() == ["RANK", "POD", "NODE", "STATE", "RESTARTS", "EXIT", "MEANING"]
    assert lines[2].split()[:6] == ["1", "rec-worker-killed-1-9wdcf", "sim-node-1", "Failed", "0", "137"]
    assert "fail-stop" in lines[1] and "fail-stop" in lines[3]


def test_status_namespace_from_the_context_and_flag(served, tmp_path):
    r, _ = served("job-running")
    kc = r.kubeconfig(tmp_path, namespace=None)
    res = run("status", r.name, "--kubeconfig", kc)
    assert res.exit_code == 2 and "namespace default" in res.stderr  # recorded objects live in rec
    assert run("status", r.name, "--kubeconfig", kc, "-n", "rec", "--exit-code").exit_code == 3


def test_status_watch_follows_until_the_run_ends(served):
    r, kc = served("job-pfp-evicted-reformed/t2-complete")
    res = run("status", r.name, "--kubeconfig", kc, "--watch", "--brief")
    assert res.exit_code == 0
    assert res.stdout.splitlines()[0].startswith("Succeeded: 3/3")


def test_status_watch_replays_the_stream(served):
    """A StatefulSet never ends: the watch loop replays both recorded streams, then its bound stops it."""
    from kgen.cluster import engine as ops
    from kgen.cluster.client import Cluster

    r, kc = served("statefulset-running")
    cluster = Cluster.connect(kubeconfig=kc)
    v, raw = ops.gather(cluster, r.name)
    # stop once both recorded streams have been read to their end (the event), with a generous hard bound
    # (the machine may be busy): never a fixed 2 s that a starved thread might not fit into
    replayed, ended = threading.Event(), set()
    watch = cluster.watch

    def counted(kind, **kw):
        yield from watch(kind, **kw)
        ended.add(kind)
        if {"Pod", "StatefulSet"} <= ended:
            replayed.set()

    cluster.watch = counted
    updates = list(ops.watch(cluster, r.name, raw, no_logs=True, timeout=60.0, until=replayed))
    assert updates[0].kind == "first" and updates[-1].kind == "last"  # the run goes on: no final re-read
    final = updates[-1].verdict
    assert replayed.is_set(), "the recorded watch streams were not replayed within 60 s"
    assert final.state == "running"
    watches = [p for _, p, _, _ in r.requests if "watch=true" in p]
    assert any("statefulsets" in p and "metadata.name%3Drec-sts-running" in p for p in watches), watches
    assert any("/pods?" in p for p in watches)


# ------------------------------------------------------------------------------------------ errors
def one_line_error(res, *words):
    assert res.exit_code == 2, res.output
    assert res.stdout == ""
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("kgen: error: "), res.stderr
    assert "Traceback" not in res.stderr
    for w in words:
        assert w in lines[0], lines[0]


def test_unknown_run(served):
    r, kc = served("job-running")
    one_line_error(run("status", "no-such-run", "--kubeconfig", kc), "no run no-such-run in namespace rec", "kgen list")
    one_line_error(run("logs", "no-such-run", "--kubeconfig", kc), "no run no-such-run")


def test_forbidden(served):
    r, kc = served("job-running", deny=True)
    one_line_error(run("status", r.name, "--kubeconfig", kc), "forbidden", "RBAC")


def test_unreachable(tmp_path):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    kc = tmp_path / "kc"
    kc.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    one_line_error(run("status", "r", "--kubeconfig", kc), "unreachable", "kubectl cluster-info")


def test_no_kubeconfig(tmp_path):
    env = {"KUBECONFIG": str(tmp_path / "missing"), "KUBERNETES_SERVICE_HOST": None}
    one_line_error(run("status", "r", env=env), "no kubeconfig found", "--kubeconfig")
    one_line_error(run("list", "--kubeconfig", tmp_path / "nope"), "--kubeconfig", "does not exist")


def test_unknown_context(served):
    r, kc = served("job-running")
    one_line_error(run("status", r.name, "--kubeconfig", kc, "--context", "nope"), "--context")


@pytest.mark.parametrize(
    "args,words",
    [
        (["status", "x", "-o", "status.txt"], ["-o/--output", 'text, wide, json or yaml; got "status.txt"']),
        (["list", "-o", "xml"], ["-o/--output", "text, wide, json or yaml"]),
        (["submit", "--nodes", "2", "--dry-run=maybe"], ["--dry-run", "must be client or server"]),
        (["logs", "x", "--rank", "a"], ["--rank"]),
        (["logs", "x", "--rank", "5-2"], ["--rank", "empty range"]),
        (["logs", "x", "--since", "10 minutes"], ["--since"]),
        (["logs", "x", "-f", "--previous"], ["--previous"]),
        (["logs", "x", "--since", "-5s"], ["--since", "0s: from now on"]),
        (["stop", "x", "--wait", "--timeout", "-1"], ["--timeout", "must be 0 or more seconds, got -1"]),
        (["stop", "x", "--timeout", "nan"], ["--timeout", "must be 0 or more seconds"]),
        (["submit", "--name", "x", "--nodes", "2", "--gpus", "0", "--timeout", "-5"], ["--timeout", "got -5"]),
    ],
)
def test_bad_flags(served, args, words):
    r, kc = served("job-running")
    res = run(*args, "--kubeconfig", kc)
    one_line_error(res, *words)
    assert res.stdout == ""
    assert not [m for m, *_ in r.requests if m != "GET"]  # refused before anything is changed


# ------------------------------------------------------------------------------------------ logs
def test_logs_merged_with_rank_prefixes(served):
    r, kc = served("job-worker-killed")
    res = run("logs", r.name, "--kubeconfig", kc)
    assert res.exit_code == 0
    lines = res.stdout.splitlines()
    want = sum(len(t.splitlines()) for t in load("job-worker-killed")["logs"].values())
    # recorded by kgen 0.1 (no per-process prefixes): every line is its pod's own; torchrun's two shutdown
    # reports (after the fail-stop SIGTERM on nodes 0 and 2) are one line each, as written with --full
    assert {ln[:9] for ln in lines} == {"[node 0] ", "[node 1] ", "[node 2] "}
    assert any(ln.startswith("[node 1] SUM_OK rank=1 world=3") for ln in lines)
    assert sum("torchrun stopped by SIGTERM" in ln for ln in lines) == 2
    full = run("logs", r.name, "--kubeconfig", kc, "--full").stdout.splitlines()
    assert len(full) == want and len(lines) == want - 2 * 30
    logq = [p for _, p, _, _ in r.requests if "/log?" in p]
    assert all("timestamps=true" in p and "container=trainer" in p for p in logq)


def test_logs_since_0s_is_from_now_on(served):
    """sinceSeconds must be > 0 for the API; --since 0s asks for no line written before now: tailLines=0."""
    r, kc = served("job-worker-killed")
    res = run("logs", r.name, "--kubeconfig", kc, "--since", "0s")
    assert res.exit_code == 0 and res.stdout == "" and res.stderr == ""
    logq = [p for _, p, _, _ in r.requests if "/log?" in p]
    assert len(logq) == 3 and all("tailLines=0" in p and "sinceSeconds" not in p for p in logq)


def test_logs_follow_since_0s_shows_only_new_lines(served):
    """With -f: the pods' past lines are skipped; pods that appear later (a re-formed group) show all."""
    r, kc = served("job-frozen-rank")
    res = run("logs", r.name, "--kubeconfig", kc, "-f", "--since", "0s")
    assert res.exit_code == 1, res.output  # the followed run failed
    first = [p for _, p, _, _ in r.requests if "follow=true" in p]
    assert first and all("sinceSeconds" not in p for p in first)
    assert any("tailLines=0" in p for p in first)


@pytest.mark.parametrize("capture, code", [("job-succeeded", 0), ("job-worker-killed", 1)])
def test_logs_follow_exits_with_the_runs_result(served, capture, code):
    """`kgen logs -f` exits as `kgen launch --follow` does: 0 when the followed run succeeded, 1 when it failed
    (its verdict on stderr); without -f the exit says only whether the logs could be read."""
    r, kc = served(capture)
    res = run("logs", r.name, "--kubeconfig", kc, "-f")
    assert res.exit_code == code, res.output
    assert (res.stderr == "") == (code == 0) and res.stdout
    assert run("logs", r.name, "--kubeconfig", kc).exit_code == 0


def test_logs_rank_and_tail(served):
    r, kc = served("job-worker-killed")
    res = run("logs", r.name, "--kubeconfig", kc, "--rank", "0,2", "--tail", "1")
    assert res.stdout.splitlines() == [
        "[node 0] [kgen node 0 15:04:53 +16.0s] local process tree stopped; exit 75",
        "[node 2] [kgen node 2 15:04:53 +15.8s] local process tree stopped; exit 75",
    ]


def test_logs_previous_container(served):
    r, kc = served("statefulset-restarting/t1-after-first-restart")
    res = run("logs", r.name, "--kubeconfig", kc, "--previous", "--rank", "0")
    assert "FAIL-STOP: node 1 closed its liveness connection" in res.stdout
    assert any("previous=true" in p for _, p, _, _ in r.requests)


def test_logs_of_unscheduled_pods_are_empty(served):
    r, kc = served("job-unschedulable")
    res = run("logs", r.name, "--kubeconfig", kc)
    assert res.exit_code == 0 and res.stdout == ""


def test_log_of_a_pod_on_a_dead_node_is_one_line_error(served):
    """Index 0 of the 1,000-pod run is bound to a node without an agent: the API answered 500."""
    from kgen.cluster.client import Cluster
    from kgen.cluster.errors import ClusterError

    r, kc = served("job-scale-1000-pending")
    cluster = Cluster.connect(kubeconfig=kc)
    pod0 = next(
        p for p in cluster.pods(r.name) if p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] == "0"
    )
    with pytest.raises(ClusterError) as exc:
        cluster.log(pod0["metadata"]["name"])
    assert "answered 500" in str(exc.value) and "connection refused" in str(exc.value)
    assert "\n" not in str(exc.value)
    # and `kgen logs` asks no pod whose container never started (no 1,000 requests for nothing)
    before = len(r.requests)
    res = run("logs", r.name, "--kubeconfig", kc)
    assert res.exit_code == 0 and res.stdout == ""
    assert not [p for _, p, _, _ in r.requests[before:] if "/log" in p]


def test_logs_follow_all_pods_and_new_generations(served):
    r, kc = served("job-frozen-rank")
    res = run("logs", r.name, "--kubeconfig", kc, "-f")
    assert res.exit_code == 1  # the run's result, as `kgen launch --follow` exits: it failed
    assert res.stderr.startswith("kgen: Failed: rank 1") and len(res.stderr.splitlines()) == 1
    out = res.stdout
    # both generations of rank 0 and 2 (the first came from the watch), rank 1 is gone with its log
    assert "[node 0] [kgen node 0 15:09:39" in out and "[node 2] [kgen node 2 15:10:19" in out
    assert "exit 4" in out
    assert any("follow=true" in p for _, p, _, _ in r.requests)
    assert any("watch=true" in p for _, p, _, _ in r.requests)


# ------------------------------------------------------------------------------------------ stop
def test_stop_deletes_everything_foreground_then_says_nothing_is_left(served):
    r, kc = served("job-worker-killed")
    res = run("stop", r.name, "--kubeconfig", kc, "--wait", "--timeout", "10")
    assert res.exit_code == 0, res.output
    deletes = [(p, json.loads(b)) for m, p, b, _ in r.requests if m == "DELETE"]
    paths = [p for p, _ in deletes]
    assert "/apis/batch/v1/namespaces/rec/jobs/rec-worker-killed" in paths
    assert "/api/v1/namespaces/rec/services/rec-worker-killed" in paths
    assert "/api/v1/namespaces/rec/configmaps/rec-worker-killed-entrypoint" in paths
    assert sum("/pods/" in p for p in paths) == 3
    assert all(b["propagationPolicy"] == "Foreground" for _, b in deletes)
    assert "all pods gone" in res.stdout
    lists = [p for m, p, _, _ in r.requests if m == "GET" and "labelSelector" in p]
    assert any("poddisruptionbudgets" in p for p in lists)
    assert all(
        "app.kubernetes.io%2Finstance%3Drec-worker-killed" in p or "instance%3D" in p.replace("/", "%2F") for p in lists
    )
    # a run of which nothing is left is not "stopped" again: it is not there (kubectl delete's exit)
    again = run("stop", r.name, "--kubeconfig", kc)
    one_line_error(again, "no run rec-worker-killed in namespace rec", "nothing was stopped", "--ignore-not-found")
    assert again.stdout == ""
    ignored = run("stop", r.name, "--kubeconfig", kc, "--ignore-not-found")
    assert ignored.exit_code == 0 and "nothing of run rec-worker-killed left in namespace rec" in ignored.stdout


def test_stop_status_logs_of_a_run_that_never_existed(served):
    """A misspelled name on a real API server: every verb says there is no such run, exit 2, nothing deleted."""
    r, kc = served("job-running")
    for verb in ("stop", "status", "logs"):
        res = run(verb, "rec-runing", "--kubeconfig", kc, "--on", "cluster")
        one_line_error(res, "no run rec-runing in namespace rec")
    assert not [m for m, *_ in r.requests if m != "GET"]


# ------------------------------------------------------------------------------------------ submit
def test_submit_refuses_an_existing_run(served):
    r, kc = served("job-running")
    res = run("submit", "--name", r.name, "--nodes", "3", "--gpus", "0", "--kubeconfig", kc)
    one_line_error(res, "already exists", f"kgen stop {r.name}", "--replace", "another --name")
    assert not [m for m, *_ in r.requests if m == "PATCH"]


def test_submit_applies_server_side_with_field_manager_kgen(served):
    r, kc = served("job-running")
    res = run("submit", "--name", "fresh-run", "--nodes", "2", "--gpus", "0", "--kubeconfig", kc)
    assert res.exit_code == 0, res.output
    patches = [(p, json.loads(b), ct) for m, p, b, ct in r.requests if m == "PATCH"]
    assert [body["kind"] for _, body, _ in patches] == ["ConfigMap", "Service", "NetworkPolicy", "Job"]  # no Secret
    for path, body, ctype in patches:
        assert "fieldManager=kgen" in path and ctype == "application/apply-patch+yaml"
        assert body["metadata"]["namespace"] == "rec"
    assert patches[-1][0].startswith("/apis/batch/v1/namespaces/rec/jobs/fresh-run?")


def test_submit_replace_stops_first(served):
    r, kc = served("job-succeeded")
    res = run(
        "submit", "--name", r.name, "--nodes", "2", "--gpus", "0", "--replace", "--timeout", "10", "--kubeconfig", kc
    )
    assert res.exit_code == 0, res.output
    methods = [m for m, *_ in r.requests]
    assert methods.index("DELETE") < methods.index("PATCH")


def test_submit_wait_follows_until_every_rank_runs(served):
    """--replace stops the recorded run, applies it again, then --wait follows the recorded watch
    streams (the run's own history from apply to training) until every rank runs."""
    r, kc = served("job-running")
    args = ["submit", "--name", r.name, "--nodes", "3", "--gpus", "0", "--replace", "--wait", "--timeout", "30"]
    res = run(*args, "--kubeconfig", kc)
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert "job/rec-running applied" in out
    assert out.index("Starting: 0/3 ranks up") < out.index("Running: 3/3 ranks up")


def test_submit_takes_exactly_renders_options():
    """submit's render options are copied from `kgen render` (names, metavars, help): they cannot drift."""
    from kgen.cli.runs import RENDER_OUTPUT_OPTIONS, REQUEST_FIELDS, SUBMIT_OWN_PARAMS
    from kgen.render.request import FLAG_NAMES

    render, submit = cli.commands["render"], cli.commands["submit"]
    render_opts = {p.name: p for p in render.params if isinstance(p, click.Option)}
    own = {p.name for p in SUBMIT_OWN_PARAMS} | {"help"}
    submit_opts = {p.name: p for p in submit.params if isinstance(p, click.Option) and p.name not in own}
    assert set(submit_opts) == set(render_opts) - {*RENDER_OUTPUT_OPTIONS, "namespace"}
    for name, p in submit_opts.items():
        q = render_opts[name]
        assert (p.opts, p.metavar, p.help, p.multiple, p.is_flag) == (q.opts, q.metavar, q.help, q.multiple, q.is_flag)
        flag_key = {k.replace(".", "_"): k for k in FLAG_NAMES}.get(name)  # hang_timeout is the flag of hang.timeout
        assert name in REQUEST_FIELDS or flag_key in FLAG_NAMES, f"render's --{name}: tell submit how to pass it on"
    # render's --namespace is submit's -n/--namespace; every render spelling works on submit
    spellings = {o for p in submit.params for o in p.opts}
    assert {o for p in render_opts.values() if p.name not in RENDER_OUTPUT_OPTIONS for o in p.opts} <= spellings
    assert {"--cpu", "--memory", "--queue"} <= spellings
    assert "job|statefulset|jobset" in run("submit", "--help").stdout


def test_submit_passes_cpu_memory_and_queue_on(served):
    r, kc = served("job-running")
    args = ["--name", "sized", "--nodes", "2", "--gpus", "0", "--cpu", "3", "--memory", "5Gi", "--queue", "team-a"]
    res = run("submit", *args, "--kubeconfig", kc)
    assert res.exit_code == 0, res.output
    job = [json.loads(b) for m, p, b, _ in r.requests if m == "PATCH" and "/jobs/" in p][0]
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    trainer = job["spec"]["template"]["spec"]["containers"][0]
    assert trainer["resources"]["requests"]["cpu"] == "3" and trainer["resources"]["requests"]["memory"] == "5Gi"
    assert "kgen: note: queue team-a" in res.stderr  # render's notes, on stderr as render prints them


def test_submit_reads_values_from_stdin_and_warns_like_render(served):
    """`-f -` reads the values from stdin (as `kgen render -f -`), and render's cautions reach stderr."""
    r, kc = served("job-running")
    values = "name: from-stdin\nnodes: 2\ngpus: 0\nactiveDeadlineSeconds: 600\nkind: statefulset\n"
    res = CliRunner().invoke(cli, ["submit", "-f", "-", "--kubeconfig", kc], input=values, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert (
        [p for m, p, *_ in r.requests if m == "PATCH" and "/statefulsets/" in p][0]
        .split("?")[0]
        .endswith("/from-stdin")
    )
    assert "has no effect with kind statefulset" in res.stderr


def test_submit_jobset_without_the_crd_applies_nothing(served):
    """The recorded cluster has no JobSet CRD: discovery of jobset.x-k8s.io/v1alpha2 answers the standard
    404. submit says so in one line before anything is applied (or, with --replace, stopped)."""
    r, kc = served("job-running")
    for name, extra in (("x2", []), (r.name, ["--replace"])):
        args = ["submit", "--name", name, "--kind", "jobset", "--nodes", "2", "--gpus", "0", *extra]
        res = run(*args, "--kubeconfig", kc)
        assert res.exit_code == 2 and res.stdout == ""
        assert res.stderr == (
            "kgen: error: the JobSet CRD is not installed on this cluster (install JobSet v0.10+ or use --kind job)\n"
        )
    assert ("GET", "/apis/jobset.x-k8s.io/v1alpha2") in [(m, p) for m, p, *_ in r.requests]
    assert [m for m, *_ in r.requests if m != "GET"] == []


def test_submit_rolls_back_what_it_created_when_the_workload_apply_fails(served):
    """RBAC lets the user write ConfigMaps and Services but not Jobs: the 403 on the Job comes after the
    ConfigMap and Service were created; both are deleted again, and the one error line says so."""
    r, kc = served("job-running", deny_writes=("jobs",))
    res = run("submit", "--name", "fresh-run", "--nodes", "2", "--gpus", "0", "--kubeconfig", kc)
    assert res.exit_code == 2
    assert res.stdout.splitlines() == [  # progress as it happened; the error line tells the rest
        "configmap/fresh-run-entrypoint applied (server-side, field manager kgen)",
        "service/fresh-run applied (server-side, field manager kgen)",
        "networkpolicy/fresh-run applied (server-side, field manager kgen)",
    ]
    err = res.stderr.splitlines()
    assert len(err) == 1 and err[0].startswith("kgen: error: forbidden: ") and "RBAC" in err[0]
    assert (
        "rolled back: networkpolicy/fresh-run, service/fresh-run, configmap/fresh-run-entrypoint deleted again"
        in err[0]
    )
    writes = [(m, p.split("?")[0]) for m, p, *_ in r.requests if m != "GET"]
    assert writes == [
        ("PATCH", "/api/v1/namespaces/rec/configmaps/fresh-run-entrypoint"),
        ("PATCH", "/api/v1/namespaces/rec/services/fresh-run"),
        ("PATCH", "/apis/networking.k8s.io/v1/namespaces/rec/networkpolicies/fresh-run"),
        ("PATCH", "/apis/batch/v1/namespaces/rec/jobs/fresh-run"),
        ("DELETE", "/apis/networking.k8s.io/v1/namespaces/rec/networkpolicies/fresh-run"),
        ("DELETE", "/api/v1/namespaces/rec/services/fresh-run"),
        ("DELETE", "/api/v1/namespaces/rec/configmaps/fresh-run-entrypoint"),
    ]


def test_submit_rollback_leaves_objects_that_existed_before(served):
    """An apply that updated an object (200: it existed already) is not undone; only what this submit created."""
    r, kc = served("job-succeeded", deny_writes=("jobs",))
    from kgen.cluster.client import Cluster

    cluster = Cluster.connect(kubeconfig=kc)
    cluster.delete("Job", r.name)  # the run's Job is gone, its Service and ConfigMap are still there
    before = len(r.requests)
    res = run("submit", "--name", r.name, "--nodes", "2", "--gpus", "0", "--kubeconfig", kc)
    assert res.exit_code == 2 and "forbidden" in res.stderr
    # the recorded run had no NetworkPolicy (older kgen): only that was created here
    deleted = [p.split("?")[0].rsplit("/", 2)[-2] for m, p, *_ in r.requests[before:] if m == "DELETE"]
    assert deleted == ["networkpolicies"]


def test_submit_makes_a_statefulsets_secret_first_fresh_and_owned_by_the_statefulset(served):
    """A StatefulSet's pods carry no Job UID: submit makes Secret <name>-auth (a fresh random value
    every time, applied before anything that starts a pod), then gives it an owner reference to the StatefulSet
    as the API server answered it (the recorded object: its real uid), so it is deleted with it."""
    r, kc = served("statefulset-running")
    recorded_uid = json.loads((r.dir / "workload.json").read_text())["metadata"]["uid"]
    values = []
    for _ in range(2):
        before = len(r.requests)
        args = ["submit", "--name", r.name, "--kind", "statefulset", "--nodes", "2", "--gpus", "0", "--replace"]
        res = run(*args, "--timeout", "10", "--kubeconfig", kc)
        assert res.exit_code == 0, res.output
        patches = [(p, json.loads(b)) for m, p, b, _ in r.requests[before:] if m == "PATCH"]
        kinds = [body["kind"] for _, body in patches]
        assert kinds == ["Secret", "ConfigMap", "Service", "NetworkPolicy", "StatefulSet", "Secret"]
        (first_path, first), last = patches[0], patches[-1][1]
        assert "force=true" in first_path and first["metadata"]["name"] == f"{r.name}-auth"
        assert first["metadata"]["labels"]["app.kubernetes.io/instance"] == r.name  # kgen stop finds it
        assert "ownerReferences" not in first["metadata"]
        assert last["metadata"]["ownerReferences"] == [
            {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": r.name, "uid": recorded_uid}
        ]
        assert last["data"] == first["data"]  # the same value, now owned
        value = base64.b64decode(first["data"]["secret"]).decode()
        assert len(value) == 64 and int(value, 16) >= 0
        values.append(value)
        assert f"secret/{r.name}-auth owned by statefulset/{r.name} (deleted with it)" in res.stdout
        assert value not in res.output  # never printed
    assert values[0] != values[1]  # fresh for every creation


def test_submit_dry_run_server_checks_the_statefulsets_secret_without_showing_it(served):
    r, kc = served("statefulset-running")
    args = ["submit", "--name", "sts-dry", "--kind", "statefulset", "--nodes", "2", "--gpus", "0"]
    res = run(*args, "--dry-run=server", "--kubeconfig", kc)
    assert res.exit_code == 0, res.output
    sent = [json.loads(b) for m, p, b, _ in r.requests if m == "PATCH"]
    assert sent[0]["kind"] == "Secret" and all("dryRun=All" in p for m, p, *_ in r.requests if m == "PATCH")
    assert "kind: Secret" not in res.stdout and sent[0]["data"]["secret"] not in res.output


def test_submit_job_and_jobset_make_no_secret(served):
    r, kc = served("job-running")
    res = run("submit", "--name", "uid-run", "--nodes", "2", "--gpus", "0", "--kubeconfig", kc)
    assert res.exit_code == 0, res.output
    assert not [p for m, p, *_ in r.requests if m != "GET" and "/secrets/" in p]


# ------------------------------------------------------------------------------------------ list
def test_list(served):
    r, kc = served("statefulset-restarting/t2-crashloopbackoff")
    res = run("list", "--kubeconfig", kc)
    lines = res.stdout.splitlines()
    assert lines[0].split() == ["NAMESPACE", "NAME", "KIND", "SHAPE", "STATE", "AGE", "VERDICT"]
    assert lines[1].split()[:5] == ["rec", "rec-sts-restarting", "StatefulSet", "2x1cpu", "restarting"]
    got = json.loads(run("list", "-A", "-o", "json", "--kubeconfig", kc).stdout)
    assert got["version"] == 2 and got["runs"][0]["name"] == "rec-sts-restarting"
    assert got["runs"][0]["state"] == "restarting" and got["runs"][0]["nodes_expected"] == 2


def test_logs_follow_stops_at_once_on_ctrl_c(tmp_path):
    """`kgen logs -f` on a running run whose streams stay open (the replay server sends the next chunk only
    after STREAM_PACE seconds): SIGINT ends it at once, quietly (not "kgen: error: aborted"), exit
    130, although every stream is open.

    What is checked is that kgen does not wait for a stream: a kgen that did would end only after
    STREAM_PACE (10 minutes). The bound is a generous hard timeout far below that, not a tight wall-clock
    figure: the machine may be busy with other test runs, and a process waiting for the CPU is not slow.

    kgen gets SIGINT at its default whatever pytest inherited: started in the background by a shell without job
    control (`pytest ... &` in a script), pytest ignores SIGINT, a child would inherit that (exec keeps an ignored
    signal ignored), and Python leaves an ignored SIGINT ignored: kgen would rightly never see the Ctrl-C (the
    120 s failure of a full-suite run). Ready is: SIGINT not ignored, and the first line on stdout."""
    import os
    import queue
    import signal
    import subprocess
    import sys
    import threading

    stream_pace, bound = 600.0, 120.0
    with Replay("job-running", log_repeat=20, log_pace=stream_pace) as r:
        kc = r.kubeconfig(tmp_path)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        ours = signal.getsignal(signal.SIGINT)
        if ours == signal.SIG_IGN:  # a handled signal goes back to its default at exec; an ignored one stays
            signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "kgen", "logs", r.name, "-f", "--kubeconfig", kc],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
        finally:
            signal.signal(signal.SIGINT, ours)
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=lambda: lines.put(proc.stdout.readline()), daemon=True).start()
        try:
            first = lines.get(timeout=bound)  # the streams are open: the first chunk is on screen
            assert first.startswith("["), first
            assert not _ignores_sigint(proc.pid), "kgen started with SIGINT ignored: no Ctrl-C could reach it"
            proc.send_signal(signal.SIGINT)
            try:
                _, err = proc.communicate(timeout=bound)  # drains stdout too: kgen's last flush never blocks
            except subprocess.TimeoutExpired:
                raise AssertionError(f"kgen logs -f still running {bound:.0f} s after SIGINT") from None
            assert proc.returncode == 130
            assert err == "", err
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _ignores_sigint(pid: int) -> bool:
    """Whether the process ignores SIGINT (Linux: the SigIgn mask in /proc/PID/status)."""
    import signal

    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            return bool(int(line.split()[1], 16) >> (signal.SIGINT - 1) & 1)
    raise AssertionError(f"no SigIgn in /proc/{pid}/status")


def test_logs_follow_statefulset_sees_each_container_once(served):
    """The recorded pod watch of an in-place restart: containers newer than the followed one get a
    stream, older states replayed by the watch do not."""
    from kgen.cluster import logs as L
    from kgen.cluster.client import Cluster
    from kgen.cluster.labels import pod_selector

    r, kc = served("statefulset-restarting/t1-after-first-restart")
    cluster = Cluster.connect(kubeconfig=kc)
    opened = []

    def open_stream(s):
        opened.append((s.pod, s.restarts))
        return cluster.log_stream(s.pod, follow=True)

    ends = iter([False, True])
    f = L.Follower(open_stream, lambda: cluster.watch("Pod", selector=pod_selector(r.name)), lambda: next(ends, True))
    lines = list(f.run(L.select_sources(cluster.pods(r.name), None, False)))
    # the initial containers (restartCount 1 at t1), then the ones after the second crash (2), each once;
    # the watch's replay of restartCount 0 states opens nothing
    assert sorted(opened) == [
        ("rec-sts-restarting-0", 1),
        ("rec-sts-restarting-0", 2),
        ("rec-sts-restarting-1", 1),
        ("rec-sts-restarting-1", 2),
    ]
    assert any(line.startswith("[node 1] ") for line in lines)


# ------------------------------------------------------------------------------ kubectl's habits
def test_status_yaml_is_the_json_verdict(served):
    import yaml

    r, kc = served("job-pfp-killed")
    as_json = json.loads(run("status", r.name, "--kubeconfig", kc, "-o", "json").stdout)
    res = run("status", r.name, "--kubeconfig", kc, "-o", "yaml")
    assert res.exit_code == 1 and not res.stdout.startswith("---")
    assert yaml.safe_load(res.stdout) == as_json


def test_status_wide_adds_generation_ip_and_readiness(served):
    r, kc = served("job-running")
    lines = run("status", r.name, "--kubeconfig", kc, "-o", "wide").stdout.splitlines()
    assert lines[0].split() == ["RANK", "GEN", "POD", "NODE", "IP", "STATE", "READY", "RESTARTS", "EXIT", "MEANING"]
    pods = {p["metadata"]["name"]: p for p in json.loads((r.dir / "pods.json").read_text())["items"]}
    row = lines[1].split()
    assert row[4] == pods[row[2]]["status"]["podIP"] and row[6] == "yes"
    assert run("status", r.name, "--kubeconfig", kc).stdout.splitlines()[0].split()[:2] == ["RANK", "POD"]


def test_status_watch_as_yaml_is_a_stream_of_documents(served):
    import yaml

    r, kc = served("job-pfp-evicted-reformed/t2-complete")
    res = run("status", r.name, "--kubeconfig", kc, "--watch", "-o", "yaml")
    assert res.exit_code == 0
    docs = list(yaml.safe_load_all(res.stdout))
    assert docs and docs[-1]["state"] == "succeeded"


def test_list_wide_and_yaml(served):
    import yaml

    r, kc = served("statefulset-restarting/t2-crashloopbackoff")
    lines = run("list", "--kubeconfig", kc, "-o", "wide").stdout.splitlines()
    assert lines[0].split() == ["NAMESPACE", "NAME", "KIND", "SHAPE", "STATE", "NODES", "REFORMED", "AGE", "VERDICT"]
    assert lines[1].split()[5] == "0/2"
    got = yaml.safe_load(run("list", "--kubeconfig", kc, "-o", "yaml").stdout)
    assert got == json.loads(run("list", "--kubeconfig", kc, "-o", "json").stdout)


def test_submit_dry_run_server_sends_dry_run_applies_and_changes_nothing(served):
    """The recordings hold no dryRun answers, so this checks what kgen sends: every object as a server-side
    apply with dryRun=All (the API server then stores nothing), nothing stopped, deleted or waited for, and
    the server's answers printed as YAML."""
    import yaml

    r, kc = served("job-running")
    res = run(
        "submit", "--name", r.name, "--nodes", "2", "--gpus", "0", "--replace", "--dry-run=server", "--kubeconfig", kc
    )
    assert res.exit_code == 0, res.output
    writes = [(m, p) for m, p, *_ in r.requests if m != "GET"]
    assert [m for m, _ in writes] == ["PATCH"] * 4
    assert all("dryRun=All" in p and "fieldManager=kgen" in p for _, p in writes)
    kinds = [d["kind"] for d in yaml.safe_load_all(res.stdout)]
    assert kinds == ["ConfigMap", "Service", "NetworkPolicy", "Job"]
    assert f"run {r.name} exists; --replace would stop it first (not stopped)" in res.stderr
    assert "nothing was changed" in res.stderr.splitlines()[-1]


def test_submit_dry_run_client_needs_no_cluster():
    res = run("submit", "--nodes", "2", "--gpus", "0", "--dry-run", "--kubeconfig", "/nonexistent", "--", "train.py")
    assert res.exit_code == 0, res.output
    assert res.stdout == run("render", "--nodes", "2", "--gpus", "0", "--", "train.py").stdout
    assert res.stderr.splitlines()[-1].startswith(
        "kgen: dry run: configmap/kgen-train-entrypoint, service/kgen-train, networkpolicy/kgen-train,"
    )


def test_a_name_that_is_both_bare_metal_and_cluster_is_an_error_naming_both(served, tmp_path):
    """The verbs find a run in kgen launch's local record or on the cluster; a name that is both must be
    named with --on."""
    from kgen.baremetal import record as R

    r, kc = served("job-running")
    R.save(R.RunRecord(name=r.name, mode="local", nodes=[R.NodeRecord(0, "localhost", str(tmp_path / "node0"))]))
    res = run("status", r.name, "--kubeconfig", kc)
    assert res.exit_code == 2 and res.stdout == ""
    assert "both a bare-metal run" in res.stderr and "cluster run (namespace rec)" in res.stderr
    assert "--on bare-metal or --on cluster" in res.stderr
    res = run("status", r.name, "--kubeconfig", kc, "--on", "cluster")
    assert res.exit_code == 0 and "Running: 3/3 ranks up" in res.stdout
    res = run("status", r.name, "--kubeconfig", kc, "--on", "bare-metal")
    assert "NoRunDir" in res.stdout and "local record" in res.stdout
    # kgen list: the bare-metal run first, then the cluster's
    listed = run("list", "--kubeconfig", kc).stdout.splitlines()
    assert listed[1].split()[:3] == ["-", r.name, "local"] and any(" Job " in ln for ln in listed[2:])
