"""Test training script: join the process group, then STEPS x (all_reduce, sleep).

Prints one line per event with a wall-clock timestamp so the harness can time faults:
  KGEN_EVT <time> rank=<r> <event> [detail]
Options: --steps N (default 3), --sleep S (default 0.2), --pg-timeout T (default 1800, gloo's).
"""

import argparse
import os
import sys
import time
from datetime import timedelta


def evt(rank, what, detail=""):
    # one write() per line: the ranks of a node share the log file
    sys.stdout.write(f"KGEN_EVT {time.time():.3f} rank={rank} {what} {detail}".rstrip() + "\n")
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--sleep", type=float, default=0.2)
    ap.add_argument("--pg-timeout", type=float, default=1800)
    a = ap.parse_args()
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    evt(rank, "start", f"world={world} local={os.environ.get('LOCAL_RANK')}")
    import torch
    import torch.distributed as dist

    evt(rank, "imported")
    dist.init_process_group("gloo", timeout=timedelta(seconds=a.pg_timeout))
    evt(rank, "init-done")
    expected = world * (world + 1) / 2
    for step in range(a.steps):
        x = torch.full((1024,), float(rank + 1))
        dist.all_reduce(x)
        if x[0].item() != expected:
            evt(rank, "wrong-sum", f"{x[0].item()} != {expected}")
            sys.exit(1)
        evt(rank, "step", str(step))
        time.sleep(a.sleep)
    dist.barrier()
    dist.destroy_process_group()
    evt(rank, "done")
    if os.environ.get("KGEN_TEST_LINGER_RANK") == str(rank):  # the fault matrix's shutdown phase: others wait
        time.sleep(float(os.environ.get("KGEN_TEST_LINGER", "0")))


if __name__ == "__main__":
    main()
