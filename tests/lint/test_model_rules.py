"""The launch model, the workload model across kinds, and the rules written on them (KG125-KG136):
each rule with a failing case and a near miss that must stay clean; the false positives once found
gone; the cross-document lookups linear in the number of documents."""

from __future__ import annotations

import copy

import pytest
from lint_helpers import BASES, dump, job, lint_docs, network_policy, rule_ids, service

from kgen import k8s
from kgen.launch.command import read_container
from kgen.lint.api import LintOptions, lint_documents, lint_text
from kgen.lint.registry import load_rules

J, POD = (1,), (1, "spec", "template", "spec")
C0 = POD + ("containers", 0)


def _job_with(command: list, args: list | None = None, **env: str) -> list:
    docs = BASES["job"]()
    c = docs[1]["spec"]["template"]["spec"]["containers"][0]
    c["command"] = command
    if args is None:
        c.pop("args", None)
    else:
        c["args"] = args
    for k, v in env.items():
        c["env"].append({"name": k, "value": v})
    return docs


def _script_job(script: str, shell: tuple = ("bash", "-c")) -> list:
    return _job_with([*shell, script])


OK_TORCHRUN = "torchrun --nnodes=4 --nproc-per-node=8 --node-rank=$(NODE_RANK) --master-addr=llama-0.llama train.py"


# --- the launch model ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "shell",
    [
        ("bash", "-c"),
        ("bash", "-xc"),
        ("bash", "-lc"),
        ("sh", "-ec"),
        ("bash", "-cxue"),
        ("bash", "-o", "pipefail", "-c"),
        ("bash", "-l", "-c"),
        ("/bin/bash", "--login", "-c"),
        ("zsh", "-c"),
        ("/usr/bin/dash", "-e", "-c"),
    ],
)
def test_any_shell_option_cluster_is_seen_through(shell):
    [launch] = read_container({"command": [*shell, "cd /w && exec torchrun --nnodes=2 t.py"]}).launches
    assert launch.form == "torchrun" and launch.flag("nnodes") == "2" and launch.script


@pytest.mark.parametrize(
    "container",
    [
        {"command": ["bash", "-c", 'source /env.sh; exec "$@"', "--"], "args": ["torchrun", "--nnodes=2", "t.py"]},
        {"command": ["sh", "-c", 'exec "$@"', "sh", "torchrun", "--nnodes=2", "t.py"]},
        {"command": ["bash", "-c", "exec bash -lc 'torchrun --nnodes=2 t.py'"]},
        {"command": ["bash", "-c", 'bash -c "env OMP_NUM_THREADS=1 timeout 1h torchrun --nnodes=2 t.py"']},
        {"command": ["tini", "--", "env", "A=1", "nohup", "torchrun", "--nnodes=2", "t.py"]},
        {"command": ["python3", "-u", "-m", "torch.distributed.run", "--nnodes", "2", "t.py"]},
    ],
)
def test_prologues_nesting_and_wrappers(container):
    [launch] = read_container(container).launches
    assert (launch.form, launch.flag("nnodes")) == ("torchrun", "2")


def test_a_prologue_launch_is_located_at_its_args_item():
    c = {"command": ["bash", "-c", 'exec "$@"', "--"], "args": ["torchrun", "--nnodes=2", "t.py"]}
    [launch] = read_container(c).launches
    assert launch.where == ("args", 0) and launch.at("nnodes") == ("args", 1)


def test_other_launchers_map_onto_torchruns_names():
    [acc] = read_container(
        {
            "command": [
                "accelerate",
                "launch",
                "--num_machines",
                "2",
                "--num_processes",
                "16",
                "--machine_rank",
                "1",
                "--main_process_ip",
                "m-0.m",
                "--main_process_port",
                "29500",
                "t.py",
            ]
        }
    ).launches
    assert acc.flags["nnodes"] == "2" and acc.flags["nproc_per_node"] == "8" and acc.flags["node_rank"] == "1"
    assert acc.flags["master_addr"] == "m-0.m" and acc.spelling("master_addr") == "--main_process_ip"
    [ds] = read_container(
        {"command": ["deepspeed", "--num_nodes=2", "--num_gpus", "8", "t.py", "--deepspeed"]}
    ).launches
    assert (ds.form, ds.flags["nnodes"], ds.flags["nproc_per_node"], ds.child) == (
        "deepspeed",
        "2",
        "8",
        ["t.py", "--deepspeed"],
    )


def test_plain_python_and_image_entrypoints_are_kept_apart():
    got = read_container({"command": ["python3", "train.py", "--lr", "1"]})
    assert [launch.form for launch in got.launches] == ["python"] and not got.no_command
    assert read_container({"args": ["--epochs", "1"]}).no_command


