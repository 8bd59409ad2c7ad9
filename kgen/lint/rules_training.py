"""Distributed-training rules, across all documents of one lint run (every file, folder and stdin
given together are one context; Services pair with workloads of the same namespace).

A *training workload* is a Job or StatefulSet whose containers launch torchrun (see torchcmd.py).
Its *rendezvous Service* is the Service named by the Job's ``subdomain`` / StatefulSet's
``serviceName``, or else a Service in the stream whose selector matches the pod template.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import partial
from typing import Any

from kgen.findings import Severity
from kgen.lint import k8s
from kgen.lint.registry import Context, rule
from kgen.lint.torchcmd import _SHELLS, Launch, find_launches, host_of, resolve

E, W = Severity.ERROR, Severity.WARNING
_MASTERISH = {"master", "leader", "head", "chief", "rank0", "rank-0", "main", "driver", "coordinator"}
_HAND_SET = ("RANK", "LOCAL_RANK", "WORLD_SIZE")
_ENV_REF = re.compile(r"\$\((\w+)\)")


class Workload:
    """A Job or StatefulSet whose containers launch torchrun, as the training rules see it."""

    __slots__ = ("doc", "spec", "base", "nodes", "launches")

    def __init__(self, doc: Any, spec: dict, base: tuple, nodes: int | None) -> None:
        self.doc = doc
        self.spec = spec  # pod spec
        self.base = base  # path of the pod spec
        self.nodes = nodes
        self.launches: list[tuple[dict, tuple, list[Launch]]] = []  # (container, path, launches)

    @property
    def name(self) -> str:
        return self.doc.name

    @property
    def dns_field(self) -> tuple[str | None, tuple]:
        if self.doc.kind == "Job":
            v = self.spec.get("subdomain")
            return (v if isinstance(v, str) and v else None), self.base + ("subdomain",)
        v = k8s.get(self.doc.data, "spec", "serviceName")
        return (v if isinstance(v, str) and v else None), ("spec", "serviceName")


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _literal_env(container: dict) -> dict[str, Any]:
    env: dict[str, Any] = {}
    for e in k8s.env_list(container):
        if isinstance(e, dict) and isinstance(e.get("name"), str):
            env[e["name"]] = e.get("value") if "value" in e else None
    return env


_MEMO: dict[str, tuple[list, Any]] = {}


def _memo(key: str, docs: list, build: Any) -> Any:
    """One result per stream: every stream rule gets the same ``docs`` list object."""
    got = _MEMO.get(key)
    if got is not None and got[0] is docs:
        return got[1]
    value = build(docs)
    _MEMO[key] = (docs, value)
    return value


def workloads(docs: list) -> list[Workload]:
    return _memo("workloads", docs, _workloads)


def _workloads(docs: list) -> list[Workload]:
    out = []
    for doc in docs:
        if doc.kind not in ("Job", "StatefulSet"):
            continue
        ps = k8s.pod_spec(doc)
        if not ps:
            continue
        spec = k8s.get(doc.data, "spec") or {}
        if doc.kind == "Job":
            nodes = _int(spec.get("completions"))
            if nodes is None:
                nodes = _int(spec.get("parallelism"))
        else:
            nodes = _int(spec.get("replicas"))
            if nodes is None and "replicas" not in spec:
                nodes = 1
        w = Workload(doc, ps[0], ps[1], nodes)
        for c, path in k8s.containers(ps[0], ps[1], init=False):
            launches = find_launches(c)
            if launches:
                w.launches.append((c, path, launches))
        if w.launches:
            out.append(w)
    return out


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

    __slots__ = ("by_name", "by_pair", "special", "for_workload")

    def __init__(self, docs: list) -> None:
        self.by_name: dict[str, list] = {}
        self.by_pair: dict[tuple, list] = {}
        self.special: list = []
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
                self.special.append(svc)

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


def _in_ns(w: Workload) -> str:
    return f" (namespace {w.doc.namespace})" if w.doc.namespace else ""


def _multi(w: Workload) -> bool:
    if w.nodes is not None and w.nodes > 1:
        return True
    for c, _, launches in w.launches:
        env = _literal_env(c)
        for launch in launches:
            if any(top > 1 for _, top, _ in _nnodes_values(launch, env)):
                return True
    return False


# Variables that state the node count / processes per node wherever a manifest writes them down
# (torchrun itself reads PET_NNODES / PET_NPROC_PER_NODE when the flag is absent).
NNODES_VARS = ("NNODES", "NUM_NODES", "N_NODES", "NODE_COUNT", "PET_NNODES")
NPROC_VARS = ("NPROC_PER_NODE", "GPUS_PER_NODE", "NUM_GPUS_PER_NODE", "PET_NPROC_PER_NODE")


def _nnodes_values(launch: Launch, env: dict) -> list[tuple[int, int, str]]:
    """(min, max nodes, where) stated by a launch: --nnodes (N or MIN:MAX) and the container's
    literal NNODES-like variables (``where`` is "--nnodes=..." or "VAR=...")."""
    out = []
    raw = resolve(launch.flag("nnodes"), env) if launch.has("nnodes") else None
    if raw:
        parts = raw.split(":")
        if len(parts) <= 2 and all(p.isdigit() for p in parts):
            out.append((int(parts[0]), int(parts[-1]), f"--nnodes={raw}"))
    for var in NNODES_VARS:
        nn = env.get(var)
        if isinstance(nn, str) and nn.isdigit():
            out.append((int(nn), int(nn), f"{var}={nn}"))
    return out


def _nproc_values(launch: Launch, env: dict) -> list[tuple[int, str]]:
    out = []
    raw = resolve(launch.flag("nproc_per_node"), env) if launch.has("nproc_per_node") else None
    if raw and raw.isdigit():
        out.append((int(raw), f"--nproc-per-node={raw}"))
    for var in NPROC_VARS:
        nn = env.get(var)
        if isinstance(nn, str) and nn.isdigit():
            out.append((int(nn), f"{var}={nn}"))
    return out


def _where_path(cpath: tuple, c: dict, launch: Launch, flag: str, where: str) -> tuple:
    """Path of a value named by ``where`` ("--flag=..." or "VAR=...")."""
    if where.startswith("--"):
        return _launch_path(cpath, launch, flag)
    return _env_path(cpath, c, where.split("=", 1)[0])


def _env_path(container_path: tuple, container: dict, name: str) -> tuple:
    found = k8s.env_value(container, name)
    return container_path + ("env", found[0], "value") if found else container_path


def _launch_path(container_path: tuple, launch: Launch | dict | None = None, flag: str | None = None) -> tuple:
    """Where a finding about a launch (or one of its flags) points: the command/args item that holds
    it (a flag in ``args:`` is located in args, not at ``command:``). Callers that pass the container
    instead of a launch (``_launch_path(cpath, c)``) get its first launch's first flag."""
    if isinstance(launch, dict):
        found = find_launches(launch)
        if not found:
            return container_path
        launch = found[0]
        if flag is None and launch.flag_where:
            return container_path + next(iter(launch.flag_where.values()))
    return container_path + launch.at(flag) if launch is not None and launch.at(flag) else container_path


