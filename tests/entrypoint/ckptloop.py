"""Test training script that checkpoints every step and resumes (the README's pattern).

Each step all-reduces (rank + 1 + step) over the world and adds the result to a running total;
rank 0 writes {"step": next step, "total": ...} atomically to --ckpt after each step. A new
generation (KGEN_RESTART_COUNT > 0) resumes from the checkpoint, so the final total equals an
undisturbed run's. Events: KGEN_EVT <time> rank=<r> <event> [detail] (as trainloop.py).
"""

import argparse
import json
import os
import sys
import time
from datetime import timedelta


def evt(rank, what, detail=""):
    sys.stdout.write(f"KGEN_EVT {time.time():.3f} rank={rank} {what} {detail}".rstrip() + "\n")
    sys.stdout.flush()


def load(path):
    try:
        with open(path) as fh:
            return json.load(fh)
    except FileNotFoundError:
        return {"step": 0, "total": 0.0}


def save(path, state):
    tmp = f"{path}.tmp"
    with open(tmp, "w") as fh:
        json.dump(state, fh)
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--sleep", type=float, default=0.2)
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--fail-at", type=int, default=-1, help="--fail-rank exits 1 at this step (a script bug)")
    ap.add_argument("--fail-rank", type=int, default=0)
    ap.add_argument("--fail-once", action="store_true", help="only in the first generation")
    a = ap.parse_args()
    rank = int(os.environ["RANK"])
    gen = int(os.environ.get("KGEN_RESTART_COUNT", "0"))
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", timeout=timedelta(seconds=1800))
    state = load(a.ckpt)  # every rank reads the same checkpoint
    evt(rank, "resume", f"gen={gen} step={state['step']}")
    for step in range(state["step"], a.steps):
        if step == a.fail_at and rank == a.fail_rank and not (a.fail_once and gen > 0):
            evt(rank, "script-bug", str(step))
            sys.exit(1)
        x = torch.full((256,), float(rank + 1 + step))
        dist.all_reduce(x)
        state = {"step": step + 1, "total": state["total"] + x[0].item()}
        if rank == 0:
            save(a.ckpt, state)
        evt(rank, "step", f"{step} gen={gen}")
        time.sleep(a.sleep)
    dist.barrier()
    dist.destroy_process_group()
    evt(rank, "done", f"gen={gen} total={state['total']:g}")


if __name__ == "__main__":
    main()
