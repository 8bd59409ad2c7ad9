"""Every rule: a failing case that reports it and a passing case that does not.

Cases mutate realistic, valid manifests (conftest.BASES); each base alone lints clean.
"""

from __future__ import annotations

import pytest
from lint_helpers import BASES, all_of, delete_at, hide_not_ready, lint_docs, rule_ids, set_at

from kgen.findings import Severity
from kgen.lint.registry import load_rules


def _append(path, value):
    def mutate(docs):
        node = docs
        for step in path:
            node = node[step]
        node.append(value)

    return mutate


def _peers_by_ip(master: bool, service: bool = True):
    """A Job without a subdomain whose pods read their own IP (a status.podIP fieldRef) and run a script lint
    cannot see (it publishes the address elsewhere); ``master``: the manifest also names a master host;
    without ``service`` no Service selects the pods."""

    def mutate(docs):
        if not service:
            docs[0]["spec"]["selector"] = {"app": "inference"}
        c = docs[1]["spec"]["template"]["spec"]["containers"][0]
        del docs[1]["spec"]["template"]["spec"]["subdomain"]
        c["command"], c["args"] = ["/bin/bash", "/app/entrypoint.sh"], []
        c["env"] = [
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "WORLD_SIZE", "value": "4"},
        ] + ([{"name": "MASTER_ADDR", "value": "llama-0.llama"}] if master else [])

    return mutate


_INDEX = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
J = (1,)  # the Job / StatefulSet document in the "job" / "sts" bases
POD = (1, "spec", "template", "spec")
C0 = POD + ("containers", 0)
ENV = C0 + ("env",)
RES = C0 + ("resources",)
SVC = (0,)


