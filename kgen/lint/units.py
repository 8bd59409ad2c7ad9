"""Apply units: which files the cross-document rules see together.

A repository holds several environments or apps side by side (``envs/dev/`` and ``envs/prod/``
with the same object names, many independent examples), and nobody applies them in one go. The
cross-document rules (duplicates, Service wiring, NetworkPolicies, ConfigMap references, multi-Job
worlds ...) see one *unit* at a time, the way people apply:

- ``dir`` (the default): one folder's own files are one unit, as ``kubectl apply -f DIR`` without
  ``-R`` creates them (files named on the command line join their folder's unit); a folder with a
  ``kustomization.yaml`` also takes in what it lists (``resources``, ``bases``, ``components``: files,
  and folders with a kustomization of their own, followed through), as ``kubectl apply -k DIR``;
  stdin is a unit of its own;
- ``file``: every file (and stdin) is a unit of its own;
- ``tree``: everything given to one run is one unit (kgen's behaviour before units).

A reference into another unit never satisfies a rule: prod's missing Service is reported even
when dev has one. Files a kustomization lists as patches (``patches``, ``patchesStrategicMerge``,
``patchesJson6902``) are partial objects, not manifests: they are skipped in every mode.

``collect`` does the I/O (walks folders, reads what is named on the command line and the
kustomizations); ``assign`` is the pure decision (entries and kustomizations in, units out);
``groups`` puts units that share files together, so a shared file is checked once.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any, NamedTuple

from kgen.errors import InputError, UsageError
from kgen.lint.check import Unit
from kgen.lint.files import KUSTOMIZATION_NAMES, YAML_SUFFIXES, Excludes, Skip, display_rel, skip_reason, walk

UNIT_MODES = ("dir", "file", "tree")
STDIN = "<stdin>"
_PATCH = "Kustomize patch, listed in {} (a partial object; lint the output: kustomize build {} | kgen lint -)"


class Entry(NamedTuple):
    """A file to lint: its name in findings, its folder (real path, the unit key) and that folder as
    the user wrote it (the unit's name)."""

    key: str
    folder: str
    shown: str


class Kustomization(NamedTuple):
    folder: str  # real path
    file: str  # the kustomization file as shown
    shown: str  # its folder as shown
    resources: tuple[tuple[str, str], ...]  # (shown, real) of local resources, bases, components
    patches: frozenset[str]  # real paths of the files it lists as patches


class Plan:
    """What ``collect`` found, in the order today's reports list it."""

    __slots__ = ("events", "entries", "texts", "sizes", "units", "excluded", "folders")

    def __init__(self) -> None:
        self.events: list[Skip | str] = []  # a Skip, or the key of a file to lint
        self.entries: dict[str, Entry] = {}
        self.texts: dict[str, str | InputError] = {}  # read already (stdin, files named explicitly, problems)
        self.sizes: dict[str, int] = {}  # bytes of each file to lint (what a worker's share is measured in)
        self.units: list[Unit] = []
        self.excluded = 0
        self.folders: dict[str, str] = {}  # real path -> as shown, of every folder a file was found in


def _shown_folder(path: str) -> str:
    folder = os.path.dirname(path) or "."
    shown = display_rel(folder)
    return shown if shown.endswith("/") else shown + "/"


def _identity(path: str) -> Any:
    """What makes two names one file: (device, inode) through symbolic links; the real path when the
    file cannot be looked at (a dangling link)."""
    try:
        st = os.stat(path)
    except OSError:
        return os.path.realpath(path)
    return (st.st_dev, st.st_ino)


class Kustomizations:
    """The kustomization of each folder, read once (``None``: the folder has none, or it is not a
    mapping kgen can read: then the folder is a plain folder)."""

    def __init__(self) -> None:
        self._by_folder: dict[str, Kustomization | None] = {}
        self.patches: dict[str, str] = {}  # real path of a patch file -> the reason it is skipped

    def of(self, folder_real: str, shown: str) -> Kustomization | None:
        if folder_real in self._by_folder:
            return self._by_folder[folder_real]
        found = None
        for name in sorted(KUSTOMIZATION_NAMES):
            path = os.path.join(folder_real, name)
            if os.path.isfile(path):
                found = _read_kustomization(path, folder_real, shown, os.path.join(shown, name))
                break
        self._by_folder[folder_real] = found
        if found is not None:
            for real in found.patches:
                self.patches.setdefault(real, _PATCH.format(found.file, found.shown))
        return found


def _read_kustomization(path: str, folder_real: str, shown: str, file_shown: str) -> Kustomization | None:
    from kgen.inputs import read_yaml_file
    from kgen.lint.parse import parse_stream_partial

    try:
        docs, errors = parse_stream_partial(read_yaml_file(path), file_shown)
    except (InputError, OSError):
        return None
    data = docs[0].data if docs and not errors else None
    if not isinstance(data, dict):
        return None

    def local(entry: Any) -> tuple[str, str] | None:
        if not isinstance(entry, str) or not entry or "://" in entry or entry.startswith(("git@", "github.com/")):
            return None
        if "?ref=" in entry or "\n" in entry:
            return None
        return os.path.normpath(os.path.join(shown, entry)), os.path.realpath(os.path.join(folder_real, entry))

    resources = []
    for key in ("resources", "bases", "components"):
        items = data.get(key)
        for entry in items if isinstance(items, list) else ():
            got = local(entry)
            if got is not None:
                resources.append(got)
    patches = set()
    for key in ("patchesStrategicMerge", "patches", "patchesJson6902", "replacements"):
        items = data.get(key)
        for entry in items if isinstance(items, list) else ():
            got = local(
                entry.get("path") if isinstance(entry, dict) else entry if key == "patchesStrategicMerge" else None
            )
            if got is not None:
                patches.add(got[1])
    return Kustomization(folder_real, file_shown, shown, tuple(resources), frozenset(patches))


def collect(paths: list[str], stdin: Any, excludes: Excludes, mode: str = "dir") -> Plan:
    """Walk the folders and read the files named on the command line (and stdin) the way ``kgen lint``
    always has, skip what is not a manifest, and put the files into units (``mode``: ``UNIT_MODES``).

    Missing paths, empty stdin, an empty file named explicitly and a folder without YAML files raise
    InputError (nothing to report); a file that is there but cannot be linted (not UTF-8 text, too
    large, permission denied) is kept as an InputError text: a KG004 finding."""
    from kgen.inputs import read_stream

    if mode not in UNIT_MODES:
        raise UsageError(f"must be one of {', '.join(UNIT_MODES)}, got {mode!r}", option="--unit")
    if not paths:
        raise UsageError("no input given; pass files, folders or '-' for stdin")
    plan = Plan()
    seen: set = set()  # files already planned: a file named twice (or also inside a folder) is linted once
    charts: dict[str, str | None] = {}
    kustomizations = Kustomizations()
    folders: dict[str, tuple[str, str]] = {}  # folder as written -> (real path, shown)
    folders_left_empty: list[str] = []

    def folder_of(path: str, register: bool = True) -> tuple[str, str]:
        """(real path, as shown) of the file's folder; ``register``: a unit may start there."""
        folder = os.path.dirname(path) or "."
        got = folders.get(folder)
        if got is None:
            got = folders[folder] = (os.path.realpath(folder), _shown_folder(path))
        if register:
            plan.folders.setdefault(*got)
        return got

    def add(key: str, text: str | InputError | None = None, size: int = 0, register: bool = True) -> None:
        if key == STDIN:
            real = shown = plan.folders[STDIN] = STDIN
        else:
            real, shown = folder_of(key, register)
        plan.entries[key] = Entry(key, real, shown)
        plan.events.append(key)
        if text is not None:
            plan.texts[key] = text
            size = len(text) if isinstance(text, str) else 0
        plan.sizes[key] = size

    def first_time(path: str) -> bool:
        return first_seen(path, seen)

    for path in paths:
        if not first_time(path):
            continue
        if path == "-":
            stream = stdin if stdin is not None else sys.stdin
            try:
                text = read_stream(stream, STDIN)
            except InputError as err:
                add(STDIN, err)
                continue
            if not text.strip():
                # `kgen render ... | kgen lint -` must not pass when the producer printed nothing
                # (a failed render, a wrong path): an empty stream is an input error, not "clean".
                raise InputError(f"{STDIN}: empty input; nothing to lint (did the command before the pipe fail?)")
            add(STDIN, text)
            continue
        if os.path.isdir(path):
            files, skips, problems, excluded = walk(path, excludes)
            plan.excluded += excluded
            plan.events.extend(skips)
            for problem in problems:
                add(problem.path, InputError(problem.message))
            if not files and not skips and not problems and not excluded:
                raise InputError(f"{path}: no *.yaml or *.yml files in this folder")
            for folder in dict.fromkeys(folder_of(f) for f in files):
                kustomizations.of(*folder)  # its patches are skipped below
            linted = 0
            for f in files:
                if not first_time(f):
                    continue
                reason = skip_reason(f, charts) or _patch_reason(f, kustomizations)
                if reason is not None:
                    plan.events.append(Skip(f, reason))
                    continue
                linted += 1
                add(f, None, _size(f))
            if not linted and not problems:
                folders_left_empty.append(path)
            continue
        if excludes and excludes.excludes_file(display_rel(path)):
            plan.excluded += 1
            continue
        is_file = os.path.isfile(path)
        if is_file:
            kustomizations.of(*folder_of(path))
        reason = (skip_reason(path, charts) or _patch_reason(path, kustomizations)) if is_file else None
        if reason is not None:
            plan.events.append(Skip(path, reason))
            continue
        got = read_or_error(path, explicit=True)
        if isinstance(got, str) and not got.strip():
            # named explicitly, like stdin: an empty file is a mistake (a failed redirect), not "clean";
            # empty files found inside a folder are skipped
            raise InputError(f"{path}: empty file; nothing to lint")
        add(path, got)
    if mode == "dir":
        _pull_resources(plan, kustomizations, seen, charts, folder_of, add)
    if folders_left_empty and not plan.entries:
        left = sum(1 for e in plan.events if isinstance(e, Skip)) + plan.excluded
        raise InputError(
            f"{folders_left_empty[0]}: nothing to lint: every YAML file in it was skipped as not a Kubernetes "
            f"manifest or excluded ({left} in all; see the info lines)"
        )

    def listed(folder: str, shown: str) -> tuple[list, set] | None:
        k = kustomizations.of(folder, shown)
        if k is None:
            return None
        visited: set = set()
        files = [_identity(real) for _, real in _listed_files(k, kustomizations.of, visited)]
        return files, visited - {folder}

    plan.units = assign(list(plan.entries.values()), list(plan.folders.items()), mode, listed)
    return plan


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _patch_reason(path: str, kustomizations: Kustomizations) -> str | None:
    if not kustomizations.patches:
        return None
    return kustomizations.patches.get(os.path.realpath(path))


def _pull_resources(
    plan: Plan, kustomizations: Kustomizations, seen: set, charts: dict, folder_of: Callable, add: Callable
) -> None:
    """The files the kustomizations of the planned folders list from elsewhere (a base the command line
    did not name): ``kubectl apply -k`` creates them with the folder's own, so they are linted too."""
    folders = dict.fromkeys((e.folder, e.shown) for e in plan.entries.values() if e.key != STDIN)
    for folder, shown in folders:
        k = kustomizations.of(folder, shown)
        if k is None:
            continue
        for file_shown, real in _listed_files(k, kustomizations.of, set()):
            if not first_seen(real, seen):
                continue
            reason = skip_reason(file_shown, charts) or kustomizations.patches.get(real)
            if reason is not None:
                plan.events.append(Skip(file_shown, reason))
                continue
            add(file_shown, read_or_error(file_shown, explicit=False), register=False)


def first_seen(path: str, seen: set) -> bool:
    """Whether ``path`` is new to ``seen`` (then it is added); ``-`` is stdin."""
    ident = "-" if path == "-" else _identity(path)
    if ident in seen:
        return False
    seen.add(ident)
    return True


def _listed_files(
    k: Kustomization, of: Callable[[str, str], Kustomization | None], visiting: set
) -> list[tuple[str, str]]:
    """(shown, real) of the manifest files ``k`` lists, through the kustomizations of listed folders."""
    visiting.add(k.folder)
    out = []
    for shown, real in k.resources:
        if os.path.isdir(real):
            sub = of(real, shown if shown.endswith("/") else shown + "/")
            if sub is not None and real not in visiting:
                out.extend(_listed_files(sub, of, visiting))
        elif real.endswith(YAML_SUFFIXES) and os.path.isfile(real):
            out.append((shown, real))
    return out


def assign(
    entries: list[Entry], folders: list[tuple[str, str]], mode: str, listed: Callable[[str, str], tuple | None]
) -> list[Unit]:
    """The units of a run (``mode``: ``UNIT_MODES``), each with its files in the order found.
    ``folders``: (real path, as shown) of every folder a file was found in, in that order (stdin as
    ``(STDIN, STDIN)``). ``listed(folder, shown)`` is None for a plain folder; for a folder with a
    kustomization it gives the identities of the files it lists (through listed folders) and the
    kustomization folders it lists. Such a unit takes those files (matched by identity with the
    entries) and exists even when the folder holds only patches; a kustomization folder that another
    one lists (a base) is no unit of its own: its files are checked in the units that list it."""
    if not entries:
        return []
    if mode == "tree":
        return [Unit("all inputs", "tree", tuple(e.key for e in entries))]
    if mode == "file":
        return [Unit(e.key, "stdin" if e.key == STDIN else "file", (e.key,)) for e in entries]
    by_folder: dict[str, list[str]] = {}
    for e in entries:
        by_folder.setdefault(e.folder if e.key != STDIN else STDIN, []).append(e.key)
    order = {e.key: i for i, e in enumerate(entries)}
    kustomized = {folder: listed(folder, shown) for folder, shown in folders if folder != STDIN}
    bases = {base for got in kustomized.values() if got is not None for base in got[1]}
    by_identity: dict[Any, str] | None = None
    units = []
    for folder, shown in folders:
        keys = by_folder.get(folder, [])
        if folder == STDIN:
            units.append(Unit(STDIN, "stdin", (STDIN,)))
            continue
        got = kustomized[folder]
        if got is None:
            if keys:
                units.append(Unit(shown, "directory", tuple(keys)))
            continue
        if folder in bases:
            continue
        if by_identity is None:
            by_identity = {_identity(e.key): e.key for e in entries if e.key != STDIN}
        files = set(keys) | {by_identity[i] for i in got[0] if i in by_identity}
        if files:
            units.append(Unit(shown, "kustomization", tuple(sorted(files, key=order.__getitem__))))
    covered = {f for u in units for f in u.files}
    left = [e for e in entries if e.key not in covered]  # a base's files its kustomization does not list
    for folder, shown in folders:
        keys = [e.key for e in left if e.folder == folder]
        if keys:
            units.append(Unit(shown, "directory", tuple(keys)))
    return units


def groups(units: list[Unit]) -> list[tuple[list[str], list[Unit]]]:
    """Units that share files, together (a shared file is checked once): (files, units) per group,
    in the order of their first unit; files in the order of their first appearance."""
    parent = list(range(len(units)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[str, int] = {}
    for i, unit in enumerate(units):
        for f in unit.files:
            j = owner.setdefault(f, i)
            if j != i:
                a, b = root(i), root(j)
                if a != b:
                    parent[max(a, b)] = min(a, b)
    out: dict[int, tuple[list[str], list[Unit]]] = {}
    seen: set[str] = set()
    for i, unit in enumerate(units):
        files, members = out.setdefault(root(i), ([], []))
        members.append(unit)
        for f in unit.files:
            if f not in seen:
                seen.add(f)
                files.append(f)
    return list(out.values())


def read_or_error(path: str, explicit: bool) -> str | InputError:
    from kgen.inputs import read_yaml_file

    try:
        return read_yaml_file(path)
    except FileNotFoundError:
        if explicit:
            raise InputError(f"{path}: no such file or directory") from None
        return InputError(f"{path}: no such file (a dangling symbolic link?)")
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory") from None
    except InputError as err:  # not UTF-8 text, too large, permission denied: a KG004 finding
        return err
