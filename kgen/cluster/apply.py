"""`kgen submit` on a cluster: what is checked before anything is applied, the server-side apply of a run's
objects (rolled back when one fails), and the run's Secret a StatefulSet needs (made fresh, owned by the workload).
kgen.cluster.engine's submit calls these; returns data, progress lines to the caller's ``say``.
"""

from __future__ import annotations

from collections.abc import Callable

from kgen.cluster.errors import ClusterError

Say = Callable[[str], None]

JOBSET_MISSING = "the JobSet CRD is not installed on this cluster (install JobSet v0.10+ or use --kind job)"


def preflight(cluster, docs: list[dict]) -> None:
    """What would make the apply fail half-way, checked before anything is applied: a kind that is a CRD
    (JobSet) must be served; where it is not installed, discovery of its group version answers 404."""
    from kgen.cluster.client import CRD_KINDS

    for kind in dict.fromkeys(d["kind"] for d in docs):
        if kind in CRD_KINDS and not cluster.serves(kind):
            raise ClusterError(JOBSET_MISSING if kind == "JobSet" else f"the {kind} CRD is not installed")


def apply_all(cluster, docs: list[dict], say: Say, forced: tuple[str, ...] = ()) -> list[dict]:
    """Apply the documents in order (ConfigMap, Service, workload) and return the server's answers. When one
    fails, the objects this submit created (201) are deleted again, newest first, so that a failed submit leaves
    nothing behind; objects that already existed (200) are left as they were. Kinds in ``forced`` are applied
    with force: kgen takes over their fields from another manager (a run Secret made by kubectl)."""
    created: list[tuple[str, str]] = []
    answers: list[dict] = []
    for doc in docs:
        doc.setdefault("metadata", {}).setdefault("namespace", cluster.namespace)
        kind, name = doc["kind"], doc["metadata"]["name"]
        try:
            answer, was_created = cluster.apply(doc, force=kind in forced, created=True)
        except ClusterError as exc:
            if not created:
                raise
            undone = rollback(cluster, created)
            raise ClusterError(f"{exc.message}; {undone}", option=exc.option, hint=exc.hint) from None
        if was_created:
            created.append((kind, name))
        answers.append(answer)
        say(f"{kind.lower()}/{name} applied (server-side, field manager kgen)")
    return answers


def drop_immutable_secret(cluster, name: str, say: Say) -> None:
    """An older kgen rendered the run's Secret immutable; one left behind (`kubectl delete statefulset` keeps
    it) can be neither updated nor used again: it is deleted before submit makes a fresh one."""
    old = cluster.get("Secret", name)
    if old is not None and old.get("immutable") and cluster.delete("Secret", name, propagation="Background"):
        say(f"secret/{name} deleted: an immutable one left by an older kgen")


def own_run_secret(cluster, secret: dict, workload: dict, say: Say, note: Say) -> None:
    """Give the run's Secret (applied before the workload, so no pod starts without it) an owner reference to
    the workload, so the garbage collector deletes it with the workload. Without one (the workload's answer has
    no uid, or the patch is refused), `kgen stop` still finds it by its labels."""
    from kgen.render.runsecret import owned_by

    uid = (workload.get("metadata") or {}).get("uid")
    name = secret["metadata"]["name"]
    try:
        if not uid:
            raise ClusterError("the API server's answer has no uid")
        cluster.apply(owned_by(secret, workload), force=True)
    except ClusterError as exc:
        note(
            f"warning: secret/{name} is not owned by {workload.get('kind', '').lower()} ({exc.message}); "
            f"`kgen stop` deletes it with the run"
        )
        return
    say(f"secret/{name} owned by {workload['kind'].lower()}/{workload['metadata']['name']} (deleted with it)")


def rollback(cluster, created: list[tuple[str, str]]) -> str:
    """Delete what this submit created, newest first; a one-line account of it."""
    done, failed = [], []
    for kind, name in reversed(created):
        try:
            cluster.delete(kind, name, propagation="Background")
            done.append(f"{kind.lower()}/{name}")
        except ClusterError:
            failed.append(f"{kind.lower()}/{name}")
    if not failed:
        return f"rolled back: {', '.join(done)} deleted again, nothing of this submit is left"
    deleted = f"{', '.join(done)} deleted again, but " if done else ""
    return f"rolled back: {deleted}{', '.join(failed)} could not be deleted (`kgen stop` the run)"


def run_secret(spec) -> dict | None:
    """The run's Secret that `kgen submit` makes: a StatefulSet's pods carry no Job UID to derive the secret
    from (kgen.render.runsecret); a fresh random value for every submit, never printed."""
    if not spec.secret_optional:
        return None
    import secrets

    from kgen.render.runsecret import secret_object

    return secret_object(spec.secret_name, spec.object_labels, secrets.token_hex(32))