# (rule, base, mutation, kubernetes version) -- every case must report `rule`
FAILING = [
    ("KG020", "cm", delete_at((0, "metadata", "name")), "1.37"),
    ("KG021", "cm", set_at((0, "metadata", "name"), "Train_Config"), "1.37"),
    ("KG021", "sts", set_at(J + ("metadata", "name"), "train.llama"), "1.37"),
    ("KG022", "job", set_at(SVC + ("metadata", "name"), "7b-train"), "1.35"),
    ("KG022", "job", set_at(SVC + ("metadata", "name"), "train.llama"), "1.37"),
    ("KG023", "cm", set_at((0, "metadata", "namespace"), "ML_Team"), "1.37"),
    ("KG024", "cm", set_at((0, "metadata", "labels"), {"model": "llama/3"}), "1.37"),
    ("KG024", "cm", set_at((0, "metadata", "labels"), {"bad key": "x"}), "1.37"),
    ("KG024", "job", set_at(POD + ("nodeSelector",), {"gpu": "NVIDIA H100 80GB HBM3"}), "1.37"),
    ("KG025", "cm", set_at((0, "metadata", "annotations"), {"a/b/c": "x"}), "1.37"),
    ("KG025", "cm", set_at((0, "metadata", "annotations"), {"big": "x" * (257 * 1024)}), "1.37"),
    ("KG026", "cm", set_at((0, "data", "blob"), "x" * (300 * 1024)), "1.37"),
    (
        "KG030",
        "job",
        all_of(set_at(SVC + ("spec", "clusterIP"), "10.0.0.1"), delete_at(SVC + ("spec", "ports"))),
        "1.37",
    ),
    ("KG031", "job", _append(SVC + ("spec", "ports"), {"port": 29501}), "1.37"),
    ("KG031", "job", set_at(SVC + ("spec", "ports", 0, "name"), "C10D_port"), "1.37"),
    ("KG032", "job", set_at(SVC + ("spec", "ports", 0, "port"), 70000), "1.37"),
    ("KG032", "job", set_at(C0 + ("ports", 0, "protocol"), "tcp"), "1.37"),
    ("KG033", "job", set_at(SVC + ("spec", "ports", 0, "targetPort"), "c10d-rendezvous-port"), "1.37"),
    ("KG034", "job", set_at(SVC + ("spec", "type"), "NodePort"), "1.37"),
    ("KG040", "job", set_at(C0 + ("name",), "Trainer_0"), "1.37"),
    ("KG041", "job", delete_at(C0 + ("image",)), "1.37"),
    ("KG041", "job", set_at(C0 + ("image",), "<image>"), "1.37"),
    ("KG041", "job", set_at(C0 + ("image",), "us-central1-docker.pkg.dev/PROJECT/train:1.4"), "1.37"),
    ("KG041", "job", set_at(C0 + ("image",), "${IMAGE}"), "1.37"),
    ("KG042", "job", set_at(C0 + ("ports", 0, "name"), "c10d-rendezvous1"), "1.37"),
    ("KG042", "job", set_at(C0 + ("ports", 0, "name"), "29500"), "1.37"),
    ("KG043", "job", _append(ENV, {"name": "NCCL=DEBUG", "value": "1"}), "1.37"),
    ("KG043", "job", _append(ENV, {"name": "1GPU", "value": "1"}), "1.31"),
    ("KG044", "job", _append(ENV, {"name": "NCCL_DEBUG", "value": "INFO"}), "1.37"),
    ("KG045", "job", set_at(ENV + (0, "valueFrom", "fieldRef", "fieldPath"), "spec.hostname"), "1.37"),
    ("KG046", "job", set_at(RES + ("limits", "gpu"), 8), "1.37"),
    ("KG047", "job", set_at(RES + ("limits", "memory"), "512GB"), "1.37"),
    ("KG047", "job", set_at(POD + ("volumes", 0, "emptyDir", "sizeLimit"), "64 Gi"), "1.37"),
    ("KG047", "job", all_of(set_at(RES + ("requests", "cpu"), "-1"), set_at(RES + ("limits", "cpu"), "-1")), "1.37"),
    (
        "KG047",
        "job",
        all_of(set_at(RES + ("requests", "memory"), "-5Gi"), set_at(RES + ("limits", "memory"), -5)),
        "1.37",
    ),
    ("KG047", "job", set_at(POD + ("volumes", 0, "emptyDir", "sizeLimit"), "-1Gi"), "1.37"),
    ("KG048", "job", set_at(RES + ("requests", "memory"), "300Gi"), "1.37"),
    ("KG049", "job", set_at(RES + ("requests", "nvidia.com/gpu"), 4), "1.37"),
    ("KG049", "job", delete_at(RES + ("limits", "nvidia.com/gpu")), "1.37"),
    (
        "KG049",
        "job",
        all_of(set_at(RES + ("requests", "hugepages-2Mi"), "1Gi"), set_at(RES + ("limits", "hugepages-2Mi"), "2Gi")),
        "1.37",
    ),
    (
        "KG050",
        "job",
        all_of(set_at(RES + ("limits", "nvidia.com/gpu"), 0.5), set_at(RES + ("requests", "nvidia.com/gpu"), 0.5)),
        "1.37",
    ),
    (
        "KG051",
        "job",
        all_of(set_at(POD + ("volumes", 0, "name"), "dshm_vol"), set_at(C0 + ("volumeMounts", 0, "name"), "dshm_vol")),
        "1.37",
    ),
    ("KG052", "job", set_at(C0 + ("volumeMounts", 0, "name"), "shm"), "1.37"),
    ("KG053", "job", set_at(POD + ("volumes", 0, "emptyDir", "medium"), "memory"), "1.37"),
    ("KG054", "job", set_at(C0 + ("imagePullPolicy",), "Sometimes"), "1.37"),
    ("KG054", "job", set_at(POD + ("restartPolicy",), "Sometimes"), "1.37"),
    ("KG055", "job", set_at(POD + ("hostname",), "train.llama"), "1.37"),
    (
        "KG056",
        "job",
        set_at(POD + ("tolerations",), [{"key": "nvidia.com/gpu", "operator": "Exists", "value": "x"}]),
        "1.37",
    ),
    ("KG057", "job", set_at(POD + ("activeDeadlineSeconds",), 0), "1.37"),
    ("KG057", "job", set_at(POD + ("securityContext",), {"runAsUser": 9999999999999}), "1.37"),
    ("KG057", "job", set_at(C0 + ("securityContext",), {"runAsGroup": -1}), "1.37"),
    ("KG058", "job", _append(ENV, {"name": "HF_TOKEN", "value": "hf_abc"}), "1.37"),
    ("KG058", "job", _append(ENV, {"name": "DB_PASSWORD_FILE", "value": "hunter2"}), "1.37"),  # not a path
    ("KG058", "job", _append(ENV, {"name": "WANDB_API_KEY", "value": "0123abcd"}), "1.37"),
    ("KG058", "job", _append(ENV, {"name": "AWS_SECRET_ACCESS_KEY", "value": "wJalrXUtnFEMI"}), "1.37"),
    ("KG059", "job", set_at(C0 + ("image",), "ghcr.io/acme/train:latest"), "1.37"),
    ("KG059", "job", set_at(C0 + ("image",), "localhost:5000/train"), "1.37"),
    ("KG060", "job", delete_at(POD + ("restartPolicy",)), "1.37"),
    ("KG060", "job", set_at(POD + ("restartPolicy",), "Always"), "1.37"),
    (
        "KG061",
        "job",
        all_of(
            set_at(POD + ("restartPolicy",), "OnFailure"),
            set_at(
                J + ("spec", "podFailurePolicy"),
                {"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [1]}}]},
            ),
        ),
        "1.37",
    ),
    ("KG062", "job", delete_at(J + ("spec", "completions")), "1.37"),
    ("KG063", "job", set_at(J + ("metadata", "name"), "a" * 64), "1.37"),
    (
        "KG063",
        "job",
        all_of(
            set_at(J + ("metadata", "name"), "a" * 60),
            set_at(J + ("spec", "completions"), 1000),
            set_at(J + ("spec", "parallelism"), 1000),
        ),
        "1.37",
    ),
    ("KG064", "job", set_at(J + ("spec", "completionMode"), "indexed"), "1.37"),
    ("KG064", "job", set_at(J + ("spec", "parallelism"), 100001), "1.37"),
    (
        "KG065",
        "job",
        all_of(delete_at(J + ("spec", "completionMode")), set_at(J + ("spec", "backoffLimitPerIndex"), 1)),
        "1.37",
    ),
    ("KG065", "job", set_at(J + ("spec", "maxFailedIndexes"), 1), "1.37"),
    (
        "KG065",
        "job",
        all_of(
            set_at(J + ("spec", "completions"), 200_000),
            set_at(J + ("spec", "parallelism"), 20_000),
            set_at(J + ("spec", "backoffLimitPerIndex"), 1),
        ),
        "1.37",
    ),
    (
        "KG066",
        "job",
        set_at(
            J + ("spec", "podFailurePolicy"),
            {"rules": [{"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [0, 1]}}]},
        ),
        "1.37",
    ),
    (
        "KG066",
        "job",
        set_at(
            J + ("spec", "podFailurePolicy"),
            {
                "rules": [
                    {"action": "FailJob", "onExitCodes": {"containerName": "nope", "operator": "In", "values": [3, 1]}}
                ]
            },
        ),
        "1.37",
    ),
    (
        "KG066",
        "job",
        set_at(J + ("spec", "podFailurePolicy"), {"rules": [{"action": "FailJob", "onPodConditions": []}]}),
        "1.37",
    ),  # an empty onPodConditions is no condition: the rule matches nothing
    (
        "KG067",
        "job",
        set_at(
            J + ("spec", "podFailurePolicy"),
            {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]},
        ),
        "1.37",
    ),
    (
        "KG068",
        "job",
        all_of(
            delete_at(J + ("spec", "completionMode")),
            set_at(J + ("spec", "successPolicy"), {"rules": [{"succeededCount": 1}]}),
        ),
        "1.37",
    ),
    ("KG069", "job", set_at(J + ("spec", "selector"), {"matchLabels": {"a": "b"}}), "1.37"),
    ("KG070", "job", set_at(J + ("spec", "backoffLimit"), -1), "1.37"),
    ("KG080", "sts", all_of(set_at(J + ("metadata", "name"), "a" * 53)), "1.37"),
    ("KG081", "sts", set_at(POD + ("restartPolicy",), "Never"), "1.37"),
    ("KG082", "sts", set_at(J + ("spec", "selector", "matchLabels", "kgen.dev/role"), "master"), "1.37"),
    ("KG082", "sts", set_at(J + ("spec", "selector"), {}), "1.37"),
    ("KG083", "sts", set_at(J + ("spec", "podManagementPolicy"), "parallel"), "1.37"),
    ("KG083", "sts", set_at(J + ("spec", "serviceName"), "train.llama"), "1.37"),
    ("KG085", "cm", set_at((0, "data", "my file.yaml"), "x"), "1.37"),
    ("KG085", "cm", set_at((0, "binaryData"), {"ENABLE": "eWVz"}), "1.37"),
    ("KG090", "pdb", set_at((0, "spec", "maxUnavailable"), 1), "1.37"),
    ("KG090", "pdb", set_at((0, "spec", "minAvailable"), "150%"), "1.37"),
    ("KG100", "job", set_at(POD + ("subdomain",), "other"), "1.37"),
    ("KG100", "job", _peers_by_ip(master=True, service=False), "1.37"),
    ("KG101", "job", set_at(SVC + ("spec", "clusterIP"), "10.0.0.9"), "1.37"),
    ("KG102", "job", hide_not_ready, "1.37"),  # c10d: pod 0 resolves its own name to host the store
    (  # a readiness probe: the names appear only once it passes
        "KG102",
        "job",
        all_of(
            delete_at(SVC + ("spec", "publishNotReadyAddresses")),
            set_at(C0 + ("readinessProbe",), {"tcpSocket": {"port": 29500}}),
        ),
        "1.37",
    ),
    (
        "KG140",
        "job",
        all_of(
            set_at(SVC + ("spec", "selector", "role"), "master"),
            set_at(POD[:-1] + ("metadata", "labels", "role"), "master"),
        ),
        "1.37",
    ),
    ("KG103", "job", set_at(SVC + ("spec", "selector", "role"), "master"), "1.37"),
    ("KG104", "job", delete_at(POD + ("subdomain",)), "1.37"),
    ("KG104", "job", _peers_by_ip(master=True), "1.37"),  # the pod's IP, but a DNS name as the master
    ("KG105", "job", set_at(C0 + ("args", 3), "--master-addr=llama.ml.svc.cluster.local"), "1.37"),
    ("KG105", "job", _append(ENV, {"name": "MASTER_ADDR", "value": "llama"}), "1.37"),
    ("KG106", "job", set_at(C0 + ("args", 0), "--nnodes=2"), "1.37"),
    ("KG106", "sts", set_at(J + ("spec", "replicas"), 8), "1.37"),
    ("KG107", "job", set_at(C0 + ("args", 1), "--nproc_per_node=16"), "1.37"),
    ("KG139", "job", set_at(C0 + ("args", 1), "--nproc_per_node=3"), "1.37"),
    ("KG194", "job", set_at(C0 + ("args", 1), "--nproc_per_node=4"), "1.37"),
    (
        "KG108",
        "job",
        all_of(  # env:// initialisation reads WORLD_SIZE (under torchrun a hand-set one is KG109's)
            set_at(C0 + ("command",), ["python3", "train.py"]),
            set_at(C0 + ("args",), []),
            _append(ENV, {"name": "WORLD_SIZE", "value": "16"}),
        ),
        "1.37",
    ),
    ("KG109", "job", _append(ENV, {"name": "LOCAL_RANK", "value": "0"}), "1.37"),
    ("KG109", "job", _append(ENV, {"name": "RANK", "valueFrom": {"fieldRef": {"fieldPath": _INDEX}}}), "1.37"),
    ("KG110", "job", set_at(POD + ("volumes", 0, "emptyDir"), {}), "1.37"),
    (
        "KG111",
        "job",
        all_of(
            set_at(C0 + ("command",), ["bash", "-c"]),
            set_at(
                C0 + ("args",),
                [
                    "sleep 30\nexec torchrun --nnodes=4 --nproc-per-node=8 --node-rank=$NODE_RANK "
                    "--master-addr=llama-0.llama train.py"
                ],
            ),
        ),
        "1.37",
    ),
    (
        "KG112",
        "job",
        set_at(C0 + ("command",), ["torchrun", "--rdzv-backend=c10d", "--rdzv-endpoint=llama-0.llama:29400"]),
        "1.37",
    ),
    (  # a readiness probe holds pod 0 back from Ready, and with it pod 1's creation
        "KG113",
        "sts",
        all_of(
            delete_at(J + ("spec", "podManagementPolicy")),
            set_at(C0 + ("readinessProbe",), {"httpGet": {"path": "/healthz", "port": 8080}}),
        ),
        "1.37",
    ),
    ("KG213", "sts", delete_at(J + ("spec", "podManagementPolicy")), "1.37"),
    ("KG215", "job", set_at(C0 + ("args", 3), "--master-addr=$MASTER_HOST"), "1.37"),  # exec form: no shell
    ("KG215", "job", set_at(C0 + ("args", 5), "${DATA_DIR}/train.py"), "1.37"),
    (  # the work, then an endless loop: the Job never completes
        "KG214",
        "job",
        all_of(
            set_at(C0 + ("command",), ["bash", "-c", "torchrun train.py\nwhile true; do sleep 3600; done"]),
            delete_at(C0 + ("args",)),
        ),
        "1.37",
    ),
    ("KG114", "job", _append(ENV, {"name": "RANK_OF_NODE", "value": "$(JOB_COMPLETION_INDEX)"}), "1.37"),
    ("KG115", "job", delete_at(J + ("spec", "completionMode")), "1.37"),
    ("KG116", "job", set_at(J + ("spec", "parallelism"), 2), "1.37"),
    # counts wherever they are written, namespaces in FQDNs
    ("KG105", "job", set_at(C0 + ("args", 3), "--master-addr=llama-0.llama.default.svc.cluster.local"), "1.37"),
    ("KG105", "job", set_at(C0 + ("args", 3), "--master-addr=llama-0.llama.ml.cluster.local"), "1.37"),
    ("KG106", "job", _append(ENV, {"name": "NNODES", "value": "2"}), "1.37"),
    ("KG106", "sts", _append(ENV, {"name": "PET_NNODES", "value": "8"}), "1.37"),
    ("KG107", "job", _append(ENV, {"name": "GPUS_PER_NODE", "value": "9"}), "1.37"),
    ("KG139", "job", _append(ENV, {"name": "GPUS_PER_NODE", "value": "5"}), "1.37"),
    ("KG194", "job", _append(ENV, {"name": "GPUS_PER_NODE", "value": "2"}), "1.37"),
    # failure policy that retries one pod alone
    ("KG117", "job", set_at(POD + ("restartPolicy",), "OnFailure"), "1.37"),
    ("KG117", "job", set_at(J + ("spec", "backoffLimit"), 3), "1.37"),
    ("KG117", "job", delete_at(J + ("spec", "backoffLimit")), "1.37"),  # the default, 6
    (
        "KG117",
        "job",
        all_of(set_at(J + ("spec", "backoffLimit"), 0), set_at(J + ("spec", "backoffLimitPerIndex"), 2)),
        "1.37",
    ),
    # BestEffort training pod
    ("KG118", "job", set_at(RES, {"limits": {"nvidia.com/gpu": 8}}), "1.37"),
    ("KG118", "sts", delete_at(RES), "1.37"),
    # launcher mode vs pod count
    ("KG119", "job", set_at(C0 + ("args", 0), "--standalone"), "1.37"),
    ("KG119", "job", set_at(C0 + ("args", 0), "--max-restarts=0"), "1.37"),  # no --nnodes: 1
    ("KG119", "job", set_at(C0 + ("args", 3), "--rdzv-id=llama"), "1.37"),  # no --master-addr: 127.0.0.1
    ("KG119", "job", set_at(C0 + ("args", 2), "--rdzv-id=llama"), "1.37"),  # no --node-rank: all 0
    ("KG119", "sts", set_at(C0 + ("args", 2), "--node-rank=0"), "1.37"),
    (
        "KG119",
        "job",
        set_at(C0 + ("args",), ["--nnodes=4", "--nproc-per-node=8", "--rdzv-backend=c10d", "train.py"]),
        "1.37",
    ),
    # node rank source of the wrong kind (or too new)
    ("KG120", "sts", set_at(C0 + ("args", 2), "--node-rank=$(JOB_COMPLETION_INDEX)"), "1.37"),
    (
        "KG120",
        "job",
        set_at(ENV + (0, "valueFrom", "fieldRef", "fieldPath"), "metadata.labels['apps.kubernetes.io/pod-index']"),
        "1.37",
    ),
    ("KG120", "sts", lambda docs: None, "1.27"),  # the pod-index label arrives in 1.28
    (
        "KG120",
        "job",
        set_at(ENV + (0, "valueFrom", "fieldRef", "fieldPath"), "metadata.name"),
        "1.37",
    ),  # --node-rank=$(NODE_RANK) from the pod's name: not a number
    # hostNetwork without cluster DNS
    ("KG123", "job", set_at(POD + ("hostNetwork",), True), "1.37"),
    ("KG123", "sts", all_of(set_at(POD + ("hostNetwork",), True), set_at(POD + ("dnsPolicy",), "Default")), "1.37"),
    # processes per node written twice
    (
        "KG141",
        "job",
        all_of(
            set_at(RES, {"requests": {"cpu": "8", "memory": "16Gi"}}),
            delete_at(C0 + ("volumeMounts",)),
            set_at(C0 + ("args", 1), "--nproc-per-node=4"),
            _append(ENV, {"name": "NPROC_PER_NODE", "value": "2"}),
        ),
        "1.37",
    ),
    ("KG121", "job", _append(ENV, {"name": "CUDA_VISIBLE_DEVICES", "value": "0,1,2,3"}), "1.37"),
    # GPUs needed but not requested
    (
        "KG122",
        "job",
        all_of(
            set_at(RES, {"requests": {"cpu": "8", "memory": "64Gi"}}), set_at(C0 + ("args", 1), "--nproc-per-node=gpu")
        ),
        "1.37",
    ),
    (
        "KG122",
        "job",
        all_of(
            set_at(RES, {"requests": {"cpu": "8", "memory": "64Gi"}}),
            set_at(POD + ("tolerations",), [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]),
        ),
        "1.37",
    ),
    # the master address is each pod's own
    (
        "KG105",
        "job",
        _append(ENV, {"name": "MASTER_ADDR", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}),
        "1.37",
    ),
    ("KG105", "job", set_at(C0 + ("args", 3), "--master-addr=$(HOSTNAME)"), "1.37"),
    ("KG114", "job", set_at(C0 + ("args", 3), "--master-addr=$(MASTER_ADDR)"), "1.37"),  # no such env var
    (  # a shell variable written $(VAR): Kubernetes leaves it, and the shell runs MASTER_HOST as a command
        "KG114",
        "job",
        all_of(
            set_at(C0 + ("command",), ["bash", "-c"]),
            set_at(
                C0 + ("args",),
                [
                    "MASTER_HOST=llama-0.llama\nexec torchrun --nnodes=4 --nproc-per-node=8 --node-rank=$(NODE_RANK) "
                    "--master-addr=$(MASTER_HOST) train.py"
                ],
            ),
        ),
        "1.37",
    ),
    ("KG124", "job", set_at(SVC + ("metadata", "namespace"), "default"), "1.37"),
    # the same object twice among the inputs
    (
        "KG027",
        "cm",
        _append((), {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "llama-config", "namespace": "ml"}}),
        "1.37",
    ),
    # fields the API server checks beyond the schemas (rules_podfields.py, rules_objfields.py)
    ("KG045", "job", set_at(ENV + (0, "valueFrom", "fieldRef", "fieldPath"), "metadata.labels['a b']"), "1.37"),
    ("KG200", "job", set_at(ENV + (1, "valueFrom"), {"fieldRef": {"fieldPath": "metadata.name"}}), "1.37"),
    ("KG200", "job", set_at(ENV + (0, "valueFrom"), {}), "1.37"),
    ("KG200", "job", set_at(C0 + ("volumeMounts", 0, "mountPath"), ""), "1.37"),
    ("KG200", "job", set_at(C0 + ("terminationMessagePolicy",), "Sometimes"), "1.37"),
    (
        "KG200",
        "job",
        set_at(C0 + ("securityContext",), {"privileged": True, "allowPrivilegeEscalation": False}),
        "1.37",
    ),
    ("KG200", "job", set_at(C0 + ("readinessProbe",), {"periodSeconds": 5}), "1.37"),
    ("KG200", "job", set_at(C0 + ("livenessProbe",), {"tcpSocket": {"port": 29500}, "periodSeconds": -1}), "1.37"),
    (
        "KG200",
        "job",
        set_at(C0 + ("livenessProbe",), {"tcpSocket": {"port": 29500}, "exec": {"command": ["true"]}}),
        "1.37",
    ),
    ("KG200", "job", set_at(C0 + ("lifecycle",), {"preStop": {}}), "1.37"),
    ("KG201", "job", set_at(POD + ("dnsPolicy",), "None"), "1.37"),
    (
        "KG201",
        "job",
        set_at(POD + ("dnsConfig",), {"nameservers": ["1.1.1.1", "1.0.0.1", "8.8.8.8", "8.8.4.4"]}),
        "1.37",
    ),
    (
        "KG201",
        "job",
        set_at(
            POD + ("affinity",),
            {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}},
        ),
        "1.37",
    ),
    (
        "KG201",
        "job",
        set_at(
            POD + ("topologySpreadConstraints",),
            [{"maxSkew": 0, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}],
        ),
        "1.37",
    ),
    ("KG201", "job", all_of(set_at(POD + ("hostPID",), True), set_at(POD + ("shareProcessNamespace",), True)), "1.37"),
    ("KG201", "job", set_at(POD + ("securityContext",), {"sysctls": [{"name": "net..bad", "value": "1"}]}), "1.37"),
    ("KG201", "job", set_at(POD + ("hostAliases",), [{"ip": "300.1.1.1", "hostnames": ["a"]}]), "1.37"),
    ("KG201", "job", set_at(POD + ("priorityClassName",), "Bad Class"), "1.37"),
    ("KG201", "job", set_at(POD + ("volumes", 0, "configMap"), {"name": "x"}), "1.37"),
    (
        "KG201",
        "job",
        _append(POD + ("volumes",), {"name": "cfg", "configMap": {"name": "x", "defaultMode": 4096}}),
        "1.37",
    ),
    (
        "KG202",
        "job",
        set_at((2, "spec", "podSelector"), {"matchExpressions": [{"key": "a", "operator": "Equals", "values": ["b"]}]}),
        "1.37",
    ),
    ("KG202", "pdb", set_at((0, "spec", "selector"), {"matchExpressions": [{"key": "a", "operator": "In"}]}), "1.37"),
    ("KG203", "job", set_at((2, "spec", "policyTypes"), ["Both"]), "1.37"),
    ("KG203", "job", set_at((2, "spec", "ingress", 0, "from", 0, "ipBlock"), {"cidr": "10.0.0.0/8"}), "1.37"),
    (
        "KG203",
        "job",
        set_at((2, "spec", "ingress", 0, "from"), [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["192.168.0.0/16"]}}]),
        "1.37",
    ),
    (
        "KG204",
        "job",
        set_at(
            J + ("spec", "podFailurePolicy"),
            {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "Yes"}]}]},
        ),
        "1.37",
    ),
    ("KG204", "job", set_at(J + ("spec", "successPolicy"), {"rules": []}), "1.37"),
    ("KG204", "job", set_at(J + ("spec", "managedBy"), "not a domain"), "1.37"),
    ("KG204", "sts", set_at(J + ("spec", "ordinals"), {"start": -1}), "1.37"),
    ("KG204", "sts", set_at(J + ("spec", "persistentVolumeClaimRetentionPolicy"), {"whenDeleted": "Keep"}), "1.37"),
    ("KG205", "job", set_at(SVC + ("spec", "sessionAffinity"), "Sticky"), "1.37"),
    ("KG205", "job", set_at(SVC + ("spec", "externalTrafficPolicy"), "Local"), "1.37"),
    ("KG205", "cm", set_at((0, "binaryData"), {"b": "***"}), "1.37"),
    # a local build's name on a multi-node Job: only nodes it was loaded into can run the pods
    ("KG207", "job", set_at(C0 + ("image",), "llmtrain:dev"), "1.37"),
    (
        "KG207",
        "job",
        all_of(set_at(C0 + ("image",), "llmtrain:latest"), set_at(C0 + ("imagePullPolicy",), "Never")),
        "1.37",
    ),
    # a namespace written into the master's name, on a workload applied wherever kubectl points
    (
        "KG212",
        "job",
        all_of(
            delete_at(J + ("metadata", "namespace")),
            delete_at(SVC + ("metadata", "namespace")),
            set_at(C0 + ("args", 3), "--master-addr=llama-0.llama.ml.svc.cluster.local"),
        ),
        "1.37",
    ),
]

