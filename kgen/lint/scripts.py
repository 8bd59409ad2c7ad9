"""The files a container can run that the linted set holds: ConfigMap keys mounted into the pod.

A script that lives in a ConfigMap (``bash /scripts/run.sh``, ``command: [/scripts/run.sh]``,
``source /etc/train/env.sh``) is as much the container's command as an inline ``bash -c``: the launch
model (``kgen.launch.command``) reads it through a ``Files`` view of one container, built here from
the pod's volumes, the container's ``volumeMounts`` and the ConfigMaps among the linted documents.

How the kubelet lays the files out (``pkg/volume/configmap``, ``projected``): a ``configMap`` volume
(or a ``projected`` volume's ``configMap`` source) mounted at ``mountPath`` holds one file per key
(``mountPath/<key>``), or only the listed ``items`` at ``mountPath/<item.path>``; with ``subPath``
the mount *is* the file named by ``subPath``. Keys are file names (no ``/``); item paths may hold
folders. Pure: no I/O, nothing but the documents given.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from typing import Any

# One view per container: (mountPath, subPath or "", {file path inside the volume: key}, ConfigMap name)
_Mount = tuple[str, str, "dict[str, str] | None", str]


class Files:
    """The files of one container that come from ConfigMaps of the linted set."""

    __slots__ = ("mounts", "lookup", "working_dir")

    def __init__(self, mounts: list[_Mount], lookup: Callable[[str], Any], working_dir: str = "") -> None:
        self.mounts = mounts
        self.lookup = lookup  # ConfigMap name -> its document (or None)
        self.working_dir = working_dir if working_dir.startswith("/") else ""

    def __bool__(self) -> bool:
        return bool(self.mounts)

    def absolute(self, path: str, cwd: str = "") -> str | None:
        """``path`` made absolute against ``cwd`` (else the container's workingDir); None when a relative
        path has no known folder."""
        if path.startswith("/"):
            return posixpath.normpath(path)
        base = cwd or self.working_dir
        return posixpath.normpath(posixpath.join(base, path)) if base else None

    def text(self, path: str, cwd: str = "") -> tuple[str, str] | None:
        """(text, where it comes from) of the file at ``path``, when a ConfigMap of the linted set holds it."""
        full = self.absolute(path, cwd)
        if full is None:
            return None
        for mount_path, sub_path, items, cm_name in self.mounts:
            inner = _inside(full, mount_path, sub_path)
            if inner is None:
                continue
            key = inner if items is None else items.get(inner)
            if key is None or "/" in key:
                continue
            doc = self.lookup(cm_name)
            data = doc.data.get("data") if doc is not None and isinstance(doc.data, dict) else None
            value = data.get(key) if isinstance(data, dict) else None
            if isinstance(value, str):
                return value, f"{full} from ConfigMap {cm_name!r} key {key!r}"
        return None


def _inside(path: str, mount_path: str, sub_path: str) -> str | None:
    """The file's path inside the volume, or None when ``path`` is not under the mount."""
    mount_path = posixpath.normpath(mount_path)
    if sub_path:
        return posixpath.normpath(sub_path) if path == mount_path else None
    if path.startswith(mount_path.rstrip("/") + "/"):
        return path[len(mount_path.rstrip("/")) + 1 :]
    return None


def files_of(pod_spec: dict, container: dict, lookup: Callable[[str], Any]) -> Files:
    """The ConfigMap files ``container`` sees, through ``lookup`` (ConfigMap name -> document or None)."""
    volumes: dict[str, list[tuple[str, dict[str, str] | None]]] = {}
    for v in pod_spec.get("volumes") or []:
        if not isinstance(v, dict) or not isinstance(v.get("name"), str):
            continue
        sources = []
        cm = v.get("configMap")
        if isinstance(cm, dict):
            sources.append(cm)
        projected = v.get("projected")
        if isinstance(projected, dict):
            for src in projected.get("sources") or []:
                if isinstance(src, dict) and isinstance(src.get("configMap"), dict):
                    sources.append(src["configMap"])
        found = [(s["name"], _items(s.get("items"))) for s in sources if isinstance(s.get("name"), str)]
        if found:
            volumes[v["name"]] = found
    mounts: list[_Mount] = []
    for m in container.get("volumeMounts") or []:
        if not isinstance(m, dict) or m.get("name") not in volumes or not isinstance(m.get("mountPath"), str):
            continue
        sub = m["subPath"] if isinstance(m.get("subPath"), str) else ""
        mount_path: str = m["mountPath"]
        for cm_name, items in volumes[m["name"]]:
            mounts.append((mount_path, sub, items, cm_name))
    wd = container.get("workingDir")
    return Files(mounts, lookup, wd if isinstance(wd, str) else "")


def _items(items: Any) -> dict[str, str] | None:
    """{path in the volume: key} of a configMap's ``items`` (None: every key, as a file of its name)."""
    if not isinstance(items, list):
        return None
    out = {}
    for item in items:
        if isinstance(item, dict) and isinstance(item.get("key"), str) and isinstance(item.get("path"), str):
            out[posixpath.normpath(item["path"])] = item["key"]
    return out


def configmaps_by_name(docs: list) -> dict[str, list]:
    """The ConfigMaps of the linted set by name (built once per lint run)."""
    by_name: dict[str, list] = {}
    for d in docs:
        if d.kind == "ConfigMap" and d.api_version == "v1" and d.name:
            by_name.setdefault(d.name, []).append(d)
    return by_name


def configmap_lookup(by_name: dict[str, list], namespace: str) -> Callable[[str], Any]:
    """ConfigMap name -> the ConfigMap of the linted set a pod of ``namespace`` mounts (its own namespace
    first; an object without a namespace lands wherever it is applied, so it pairs with any)."""

    def lookup(name: str) -> Any:
        found = by_name.get(name, [])
        exact = [d for d in found if d.namespace == namespace]
        loose = [d for d in found if not d.namespace or not namespace]
        return (exact or loose or [None])[0]

    return lookup
