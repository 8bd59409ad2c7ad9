"""Offline JSON-schema validation against kubernetes-validate's bundled schemas.

The bundled schemas (``kubernetes_validate/kubernetes-json-schema/v1.NN.0-local[-strict]/``) use a
tiny subset of JSON schema: ``type``, ``required``, ``properties``, ``additionalProperties``,
``items``, ``$ref``, ``oneOf``, ``enum`` and ``format``. ``format: int32`` / ``int64`` on an integer
is asserted as a range (the API server rejects 3000000000 for an int32 field while decoding); other
formats are annotations. This module compiles exactly that subset into Python closures and fails
loudly (``SchemaError``) on any other keyword, so a future schema that needs more cannot be silently
under-validated.

Cost model (render runs this on every call): the 1.8 MB ``_definitions.json`` is read only on a
cache miss; the subset a kind needs is stored as a marshal file under the user cache folder
(``$KGEN_CACHE_DIR``, ``$XDG_CACHE_HOME/kgen`` or ``~/.cache/kgen``), written atomically and
skipped silently when the folder is not writable. Each kind compiles once per process, lazily.
We never import ``kubernetes_validate`` itself (it imports jsonschema); only its data files.

User schemas (``--schema-location``, for CRDs) may use any JSON-schema keyword, so they go through
the ``jsonschema`` package, imported only when such a schema is actually used.
"""

from __future__ import annotations

import json
import marshal
import os
import re
from collections.abc import Callable
from functools import cache
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from kgen import __version__
from kgen.errors import UsageError
from kgen.resources import cache_dir, write_atomic

# An error is (path, message); path is a tuple of keys and list indexes, relative to the document.
Error = tuple[tuple, str]
Check = Callable[[Any], "list[Error] | None"]

VALIDATION_KEYWORDS = frozenset(
    ("type", "required", "properties", "additionalProperties", "items", "$ref", "oneOf", "enum")
)
ANNOTATION_KEYWORDS = frozenset(("description", "format", "$schema", "$id", "default", "title"))
INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
_CACHE_FORMAT = 2  # bump whenever compact() output changes: it is part of every cache file name


class SchemaError(Exception):
    """A bundled schema uses JSON-schema features this validator does not implement."""


# ---------------------------------------------------------------------------------------------
# Versions and files


@cache
def schema_root() -> Path:
    spec = find_spec("kubernetes_validate")
    if spec is None or not spec.submodule_search_locations:
        raise UsageError(
            "the kubernetes-validate package is not installed", hint="pip install 'kubernetes-validate>=1.37'"
        )
    return Path(list(spec.submodule_search_locations)[0]) / "kubernetes-json-schema"


_DIR_RE = re.compile(r"^v(\d+)\.(\d+)\.\d+-local$")


@cache
def supported_versions() -> tuple[str, ...]:
    """Minor versions with bundled schemas, oldest first, e.g. ('1.25', ..., '1.37')."""
    found = []
    for entry in os.listdir(schema_root()):
        m = _DIR_RE.match(entry)
        if m:
            found.append((int(m.group(1)), int(m.group(2))))
    return tuple(f"{a}.{b}" for a, b in sorted(found))


_VERSION_RE = re.compile(r"^v?(\d+)\.(\d+)(?:\.\d+)?$")


def normalize_version(value: str) -> str:
    """'1.33', '1.33.0', 'v1.33' -> '1.33'. UsageError for anything else or unsupported."""
    versions = supported_versions()
    m = _VERSION_RE.match(str(value).strip())
    span = f"{versions[0]} … {versions[-1]}"
    if not m:
        raise UsageError(
            f"not a Kubernetes version: {value!r}; use MAJOR.MINOR such as {versions[-1]} ({span})",
            option="--kubernetes-version",
        )
    minor = f"{int(m.group(1))}.{int(m.group(2))}"
    if minor not in versions:
        raise UsageError(f"unsupported version {value!r}; kgen has schemas for {span}", option="--kubernetes-version")
    return minor


