"""kgen.cluster.logs.merge: lines of several pods in time order (the API's timestamps=true prefix), each
after its process's prefix ([R] for training process R, [node N] for the pod's own lines); a pod's own
order is kept."""

from kgen.cluster.logs import merge, select_sources


def test_merge_orders_by_api_timestamps_and_strips_them():
    logs = {
        0: "2026-11-22T15:04:52.900000000Z [kgen node 0] FAIL-STOP: node 1 closed\n"
        "2026-11-22T15:04:53.100000000Z [kgen node 0] exit 75\n",
        1: "2026-11-22T15:04:52.100Z [rank 1] SUM_OK rank=1\n",
        2: "2026-11-22T15:04:52Z [rank 2] first of rank 2\n",
    }
    assert merge(logs) == [
        "[2] first of rank 2",
        "[1] SUM_OK rank=1",
        "[node 0] [kgen node 0] FAIL-STOP: node 1 closed",
        "[node 0] [kgen node 0] exit 75",
    ]
    assert merge(logs, timestamps=True)[0] == "[2] 2026-11-22T15:04:52Z first of rank 2"


def test_lines_without_timestamps_keep_their_pod_order_and_ranks_are_padded():
    logs = {r: f"[rank {r}] a{r}\n[rank {r}] b{r}\nnode line\n" for r in (0, 10)}
    assert merge(logs) == ["[ 0] a0", "[ 0] b0", "[node 0] node line", "[10] a10", "[10] b10", "[node 10] node line"]


def test_several_processes_per_pod_global_ranks_and_rank_filter():
    """8 processes per pod: pod 1's lines are ranks 8-15; --rank 9 keeps rank 9's lines only; a pod's own
    lines come with every rank of the pod."""
    logs = {
        0: "[rank 0] a\n[rank 7] b\nkgen 0\n",
        1: "[rank 8] c\n[rank 9] d\n[rank 15] e\nkgen 1\n",
    }
    assert merge(logs, nproc=8) == [
        "[ 0] a", "[ 7] b", "[node 0] kgen 0", "[ 8] c", "[ 9] d", "[15] e", "[node 1] kgen 1"
    ]  # fmt: skip
    assert merge(logs, nproc=8, ranks={9}) == ["[ 9] d"]
    assert merge(logs, nproc=8, ranks=set(range(8, 16))) == ["[ 8] c", "[ 9] d", "[15] e", "[node 1] kgen 1"]
    assert merge(logs, nproc=8, tail=1) == ["[node 0] kgen 0", "[node 1] kgen 1"]


def test_recorded_shutdown_traceback_folds_into_one_line():
    """A recorded log (kgen 0.1, no per-process prefixes): torchrun's report after kgen's fail-stop SIGTERM
    (2 warnings and a 29-line traceback down to SignalException) is one kgen line; --full shows it as written."""
    from recordings import ROOT

    text = (ROOT / "job-worker-killed/logs/rec-worker-killed-0-mp2k9.log").read_text()
    folded = merge({0: text})
    assert not any("Traceback" in line or "SignalException" in line for line in folded)
    note = [line for line in folded if "torchrun stopped by SIGTERM" in line]
    assert note == [
        "[node 0] kgen: torchrun stopped by SIGTERM and ended its workers (31 lines of its shutdown report "
        "hidden; kgen logs --full shows them)"
    ]
    assert folded[-1].endswith("local process tree stopped; exit 75")
    assert folded[folded.index(note[0]) - 1].endswith(
        "FAIL-STOP: node 1 closed its liveness connection (pod died, was deleted or its entrypoint was killed)"
    )
    full = merge({0: text}, full=True)
    assert len(full) == len(folded) + 30 and any("SignalException" in line for line in full)
    # --tail counts the lines shown: the last 2 are the folded report and the entrypoint's line
    assert merge({0: text}, tail=2) == [note[0], folded[-1]]


def test_select_sources_newest_pod_per_rank_and_previous():
    from recordings import load

    d = load("job-frozen-rank")
    assert [(s.rank, s.pod) for s in select_sources(d["pods"], None, False)] == [
        (0, "rec-frozen-0-svx7x"),
        (2, "rec-frozen-2-bj6jz"),
    ]
    assert select_sources(d["pods"], {2}, False)[0].pod == "rec-frozen-2-bj6jz"
    assert select_sources(d["pods"], None, True) == []  # no container restarted in place
    sts = load("statefulset-restarting/t1-after-first-restart")
    assert [s.rank for s in select_sources(sts["pods"], None, True)] == [0, 1]


def test_follower_threads_never_take_sigint():
    """Ctrl-C must reach the main thread (its blocking call is interrupted at once): every thread the Follower
    starts, stream workers and the pod watcher, blocks SIGINT; the caller's own mask is left as it was."""
    import signal
    import threading

    from kgen.cluster.logs import Follower, Source

    masks: dict[str, set] = {}

    def blocked(who):
        masks[who] = set(signal.pthread_sigmask(signal.SIG_BLOCK, set()))

    def open_stream(s):
        blocked(f"stream {s.rank}")
        return [b"2026-11-22T15:04:52Z hello\n"]

    def watch():
        blocked("watch")
        return []

    before = set(signal.pthread_sigmask(signal.SIG_BLOCK, set()))
    f = Follower(open_stream, watch, lambda: True)
    out = list(f.run([Source(0, "p-0"), Source(1, "p-1")]))
    assert sorted(out) == ["[node 0] hello", "[node 1] hello"]
    assert set(signal.pthread_sigmask(signal.SIG_BLOCK, set())) == before
    assert threading.current_thread() is threading.main_thread()
    assert sorted(masks) == ["stream 0", "stream 1", "watch"]
    assert all(signal.SIGINT in m for m in masks.values()), masks
