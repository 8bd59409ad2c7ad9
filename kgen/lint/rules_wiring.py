"""Service and DNS wiring of training workloads, across all documents of one lint run: the
rendezvous Service a Job's subdomain / StatefulSet's serviceName names (or that selects its pods),
its headless and not-ready settings, its selector and the pods' DNS names -- for kinds whose
controller names the pods (JobSet, PyTorchJob, Volcano Job, LeaderWorkerSet) from the workload
model's facts. The master address that names pod 0 is ``kgen.lint.rules_master``'s.

Services are paired with workloads through an index built once per run (by name, by one selector
pair, by the workload a job-name/pod-name selector names), so the rules stay linear.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from kgen import k8s
from kgen.findings import Severity
from kgen.lint.model import TRAINING_KINDS, Workload, pod0_label, pod0_name, readiness_held, workloads, world
from kgen.lint.model import memo as _memo
from kgen.lint.registry import Context, rule
from kgen.lint.rules_training import _multi

E, W = Severity.ERROR, Severity.WARNING
_MASTERISH = {"master", "leader", "head", "chief", "rank0", "rank-0", "main", "driver", "coordinator"}


def _wired(docs: list) -> list[Workload]:
    """Training workloads whose pods' DNS names the user wires (Job subdomain, StatefulSet serviceName)."""
    return _memo("wired", docs, lambda ds: [w for w in workloads(ds) if w.user_wired])


def _rendezvous_services(docs: list) -> list[tuple[Workload, Any]]:
    """Each user-wired workload's rendezvous Service, once per Service (with the first workload that uses
    it): KG101 and KG102 each report a Service once."""

    def pairs(ds: list) -> list[tuple[Workload, Any]]:
        out, seen = [], set()
        for w in _wired(ds):
            svc = rendezvous_service(w, services_for(w, ds))
            if svc is not None and id(svc) not in seen:
                seen.add(id(svc))
                out.append((w, svc))
        return out

    return _memo("rendezvous_services", docs, pairs)


def services(docs: list) -> list:
    return _memo("services", docs, lambda ds: [d for d in ds if d.kind == "Service" and d.name])


def same_namespace(a: Any, b: Any) -> bool:
    """Objects of one context meet when their namespaces agree; an object without a namespace goes
    wherever it is applied (``kubectl apply -n``), so it meets any."""
    return not a.namespace or not b.namespace or a.namespace == b.namespace


class _ServiceIndex:
    """The Services of one context, indexed so that pairing them with workloads stays linear in a
    folder of hundreds of apps: by name, by every selector pair, and those whose selector uses only
    controller-set keys (job-name, pod index, pod name)."""

    __slots__ = ("by_name", "by_pair", "special", "by_owner", "for_workload")

    def __init__(self, docs: list) -> None:
        self.by_name: dict[str, list] = {}
        self.by_pair: dict[tuple, list] = {}
        self.special: list = []  # controller keys that name no workload (controller-uid ...)
        self.by_owner: dict[str, list] = {}  # controller keys naming one workload: job-name=X, pod-name=X-N
        self.for_workload: dict[int, dict[str, Any]] = {}
        by_label = workloads_by_label(docs)
        for svc in services(docs):
            self.by_name.setdefault(svc.name, []).append(svc)
            pairs = _plain_pairs(svc)
            if pairs:
                # A Service selects a workload's pods only if all its pairs are among their labels, so one
                # pair finds it: the one fewest pod templates carry (the instance label, not app=kgen).
                rarest = min(pairs, key=lambda p: (len(by_label.get(p, ())), p))
                self.by_pair.setdefault(rarest, []).append(svc)
            elif _selector(svc):
                owner = _owner(_selector(svc))
                if owner is None:
                    self.special.append(svc)
                else:
                    self.by_owner.setdefault(owner, []).append(svc)

    def named(self, name: str, w: Workload) -> bool:
        return any(same_namespace(s, w.doc) for s in self.by_name.get(name, ()))


_CONTROLLER_KEYS = {
    "job-name",
    "batch.kubernetes.io/job-name",
    "controller-uid",
    "batch.kubernetes.io/controller-uid",
    "batch.kubernetes.io/job-completion-index",
    "apps.kubernetes.io/pod-index",
    "statefulset.kubernetes.io/pod-name",
    "controller-revision-hash",
}


