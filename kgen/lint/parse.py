"""Parse Kubernetes YAML the way kubectl does, in one bounded, linear pass over libyaml's events.

libyaml (PyYAML's C parser) turns the text into events; ``_Builder`` turns events straight into
plain Python values with kubectl's resolution rules (``sigs.k8s.io/yaml`` -> goyaml.v2), which
differ from PyYAML's SafeConstructor:

- ``y Y n N`` are booleans (PyYAML: strings); timestamps stay strings (PyYAML: datetime);
- ``0o17`` and Go-style numbers such as ``1e3`` are numbers; ``1:30`` (sexagesimal) is a string;
- a duplicate mapping key is an error (kubectl strict field validation), recorded as KG001;
- a mapping or list used as a mapping key is refused (goyaml: "invalid map key").

No node tree is built: libyaml's composer recurses on the C stack (a 30,000-deep flow sequence
overflowed it: SIGSEGV) and a tree costs ~10x the text in memory. The builder keeps an explicit
stack and refuses, per document (a KG004 finding; the next document is read from the next ``---``):

- nesting deeper than ``MAX_DEPTH`` (also through aliases),
- a document longer than ``MAX_DOCUMENT_CHARS`` (the API server refuses larger requests),
- aliases expanding a document past ``MAX_EXPANDED_NODES`` (billion laughs), or a run past
  ``Budget.alias_nodes``, and aliases to a node that contains them (kubectl rejects cycles).

Positions are not stored: a document keeps where its text is (``Source``), and
``Document.locate``/``scalar_at`` re-read that text into a small position tree (``positions``)
only when a finding needs a line. Whether a boolean came from an unquoted ``yes``/``on``/... is read
back the same way, so the happy path records nothing.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

import yaml
from yaml.events import (
    AliasEvent,
    DocumentEndEvent,
    DocumentStartEvent,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
)

from kgen.errors import InputError
from kgen.findings import Finding, Severity
from kgen.lint.document import Document, format_path


class Source(NamedTuple):
    """Where a document's text is: the whole file's text (shared, not copied), the index, 0-based
    line and column where its root value starts, and the index where it ends. ``Document`` keeps it
    and asks it for the position tree when a finding needs a line (``positions``)."""

    text: str
    start: int
    line: int
    column: int
    end: int

    def positions(self) -> PosNode | None:
        return positions(self)


class PosNode(NamedTuple):
    """A node of a position tree: ``id`` is "scalar", "mapping" or "sequence"; line and column are
    1-based; ``value`` is the scalar's text, a mapping's {key text: (key line, key column, child)}
    (scalar keys; the last of duplicates) or a sequence's [child]; ``style`` and ``tag`` describe
    scalars ("" and "!kgen-plain" for an unquoted, untagged one)."""

    id: str
    line: int
    column: int
    value: Any
    style: Any
    tag: Any


_PLAIN = "!kgen-plain"  # our tag for untagged plain scalars; resolved by _plain() below

try:  # libyaml's parser alone (events only: no constructor or resolver to set up per file); PyYAML
    # wheels ship it, the pure-Python fallback is ~8x slower
    from yaml.cyaml import CParser as _Base  # type: ignore[attr-defined]  # not in types-PyYAML's stub
except ImportError:  # pragma: no cover - depends on the PyYAML build
    _Base = yaml.SafeLoader  # type: ignore[misc,assignment]

try:  # PyYAML >= 6.0.4 bundles libyaml 0.2.6, which has a nesting limit of its own (a process global)
    from yaml._yaml import _get_max_nest_level, _set_max_nest_level  # type: ignore[attr-defined]
except ImportError:  # PyYAML <= 6.0.3 (libyaml 0.2.5: no limit) or no libyaml at all
    _get_max_nest_level = _set_max_nest_level = None


_STR = "tag:yaml.org,2002:str"
_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_BOOL = "tag:yaml.org,2002:bool"
_NULL = "tag:yaml.org,2002:null"
_MERGE = "tag:yaml.org,2002:merge"
_TIMESTAMP = "tag:yaml.org,2002:timestamp"

# goyaml.v2 resolve.go: every plain scalar that decodes as a boolean.
YAML11_BOOLS: dict[str, bool] = {
    **dict.fromkeys(("y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"), True),
    **dict.fromkeys(("n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"), False),
}
_EXPLICIT_NONSTR = frozenset((_INT, _FLOAT, _BOOL, _NULL))
_NULLS = frozenset(("", "~", "null", "Null", "NULL"))
_GO_NUMBER = re.compile(
    r"[-+]?(?:0[xXoObB][0-9a-fA-F_]+|[0-9][0-9_]*(?:\.[0-9_]*)?(?:[eE][-+]?[0-9]+)?|\.[0-9]+(?:[eE][-+]?[0-9]+)?)$"
)


def _go_int(text: str) -> int | None:
    s = text.replace("_", "")
    sign = -1 if s[:1] == "-" else 1
    if s[:1] in "+-":
        s = s[1:]
    try:
        low = s[:2].lower()
        if low in ("0x", "0o", "0b"):
            return sign * int(s, 0)
        if len(s) > 1 and s[0] == "0":
            return sign * int(s, 8)
        return sign * int(s, 10)
    except ValueError:
        return None


def _plain(value: str) -> Any:
    """kubectl's value for a plain (unquoted) scalar."""
    b = YAML11_BOOLS.get(value)
    if b is not None:
        return b
    if value in _NULLS:
        return None
    c = value[0]
    if c in "0123456789+-." and ":" not in value:
        low = value.lower()
        if low in (".inf", "+.inf"):
            return math.inf
        if low == "-.inf":
            return -math.inf
        if low == ".nan":
            return math.nan
        if _GO_NUMBER.match(value):
            i = _go_int(value)
            if i is not None:
                return i
            try:
                return float(value.replace("_", ""))
            except ValueError:
                return value
    return value


