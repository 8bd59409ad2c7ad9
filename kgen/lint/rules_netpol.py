"""NetworkPolicies around a training run: the run's pods must reach each other on every
port (the rendezvous and liveness ports, torch's store, and the ephemeral ports NCCL and gloo
connect on), and nothing else should reach them. Policies are looked up through an index built once
per lint run (by namespace), so this stays linear in the number of documents.

A policy *selects* a pod template when it is in the workload's namespace (or either has none) and
its podSelector matches the template's labels. Selected pods accept only what the union of the
ingress rules of every selecting policy admits (policyTypes Ingress, or no policyTypes: Ingress);
an egress policy (policyTypes Egress) likewise limits what they send. A peer whose namespace or IP
block lint cannot resolve is assumed to admit the run (no false alarm)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kgen import k8s
from kgen.findings import Severity
from kgen.lint.model import Workload, memo, workloads
from kgen.lint.registry import Context, rule
from kgen.lint.rules_training import _multi
from kgen.lint.rules_wiring import same_namespace

E, INFO = Severity.ERROR, Severity.INFO
_EPHEMERAL = (32768, 60999)  # Linux's default ip_local_port_range: where NCCL/gloo listen


def _policies(docs: list) -> dict[str, tuple[dict, list]]:
    """NetworkPolicies by namespace ("" for those without one, which meet every namespace), each
    namespace's indexed by one matchLabels pair of their podSelector (a policy selects a pod only if
    all its pairs are among the pod's labels), and those without matchLabels apart."""

    def build(ds: list) -> dict[str, tuple[dict, list]]:
        out: dict[str, tuple[dict, list]] = {}
        policies = []
        seen: dict[tuple, int] = {}
        for d in ds:
            if d.kind != "NetworkPolicy" or not d.api_version.startswith("networking.k8s.io/"):
                continue
            labels = k8s.get(d.data, "spec", "podSelector", "matchLabels")
            pairs = sorted((k, v) for k, v in labels.items() if isinstance(v, str)) if isinstance(labels, dict) else []
            policies.append((d, pairs))
            for pair in pairs:
                seen[pair] = seen.get(pair, 0) + 1
        for d, pairs in policies:
            by_pair, rest = out.setdefault(d.namespace, ({}, []))
            if pairs:  # the pair fewest policies use: the run's instance label, not kgen.dev/role
                by_pair.setdefault(min(pairs, key=lambda p: (seen[p], p)), []).append(d)
            else:
                rest.append(d)
        return out

    return memo("netpol_index", docs, build)


def _candidates(docs: list, w: Workload) -> list:
    """The policies that may select the pods of ``w``: its namespace's (and namespace-less ones)."""
    index = _policies(docs)
    spaces = [index.get(w.doc.namespace), index.get("")] if w.doc.namespace else list(index.values())
    out: list = []
    seen: set = set()
    for entry in spaces:
        if entry is None:
            continue
        by_pair, rest = entry
        found = list(rest)
        for pair in w.tpl.labels.items():
            if isinstance(pair[1], str):
                found.extend(by_pair.get(pair, ()))
        for p in found:
            if id(p) not in seen:
                seen.add(id(p))
                out.append(p)
    return out


def matches(selector: Any, labels: dict) -> bool | None:
    """Whether a LabelSelector matches ``labels`` (None: it cannot be told, e.g. an unknown operator)."""
    if not isinstance(selector, dict):
        return None if selector is not None else False
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for expr in selector.get("matchExpressions") or []:
        if not isinstance(expr, dict):
            return None
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            return None
    return True


def _types(policy: Any) -> set[str]:
    spec = k8s.get(policy.data, "spec") or {}
    types = spec.get("policyTypes")
    if isinstance(types, list):
        return {t for t in types if isinstance(t, str)}
    return {"Ingress"} | ({"Egress"} if "egress" in spec else set())


def _selects(policy: Any, w: Workload) -> bool:
    if not same_namespace(policy, w.doc):
        return False
    return matches(k8s.get(policy.data, "spec", "podSelector"), w.tpl.labels) is not False


def _peer_admits(peer: Any, w: Workload, groups: list[Workload]) -> bool:
    """Whether a from/to peer covers every pod template of the run."""
    if not isinstance(peer, dict):
        return True
    if "ipBlock" in peer:
        return True  # pod IPs may be in the block: cannot tell
    ns_sel = peer.get("namespaceSelector")
    if isinstance(ns_sel, dict) and ns_sel and w.doc.namespace:
        keys = set(ns_sel.get("matchLabels") or {}) | {
            e.get("key") for e in ns_sel.get("matchExpressions") or [] if isinstance(e, dict)
        }
        if keys == {"kubernetes.io/metadata.name"}:  # the only namespace label lint knows
            if matches(ns_sel, {"kubernetes.io/metadata.name": w.doc.namespace}) is False:
                return False
    pod_sel = peer.get("podSelector")
    if pod_sel is None:
        return True  # every pod of the selected namespaces
    return all(matches(pod_sel, g.tpl.labels) is not False for g in groups)