def _owner(selector: dict) -> str | None:
    """The workload a controller-keys-only selector names: job-name=X, statefulset pod-name=X-N."""
    for key in ("job-name", "batch.kubernetes.io/job-name"):
        if isinstance(selector.get(key), str):
            return selector[key]
    pod = selector.get("statefulset.kubernetes.io/pod-name")
    if isinstance(pod, str) and "-" in pod:
        return pod.rsplit("-", 1)[0]
    return None


def _service_index(docs: list) -> _ServiceIndex:
    return _memo("service_index", docs, _ServiceIndex)


def services_for(w: Workload, docs: list) -> dict[str, Any]:
    """The Services that may serve workload ``w``, by name: the one its subdomain/serviceName names
    and every one that can select its pods (all selector labels on the pod template, or only
    controller-set keys), of its namespace (an exact namespace match wins a name clash)."""
    index = _service_index(docs)
    got = index.for_workload.get(id(w.doc))
    if got is not None:
        return got
    candidates: list = []
    named, _ = w.dns_field
    if named:
        candidates.extend(index.by_name.get(named, ()))
    for pair in k8s.template_labels(w.doc).items():
        if isinstance(pair[1], str):
            candidates.extend(index.by_pair.get(pair, ()))
    candidates.extend(index.special)
    candidates.extend(index.by_owner.get(w.name, ()))
    out: dict[str, Any] = {}
    for svc in sorted(set(candidates), key=lambda s: (s.file, s.index)):
        if same_namespace(svc, w.doc) and (svc.name not in out or svc.namespace == w.doc.namespace):
            out[svc.name] = svc
    index.for_workload[id(w.doc)] = out
    return out


def _plain_pairs(svc: Any) -> list[tuple]:
    return [(k, v) for k, v in _selector(svc).items() if k not in _CONTROLLER_KEYS and isinstance(v, str)]


def workloads_by_label(docs: list) -> dict[tuple, list]:
    return _memo("workloads_by_label", docs, _workloads_by_label)


def _workloads_by_label(docs: list) -> dict[tuple, list]:
    """Every object with a pod template (but Pods), by each (key, value) of its template labels."""
    out: dict[tuple, list] = {}
    for d in docs:
        if d.kind != "Pod" and k8s.pod_template(d):
            for pair in k8s.template_labels(d).items():
                if isinstance(pair[1], str):
                    out.setdefault(pair, []).append(d)
    return out


def _selector(svc: Any) -> dict:
    sel = k8s.get(svc.data, "spec", "selector")
    return sel if isinstance(sel, dict) else {}


def rendezvous_service(w: Workload, svcs: dict) -> Any:
    named, _ = w.dns_field
    if named:
        return svcs.get(named)
    for svc in svcs.values():
        if k8s.selector_scope(_selector(svc), w.doc) == "all":
            return svc
    return None


def _service_world(docs: list, w: Workload) -> bool:
    """``w`` is part of a world whose master address is a Service selecting the leader's one pod."""
    shared = world(docs, w)
    return shared is not None and shared.service is not None


_MASTER_VARS = ("MASTER_ADDR", "PET_MASTER_ADDR", "PET_RDZV_ENDPOINT", "MAIN_PROCESS_IP")


def _finds_peers_by_ip(w: Workload) -> bool:
    """The pods read their own IP (a status.podIP fieldRef) and nothing in the manifest names a master host
    (MASTER_ADDR, --master-addr, --rdzv-endpoint, a script that mentions MASTER_ADDR): they publish their
    address elsewhere (a shared volume, the API server) and their peers reach them by IP, not by DNS name."""
    own_ip = False
    for c, _cpath, scripted, _why in w.containers:
        for e in k8s.env_list(c):
            if not isinstance(e, dict):
                continue
            if e.get("name") in _MASTER_VARS:
                return False
            ref = k8s.get(e, "valueFrom", "fieldRef", "fieldPath")
            own_ip = own_ip or ref in ("status.podIP", "status.podIPs")
        if any(launch.master_flags() for launch in scripted.launches):
            return False
        if any(v in word for argv, _ in scripted.commands for word in argv for v in _MASTER_VARS):
            return False
        if any(v in script.source for script, _ in scripted.scripts for v in _MASTER_VARS):
            return False
    return own_ip


def _in_ns(w: Workload) -> str:
    return f" (namespace {w.doc.namespace})" if w.doc.namespace else ""


# --- Service wiring ---------------------------------------------------------------------------