@pytest.mark.parametrize(
    "script,lost",
    [
        ("torchrun t.py || echo failed", "|| echo failed"),
        ("torchrun t.py && echo OK || echo FAILED", "|| echo FAILED"),
        ("torchrun t.py; exit 0", "exit 0"),
        ("torchrun t.py || true", "|| true"),
        ("torchrun t.py 2>&1 | tee /log/train.txt", "tee /log/train.txt"),
        ("torchrun t.py\necho done", "echo done"),
        ("set -e; torchrun t.py && echo ok; echo finished", "echo finished"),
        ("! torchrun t.py", "inverts"),
        ("( torchrun t.py || echo x )", "|| echo x"),
        ("torchrun t.py", None),
        ("exec torchrun t.py", None),
        ("set -e\ntorchrun t.py\necho done", None),
        ("set -eo pipefail; torchrun t.py | tee log", None),
        ("torchrun t.py || exit 1", None),
        ("torchrun t.py || { echo failed; exit 1; }", None),
        ("torchrun t.py; rc=$?; echo done; exit $rc", None),
        ("if torchrun t.py; then echo ok; else exit 3; fi", None),
        ("torchrun t.py && echo OK", None),
    ],
)
def test_what_a_script_does_with_the_exit_status(script, lost):
    [launch] = read_container({"command": ["bash", "-c", script]}).launches
    if lost is None:
        assert launch.swallowed is None
    else:
        assert launch.swallowed is not None and lost in launch.swallowed


def test_a_launcher_in_a_launcher_is_recorded():
    for c in (
        {"command": ["python3", "/opt/kgen/kgen_entrypoint.py", "--", "torchrun", "--nproc-per-node=8", "t.py"]},
        {"command": ["python3", "/opt/kgen/kgen_entrypoint.py", "--", "python", "-m", "torch.distributed.run", "t.py"]},
        {"command": ["python3", "/opt/kgen/kgen_entrypoint.py", "--", "accelerate", "launch", "t.py"]},
        {"command": ["torchrun", "--nnodes=2", "--no-python", "deepspeed", "t.py"]},
        {"command": ["torchrun", "--nnodes=2", "-m", "torch.distributed.run", "t.py"]},
        {"command": ["python3", "/opt/kgen/kgen_entrypoint.py", "--", "bash", "-c", "torchrun t.py"]},
    ):
        [outer] = [launch for launch in read_container(c).launches if launch.nested is not None]
        assert outer.nested.training
    ok = {"command": ["python3", "/opt/kgen/kgen_entrypoint.py", "--", "train.py"]}
    assert all(launch.nested is None for launch in read_container(ok).launches)


# --- new rules: each with a failing case and a near miss --------------------------------------------


def _set_env(docs, name, value):
    c = docs[1]["spec"]["template"]["spec"]["containers"][0]
    c["env"].append({"name": name, "value": value})
    return docs


