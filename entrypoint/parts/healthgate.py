"""The pre-flight health gate: devices, an all-reduce and ping-pongs between nodes before training."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from .channel import Signals
from .config import Config, _number
from .header import Stop, emit, log, printable
from .proctree import _torchrun_dies_with_us
from .torchrun import poll

# --------------------------------------------------------------------------------------------
# Health gate (docs/entrypoint.md#the-health-gate)
#
# KGEN_HEALTH_GATE=off|warn|fail (values health.gate, default warn). Generation 0 of a group of 2+ nodes,
# after node 0 said start and before this node's torchrun: every node runs HEALTH_WORKER (python, torch)
# with the rank of its node and the run's master address and port (the store the training's rendezvous
# uses next). It checks the devices (GPUs visible as NPROC_PER_NODE, nvidia-smi's uncorrected ECC errors),
# all-reduces a few MiB over the real backend (nccl on GPUs, gloo on CPU) and then times a ping-pong with
# every other node (round-robin pairs); each node's phases and numbers go to the store, so every node reads
# the same result and judges it alike (health_verdict). A link far slower than the median node's best (or above
# HEALTH_LINK_MS) is slow; a node whose every link is slow is the slow node. The worker is bounded by
# KGEN_HEALTH_TIMEOUT: at the bound it reports how far each node got (the ones that did not answer).
# Node 0 logs one line per node and HEALTH_MARK (a JSON line kgen status reads); each other node its own.
# fail: a failed gate ends the run before training (EXIT_HEALTH on every node, node 0 names the node).
# The heartbeats go on meanwhile. This section counts twice in a pod's ConfigMap: keep it lean.
# --------------------------------------------------------------------------------------------

HEALTH_MARK = "kgen-entrypoint: health: "
EXIT_HEALTH = 78  # the health gate failed with KGEN_HEALTH_GATE=fail: every node exits 78
HEALTH_SLOW, HEALTH_FLOOR_MS, HEALTH_LINK_MS, HEALTH_WAIT = 5.0, 20.0, 100.0, 10.0
HEALTH_PHASES = ("store", "process group", "all-reduce", "ping-pongs", "end")
HEALTH_WORKER = r"""import json, os, subprocess, threading, time
from datetime import timedelta
import torch, torch.distributed as dist
c = json.loads(os.environ["KGEN_HEALTH"]); R, N, T = c["rank"], c["world"], c["timeout"]; t0 = time.monotonic()
left = lambda: timedelta(seconds=max(1, T - 1 - time.monotonic() + t0))
def out(d):
    print(json.dumps(d), flush=True); os._exit(0)
def late():
    time.sleep(left().total_seconds())
    try:
        s = dist.TCPStore(c["addr"], c["port"], N, False, timedelta(seconds=2))
        out({"reached": [sum(s.check([k + str(r)]) for k in ("up", "pg", "ar", "pp")) for r in range(N)]})
    except Exception as e:
        out({"error": f"no answer within {T:g}s, node 0's store neither ({str(e)[:200]})"})