@rule(
    "KG100",
    W,
    "A multi-node training Job/StatefulSet has no Service among the linted files (same namespace) that its "
    "pods' DNS names come from (subdomain/serviceName names none, or none selects its pods); pods that read "
    "their own IP (a status.podIP fieldRef) in a manifest that names no master host and no subdomain find "
    "each other by IP and need none.",
    "Add a headless Service (clusterIP: None) selecting the pods, named like the subdomain/serviceName.",
    kinds=["Job", "StatefulSet"],
    scope="stream",
    needs_all_inputs=True,
)
def rendezvous_service_missing(docs: list, ctx: Context) -> Iterator:
    for w in _wired(docs):
        if not _multi(w):
            continue
        svcs = services_for(w, docs)
        named, path = w.dns_field
        if not named and _finds_peers_by_ip(w):
            continue
        if named and named not in svcs:
            if _service_index(docs).by_name.get(named):
                continue  # it exists in another namespace: KG124
            yield (
                w.doc,
                path,
                f"names Service {named!r}, which is not among the linted files{_in_ns(w)}; "
                "add it (headless, selecting the pods)",
            )
        elif not named and rendezvous_service(w, svcs) is None and not _service_world(docs, w):
            yield (
                w.doc,
                ("metadata", "name"),
                f"no headless Service among the linted files{_in_ns(w)} selects the pods; "
                "pods get no DNS names for rendezvous",
            )


@rule(
    "KG101",
    E,
    "The rendezvous Service of a training workload must be headless (clusterIP: None) so that "
    "every pod gets its own DNS name.",
    "Set spec.clusterIP: None.",
    kinds=["Service"],
    scope="stream",
)
def rendezvous_headless(docs: list, ctx: Context) -> Iterator:
    for w, svc in _rendezvous_services(docs):
        if k8s.get(svc.data, "spec", "clusterIP") != "None":
            yield (
                svc,
                ("spec",),
                f"Service {svc.name!r} is the rendezvous Service of {w.doc.kind} {w.name!r}; "
                "make it headless: clusterIP: None",
            )


@rule(
    "KG102",
    W,
    "The rendezvous Service should publish not-ready addresses where the pods' DNS names are needed before "
    "the pods are Ready: a readiness or startup probe (or a readiness gate) holds readiness back, a c10d or "
    "etcd rendezvous makes pod 0 resolve its own name to decide that it hosts the store (unresolved, no pod "
    "hosts it and the rendezvous times out), or kgen's entrypoint or a launcher lint cannot see waits for it. "
    "A static rendezvous (torchrun's default, env://) retries the name until the pods are Ready, a moment "
    "after their containers start.",
    "Set spec.publishNotReadyAddresses: true.",
    kinds=["Service"],
    scope="stream",
)
def rendezvous_not_ready(docs: list, ctx: Context) -> Iterator:
    for w in workloads(docs):
        if w.primary and w.facts.managed_not_ready is not None and _multi(w):
            path, message = w.facts.managed_not_ready
            yield w.doc, path, message
    for w, svc in _rendezvous_services(docs):
        if k8s.get(svc.data, "spec", "publishNotReadyAddresses") is not True:
            why = _names_before_ready(w)
            if why is None:
                continue
            shared = world(docs, w)
            names = svc.name if shared is not None and shared.service == svc.name else _pod_names(w, svc.name)
            yield (
                svc,
                ("spec",),
                f"set publishNotReadyAddresses: true so {names} resolves before the pods are Ready ({why})",
            )


_DYNAMIC = ("c10d", "etcd", "etcd-v2")


def _names_before_ready(w: Workload) -> str | None:
    """Why the pods of ``w`` need their DNS names before they are Ready, or None: without a probe a pod is
    Ready a moment after its containers start, and a static rendezvous retries the master's name until then."""
    held = readiness_held(w)
    if held is not None:
        return held
    for _c, _cpath, scripted, _why in w.containers:
        launches = [launch for launch in scripted.launches if launch.training]
        for launch in launches:
            backend = (launch.flag("rdzv_backend") or "").lower()
            if backend in _DYNAMIC:
                return f"a {backend} rendezvous: pod 0 resolves its own name to decide that it hosts the store"
            if launch.form == "kgen":
                return "kgen's entrypoint waits for pod 0's name"
        if launches or any(_runs_python(argv) for argv, _ in scripted.commands):
            continue  # a static rendezvous, or env:// in the program: both retry the master's name
        if scripted.no_command:
            return "the image's entrypoint launches the training, and may need the names at once"
        return "a launcher lint cannot read starts the training, and may need the names at once"
    return None


def _runs_python(argv: list[str]) -> bool:
    """``python train.py`` (through env, exec ...): a program that initialises from MASTER_ADDR (env://)."""
    words = [w.rsplit("/", 1)[-1] for w in argv if w and "=" not in w]
    return any(re.fullmatch(r"python[0-9.]*", w) for w in words[:3])


