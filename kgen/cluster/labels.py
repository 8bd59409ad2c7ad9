"""How kgen finds a run's objects: by its own labels (templates/_metadata.yaml.j2, kgen.render.spec), never by
name prefixes."""

from __future__ import annotations

MANAGED_SELECTOR = "app.kubernetes.io/managed-by=kgen"


def run_selector(name: str) -> str:
    """Every object of run NAME carries these labels."""
    return f"app.kubernetes.io/instance={name},app.kubernetes.io/managed-by=kgen"


def pod_selector(name: str) -> str:
    """The pods of run NAME: the workload's own selector labels (values cannot override them)."""
    return f"app.kubernetes.io/instance={name},kgen.dev/role=trainer"
