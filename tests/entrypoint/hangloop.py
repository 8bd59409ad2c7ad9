"""Test training script for the hang watchdog: STEPS x (all_reduce, print); with --stuck-rank R, rank R
waits for a batch that never comes (queue.get in next_batch) at --stuck-at, while every other rank waits for
it in the next all_reduce. --progress writes each step through the documented one-line helper instead of
printing it (--quiet: no line per step)."""

import argparse
import os
import queue
import sys
import time


def kgen_progress(step):
    (f := os.environ.get("KGEN_PROGRESS_FILE")) and open(f, "w").write(f"{step}\n")  # noqa: E701


def say(rank, what):
    sys.stdout.write(f"KGEN_EVT {time.time():.3f} rank={rank} {what}\n")
    sys.stdout.flush()


def next_batch(batches):
    return batches.get()  # the deadlock: nobody ever puts a batch


def train_step(dist, torch, rank):
    x = torch.ones(256) * (rank + 1)
    dist.all_reduce(x)
    return x


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=10**6)
    ap.add_argument("--sleep", type=float, default=0.1)
    ap.add_argument("--stuck-rank", type=int, default=-1)
    ap.add_argument("--stuck-at", type=int, default=5)
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args()
    rank = int(os.environ["RANK"])
    say(rank, "start")
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    say(rank, "init-done")
    batches: queue.Queue = queue.Queue()
    for step in range(a.steps):
        if rank == a.stuck_rank and step == a.stuck_at:
            say(rank, "stuck")
            next_batch(batches)
        train_step(dist, torch, rank)
        kgen_progress(step)
        if not a.quiet:
            say(rank, f"step {step}")
        time.sleep(a.sleep)
    dist.destroy_process_group()
    say(rank, "done")


if __name__ == "__main__":
    main()