# ---------------------------------------------------------------------------------------------
# Limits (docs/lint.md, "Limits"). Each is a KG004 finding for the document it hits; the other
# documents of the file and every other file are still linted.

MAX_DEPTH = 1000
"""Nesting of mappings and lists, also through aliases. kubectl's decoder (goyaml.v2) stops at 10,000
levels of flow or block nesting; kgen stops at 1,000 -- the default libyaml's maintainers chose for its
own nesting limit -- because its checks walk documents recursively. The deepest real manifests (CRDs
with embedded pod templates in their schema) nest about 60 levels."""

PARSER_DEPTH = 10_000
"""The nesting libyaml itself is allowed while kgen reads (kubectl's own limit). libyaml 0.2.6 (PyYAML
6.0.4) stops a whole stream at 1,000 levels, counted its own way: its scanner reads up to 1,024
characters ahead (so ``[[[...`` fails before the first event), and a block at depth 1,000 already
fails. ``MAX_DEPTH`` must decide alone, the same with every PyYAML release, so the parser's limit is
raised past it plus that look-ahead while kgen's loaders run, and put back afterwards. kgen's builder
keeps an explicit stack, so the deeper parser limit costs no recursion."""

MAX_DOCUMENT_CHARS = 3 * 1024 * 1024
"""One document's text. The API server refuses request bodies over 3 MiB (MaxRequestBodyBytes, twice
etcd's 1.5 MiB default request limit), so no larger object can be created."""

MAX_EXPANDED_NODES = 1_000_000
"""Nodes of one document once aliases are expanded (a billion-laughs bomb is refused, not expanded);
goyaml refuses "excessive aliasing" likewise."""

MAX_ALIAS_NODES = 10_000_000
"""Nodes that aliases add over a whole run (all files): ten documents at the per-document limit. Aliased
values are shared, not copied, but schema validation walks them."""

MAX_REFUSED_DOCUMENTS = 100
"""Refused documents per file before the rest of the file is given up (like a compiler's "too many
errors"): each costs up to a few milliseconds (libyaml's scanner is quadratic in flow nesting)."""

MAX_DUPLICATES = 100
"""KG001 findings listed per document; the rest are counted in one more finding."""