# --- Service wiring ---------------------------------------------------------------------------


@rule(
    "KG100",
    W,
    "A multi-node training Job/StatefulSet has no Service among the linted files (same namespace) that its "
    "pods' DNS names come from (subdomain/serviceName names none, or none selects its pods).",
    "Add a headless Service (clusterIP: None) selecting the pods, named like the subdomain/serviceName.",
    kinds=["Job", "StatefulSet"],
    scope="stream",
    needs_all_inputs=True,
)
def rendezvous_service_missing(docs: list, ctx: Context) -> Iterator:
    for w in workloads(docs):
        if not _multi(w):
            continue
        svcs = services_for(w, docs)
        named, path = w.dns_field
        if named and named not in svcs:
            if _service_index(docs).by_name.get(named):
                continue  # it exists in another namespace: KG124
            yield (
                w.doc,
                path,
                f"names Service {named!r}, which is not among the linted files{_in_ns(w)}; "
                "add it (headless, selecting the pods)",
            )
        elif not named and rendezvous_service(w, svcs) is None:
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
    done = set()
    for w in workloads(docs):
        svc = rendezvous_service(w, services_for(w, docs))
        if svc is not None and id(svc) not in done and k8s.get(svc.data, "spec", "clusterIP") != "None":
            done.add(id(svc))
            yield (
                svc,
                ("spec",),
                f"Service {svc.name!r} is the rendezvous Service of {w.doc.kind} {w.name!r}; "
                "make it headless: clusterIP: None",
            )


