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

import errno
import gc
import io
import os
import signal
import sys

GC_THRESHOLD = (50_000, 10, 10)  # Python's default: (700, 10, 10)


def main() -> None:
    gc.set_threshold(*GC_THRESHOLD)
    if sys.stdout is None:  # started with stdout closed (`kgen render >&-`): writing it fails, not vanishes
        sys.stdout = _Closed()
    from kgen.cli import main as cli_main

    try:
        cli_main()
        code: object = 0
    except SystemExit as exc:
        code = exc.code
    status = _flushed(_exit_status(code))
    if status == EXIT_BROKEN_PIPE:  # the reader went away: end by SIGPIPE, quietly, like `cat` or `yes`
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGPIPE)
    os._exit(status)


EXIT_BROKEN_PIPE = 141  # kgen.cli.EXIT_BROKEN_PIPE (not imported: kgen.cli loads click)


class _Closed(io.TextIOBase):
    """sys.stdout when file descriptor 1 was closed at start: every write fails with EBADF."""

    encoding = "utf-8"
    errors = "strict"

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        raise OSError(errno.EBADF, os.strerror(errno.EBADF))

    def flush(self) -> None:
        pass


def _exit_status(code: object) -> int:
    """What ``sys.exit(code)`` would make the exit status (a non-int is printed, status 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _flushed(status: int) -> int:
    """Flush stdout and stderr (os._exit does not). A reader that went away makes the status
    EXIT_BROKEN_PIPE (quiet); any other failed write (a full disk, /dev/full) is one line and status 2."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        status = EXIT_BROKEN_PIPE
    except ValueError:  # stdout already closed
        status = status or 1
    except OSError as exc:
        from kgen.cli import stdout_error

        _say(f"kgen: error: {stdout_error(exc)}")
        status = status or 2
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    return status


def _say(line: str) -> None:
    try:
        sys.stderr.write(line + "\n")
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    main()