_intern = sys.intern
# Short plain scalars resolved by kubectl's rules (``_plain``: field names, "true", "8", "None" ...),
# each once per process; values are immutable (str, int, float, bool, None). Bounded.
_PLAINS: dict[str, Any] = {}
_PLAINS_KEPT = 100_000
_DOC_MARKER = re.compile(r"^(?:---|\.\.\.)(?=[ \t\r\n]|\Z)", re.M)  # libyaml ends any scalar at these


@contextmanager
def _parser_depth() -> Iterator[None]:
    """libyaml's own nesting limit raised to ``PARSER_DEPTH`` for the loaders made inside (see there)."""
    if _set_max_nest_level is None:
        yield
        return
    before = _get_max_nest_level()
    _set_max_nest_level(max(before, PARSER_DEPTH))
    try:
        yield
    finally:
        _set_max_nest_level(before)


def _parser_too_deep(err: yaml.MarkedYAMLError) -> bool:
    """libyaml's own nesting error (PyYAML's bundled 0.2.6 words it one way, upstream another): only
    reachable past ``PARSER_DEPTH``, or where the limit cannot be raised; refused like ``MAX_DEPTH``."""
    problem = str(err.problem or "")
    return "maximum nesting depth" in problem or "Maximum nesting level" in problem


class Budget:
    """What one lint run may still spend on alias expansion (shared by all its files)."""

    __slots__ = ("alias_nodes",)

    def __init__(self, alias_nodes: int = MAX_ALIAS_NODES) -> None:
        self.alias_nodes = alias_nodes


class ParseError(InputError):
    """A file that is not valid YAML (or that kubectl would refuse to decode), with its position."""

    def __init__(self, file: str, line: int, column: int, problem: str, stops: bool = True) -> None:
        self.file, self.line, self.column, self.problem = file, line, column, problem
        self.stops = stops  # a syntax error ends the file; a refused document does not
        where = f"{file}:{line}:{column}" if column else (f"{file}:{line}" if line else file)
        super().__init__(f"{where}: {problem}")


class _DocError(Exception):
    """A document kubectl would refuse (or too large/deep to check); reading resumes at the next
    document marker after ``resume`` (an index into the parser's input)."""

    def __init__(self, mark: Any, problem: str, resume: int) -> None:
        self.mark, self.problem, self.resume = mark, problem, resume


class _Syntax(Exception):
    def __init__(self, line: int, column: int, problem: str) -> None:
        self.line, self.column, self.problem = line, column, problem


class _Chunks:
    """A file-like view of ``text[pos:end]``, read in chunks (no copy of the whole)."""

    __slots__ = ("text", "pos", "end")

    def __init__(self, text: str, pos: int, end: int | None = None) -> None:
        self.text, self.pos, self.end = text, pos, len(text) if end is None else end

    def read(self, size: int = -1) -> str:
        start = self.pos
        end = self.end if size < 0 else min(self.end, start + size)
        self.pos = end
        return self.text[start:end]


def parse_stream(text: str, file: str) -> list[Document]:
    """All non-empty documents of a YAML stream. Raises ParseError (an InputError) on the first
    error."""
    docs, errors = parse_stream_partial(text, file)
    if errors:
        raise errors[0]
    return docs