@rule(
    "KG102",
    W,
    "The rendezvous Service should publish not-ready addresses, so pod DNS names resolve before "
    "the pods are Ready (training pods have no readiness to report).",
    "Set spec.publishNotReadyAddresses: true.",
    kinds=["Service"],
    scope="stream",
)
def rendezvous_not_ready(docs: list, ctx: Context) -> Iterator:
    done = set()
    for w in workloads(docs):
        svc = rendezvous_service(w, services_for(w, docs))
        if (
            svc is not None
            and id(svc) not in done
            and k8s.get(svc.data, "spec", "publishNotReadyAddresses") is not True
        ):
            done.add(id(svc))
            yield (
                svc,
                ("spec",),
                (f"set publishNotReadyAddresses: true so {w.name}-N.{svc.name} resolves before the pods are Ready"),
            )


@rule(
    "KG103",
    E,
    "The rendezvous Service's selector must match exactly the training pods: all of them (not "
    "none, not a 'role: master' label every pod carries) and no pods of other workloads.",
    "Select the pods by their instance label (e.g. app.kubernetes.io/instance: <name>) and use "
    "<name>-0.<service> as MASTER_ADDR.",
    kinds=["Service"],
    scope="stream",
)
def rendezvous_selector(docs: list, ctx: Context) -> Iterator:
    by_label = workloads_by_label(docs)
    for w in workloads(docs):
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
                            svc,
                            ("spec", "selector", k),
                            (
                                f"selector {k}={v} looks like it picks the master, but every pod of {w.doc.kind} "
                                f"{w.name!r} carries it (one pod template), so {svc.name!r} resolves to any pod; "
                                "select the "
                                f"job's pods and use {w.name}-0.{svc.name} for MASTER_ADDR"
                            ),
                        )
                plain = [(k, v) for k, v in sel.items() if isinstance(v, str)]
                others = [
                    d
                    for d in (by_label.get(plain[0], []) if plain else [])
                    if d is not w.doc and same_namespace(svc, d) and k8s.selector_matches(sel, k8s.template_labels(d))
                ]
                for other in others:
                    yield (
                        svc,
                        ("spec", "selector"),
                        (
                            f"selector also matches the pods of {other.kind} {other.name!r}; "
                            "add a label unique to the training pods"
                        ),
                    )
            elif named == svc.name:
                yield svc, ("spec", "selector"), _selects_none(svc, w)
    yield from _headless_selecting_nothing(docs)


def _selects_none(svc: Any, w: Workload) -> str:
    labels = k8s.template_labels(w.doc)
    missing = ", ".join(f"{k}={v}" for k, v in _selector(svc).items() if labels.get(k) != v)
    return f"selector selects none of the pods of {w.doc.kind} {w.name!r}: the pod template lacks {missing}"


