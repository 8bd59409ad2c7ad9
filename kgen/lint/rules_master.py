"""The master address of training workloads (MASTER_ADDR, --master-addr, --rdzv-endpoint): it must name pod 0
of this workload, in its namespace, by a name that resolves (KG105), and a name pinned to a namespace the
workload does not set goes wrong wherever it is applied elsewhere (KG212). Read from the workload model's facts
and the Services of the run, paired with workloads by ``kgen.lint.rules_wiring``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import partial
from typing import Any

from kgen import k8s
from kgen.findings import Severity
from kgen.launch.argv import host_of
from kgen.lint import kinds
from kgen.lint.model import TRAINING_KINDS, Workload, pod0_label, pod0_name, replaced_hostname, workloads, world
from kgen.lint.model import memo as _memo
from kgen.lint.registry import Context, rule
from kgen.lint.rules_training import _env_path, _launch_path, _multi
from kgen.lint.rules_wiring import _selector, _service_index, _wired, rendezvous_service, same_namespace, services_for

E, W = Severity.ERROR, Severity.WARNING


@rule(
    "KG105",
    E,
    "MASTER_ADDR (and --master-addr / --rdzv-endpoint) must name pod 0 of this workload "
    "(<name>-0.<service>[.<namespace>.svc...], in the workload's namespace), not the Service, which "
    "resolves to any pod (a Service "
    "pinned to pod 0 by batch.kubernetes.io/job-completion-index or statefulset.kubernetes.io/pod-name, or by the "
    "index labels of the kind's controller -- PyTorchJob's replica-type + replica-index, JobSet's, "
    "LeaderWorkerSet's, Volcano's -- is fine).",
    "Set MASTER_ADDR to <name>-0.<service>.",
    kinds=TRAINING_KINDS,
    scope="stream",
)
def master_addr(docs: list, ctx: Context) -> Iterator:
    yield from _managed_master(docs)
    index = _service_index(docs)
    for w in _wired(docs):
        if not _multi(w):
            continue
        svcs = services_for(w, docs)
        svc = rendezvous_service(w, svcs)
        named, _ = w.dns_field
        svc_name = svc.name if svc is not None else named
        for c, cpath, scripted, _why in w.containers:
            launches = [launch for launch in scripted.launches if launch.training]
            env = w.env(c)
            checks: list[tuple[str, str, tuple]] = []
            ma = env.get("MASTER_ADDR")
            if isinstance(ma, str):
                checks.append(("MASTER_ADDR", ma, _env_path(cpath, c, "MASTER_ADDR")))
            for launch in launches:
                for key, raw in launch.master_flags():
                    if not raw.startswith("$"):
                        checks.append((launch.spelling(key), host_of(raw), _launch_path(cpath, launch, key)))
            yield from _self_master(w, c, cpath, launches, svc_name)
            yield from _master_from_dns(w, cpath, scripted, launches, svc_name, partial(index.named, w=w))
            shared = world(docs, w)
            leader = shared.leader_host if shared is not None else None
            for what, value, path in checks:
                if "$" in value or not value:
                    continue
                labels = value.lower().rstrip(".").split(".")
                if leader and labels[0] == leader and labels[1:2] == [named]:
                    continue  # pod 0 of the workload that leads the world this one is part of
                if shared is not None and shared.service and labels[0] == shared.service:
                    continue  # a headless Service that selects the leader's one pod: it resolves to that pod
                meant = _replaced(docs).get((w.doc.namespace, labels[0]))
                if meant is not None and labels[1:2] == [named]:
                    yield (
                        w.doc,
                        path,
                        f"{what}={value} names {labels[0]}, the spec.hostname of Indexed Job {meant.name!r}, which "
                        f"its controller replaces with {meant.name}-<index>: {labels[0]}.{named} never resolves; use "
                        f"{pod0_name(meant, named)} (or drop completionMode: Indexed)",
                    )
                    continue
                pod0 = {n for n, s in svcs.items() if k8s.selector_scope(_selector(s), w.doc) == "pod0"}
                msg = _master_problem(value, w, svc_name, partial(index.named, w=w), pod0)
                if msg:
                    yield w.doc, path, f"{what}={value} {msg}"


def _master_values(w: Workload, c: dict, cpath: tuple, scripted: Any) -> Iterator[tuple[str, str, tuple]]:
    """(what, literal host, path) of the master addresses a training container writes: MASTER_ADDR and its
    launchers' --master-addr / --rdzv-endpoint."""
    ma = w.env(c).get("MASTER_ADDR")
    if isinstance(ma, str) and ma and "$" not in ma:
        yield "MASTER_ADDR", ma, _env_path(cpath, c, "MASTER_ADDR")
    for launch in scripted.launches:
        if launch.training:
            for key, raw in launch.master_flags():
                host = host_of(raw)
                if host and "$" not in raw:
                    yield launch.spelling(key), host, _launch_path(cpath, launch, key)


