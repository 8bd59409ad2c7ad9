"""Reading what a user names as input: a file, or ``-`` for stdin, never more than a bound.

One job: bytes in, text out, or one InputError that names the input. A read stops after
``limit + 1`` bytes, so ``/dev/zero``, an endless pipe (``yes | kgen render -f -``) or a huge
file end at once with an error instead of filling memory. Decoding is strict UTF-8. Parsing is
the caller's (values: kgen.layering; manifests: kgen.lint). No click, no printing.
"""

from __future__ import annotations

import sys
from typing import BinaryIO

from kgen.errors import InputError

STDIN_NAME = "<stdin>"


def input_name(path: str) -> str:
    """How messages name an input: the path, or ``<stdin>`` for ``-``."""
    return STDIN_NAME if path == "-" else path


def size_text(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} bytes"


def read_bytes(path: str, *, limit: int, stdin: BinaryIO | None = None, what: str = "input") -> bytes:
    """At most ``limit`` bytes of ``path`` (``-``: ``stdin``, default the process's stdin).

    Raises InputError: unreadable (``cannot read X: ...``), or larger than ``limit`` (``X: larger than
    1 MiB, the most kgen reads as one <what>``)."""
    name = input_name(path)
    try:
        if path == "-":
            stream = stdin if stdin is not None else sys.stdin
            data = getattr(stream, "buffer", stream).read(limit + 1)
        else:
            with open(path, "rb") as fh:
                data = fh.read(limit + 1)
    except OSError as exc:
        raise InputError(f"cannot read {name}: {exc.strerror or exc}") from None
    if isinstance(data, str):  # a text stream without a binary buffer (a Python caller's StringIO)
        data = data.encode("utf-8")
    if len(data) > limit:
        raise InputError(
            f"{name}: larger than {size_text(limit)}, the most kgen reads as one {what}",
            hint="is it the right file?",
        )
    return data


def read_text(path: str, *, limit: int, stdin: BinaryIO | None = None, what: str = "input") -> str:
    """``read_bytes`` decoded as UTF-8 (a leading byte-order mark dropped); InputError when it is not text."""
    data = read_bytes(path, limit=limit, stdin=stdin, what=what)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{input_name(path)}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
