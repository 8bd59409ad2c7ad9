"""Kubeflow PyTorchJob (kubeflow.org/v1, training-operator): ``pytorchReplicaSpecs`` Master (exactly
one) and Worker; the operator creates a headless Service per pod (``<job>-master-0``,
``<job>-worker-N``), injects MASTER_ADDR/MASTER_PORT/WORLD_SIZE/RANK and torchrun's PET_* variables
(PET_NNODES, PET_NPROC_PER_NODE from ``nprocPerNode``, PET_NODE_RANK; with ``elasticPolicy`` the
rendezvous ones), and requires a container named ``pytorch`` in every replica
(pkg/webhooks/pytorch/pytorchjob_webhook.go, pkg/controller.v1/pytorch/envvar.go)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kgen import k8s
from kgen.lint.kinds.base import RANK_ENV, Adapter, Facts, Template, as_int, get, unknown_fields

ROLES = ("Master", "Worker")
SPEC_KEYS = {"runPolicy", "elasticPolicy", "pytorchReplicaSpecs", "nprocPerNode"}
# Before RunPolicy (kubeflow/pytorch-operator's v1) these sat in spec; today's CRD prunes them.
LEGACY_KEYS = {"cleanPodPolicy", "ttlSecondsAfterFinished", "activeDeadlineSeconds", "backoffLimit", "schedulingPolicy"}
REPLICA_KEYS = {"replicas", "template", "restartPolicy"}
RESTART = ("Always", "OnFailure", "Never", "ExitCode")
RUN_POLICY_KEYS = {
    "cleanPodPolicy",
    "ttlSecondsAfterFinished",
    "activeDeadlineSeconds",
    "backoffLimit",
    "schedulingPolicy",
    "suspend",
    "managedBy",
}
ELASTIC_KEYS = {
    "minReplicas",
    "maxReplicas",
    "rdzvBackend",
    "rdzvPort",
    "rdzvHost",
    "rdzvId",
    "rdzvConf",
    "standalone",
    "nProcPerNode",
    "maxRestarts",
    "metrics",
}
INJECTED = frozenset(
    {
        "MASTER_ADDR",
        "MASTER_PORT",
        "WORLD_SIZE",
        "RANK",
        "PYTHONUNBUFFERED",
        "PET_MASTER_ADDR",
        "PET_MASTER_PORT",
        "PET_NNODES",
        "PET_NODE_RANK",
        "PET_NPROC_PER_NODE",
    }
)
ELASTIC_INJECTED = frozenset(
    {"PET_RDZV_ENDPOINT", "PET_RDZV_BACKEND", "PET_NNODES", "PET_MAX_RESTARTS", "PET_RDZV_CONF"}
)


def _specs(doc: Any) -> dict:
    specs = get(doc.data, "spec", "pytorchReplicaSpecs")
    return specs if isinstance(specs, dict) else {}


class PyTorchJobAdapter(Adapter):
    kind = "PyTorchJob"
    groups = ("kubeflow.org",)

    def templates(self, doc: Any) -> list[Template]:
        elastic = isinstance(get(doc.data, "spec", "elasticPolicy"), dict)
        injected = INJECTED | (ELASTIC_INJECTED if elastic else frozenset())
        out = []
        for role in ROLES:
            rs = _specs(doc).get(role)
            tpl = get(rs, "template")
            if not isinstance(rs, dict) or not isinstance(tpl, dict):
                continue
            reps = as_int(rs.get("replicas"))
            rp = rs.get("restartPolicy")
            out.append(
                Template(
                    tpl,
                    ("spec", "pytorchReplicaSpecs", role, "template"),
                    1 if reps is None else reps,
                    role=role,
                    restart_policy=rp if isinstance(rp, str) else "OnFailure",
                    restart_path=("spec", "pytorchReplicaSpecs", role) + (("restartPolicy",) if rp else ()),
                    injected_env=injected,
                    rank_sources=frozenset({RANK_ENV}),
                    trainer_container="pytorch",
                )
            )
        return out

    def facts(self, doc: Any) -> Facts:
        tpls = self.templates(doc)
        total = sum(t.pods or 0 for t in tpls) if tpls else None
        facts = Facts("PyTorchJob", total, "replicas (Master + Worker)", dns="managed")
        first = "master" if "Master" in _specs(doc) else "worker"
        facts.master_hosts = (f"{doc.name}-{first}-0",)
        facts.pod_identity = {"training.kubeflow.org/job-name": doc.name}
        facts.pod0_index = {"training.kubeflow.org/replica-type": first, "training.kubeflow.org/replica-index": "0"}
        suspend = get(doc.data, "spec", "runPolicy", "suspend")
        facts.suspend = suspend if isinstance(suspend, bool) else None
        facts.suspend_path = ("spec", "runPolicy", "suspend")
        stated = nproc_per_node(doc)
        if stated is not None:
            facts.nproc_stated = (stated[0], stated[1], "nprocPerNode")
        if as_int(get(doc.data, "spec", "runPolicy", "backoffLimit")) is None:
            legacy = (
                " (spec.backoffLimit is no field of kubeflow.org/v1: it belongs in runPolicy)"
                if get(doc.data, "spec", "backoffLimit") is not None
                else ""
            )
            facts.restarts_unbounded = (f"no runPolicy.backoffLimit{legacy}", "set runPolicy.backoffLimit")
        return facts

    def structure(self, doc: Any, ctx: Any) -> Iterator[tuple[tuple, str]]:
        spec = doc.data.get("spec")
        if not isinstance(spec, dict):
            yield ("spec",), "spec must be a mapping with pytorchReplicaSpecs"
            return
        if doc.name and not k8s.is_dns1035_label(doc.name):
            yield (
                ("metadata", "name"),
                f"a PyTorchJob's name must be a DNS-1035 label (starts with a letter), got {doc.name!r}",
            )
        yield from unknown_fields(
            spec, SPEC_KEYS | LEGACY_KEYS, ("spec",), "unknown field spec.{key} (PyTorchJob has {allowed})", SPEC_KEYS
        )
        specs = spec.get("pytorchReplicaSpecs")
        if not isinstance(specs, dict) or not specs:
            yield ("spec",), "pytorchReplicaSpecs must map Master and/or Worker to replica specs"
            return
        for role, rs in specs.items():
            path = ("spec", "pytorchReplicaSpecs", role)
            if role not in ROLES:
                yield path, f"replica type {role!r} is not Master or Worker"
                continue
            if not isinstance(rs, dict):
                yield path, f"{role} must be a mapping with replicas and template"
                continue
            yield from unknown_fields(rs, REPLICA_KEYS, path, "unknown field {key!r} in a replica spec ({allowed})")
            reps = rs.get("replicas")
            if role == "Master" and reps is not None and reps != 1:
                yield path + ("replicas",), f"Master replicas must be 1, got {reps!r}"
            elif reps is not None and (as_int(reps) is None or reps < 1):
                yield path + ("replicas",), f"{role} replicas must be an integer >= 1, got {reps!r}"
            rp = rs.get("restartPolicy")
            if rp is not None and rp not in RESTART:
                yield path + ("restartPolicy",), f"restartPolicy {rp!r} must be one of {', '.join(RESTART)}"
            containers = get(rs, "template", "spec", "containers")
            if not isinstance(containers, list) or not containers:
                yield path + ("template",), f"{role} needs template.spec.containers"
            elif not any(isinstance(c, dict) and c.get("name") == "pytorch" for c in containers):
                yield (
                    path + ("template", "spec", "containers"),
                    f"{role} has no container named 'pytorch': the operator wires (env, port) and the webhook "
                    "requires the container named pytorch",
                )
        elastic = spec.get("elasticPolicy")
        if elastic is not None:
            if not isinstance(elastic, dict):
                yield ("spec", "elasticPolicy"), "elasticPolicy must be a mapping"
            else:
                if "Worker" not in specs:
                    yield ("spec", "elasticPolicy"), "elasticPolicy needs a Worker replica spec"
                yield from unknown_fields(
                    elastic, ELASTIC_KEYS, ("spec", "elasticPolicy"), "unknown field elasticPolicy.{key}"
                )
                if "nProcPerNode" in elastic and "nprocPerNode" in spec:
                    yield (
                        ("spec", "elasticPolicy", "nProcPerNode"),
                        "elasticPolicy.nProcPerNode (deprecated) must not be used with spec.nprocPerNode",
                    )
                low, high = as_int(elastic.get("minReplicas")), as_int(elastic.get("maxReplicas"))
                if low is not None and high is not None and low > high:
                    yield ("spec", "elasticPolicy", "minReplicas"), f"minReplicas {low} > maxReplicas {high}"
        npn = spec.get("nprocPerNode")
        if npn is not None and not (isinstance(npn, str) and (npn in ("auto", "cpu", "gpu") or npn.isdigit())):
            yield (
                ("spec", "nprocPerNode"),
                f"nprocPerNode must be a string: 'auto', 'cpu', 'gpu' or a number such as \"8\", got {npn!r}",
            )
        run = spec.get("runPolicy")
        if isinstance(run, dict):
            yield from unknown_fields(run, RUN_POLICY_KEYS, ("spec", "runPolicy"), "unknown field runPolicy.{key}")


def nproc_per_node(doc: Any) -> tuple[str, tuple] | None:
    """(value, path) of spec.nprocPerNode (or the deprecated elasticPolicy.nProcPerNode)."""
    for path in (("spec", "nprocPerNode"), ("spec", "elasticPolicy", "nProcPerNode")):
        value = get(doc.data, *path)
        if isinstance(value, (str, int)) and not isinstance(value, bool):
            return str(value), path
    return None


class KubeDLPyTorchJobAdapter(PyTorchJobAdapter):
    """kubedl's PyTorchJob (training.kubedl.io/v1alpha1): the same replica specs and injected variables, with
    the RunPolicy fields inline in spec (spec.backoffLimit, not runPolicy) and more of its own (modelVersion,
    cacheBackend ...), so only the replica specs are checked structurally."""

    groups = ("training.kubedl.io",)

    def facts(self, doc: Any) -> Facts:
        facts = super().facts(doc)
        facts.kind = "kubedl PyTorchJob"
        facts.restarts_unbounded = (
            None
            if as_int(get(doc.data, "spec", "backoffLimit")) is not None
            else ("no spec.backoffLimit", "set spec.backoffLimit")
        )
        return facts

    def structure(self, doc: Any, ctx: Any) -> Iterator[tuple[tuple, str]]:
        return iter(())


ADAPTERS = [PyTorchJobAdapter(), KubeDLPyTorchJobAdapter()]