@rule(
    "KG212",
    W,
    "A training workload without metadata.namespace whose master address names a namespace "
    "(<name>-0.<service>.<namespace>.svc...): the workload lands in whatever namespace it is applied to "
    "(kubectl's context, -n), and in any other than the one written the name resolves to nothing and the "
    "rendezvous waits.",
    "Drop the namespace from the name (<name>-0.<service> resolves in the pods' own namespace), or set "
    "metadata.namespace on the workload to the one the name says.",
    kinds=TRAINING_KINDS,
    scope="stream",
)
def master_namespace_pinned(docs: list, ctx: Context) -> Iterator:
    for w in _wired(docs):
        if w.doc.namespace or not _multi(w):
            continue
        named, _ = w.dns_field
        own = pod0_label(w)
        for c, cpath, scripted, _why in w.containers:
            for what, value, path in _master_values(w, c, cpath, scripted):
                parts = value.lower().rstrip(".").split(".")
                if len(parts) >= 4 and parts[0] == own and parts[1] == named and parts[3] == "svc":
                    yield (
                        w.doc,
                        path,
                        f"{what}={value} names namespace {parts[2]!r}, but the workload sets no namespace: applied "
                        f"anywhere else the name resolves to nothing; use {parts[0]}.{parts[1]}",
                    )


def _replaced(docs: list) -> dict[tuple[str, str], Workload]:
    """Indexed Jobs by (namespace, the spec.hostname their controller replaces)."""

    def build(ds: list) -> dict:
        out: dict[tuple[str, str], Workload] = {}
        for w in _wired(ds):
            host = replaced_hostname(w)
            if host:
                out.setdefault((w.doc.namespace, host), w)
        return out

    return _memo("replaced_hostnames", docs, build)


def _managed_master(docs: list) -> Iterator:
    """MASTER_ADDR / --master-addr / --rdzv-endpoint of a kind whose controller names the pods
    (JobSet, PyTorchJob, Volcano Job, LeaderWorkerSet) must name its pod 0."""
    index = _service_index(docs)
    for w in workloads(docs):
        if w.user_wired or not w.facts.master_hosts or not _multi(w):
            continue
        want = w.facts.master_hosts[0]
        for c, cpath, _scripted, _why in w.containers:
            env = w.env(c)
            checks: list[tuple[str, str, tuple]] = []
            ma = env.get("MASTER_ADDR")
            if isinstance(ma, str):
                checks.append(("MASTER_ADDR", ma, _env_path(cpath, c, "MASTER_ADDR")))
            for launch in next((found for x, _, found in w.launches if x is c), []):
                for key, raw in launch.master_flags():
                    if not raw.startswith("$"):
                        checks.append((launch.spelling(key), host_of(raw), _launch_path(cpath, launch, key)))
            for what, value, path in checks:
                if not value or "$" in value:
                    continue
                host = value.lower().rstrip(".")
                if any(host == h or host.startswith(h + ".") for h in w.facts.master_hosts):
                    continue
                label = host.split(".")[0]
                if any(_pins_pod0(svc, w) for svc in index.by_name.get(label, ()) if same_namespace(svc, w.doc)):
                    continue  # the user's own Service, pinned to pod 0 by the controller's index labels
                if w.facts.service_like and label == w.facts.service_like:
                    why = "names the Service, which resolves to any pod"
                elif w.facts.service_like and host.split(".")[1:2] and label == want.split(".")[0]:
                    why = f"has the wrong subdomain ({w.kind}'s is {w.facts.service_like!r})"
                elif host in ("localhost", "127.0.0.1", "::1"):
                    why = "is the pod itself, so every node starts its own world"
                else:
                    why = f"is not pod 0 of this {w.kind}"
                yield w.doc, path, f"{what}={value} {why}; use {want}"


def _pins_pod0(svc: Any, w: Workload) -> bool:
    """A Service whose selector names pod 0's index labels (the controller's, e.g. PyTorchJob's
    replica-type + replica-index) and else only the workload's identity or template labels selects
    pod 0 alone (nebius/ml-cookbook's PyTorchJob rendezvous Service)."""
    index = w.facts.pod0_index
    sel = _selector(svc)
    if not index or any(sel.get(k) != v for k, v in index.items()):
        return False
    first = kinds.templates(w.doc)[0]
    allowed = {**first.labels, **w.facts.pod_identity, **index}
    return all(allowed.get(k) == v for k, v in sel.items())