def parse_stream_partial(text: str, file: str, budget: Budget | None = None) -> tuple[list[Document], list[ParseError]]:
    """Like ``parse_stream``, but keeps going: the documents before a syntax error (which ends the
    stream: nothing after it can be trusted), and every document around one that kubectl would
    refuse or that breaks a limit (read on from the next ``---``), plus the errors."""
    docs: list[Document] = []
    errors: list[ParseError] = []
    budget = budget if budget is not None else Budget()
    base_index = base_line = 0
    # Documents lie between markers (libyaml ends every scalar at one), so when no two markers are
    # further apart than the limit, no document can exceed it and the per-event check is skipped.
    size_limit = MAX_DOCUMENT_CHARS if _may_exceed(text) else len(text) + 1
    while True:
        try:
            with _parser_depth():
                _build(text, file, base_index, base_line, budget, size_limit, docs)
            break
        except _Syntax as err:
            errors.append(ParseError(file, err.line, err.column, err.problem))
            break
        except _DocError as err:
            line, col = base_line + err.mark.line + 1, err.mark.column + 1
            if len(errors) >= MAX_REFUSED_DOCUMENTS:
                errors.append(ParseError(file, line, col, f"more than {MAX_REFUSED_DOCUMENTS} documents refused"))
                break
            errors.append(ParseError(file, line, col, err.problem, stops=False))
            nxt = _DOC_MARKER.search(text, base_index + err.resume)
            if nxt is None:
                break
            base_line += text.count("\n", base_index, nxt.start())
            base_index = nxt.start()
    return docs, errors


_NOKEY = object()  # a mapping frame waiting for its next key
_MERGEKEY = object()  # ... whose pending key is a merge key (<<)
_NOROOT = object()
# frame slots: the value being built, is it a mapping, its pending key, expanded nodes before it,
# height (nesting levels from here down, aliases included), start mark, anchor, item lines (List items)
_VAL, _ISMAP, _KEY, _BEFORE, _HEIGHT, _MARK, _ANCHOR, _LINES = range(8)