# (rule, base, mutation, version) -- near-misses that must NOT report `rule`
PASSING = [
    # Kubernetes' own $(VAR), its $$ escape, and a shell's -c script that expands $VAR itself
    (
        "KG215",
        "job",
        all_of(
            set_at(C0 + ("command",), ["/usr/bin/env", "bash", "-lc", 'exec torchrun --node-rank="$NODE_RANK" x.py']),
            delete_at(C0 + ("args",)),
        ),
        "1.37",
    ),
    ("KG215", "job", set_at(C0 + ("args", 2), "--node-rank=$(NODE_RANK)"), "1.37"),
    ("KG215", "job", set_at(C0 + ("args", 6), "--price=$$5"), "1.37"),
    (
        "KG215",
        "job",
        all_of(
            set_at(C0 + ("command",), ["bash", "-c", 'exec torchrun --node-rank="$NODE_RANK" train.py']),
            delete_at(C0 + ("args",)),
        ),
        "1.37",
    ),
    # a retry loop that breaks when the training succeeds: the pod ends
    (
        "KG214",
        "job",
        all_of(
            set_at(C0 + ("command",), ["bash", "-c", "while true; do torchrun train.py && break; sleep 60; done"]),
            delete_at(C0 + ("args",)),
        ),
        "1.37",
    ),
    # RANK from the pod's index beside a static torchrun without --node-rank: the node rank KG119 asks for
    (
        "KG109",
        "job",
        all_of(
            _append(ENV, {"name": "RANK", "valueFrom": {"fieldRef": {"fieldPath": _INDEX}}}),
            delete_at(C0 + ("args", 2)),
        ),
        "1.37",
    ),
    # OrderedReady without a probe: the pods start one after another (KG213, info), nothing deadlocks
    ("KG113", "sts", delete_at(J + ("spec", "podManagementPolicy")), "1.37"),
    # Parallel with a probe: every pod is created at once
    ("KG113", "sts", set_at(C0 + ("readinessProbe",), {"httpGet": {"path": "/healthz", "port": 8080}}), "1.37"),
    # a static rendezvous (--master-addr) and no probe: the name resolves a moment after the pods start, and
    # torchrun's store client retries it until then
    ("KG102", "job", delete_at(SVC + ("spec", "publishNotReadyAddresses")), "1.37"),
    # the pods read their own IP and nothing names a master host: they find each other by IP, not DNS
    ("KG104", "job", _peers_by_ip(master=False), "1.37"),
    ("KG100", "job", _peers_by_ip(master=False, service=False), "1.37"),
    # the namespace the workload is pinned to: the name resolves wherever it is applied
    ("KG212", "job", set_at(C0 + ("args", 3), "--master-addr=llama-0.llama.ml.svc.cluster.local"), "1.37"),
    (  # no namespace anywhere: the short name resolves in the pods' own namespace
        "KG212",
        "job",
        all_of(delete_at(J + ("metadata", "namespace")), delete_at(SVC + ("metadata", "namespace"))),
        "1.37",
    ),
    ("KG207", "job", set_at(C0 + ("image",), "python:3.12"), "1.37"),  # an official image pulls anywhere
    ("KG207", "job", set_at(C0 + ("image",), "ghcr.io/acme/llmtrain:dev"), "1.37"),  # a registry's full name
    (  # one pod (a one-node dev cluster that loaded the image): KG182's advice, not a risk
        "KG207",
        "job",
        all_of(
            set_at(C0 + ("image",), "llmtrain:dev"),
            set_at(J + ("spec", "completions"), 1),
            set_at(J + ("spec", "parallelism"), 1),
        ),
        "1.37",
    ),
    ("KG022", "job", set_at(SVC + ("metadata", "name"), "7b-train"), "1.36"),  # RelaxedServiceNameValidation
    ("KG021", "sts", set_at(J + ("metadata", "name"), "train.llama"), "1.26"),  # subdomain before 1.27
    ("KG043", "job", _append(ENV, {"name": "1GPU", "value": "1"}), "1.32"),  # relaxed env names
    ("KG042", "job", set_at(C0 + ("ports", 0, "name"), "c10d-rendezvous"), "1.37"),  # 15 characters
    ("KG049", "job", delete_at(RES + ("requests", "nvidia.com/gpu")), "1.37"),  # limit alone is fine
    ("KG033", "job", set_at(SVC + ("spec", "ports", 0, "targetPort"), 0), "1.37"),  # 0: unset, defaults to port
    (  # an empty value beside valueFrom is no value
        "KG200",
        "job",
        all_of(
            set_at(ENV + (1, "value"), ""), set_at(ENV + (1, "valueFrom"), {"fieldRef": {"fieldPath": "metadata.name"}})
        ),
        "1.37",
    ),
    ("KG200", "job", set_at(C0 + ("securityContext",), {"privileged": True}), "1.37"),
    (
        "KG200",
        "job",
        set_at(C0 + ("livenessProbe",), {"tcpSocket": {"port": "rendezvous"}, "periodSeconds": 0}),
        "1.37",
    ),
    ("KG200", "job", set_at(C0 + ("lifecycle",), {"preStop": {"sleep": {"seconds": 5}}}), "1.37"),
    (
        "KG201",
        "job",
        all_of(set_at(POD + ("dnsPolicy",), "None"), set_at(POD + ("dnsConfig",), {"nameservers": ["10.0.0.10"]})),
        "1.37",
    ),
    (
        "KG201",
        "job",
        set_at(POD + ("securityContext",), {"sysctls": [{"name": "net.core.somaxconn", "value": "1024"}]}),
        "1.37",
    ),
    ("KG201", "job", set_at(POD + ("volumes", 0, "emptyDir", "sizeLimit"), "1Gi"), "1.37"),
    (
        "KG202",
        "job",
        set_at((2, "spec", "podSelector"), {"matchExpressions": [{"key": "a", "operator": "Exists"}]}),
        "1.37",
    ),
    (
        "KG203",
        "job",
        set_at((2, "spec", "ingress", 0, "from"), [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}}]),
        "1.37",
    ),
    ("KG204", "job", set_at(J + ("spec", "managedBy"), "kueue.x-k8s.io/multikueue"), "1.37"),
    (
        "KG205",
        "job",
        all_of(set_at(SVC + ("spec", "type"), "NodePort"), set_at(SVC + ("spec", "externalTrafficPolicy"), "Local")),
        "1.37",
    ),
    ("KG205", "cm", set_at((0, "binaryData"), {"b": "eA=="}), "1.37"),
    # GPU counts as users write them: a quantity string (as render and the API server write it) or a number
    (
        "KG049",
        "job",
        all_of(set_at(RES + ("requests", "nvidia.com/gpu"), "8"), set_at(RES + ("limits", "nvidia.com/gpu"), 8)),
        "1.37",
    ),
    (
        "KG050",
        "job",
        all_of(set_at(RES + ("requests", "nvidia.com/gpu"), "8.0"), set_at(RES + ("limits", "nvidia.com/gpu"), "8")),
        "1.37",
    ),
    ("KG053", "job", set_at(POD + ("volumes", 0, "emptyDir", "medium"), ""), "1.37"),
    (
        "KG058",
        "job",
        _append(ENV, {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "t"}}}),
        "1.37",
    ),
    ("KG058", "job", _append(ENV, {"name": "DB_PASSWORD_FILE", "value": "/run/secrets/db"}), "1.37"),
    (
        "KG066",
        "job",
        set_at(
            J + ("spec", "podFailurePolicy"),
            {"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [1]}, "onPodConditions": []}]},
        ),
        "1.37",
    ),  # jobset examples/failure-policy: the server counts an empty onPodConditions as absent (len() > 0)
    # TOKENIZERS_PARALLELISM / MAX_TOKENS only begin like TOKEN (nebius/ml-cookbook's manifests set the first)
    ("KG058", "job", _append(ENV, {"name": "TOKENIZERS_PARALLELISM", "value": "False"}), "1.37"),
    ("KG058", "job", _append(ENV, {"name": "MAX_TOKENS", "value": "hf_looks_like_a_token"}), "1.37"),
    ("KG058", "job", _append(ENV, {"name": "TOKEN_LIMIT", "value": "4096"}), "1.37"),  # a count, not a secret
    ("KG059", "job", set_at(C0 + ("image",), "localhost:5000/train@sha256:" + "a" * 64), "1.37"),
    ("KG059", "job", set_at(C0 + ("image",), "localhost:5000/train:1.4"), "1.37"),
    ("KG041", "job", set_at(C0 + ("image",), "Registry.Example:5000/team/train_v2:Release-1.4"), "1.37"),
    ("KG041", "job", set_at(C0 + ("image",), "nvcr.io/nvidia/pytorch:24.07-py3"), "1.37"),
    ("KG060", "job", set_at(POD + ("restartPolicy",), "OnFailure"), "1.37"),
    ("KG063", "job", set_at(J + ("metadata", "name"), "a" * 61), "1.37"),  # a{61}-3 is 63
    ("KG080", "sts", set_at(J + ("metadata", "name"), "a" * 52), "1.37"),
    (
        "KG065",
        "job",
        all_of(set_at(J + ("spec", "backoffLimitPerIndex"), 1), set_at(J + ("spec", "maxFailedIndexes"), 2)),
        "1.37",
    ),
    ("KG105", "job", set_at(C0 + ("args", 3), "--master-addr=llama-0.llama.ml.svc.cluster.local"), "1.37"),
    ("KG107", "job", set_at(C0 + ("args", 1), "--nproc-per-node=gpu"), "1.37"),
    ("KG106", "job", _append(ENV, {"name": "NNODES", "value": "4"}), "1.37"),
    ("KG105", "job", set_at(C0 + ("args", 3), "--master-addr=llama-0.llama.ml.svc.cluster.local."), "1.37"),
    # /dev/shm: valid alternatives to an emptyDir
    ("KG110", "job", set_at(POD + ("volumes", 0), {"name": "dshm", "hostPath": {"path": "/dev/shm"}}), "1.37"),
    (
        "KG110",
        "job",
        all_of(set_at(POD + ("hostIPC",), True), delete_at(C0 + ("volumeMounts",)), delete_at(POD + ("volumes",))),
        "1.37",
    ),
    ("KG117", "job", set_at(J + ("spec", "backoffLimit"), 0), "1.37"),
    (
        "KG117",
        "job",
        all_of(
            set_at(J + ("spec", "backoffLimit"), 3),
            set_at(
                J + ("spec", "podFailurePolicy"),
                {"rules": [{"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [0]}}]},
            ),
        ),
        "1.37",
    ),
    (
        "KG117",
        "job",
        all_of(
            delete_at(J + ("spec", "backoffLimit")),
            set_at(
                C0 + ("args",),
                [
                    "--nnodes=2:4",
                    "--nproc-per-node=8",
                    "--rdzv-backend=c10d",
                    "--rdzv-endpoint=llama-0.llama:29400",
                    "--max-restarts=3",
                    "train.py",
                ],
            ),
        ),
        "1.37",
    ),  # elastic: torchrun's agents re-form the world
    ("KG118", "job", set_at(RES, {"limits": {"memory": "200Gi", "nvidia.com/gpu": 8}}), "1.37"),  # Guaranteed-ish
    (
        "KG119",
        "job",
        set_at(
            C0 + ("args",),
            ["--nnodes=4", "--nproc-per-node=8", "--rdzv-backend=c10d", "--rdzv-endpoint=llama-0.llama:29400", "t.py"],
        ),
        "1.37",
    ),
    (
        "KG119",
        "job",
        all_of(set_at(C0 + ("args", 0), "--rdzv-id=llama"), _append(ENV, {"name": "PET_NNODES", "value": "4"})),
        "1.37",
    ),
    ("KG120", "sts", lambda docs: None, "1.28"),
    ("KG124", "job", delete_at(SVC + ("metadata", "namespace")), "1.37"),  # lands wherever it is applied
    (
        "KG119",
        "job",
        all_of(
            set_at(C0 + ("command",), ["bash", "-c"]),
            set_at(C0 + ("args",), ["exec torchrun $DISTRIBUTED_ARGS train.py --lr 3e-4"]),
        ),
        "1.37",
    ),  # the flags are in a variable: absent ones are unknown, not missing
    (
        "KG123",
        "job",
        all_of(set_at(POD + ("hostNetwork",), True), set_at(POD + ("dnsPolicy",), "ClusterFirstWithHostNet")),
        "1.37",
    ),
    ("KG114", "job", set_at(C0 + ("args", 2), "--node-rank=$(JOB_COMPLETION_INDEX)"), "1.37"),  # Indexed Job: defined
    (
        "KG114",
        "job",
        all_of(
            set_at(C0 + ("args", 3), "--master-addr=$(MASTER_ADDR)"),
            set_at(C0 + ("envFrom",), [{"configMapRef": {"name": "llama-env"}}]),
        ),
        "1.37",
    ),  # may come from the ConfigMap
    (
        "KG114",
        "job",
        all_of(
            set_at(C0 + ("command",), ["bash", "-c"]),
            set_at(
                C0 + ("args",),
                [
                    "exec torchrun --nnodes=4 --nproc-per-node=8 --node-rank=$JOB_COMPLETION_INDEX "
                    "--master-addr=llama-0.llama --rdzv-id=$(hostname) train.py"
                ],
            ),
        ),
        "1.37",
    ),  # the shell's command substitution
    (
        "KG114",
        "job",
        all_of(
            set_at(C0 + ("command",), ["bash", "-c"]),
            set_at(
                C0 + ("args",),
                [
                    "exec torchrun --nnodes=4 --nproc-per-node=8 --node-rank=$(NODE_RANK) "
                    "--master-addr=llama-0.llama train.py"
                ],
            ),
        ),
        "1.37",
    ),  # an env var of the container: Kubernetes expands it before the shell runs
    (
        "KG114",
        "job",
        all_of(
            set_at(C0 + ("command",), ["/usr/bin/env", "bash", "-c", "exec torchrun --rdzv-id=$(hostname) x.py"]),
            delete_at(C0 + ("args",)),
        ),
        "1.37",
    ),  # a shell through env: $(hostname) is its command substitution
    (
        "KG027",
        "cm",
        _append((), {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "llama-config"}}),
        "1.37",
    ),
    (
        "KG122",
        "job",
        set_at(POD + ("tolerations",), [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]),
        "1.37",
    ),  # tolerates GPU nodes and requests 8 GPUs
    ("KG105", "job", set_at(C0 + ("args", 3), "--master-addr=$(MASTER_ADDR)"), "1.37"),  # checked at the env
    ("KG121", "job", _append(ENV, {"name": "CUDA_VISIBLE_DEVICES", "value": "0,1,2,3,4,5,6,7"}), "1.37"),
    ("KG114", "job", _append(ENV, {"name": "ADDR", "value": "$(NCCL_DEBUG)-x"}), "1.37"),  # defined earlier
    ("KG114", "job", _append(ENV, {"name": "LITERAL", "value": "$$(JOB_COMPLETION_INDEX)"}), "1.37"),  # escaped
    (
        "KG103",
        "job",
        all_of(
            set_at(SVC + ("spec", "selector", "role"), "master"),
            set_at(POD[:-1] + ("metadata", "labels", "role"), "master"),
            set_at(J + ("spec", "completions"), 1),
            set_at(J + ("spec", "parallelism"), 1),
            set_at(C0 + ("args", 0), "--nnodes=1"),
        ),
        "1.37",
    ),  # one node: nothing to pick
]


def _case_id(case):
    return f"{case[0]}-{case[1]}-{case[3]}"


@pytest.mark.parametrize("case", FAILING, ids=[_case_id(c) for c in FAILING])
def test_rule_fails(case):
    rule_id, base, mutate, version = case
    docs = BASES[base]()
    mutate(docs)
    result = lint_docs(docs, version)
    assert rule_id in rule_ids(result), [f.text() for f in result.findings]
    finding = next(f for f in result.findings if f.rule_id == rule_id)
    assert finding.line > 0 and finding.column > 0 and finding.file == "test.yaml"
    assert finding.severity is load_rules()[rule_id].severity


def test_a_secret_placeholder_is_an_unexpanded_variable_not_a_secret():
    # kubernetes-sigs/lws docs/examples/sglang/lws.yaml: HF_TOKEN: $HF_TOKEN reaches the pod as that text;
    # no secret is in the manifest (KG058), the variable is never expanded (KG130)
    docs = BASES["job"]()
    _append(ENV, {"name": "HF_TOKEN", "value": "$HF_TOKEN"})(docs)
    findings = lint_docs(docs).findings
    assert "KG058" not in {f.rule_id for f in findings}
    [finding] = [f for f in findings if f.rule_id == "KG130"]
    assert "is the text '$HF_TOKEN'" in finding.message and "expands only $(VAR)" in finding.message


_CLAIM = {"metadata": {"name": "ckpt"}, "spec": {"accessModes": ["ReadWriteOnce"]}}
_MOUNTING_POD = {
    "restartPolicy": "Never",
    "containers": [{"name": "train", "image": "busybox:1.36", "volumeMounts": [{"name": "ckpt", "mountPath": "/c"}]}],
}


def _jobset_with_claims(claim: dict) -> dict:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "vct"},
        "spec": {
            "volumeClaimPolicies": [{"templates": [claim]}],
            "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": _MOUNTING_POD}}}}],
        },
    }


