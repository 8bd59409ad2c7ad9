"""Reading input text with bounds: a byte cap, and a stop at the first byte that cannot be YAML text.

``read_text`` is what ``kgen lint`` reads files and stdin with (and what any command reading a
user's file can use): it reads in 1 MiB chunks and stops

- at the first byte that is not UTF-8, or a control character YAML does not allow (NUL, ESC ...),
  so ``/dev/zero`` and ``/dev/urandom`` end after the first chunk, with the line and column;
- past ``limit`` bytes (default ``MAX_FILE_BYTES``), so an endless stream (``yes | kgen lint -``)
  ends after 64 MiB.

Errors are ``InputError``s that carry the name, line and column (``NotText``), or name the limit
(``TooLarge``) or the OS error (``Unreadable``: permission denied ...).
"""

from __future__ import annotations

import codecs
import re
from typing import IO, Any

from kgen.errors import InputError

MAX_FILE_BYTES = 64 * 1024 * 1024
"""One input file or stdin. kubectl has no such limit, but no object exceeds the API server's 3 MiB
request limit, and 64 MiB holds ~100,000 typical manifests (a large `helm template` output is a few MB);
it bounds what one file can cost (time and memory), as the API server's limit bounds one request."""

CHUNK = 1 << 20
# What YAML (libyaml, goyaml) does not allow in a stream: C0 controls but TAB, LF and CR; DEL; C1
# controls but NEL (U+0085, in UTF-8 C2 80..C2 9F); U+FFFE and U+FFFF (EF BF BE/BF).
_NOT_YAML = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]|\xc2[\x80-\x84\x86-\x9f]|\xef\xbf[\xbe\xbf]")
_NOT_YAML_STR = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x84\x86-\x9f\ufffe\uffff]")


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
            f"larger than {_mib(limit)}; kgen reads at most {_mib(limit)} per file or stream "
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


def _mib(n: int) -> str:
    return f"{n // 2**20} MiB" if n >= 2**20 else f"{n} bytes"


def read_text(path: str, limit: int = MAX_FILE_BYTES) -> str:
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
    ``read_text``."""
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