CASES = [
    # (rule, failing docs, near-miss docs)
    ("KG125", _script_job("torchrun --nnodes=4 'train.py"), _script_job(OK_TORCHRUN)),
    ("KG126", _script_job(OK_TORCHRUN + " || echo failed"), _script_job(OK_TORCHRUN + " || exit 1")),
    (
        "KG126",
        _script_job(OK_TORCHRUN + " && echo OK || echo FAILED"),
        _script_job("set -e; " + OK_TORCHRUN + "; echo OK"),
    ),
    ("KG126", _script_job(OK_TORCHRUN + "; exit 0"), _script_job("exec " + OK_TORCHRUN)),
    (  # in the background: a plain `wait` returns 0 whatever it exits with; `wait $pid` returns its status
        "KG126",
        _script_job(OK_TORCHRUN + " &\nwait"),
        _script_job(OK_TORCHRUN + " &\npid=$!\nwait $pid"),
    ),
    (  # a `[` without its `]` word is never true: the branch never runs
        "KG210",
        _script_job('if [ "$GPUS" == 8 ] || [ "$GPUS" == 4]; then export NCCL_ALGO=Ring; fi; exec ' + OK_TORCHRUN),
        _script_job('if [ "$GPUS" == 8 ] || [[ "$GPUS" == 4 ]]; then export NCCL_ALGO=Ring; fi; exec ' + OK_TORCHRUN),
    ),
    (
        "KG127",
        _script_job(OK_TORCHRUN.replace("train.py", "--rdzv-id=$RANDOM train.py")),
        _script_job(OK_TORCHRUN.replace("train.py", "--rdzv-id=llama train.py")),
    ),
    (
        "KG127",
        _script_job(OK_TORCHRUN.replace("train.py", "--rdzv_id=$(date +%s) train.py")),
        _script_job(OK_TORCHRUN.replace("train.py", "--rdzv_id=$(JOB_NAME) train.py")),
    ),
    (
        "KG127",
        _script_job(OK_TORCHRUN.replace("train.py", "--rdzv-id=$HOSTNAME train.py")),
        _script_job(OK_TORCHRUN.replace("train.py", "--rdzv-id=${RUN_ID:-llama} train.py")),
    ),
    (
        "KG128",
        _script_job("N=$(getent hosts llama | wc -l); " + OK_TORCHRUN.replace("--nnodes=4", "--nnodes=$N")),
        _script_job("N=4; " + OK_TORCHRUN.replace("--nnodes=4", "--nnodes=$N")),
    ),
    (
        "KG128",
        _script_job(OK_TORCHRUN.replace("--nnodes=4", "--nnodes=$(nslookup llama | grep -c Address)")),
        _script_job(OK_TORCHRUN),
    ),
    ("KG130", _set_env(BASES["job"](), "STAMP", "$(date +%s)"), _set_env(BASES["job"](), "ADDR", "$(NCCL_DEBUG)")),
    ("KG130", _set_env(BASES["job"](), "HOST", "$(hostname -i)"), _set_env(BASES["job"](), "LIT", "$$(date)")),
    ("KG130", _set_env(BASES["job"](), "ID", "run-$(uuidgen -r)"), _set_env(BASES["job"](), "TXT", "`literal`")),
    # kubernetes-sigs/lws docs/examples (sglang, vllm): HF_TOKEN: $HF_TOKEN reaches the pod as that text
    ("KG130", _set_env(BASES["job"](), "HF_TOKEN", "$HF_TOKEN"), _set_env(BASES["job"](), "PRICE", "$5")),
    ("KG130", _set_env(BASES["job"](), "MODEL", "${MODEL}"), _set_env(BASES["job"](), "MODEL", "$(NCCL_DEBUG)")),
    (
        "KG131",
        _job_with(["python3", "/opt/kgen/kgen_entrypoint.py"], ["--", "torchrun", "--nproc-per-node", "8", "train.py"]),
        _job_with(["python3", "/opt/kgen/kgen_entrypoint.py"], ["--", "train.py"]),
    ),
    (
        "KG131",
        _job_with(["torchrun", "--nnodes=4", "--no-python"], ["accelerate", "launch", "t.py"]),
        _job_with(["torchrun", "--nnodes=4", "--no-python"], ["python", "t.py"]),
    ),
]


def _sts_script(script: str) -> list:
    docs = BASES["sts"]()
    c = docs[1]["spec"]["template"]["spec"]["containers"][0]
    c["command"] = ["bash", "-c", script]
    c.pop("args")
    return docs


STS_OK = OK_TORCHRUN.replace("$(NODE_RANK)", "${HOSTNAME##*-}")
CASES += [
    ("KG129", _sts_script(STS_OK), _sts_script(STS_OK + " && sleep infinity")),
    ("KG129", _sts_script("exec " + STS_OK), _sts_script("python3 /opt/kgen/kgen_entrypoint.py -- train.py")),
]


def _pytorchjob(workers: int = 3, gpus: int = 8, nproc: str | None = None, shm: bool = True) -> dict:
    c = {
        "name": "pytorch",
        "image": "ghcr.io/acme/train:1.4",
        "command": ["torchrun", "train.py"],
        "resources": {"requests": {"cpu": "8", "memory": "64Gi"}, "limits": {"memory": "64Gi", "nvidia.com/gpu": gpus}},
    }
    spec: dict = {"containers": [c]}
    if shm:
        c["volumeMounts"] = [{"name": "dshm", "mountPath": "/dev/shm"}]
        spec["volumes"] = [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    doc = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "pt", "namespace": "ml"},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": {"spec": copy.deepcopy(spec)}},
                "Worker": {"replicas": workers, "restartPolicy": "OnFailure", "template": {"spec": spec}},
            }
        },
    }
    if nproc is not None:
        doc["spec"]["nprocPerNode"] = nproc
    return doc


def _volcano(min_available: int | None, plugin: str = "pytorch") -> dict:
    tpl = {
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "t", "image": "t:1", "resources": {"requests": {"cpu": "1"}}}],
        }
    }
    doc = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "vj", "namespace": "ml"},
        "spec": {
            "schedulerName": "volcano",
            "plugins": {plugin: []},
            "tasks": [
                {"name": "master", "replicas": 1, "template": tpl},
                {"name": "worker", "replicas": 3, "template": tpl},
            ],
        },
    }
    if min_available is not None:
        doc["spec"]["minAvailable"] = min_available
    return doc


def _trainjob(queue_on: str, suspend: bool = True) -> dict:
    doc = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "tj", "namespace": "ml", "labels": {}},
        "spec": {"runtimeRef": {"name": "torch-distributed"}, "suspend": suspend, "trainer": {"numNodes": 2}},
    }
    q = {"kueue.x-k8s.io/queue-name": "team"}
    if queue_on == "metadata":
        doc["metadata"]["labels"].update(q)
    else:
        doc["spec"]["podTemplateOverrides"] = [{"targetJobs": [{"name": "node"}], "metadata": {"labels": q}}]
    return doc