@rule(
    "KG103",
    E,
    "The Service a training workload's subdomain/serviceName names must select its pods: a selector that "
    "matches none of them gives them no DNS names, so <name>-0.<service> never resolves and the rendezvous waits.",
    "Select the pods by their instance label (e.g. app.kubernetes.io/instance: <name>) and use "
    "<name>-0.<service> as MASTER_ADDR.",
    kinds=["Service"],
    scope="stream",
)
def rendezvous_selector(docs: list, ctx: Context) -> Iterator:
    for kind, svc, path, message in _selector_problems(docs):
        if kind == "none":
            yield svc, path, message


@rule(
    "KG140",
    W,
    "The rendezvous Service's selector should match exactly the training pods: a 'role: master' label every "
    "pod carries, or a selector that also matches other workloads' pods, makes the Service resolve to any of "
    "them (harmless for <name>-0.<service> names, wrong wherever the Service's own name is used); a headless "
    "Service that selects none of the pods it shares labels with serves nothing.",
    "Select the pods by their instance label (e.g. app.kubernetes.io/instance: <name>) and use "
    "<name>-0.<service> as MASTER_ADDR.",
    kinds=["Service"],
    scope="stream",
)
def rendezvous_selector_broad(docs: list, ctx: Context) -> Iterator:
    for kind, svc, path, message in _selector_problems(docs):
        if kind != "none":
            yield svc, path, message


def _selector_problems(docs: list) -> list[tuple[str, Any, tuple, str]]:
    return _memo("selector_problems", docs, lambda ds: list(_selector_problems_of(ds)))


def _selector_problems_of(docs: list) -> Iterator[tuple[str, Any, tuple, str]]:
    by_label = workloads_by_label(docs)
    for w in _wired(docs):
        for svc in services_for(w, docs).values():
            sel = _selector(svc)
            if not sel:
                continue
            named, _ = w.dns_field
            scope = k8s.selector_scope(sel, w.doc)
            if scope in ("pod0", "some"):
                continue  # a Service for one pod (e.g. the master), pinned by a per-pod label
            if scope == "all":
                for k, v in sel.items():
                    if isinstance(v, str) and (v.lower() in _MASTERISH or k.lower() in _MASTERISH) and w.nodes != 1:
                        yield (
                            "master",
                            svc,
                            ("spec", "selector", k),
                            (
                                f"selector {k}={v} looks like it picks the master, but every pod of {w.doc.kind} "
                                f"{w.name!r} carries it (one pod template), so {svc.name!r} resolves to any pod; "
                                "select the "
                                f"job's pods and use {pod0_name(w, svc.name)} for MASTER_ADDR"
                            ),
                        )
                plain = [(k, v) for k, v in sel.items() if isinstance(v, str)]
                rarest = min(plain, key=lambda p: (len(by_label.get(p, ())), p)) if plain else None
                shared = world(docs, w)
                others = [
                    d
                    for d in (by_label.get(rarest, []) if rarest else [])
                    if d is not w.doc
                    and same_namespace(svc, d)
                    and k8s.selector_matches(sel, k8s.template_labels(d))
                    and (shared is None or id(d) not in shared.members)
                ]
                for other in others:
                    yield (
                        "others",
                        svc,
                        ("spec", "selector"),
                        (
                            f"selector also matches the pods of {other.kind} {other.name!r}; "
                            "add a label unique to the training pods"
                        ),
                    )
            elif named == svc.name:
                yield "none", svc, ("spec", "selector"), _selects_none(svc, w)
    for svc, path, message in _headless_selecting_nothing(docs):
        yield "unused", svc, path, message


def _pod_names(w: Workload, service: str) -> str:
    """How the pods of ``w`` are named under ``service``: <name>-N.<service>, or <hostname>.<service>."""
    host = pod0_label(w)
    return f"{host}.{service}" if host != f"{w.name}-0" else f"{w.name}-N.{service}"


def _selects_none(svc: Any, w: Workload) -> str:
    labels = k8s.template_labels(w.doc)
    missing = ", ".join(f"{k}={v}" for k, v in _selector(svc).items() if labels.get(k) != v)
    return f"selector selects none of the pods of {w.doc.kind} {w.name!r}: the pod template lacks {missing}"