def _headless_selecting_nothing(docs: list) -> Iterator:
    """A headless Service whose selector selects no pod template of the context, no workload names it,
    and which shares labels with a training workload's pods: reported once, against the workload it
    shares most labels with (e.g. a 'role: master' no pod carries)."""
    by_label = workloads_by_label(docs)
    wls = workloads(docs)
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
    "Service (a StatefulSet's serviceName likewise), or pod DNS names such as <job>-0.<service> do not exist.",
    "Set subdomain (Job) or serviceName (StatefulSet) to the rendezvous Service's name.",
    kinds=["Job", "StatefulSet"],
    scope="stream",
)
def dns_name_wiring(docs: list, ctx: Context) -> Iterator:
    for w in workloads(docs):
        if not _multi(w):
            continue
        svcs = services_for(w, docs)
        named, path = w.dns_field
        selecting = [
            s
            for s in svcs.values()
            if k8s.selector_scope(_selector(s), w.doc) == "all" and k8s.get(s.data, "spec", "clusterIP") == "None"
        ]
        field_name = "subdomain" if w.doc.kind == "Job" else "serviceName"
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


_POD0 = re.compile(r"^(?P<pod>[a-z0-9-]+)-0\.(?P<svc>[a-z0-9-]+)(\..*)?$")


@rule(
    "KG105",
    E,
    "MASTER_ADDR (and --master-addr / --rdzv-endpoint) must name pod 0 of this workload "
    "(<name>-0.<service>[.<namespace>.svc...], in the workload's namespace), not the Service, which "
    "resolves to any pod (a Service "
    "pinned to pod 0 by batch.kubernetes.io/job-completion-index or statefulset.kubernetes.io/pod-name is fine).",
    "Set MASTER_ADDR to <name>-0.<service>.",
    kinds=["Job", "StatefulSet"],
    scope="stream",
)
def master_addr(docs: list, ctx: Context) -> Iterator:
    index = _service_index(docs)
    for w in workloads(docs):
        if not _multi(w):
            continue
        svcs = services_for(w, docs)
        svc = rendezvous_service(w, svcs)
        named, _ = w.dns_field
        svc_name = svc.name if svc is not None else named
        for c, cpath, launches in w.launches:
            env = _literal_env(c)
            checks: list[tuple[str, str, tuple]] = []
            ma = env.get("MASTER_ADDR")
            if isinstance(ma, str):
                checks.append(("MASTER_ADDR", ma, _env_path(cpath, c, "MASTER_ADDR")))
            for launch in launches:
                for key in ("master_addr", "rdzv_endpoint"):
                    raw = launch.flag(key)
                    if raw and not raw.startswith("$"):
                        checks.append((f"--{key.replace('_', '-')}", host_of(raw), _launch_path(cpath, launch, key)))
            yield from _self_master(w, c, cpath, launches, svc_name)
            for what, value, path in checks:
                if "$" in value or not value:
                    continue
                pod0 = {n for n, s in svcs.items() if k8s.selector_scope(_selector(s), w.doc) == "pod0"}
                msg = _master_problem(value, w.name, svc_name, partial(index.named, w=w), pod0, w.doc.namespace)
                if msg:
                    yield w.doc, path, f"{what}={value} {msg}"


_SELF_FIELDS = {"status.podIP", "status.podIPs", "metadata.name", "spec.nodeName", "status.hostIP", "status.hostIPs"}
_VAR_REF = re.compile(r"^\$(?:\{(\w+)\}|\((\w+)\)|(\w+))")


