"""The --smoke-test worker (run by torchrun on every rank): an all-reduce check."""

from __future__ import annotations

import os
import sys
import time

# --------------------------------------------------------------------------------------------
# --smoke-test worker (run by torchrun on every rank)
# --------------------------------------------------------------------------------------------


def smoke_worker() -> int:
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(local)
        device, backend = torch.device("cuda", local), "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    tag = f"[smoke rank {rank}/{world}]"
    t0 = time.monotonic()
    dist.init_process_group(backend, timeout=timedelta(seconds=120))
    t_init = time.monotonic() - t0
    numel = (64 << 20 if cuda else 4 << 20) // 4
    x = torch.full((numel,), float(rank + 1), dtype=torch.float32, device=device)
    expected = world * (world + 1) / 2
    dist.all_reduce(x)  # warm-up and correctness
    if cuda:
        torch.cuda.synchronize()
    bad = (x != expected).sum().item()
    if bad:
        sys.stderr.write(
            f"{tag} FAIL: all-reduce sum wrong in {bad} of {numel} elements: got {x[0].item()} expected {expected}\n"
        )
        return 1
    iters = 5
    times = []
    for _ in range(iters):
        x.fill_(float(rank + 1))
        if cuda:
            torch.cuda.synchronize()
        t = time.monotonic()
        dist.all_reduce(x)
        if cuda:
            torch.cuda.synchronize()
        times.append(time.monotonic() - t)
        if x[0].item() != expected or x[-1].item() != expected:
            sys.stderr.write(f"{tag} FAIL: all-reduce sum {x[0].item()} != {expected}\n")
            return 1
    best = min(times)
    size = numel * 4
    algbw = size / best / 1e9
    busbw = algbw * 2 * (world - 1) / world if world > 1 else algbw
    timing = torch.tensor([best], dtype=torch.float64, device=device)
    dist.all_reduce(timing, op=dist.ReduceOp.MAX)
    print(f"{tag} ok: backend {backend}, init {t_init:.2f}s, sum {expected:g} correct", flush=True)
    if rank == 0:
        slow = timing.item()
        print(
            f"kgen smoke-test: PASS world_size={world} backend={backend} "
            f"all-reduce {size >> 20} MiB: {slow * 1e3:.1f} ms (slowest rank), "
            f"algbw {size / slow / 1e9:.3f} GB/s, busbw "
            f"{size / slow / 1e9 * 2 * (world - 1) / max(world, 1):.3f} GB/s "
            f"(rank 0: {algbw:.3f}/{busbw:.3f})",
            flush=True,
        )
    dist.barrier()
    dist.destroy_process_group()
    return 0