def _lws(network: dict) -> dict:
    pod = {"containers": [{"name": "nginx", "image": "nginx:1.27", "resources": {"requests": {"cpu": "100m"}}}]}
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "web", "namespace": "ml"},
        "spec": {
            "replicas": 1,
            "networkConfig": network,
            "leaderWorkerTemplate": {"size": 2, "workerTemplate": {"spec": pod}},
        },
    }


def _lws_torchrun(size: int, leader_rank: str) -> dict:
    """A LeaderWorkerSet whose leader runs torchrun with a literal node rank and whose workers take theirs
    from LWS_WORKER_INDEX: the leader template makes one pod per group, so its literal rank is its own."""

    def pod(rank: str) -> dict:
        argv = ["torchrun", f"--nnodes={size}", "--nproc-per-node=8", f"--node-rank={rank}"]
        argv += ["--master-addr=$(LWS_LEADER_ADDRESS)", "--master-port=29500", "train.py"]
        return {"spec": {"containers": [{"name": "t", "image": "ghcr.io/acme/train:1.4", "command": argv}]}}

    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "llm", "namespace": "ml"},
        "spec": {
            "replicas": 2,
            "leaderWorkerTemplate": {
                "size": size,
                "leaderTemplate": pod(leader_rank),
                "workerTemplate": pod("1" if leader_rank == "$(LWS_WORKER_INDEX)" else "$(LWS_WORKER_INDEX)"),
            },
        },
    }


CASES += [
    # a literal node rank in a template of one pod per world (an LWS leader) is that pod's; in a template of
    # several pods (three workers of a group of four) it is the same in every one
    ("KG119", [_lws_torchrun(4, "$(LWS_WORKER_INDEX)")], [_lws_torchrun(4, "0")]),
    ("KG132", [_volcano(1)], [_volcano(None)]),
    ("KG132", [_volcano(2)], [_volcano(4)]),
    ("KG133", [_trainjob("template")], [_trainjob("metadata")]),
    ("KG133", [_trainjob("template")], [_trainjob("template", suspend=False)]),
    ("KG107", [_pytorchjob(nproc="16")], [_pytorchjob(nproc="8")]),
    ("KG139", [_pytorchjob(nproc="3")], [_pytorchjob(nproc="8")]),  # GPUs idle: a warning
    ("KG110", [_pytorchjob(shm=False)], [_pytorchjob()]),
    ("KG136", [{**_pytorchjob(), "spec": {"pytorchReplicaSpecs": {"Chief": {}}}}], [_pytorchjob()]),
    # lws docs examples: the leader Service's ports are no field of networkConfig (only subdomainPolicy)
    ("KG136", [_lws({"leaderServicePort": [{"name": "http", "port": 8080}]})], [_lws({"subdomainPolicy": "Shared"})]),
    ("KG136", [_lws({"subdomainPolicy": "PerReplica"})], [_lws({"subdomainPolicy": "UniquePerReplica"})]),
]


def _netpol(mutate) -> list:
    docs = BASES["job"]()
    mutate(docs[2]["spec"])
    return docs


CASES += [
    ("KG134", BASES["job"]()[:2], BASES["job"]()),
    ("KG135", _netpol(lambda s: s.pop("ingress")), BASES["job"]()),
    (
        "KG135",
        _netpol(lambda s: s["ingress"][0].update(ports=[{"port": 29500}])),
        _netpol(lambda s: s["ingress"][0].update(ports=[{"port": 1024, "endPort": 65535}])),
    ),
    (
        "KG135",
        _netpol(lambda s: s["ingress"][0]["from"][0]["podSelector"]["matchLabels"].update(role="master")),
        _netpol(
            lambda s: s["ingress"].append(
                {"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]}
            )
        ),
    ),
    (
        "KG135",
        _netpol(lambda s: s.update(policyTypes=["Ingress", "Egress"])),
        _netpol(lambda s: s.update(policyTypes=["Ingress", "Egress"], egress=[{}])),
    ),
]


# From the review of real manifests (tests/lint/fixtures/realworld/README.md, "Second pass"):
# kubernetes-sigs/jobset examples/pytorch/cnn-mnist feeds RANK (the completion index) to --node_rank;
# pytorch/xla docs/kubernetes.md comments every continued flag line, which leaves torchrun without its
# flags and training script.
CASES += [
    (
        "KG109",
        _set_env(_script_job(OK_TORCHRUN), "RANK", "0"),
        _set_env(_script_job(OK_TORCHRUN.replace("$(NODE_RANK)", "$RANK")), "RANK", "0"),
    ),
    (
        "KG119",
        _script_job("torchrun \\\n  # the number of hosts\n  --nnodes=4 \\\n  train.py"),
        _script_job("# the number of hosts: 4\n" + OK_TORCHRUN.replace(" --", " \\\n  --")),
    ),
]


def _pytorchjob_with_rdzv_service(selector: dict) -> list:
    """nebius/ml-cookbook topology-aware-scheduling/kai/10-pytorchjob.yaml's layout: MASTER_ADDR names
    the user's own headless Service, which selects the PyTorchJob's pods by the operator's labels."""
    job = _pytorchjob()
    for role in ("Master", "Worker"):
        c = job["spec"]["pytorchReplicaSpecs"][role]["template"]["spec"]["containers"][0]
        c["env"] = [{"name": "MASTER_ADDR", "value": "pt-rdzv"}]
    svc = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "pt-rdzv", "namespace": "ml"},
        "spec": {"clusterIP": "None", "selector": {"training.kubeflow.org/job-name": "pt", **selector}},
    }
    return [svc, job]