def _build(
    text: str, file: str, base_index: int, base_line: int, budget: Budget, size_limit: int, docs: list[Document]
) -> None:
    """Turn libyaml's events for ``text[base_index:]`` into Documents (appended to ``docs``)."""
    loader = _Base(text if base_index == 0 else _Chunks(text, base_index))
    get: Any = loader.get_event  # events read by class (the stub types them as the base Event)
    plains = _PLAINS
    stack: list[list] = []
    anchors: dict[str, Any] = {}
    dups: list[tuple] = []
    nodes = doc_start = 0
    root: Any = _NOROOT
    root_mark: Any = None
    root_end = 0
    item_lines: list | None = None
    check_size = size_limit <= MAX_DOCUMENT_CHARS
    try:
        for e in iter(get, None):
            c = e.__class__
            if c is ScalarEvent:  # most events: resolved and placed here, without the shared tail below
                tag = e.tag
                v = e.value
                merge = False
                if tag is None or tag == "!":
                    if not e.implicit[0]:
                        if len(v) <= 24:
                            v = _intern(v)  # field names and values repeat across documents: keep one copy
                    elif len(v) <= 24:  # the short plain scalars of a run are few: resolve each once
                        got = plains.get(v, _NOROOT)
                        if got is _NOROOT:
                            got = _plain(_intern(v))
                            if len(plains) < _PLAINS_KEPT:
                                plains[v] = got
                        merge = v == "<<"
                        v = got
                    else:
                        v = _plain(v)
                elif len(v) <= 24:
                    v = _intern(v)
                    if tag in _EXPLICIT_NONSTR:
                        v = _plain(v)
                    elif tag == _MERGE:
                        merge = True
                elif tag in _EXPLICIT_NONSTR:
                    v = _plain(v)
                elif tag == _MERGE:
                    merge = True
                if check_size and e.end_mark.index - doc_start > size_limit:
                    raise _DocError(e.start_mark, _too_long(), e.end_mark.index)
                nodes += 1
                if e.anchor is not None:
                    anchors[e.anchor] = (v, 1, 0)
                if not stack:
                    root, root_mark, root_end = v, e.start_mark, e.end_mark.index
                    continue
                top = stack[-1]
                if top[_ISMAP]:
                    key = top[_KEY]
                    if key is _NOKEY:
                        if merge:
                            top[_KEY] = _MERGEKEY
                            continue
                        if v.__class__ is str:
                            if len(v) > 24:
                                v = _intern(v)
                        else:
                            v = _key_string(v)
                        if v in top[_VAL]:
                            # the first ones with their paths; past MAX_DUPLICATES only counted (a path
                            # costs the nesting depth)
                            dups.append((_frame_path(stack) if len(dups) < MAX_DUPLICATES else None, v, e.start_mark))
                        top[_KEY] = v
                        continue
                    if key is _MERGEKEY:
                        _merge(top[_VAL], v)
                    else:
                        top[_VAL][key] = v
                    top[_KEY] = _NOKEY
                else:
                    top[_VAL].append(v)
                    if top[_LINES] is not None:
                        top[_LINES].append(e.start_mark.line)
                continue  # a scalar's height (0) never raises its parent's
            elif c is MappingStartEvent or c is SequenceStartEvent:
                mark = e.start_mark
                if len(stack) >= MAX_DEPTH:
                    raise _DocError(mark, _too_deep(""), mark.index)
                if mark.index - doc_start > size_limit:
                    raise _DocError(mark, _too_long(), mark.index)
                is_map = c is MappingStartEvent
                frame = [{} if is_map else [], is_map, _NOKEY, nodes, 1, mark, e.anchor, None]
                if not is_map and len(stack) == 1 and stack[0][_KEY] == "items" and stack[0][_ISMAP]:
                    frame[_LINES] = item_lines = []
                nodes += 1
                if e.anchor is not None:
                    anchors[e.anchor] = frame  # open: an alias to it now is a cycle
                stack.append(frame)
                continue
            elif c is MappingEndEvent or c is SequenceEndEvent:
                frame = stack.pop()
                v = frame[_VAL]
                h = frame[_HEIGHT]
                mark = frame[_MARK]
                if frame[_ANCHOR] is not None:
                    anchors[frame[_ANCHOR]] = (v, nodes - frame[_BEFORE], h)
            elif c is AliasEvent:
                mark = e.start_mark
                got = anchors.get(e.anchor)
                if got is None:
                    problem = f"YAML syntax error: found undefined alias {e.anchor!r}"
                    raise _Syntax(base_line + mark.line + 1, mark.column + 1, problem)
                if got.__class__ is list:
                    raise _DocError(
                        got[_MARK], "YAML alias refers to a node that contains it (kubectl rejects it)", mark.index
                    )
                v, size, h = got
                nodes += size
                budget.alias_nodes -= size
                if nodes > MAX_EXPANDED_NODES:
                    raise _DocError(
                        root_mark or mark,
                        f"YAML aliases expand this document to more than {MAX_EXPANDED_NODES} nodes "
                        "(excessive aliasing); refusing to lint it",
                        mark.index,
                    )
                if budget.alias_nodes < 0:
                    raise _DocError(
                        mark,
                        f"YAML aliases of this run expand to more than {MAX_ALIAS_NODES} nodes in all; "
                        "refusing to lint this document",
                        mark.index,
                    )
                if len(stack) + h > MAX_DEPTH:
                    raise _DocError(mark, _too_deep(" through aliases"), mark.index)
            elif c is DocumentStartEvent:
                anchors = {}
                dups = []
                nodes = 0
                root = _NOROOT
                root_mark = item_lines = None
                doc_start = e.start_mark.index
                continue
            elif c is DocumentEndEvent:
                if root is not _NOROOT and root is not None:
                    _add_document(text, file, base_index, base_line, root, root_mark, root_end, dups, item_lines, docs)
                continue
            elif c is StreamEndEvent:
                return
            else:
                continue
            if not stack:
                root, root_mark, root_end = v, mark, e.end_mark.index
                continue
            top = stack[-1]
            if top[_ISMAP]:
                key = top[_KEY]
                if key is _NOKEY:
                    vc = v.__class__
                    if vc is dict or vc is list:
                        raise _DocError(
                            mark,
                            f"a {'mapping' if vc is dict else 'list'} is used as a mapping key; "
                            "kubectl cannot decode it (invalid map key)",
                            e.end_mark.index,
                        )
                    v = _intern(v) if vc is str else _key_string(v)  # an alias of a scalar
                    if v in top[_VAL]:
                        dups.append((_frame_path(stack) if len(dups) < MAX_DUPLICATES else None, v, mark))
                    top[_KEY] = v
                    continue
                if key is _MERGEKEY:
                    _merge(top[_VAL], v)
                else:
                    top[_VAL][key] = v
                top[_KEY] = _NOKEY
            else:
                top[_VAL].append(v)
                if top[_LINES] is not None:
                    top[_LINES].append(mark.line)
            if h >= top[_HEIGHT]:
                top[_HEIGHT] = h + 1
    except yaml.MarkedYAMLError as err:
        m = err.problem_mark or err.context_mark
        if m is not None and _parser_too_deep(err):
            raise _DocError(m, _too_deep(""), m.index) from None
        problem = " ".join(str(err.problem or err.context or "invalid YAML").split())
        line, col = (base_line + m.line + 1, m.column + 1) if m else (0, 0)
        raise _Syntax(line, col, f"YAML syntax error: {problem}") from None
    except yaml.YAMLError as err:  # ReaderError: a character YAML does not allow (libyaml gives a byte offset)
        from kgen.inputs import not_yaml_character

        bad = not_yaml_character(text, base_index)
        if bad is not None:
            line, col = _line_col(text, bad)
            raise _Syntax(line, col, f"not YAML text: control character U+{ord(text[bad]):04X}") from None
        raise _Syntax(0, 0, f"YAML error: {' '.join(str(getattr(err, 'reason', err)).split())}") from None
    finally:
        loader.dispose()