def _self_master(w: Workload, c: dict, cpath: tuple, launches: list, svc: str | None) -> Iterator:
    """MASTER_ADDR / --master-addr / --rdzv-endpoint taken from the pod's own address (fieldRef
    status.podIP, metadata.name, $HOSTNAME, $(hostname)): every pod is its own master."""
    want = f"{w.name}-0.{svc}" if svc else f"{w.name}-0.<headless service>"
    own: dict[str, str] = {"HOSTNAME": "the pod's hostname"}
    for i, e in enumerate(k8s.env_list(c)):
        if not isinstance(e, dict) or not isinstance(e.get("name"), str):
            continue
        ref = k8s.get(e, "valueFrom", "fieldRef", "fieldPath")
        value = e.get("value")
        if ref in _SELF_FIELDS:
            own[e["name"]] = f"fieldRef {ref}"
        elif isinstance(value, str) and _VAR_REF.match(value) and _var_name(value) in own:
            own[e["name"]] = own[_var_name(value)]
        if e["name"] == "MASTER_ADDR" and e["name"] in own:
            yield (
                w.doc,
                cpath + ("env", i),
                f"MASTER_ADDR from {own['MASTER_ADDR']} is each pod's own address, so every pod starts a world "
                f"of its own; use pod 0's name {want}",
            )
    for launch in launches:
        for key in ("master_addr", "rdzv_endpoint"):
            raw = launch.flag(key)
            if not raw:
                continue
            name = _var_name(raw) if _VAR_REF.match(raw) else None
            source = own.get(name) if name and name != "MASTER_ADDR" else None
            if source is None and ("$(hostname" in raw or "`hostname" in raw):
                source = "the pod's hostname"
            if source:
                yield (
                    w.doc,
                    _launch_path(cpath, launch, key),
                    f"--{key.replace('_', '-')}={raw} is {source}, each pod's own address, so every pod starts "
                    f"a world of its own; use pod 0's name {want}",
                )


def _var_name(text: str) -> str:
    m = _VAR_REF.match(text)
    return (m.group(1) or m.group(2) or m.group(3)) if m else ""


def _master_problem(
    value: str, name: str, svc: str | None, is_service: Any, pod0: set, namespace: str = ""
) -> str | None:
    want = f"{name}-0.{svc}" if svc else f"{name}-0.<headless service>"
    host = value.lower().rstrip(".")
    first = host.split(".")[0]
    if first in pod0:
        return None  # a Service that selects only pod 0 (per-pod label) is a stable master address
    if first == svc or is_service(first):
        return f"names the Service, which resolves to any pod; use pod 0's name {want}"
    m = _POD0.match(host)
    if m and m.group("pod") == name and (svc is None or m.group("svc") == svc):
        parts = host.split(".")
        if len(parts) >= 3 and namespace and parts[2] != namespace:
            return f"names namespace {parts[2]!r}, but the pods run in {namespace!r}; use {want}.{namespace}.svc"
        if len(parts) >= 4 and parts[3] != "svc":
            return f"is not a cluster DNS name (<pod>.<service>.<namespace>.svc.<domain>); use {want}"
        return None
    if host in ("localhost", "127.0.0.1", "::1"):
        return f"is the pod itself, so every node starts its own world; use {want}"
    return f"is not pod 0 of {name!r}; use {want}"


# --- world size arithmetic ----------------------------------------------------------------------


@rule(
    "KG106",
    E,
    "The node count, wherever it is written (--nnodes, NNODES, NUM_NODES, PET_NNODES ...), must equal the "
    "number of pods: Job completions (= parallelism) or StatefulSet replicas.",
    "Make them equal (kgen render derives both from --nodes).",
    kinds=["Job", "StatefulSet"],
    scope="stream",
)
def nnodes_agree(docs: list, ctx: Context) -> Iterator:
    for w in workloads(docs):
        if w.nodes is None:
            continue
        what = "completions" if w.doc.kind == "Job" else "replicas"
        for c, cpath, launches in w.launches:
            env = _literal_env(c)
            for launch in launches:
                for low, high, where in _nnodes_values(launch, env):
                    if not low <= w.nodes <= high:
                        path = _where_path(cpath, c, launch, "nnodes", where)
                        why = (
                            "every pod trains alone as a world of its own"
                            if high == 1 and where.startswith("--")
                            else "the world never completes"
                        )
                        yield w.doc, path, f"{where} but {what} is {w.nodes}; {why}. Make them equal"