CASES += [
    (
        "KG105",
        _pytorchjob_with_rdzv_service({"training.kubeflow.org/replica-type": "worker"}),
        _pytorchjob_with_rdzv_service(
            {"training.kubeflow.org/replica-type": "master", "training.kubeflow.org/replica-index": "0"}
        ),
    ),
    (
        "KG105",  # replica-index 0 without the type selects master-0 and worker-0
        _pytorchjob_with_rdzv_service({"training.kubeflow.org/replica-index": "0"}),
        _pytorchjob_with_rdzv_service(
            {"training.kubeflow.org/replica-type": "master", "training.kubeflow.org/replica-index": "0"}
        ),
    ),
]


def _segments(nnodes: tuple[int, int]) -> list:
    """nebius/ml-cookbook topology-aware-scheduling/kai/12-indexedjob.yaml's layout: one world of two
    Indexed Jobs (one per topology segment) under one headless Service, every pod's master pod 0 of
    the first Job; ``nnodes`` is what each Job's torchrun states."""
    svc = service("seg")
    svc["spec"]["selector"] = {"app.kubernetes.io/instance": "seg"}
    out: list = [svc]
    for i, n in enumerate(nnodes):
        j = job(f"seg-{i}", nodes=2)
        j["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/instance"] = "seg"
        pod = j["spec"]["template"]["spec"]
        pod["subdomain"] = "seg"
        pod["containers"][0]["args"] = [
            a.replace("--nnodes=2", f"--nnodes={n}").replace(f"seg-{i}-0.seg-{i}", "seg-0-0.seg")
            for a in pod["containers"][0]["args"]
        ]
        out.append(j)
    return out


CASES += [
    ("KG105", _segments((4, 2)), _segments((4, 4))),  # a copied master address (own count) vs one world
    ("KG140", _segments((2, 2)), _segments((4, 4))),  # two worlds under one Service vs one world
    ("KG106", _segments((5, 5)), _segments((4, 4))),
    (  # the script's own node count (Lightning via Hydra / LightningCLI) against the 4 pods
        "KG106",
        _script_job(OK_TORCHRUN + " ++trainer.num_nodes=2 ++trainer.devices=8"),
        _script_job(OK_TORCHRUN + " ++trainer.num_nodes=4 ++trainer.devices=8"),
    ),
    ("KG106", _script_job(OK_TORCHRUN + " --trainer.num_nodes=1"), _script_job(OK_TORCHRUN + " --num_workers=1")),
]


def _runtime(gpu_step: str) -> list:
    """A ClusterTrainingRuntime shaped like kubeflow/trainer's torchtune runtimes: a model-initializer
    step, then the trainer step ``node``; ``gpu_step`` asks for GPUs (and has no /dev/shm)."""

    def step(name: str, ancestor: str) -> dict:
        c: dict = {"name": name, "image": "ghcr.io/acme/step:1.0"}
        if name == gpu_step:
            c["resources"] = {"limits": {"nvidia.com/gpu": 2}}
        return {
            "name": name,
            "template": {
                "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": ancestor}},
                "spec": {"template": {"spec": {"containers": [c]}}},
            },
        }

    return [
        {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "ClusterTrainingRuntime",
            "metadata": {"name": "torchtune-like"},
            "spec": {
                "mlPolicy": {"numNodes": 1, "torch": {"numProcPerNode": 2}},
                "template": {
                    "spec": {
                        "replicatedJobs": [step("model-initializer", "model-initializer"), step("node", "trainer")]
                    }
                },
            },
        }
    ]


# a runtime's initializer steps download once: they are not the trainer the operator wires
CASES += [("KG110", _runtime("node"), _runtime("model-initializer"))]


def _one_gpu_job(shm: bool) -> list:
    docs = [service(), job(nodes=4, gpus=1), network_policy()]
    pod = docs[1]["spec"]["template"]["spec"]
    if not shm:
        del pod["containers"][0]["volumeMounts"], pod["volumes"]
    return docs