def _may_exceed(text: str) -> bool:
    """Whether some stretch of ``text`` between document markers is longer than the limit."""
    if len(text) <= MAX_DOCUMENT_CHARS:
        return False
    last = 0
    for m in _DOC_MARKER.finditer(text):
        if m.start() - last > MAX_DOCUMENT_CHARS:
            return True
        last = m.start()
    return len(text) - last > MAX_DOCUMENT_CHARS


def _too_deep(how: str) -> str:
    return (
        f"YAML nests more than {MAX_DEPTH} levels deep{how} (kubectl's decoder stops at 10,000; no Kubernetes "
        "object comes near); refusing to lint this document"
    )


def _too_long() -> str:
    return (
        f"document is longer than {MAX_DOCUMENT_CHARS // 2**20} MiB; the API server refuses larger requests, "
        "so it cannot be applied; refusing to lint it"
    )


def _line_col(text: str, index: int) -> tuple[int, int]:
    line_start = text.rfind("\n", 0, index) + 1
    return text.count("\n", 0, index) + 1, index - line_start + 1


def _frame_path(stack: list[list]) -> tuple:
    """Path of the innermost frame (the mapping being built) from the document's root."""
    path: list = []
    for frame in stack[:-1]:
        if frame[_ISMAP]:
            key = frame[_KEY]
            path.append("<<" if key is _MERGEKEY else key)
        else:
            path.append(len(frame[_VAL]))
    return tuple(path)


def _merge(out: dict, value: Any) -> None:
    for src in value if isinstance(value, list) else [value]:
        if isinstance(src, dict):
            for k, v in src.items():
                out.setdefault(k, v)


def _key_string(key: Any) -> str:
    if key is True:
        return "true"
    if key is False:
        return "false"
    if key is None:
        return "null"
    return str(key)


def _add_document(
    text: str,
    file: str,
    base_index: int,
    base_line: int,
    data: Any,
    mark: Any,
    end: int,
    dups: list,
    item_lines: list | None,
    docs: list[Document],
) -> None:
    line = base_line + mark.line
    source = Source(text, base_index + mark.index, line, mark.column, base_index + end)
    doc = Document(file, len(docs), None, data, source=source, line=line + 1)
    for path, key, kmark in dups[:MAX_DUPLICATES]:
        doc.findings.append(
            Finding(
                "KG001",
                Severity.ERROR,
                f"duplicate key {key!r}: kubectl rejects it (strict field validation); keep one",
                file,
                base_line + kmark.line + 1,
                kmark.column + 1,
                format_path(path + (key,)),
                doc.kind,
                doc.name,
            )
        )
    if len(dups) > MAX_DUPLICATES:
        _, key, kmark = dups[MAX_DUPLICATES]
        doc.findings.append(
            Finding(
                "KG001",
                Severity.ERROR,
                f"{len(dups) - MAX_DUPLICATES} more duplicate keys in this document (the first {MAX_DUPLICATES} "
                "are listed); kubectl rejects them",
                file,
                base_line + kmark.line + 1,
                kmark.column + 1,
                "",
                doc.kind,
                doc.name,
            )
        )
    items = _list_items(doc, item_lines, base_line)
    if items is None:
        docs.append(doc)
        return
    if doc.findings and items:  # duplicate keys found while reading the List: report them once
        items[0].findings.extend(doc.findings)
    elif doc.findings:
        docs.append(doc)
    for item in items:
        item.index = len(docs)
        docs.append(item)


