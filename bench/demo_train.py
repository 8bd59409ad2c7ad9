"""The transcripts' train.py (bench/transcripts): gloo all-reduces, a loss every 10 steps, a checkpoint every
step that a re-formed group resumes from; --fail-rank R --fail-step S raises on rank R at step S; --stuck-rank R
--stuck-step S: rank R waits at step S for a batch that never comes (queue.get) while the others wait for it in
the next all-reduce (the hang watchdog's transcript)."""

import argparse
import json
import os
import queue
import time

import torch
import torch.distributed as dist

ap = argparse.ArgumentParser()
ap.add_argument("steps", nargs="?", type=int, default=1_000_000)
ap.add_argument("--fail-rank", type=int, default=-1)
ap.add_argument("--fail-step", type=int, default=-1)
ap.add_argument("--stuck-rank", type=int, default=-1)
ap.add_argument("--stuck-step", type=int, default=-1)
ap.add_argument("--sleep", type=float, default=0.1)
a = ap.parse_args()
batches: queue.Queue = queue.Queue()  # nobody ever puts a batch: --stuck-rank's data loader


def next_batch():
    return batches.get()


rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group("gloo")
ckpt = f"ckpt-{os.environ.get('KGEN_JOB_NAME', 'run')}-{os.environ.get('MASTER_PORT', '0')}.json"
start = 0
if int(os.environ.get("KGEN_RESTART_COUNT", "0")) > 0 and os.path.exists(ckpt):  # a re-formed group resumes
    with open(ckpt) as fh:
        start = json.load(fh)["step"]
for step in range(start, a.steps):
    if rank == a.fail_rank and step == a.fail_step:
        raise ValueError(f"shard {step:05d} of rank {rank} has no labels")
    if rank == a.stuck_rank and step == a.stuck_step:
        next_batch()
    x = torch.ones(1)
    dist.all_reduce(x)
    loss = 1.0 / (1.0 + 0.1 * step * x.item() / world) ** 2
    if step % 10 == 0:
        print(f"rank {rank}/{world} step {step} loss {loss:.4f}", flush=True)
    if rank == 0:
        with open(f"{ckpt}.tmp", "w") as fh:
            json.dump({"step": step + 1}, fh)
        os.replace(f"{ckpt}.tmp", ckpt)
    time.sleep(a.sleep)
dist.destroy_process_group()