def _lws_with_claims(claim: dict) -> dict:
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "vct"},
        "spec": {
            "replicas": 1,
            "leaderWorkerTemplate": {
                "size": 2,
                "volumeClaimTemplates": [claim],
                "workerTemplate": {"spec": _MOUNTING_POD},
            },
        },
    }


def _runtime_with_claims(claim: dict) -> dict:
    jobset = _jobset_with_claims(claim)["spec"]
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": "vct", "labels": {"trainer.kubeflow.org/framework": "torch"}},
        "spec": {"mlPolicy": {"numNodes": 1, "torch": {"numProcPerNode": "auto"}}, "template": {"spec": jobset}},
    }


@pytest.mark.parametrize(
    "make",
    [_jobset_with_claims, _lws_with_claims, _runtime_with_claims],
    ids=["jobset-policies", "lws-templates", "runtime-jobset-policies"],
)
def test_a_claim_template_provides_the_mounted_volume(make):
    # kubernetes-sigs/jobset examples/volume-claim-policy, kubernetes-sigs/lws docs/examples/sample: the
    # controller adds a volume per claim template to every pod
    assert "KG052" not in rule_ids(lint_docs([make(_CLAIM)]))
    other = {**_CLAIM, "metadata": {"name": "data"}}  # near miss: a claim of another name
    assert "KG052" in rule_ids(lint_docs([make(other)]))