def _cpu_job(nproc_env: str) -> list:
    docs = [service(), job(), network_policy()]
    c = docs[1]["spec"]["template"]["spec"]["containers"][0]
    c["resources"] = {"requests": {"cpu": "8", "memory": "16Gi"}}
    c["args"][1] = "--nproc-per-node=4"
    c["env"].append({"name": "NPROC_PER_NODE", "value": nproc_env})
    return docs


# the severity review: a 1-GPU pod without /dev/shm, counts written twice in a CPU pod
CASES += [
    ("KG138", _one_gpu_job(shm=False), _one_gpu_job(shm=True)),
    ("KG141", _cpu_job("2"), _cpu_job("4")),
]


def _env_job(**env: object) -> list:
    docs = [service(), job(), network_policy()]
    docs[1]["spec"]["template"]["spec"]["containers"][0]["env"].extend({"name": k, **v} for k, v in env.items())
    return docs


def _python_job(**env: object) -> list:
    docs = _env_job(MASTER_ADDR={"value": "llama-0.llama"}, WORLD_SIZE={"value": "4"}, **env)
    c = docs[1]["spec"]["template"]["spec"]["containers"][0]
    c["command"], c["args"] = ["python3", "train.py"], []
    c["resources"] = {"requests": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": 1}, "limits": {"nvidia.com/gpu": 1}}
    return docs


def _patched(docs: list, path: tuple, value: object) -> list:
    node = docs
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = value
    return docs


INDEX = {"valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}}

# the missed classes: what the container is given
CASES += [
    ("KG142", _env_job(POD_NAME={"value": "metadata.name"}), _env_job(POD_NAME={"value": "llama-pod"})),
    ("KG143", _python_job(RANK=INDEX, LOCAL_RANK=INDEX), _python_job(RANK=INDEX, LOCAL_RANK={"value": "0"})),
    (
        "KG144",
        _env_job(NVIDIA_VISIBLE_DEVICES={"value": "all"}),
        _env_job(NVIDIA_DRIVER_CAPABILITIES={"value": "all"}),
    ),
    (
        "KG145",
        _patched(_env_job(), C0 + ("args", 6), '--lr="3e-4"'),
        _patched(_env_job(), C0 + ("args", 6), "--lr=3e-4"),
    ),
    (
        "KG146",
        _patched(_env_job(), POD + ("serviceAccountName",), "V_KSA"),
        _patched(_env_job(), POD + ("serviceAccountName",), "trainer-ksa"),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_rule_fails_and_its_near_miss_passes(case):
    rule_id, failing, near_miss = case
    bad = lint_docs(copy.deepcopy(failing))
    assert rule_id in rule_ids(bad), [f.text() for f in bad.findings]
    finding = next(f for f in bad.findings if f.rule_id == rule_id)
    assert finding.line > 0 and finding.severity is load_rules()[rule_id].severity
    good = lint_docs(copy.deepcopy(near_miss))
    assert rule_id not in rule_ids(good), [f.text() for f in good.findings]


def test_every_new_rule_has_a_case():
    explained = {"KG137"}  # --explain only: test_explain_reports_how_each_training_workload_is_read
    script_rules = {r for r in load_rules() if "KG125" <= r <= "KG149"} | {"KG210"}
    assert script_rules - explained == {c[0] for c in CASES if c[0] >= "KG125"}


def test_kgens_own_network_policy_lints_clean_under_strict():
    docs = BASES["job"]()
    assert lint_docs(docs, fail_on_warnings=True).findings == []


# --- false positives found once -----------------------------------------------------------------


def test_jobset_v1_is_served_and_another_groups_jobset_is_not_a_jobset():
    js = {
        "apiVersion": "jobset.x-k8s.io/v1",
        "kind": "JobSet",
        "metadata": {"name": "j"},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "w",
                    "template": {
                        "spec": {
                            "template": {
                                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "b:1"}]}
                            }
                        }
                    },
                }
            ]
        },
    }
    assert rule_ids(lint_docs([js])) == {"KG011"}
    js["apiVersion"] = "jobset.x-k8s.io/v1beta9"
    assert "KG150" in rule_ids(lint_docs([js]))
    other = {
        "apiVersion": "example.com/v1",
        "kind": "JobSet",
        "metadata": {"name": "j"},
        "spec": {"replicatedJobs": "x"},
    }
    assert rule_ids(lint_docs([other])) == {"KG011"}


def test_rdzv_endpoint_with_node_rank_and_no_backend_is_static_not_a_mix():
    args = [
        "--nnodes=4",
        "--nproc-per-node=8",
        "--node-rank=$(NODE_RANK)",
        "--rdzv-endpoint=llama-0.llama:29500",
        "train.py",
    ]
    assert rule_ids(lint_docs(_job_with(["torchrun"], args), fail_on_warnings=True)) == set()
    mixed = _job_with(["torchrun"], [*args[:3], "--rdzv-backend=c10d", *args[3:]])
    assert "KG112" in rule_ids(lint_docs(mixed))