def minor_of(version: str) -> int:
    return int(version.split(".")[1])


def kind_file_name(api_version: str, kind: str) -> str:
    """kubernetes-validate's file naming: apps/v1 StatefulSet -> statefulset-apps-v1.json."""
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    return f"{kind.lower()}-{group_version}.json"


BUILTIN_GROUPS = frozenset(
    (
        "",
        "apps",
        "batch",
        "policy",
        "autoscaling",
        "extensions",
        "networking.k8s.io",
        "rbac.authorization.k8s.io",
        "storage.k8s.io",
        "scheduling.k8s.io",
        "node.k8s.io",
        "coordination.k8s.io",
        "discovery.k8s.io",
        "events.k8s.io",
        "admissionregistration.k8s.io",
        "apiextensions.k8s.io",
        "apiregistration.k8s.io",
        "authentication.k8s.io",
        "authorization.k8s.io",
        "certificates.k8s.io",
        "flowcontrol.apiserver.k8s.io",
        "internal.apiserver.k8s.io",
        "resource.k8s.io",
        "storagemigration.k8s.io",
    )
)


def is_builtin_group(api_version: str) -> bool:
    """True for the API groups Kubernetes itself serves (core, apps, batch, networking.k8s.io ...);
    CRD groups such as gateway.networking.k8s.io or kubeflow.org are not."""
    group = api_version.rpartition("/")[0]
    return group in BUILTIN_GROUPS


# ---------------------------------------------------------------------------------------------
# Compaction: keep only the validation keywords of the definitions one kind needs


def _ref_name(ref: str) -> str:
    marker = "#/$defs/"
    idx = ref.find(marker)
    if idx < 0:
        raise SchemaError(f"unsupported $ref {ref!r}")
    return ref[idx + len(marker) :]


def compact(schema: dict, needed: list[str] | None = None) -> dict:
    """Validation keywords of ``schema`` only; referenced definition names go to ``needed``."""
    if not isinstance(schema, dict):
        raise SchemaError(f"schema must be an object, got {schema!r}")
    out: dict = {}
    for key, value in schema.items():
        if key == "format" and value in INT_RANGES:
            out[key] = value
            continue
        if key in ANNOTATION_KEYWORDS or key.startswith("x-kubernetes-"):
            continue
        if key not in VALIDATION_KEYWORDS:
            raise SchemaError(f"unsupported JSON-schema keyword {key!r}")
        if key == "properties":
            out[key] = {name: compact(sub, needed) for name, sub in value.items()}
        elif key == "additionalProperties":
            out[key] = value if isinstance(value, bool) else compact(value, needed)
        elif key == "items":
            if not isinstance(value, dict):
                raise SchemaError("unsupported tuple form of 'items'")
            out[key] = compact(value, needed)
        elif key == "oneOf":
            out[key] = [compact(sub, needed) for sub in value]
        elif key == "$ref":
            name = _ref_name(value)
            out[key] = name
            if needed is not None:
                needed.append(name)
        elif key == "type":
            out[key] = [value] if isinstance(value, str) else list(value)
            for t in out[key]:
                if t not in _PYTYPES:
                    raise SchemaError(f"unsupported type {t!r}")
        else:  # required, enum
            out[key] = list(value)
    return out


def compact_kind(kind_schema: dict, definitions: dict) -> dict:
    """The kind's schema plus every definition reachable from it, validation keywords only."""
    needed: list[str] = []
    root = compact(kind_schema, needed)
    defs: dict = {}
    while needed:
        name = needed.pop()
        if name in defs:
            continue
        if name not in definitions:
            raise SchemaError(f"$ref to unknown definition {name!r}")
        defs[name] = compact(definitions[name], needed)
    gvk = [
        (g.get("group", ""), g.get("version", ""), g.get("kind", ""))
        for g in kind_schema.get("x-kubernetes-group-version-kind", [])
    ]
    return {"root": root, "defs": defs, "gvk": gvk}