_SELF_FIELDS = {"status.podIP", "status.podIPs", "metadata.name", "spec.nodeName", "status.hostIP", "status.hostIPs"}
_VAR_REF = re.compile(r"^\$(?:\{(\w+)\}|\((\w+)\)|(\w+))")


def _self_master(w: Workload, c: dict, cpath: tuple, launches: list, svc: str | None) -> Iterator:
    """MASTER_ADDR / --master-addr / --rdzv-endpoint taken from the pod's own address (fieldRef
    status.podIP, metadata.name, $HOSTNAME, $(hostname)): every pod is its own master."""
    want = pod0_name(w, svc)
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
        for key, raw in launch.master_flags():
            name = _var_name(raw) if _VAR_REF.match(raw) else None
            source = own.get(name) if name and name != "MASTER_ADDR" else None
            if source is None and ("$(hostname" in raw or "`hostname" in raw):
                source = "the pod's hostname"
            if source:
                yield (
                    w.doc,
                    _launch_path(cpath, launch, key),
                    f"{launch.spelling(key)}={raw} is {source}, each pod's own address, so every pod starts "
                    f"a world of its own; use pod 0's name {want}",
                )


_DNS_LOOKUP = {"getent", "nslookup", "dig", "host", "ping"}


def _master_from_dns(
    w: Workload, cpath: tuple, scripted: Any, launches: list, svc: str | None, is_service: Any
) -> Iterator:
    """MASTER_ADDR (or the variable --master-addr / --rdzv-endpoint reads) looked up in the headless
    Service's DNS records (``$(getent hosts <service> | head -1 ...)``): the Service's name resolves to
    every pod, in no fixed order, so each pod may pick another master."""
    wanted = {"MASTER_ADDR"}
    for launch in launches:
        for _key, raw in launch.master_flags():
            m = _VAR_REF.match(raw)
            if m:
                wanted.add(_var_name(raw))
    for script, where in scripted.scripts:
        for cmd in script.simple_commands():
            for a in cmd.assigns:
                name = a.raw.split("=", 1)[0]
                if name not in wanted:
                    continue
                for part in a.parts:
                    for inner in part.script.simple_commands() if part.script is not None else []:
                        argv = inner.argv
                        if not argv or argv[0].rsplit("/", 1)[-1] not in _DNS_LOOKUP:
                            continue
                        hosts = [x for x in argv[1:] if not x.startswith("-") and x not in ("hosts", "ahostsv4")]
                        host = hosts[0].lower().rstrip(".") if hosts else ""
                        first = host.split(".")[0]
                        if first and "$" not in first and (first == svc or is_service(first)):
                            yield (
                                w.doc,
                                cpath + where,
                                f"{name} is looked up with `{' '.join(argv)}`: the Service's name resolves to "
                                f"every pod in no fixed order, so pods may pick different masters; use pod 0's "
                                f"name {pod0_name(w, svc)}",
                            )


def _var_name(text: str) -> str:
    m = _VAR_REF.match(text)
    return (m.group(1) or m.group(2) or m.group(3)) if m else ""


def _master_problem(value: str, w: Workload, svc: str | None, is_service: Any, pod0: set) -> str | None:
    name, namespace = w.name, w.doc.namespace
    want = pod0_name(w, svc)
    own = pod0_label(w)
    host = value.lower().rstrip(".")
    first = host.split(".")[0]
    if first in pod0:
        return None  # a Service that selects only pod 0 (per-pod label) is a stable master address
    if first == svc or is_service(first):
        return f"names the Service, which resolves to any pod; use pod 0's name {want}"
    parts = host.split(".")
    if first == own and len(parts) >= 2 and (svc is None or parts[1] == svc):
        if len(parts) >= 3 and namespace and parts[2] != namespace:
            return f"names namespace {parts[2]!r}, but the pods run in {namespace!r}; use {want}.{namespace}.svc"
        if len(parts) >= 4 and parts[3] != "svc":
            return f"is not a cluster DNS name (<pod>.<service>.<namespace>.svc.<domain>); use {want}"
        return None
    if host in ("localhost", "127.0.0.1", "::1"):
        return f"is the pod itself, so every node starts its own world; use {want}"
    return f"is not pod 0 of {name!r}; use {want}"