def test_kg112_names_the_backend_it_found():
    args = [
        "--nnodes=4",
        "--nproc-per-node=8",
        "--node-rank=$(NODE_RANK)",
        "--rdzv-backend=etcd",
        "--rdzv-endpoint=etcd:2379",
        "t.py",
    ]
    [f] = [f for f in lint_docs(_job_with(["torchrun"], args)).findings if f.rule_id == "KG112"]
    assert f.message.startswith("etcd rendezvous") and "c10d" not in f.message


def test_wrapped_launches_are_no_longer_invisible():
    """`bash -xc` once made the whole pod invisible, even to the /dev/shm check."""
    docs = _script_job("torchrun --nproc-per-node=8 --master-addr=llama-0.llama train.py", shell=("bash", "-xc"))
    docs[1]["spec"]["template"]["spec"]["volumes"][0]["emptyDir"] = {}
    assert {"KG110", "KG119"} <= rule_ids(lint_docs(docs))


# --- what a training workload is ------------------------------------------------------------------


def test_an_unknown_launcher_in_a_multi_pod_workload_gets_the_pod_rules():
    docs = _job_with(["python3", "train.py"], None, MASTER_ADDR="llama", WORLD_SIZE="4")
    docs[1]["spec"]["template"]["spec"]["volumes"][0]["emptyDir"] = {}
    ids = rule_ids(lint_docs(docs))
    assert {"KG110", "KG105"} <= ids and "KG119" not in ids  # no torchrun: no torchrun flag rules
    entrypoint = _job_with(["/docker-entrypoint.sh"], None)  # image-like launcher with GPUs in 4 pods
    entrypoint[1]["spec"]["template"]["spec"]["volumes"][0]["emptyDir"] = {}
    assert "KG110" in rule_ids(lint_docs(entrypoint))


def _one_pod_job(gpus: int) -> list:
    one = _job_with(["python3", "predict.py"], None)
    one[1]["spec"]["completions"] = one[1]["spec"]["parallelism"] = 1
    one[1]["spec"]["template"]["spec"]["volumes"][0]["emptyDir"] = {}
    c = one[1]["spec"]["template"]["spec"]["containers"][0]
    c["resources"]["requests"]["nvidia.com/gpu"] = c["resources"]["limits"]["nvidia.com/gpu"] = gpus
    return one


def test_a_one_pod_job_with_several_gpus_gets_the_pod_rules():
    # one process driving 4 GPUs (DataParallel, DataLoader workers) or a launcher lint cannot see: /dev/shm
    ids = rule_ids(lint_docs(_one_pod_job(4)))
    assert "KG110" in ids and not {"KG104", "KG105", "KG119"} & ids  # no world to wire


def test_a_single_gpu_pod_or_an_inference_statefulset_is_not_training():
    assert not {"KG110", "KG138"} & rule_ids(lint_docs(_one_pod_job(1)))
    sts = BASES["sts"]()
    c = sts[1]["spec"]["template"]["spec"]["containers"][0]
    c["command"], c["args"] = ["vllm", "serve", "m"], []
    c["env"] = []
    assert not {"KG113", "KG129", "KG134", "KG110"} & rule_ids(lint_docs(sts))


def test_appwrapper_components_are_linted_as_objects_of_their_own():
    inner = _pytorchjob(shm=False)
    aw = {
        "apiVersion": "workload.codeflare.dev/v1beta2",
        "kind": "AppWrapper",
        "metadata": {"name": "aw", "namespace": "ml"},
        "spec": {"components": [{"template": inner}]},
    }
    result = lint_text(dump([aw]), "aw.yaml", LintOptions())
    [f, *_] = [f for f in result.findings if f.rule_id == "KG110"]
    assert "spec.pytorchReplicaSpecs.Master.template.spec.containers[0]" in f.path and f.line > 5
    assert f.kind == "PyTorchJob"


# --- linear time -----------------------------------------------------------------------------------


def _corpus(n: int) -> list:
    docs = []
    for i in range(n):
        name = f"app{i}"
        svc = service(name)
        by_job = service(f"{name}-m")
        by_job["spec"]["selector"] = {"job-name": name, "batch.kubernetes.io/job-completion-index": "0"}
        docs += [svc, by_job, job(name), network_policy(name)]
    return docs