@pytest.mark.parametrize("case", PASSING, ids=[_case_id(c) for c in PASSING])
def test_rule_near_miss_passes(case):
    rule_id, base, mutate, version = case
    docs = BASES[base]()
    mutate(docs)
    result = lint_docs(docs, version)
    assert rule_id not in rule_ids(result), [f.text() for f in result.findings]


@pytest.mark.parametrize("base", sorted(BASES))
@pytest.mark.parametrize("version", ["1.25", "1.30", "1.34", "1.37"])
def test_realistic_bases_are_clean(base, version):
    if base == "sts" and version == "1.25":
        pytest.skip("the sts base reads apps.kubernetes.io/pod-index, which 1.25 does not set (KG120's case)")
    result = lint_docs(BASES[base](), version, fail_on_warnings=True)
    assert result.findings == [], [f.text() for f in result.findings]
    assert result.exit_code == 0


def test_every_registered_rule_has_a_failing_case():
    tested = {c[0] for c in FAILING} | {
        "KG001",
        "KG002",
        "KG003",
        "KG004",
        "KG010",
        "KG011",
        "KG012",
    }  # test_parse/schema/cli
    tested |= {r for r in load_rules() if "KG150" <= r <= "KG169"}  # tests/lint/test_jobset_rules.py
    tested |= {"KG206"}  # JobSet without failurePolicy: tests/lint/test_jobset_rules.py
    tested |= {"KG210"}  # a container script's unclosed [ test: tests/lint/test_model_rules.py
    tested |= {r for r in load_rules() if "KG125" <= r <= "KG149"}  # tests/lint/test_model_rules.py
    tested |= {r for r in load_rules() if "KG170" <= r <= "KG189"}  # tests/lint/test_sbatch.py
    # every sbatch rule: test_sbatch.py requires a failing fixture and a near miss of each
    tested |= {r.id for r in load_rules().values() if r.scope == "sbatch"}
    assert set(load_rules()) - tested == set()