# ---------------------------------------------------------------------------------------------
# Compilation to closures

_PYTYPES: dict[str, tuple] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
    "object": (dict,),
    "array": (list,),
}
_JSON_NAMES = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    type(None): "null",
    dict: "object",
    list: "array",
}


def json_type(value: Any) -> str:
    return _JSON_NAMES.get(type(value), type(value).__name__)


def _describe(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return json_type(value)
    text = json.dumps(value, default=str)
    if len(text) > 40:
        text = text[:37] + "..."
    return f"{json_type(value)} {text}"


def type_message(value: Any, allowed: list[str]) -> str:
    want = " or ".join(t for t in allowed if t != "null") or "null"
    return f"expected {want}, got {_describe(value)}"


class Compiler:
    """Compiles compact schemas into checks; one per (definitions set), memoised by name."""

    def __init__(self, defs: dict):
        self.defs = defs
        self.compiled: dict[str, Check] = {}

    def ref(self, name: str) -> Check:
        """The check for definition ``name``. Compiling never follows $refs eagerly (they are
        looked up on first use), so recursive definitions terminate."""
        fn = self.compiled.get(name)
        if fn is None:
            if name not in self.defs:
                raise SchemaError(f"$ref to unknown definition {name!r}")
            fn = self.compile(self.defs[name])
            self.compiled[name] = fn
        return fn

    def compile(self, s: dict) -> Check:
        parts: list[Check] = []
        if "$ref" in s:
            name = s["$ref"]
            if len(s) == 1:
                return self._ref_check(name)
            parts.append(self._ref_check(name))
        types = s.get("type")
        props = s.get("properties")
        addl = s.get("additionalProperties")
        items = s.get("items")
        if props is not None or addl is not None or "required" in s:
            parts.append(self._object(types, props or {}, addl, tuple(s.get("required", ()))))
            types = None
        elif items is not None:
            parts.append(self._array(types, self.compile(items)))
            types = None
        if "enum" in s:
            parts.append(self._enum(types, tuple(s["enum"])))
            types = None
        if "oneOf" in s:
            parts.append(self._one_of(types, [self.compile(x) for x in s["oneOf"]], s["oneOf"]))
            types = None
        if types is not None:
            parts.append(self._type(types, s.get("format")))
        if not parts:
            return _accept
        if len(parts) == 1:
            return parts[0]

        def all_of(value: Any) -> list[Error] | None:
            errs: list[Error] = []
            for p in parts:
                e = p(value)
                if e:
                    errs.extend(e)
            return errs or None

        return all_of

    def _ref_check(self, name: str) -> Check:
        compiled = self.compiled
        comp = self

        def ref(value: Any) -> list[Error] | None:
            fn = compiled.get(name)
            if fn is None:
                fn = comp.ref(name)
            return fn(value)

        return ref

    @staticmethod
    def _type(types: list[str], fmt: str | None = None) -> Check:
        allowed = frozenset(t for name in types for t in _PYTYPES[name])
        integer_only = "integer" in types and "number" not in types
        bounds = INT_RANGES.get(fmt or "") if "integer" in types else None

        def check(value: Any) -> list[Error] | None:
            if type(value) in allowed:
                if bounds is not None and type(value) is int and not bounds[0] <= value <= bounds[1]:
                    return [((), f"{value} is out of range for an {fmt} ({bounds[0]} ... {bounds[1]})")]
                return None
            if integer_only and type(value) is float and value.is_integer():
                if bounds is not None and not bounds[0] <= value <= bounds[1]:
                    return [((), f"{value:.0f} is out of range for an {fmt} ({bounds[0]} ... {bounds[1]})")]
                return None
            return [((), type_message(value, types))]

        return check

    @staticmethod
    def _type_ok(types: list[str], fmt: str | None = None) -> Callable[[Any], bool]:
        """Whether ``_type(types, fmt)`` accepts a value, without its error message (oneOf branches)."""
        allowed = frozenset(t for name in types for t in _PYTYPES[name])
        integer_only = "integer" in types and "number" not in types
        bounds = INT_RANGES.get(fmt or "") if "integer" in types else None

        def ok(value: Any) -> bool:
            t = type(value)
            if t in allowed:
                return bounds is None or t is not int or bounds[0] <= value <= bounds[1]
            if integer_only and t is float and value.is_integer():
                return bounds is None or bounds[0] <= value <= bounds[1]
            return False

        return ok

    def _object(self, types: list[str] | None, props: dict, addl: Any, required: tuple) -> Check:
        nullable = types is None or "null" in types
        want = types or ["object"]
        checks = {k: self.compile(v) for k, v in props.items()}
        extra: Check | None = self.compile(addl) if isinstance(addl, dict) else None
        closed = addl is False
        known = tuple(sorted(props))

        def obj(value: Any) -> list[Error] | None:
            if type(value) is not dict:
                if value is None and nullable:
                    return None
                return [((), type_message(value, want))]
            errs: list[Error] | None = None
            for k, x in value.items():
                sub = checks.get(k)
                if sub is None:
                    if closed:
                        if errs is None:
                            errs = []
                        errs.append(((k,), unknown_field_message(k, known)))
                        continue
                    if extra is None:
                        continue
                    sub = extra
                e = sub(x)
                if e:
                    if errs is None:
                        errs = []
                    errs.extend(((k,) + p, m) for p, m in e)
            for r in required:
                if r not in value:
                    if errs is None:
                        errs = []
                    errs.append(((), f"missing required field {r!r}"))
            return errs

        return obj

    @staticmethod
    def _array(types: list[str] | None, item: Check) -> Check:
        nullable = types is None or "null" in types
        want = types or ["array"]

        def arr(value: Any) -> list[Error] | None:
            if type(value) is not list:
                if value is None and nullable:
                    return None
                return [((), type_message(value, want))]
            errs: list[Error] | None = None
            for i, x in enumerate(value):
                e = item(x)
                if e:
                    if errs is None:
                        errs = []
                    errs.extend(((i,) + p, m) for p, m in e)
            return errs

        return arr

    def _enum(self, types: list[str] | None, values: tuple) -> Check:
        type_check = self._type(types) if types else None
        allowed = ", ".join(json.dumps(v) for v in values)

        def enum(value: Any) -> list[Error] | None:
            if type_check is not None:
                e = type_check(value)
                if e:
                    return e
            if value in values and type(value) in {type(v) for v in values}:
                return None
            if value is None and types and "null" in types:
                return None
            return [((), f"must be one of {allowed}, got {_describe(value)}")]

        return enum

    def _one_of(self, types: list[str] | None, branches: list[Check], raw: list[dict]) -> Check:
        type_check = self._type(types) if types else None
        names: list[str] = []
        for b in raw:
            for t in b.get("type", []):
                if t != "null" and t not in names:
                    names.append(t)
        want = names or ["a matching schema"]
        if all("type" in b and set(b) <= {"type", "format"} for b in raw):
            # branches of types only (int-or-string, quantity): tested without building their messages
            oks = [self._type_ok(b["type"], b.get("format")) for b in raw]

            def hits_of(value: Any) -> int:
                return sum(1 for ok in oks if ok(value))
        else:

            def hits_of(value: Any) -> int:
                return sum(1 for b in branches if not b(value))

        def one_of(value: Any) -> list[Error] | None:
            if type_check is not None:
                e = type_check(value)
                if e:
                    return e
            hits = hits_of(value)
            if hits == 1:
                return None
            if hits == 0:
                return [((), type_message(value, want))]
            if value is None:  # both "T or null" branches match null: jsonschema's oneOf rejects it
                return [((), f"expected {' or '.join(want)}, got null")]
            return [((), "matches more than one allowed form")]

        return one_of


def _accept(value: Any) -> None:
    return None


def unknown_field_message(key: str, known: tuple) -> str:
    import difflib  # only on the error path

    close = difflib.get_close_matches(key, known, n=1, cutoff=0.75)
    hint = f"; did you mean {close[0]!r}?" if close else "; remove it or fix its spelling"
    return f"unknown field {key!r}{hint}"


# ---------------------------------------------------------------------------------------------
# Per-kind validators, cached on disk and in memory


class KindValidator:
    def __init__(self, data: dict, label: str):
        self.label = label  # e.g. "v1.37.0-local-strict/job-batch-v1.json"
        self.gvk = [tuple(g) for g in data["gvk"]]
        self._compiler = Compiler(data["defs"])
        self.check = self._compiler.compile(data["root"])

    def matches(self, api_version: str, kind: str) -> bool:
        if not self.gvk:
            return True
        group, _, version = api_version.rpartition("/")
        return any(g == group and v == version and k == kind for g, v, k in self.gvk)

    def validate(self, data: Any) -> list[Error]:
        return self.check(data) or []


def _write_atomic(path: Path, payload: bytes) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, payload)
    except OSError:
        pass  # a read-only home or a full disk only costs speed


