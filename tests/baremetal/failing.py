"""Test training script: gloo all-reduces, printing each step as two writes (the text, then its newline:
what an unbuffered print does), and one rank that raises.

Options: --steps N, --sleep S, --fail-rank R (-1: none) at --fail-step S, --record (main under torch
elastic's @record: the error file), --lines K (K lines per step).
"""

import argparse
import os
import sys
import time


def main(a):
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    for step in range(a.steps):
        t = torch.ones(4) * (rank + 1)
        dist.all_reduce(t)
        for k in range(a.lines):
            sys.stdout.write(f"rank {rank}/{world} step {step} line {k} loss {t[0].item():.4f}")
            sys.stdout.write("\n")
        if rank == a.fail_rank and step == a.fail_step:
            raise RuntimeError(f"deliberate failure on rank {rank} at step {step}") if not a.abort else die(rank)
        time.sleep(a.sleep)
    dist.destroy_process_group()


def die(rank: int) -> None:
    """--abort: say why on stderr, then die of SIGABRT as a native library's abort does (no traceback)."""
    sys.stderr.write(f"giving up on rank {rank}: shard index missing\n")
    sys.stderr.flush()
    os.abort()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--sleep", type=float, default=0.2)
    ap.add_argument("--fail-rank", type=int, default=-1)
    ap.add_argument("--fail-step", type=int, default=2)
    ap.add_argument("--record", action="store_true")
    ap.add_argument("--lines", type=int, default=1)
    ap.add_argument("--abort", action="store_true", help="the failing rank dies of SIGABRT instead (see die)")
    args = ap.parse_args()
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    if args.record:
        from torch.distributed.elastic.multiprocessing.errors import record

        record(main)(args)
    else:
        main(args)