@rule(
    "KG107",
    E,
    "Processes per node, wherever written (--nproc-per-node, NPROC_PER_NODE, GPUS_PER_NODE ...), must equal "
    "the GPUs per pod (nvidia.com/gpu limit) for GPU pods.",
    "Set it to the GPU limit, or to 'gpu'.",
    kinds=["Job", "StatefulSet"],
    scope="stream",
)
def nproc_agree(docs: list, ctx: Context) -> Iterator:
    for w in workloads(docs):
        for c, cpath, launches in w.launches:
            gpus = k8s.gpu_limit(c)
            if not gpus:
                continue
            env = _literal_env(c)
            for launch in launches:
                for value, where in _nproc_values(launch, env):
                    if value != gpus:
                        path = _where_path(cpath, c, launch, "nproc_per_node", where)
                        yield w.doc, path, f"{where} but the container has {gpus} GPUs; use {gpus}"


@rule(
    "KG108",
    E,
    "A literal WORLD_SIZE must equal nodes x processes per node.",
    "Delete WORLD_SIZE (torchrun sets it) or fix it.",
    kinds=["Job", "StatefulSet"],
    scope="stream",
)
def world_size_agree(docs: list, ctx: Context) -> Iterator:
    for w in workloads(docs):
        if w.nodes is None:
            continue
        for c, cpath, launches in w.launches:
            env = _literal_env(c)
            ws = env.get("WORLD_SIZE")
            if not (isinstance(ws, str) and ws.isdigit()):
                continue
            nprocs = [v for launch in launches for v, _ in _nproc_values(launch, env)] or (
                [k8s.gpu_limit(c)] if k8s.gpu_limit(c) else []
            )
            if nprocs and int(ws) != w.nodes * nprocs[0]:
                yield (
                    w.doc,
                    _env_path(cpath, c, "WORLD_SIZE"),
                    f"WORLD_SIZE={ws} but {w.nodes} nodes x {nprocs[0]} processes = {w.nodes * nprocs[0]}",
                )


@rule(
    "KG109",
    W,
    "RANK, LOCAL_RANK and WORLD_SIZE are set by torchrun for every worker; hand-set values next "
    "to torchrun are ignored and mislead.",
    "Delete them; use NODE_RANK / --node-rank for the node.",
    kinds=["Job", "StatefulSet"],
    scope="stream",
)
def hand_set_ranks(docs: list, ctx: Context) -> Iterator:
    for w in workloads(docs):
        for c, cpath, launches in w.launches:
            if all(launch.form == "kgen" for launch in launches):
                continue
            env = {e.get("name"): i for i, e in enumerate(k8s.env_list(c)) if isinstance(e, dict)}
            for var in _HAND_SET:
                if var in env:
                    yield (
                        w.doc,
                        cpath + ("env", env[var], "name"),
                        f"{var} is set by hand but torchrun sets it per worker; delete it",
                    )
            exported = {v for launch in launches for v in launch.exports}
            for var in _HAND_SET:
                if var in exported:
                    yield (
                        w.doc,
                        _launch_path(cpath, launches[0]),
                        f"the script exports {var}, which torchrun overrides per worker; delete it",
                    )


# --- pod shape ----------------------------------------------------------------------------------


@rule(
    "KG110",
    E,
    "GPU training pods need a memory-backed /dev/shm (emptyDir medium: Memory, a hostPath /dev/shm, or "
    "hostIPC: true); the default 64 MiB makes NCCL and DataLoader workers crash.",
    "Mount an emptyDir {medium: Memory, sizeLimit: ...} at /dev/shm.",
    kinds=["Job", "StatefulSet"],
    scope="stream",
)
def dev_shm(docs: list, ctx: Context) -> Iterator:
    for w in workloads(docs):
        for cpath in shm_gaps(w.spec, w.launches):
            yield (
                w.doc,
                cpath,
                "GPU container has no memory-backed /dev/shm; mount an emptyDir with medium: Memory at /dev/shm",
            )


