"""`kgen debug stacks NAME` on a cluster run: each running pod's entrypoint answers ``--stacks`` through the API's
exec (the trainer container's own interpreter and script, as its command names them: ``python3
/opt/kgen/kgen_entrypoint.py --stacks``), all pods at once; kgen.runs.stacks groups the answers. A pod that is not
running, or whose exec is refused or does not answer in time, is a node with a note saying why."""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

from kgen.cluster.errors import ClusterError, NotFound
from kgen.cluster.kube_records import CONTAINER, current_pods, expected_ranks, pod_nproc
from kgen.runs.safetext import printable
from kgen.runs.stacks import NodeStacks, StacksReport, last_answer

STACKS_VERB = "--stacks"
MAX_PARALLEL = 16  # execs at once (each holds one WebSocket through the API server)


def stacks_command(pod: Mapping) -> list[str] | None:
    """The trainer's interpreter and kgen's script, from the pod's own command, plus ``--stacks``."""
    for c in (pod.get("spec") or {}).get("containers") or []:
        if c.get("name") != CONTAINER:
            continue
        argv = [str(a) for a in (c.get("command") or []) + (c.get("args") or [])]
        for i, a in enumerate(argv):
            if a.endswith("kgen_entrypoint.py"):
                return [*argv[: i + 1], STACKS_VERB]
    return None


def _running(pod: Mapping) -> str:
    """Why a pod cannot answer ("" when it can)."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    if meta.get("deletionTimestamp"):
        return "its pod is being deleted"
    phase = status.get("phase") or "Pending"
    if phase != "Running":
        return f"its pod is {phase}"
    for cs in status.get("containerStatuses") or []:
        if cs.get("name") == CONTAINER and "running" not in (cs.get("state") or {}):
            return "its trainer container is not running"
    return ""


def node_stacks(cluster, rank: int, pod: Mapping, timeout: float) -> NodeStacks:
    name = str((pod.get("metadata") or {}).get("name") or "?")
    why = _running(pod)
    command = stacks_command(pod)
    if not why and command is None:
        why = "its trainer does not run kgen's entrypoint"
    if why:
        return NodeStacks(rank, name, note=why)
    assert command is not None
    try:
        res = cluster.exec(name, command, container=CONTAINER, timeout=timeout)
    except ClusterError as exc:
        return NodeStacks(rank, name, note=printable(f"no answer: {exc}"))
    answer = last_answer(res.out)
    if answer is None:
        last = [ln for ln in res.err.splitlines() if ln.strip()]
        if res.code is None:
            why = f"no answer within {timeout:g} s"
        elif "unknown verb" in res.err:
            why = "its entrypoint predates --stacks (a run submitted by an older kgen)"
        else:
            why = last[-1].strip() if last else f"exit {res.code}"
        return NodeStacks(rank, name, note=printable(f"no answer: {why}"))
    return NodeStacks(rank, name, answer["ranks"], printable(answer["note"]))


def stacks(cluster, name: str, timeout: float) -> StacksReport:
    workload = cluster.workload(name)
    pods = cluster.pods(name)
    if workload is None and not pods:
        raise NotFound(f"no run {name} in namespace {cluster.namespace}", hint="`kgen list` shows the runs kgen knows")
    current, _ = current_pods(pods)
    nodes = expected_ranks(workload, pods)
    ranks = sorted(set(range(nodes)) | set(current))
    with ThreadPoolExecutor(max_workers=max(1, min(MAX_PARALLEL, len(ranks)))) as pool:
        futures = {
            r: pool.submit(node_stacks, cluster, r, current[r], timeout)
            for r in ranks
            if r in current  # a rank without a pod has nothing to ask
        }
        answers = {r: f.result() for r, f in futures.items()}
    out = [answers.get(r) or NodeStacks(r, "-", note="no pod (not created yet, or deleted)") for r in ranks]
    return StacksReport(name, nodes * pod_nproc(pods), out)
