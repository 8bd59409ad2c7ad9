"""Fields of NetworkPolicies, Jobs, StatefulSets, Services and ConfigMaps that the API server checks and the
schemas do not (enums, ranges, exclusive fields, CIDRs, base64), found by the differential test against a
real API server (tests/k8s/test_k8s_lint_vs_server.py). Each message says what the server says."""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
from collections.abc import Iterator
from typing import Any

from kgen import k8s
from kgen.findings import Severity
from kgen.lint.registry import Context, rule

E = Severity.ERROR
_HTTP_PATH = re.compile(r"[A-Za-z0-9/\-._~%!$&'()*+,;=:]+")


def _spec(doc: Any) -> dict:
    spec = doc.data.get("spec") if isinstance(doc.data, dict) else None
    return spec if isinstance(spec, dict) else {}


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _one_of(value: Any, allowed: tuple[str, ...]) -> str:
    return f"Unsupported value {value!r}: supported values are {', '.join(allowed)}"


def _network(cidr: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    try:
        return ipaddress.ip_network(cidr, strict=False)  # ParseCIDRSloppy: host bits allowed
    except ValueError:
        return None


# --- NetworkPolicy ------------------------------------------------------------------------------


def _ip_block(block: dict, path: tuple) -> Iterator[tuple[tuple, str]]:
    """ValidateIPBlock: cidr a CIDR; each except a CIDR strictly inside it."""
    cidr = block.get("cidr")
    net = _network(cidr) if isinstance(cidr, str) else None
    if isinstance(cidr, str) and net is None:
        yield path + ("cidr",), f"cidr {cidr!r} must be a valid CIDR, e.g. 10.0.0.0/8"
    excepts = block.get("except")
    for i, ex in enumerate(excepts if isinstance(excepts, list) else []):
        if not isinstance(ex, str):
            continue
        ex_net = _network(ex)
        if ex_net is None:
            yield path + ("except", i), f"except {ex!r} must be a valid CIDR"
        elif net is not None and (
            ex_net.version != net.version or ex_net.prefixlen <= net.prefixlen or ex_net.network_address not in net
        ):
            yield path + ("except", i), f"except {ex!r} must be a strict subset of cidr {cidr!r}"


@rule(
    "KG203",
    E,
    "NetworkPolicy fields the API server checks beyond the schema: policyTypes are Ingress or Egress; a peer "
    "with ipBlock has no podSelector or namespaceSelector; ipBlock.cidr is a CIDR and each except entry a CIDR "
    "strictly inside it.",
    "Fix the field named in the message, e.g. policyTypes: [Ingress].",
    kinds=["NetworkPolicy"],
)
def network_policy_fields(doc: Any, ctx: Context) -> Iterator:
    if not doc.api_version.startswith("networking.k8s.io/"):
        return
    spec = _spec(doc)
    types = spec.get("policyTypes")
    for i, t in enumerate(types if isinstance(types, list) else []):
        if isinstance(t, str) and t not in ("Ingress", "Egress"):
            yield ("spec", "policyTypes", i), _one_of(t, ("Ingress", "Egress"))
    for direction, peers_key in (("ingress", "from"), ("egress", "to")):
        rules = spec.get(direction)
        for i, r in enumerate(rules if isinstance(rules, list) else []):
            peers = r.get(peers_key) if isinstance(r, dict) else None
            for j, peer in enumerate(peers if isinstance(peers, list) else []):
                if not isinstance(peer, dict) or not isinstance(peer.get("ipBlock"), dict):
                    continue
                path = ("spec", direction, i, peers_key, j)
                others = [k for k in ("podSelector", "namespaceSelector") if peer.get(k) is not None]
                if others:
                    yield path + ("ipBlock",), f"may not specify both ipBlock and another peer ({others[0]})"
                yield from _ip_block(peer["ipBlock"], path + ("ipBlock",))


# --- Job and StatefulSet ------------------------------------------------------------------------


def _managed_by_problem(value: str) -> str | None:
    """Job spec.managedBy: a domain-prefixed path (IsDomainPrefixedPath), at most 63 characters."""
    if len(value) > 63:
        return f"is {len(value)} characters, at most 63 allowed"
    host, slash, path = value.partition("/")
    if not slash or not host or not path:
        return 'must be a domain-prefixed path (such as "acme.io/foo")'
    if not k8s.is_dns_subdomain(host):
        return f"domain {host!r} must be a DNS subdomain"
    if not _HTTP_PATH.fullmatch(path):
        return f"path {path!r} may contain only letters, digits and -._~%!$&'()*+,;=:/"
    return None


def _job(spec: dict) -> Iterator[tuple[tuple, str]]:
    rules = k8s.get(spec, "podFailurePolicy", "rules")
    for i, r in enumerate(rules if isinstance(rules, list) else []):
        conds = r.get("onPodConditions") if isinstance(r, dict) else None
        for j, cond in enumerate(conds if isinstance(conds, list) else []):
            status = cond.get("status") if isinstance(cond, dict) else None
            if isinstance(status, str) and status not in ("True", "False", "Unknown"):
                path = ("spec", "podFailurePolicy", "rules", i, "onPodConditions", j, "status")
                yield path, _one_of(status, ("True", "False", "Unknown"))
    sp = spec.get("successPolicy")
    if isinstance(sp, dict):
        sp_rules = sp.get("rules")
        if not isinstance(sp_rules, list) or not sp_rules:
            yield ("spec", "successPolicy", "rules"), "successPolicy must have at least one rule"
        elif len(sp_rules) > 20:
            yield ("spec", "successPolicy", "rules"), f"must have at most 20 rules, has {len(sp_rules)}"
        else:
            for i, r in enumerate(sp_rules):
                if isinstance(r, dict) and r.get("succeededIndexes") is None and r.get("succeededCount") is None:
                    yield (
                        ("spec", "successPolicy", "rules", i),
                        "must specify at least one of succeededIndexes or succeededCount",
                    )
    mb = spec.get("managedBy")
    if isinstance(mb, str):
        problem = _managed_by_problem(mb)
        if problem:
            yield ("spec", "managedBy"), f"managedBy {mb!r} {problem}"


def _statefulset(spec: dict) -> Iterator[tuple[tuple, str]]:
    for path in (("minReadySeconds",), ("revisionHistoryLimit",), ("ordinals", "start")):
        n = _int(k8s.get(spec, *path))
        if n is not None and n < 0:
            yield ("spec", *path), f"{'.'.join(path)} must be greater than or equal to 0, got {n}"
    partition = _int(k8s.get(spec, "updateStrategy", "rollingUpdate", "partition"))
    if partition is not None and partition < 0:
        yield ("spec", "updateStrategy", "rollingUpdate", "partition"), "must be greater than or equal to 0"
    retention = spec.get("persistentVolumeClaimRetentionPolicy")
    if isinstance(retention, dict):
        for key in ("whenDeleted", "whenScaled"):
            val = retention.get(key)
            if isinstance(val, str) and val not in ("Retain", "Delete"):
                yield ("spec", "persistentVolumeClaimRetentionPolicy", key), _one_of(val, ("Retain", "Delete"))


@rule(
    "KG204",
    E,
    "Job and StatefulSet fields the API server checks beyond the schema: a podFailurePolicy condition's "
    "status is True, False or Unknown; a successPolicy has 1-20 rules, each with succeededIndexes or "
    "succeededCount; managedBy is a domain-prefixed path; a StatefulSet's minReadySeconds, revisionHistoryLimit, "
    "ordinals.start and partition are >= 0 and its PVC retention policy Retain or Delete.",
    "Fix the field named in the message.",
    kinds=["Job", "StatefulSet"],
)
def controller_fields(doc: Any, ctx: Context) -> Iterator:
    if doc.kind == "Job" and doc.api_version.startswith("batch/"):
        yield from _job(_spec(doc))
    elif doc.kind == "StatefulSet" and doc.api_version.startswith("apps/"):
        yield from _statefulset(_spec(doc))


# --- Service and ConfigMap ----------------------------------------------------------------------


def _service(spec: dict) -> Iterator[tuple[tuple, str]]:
    affinity = spec.get("sessionAffinity")
    if isinstance(affinity, str) and affinity not in ("ClientIP", "None"):
        yield ("spec", "sessionAffinity"), _one_of(affinity, ("ClientIP", "None"))
    elif affinity != "ClientIP" and spec.get("sessionAffinityConfig") is not None:
        yield ("spec", "sessionAffinityConfig"), "must not be set when sessionAffinity is not ClientIP"
    svc_type = spec.get("type") or "ClusterIP"
    etp = spec.get("externalTrafficPolicy")
    if isinstance(etp, str) and etp:
        if etp not in ("Cluster", "Local"):
            yield ("spec", "externalTrafficPolicy"), _one_of(etp, ("Cluster", "Local"))
        elif not (svc_type in ("NodePort", "LoadBalancer") or (svc_type == "ClusterIP" and spec.get("externalIPs"))):
            yield (
                ("spec", "externalTrafficPolicy"),
                f"externalTrafficPolicy may only be set for externally-accessible services (type {svc_type})",
            )
    itp = spec.get("internalTrafficPolicy")
    if isinstance(itp, str) and itp and itp not in ("Cluster", "Local"):
        yield ("spec", "internalTrafficPolicy"), _one_of(itp, ("Cluster", "Local"))


def _configmap(data: dict) -> Iterator[tuple[tuple, str]]:
    binary = data.get("binaryData")
    for key, value in binary.items() if isinstance(binary, dict) else ():
        if not isinstance(value, str):
            continue
        try:  # Go's base64.StdEncoding: padding required, newlines ignored
            base64.b64decode(value.replace("\n", "").replace("\r", ""), validate=True)
        except (binascii.Error, ValueError):
            yield ("binaryData", key), f"binaryData[{key!r}] is not base64 (the server fails to decode the object)"


@rule(
    "KG205",
    E,
    "Service and ConfigMap fields the API server checks beyond the schema: sessionAffinity is ClientIP or None; "
    "externalTrafficPolicy (Cluster or Local) only on NodePort or LoadBalancer Services; internalTrafficPolicy "
    "Cluster or Local; ConfigMap binaryData values are base64.",
    "Fix the field named in the message (a headless Service for training needs no traffic policy).",
    kinds=["Service", "ConfigMap"],
)
def service_configmap_fields(doc: Any, ctx: Context) -> Iterator:
    if doc.api_version != "v1" or not isinstance(doc.data, dict):
        return
    if doc.kind == "Service":
        yield from _service(_spec(doc))
    else:
        yield from _configmap(doc.data)
