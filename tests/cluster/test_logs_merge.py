"""kgen.cluster.logs.merge: lines of several ranks in time order (the API's timestamps=true prefix),
each with its [rank] prefix; a pod's own order is kept."""

from kgen.cluster.logs import merge, select_sources


def test_merge_orders_by_api_timestamps_and_strips_them():
    logs = {
        0: "2026-11-22T15:04:52.900000000Z [kgen node 0] FAIL-STOP: node 1 closed\n"
        "2026-11-22T15:04:53.100000000Z [kgen node 0] exit 75\n",
        1: "2026-11-22T15:04:52.100Z SUM_OK rank=1\n",
        2: "2026-11-22T15:04:52Z first of rank 2\n",
    }
    assert merge(logs) == [
        "[2] first of rank 2",
        "[1] SUM_OK rank=1",
        "[0] [kgen node 0] FAIL-STOP: node 1 closed",
        "[0] [kgen node 0] exit 75",
    ]
    assert merge(logs, timestamps=True)[0] == "[2] 2026-11-22T15:04:52Z first of rank 2"


def test_lines_without_timestamps_keep_their_pod_order_and_ranks_are_padded():
    logs = {r: f"a{r}\nb{r}\n" for r in (0, 10)}
    assert merge(logs) == ["[ 0] a0", "[ 0] b0", "[10] a10", "[10] b10"]


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