_UNKNOWN = object()


class BundledSchemas:
    """The bundled schemas of one Kubernetes minor version, strict or not."""

    def __init__(self, version: str, strict: bool = True):
        self.version = version
        self.dirname = f"v{version}.0-local" + ("-strict" if strict else "")
        self.folder = schema_root() / self.dirname
        if not self.folder.is_dir():
            raise UsageError(f"no bundled schemas for Kubernetes {version}", option="--kubernetes-version")
        self._validators: dict[str, KindValidator | None] = {}
        self._by_gvk: dict[tuple[str, str], Any] = {}  # (apiVersion, kind) -> validator or None
        self._definitions: dict | None = None
        self._fingerprint: str | None = None
        self.loaded_from_cache = 0
        self.compiled_from_json = 0

    def fingerprint(self) -> str:
        if self._fingerprint is None:
            st = os.stat(self.folder / "_definitions.json")
            self._fingerprint = f"{st.st_size:x}-{st.st_mtime_ns:x}"
        return self._fingerprint

    def _cache_path(self, filename: str) -> Path | None:
        base = cache_dir()
        if base is None:
            return None
        return (
            base
            / "schemas"
            / f"{__version__}-f{_CACHE_FORMAT}"
            / self.dirname
            / f"{filename[:-5]}-{self.fingerprint()}.marshal"
        )

    def definitions(self) -> dict:
        if self._definitions is None:
            with open(self.folder / "_definitions.json", encoding="utf-8") as fh:
                self._definitions = json.load(fh)["$defs"]
        return self._definitions

    def compact_for(self, filename: str) -> dict | None:
        """Compact schema for one kind file, from the disk cache or the JSON files."""
        cpath = self._cache_path(filename)
        if cpath is not None:
            try:
                with open(cpath, "rb") as fh:
                    data = marshal.loads(fh.read())
                self.loaded_from_cache += 1
                return data
            except (OSError, EOFError, ValueError, TypeError):
                pass
        try:
            with open(self.folder / filename, encoding="utf-8") as fh:
                kind_schema = json.load(fh)
        except FileNotFoundError:
            return None
        data = compact_kind(kind_schema, self.definitions())
        self.compiled_from_json += 1
        if cpath is not None:
            _write_atomic(cpath, marshal.dumps(data))
        return data

    def validator(self, api_version: str, kind: str) -> KindValidator | None:
        got = self._by_gvk.get((api_version, kind), _UNKNOWN)
        if got is _UNKNOWN:
            got = self._by_gvk[(api_version, kind)] = self._validator(api_version, kind)
        return got

    def _validator(self, api_version: str, kind: str) -> KindValidator | None:
        filename = kind_file_name(api_version, kind)
        if filename in self._validators:
            v = self._validators[filename]
        else:
            data = self.compact_for(filename) if "/" not in filename else None
            v = KindValidator(data, f"{self.dirname}/{filename}") if data is not None else None
            self._validators[filename] = v
        if v is not None and not v.matches(api_version, kind):
            return None
        return v


