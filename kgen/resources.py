"""The files kgen reads and writes: its bundled templates/, presets/ and entrypoint/, its cache
folder, and writes that never destroy what is at the path (write_file).

In a wheel the bundled folders are inside the package (kgen/_bundled/...); in a source checkout or an editable
install they are the top-level folders of the repository.
"""

from __future__ import annotations

import errno
import os
import stat
from functools import cache
from pathlib import Path

_PKG = Path(__file__).resolve().parent


@cache
def data_root() -> Path:
    for candidate in (_PKG / "_bundled", _PKG.parent):
        if (candidate / "templates").is_dir() and (candidate / "presets").is_dir():
            return candidate
    raise FileNotFoundError(f"kgen data folders (templates/, presets/) not found near {_PKG}")


def templates_dir() -> Path:
    return data_root() / "templates"


def presets_dir() -> Path:
    return data_root() / "presets"


def entrypoint_dir() -> Path:
    return data_root() / "entrypoint"


ENTRYPOINT_FILE = "kgen_entrypoint.py"


def entrypoint_path() -> Path:
    """The whole entrypoint, as `kgen entrypoint`, `kgen launch` and Slurm ship it (entrypoint/assemble.py)."""
    return entrypoint_dir() / ENTRYPOINT_FILE


def pod_entrypoint_path() -> Path:
    """The pod copy: the pod parts of the same file, line for line (what the ConfigMap's zip holds)."""
    return entrypoint_dir() / "pod" / ENTRYPOINT_FILE


def pod_entrypoint_zip_path() -> Path:
    """The pod copy zipped, as `kgen render` puts it in the ConfigMap's binaryData under ENTRYPOINT_FILE: Python
    runs a zip given as the script, so the pod runs `python3 /opt/kgen/kgen_entrypoint.py` (entrypoint/assemble.py)."""
    return entrypoint_dir() / "pod" / "kgen_entrypoint.pyz"


def cache_dir() -> Path | None:
    """kgen's cache folder (compiled schemas and templates: speed only, never a different output); None when
    caching is switched off or there is no home to put it in (no $HOME and no passwd entry: a container's
    arbitrary uid). A relative $XDG_CACHE_HOME is ignored, as the XDG spec says."""
    if os.environ.get("KGEN_NO_CACHE"):
        return None
    explicit = os.environ.get("KGEN_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "kgen"
    home = os.path.expanduser("~")  # $HOME, else the passwd entry; "~" itself when neither exists
    if not os.path.isabs(home) or not os.path.isdir(home):  # never made up: a missing home stays missing
        return None
    return Path(home) / ".cache" / "kgen"


MAX_SYMLINKS = 40  # as the kernel's path walk (ELOOP beyond)


def final_target(path: str | Path) -> Path:
    """The path a write to ``path`` lands on: symlinks followed (relative ones against their own
    folder, symlinked folders resolved), a dangling link resolved to the file it names. A file
    descriptor's link in /proc (``/dev/stdout``, ``/dev/fd/1``, ``/proc/self/fd/1``) is not followed:
    it names an open file, not a path. Raises OSError(ELOOP) on a loop."""
    if str(path).endswith(os.sep):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    current = Path(os.path.abspath(path))
    for _ in range(MAX_SYMLINKS):
        current = Path(os.path.realpath(current.parent)) / current.name
        if is_fd_link(current):
            return current
        try:
            link = os.readlink(current)
        except OSError as exc:
            if exc.errno in (errno.EINVAL, errno.ENOENT):  # not a symlink, or nothing there yet
                return current
            raise
        current = Path(os.path.abspath(os.path.join(current.parent, link)))
    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(path))


def is_fd_link(path: Path) -> bool:
    """/proc/<pid>[/task/<tid>]/fd/N (folders already resolved): a link to an open file, pipe or socket."""
    parts = path.parts
    return len(parts) >= 5 and parts[1] == "proc" and parts[-2] == "fd"


def write_file(path: str | Path, data: bytes, *, durable: bool = False) -> None:
    """Write data to path the way a careful Unix tool does, never destroying what is there.

    - A symlink stays a symlink: its (final) target gets the data; a dangling link's target is created.
    - A regular file is replaced all-or-nothing (a temp file in its folder, then a rename), keeping its
      mode and, where permitted, its owner and group. A hard link to it elsewhere keeps the old data.
      A file the caller may not write (``open(O_WRONLY)`` fails: 0444 without CAP_DAC_OVERRIDE) is not
      replaced: PermissionError, as the shell's ``>`` does.
    - A new file gets ``0666 & ~umask`` (the kernel applies the umask and any default ACL).
    - A character device, FIFO or any other non-regular file is opened and written, never replaced.
    - An open file named through /proc (``-o /dev/stdout``) is opened, truncated and written, as the
      shell's ``>`` does: what it refers to is the caller's, not a path to replace.
    - A folder is an error (EISDIR).

    Raises OSError; nothing is written and no temp file outlives a failure (for regular files)."""
    target = final_target(path)
    try:
        st: os.stat_result | None = os.stat(target)
    except FileNotFoundError:
        st = None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    if st is not None and (not stat.S_ISREG(st.st_mode) or is_fd_link(target)):
        _write_in_place(target, data, truncate=stat.S_ISREG(st.st_mode))
    else:
        if st is not None:
            _check_writable(target)
        _replace(target, data, st, durable=durable)


def _check_writable(target: Path) -> None:
    """Refuse what the shell's ``>`` refuses: replacing a file the caller could not open for writing (a 0444
    file, for anyone without CAP_DAC_OVERRIDE), though a rename in a writable folder would get past it.
    Opening for writing without O_TRUNC changes nothing; the kernel answers with the caller's own rights."""
    os.close(os.open(target, os.O_WRONLY | os.O_NOCTTY | os.O_CLOEXEC | os.O_NONBLOCK))


def write_atomic(path: str | Path, data: bytes, *, durable: bool = False) -> None:
    """All of data or nothing at path (kgen's cache files); same rules as write_file."""
    write_file(path, data, durable=durable)


def _write_in_place(target: Path, data: bytes, *, truncate: bool = False) -> None:
    """A device, FIFO or open file: open it as it is (never created) and write everything."""
    fd = os.open(target, os.O_WRONLY | os.O_NOCTTY | os.O_CLOEXEC | (os.O_TRUNC if truncate else 0))
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def _replace(target: Path, data: bytes, st: os.stat_result | None, *, durable: bool) -> None:
    """A temp file next to target, given target's mode and owner (or 0666 & ~umask when new), then a rename."""
    fd, tmp = _create_temp(target, 0o600 if st is not None else 0o666)
    try:
        with os.fdopen(fd, "wb") as fh:
            if st is not None:
                _copy_owner_and_mode(fh.fileno(), st)
            fh.write(data)
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if durable:
        _fsync_folder(target.parent)


def _create_temp(target: Path, mode: int) -> tuple[int, str]:
    """O_EXCL-create a hidden temp file in target's folder; mode is filtered by the umask, as for any new file."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    for _ in range(100):
        tmp = str(target.parent / f".{target.name}.{os.urandom(4).hex()}.tmp")
        try:
            return os.open(tmp, flags, mode), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary file name", str(target.parent))


def _copy_owner_and_mode(fd: int, st: os.stat_result) -> None:
    try:
        os.fchown(fd, st.st_uid, st.st_gid)  # root, or a group we belong to; otherwise the file becomes ours
    except OSError:
        pass
    os.fchmod(fd, stat.S_IMODE(st.st_mode))  # after chown, which clears setuid/setgid


def _fsync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
