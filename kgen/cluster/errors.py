"""Errors of the cluster verbs (no ``kubernetes`` import here: the CLI catches these without it)."""

from __future__ import annotations

from kgen.errors import KgenError

INSTALL_HINT = "pip install 'kgen-k8s[cluster]'"


class ClusterError(KgenError):
    """The cluster cannot be reached or refused a request: one line, exit 2."""


class NotFound(ClusterError):
    """The API answered 404 (a standard Kubernetes Status)."""


class MissingClient(KgenError):
    """The optional ``kubernetes`` package is not installed."""

    def __init__(self) -> None:
        super().__init__(f"the cluster commands need the kubernetes package: {INSTALL_HINT}")
