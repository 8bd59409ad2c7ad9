"""Realistic, valid manifests for the lint tests to mutate, and a lint shortcut."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
import yaml

from kgen.lint.api import LintOptions, lint_text

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def labels(name: str) -> dict:
    return {"app.kubernetes.io/name": "kgen", "app.kubernetes.io/instance": name}


def service(name: str = "llama") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": "ml", "labels": labels(name)},
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {"app.kubernetes.io/instance": name, "kgen.dev/role": "trainer"},
            "ports": [{"name": "rendezvous", "port": 29500, "targetPort": 29500}],
        },
    }


def container(name: str = "llama", nodes: int = 4, gpus: int = 8) -> dict:
    return {
        "name": "trainer",
        "image": "ghcr.io/acme/train:1.4",
        "command": ["torchrun"],
        "args": [
            f"--nnodes={nodes}",
            f"--nproc-per-node={gpus}",
            "--node-rank=$(NODE_RANK)",
            f"--master-addr={name}-0.{name}",
            "--master-port=29500",
            "train.py",
            "--lr=3e-4",
        ],
        "ports": [{"name": "rendezvous", "containerPort": 29500}],
        "env": [
            {
                "name": "NODE_RANK",
                "valueFrom": {
                    "fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}
                },
            },
            {"name": "NCCL_DEBUG", "value": "WARN"},
        ],
        "resources": {
            "requests": {"cpu": "16", "memory": "200Gi", "nvidia.com/gpu": gpus},
            "limits": {"memory": "200Gi", "nvidia.com/gpu": gpus},
        },
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
    }


def pod_spec(name: str = "llama", nodes: int = 4, gpus: int = 8, restart: str = "Never") -> dict:
    return {
        "restartPolicy": restart,
        "subdomain": name,
        "containers": [container(name, nodes, gpus)],
        "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}}],
    }


def job(name: str = "llama", nodes: int = 4, gpus: int = 8) -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "ml", "labels": labels(name)},
        "spec": {
            "completions": nodes,
            "parallelism": nodes,
            "completionMode": "Indexed",
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {**labels(name), "kgen.dev/role": "trainer"}},
                "spec": pod_spec(name, nodes, gpus),
            },
        },
    }


def statefulset(name: str = "llama", nodes: int = 4, gpus: int = 8) -> dict:
    spec = pod_spec(name, nodes, gpus, restart="Always")
    del spec["subdomain"]
    c = spec["containers"][0]
    # a StatefulSet restarts a container that ends: the pod stays idle after training (KG129)
    c["command"] = ["bash", "-c", 'torchrun "$@" && sleep infinity', "torchrun"]
    c["env"][0] = {
        "name": "NODE_RANK",
        "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['apps.kubernetes.io/pod-index']"}},
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": "ml", "labels": labels(name)},
        "spec": {
            "serviceName": name,
            "replicas": nodes,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {**labels(name), "kgen.dev/role": "trainer"}},
            "template": {"metadata": {"labels": {**labels(name), "kgen.dev/role": "trainer"}}, "spec": spec},
        },
    }


def hide_not_ready(docs: list) -> list:
    """The "job" base with a Service that hides not-ready pods while a c10d rendezvous needs pod 0's name
    before the pods are Ready (pod 0 resolves it to decide that it hosts the store): KG102, a warning, the
    only finding."""
    docs[0]["spec"].pop("publishNotReadyAddresses")
    args = docs[1]["spec"]["template"]["spec"]["containers"][0]["args"]
    name = docs[1]["metadata"]["name"]
    args[2:5] = ["--rdzv-backend=c10d", f"--rdzv-endpoint={name}-0.{name}:29500", f"--rdzv-id={name}"]
    return docs


def network_policy(name: str = "llama") -> dict:
    """The policy kgen render emits: ingress to the run's pods only from the run's pods."""
    sel = {"matchLabels": {"app.kubernetes.io/instance": name, "kgen.dev/role": "trainer"}}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            "podSelector": sel,
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [{"podSelector": copy.deepcopy(sel)}]}],
        },
    }


def configmap(name: str = "llama-config") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "ml"},
        "data": {"train.yaml": "lr: 3e-4\n", "ENABLE": "yes"},
    }


def pdb(name: str = "llama") -> dict:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"minAvailable": 4, "selector": {"matchLabels": {"app.kubernetes.io/instance": name}}},
    }


BASES = {
    "job": lambda: [service(), job(), network_policy()],
    "sts": lambda: [service(), statefulset(), network_policy()],
    "cm": lambda: [configmap()],
    "pdb": lambda: [pdb()],
}


def dump(docs: list) -> str:
    return yaml.dump_all(docs, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=False)


def lint_docs(docs: list, version: str = "1.37", **kw):
    return lint_text(dump(docs), "test.yaml", LintOptions(kubernetes_version=version, **kw))


def rule_ids(result) -> set[str]:
    return {f.rule_id for f in result.findings}


def deep(value):
    return copy.deepcopy(value)


def set_at(path, value):
    """Mutation: set docs[path[0]]...[path[-1]] = value (create dicts on the way)."""

    def mutate(docs):
        node = docs
        for step in path[:-1]:
            if isinstance(node, dict) and step not in node:
                node[step] = {}
            node = node[step]
        node[path[-1]] = value

    return mutate


def delete_at(path):
    """Mutation: delete docs[path[0]]...[path[-1]]."""

    def mutate(docs):
        node = docs
        for step in path[:-1]:
            node = node[step]
        del node[path[-1]]

    return mutate


def all_of(*fns):
    """Mutation: every one of fns, in order."""

    def mutate(docs):
        for fn in fns:
            fn(docs)

    return mutate


LINT_TIMEOUT = 120  # hard limit per `kgen lint` process; each case takes about a second


def run_lint(args: list[str], stdin_writer=None, preexec_fn=None) -> tuple[int, str, str, float, float]:
    """(exit code, stdout, stderr, seconds, peak RSS MiB) of a real `kgen lint` process (killed, and
    the test failed, past LINT_TIMEOUT)."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-m", "kgen", "lint", *args],
            stdout=out,
            stderr=err,
            stdin=subprocess.PIPE if stdin_writer else subprocess.DEVNULL,
            env=env,
            preexec_fn=preexec_fn,  # only to drop privileges (the permission test, as root)
        )
        writer = None
        if stdin_writer:
            writer = threading.Thread(target=stdin_writer, args=(proc.stdin,), daemon=True)
            writer.start()
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
                break
            if time.monotonic() - start > LINT_TIMEOUT:
                proc.kill()
                os.wait4(proc.pid, 0)
                proc.returncode = -9
                pytest.fail(f"kgen lint {args} did not end within {LINT_TIMEOUT} s")
            time.sleep(0.01)
        seconds = time.monotonic() - start
        if writer:
            writer.join(10)
        out.seek(0)
        err.seek(0)
        return (
            proc.returncode,
            out.read().decode(),
            err.read().decode(),
            seconds,
            usage.ru_maxrss / 1024,
        )
