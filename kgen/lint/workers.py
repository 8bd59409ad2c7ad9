"""Run independent pieces of work on every core: the calling process and forked workers take the
next piece from a shared counter until none is left, and the results come back in piece order.

Processes, not threads (the work is pure Python). Workers are forked, so they start with
everything the caller has loaded and prepared (rules, compiled schemas, texts already read): no
start-up beyond the fork, nothing sent to them but the piece's number. A worker sends all its
results once at the end (they are small: findings, no values).

A worker that dies (a signal, the OOM killer, an exception) never hangs the run: the caller reads
until the worker's pipe closes, then learns from the shared claim table which pieces the worker
had finished (redone here) and which one it was working on when it died (``Crashed``; not redone,
since it may kill this process too). A Python exception in a worker is not a crash: the piece is
redone here, where the same exception has its real traceback.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any


class Crashed:
    """The result of a piece whose worker died while working on it."""

    __slots__ = ("exitcode",)

    def __init__(self, exitcode: int | None) -> None:
        self.exitcode = exitcode

    def describe(self) -> str:
        code = self.exitcode
        if code is not None and code < 0:
            import signal

            try:
                return f"killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exited with status {code}"


class _Failed:
    """A piece that raised in a worker: the caller redoes it."""

    __slots__ = ()


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def can_fork() -> bool:
    """Forking is safe here: Linux (macOS forks badly with system frameworks loaded), no other thread."""
    import threading

    return sys.platform.startswith("linux") and hasattr(os, "fork") and threading.active_count() == 1


def run(count: int, work: Callable[[int], Any], jobs: int, order: list[int] | None = None) -> list[Any]:
    """``[work(i) for i in range(count)]`` on ``jobs`` processes (this one and ``jobs - 1`` forked
    workers), pieces taken in ``order`` (default 0, 1, ...; give the largest first). A piece whose
    worker died is a ``Crashed``."""
    if jobs <= 1 or count <= 1 or not can_fork():
        return [work(i) for i in range(count)]
    import multiprocessing

    order = list(range(count)) if order is None else order
    ctx = multiprocessing.get_context("fork")
    lock = ctx.Lock()
    taken = ctx.RawValue("i", 0)  # next position in ``order``
    owner = ctx.RawArray("i", count)  # the process that claimed each piece (0: none; 1: this one)
    done = ctx.RawArray("b", count)
    results: list[Any] = [None] * count

    def claim(me: int) -> int | None:
        with lock:
            pos = taken.value
            if pos >= count:
                return None
            taken.value = pos + 1
        piece = order[pos]
        owner[piece] = me
        return piece

    def serve(me: int, conn: Any) -> None:
        out = {}
        try:
            while True:
                piece = claim(me)
                if piece is None:
                    break
                try:
                    out[piece] = work(piece)
                except BaseException:  # noqa: BLE001 - redone by the caller, which raises it where it is seen
                    out[piece] = _Failed()
                done[piece] = 1
            conn.send(out)
        finally:
            conn.close()

    workers = []
    try:
        for me in range(2, min(jobs, count) + 1):
            receive, send = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=serve, args=(me, send), daemon=True)
            proc.start()
            send.close()
            workers.append((me, proc, receive))
        while True:
            piece = claim(1)
            if piece is None:
                break
            results[piece] = work(piece)
            done[piece] = 1
        for me, proc, receive in workers:
            try:
                got = receive.recv()
            except Exception:  # noqa: BLE001 - EOF, a truncated message: the worker died
                got = None
            proc.join()
            if got is None:
                for piece in range(count):  # the piece it died on; the ones it finished are redone below
                    if owner[piece] == me and not done[piece]:
                        results[piece] = Crashed(proc.exitcode)
                continue
            for piece, value in got.items():
                results[piece] = value
        for piece in range(count):  # finished by a worker that died before sending, or raised there
            if results[piece] is None or isinstance(results[piece], _Failed):
                results[piece] = work(piece)
    finally:
        for _, proc, receive in workers:
            if proc.is_alive():
                proc.kill()
                proc.join()
            receive.close()
    return results
