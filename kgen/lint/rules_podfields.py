"""Pod template fields the API server checks and the schemas do not (pkg/apis/core/validation): the
containers' env sources, mounts, probes, lifecycle hooks and security context; the pod's DNS, scheduling,
process-namespace, sysctl, host-alias, class-name and volume fields; and label selector requirements
wherever an object has one. Found by the differential test against a real API server
(tests/k8s/test_k8s_lint_vs_server.py); each message says what the server says."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator
from typing import Any

from kgen import k8s
from kgen.findings import Severity
from kgen.lint import kinds
from kgen.lint.registry import Context, rule

E = Severity.ERROR

_ENV_SOURCES = ("fieldRef", "resourceFieldRef", "configMapKeyRef", "secretKeyRef", "fileKeyRef")
_PROBE_HANDLERS = ("exec", "httpGet", "tcpSocket", "grpc")
_HOOK_HANDLERS = ("exec", "httpGet", "tcpSocket", "sleep")
_PROBES = ("livenessProbe", "readinessProbe", "startupProbe")
_PROBE_COUNTS = ("initialDelaySeconds", "timeoutSeconds", "periodSeconds", "successThreshold", "failureThreshold")
_TERMINATION_MESSAGE_POLICIES = ("File", "FallbackToLogsOnError")
_SYSCTL = re.compile(r"([a-z0-9]([-_a-z0-9]*[a-z0-9])?[./])*[a-z0-9]([-_a-z0-9]*[a-z0-9])?")
_VOLUME_SOURCES = (
    "hostPath emptyDir gcePersistentDisk awsElasticBlockStore gitRepo secret nfs iscsi glusterfs "
    "persistentVolumeClaim rbd flexVolume cinder cephfs flocker downwardAPI fc azureFile configMap "
    "vsphereVolume quobyte azureDisk photonPersistentDisk projected portworxVolume scaleIO storageos csi "
    "ephemeral image"
).split()
_NODE_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
_MAX_MODE = 0o777


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _one_of(value: Any, allowed: tuple[str, ...]) -> str:
    return f"Unsupported value {value!r}: supported values are {', '.join(allowed)}"


def _port_problem(port: Any) -> str | None:
    """A probe's or hook's port: a number 1-65535 or an IANA service name (ValidatePortNumOrName)."""
    if _int(port) is not None:
        return None if 1 <= port <= 65535 else f"port {port} must be between 1 and 65535, inclusive"
    if isinstance(port, str):
        problem = k8s.iana_port_name_problem(port)
        return f"port name {port!r} {problem}" if problem else None
    return None


def _handlers(obj: dict, path: tuple, names: tuple[str, ...], what: str) -> Iterator[tuple[tuple, str]]:
    """Exactly one handler (validateHandler / validateProbe), and its port valid."""
    given = [h for h in names if obj.get(h) is not None]
    if not given:
        yield path, f"{what} must specify a handler type ({', '.join(names)})"
    elif len(given) > 1:
        yield path + (given[1],), f"{what} may not specify more than 1 handler type (has {', '.join(given)})"
    for h in ("httpGet", "tcpSocket"):
        problem = _port_problem(k8s.get(obj, h, "port"))
        if problem:
            yield path + (h, "port"), problem


def _container(c: dict, path: tuple) -> Iterator[tuple[tuple, str]]:
    for i, e in enumerate(k8s.env_list(c)):
        if not isinstance(e, dict):
            continue
        vf = e.get("valueFrom")
        if vf is None:
            continue
        p = path + ("env", i, "valueFrom")
        if isinstance(e.get("value"), str) and e["value"]:
            yield p, "valueFrom may not be specified when value is not empty"
        if isinstance(vf, dict):
            sources = [s for s in _ENV_SOURCES if vf.get(s) is not None]
            if not sources:
                yield p, f"valueFrom must specify one of: {', '.join(_ENV_SOURCES)}"
            elif len(sources) > 1:
                yield p, f"valueFrom may not have more than one field specified at a time (has {', '.join(sources)})"
    mounts = c.get("volumeMounts")
    for i, m in enumerate(mounts if isinstance(mounts, list) else []):
        if isinstance(m, dict) and m.get("mountPath") == "":
            yield path + ("volumeMounts", i, "mountPath"), "mountPath is required (empty)"
    tmp = c.get("terminationMessagePolicy")
    if isinstance(tmp, str) and tmp and tmp not in _TERMINATION_MESSAGE_POLICIES:
        yield path + ("terminationMessagePolicy",), _one_of(tmp, _TERMINATION_MESSAGE_POLICIES)
    sc = c.get("securityContext")
    if isinstance(sc, dict) and sc.get("allowPrivilegeEscalation") is False:
        if sc.get("privileged") is True:
            yield path + ("securityContext",), "cannot set allowPrivilegeEscalation to false and privileged to true"
        added = k8s.get(sc, "capabilities", "add")
        if isinstance(added, list) and any(a in ("SYS_ADMIN", "CAP_SYS_ADMIN") for a in added):
            yield (
                path + ("securityContext",),
                "cannot set allowPrivilegeEscalation to false and capabilities.add SYS_ADMIN",
            )
    for name in _PROBES:
        probe = c.get(name)
        if not isinstance(probe, dict):
            continue
        yield from _handlers(probe, path + (name,), _PROBE_HANDLERS, name)
        for key in _PROBE_COUNTS:
            n = _int(probe.get(key))
            if n is not None and n < 0:
                yield path + (name, key), f"{name}.{key} must be greater than or equal to 0, got {n}"
        st = _int(probe.get("successThreshold"))
        if name != "readinessProbe" and st is not None and st > 1:
            yield path + (name, "successThreshold"), f"{name}.successThreshold must be 1, got {st}"
        tg = _int(probe.get("terminationGracePeriodSeconds"))
        if tg is not None and tg <= 0:
            yield path + (name, "terminationGracePeriodSeconds"), "must be greater than 0"
    lifecycle = c.get("lifecycle")
    if isinstance(lifecycle, dict):
        for hook in ("postStart", "preStop"):
            if isinstance(lifecycle.get(hook), dict):
                yield from _handlers(lifecycle[hook], path + ("lifecycle", hook), _HOOK_HANDLERS, f"lifecycle.{hook}")


@rule(
    "KG200",
    E,
    "Container fields the API server checks beyond the schema: an env item has value or valueFrom, and "
    "valueFrom exactly one source; volumeMounts[].mountPath is not empty; terminationMessagePolicy is File or "
    "FallbackToLogsOnError; privileged (or SYS_ADMIN) with allowPrivilegeEscalation: false; probes and lifecycle "
    "hooks have exactly one handler with a valid port, and non-negative counts.",
    "Fix the field named in the message (the API server rejects the pod template as written).",
    templates_only=True,
)
def container_fields(doc: Any, ctx: Context) -> Iterator:
    for spec, base in kinds.pod_specs(doc):
        for c, path in k8s.containers(spec, base):
            yield from _container(c, path)


def _node_requirements(reqs: Any, path: tuple, fields: bool) -> Iterator[tuple[tuple, str]]:
    """validateNodeSelectorRequirement / validateNodeFieldSelectorRequirement."""
    for i, r in enumerate(reqs if isinstance(reqs, list) else []):
        if not isinstance(r, dict):
            continue
        op, values, p = r.get("operator"), r.get("values"), path + (i,)
        values = values if isinstance(values, list) else []
        if fields:
            if op not in ("In", "NotIn"):
                yield p + ("operator",), _one_of(op, ("In", "NotIn"))
            elif len(values) != 1:
                yield p + ("values",), "must have one element for matchFields"
        elif op in ("In", "NotIn"):
            if not values:
                yield p + ("values",), f"must be specified when operator is {op}"
        elif op in ("Exists", "DoesNotExist"):
            if values:
                yield p + ("values",), f"may not be specified when operator is {op}"
        elif op in ("Gt", "Lt"):
            if len(values) != 1 or not (isinstance(values[0], str) and re.fullmatch(r"[-+]?\d+", values[0])):
                yield p + ("values",), f"must be a single integer element when operator is {op}"
        elif op is not None:
            yield p + ("operator",), _one_of(op, _NODE_OPERATORS)


def _node_selector_terms(terms: Any, path: tuple) -> Iterator[tuple[tuple, str]]:
    for i, term in enumerate(terms if isinstance(terms, list) else []):
        if isinstance(term, dict):
            yield from _node_requirements(term.get("matchExpressions"), path + (i, "matchExpressions"), False)
            yield from _node_requirements(term.get("matchFields"), path + (i, "matchFields"), True)


def _scheduling(spec: dict, base: tuple) -> Iterator[tuple[tuple, str]]:
    na = k8s.get(spec, "affinity", "nodeAffinity")
    if isinstance(na, dict):
        p = base + ("affinity", "nodeAffinity")
        required = na.get("requiredDuringSchedulingIgnoredDuringExecution")
        if isinstance(required, dict):
            terms = required.get("nodeSelectorTerms")
            rp = p + ("requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms")
            if isinstance(terms, list) and not terms:
                yield rp, "must have at least one node selector term"
            yield from _node_selector_terms(terms, rp)
        preferred = na.get("preferredDuringSchedulingIgnoredDuringExecution")
        for i, pref in enumerate(preferred if isinstance(preferred, list) else []):
            if not isinstance(pref, dict):
                continue
            pp = p + ("preferredDuringSchedulingIgnoredDuringExecution", i)
            weight = _int(pref.get("weight"))
            if weight is not None and not 1 <= weight <= 100:
                yield pp + ("weight",), f"weight {weight} must be in the range 1-100"
            pref_term = pref.get("preference")
            if isinstance(pref_term, dict):
                yield from _node_selector_terms([pref_term], pp + ("preference",))
    tsc = spec.get("topologySpreadConstraints")
    for i, t in enumerate(tsc if isinstance(tsc, list) else []):
        if not isinstance(t, dict):
            continue
        p = base + ("topologySpreadConstraints", i)
        skew = _int(t.get("maxSkew"))
        if skew is not None and skew <= 0:
            yield p + ("maxSkew",), f"maxSkew must be greater than zero, got {skew}"
        wu = t.get("whenUnsatisfiable")
        if isinstance(wu, str) and wu not in ("DoNotSchedule", "ScheduleAnyway"):
            yield p + ("whenUnsatisfiable",), _one_of(wu, ("DoNotSchedule", "ScheduleAnyway"))
        md = _int(t.get("minDomains"))
        if md is not None and md <= 0:
            yield p + ("minDomains",), f"minDomains must be greater than zero, got {md}"
        elif md is not None and wu == "ScheduleAnyway":
            yield p + ("minDomains",), "minDomains can only be set with whenUnsatisfiable: DoNotSchedule"
        for key in ("nodeAffinityPolicy", "nodeTaintsPolicy"):
            val = t.get(key)
            if isinstance(val, str) and val not in ("Honor", "Ignore"):
                yield p + (key,), _one_of(val, ("Honor", "Ignore"))


def _dns(spec: dict, base: tuple) -> Iterator[tuple[tuple, str]]:
    cfg = spec.get("dnsConfig")
    if spec.get("dnsPolicy") == "None":
        if not isinstance(cfg, dict):
            yield base + ("dnsPolicy",), "must provide dnsConfig when dnsPolicy is None"
        elif not cfg.get("nameservers"):
            yield base + ("dnsConfig", "nameservers"), "must provide at least one DNS nameserver when dnsPolicy is None"
    if not isinstance(cfg, dict):
        return
    servers = cfg.get("nameservers")
    if isinstance(servers, list):
        if len(servers) > 3:
            yield base + ("dnsConfig", "nameservers"), f"must not have more than 3 nameservers, has {len(servers)}"
        for i, ns in enumerate(servers):
            if isinstance(ns, str) and not _is_ip(ns):
                yield base + ("dnsConfig", "nameservers", i), f"{ns!r} must be a valid IP address"
    searches = cfg.get("searches")
    if isinstance(searches, list) and len(searches) > 32:
        yield base + ("dnsConfig", "searches"), f"must not have more than 32 search paths, has {len(searches)}"


def _is_ip(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def _volumes(spec: dict, base: tuple) -> Iterator[tuple[tuple, str]]:
    vols = spec.get("volumes")
    for i, v in enumerate(vols if isinstance(vols, list) else []):
        if not isinstance(v, dict):
            continue
        p = base + ("volumes", i)
        sources = [s for s in _VOLUME_SOURCES if v.get(s) is not None]
        if len(sources) > 1:
            yield p + (sources[1],), f"may not specify more than 1 volume type (has {', '.join(sources)})"
        for s in ("configMap", "secret", "downwardAPI", "projected"):
            src = v.get(s)
            if not isinstance(src, dict):
                continue
            mode = _int(src.get("defaultMode"))
            if mode is not None and not 0 <= mode <= _MAX_MODE:
                yield p + (s, "defaultMode"), f"defaultMode {mode} must be a number between 0 and 0777 (octal)"
            items = src.get("items")
            for j, item in enumerate(items if isinstance(items, list) else []):
                m = _int(item.get("mode")) if isinstance(item, dict) else None
                if m is not None and not 0 <= m <= _MAX_MODE:
                    yield p + (s, "items", j, "mode"), f"mode {m} must be a number between 0 and 0777 (octal)"


@rule(
    "KG201",
    E,
    "Pod spec fields the API server checks beyond the schema: dnsPolicy None needs a dnsConfig, at most 3 "
    "nameservers (IP addresses); node affinity has at least one selector term and known operators; "
    "topologySpreadConstraints maxSkew > 0 and a known whenUnsatisfiable; not both shareProcessNamespace and "
    "hostPID; sysctl names, hostAliases IPs, runtimeClassName and priorityClassName (DNS subdomains); one source "
    "per volume and file modes at most 0777.",
    "Fix the field named in the message (the API server rejects the pod template as written).",
    templates_only=True,
)
def pod_fields(doc: Any, ctx: Context) -> Iterator:
    for spec, base in kinds.pod_specs(doc):
        yield from _dns(spec, base)
        yield from _scheduling(spec, base)
        if spec.get("shareProcessNamespace") is True and spec.get("hostPID") is True:
            yield base + ("shareProcessNamespace",), "shareProcessNamespace and hostPID cannot both be enabled"
        sysctls = k8s.get(spec, "securityContext", "sysctls")
        for i, s in enumerate(sysctls if isinstance(sysctls, list) else []):
            name = s.get("name") if isinstance(s, dict) else None
            if isinstance(name, str) and (len(name) > 253 or not _SYSCTL.fullmatch(name)):
                yield base + ("securityContext", "sysctls", i, "name"), f"{name!r} must be a valid sysctl name"
        aliases = spec.get("hostAliases")
        for i, a in enumerate(aliases if isinstance(aliases, list) else []):
            ip = a.get("ip") if isinstance(a, dict) else None
            if isinstance(ip, str) and not _is_ip(ip):
                yield base + ("hostAliases", i, "ip"), f"{ip!r} must be a valid IP address"
        for key in ("runtimeClassName", "priorityClassName"):
            val = spec.get(key)
            if isinstance(val, str) and val and not k8s.is_dns_subdomain(val):
                yield (
                    base + (key,),
                    f"{key} {val!r} must be a DNS subdomain (lower case, digits, '-', '.', at most 253)",
                )
        yield from _volumes(spec, base)


# --- label selectors ----------------------------------------------------------------------------


def selector_problems(sel: Any, path: tuple) -> Iterator[tuple[tuple, str]]:
    """A metav1.LabelSelector's matchExpressions (ValidateLabelSelectorRequirement): a known operator, values
    for In/NotIn and none for Exists/DoesNotExist, a label key."""
    exprs = sel.get("matchExpressions") if isinstance(sel, dict) else None
    for i, r in enumerate(exprs if isinstance(exprs, list) else []):
        if not isinstance(r, dict):
            continue
        p = path + ("matchExpressions", i)
        op, values = r.get("operator"), r.get("values")
        if op in ("In", "NotIn"):
            if not values:
                yield p + ("values",), f"must be specified when operator is {op}"
        elif op in ("Exists", "DoesNotExist"):
            if values:
                yield p + ("values",), f"may not be specified when operator is {op}"
        elif op is not None:
            yield p + ("operator",), _one_of(op, _SELECTOR_OPERATORS)
        key = r.get("key")
        if isinstance(key, str):
            problem = k8s.qualified_name_problem(key)
            if problem:
                yield p + ("key",), f"key {key!r} {problem}"


def _pod_selectors(spec: dict, base: tuple) -> Iterator[tuple[Any, tuple]]:
    for kind in ("podAffinity", "podAntiAffinity"):
        aff = k8s.get(spec, "affinity", kind)
        if not isinstance(aff, dict):
            continue
        p = base + ("affinity", kind)
        req = aff.get("requiredDuringSchedulingIgnoredDuringExecution")
        for i, term in enumerate(req if isinstance(req, list) else []):
            if isinstance(term, dict):
                for key in ("labelSelector", "namespaceSelector"):
                    yield term.get(key), p + ("requiredDuringSchedulingIgnoredDuringExecution", i, key)
        pref = aff.get("preferredDuringSchedulingIgnoredDuringExecution")
        for i, w in enumerate(pref if isinstance(pref, list) else []):
            term = w.get("podAffinityTerm") if isinstance(w, dict) else None
            if isinstance(term, dict):
                for key in ("labelSelector", "namespaceSelector"):
                    tp = p + ("preferredDuringSchedulingIgnoredDuringExecution", i, "podAffinityTerm", key)
                    yield term.get(key), tp
    tsc = spec.get("topologySpreadConstraints")
    for i, t in enumerate(tsc if isinstance(tsc, list) else []):
        if isinstance(t, dict):
            yield t.get("labelSelector"), base + ("topologySpreadConstraints", i, "labelSelector")


def _selectors(doc: Any) -> Iterator[tuple[Any, tuple]]:
    data = doc.data if isinstance(doc.data, dict) else {}
    spec = data.get("spec")
    if not isinstance(spec, dict):
        spec = {}
    if doc.kind in ("StatefulSet", "Job", "PodDisruptionBudget", "Deployment", "ReplicaSet", "DaemonSet"):
        yield spec.get("selector"), ("spec", "selector")
    if doc.kind == "NetworkPolicy" and doc.api_version.startswith("networking.k8s.io/"):
        yield spec.get("podSelector"), ("spec", "podSelector")
        for direction, peers_key in (("ingress", "from"), ("egress", "to")):
            rules = spec.get(direction)
            for i, r in enumerate(rules if isinstance(rules, list) else []):
                peers = r.get(peers_key) if isinstance(r, dict) else None
                for j, peer in enumerate(peers if isinstance(peers, list) else []):
                    if isinstance(peer, dict):
                        for key in ("podSelector", "namespaceSelector"):
                            yield peer.get(key), ("spec", direction, i, peers_key, j, key)
    for pod, base in kinds.pod_specs(doc):
        yield from _pod_selectors(pod, base)


@rule(
    "KG202",
    E,
    "Label selector requirements (matchExpressions of a workload's, PodDisruptionBudget's or NetworkPolicy's "
    "selector, pod affinity terms and topology spread constraints): operator In, NotIn, Exists or DoesNotExist; "
    "values for In and NotIn, none for Exists and DoesNotExist; the key a label key.",
    "Fix the requirement named in the message, e.g. operator: In with values: [a, b].",
)
def label_selector_requirements(doc: Any, ctx: Context) -> Iterator:
    for sel, path in _selectors(doc):
        yield from selector_problems(sel, path)
