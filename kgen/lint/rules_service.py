"""Service rules the schemas miss (validation.md §D rows 7-12)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kgen import k8s
from kgen.findings import Severity
from kgen.lint import kinds
from kgen.lint.registry import Context, rule

E = Severity.ERROR
_PROTOCOLS = ("TCP", "UDP", "SCTP")
_TYPES = ("ClusterIP", "NodePort", "LoadBalancer", "ExternalName")


def _spec(doc: Any) -> dict:
    spec = doc.data.get("spec") if isinstance(doc.data, dict) else None
    return spec if isinstance(spec, dict) else {}


def _ports(doc: Any) -> list:
    """spec.ports when it is a list (a wrong type is the schema's finding), else []."""
    ports = _spec(doc).get("ports")
    return ports if isinstance(ports, list) else []


@rule(
    "KG030",
    E,
    "A Service needs ports unless it is headless (clusterIP: None) or ExternalName.",
    "Add a port, or set clusterIP: None.",
    kinds=["Service"],
)
def service_ports_required(doc: Any, ctx: Context) -> Iterator:
    spec = _spec(doc)
    if spec.get("ports") or spec.get("clusterIP") == "None" or spec.get("type") == "ExternalName":
        return
    yield ("spec",), "Service has no ports; add spec.ports or make it headless with clusterIP: None"


@rule(
    "KG031",
    E,
    "Service port names are DNS-1123 labels, required when there is more than one port, unique.",
    "Name every port with lower case, digits and '-'.",
    kinds=["Service"],
)
def service_port_names(doc: Any, ctx: Context) -> Iterator:
    ports = _ports(doc)
    seen: set = set()
    for i, p in enumerate(ports):
        if not isinstance(p, dict):
            continue
        name = p.get("name")
        if not isinstance(name, str) or not name:
            if not name and len(ports) > 1:
                yield ("spec", "ports", i), "port name is required when a Service has more than one port"
            continue
        if not k8s.is_dns_label(name):
            yield ("spec", "ports", i, "name"), f"port name {name!r} must be a DNS-1123 label (lower case, digits, '-')"
        if name in seen:
            yield ("spec", "ports", i, "name"), f"duplicate port name {name!r}; names must be unique"
        seen.add(name)


@rule(
    "KG032",
    E,
    "Port numbers are 1-65535 and protocol is TCP, UDP or SCTP (Service and container ports).",
    "Use a port in 1-65535 and an upper-case protocol.",
)
def port_numbers(doc: Any, ctx: Context) -> Iterator:
    groups = []
    if doc.kind == "Service":
        groups.append((_ports(doc), ("spec", "ports"), "port"))
    for ps in kinds.pod_specs(doc):
        for c, base in k8s.containers(*ps):
            if isinstance(c.get("ports"), list):
                groups.append((c["ports"], base + ("ports",), "containerPort"))
    for ports, base, field in groups:
        for i, p in enumerate(ports):
            if not isinstance(p, dict):
                continue
            num = p.get(field)
            if field == "containerPort" and num is None:
                yield base + (i,), "containerPort is required"
            elif isinstance(num, int) and not isinstance(num, bool) and not 1 <= num <= 65535:
                yield base + (i, field), f"{field} {num} is out of range 1-65535"
            proto = p.get("protocol")
            if isinstance(proto, str) and proto not in _PROTOCOLS:
                yield base + (i, "protocol"), f"protocol {proto!r} must be TCP, UDP or SCTP (upper case)"


@rule(
    "KG033",
    E,
    "targetPort is a number 1-65535 (0 means unset: the port) or an IANA service name (at most 15 characters, "
    "lower case).",
    "Use the container port's number or its (short) name.",
    kinds=["Service"],
)
def target_port(doc: Any, ctx: Context) -> Iterator:
    for i, p in enumerate(_ports(doc)):
        tp = p.get("targetPort") if isinstance(p, dict) else None
        if tp is None:
            continue
        path = ("spec", "ports", i, "targetPort")
        if isinstance(tp, int) and not isinstance(tp, bool):
            if not 0 <= tp <= 65535:  # 0 means unset: the server defaults it to the port
                yield path, f"targetPort {tp} is out of range 1-65535"
        elif isinstance(tp, str):
            problem = k8s.iana_port_name_problem(tp)
            if problem:
                yield path, f"targetPort name {tp!r} {problem}"


@rule(
    "KG034",
    E,
    "Service type is ClusterIP, NodePort, LoadBalancer or ExternalName, and clusterIP: None "
    "(headless) only goes with ClusterIP.",
    "Fix the type, or drop clusterIP: None.",
    kinds=["Service"],
)
def service_type(doc: Any, ctx: Context) -> Iterator:
    spec = _spec(doc)
    t = spec.get("type")
    if isinstance(t, str) and t not in _TYPES:
        yield ("spec", "type"), f"type {t!r} must be one of {', '.join(_TYPES)}"
    if spec.get("clusterIP") == "None" and t in ("NodePort", "LoadBalancer"):
        yield ("spec", "clusterIP"), f"clusterIP: None (headless) is not allowed with type {t}"
