"""Which files ``kgen lint`` reads: folders walked, ``--exclude`` globs, and YAML that is not a manifest.

A CI folder holds more YAML than Kubernetes objects. Files that are known not to be manifests are
skipped (``Skip``: path and reason; the CLI prints one info line each), whether found in a folder
or named explicitly (pre-commit names every changed *.yaml):

- by name or place (``skip_reason``): Kustomize ``kustomization.yaml``; in a Helm chart (a folder
  with ``Chart.yaml``, or below one) everything but ``crds/``: ``Chart.yaml``, ``values*.yaml``,
  ``ci/``, ``templates/``; anything below ``.github/`` or ``.gitlab/``, ``.gitlab-ci.yml``,
  ``.pre-commit-config.yaml``, Docker Compose files and a few tool configs (``TOOL_CONFIGS``);
- by content (``content_skip_reason``, after reading): a file holding ``{{`` that does not parse
  as Kubernetes objects (a template: render it first), a Kustomize object
  (``kustomize.config.k8s.io``), and files none of whose documents has apiVersion and kind that look
  like a GitHub Actions workflow, GitLab CI, Docker Compose, pre-commit configuration or Helm values.

``--exclude GLOB`` (``Excludes``) works like a .gitignore line, matched against the path relative
to the folder argument (for a file argument: the path as given, or any trailing part of it):
``*`` and ``?`` stay within one path segment, ``**`` spans segments (``**/x``, ``a/**``,
``a/**/b``), ``[abc]`` is a class; a glob without ``/`` matches a file or folder name at any
depth; a glob with ``/`` is anchored at the argument (a leading ``/`` is allowed); a trailing
``/`` matches folders only; an excluded folder excludes everything below it.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable
from typing import NamedTuple

YAML_SUFFIXES = (".yaml", ".yml")

KUSTOMIZATION_NAMES = frozenset(("kustomization.yaml", "kustomization.yml", "Kustomization"))
TOOL_CONFIGS = {
    ".kgen.yaml": "kgen configuration (kgen lint reads its lint: settings)",
    ".pre-commit-config.yaml": "pre-commit configuration",
    ".pre-commit-config.yml": "pre-commit configuration",
    ".pre-commit-hooks.yaml": "pre-commit hook definitions",
    ".gitlab-ci.yml": "GitLab CI configuration",
    ".gitlab-ci.yaml": "GitLab CI configuration",
    "action.yml": "GitHub Action metadata",
    "action.yaml": "GitHub Action metadata",
    "skaffold.yaml": "Skaffold configuration",
    "mkdocs.yml": "MkDocs configuration",
    "mkdocs.yaml": "MkDocs configuration",
    ".readthedocs.yaml": "Read the Docs configuration",
    ".readthedocs.yml": "Read the Docs configuration",
    ".goreleaser.yaml": "GoReleaser configuration",
    ".goreleaser.yml": "GoReleaser configuration",
    ".golangci.yml": "golangci-lint configuration",
    ".golangci.yaml": "golangci-lint configuration",
    ".yamllint": "yamllint configuration",
    ".yamllint.yaml": "yamllint configuration",
    ".yamllint.yml": "yamllint configuration",
    "codecov.yml": "Codecov configuration",
    ".codecov.yml": "Codecov configuration",
    "Taskfile.yml": "Taskfile",
    "Taskfile.yaml": "Taskfile",
    "environment.yml": "conda environment",
    "environment.yaml": "conda environment",
    "pnpm-lock.yaml": "pnpm lock file",
    "Chart.lock": "Helm chart lock file",
}
_COMPOSE = re.compile(r"(?:docker-)?compose(?:[.-][^/]*)?\.ya?ml$")
_VALUES = re.compile(r"values[^/]*\.ya?ml$")
_RENDER_CHART = "render it first: helm template <chart> | kgen lint -"


class Skip(NamedTuple):
    path: str
    reason: str


class Problem(NamedTuple):
    """A path that is there but cannot be read (permission denied ...): a KG004 finding."""

    path: str
    message: str


class Excludes:
    """``--exclude`` globs (see the module docstring for their syntax)."""

    def __init__(self, globs: Iterable[str] = ()) -> None:
        self.globs = [g for g in globs if g.strip("/")]
        self._rules: list[tuple[re.Pattern, bool]] = []
        for glob in self.globs:
            dir_only = glob.endswith("/")
            body = glob.rstrip("/")
            anchored = "/" in body
            rx = _glob_regex(body.lstrip("/"))
            if not anchored:
                rx = "(?:.*/)?" + rx
            self._rules.append((re.compile(rx + r"\Z", re.S), dir_only))

    def __bool__(self) -> bool:
        return bool(self._rules)

    def matches(self, rel: str, is_dir: bool) -> bool:
        """Whether the relative path ``rel`` ('/'-separated) is excluded by a glob itself."""
        return any(rx.match(rel) and (is_dir or not dir_only) for rx, dir_only in self._rules)

    def excludes_file(self, path: str) -> bool:
        """Whether a file named on the command line is excluded: its path as given, or any trailing
        part of it (``deploy/legacy/**`` matches /abs/repo/deploy/legacy/x.yaml), or a folder on it."""
        if not self._rules:
            return False
        parts = path.split("/")
        for start in range(len(parts)):
            tail = parts[start:]
            if self.matches("/".join(tail), False):
                return True
            if any(self.matches("/".join(tail[:i]), True) for i in range(1, len(tail))):
                return True
        return False


def _glob_regex(glob: str) -> str:
    out: list[str] = []
    i, n = 0, len(glob)
    while i < n:
        if glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif glob.startswith("**", i):
            out.append(".*")
            i += 2
        elif glob[i] == "*":
            out.append("[^/]*")
            i += 1
        elif glob[i] == "?":
            out.append("[^/]")
            i += 1
        elif glob[i] == "[" and glob.find("]", i + 2) != -1:
            j = glob.find("]", i + 2)
            body = glob[i + 1 : j]
            if body[:1] == "!":
                body = "^" + body[1:]
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = j + 1
        else:
            out.append(re.escape(glob[i]))
            i += 1
    return "".join(out)


def display_rel(path: str) -> str:
    """A path as given, '/'-separated, without './' in front (what an explicit file is matched as)."""
    rel = os.path.normpath(path).replace(os.sep, "/")
    return rel[2:] if rel.startswith("./") else rel


# ---------------------------------------------------------------------------------------------
# Not manifests


def chart_root(folder: str, cache: dict[str, str | None]) -> str | None:
    """The Helm chart (a folder holding Chart.yaml) that ``folder`` is in or is, else None."""
    folder = os.path.abspath(folder)
    trail = []
    found: str | None = None
    current = folder
    while True:
        if current in cache:
            found = cache[current]
            break
        trail.append(current)
        if os.path.isfile(os.path.join(current, "Chart.yaml")):
            found = current
            break
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    for d in trail:
        cache[d] = found
    return found


def skip_reason(path: str, charts: dict[str, str | None]) -> str | None:
    """Why the file at ``path`` is not a Kubernetes manifest, by its name and place; None if it may be."""
    name = os.path.basename(path)
    if name in KUSTOMIZATION_NAMES:
        return "Kustomize kustomization (lint its output: kustomize build DIR | kgen lint -)"
    if name in TOOL_CONFIGS:
        return TOOL_CONFIGS[name]
    parts = os.path.abspath(path).replace(os.sep, "/").split("/")
    if ".github" in parts[:-1]:
        return "GitHub configuration (workflows, dependabot ...)"
    if ".gitlab" in parts[:-1]:
        return "GitLab configuration"
    if _COMPOSE.match(name):
        return "Docker Compose file"
    chart = chart_root(os.path.dirname(path) or ".", charts)
    if chart is not None:
        inside = os.path.relpath(os.path.abspath(path), chart).replace(os.sep, "/").split("/")
        if "crds" in inside[:-1]:
            return None  # a chart's crds/ holds plain manifests (Helm applies them as they are)
        if name == "Chart.yaml":
            return "Helm chart metadata (Chart.yaml)"
        if "templates" in inside[:-1]:
            return f"Helm chart template ({_RENDER_CHART})"
        if _VALUES.match(name) or (inside and inside[0] == "ci"):
            return f"Helm values file ({_RENDER_CHART})"
        return f"file of a Helm chart ({_RENDER_CHART})"
    return None


# The top-level keys of a kgen values file (kgen.render.values.VALUES; a test keeps the two the same) and those
# only kgen's values have, one of which a file must hold to be taken for one (`kgen presets show 4x8 > f.yaml`).
KGEN_VALUE_KEYS = frozenset(
    """activeDeadlineSeconds affinity annotations auth command cpu description dnsPolicy env envFrom gloo gpus
    guaranteed hang health hostIPC hostNetwork image imagePullPolicy imagePullSecrets initContainers jobset kind labels
    livenessPort maxRestarts memory name namespace nccl networkPolicy nodeSelector nodes nprocPerNode patches
    podDisruptionBudget podSecurityContext port priorityClassName python queue rdma reform resources
    runtimeClassName schedulerName serviceAccountName shmSize slurm terminationGracePeriodSeconds timeouts
    tolerations topology topologySpreadConstraints ttlSecondsAfterFinished volumeMounts volumes workingDir
    workloadPriorityClass""".split()
)
_KGEN_ONLY_KEYS = frozenset(
    ("nodes", "gpus", "shmSize", "nprocPerNode", "nccl", "gloo", "rdma", "reform", "maxRestarts")
)
KGEN_VALUES_REASON = "kgen values file (lint what it renders: kgen render -f FILE | kgen lint -)"


def is_kgen_values(data: dict) -> bool:
    """A mapping that is a kgen values file: every key one of kgen's, at least one only kgen has."""
    keys = {k for k in data if isinstance(k, str)}
    return len(keys) == len(data) and bool(keys & _KGEN_ONLY_KEYS) and keys <= KGEN_VALUE_KEYS


def content_skip_reason(path: str, text: str, docs: list, parse_failed: bool) -> str | None:
    """Why a file that was read is not a Kubernetes manifest, by its content; None if it may be.
    ``docs`` are its parsed documents (``kgen.lint.document.Document``)."""
    objects = [d for d in docs if isinstance(d.data, dict)]
    if any(d.api_version.startswith("kustomize.config.k8s.io/") for d in objects):
        return "Kustomize kustomization or component (lint its output: kustomize build DIR | kgen lint -)"
    manifests = [d for d in objects if d.api_version and d.kind]
    if "{{" in text and (parse_failed or len(manifests) < len(docs)):
        return "a template ({{ ... }}): not YAML until it is rendered; lint the rendered output"
    if manifests or parse_failed or not objects:
        return None
    first = objects[0].data
    keys = set(first)
    if is_kgen_values(first):
        return KGEN_VALUES_REASON
    if _VALUES.match(os.path.basename(path)):
        return f"Helm values file ({_RENDER_CHART})"
    if "jobs" in keys and ("on" in keys or "true" in keys):  # `on:` is the boolean true in YAML 1.1
        return "GitHub Actions workflow"
    if "stages" in keys or any(isinstance(v, dict) and "script" in v for v in first.values()):
        return "GitLab CI configuration"
    services = first.get("services")
    if (
        isinstance(services, dict)
        and services
        and all(isinstance(v, dict) and ("image" in v or "build" in v) for v in services.values())
    ):
        return "Docker Compose file"
    if "repos" in keys:
        return "pre-commit configuration"
    return None


# ---------------------------------------------------------------------------------------------
# Walking folders


def walk(folder: str, excludes: Excludes) -> tuple[list[str], list[Skip], list[Problem], int]:
    """The *.yaml/*.yml files and sbatch scripts below ``folder`` (sorted, hidden folders skipped), those
    skipped as not being regular files, the folders that could not be listed, and how many files were excluded."""
    from kgen.lint.sbatch import sbatch_candidate

    found: list[str] = []
    skipped: list[Skip] = []
    problems: list[Problem] = []
    excluded = 0

    def onerror(err: OSError) -> None:
        where = err.filename or folder
        if isinstance(err, PermissionError):
            problems.append(Problem(where, "permission denied (cannot list this folder)"))
        else:
            problems.append(Problem(where, f"cannot list this folder ({err.strerror or err})"))

    for root, dirs, files in os.walk(folder, onerror=onerror):
        rel_root = os.path.relpath(root, folder).replace(os.sep, "/")
        rel_root = "" if rel_root == "." else rel_root + "/"
        keep = []
        for d in sorted(dirs):
            if d.startswith("."):
                continue
            if excludes and excludes.matches(rel_root + d, True):
                excluded += 1
                continue
            keep.append(d)
        dirs[:] = keep
        for f in sorted(files):
            if not f.endswith(YAML_SUFFIXES) and not sbatch_candidate(os.path.join(root, f)):
                continue  # neither YAML nor an sbatch script (kgen.lint.sbatch)
            if excludes and excludes.matches(rel_root + f, False):
                excluded += 1
                continue
            path = os.path.join(root, f)
            try:
                mode = os.stat(path).st_mode
            except OSError:
                mode = 0  # a dangling symlink: reading it says why
            if mode and not stat.S_ISREG(mode):
                skipped.append(Skip(path, "not a regular file (a FIFO, socket or device found in a folder)"))
                continue
            found.append(path)
    return found, skipped, problems, excluded
