"""Reading what a user names as input: a file, or ``-`` for stdin, never more than a bound.

One job: bytes in, text out, or one InputError that names the input. No click, no printing;
parsing is the caller's (values: kgen.render.layering; manifests: kgen.lint).

- ``read_bytes`` / ``read_text`` (values files, ``kgen render -f``): a read stops after ``limit + 1``
  bytes, so ``/dev/zero``, an endless pipe (``yes | kgen render -f -``) or a huge file end at once
  with an error instead of filling memory. Decoding is strict UTF-8.
- ``read_yaml_file`` / ``read_stream`` (``kgen lint``'s manifests): read in 1 MiB chunks and stop
  at the first byte that is not UTF-8 or is a character YAML does not allow (NUL, ESC, C1 controls
  ...), with its line and column (``NotText``), so ``/dev/zero`` and ``/dev/urandom`` end after the
  first chunk; and past ``limit`` bytes (default ``MAX_FILE_BYTES``, 64 MiB: ``TooLarge``), so an
  endless stream (``yes | kgen lint -``) ends too. OS errors other than a missing file are
  ``Unreadable`` (permission denied ...). These errors carry ``problem`` (and ``line``/``column``)
  so lint reports them as KG004 findings.
"""

from __future__ import annotations

import codecs
import re
import sys
from typing import IO, Any, BinaryIO

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


# ---------------------------------------------------------------------------------------------
# Manifests for kgen lint: chunked, checked as they are read

MAX_FILE_BYTES = 64 * 1024 * 1024
"""One input file or stdin. kubectl has no such limit, but no object exceeds the API server's 3 MiB
request limit, and 64 MiB holds ~100,000 typical manifests (a large `helm template` output is a few MB);
it bounds what one file can cost (time and memory), as the API server's limit bounds one request."""

CHUNK = 1 << 20
# What YAML (libyaml, goyaml) does not allow in a stream: C0 controls but TAB, LF and CR; DEL; C1
# controls but NEL (U+0085, in UTF-8 C2 80..C2 9F); U+FFFE and U+FFFF (EF BF BE/BF).
_NOT_YAML = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]|\xc2[\x80-\x84\x86-\x9f]|\xef\xbf[\xbe\xbf]")
_NOT_YAML_STR = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x84\x86-\x9f\ufffe\uffff]")
# The ASCII bytes YAML allows: TAB, LF, CR and the printable ones. An ASCII chunk left empty when they are
# deleted has nothing to find (bytes.translate runs ~30x faster than the search above).
_YAML_ASCII = b"\t\n\r" + bytes(range(32, 127))


class NotText(InputError):
    """Bytes that cannot be YAML text, at a position."""

    def __init__(self, name: str, line: int, column: int, problem: str) -> None:
        self.name, self.line, self.column, self.problem = name, line, column, problem
        super().__init__(f"{name}:{line}:{column}: {problem}")


class TooLarge(InputError):
    """More than the byte limit."""

    def __init__(self, name: str, limit: int) -> None:
        self.name, self.limit = name, limit
        self.problem = (
            f"larger than {size_text(limit)}; kgen reads at most {size_text(limit)} per file or stream "
            "(split it, or lint the folder it came from)"
        )
        super().__init__(f"{name}: {self.problem}")


class Unreadable(InputError):
    """The OS refused (permission denied, I/O error ...)."""

    def __init__(self, name: str, problem: str) -> None:
        self.name, self.problem = name, problem
        super().__init__(f"{name}: {problem}")


def not_yaml_character(text: str, start: int = 0) -> int | None:
    """Index of the first character in ``text[start:]`` that YAML does not allow, or None."""
    m = _NOT_YAML_STR.search(text, start)
    return m.start() if m else None


def read_yaml_file(path: str, limit: int = MAX_FILE_BYTES) -> str:
    """The UTF-8 text of the file at ``path`` (any readable file: also /dev/stdin, a FIFO).
    FileNotFoundError and IsADirectoryError are passed on; other OS errors are ``Unreadable``."""
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed below
    except (FileNotFoundError, IsADirectoryError):
        raise
    except PermissionError:
        raise Unreadable(path, "permission denied (cannot read this file)") from None
    except OSError as err:
        raise Unreadable(path, f"cannot read ({err.strerror or err})") from None
    with fh:
        try:
            return read_stream(fh, path, limit)
        except IsADirectoryError:
            raise
        except OSError as err:
            raise Unreadable(path, f"cannot read ({err.strerror or err})") from None


def read_stream(stream: IO[Any], name: str, limit: int = MAX_FILE_BYTES) -> str:
    """Read ``stream`` (binary, or text when it has no byte buffer, e.g. a StringIO) like
    ``read_yaml_file``."""
    raw = getattr(stream, "buffer", None)
    if raw is not None:
        stream = raw
    parts: list[str] = []
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    total = 0
    while True:
        chunk = stream.read(CHUNK)
        if not chunk:
            break
        total += len(chunk)
        if total > limit:
            raise TooLarge(name, limit)
        if isinstance(chunk, str):
            bad = _NOT_YAML_STR.search(chunk)
            if bad:
                raise _control(name, parts, chunk[: bad.start()], ord(chunk[bad.start()]))
            parts.append(chunk)
            continue
        if chunk.isascii() and not chunk.translate(None, _YAML_ASCII):
            bad_byte, end = None, len(chunk)  # the usual case: printable ASCII, tabs and line breaks only
        else:
            bad_byte = _NOT_YAML.search(chunk)
            end = bad_byte.start() if bad_byte else len(chunk)
        try:
            parts.append(decoder.decode(chunk[:end]))
        except UnicodeDecodeError as err:
            raise _not_utf8(name, parts, chunk[: err.start], err.reason) from None
        if bad_byte:
            raise _control(name, parts, "", ord(bad_byte.group().decode("utf-8")))
    try:
        parts.append(decoder.decode(b"", final=True))
    except UnicodeDecodeError as err:
        raise _not_utf8(name, parts, b"", err.reason) from None
    return "".join(parts)


def _position(parts: list[str], before: str) -> tuple[int, int]:
    """1-based line and column just after ``parts`` + ``before``."""
    lines = sum(p.count("\n") for p in parts) + before.count("\n")
    if "\n" in before:
        col = len(before) - before.rindex("\n")
    else:
        tail = len(before)
        for p in reversed(parts):
            if "\n" in p:
                tail += len(p) - p.rindex("\n") - 1
                break
            tail += len(p)
        col = tail + 1
    return lines + 1, col


def _control(name: str, parts: list[str], before: str, code: int) -> NotText:
    line, col = _position(parts, before)
    what = "NUL byte" if code == 0 else f"control character U+{code:04X}"
    return NotText(name, line, col, f"not YAML text: a {what} (is it a binary file?)")


def _not_utf8(name: str, parts: list[str], before: bytes, reason: str) -> NotText:
    line, col = _position(parts, before.decode("utf-8", "replace"))
    return NotText(name, line, col, f"not UTF-8 text ({reason})")
