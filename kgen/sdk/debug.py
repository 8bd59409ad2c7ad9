"""`kgen debug stacks RUN`: every training process's Python stack, from every node of a run.

The run is found as the other run verbs find it (kgen.sdk.runs.locate: this machine's bare-metal record of
that name first); each node's entrypoint answers ``--run-dir DIR --stacks`` (one JSON line: its ranks' stacks, dumped
on a signal through the sitecustomize it gave them), all nodes at once; kgen.runs.stacks groups them.
Bare metal (``kgen launch``, ``--local`` and over ssh) through its transport; Slurm through one ``srun --overlap``
step in the running job (kgen.slurm.stacks); a cluster run's pods through the API's exec (kgen.cluster.stacks:
``kubectl exec POD -- python3 /opt/kgen/kgen_entrypoint.py --stacks`` prints one pod's line by hand).
"""

from __future__ import annotations

from dataclasses import dataclass

from kgen.runs.stacks import NodeStacks, StacksReport, last_answer
from kgen.sdk.runs import RunRef, locate

STACKS_TIMEOUT = 20.0  # one node's answer (its ranks dump within 2 s; --local: interpreter start on a busy host)


@dataclass
class StacksRequest:
    run: RunRef
    timeout: float = STACKS_TIMEOUT


def stacks(req: StacksRequest) -> StacksReport:
    ref = req.run
    engine, found = locate(ref)  # checks the name; a run two engines know asks to choose
    if engine.name == "cluster":
        from kgen.cluster.engine import connect
        from kgen.cluster.stacks import stacks as cluster_stacks

        cluster = connect(ref.namespace, ref.context, ref.kubeconfig, max_connections=16)
        try:
            return cluster_stacks(cluster, ref.name, req.timeout)
        finally:
            cluster.close()
    if engine.name == "slurm":
        from kgen.slurm.stacks import stacks as slurm_stacks

        return slurm_stacks(found.record, req.timeout)
    return _bare_metal(found.record, req.timeout)


def _bare_metal(rec, timeout: float) -> StacksReport:
    from kgen.baremetal.engine import transport_for
    from kgen.baremetal.transport import parallel
    from kgen.runs.safetext import printable

    transport = transport_for(rec)
    bound = timeout + float(getattr(transport, "connect_timeout", 0) or 0)

    def one(node) -> NodeStacks:
        if not node.dir:
            return NodeStacks(node.rank, node.host, note="never started (no run directory)")
        res = transport.call(node.host, ["--run-dir", node.dir, "--stacks"], timeout=bound)
        answer = last_answer(res.out.decode("utf-8", "replace")) if res.ok else None
        if answer is None:
            last = [ln for ln in res.err.splitlines() if ln.strip()]
            why = res.unreachable or (last[-1].strip() if last else f"exit {res.rc}")
            if "unknown verb" in why:
                why = "its entrypoint predates --stacks (a run launched by an older kgen)"
            return NodeStacks(node.rank, node.host, note=printable(f"no answer: {why}"))
        return NodeStacks(node.rank, node.host, answer["ranks"], printable(answer["note"]))

    nodes = parallel(rec.nodes, one)
    return StacksReport(rec.name, len(rec.nodes) * rec.nproc, nodes)