def _ports_all(rule_: dict) -> bool:
    """Whether a rule admits every port the run uses (rendezvous, store and the ephemeral collective ports)."""
    ports = rule_.get("ports")
    if not ports:
        return True
    for p in ports:
        if not isinstance(p, dict):
            continue
        start, end = p.get("port"), p.get("endPort")
        if p.get("protocol", "TCP") == "TCP" and isinstance(start, int) and isinstance(end, int):
            if start <= _EPHEMERAL[0] and end >= _EPHEMERAL[1]:
                return True
    return False


def _admits(policies: list, direction: str, w: Workload, groups: list[Workload]) -> tuple[bool, str]:
    """Whether the union of the policies' rules admits the run's own pods (and why not)."""
    key, peer_key = ("ingress", "from") if direction == "Ingress" else ("egress", "to")
    why = f"no {key} rule admits the run's own pods"
    for policy in policies:
        rules = k8s.get(policy.data, "spec", key)
        for r in rules if isinstance(rules, list) else []:
            if not isinstance(r, dict):
                continue
            peers = r.get(peer_key)
            if peers and not any(_peer_admits(p, w, groups) for p in peers):
                continue
            if _ports_all(r):
                return True, ""
            listed = ", ".join(str(p.get("port")) for p in r.get("ports") or [] if isinstance(p, dict))
            why = (
                f"its {key} rule admits the run's pods only on port(s) {listed}, but NCCL and gloo connect on "
                f"ephemeral ports ({_EPHEMERAL[0]}-{_EPHEMERAL[1]})"
            )
    return False, why


def _groups(docs: list) -> dict[int, list[Workload]]:
    def build(ds: list) -> dict[int, list[Workload]]:
        out: dict[int, list[Workload]] = {}
        for w in workloads(ds):
            out.setdefault(id(w.doc), []).append(w)
        return out

    return memo("netpol_groups", docs, build)


@rule(
    "KG134",
    INFO,
    "No NetworkPolicy among the linted files selects the pods of a multi-node training workload: any pod "
    "in the cluster can connect to its rendezvous, torch store and kgen liveness ports (fine where the "
    "cluster manages policies elsewhere).",
    "Add a NetworkPolicy admitting ingress to the run's pods only from the run's own pods (kgen render emits one).",
    kinds=["NetworkPolicy"],
    scope="stream",
    needs_all_inputs=True,
)
def no_network_policy(docs: list, ctx: Context) -> Iterator:
    for w in workloads(docs):
        if not w.primary or not _multi(w):
            continue
        if not any(_selects(p, w) for p in _candidates(docs, w)):
            yield (
                w.doc,
                (),  # the document's own line: known without reading its positions again (every Job of a big
                # folder without policies gets this finding; a field path would re-read each document)
                f"no NetworkPolicy in the linted files selects the pods of {w.kind} {w.name!r}; any pod in the "
                "cluster can reach its rendezvous and store ports",
            )


@rule(
    "KG135",
    E,
    "A NetworkPolicy that selects a training run's pods must let them reach each other on every port: "
    "ingress (and egress, when the policy limits it) from/to the run's own pods, all ports (rendezvous, "
    "torch store and the ephemeral ports NCCL/gloo use); policyTypes Ingress with no rules denies it all.",
    "Add an ingress rule `from: [{podSelector: <the run's pod labels>}]` without ports (kgen render's "
    "policy), and the same for egress if the policy has policyTypes Egress.",
    kinds=["NetworkPolicy"],
    scope="stream",
)
def policy_blocks_run(docs: list, ctx: Context) -> Iterator:
    groups = _groups(docs)
    reported: set = set()
    for w in workloads(docs):
        if not _multi(w):
            continue
        selecting = [p for p in _candidates(docs, w) if _selects(p, w)]
        if not selecting:
            continue
        run = groups.get(id(w.doc), [w])
        for direction in ("Ingress", "Egress"):
            limiting = [p for p in selecting if direction in _types(p)]
            if not limiting:
                continue
            ok, why = _admits(limiting, direction, w, run)
            if ok:
                continue
            policy = limiting[0]
            if (id(policy), direction, id(w.doc)) in reported:
                continue
            reported.add((id(policy), direction, id(w.doc)))
            key = direction.lower()
            if not any(k8s.get(p.data, "spec", key) for p in limiting):
                why = f"policyTypes {direction} with no {key} rules denies all {key}"
            yield (
                policy,
                ("spec", key) if k8s.get(policy.data, "spec", key) is not None else ("spec",),
                f"NetworkPolicy {policy.name!r} selects the pods of {w.kind} {w.name!r} and {why}: the nodes cannot "
                f"reach each other and the run hangs; admit {key} {'from' if key == 'ingress' else 'to'} the run's "
                "own pods on all ports",
            )