def _headless_selecting_nothing(docs: list) -> Iterator:
    """A headless Service whose selector selects no pod template of the context, no workload names it,
    and which shares labels with a training workload's pods: reported once, against the workload it
    shares most labels with (e.g. a 'role: master' no pod carries)."""
    by_label = workloads_by_label(docs)
    wls = _wired(docs)
    named: dict[str, set[str]] = {}  # subdomain/serviceName -> namespaces of the workloads naming it
    for w in wls:
        if w.dns_field[0]:
            named.setdefault(w.dns_field[0], set()).add(w.doc.namespace)
    for svc in services(docs):
        sel = _selector(svc)
        pairs = _plain_pairs(svc)
        if not pairs or k8s.get(svc.data, "spec", "clusterIP") != "None":
            continue
        if any(not ns or not svc.namespace or ns == svc.namespace for ns in named.get(svc.name, ())):
            continue  # checked against the workload that names it
        rarest = min(pairs, key=lambda p: (len(by_label.get(p, ())), p))
        if any(same_namespace(svc, d) and k8s.selector_scope(sel, d) != "none" for d in by_label.get(rarest, ())):
            continue  # it serves some pods
        best, most = None, 0
        for w in wls:
            if same_namespace(svc, w.doc):
                labels = k8s.template_labels(w.doc)
                shared = sum(1 for k, v in pairs if labels.get(k) == v)
                if shared > most:
                    best, most = w, shared
        if best is not None:
            yield svc, ("spec", "selector"), _selects_none(svc, best)


@rule(
    "KG104",
    E,
    "A multi-node training Job's pods need spec.template.spec.subdomain naming the headless "
    "Service (a StatefulSet's serviceName likewise), or pod DNS names such as <job>-0.<service> do not exist "
    "(not reported for pods that read their own IP, a status.podIP fieldRef, where nothing names a master host: "
    "they find each other by IP).",
    "Set subdomain (Job) or serviceName (StatefulSet) to the rendezvous Service's name.",
    kinds=TRAINING_KINDS,
    scope="stream",
)
def dns_name_wiring(docs: list, ctx: Context) -> Iterator:
    for w in workloads(docs):
        if not w.primary or w.user_wired or not _multi(w):
            continue
        for path, message in w.facts.dns_problems:
            yield w.doc, path, message
        if w.facts.dns == "none":
            yield (
                w.doc,
                ("spec", "plugins") if "plugins" in (k8s.get(w.doc.data, "spec") or {}) else ("spec",),
                f"{w.kind} {w.name!r} runs {w.nodes} training pods but they get no DNS names: add the svc plugin "
                "(plugins: {svc: [], env: []}) or the pytorch plugin",
            )
    for w in _wired(docs):
        if not _multi(w):
            continue
        svcs = services_for(w, docs)
        named, path = w.dns_field
        if not named and _finds_peers_by_ip(w):
            continue  # no name asked for: the pods find each other by IP
        selecting = [
            s
            for s in svcs.values()
            if k8s.selector_scope(_selector(s), w.doc) == "all" and k8s.get(s.data, "spec", "clusterIP") == "None"
        ]
        field_name = "subdomain" if w.doc.kind == "Job" else "serviceName"
        if not named and _service_world(docs, w):
            continue  # the master's address is a Service that resolves to its one pod: no pod DNS names needed
        if not named:
            hint = f" (e.g. {selecting[0].name!r})" if selecting else ""
            yield (
                w.doc,
                path[:-1],
                f"{field_name} is not set, so the pods get no DNS names; "
                f"set {field_name} to the headless Service{hint}",
            )
        elif named in svcs and selecting and svcs[named] not in selecting:
            yield (
                w.doc,
                path,
                f"{field_name} {named!r} names a Service that does not select these pods; use {selecting[0].name!r}",
            )


@rule(
    "KG124",
    E,
    "The Service a training workload's subdomain/serviceName names must be in the workload's namespace: "
    "pod DNS names <name>-N.<service> exist only in the Service's own namespace.",
    "Put the Service and the Job/StatefulSet in the same namespace.",
    kinds=["Job", "StatefulSet"],
    scope="stream",
)
def rendezvous_service_namespace(docs: list, ctx: Context) -> Iterator:
    index = _service_index(docs)
    for w in _wired(docs):
        named, path = w.dns_field
        if not named or named in services_for(w, docs):
            continue
        elsewhere = sorted({s.namespace for s in index.by_name.get(named, ())})
        if elsewhere:
            yield (
                w.doc,
                path,
                f"Service {named!r} is in namespace {', '.join(elsewhere)}, but the pods run in "
                f"{w.doc.namespace!r}; pod DNS names exist only in the Service's namespace",
            )