threading.Thread(target=late, daemon=True).start()
try:
    cuda = torch.cuda.is_available(); need, dev = c["gpus"] or cuda * c["nproc"], ""
    if (torch.cuda.device_count() if cuda else 0) < need:
        dev = f"{torch.cuda.device_count() if cuda else 0} GPU(s) visible, {need} expected"
    try:
        q = need and subprocess.run(["nvidia-smi", "--query-gpu=index,ecc.errors.uncorrected.volatile.total",
                                          "--format=csv,noheader"], capture_output=True, text=True, timeout=10)
        ecc = [r.split(",")[0] for r in q.stdout.splitlines() if r.split(",")[-1].strip().lstrip("0").isdigit()]
        dev = dev or (f"nvidia-smi exit {q.returncode}" if q.returncode else ecc and f"ECC errors: GPU {ecc}" or "")
    except (OSError, AttributeError):
        pass
    d, sync = (torch.device("cuda", 0), torch.cuda.synchronize) if cuda else (torch.device("cpu"), lambda: None)
    s = dist.TCPStore(c["addr"], c["port"], N, R == 0, timedelta(seconds=T), wait_for_workers=False)
    s.set(f"up{R}", dev)
    dist.init_process_group("nccl" if cuda else "gloo", store=dist.PrefixStore("pg", s), rank=R, world_size=N,
                            timeout=timedelta(seconds=T))
    s.set(f"pg{R}", "")
    x, times = torch.empty(c["mb"] << 18, device=d), []
    while len(times) < 3:
        x.fill_(1.0); sync(); t = time.monotonic(); dist.all_reduce(x); sync(); times.append(time.monotonic() - t)
        if x[0].item() != N or x[-1].item() != N:
            raise RuntimeError(f"all-reduce sum {x[0].item()}, not {N}")
        spent = torch.tensor([sum(times)], dtype=torch.float64, device=d); dist.all_reduce(spent, op=dist.ReduceOp.MAX)
        if spent.item() > 1:
            break
    s.set(f"ar{R}", str(min(times) * 1e3))
    M, y, pp = N + N % 2, torch.ones(c["kb"] << 8, device=d), {}
    for rnd in range(M - 1):  # round-robin pairs: a fixed, the others turn
        ring = [0] + [1 + (k + rnd) % (M - 1) for k in range(M - 1)]
        p = ring[M - 1 - ring.index(R)]
        for _ in range(3 * (p < N)):
            t = time.monotonic()
            for op in (dist.send, dist.recv) if R < p else (dist.recv, dist.send):
                op(y, p)
            sync(); pp[p] = min(pp.get(p, 1e9), (time.monotonic() - t) * 1e3)
    s.set(f"pp{R}", json.dumps(pp))
    s.wait([f"pp{r}" for r in range(N)], left())
    res = {"up": [s.get(f"up{r}").decode() for r in range(N)], "ar": [float(s.get(f"ar{r}")) for r in range(N)],
           "pp": [json.loads(s.get(f"pp{r}")) for r in range(N)]}
    s.set(f"done{R}", "")
    if R == 0:
        s.wait([f"done{r}" for r in range(N)], left())
    out(res)
except Exception as e:
    out({"error": f"{type(e).__name__}: {str(e)[:300]}"})