def test_cross_document_lookups_grow_linearly(monkeypatch):
    """The Service, selector and NetworkPolicy lookups of the training rules go through indexes built
    once per run: 8x the documents costs at most ~8x the selector evaluations (the loops over every
    workload x every Service did 1.3 M calls for 667 workloads)."""
    from kgen.lint import rules_netpol

    calls = {"n": 0}
    real_scope, real_selects = k8s.selector_scope, rules_netpol._selects

    def scope(*a):
        calls["n"] += 1
        return real_scope(*a)

    def selects(*a):
        calls["n"] += 1
        return real_selects(*a)

    monkeypatch.setattr(k8s, "selector_scope", scope)
    monkeypatch.setattr(rules_netpol, "_selects", selects)
    counts = []
    for n in (50, 400):  # 200 and 1,600 documents
        calls["n"] = 0
        result = lint_documents(_corpus(n), "<mem>", LintOptions())
        assert not [f for f in result.findings if f.severity.value != "info"], result.findings[:3]
        counts.append(calls["n"])
    assert counts[1] <= 8 * counts[0] * 1.1, counts


def test_explain_reports_how_each_training_workload_is_read():
    docs = _script_job("exec " + OK_TORCHRUN, shell=("bash", "-lc"))
    plain = lint_docs(copy.deepcopy(docs))
    assert "KG137" not in rule_ids(plain)
    [f] = [f for f in lint_docs(docs, explain=True).findings if f.rule_id == "KG137"]
    assert "Job 'llama'" in f.message and "4 pods" in f.message and "torchrun (in a shell script)" in f.message
    assert f.severity.value == "info"


def test_renumbered_rule_ids_are_still_accepted_by_skip():
    docs = BASES["job"]()
    docs[1]["spec"]["template"]["spec"]["volumes"][0]["emptyDir"] = {}
    assert "KG110" in rule_ids(lint_docs(copy.deepcopy(docs)))
    assert "KG110" not in rule_ids(lint_docs(docs, skip=frozenset({"KG156"})))  # KG156 is KG110 now


@pytest.mark.parametrize(
    "script",
    [
        "torchrun t.py | tee log; exit ${PIPESTATUS[0]}",
        "torchrun --nnodes=2 --rdzv-id=${HOSTNAME%-*} t.py",
    ],
)
def test_scripts_that_handle_what_the_rules_look_for_stay_clean(script):
    [launch] = read_container({"command": ["bash", "-c", script]}).launches
    assert launch.swallowed is None
    docs = _script_job(OK_TORCHRUN.replace("train.py", "--rdzv-id=${HOSTNAME%-*} train.py"))
    assert "KG127" not in rule_ids(lint_docs(docs))


def test_a_parallel_batch_of_gpu_tasks_gets_the_pod_rules_but_not_the_wiring_rules():
    docs = _job_with(["python3", "embed.py", "--shard=$(JOB_COMPLETION_INDEX)"], None)
    job_doc = docs[1]
    job_doc["spec"]["template"]["spec"].pop("subdomain")
    job_doc["spec"]["template"]["spec"]["volumes"][0]["emptyDir"] = {}
    job_doc["spec"]["template"]["spec"]["containers"][0]["env"] = []  # no NODE_RANK: not a distributed world
    ids = rule_ids(lint_docs([job_doc]))
    assert "KG110" in ids and not {"KG100", "KG104", "KG105", "KG134"} & ids


def test_kgen_lint_explain_on_the_command_line(tmp_path):
    from click.testing import CliRunner

    from kgen.cli import cli

    (tmp_path / "job.yaml").write_text(dump(BASES["job"]()))
    result = CliRunner().invoke(cli, ["lint", "--strict", "--explain", str(tmp_path / "job.yaml")])
    assert result.exit_code == 0, result.output
    [line] = [x for x in result.stdout.splitlines() if " KG137 info: " in x]
    assert "training workload: Job 'llama'" in line and "container 'trainer': torchrun" in line


def test_a_gpu_smoke_test_job_is_not_training():
    docs = _job_with(["bash", "-c", "nvidia-smi && sleep 60"], None)
    job_doc = docs[1]
    job_doc["spec"]["template"]["spec"]["containers"][0]["env"] = []
    job_doc["spec"]["template"]["spec"]["volumes"][0]["emptyDir"] = {}
    assert "KG110" not in rule_ids(lint_docs([job_doc]))


def test_flags_cut_off_by_a_comment_line_are_named():
    bad = lint_docs(_script_job("torchrun \\\n  # the number of hosts\n  --nnodes=4 \\\n  train.py"))
    [finding] = [f for f in bad.findings if f.rule_id == "KG119"]
    assert "no training script" in finding.message and "'--nnodes=4' runs as a command of its own" in finding.message


def test_a_job_with_only_generate_name_is_named_in_messages():
    docs = BASES["job"]()
    meta = docs[1]["metadata"]
    meta["generateName"] = meta.pop("name") + "-"
    messages = [f.message for f in lint_docs(docs, explain=True).findings]
    assert any("-<suffix>'" in m for m in messages), messages
    assert not any("''" in m or " -0." in m or "=-0." in m for m in messages), messages