def bundled(version: str, strict: bool = True) -> BundledSchemas:
    """One BundledSchemas per (version, strictness) per process."""
    return _bundled(version, bool(strict))


@cache
def _bundled(version: str, strict: bool) -> BundledSchemas:
    return BundledSchemas(version, strict)


# ---------------------------------------------------------------------------------------------
# User schemas (--schema-location): folders or kubeconform-style templates, any JSON schema


class UserSchemas:
    """Schemas from ``--schema-location``: a folder, or a kubeconform-style path template such as
    ``schemas/{{ .Group }}/{{ .ResourceKind }}_{{ .ResourceAPIVersion }}.json``. Local only."""

    def __init__(self, location: str, version: str, strict: bool = True):
        if re.match(r"^[a-z]+://", location) and not location.startswith("file://"):
            raise UsageError(
                f"only local schema locations are supported, got {location!r}",
                option="--schema-location",
                hint="download the schemas and pass their folder",
            )
        self.location = location[len("file://") :] if location.startswith("file://") else location
        self.version = version
        self.strict = strict
        if "{{" not in self.location and not os.path.isdir(self.location):
            raise UsageError(f"not a folder or a template: {location!r}", option="--schema-location")
        self._cache: dict[tuple[str, str], Any] = {}

    def candidates(self, api_version: str, kind: str) -> list[str]:
        group, _, ver = api_version.rpartition("/")
        values = {
            "NormalizedKubernetesVersion": f"v{self.version}.0",
            "KubernetesVersion": f"{self.version}.0",
            "StrictSuffix": "-strict" if self.strict else "",
            "ResourceKind": kind.lower(),
            "ResourceAPIVersion": ver,
            "Group": group,
            "KindSuffix": "-" + kind_file_name(api_version, kind)[len(kind) + 1 : -5],
        }
        if "{{" in self.location:

            def sub(m: re.Match) -> str:
                key = m.group(1)
                if key not in values:
                    raise UsageError(
                        f"unknown template variable {{{{ .{key} }}}} in {self.location!r}", option="--schema-location"
                    )
                return values[key]

            return [re.sub(r"\{\{\s*\.(\w+)\s*\}\}", sub, self.location)]
        base = self.location
        return [
            os.path.join(base, kind_file_name(api_version, kind)),
            os.path.join(base, group, f"{kind.lower()}_{ver}.json"),
            os.path.join(base, f"{kind.lower()}_{ver}.json"),
            os.path.join(base, f"{kind.lower()}-{group.split('.')[0]}-{ver}.json" if group else ""),
        ]

    def validator(self, api_version: str, kind: str) -> Any:
        key = (api_version, kind)
        if key in self._cache:
            return self._cache[key]
        found = None
        for path in self.candidates(api_version, kind):
            if path and os.path.isfile(path):
                found = path
                break
        result = None
        if found:
            from kgen.errors import InputError

            try:
                with open(found, encoding="utf-8") as fh:
                    schema = json.load(fh)
            except (OSError, ValueError) as err:
                raise InputError(f"{found}: cannot read schema: {' '.join(str(err).split())}") from None
            import jsonschema  # user schemas may use any keyword; only imported here

            cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
            result = (found, cls(schema))
        self._cache[key] = result
        return result

    @staticmethod
    def errors(validator: Any, data: Any) -> list[Error]:
        out = []
        for err in validator.iter_errors(data):
            out.append((tuple(err.absolute_path), " ".join(err.message.split())))
        return out