"""


def _median(v: list[float]) -> float:
    v = sorted(v)
    return (v[(len(v) - 1) // 2] + v[len(v) // 2]) / 2 if v else 0.0


def health_verdict(res: dict, n: int, timeout: float) -> tuple[list[str], list[int]]:
    """Every node's line and the nodes at fault, from one worker's answer (every node reads the same)."""
    if "reached" in res:
        got, low = res["reached"], min(res["reached"])
        lines = [f"node {r}: no answer within {timeout:g}s (stuck in the {HEALTH_PHASES[k]})" if k == low
                 else f"node {r}: got past the {HEALTH_PHASES[k - 1]}" for r, k in enumerate(got)]  # fmt: skip
        return lines, [r for r, k in enumerate(got) if k == low]
    if "error" in res:
        return [f"node {r}: the gate failed: {res['error']}" for r in range(n)], list(range(n))
    links = {(r, int(p)): t for r, pp in enumerate(res["pp"]) for p, t in pp.items() if r < int(p)}  # a round trip
    mine = {r: [t for k, t in links.items() if r in k] for r in range(n)}
    base = _median([min(v) for v in mine.values() if v])  # the median node's best link
    slow = {k for k, t in links.items() if t > HEALTH_LINK_MS or t > HEALTH_SLOW * base and t - base > HEALTH_FLOOR_MS}
    nodes = {r for r in range(n) if n > 2 and all(k in slow for k in links if r in k)}
    nodes = nodes if len(nodes) < n else set()
    lines, bad = [], []
    for r in range(n):
        to = [k[0] + k[1] - r for k in sorted(slow) if r in k and (r in nodes or not nodes & set(k))]
        worst, names = max([links[(min(r, o), max(r, o))] for o in to] or [0]), ", ".join(map(str, to))
        if res["up"][r]:
            lines.append(f"node {r}: {res['up'][r]}")
        elif r in nodes:
            best = min(mine[r])
            lines.append(f"node {r}: {best / max(base, 1e-3):.0f}x slower than the median "
                         f"(links to nodes {names}: {best:.1f}-{worst:.1f} ms, median {base:.1f} ms)")  # fmt: skip
        elif to:
            lines.append(f"node {r}: slow link to node {names} ({worst:.1f} ms, median {base:.1f} ms"
                         + "; 2 nodes: either end)" * (n == 2) + ")" * (n > 2))  # fmt: skip
        else:
            fast = [t for k, t in links.items() if r in k and k not in slow]
            lines.append(f"node {r}: ok {_median(fast):.1f} ms (all-reduce {res['ar'][r]:.1f} ms)")
            continue
        bad.append(r)
    return lines, bad


class Health:
    """The health gate (module singleton HEALTH)."""

    gate, timeout = "warn", 30.0

    def configure(self, env: dict, problems: list[str]) -> str:
        self.gate = (env.get("KGEN_HEALTH_GATE") or "warn").strip().lower()
        if self.gate not in ("off", "warn", "fail"):
            problems.append(f"KGEN_HEALTH_GATE={self.gate!r} is not off, warn or fail: set values health.gate")
        self.timeout = _number(env, "KGEN_HEALTH_TIMEOUT", problems, float, 30.0, 5, fix="seconds, e.g. 30")
        return self.gate

    def run(self, cfg: Config, sigs: Signals, link, gen: int) -> Stop | None:
        """Before this node's torchrun: the gate (None: go on; a Stop: the run ends here)."""
        if self.gate == "off" or gen or cfg.nnodes < 2:
            return None
        import tempfile

        gpus = cfg.nproc if (os.environ.get("NVIDIA_VISIBLE_DEVICES") or "all") not in ("all", "void", "none") else 0
        spec = {"rank": cfg.node_rank, "world": cfg.nnodes, "addr": cfg.master_addr, "port": cfg.master_port,
                "timeout": self.timeout, "mb": 4, "kb": 256, "gpus": gpus, "nproc": cfg.nproc}  # fmt: skip
        log(f"health gate ({self.gate}): all-reduce, ping-pongs; KGEN_HEALTH_TIMEOUT={self.timeout:g}s")
        t0, stop = (
            time.monotonic(),
            lambda: sigs.pending or any(getattr(link, a, None) for a in ("verdict", "lost", "stop_host")),
        )
        with tempfile.TemporaryFile() as out:
            proc = subprocess.Popen([sys.executable, "-c", HEALTH_WORKER], stdout=out, stderr=subprocess.STDOUT,
                                    env=dict(os.environ, KGEN_HEALTH=json.dumps(spec)), start_new_session=True,
                                    preexec_fn=_torchrun_dies_with_us)  # fmt: skip
            while proc.poll() is None and time.monotonic() - t0 < self.timeout + 5 and not stop():
                poll(link.sel, sigs, link)
                link.tick(time.monotonic())
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            out.seek(0)
            text = out.read().decode("utf-8", "replace").strip().splitlines() or [""]
        if stop():  # the main loop sees it, or node 0 ended the run (a failed gate) before training
            v: tuple = getattr(link, "verdict", None) or ("",)
            if v[0] != "end":
                return None
            link.close()
            return Stop(v[1], f"node 0 ended the run ({v[-1]})")
        try:
            res = json.loads(text[-1])
        except ValueError:
            res = {"error": f"node {cfg.node_rank}'s worker exit {proc.returncode}: {printable(text[-1])[-300:]}"}
        lines, bad = health_verdict(res, cfg.nnodes, self.timeout)
        took = time.monotonic() - t0
        me = cfg.node_rank or 0
        for line in lines if cfg.is_master else lines[me : me + 1]:
            log(f"kgen health: {line}")
        if cfg.is_master:
            emit(sys.stderr, HEALTH_MARK + json.dumps({"gate": self.gate, "lines": lines, "bad": bad}) + "\n")
        reason = "health gate: " + "; ".join(lines[r] for r in bad)
        log(f"health gate passed in {took:.1f}s" if not bad else f"{reason} (health.gate {self.gate})")
        if not bad or self.gate == "warn":
            return None
        if cfg.is_master:
            link.end(EXIT_HEALTH, reason, bad[0])
            return Stop(EXIT_HEALTH, reason)
        end = time.monotonic() + HEALTH_WAIT
        while link.verdict is None and time.monotonic() < end and not sigs.pending:
            poll(link.sel, sigs, link)
            link.tick(time.monotonic())
        if link.verdict and link.verdict[0] != "end":
            return None
        link.close()
        return Stop(EXIT_HEALTH, reason)


HEALTH = Health()