def shm_gaps(pod_spec: dict, launches: list) -> Iterator[tuple]:
    """The paths of GPU containers without a memory-backed /dev/shm (KG110, and KG156 for a JobSet's pods):
    an emptyDir with medium Memory or a hostPath /dev/shm mounted there, or the pod in the host's IPC
    namespace (hostIPC: true, and with it the host's /dev/shm)."""
    if pod_spec.get("hostIPC") is True:
        return
    mem_vols = {
        v.get("name")
        for v in pod_spec.get("volumes") or []
        if isinstance(v, dict)
        and (k8s.get(v, "emptyDir", "medium") == "Memory" or _is_dev_shm(k8s.get(v, "hostPath", "path")))
    }
    for c, cpath, _ in launches:
        if not k8s.gpu_limit(c):
            continue
        mounts = [
            m
            for m in c.get("volumeMounts") or []
            if isinstance(m, dict) and str(m.get("mountPath", "")).rstrip("/") == "/dev/shm"
        ]
        if not any(m.get("name") in mem_vols for m in mounts):
            yield cpath


@rule(
    "KG111",
    W,
    "A fixed or random `sleep` before torchrun staggers start-up: it wastes time on every start and "
    "grows with the node count, and it does not make the master ready.",
    "Delete the sleep; torchrun's rendezvous (or kgen's entrypoint) waits actively with a timeout.",
    kinds=["Job", "StatefulSet"],
    scope="stream",
)
def sleep_stagger(docs: list, ctx: Context) -> Iterator:
    for w in workloads(docs):
        for _c, cpath, launches in w.launches:
            sleeps = {s for launch in launches for s in launch.sleeps}
            for s in sorted(sleeps):
                yield (
                    w.doc,
                    _launch_path(cpath, launches[0]),
                    f"`{s}` staggers start-up; delete it (rendezvous waits actively)",
                )


@rule(
    "KG112",
    E,
    "Do not mix c10d rendezvous flags (--rdzv-backend=c10d, --rdzv-endpoint) with static ones "
    "(--master-addr, --master-port, --node-rank): torchrun ignores one set and ranks are not what you expect.",
    "Use either c10d (rdzv flags, no node rank) or static (master addr/port + node rank).",
    kinds=["Job", "StatefulSet"],
    scope="stream",
)
def mixed_rendezvous(docs: list, ctx: Context) -> Iterator:
    for w in workloads(docs):
        for _c, cpath, launches in w.launches:
            for launch in launches:
                backend = (launch.flag("rdzv_backend") or "").lower()
                dynamic = backend in ("c10d", "etcd", "etcd-v2") or (
                    launch.has("rdzv_endpoint") and backend != "static"
                )
                static_keys = [k for k in ("master_addr", "master_port", "node_rank") if launch.has(k)]
                static = [f"--{k.replace('_', '-')}" for k in static_keys]
                if dynamic and static:
                    yield (
                        w.doc,
                        _launch_path(cpath, launch, static_keys[0]),
                        (
                            f"c10d rendezvous mixed with static flags {', '.join(static)}; "
                            "drop the static ones (or the rdzv ones)"
                        ),
                    )


@rule(
    "KG113",
    W,
    "A training StatefulSet should use podManagementPolicy: Parallel; OrderedReady starts pod N+1 "
    "only when pod N is Ready, which delays or deadlocks the rendezvous.",
    "Set podManagementPolicy: Parallel.",
    kinds=["StatefulSet"],
    scope="stream",
)
def statefulset_parallel(docs: list, ctx: Context) -> Iterator:
    for w in workloads(docs):
        if (
            w.doc.kind == "StatefulSet"
            and _multi(w)
            and k8s.get(w.doc.data, "spec", "podManagementPolicy") != "Parallel"
        ):
            yield w.doc, ("spec",), "podManagementPolicy is OrderedReady (default); set podManagementPolicy: Parallel"


