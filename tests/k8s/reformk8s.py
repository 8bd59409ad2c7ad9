"""Re-formation on the real control plane, timed: a checkpointing run submitted by `kgen submit`, SIGKILL of
one pod's processes, the Job controller's replacement, every rank training again. Shared by
test_k8s_run.py and `bench/reform --control-plane`.

The time from the fault to every rank training again is split at three moments the stand-in sees:
the failed pod's status written (t1), the replacement pod bound to a node and seen (t2), its container
started (t3); t4 is the last rank's first step of the new generation (the training script's own clock).
  stand-in:    (t1 - t0) + (t3 - t2)   what a kubelet does (notice the exit, start the container)
  controllers: t2 - t1                 Job controller (its back-off) + scheduler
  kgen:        t4 - t3                 the entrypoint re-forms the group, torchrun and the script start
"""

from __future__ import annotations

import re
import signal
import sys
import time
from pathlib import Path

from k8sutil import kgen, wait

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "entrypoint"))
from podharness import CKPTLOOP, free_port_pair  # noqa: E402


def submit(ns: str, name: str, nodes: int, command: list[str], *extra: str, kind: str = "job", gpus: int = 0) -> str:
    port = free_port_pair()
    args = [
        "submit", "-n", ns, "--name", name, "--kind", kind, "--nodes", str(nodes), "--gpus", str(gpus),
        "--cpu", "1", "--memory", "1Gi", "--set", "nprocPerNode=1", "--set", f"port={port}",
        "--set", f"livenessPort={port + 1}", "--set", "gloo.socketIfname=lo",
        "--set", "timeouts.heartbeat=5", "--set", "timeouts.masterWait=60", *extra, "--", *command,
    ]  # fmt: skip
    res = kgen(*args)
    assert res.returncode == 0, res.stderr
    return res.stdout + res.stderr


def first_steps(logs: str, gen: int) -> dict[int, float]:
    first: dict[int, float] = {}
    for t, r in re.findall(rf"KGEN_EVT (\S+) rank=(\d+) step \d+ gen={gen}\b", logs):
        first.setdefault(int(r), float(t))
    return first


def index_of(pod) -> str:
    return pod.obj["metadata"].get("labels", {}).get("batch.kubernetes.io/job-completion-index", "")


def reform_run(k8s, ns: str, name: str, ckpt: Path, nodes: int = 3, victims=(1,), steps: int = 100000,
               sleep: float = 0.15, timeout: float = 240) -> list[dict]:  # fmt: skip
    """Submits the run, then for each victim index: SIGKILL, wait for generation g+1 on every rank. Returns
    one dict of timings per fault; the run is left running (the caller stops or waits for it)."""
    kubelet = k8s.kubelet
    submit(ns, name, nodes, [str(CKPTLOOP), "--steps", str(steps), "--sleep", str(sleep), "--ckpt", str(ckpt)])
    wait(lambda: len(first_steps(kubelet.logs(ns, f"{name}-"), 0)) == nodes, 180, "every rank training", every=0.3)
    out = []
    for gen, victim_index in enumerate(victims, start=1):

        def steps(gen=gen):
            return len(re.findall(rf"step \d+ gen={gen - 1}\b", kubelet.logs(ns, f"{name}-")))

        seen = steps()
        wait(lambda seen=seen: steps() >= seen + 3 * nodes, 120, "a few steps more")
        victim = next(p for p in kubelet.running(ns, f"{name}-") if index_of(p) == str(victim_index))
        t0 = time.time()
        victim.current.signal(signal.SIGKILL)

        def back(gen=gen):
            f = first_steps(kubelet.logs(ns, f"{name}-"), gen)
            return f if len(f) == nodes else None

        firsts = wait(back, timeout, f"every rank training again (generation {gen})", every=0.2)
        t4 = max(firsts.values())
        new = [p for p in kubelet.history(ns, f"{name}-") if p.started_at > t0]
        t1, t2 = victim.failed_at, min(p.started_at for p in new)
        t3 = min(p.containers[0].started for p in new if p.containers)
        out.append(
            {
                "fault": f"SIGKILL index {victim_index}",
                "exit_code": victim.current.exit_code,
                "replaced": sorted(p.name for p in new),
                "total": t4 - t0,
                "stand_in": (t1 - t0) + (t3 - t2),
                "controllers": t2 - t1,
                "kgen": t4 - t3,
            }
        )
    return out


def describe(r: dict) -> str:
    return (
        f"{r['fault']}: all ranks training again {r['total']:.1f} s = controllers (Job controller back-off + "
        f"scheduler) {r['controllers']:.1f} s + kgen {r['kgen']:.1f} s + kubelet stand-in {r['stand_in']:.1f} s"
    )