def test_error_findings_set_exit_code_and_warnings_do_not():
    docs = hide_not_ready(BASES["job"]())  # KG102 is a warning
    result = lint_docs(docs)
    assert [f.severity for f in result.findings] == [Severity.WARNING]
    assert result.exit_code == 0
    set_at(RES + ("limits", "memory"), "512GB")(docs)
    assert lint_docs(docs).exit_code == 1


def test_a_service_pinned_to_pod_0_is_a_valid_master_address():
    """A second Service selecting only pod 0 through the controller's per-pod label is fine as
    MASTER_ADDR; the same Service without the pin resolves to any pod (KG105, KG103)."""
    docs = BASES["job"]()
    master = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "llama-master", "namespace": "ml"},
        "spec": {
            "clusterIP": "None",
            "selector": {"job-name": "llama", "batch.kubernetes.io/job-completion-index": "0"},
            "ports": [{"name": "c10d", "port": 29500}],
        },
    }
    docs.append(master)
    docs[1]["spec"]["template"]["spec"]["containers"][0]["args"][3] = "--master-addr=llama-master"
    assert lint_docs(docs).findings == []
    del master["spec"]["selector"]["batch.kubernetes.io/job-completion-index"]
    assert {"KG105"} <= rule_ids(lint_docs(docs))
    sts = BASES["sts"]()
    sts.append(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "llama-master"},
            "spec": {"clusterIP": "None", "selector": {"statefulset.kubernetes.io/pod-name": "llama-0"}},
        }
    )
    sts[1]["spec"]["template"]["spec"]["containers"][0]["args"][3] = "--master-addr=llama-master"
    assert lint_docs(sts).findings == []


def test_cronjob_pod_template_restart_policy_is_checked_too():
    job = BASES["job"]()[1]
    cron = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "nightly"},
        "spec": {"schedule": "0 3 * * *", "jobTemplate": {"spec": {"template": job["spec"]["template"]}}},
    }
    assert "KG060" not in rule_ids(lint_docs([cron]))
    del cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["restartPolicy"]
    [finding] = [f for f in lint_docs([cron]).findings if f.rule_id == "KG060"]
    assert finding.path == "spec.jobTemplate.spec.template.spec"