def _list_items(doc: Document, item_lines: list | None, base_line: int) -> list[Document] | None:
    """The items of a ``kind: List`` (or ``<Kind>List``) document as documents of their own, the
    way kubectl applies them; None for any other document. Paths of item findings are relative to
    the item; lines and columns are exact."""
    data = doc.data
    if not isinstance(data, dict) or not doc.kind.endswith("List") or not isinstance(data.get("items"), list):
        return None
    items = data["items"]
    if item_lines is None or len(item_lines) != len(items):
        return None
    pairs = enumerate(zip(items, item_lines, strict=True))
    return [doc.child(("items", i), item, line=base_line + ln + 1) for i, (item, ln) in pairs]


# ---------------------------------------------------------------------------------------------
# Positions, read back on demand


def positions(source: Source) -> PosNode | None:
    """The position tree of the document at ``source`` (its text is read again: only documents with
    findings pay for it). None if it cannot be read (it parsed before, so this is not expected)."""
    text = source.text
    start = text.rfind("\n", 0, source.start) + 1  # from the line's start, so columns stay exact
    line0 = source.line
    with _parser_depth():
        return _positions(_Base(_Chunks(text, start, source.end)), line0)


def _positions(loader: Any, line0: int) -> PosNode | None:
    stack: list[list] = []  # [node kind, mark, children, pending key]
    anchors: dict[str, PosNode] = {}
    try:
        while True:
            e = loader.get_event()
            if e is None:
                return None
            c = e.__class__
            if c is ScalarEvent:
                m = e.start_mark
                tag = e.tag
                if tag is None or tag == "!":
                    tag = _PLAIN if e.implicit[0] else _STR
                node = PosNode("scalar", line0 + m.line + 1, m.column + 1, e.value, e.style, tag)
                if e.anchor is not None:
                    anchors[e.anchor] = node
            elif c is MappingStartEvent or c is SequenceStartEvent:
                m = e.start_mark
                is_map = c is MappingStartEvent
                stack.append(["mapping" if is_map else "sequence", m, {} if is_map else [], None, e.anchor])
                continue
            elif c is MappingEndEvent or c is SequenceEndEvent:
                kind, m, children, _, anchor = stack.pop()
                node = PosNode(kind, line0 + m.line + 1, m.column + 1, children, None, None)
                if anchor is not None:
                    anchors[anchor] = node
            elif c is AliasEvent:
                got = anchors.get(e.anchor)
                if got is None:
                    return None
                m = e.start_mark
                node = got._replace(line=line0 + m.line + 1, column=m.column + 1) if got.id == "scalar" else got
            elif c is DocumentEndEvent or c is StreamEndEvent:
                return None
            else:
                continue
            if not stack:
                return node
            top = stack[-1]
            if top[0] == "sequence":
                top[2].append(node)
            elif top[3] is None:
                top[3] = node
            else:
                key = top[3]
                if key.id == "scalar":  # by key, as in the values: found at once (the last of duplicates)
                    text_key = key.value
                    if key.tag == _PLAIN or key.tag in _EXPLICIT_NONSTR:
                        resolved = _plain(text_key)
                        text_key = resolved if isinstance(resolved, str) else _key_string(resolved)
                    top[2][text_key] = (key.line, key.column, node)
                top[3] = None
    except yaml.YAMLError:
        return None
    finally:
        loader.dispose()
