"""The ``kgen`` process (console script and ``python -m kgen``): kgen.cli, tuned for a short life.

A CLI process lives well under a second, so two of the interpreter's defaults only cost time
(measured by bench/render_latency, 20 interleaved runs of ``kgen render --preset 64x8``):

- The cyclic garbage collector runs ~60 times while click, Jinja2 and ruamel.yaml are imported,
  and finds nothing: import-time objects live until the process ends. A larger first-generation
  threshold leaves ~8 collections; cycles are still collected (``kgen lint`` over many files).
- Interpreter teardown frees every module, class and function one by one (~40 ms here) just
  before the OS reclaims the whole address space anyway. After the command has finished and its
  output is flushed, the process ends with ``os._exit``. kgen registers no atexit handlers and
  leaves nothing to finalizers: ``-o`` is written and closed (atomically) inside the command.

In-process callers (tests, Python users) use ``kgen.cli.main`` or ``kgen.cli.cli``, untouched.
"""

from __future__ import annotations

import gc
import os
import sys

GC_THRESHOLD = (50_000, 10, 10)  # Python's default: (700, 10, 10)


def main() -> None:
    gc.set_threshold(*GC_THRESHOLD)
    from kgen.cli import main as cli_main

    try:
        cli_main()
        code: object = 0
    except SystemExit as exc:
        code = exc.code
    os._exit(_flushed(_exit_status(code)))


def _exit_status(code: object) -> int:
    """What ``sys.exit(code)`` would make the exit status (a non-int is printed, status 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _flushed(status: int) -> int:
    """Flush stdout and stderr (os._exit does not); a reader that went away makes status 1."""
    try:
        sys.stdout.flush()
    except (BrokenPipeError, ValueError):  # ValueError: stdout already closed
        status = status or 1
    try:
        sys.stderr.flush()
    except (BrokenPipeError, ValueError):
        pass
    return status


if __name__ == "__main__":
    main()