@rule(
    "KG114",
    E,
    "$(VAR) expands only variables the container defines: in an env value those earlier in the same env "
    "list (or from envFrom), in command/args any of its env; $(JOB_COMPLETION_INDEX) is added by the Job "
    "controller after yours, so an env value never sees it. Anything else stays literal.",
    "Define the variable in env (before its use), read it in the shell ($VAR), or use a fieldRef.",
)
def env_refs(doc: Any, ctx: Context) -> Iterator:
    ps = k8s.pod_spec(doc)
    if not ps:
        return
    indexed_job = doc.kind == "Job" and k8s.get(doc.data, "spec", "completionMode") == "Indexed"
    for c, cpath in k8s.containers(*ps):
        from_env = bool(c.get("envFrom"))  # unknown names: a ConfigMap or Secret may define anything
        defined: set = set()
        for i, e in enumerate(k8s.env_list(c)):
            if not isinstance(e, dict):
                continue
            value = e.get("value")
            for var in _refs(value):
                if var == "JOB_COMPLETION_INDEX":
                    yield (
                        cpath + ("env", i, "value"),
                        (f"$({var}) stays literal: the Job controller adds it after your variables"),
                    )
                elif var not in defined and not from_env:
                    yield (
                        cpath + ("env", i, "value"),
                        f"$({var}) stays literal: it is not defined earlier in this env list",
                    )
            if isinstance(e.get("name"), str):
                defined.add(e["name"])
        if from_env or _is_shell_script(c):
            continue  # a shell reads $(cmd) as command substitution: not ours to judge
        if indexed_job:
            defined.add("JOB_COMPLETION_INDEX")
        for key in ("command", "args"):
            items = c.get(key)
            for j, item in enumerate(items if isinstance(items, list) else []):
                for var in _refs(item):
                    if var not in defined:
                        yield (
                            cpath + (key, j),
                            (
                                f"$({var}) stays literal: the container defines no env var {var}, so the program "
                                f"receives the text $({var})"
                            ),
                        )


def _refs(value: Any) -> list[str]:
    """Variables referenced as $(VAR) in ``value`` ($$(VAR) is an escape)."""
    if not isinstance(value, str) or "$(" not in value:
        return []
    return [m.group(1) for m in _ENV_REF.finditer(value) if not (m.start() > 0 and value[m.start() - 1] == "$")]


def _is_shell_script(c: dict) -> bool:
    command, args = c.get("command"), c.get("args")
    argv = (command if isinstance(command, list) else []) + (args if isinstance(args, list) else [])
    return bool(argv) and isinstance(argv[0], str) and argv[0].rsplit("/", 1)[-1] in _SHELLS


@rule(
    "KG115",
    E,
    "A multi-node training Job must be Indexed (completionMode: Indexed): only then do pods get "
    "a completion index and stable hostnames <job>-<index>.",
    "Set completionMode: Indexed.",
    kinds=["Job"],
    scope="stream",
)
def training_job_indexed(docs: list, ctx: Context) -> Iterator:
    for w in workloads(docs):
        if w.doc.kind == "Job" and _multi(w) and k8s.get(w.doc.data, "spec", "completionMode") != "Indexed":
            yield w.doc, ("spec",), "multi-node training needs completionMode: Indexed (stable hostnames, node ranks)"


@rule(
    "KG116",
    E,
    "A training Job's parallelism must equal completions: every node must run at the same time.",
    "Set parallelism = completions = nodes.",
    kinds=["Job"],
    scope="stream",
)
def training_job_gang(docs: list, ctx: Context) -> Iterator:
    for w in workloads(docs):
        spec = k8s.get(w.doc.data, "spec") or {}
        par, comp = _int(spec.get("parallelism")), _int(spec.get("completions"))
        if w.doc.kind == "Job" and _multi(w) and comp is not None and (par if par is not None else 1) != comp:
            yield (
                w.doc,
                ("spec", "parallelism"),
                f"parallelism {par if par is not None else '1 (default)'} != completions {comp}; the world never forms",
            )


def _is_dev_shm(path: Any) -> bool:
    return isinstance(path, str) and (path.rstrip("/") == "/dev/shm" or path.startswith("/dev/shm/"))


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
    for w in workloads(docs):
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
