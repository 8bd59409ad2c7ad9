"""Invariants on the parsed output of every preset x kind x a few shapes."""

import pytest
import yaml

from kgen import RenderRequest
from kgen.render.pipeline import manifest_text
from tests.conftest import KINDS, PRESETS, shipped_pod_copy


def rendered(**kw):
    flags = {k: kw.pop(k) for k in ("nodes", "gpus", "kind", "name") if k in kw}
    text = manifest_text(RenderRequest(flags={k: str(v) for k, v in flags.items()}, **kw))
    return {d["kind"]: d for d in yaml.safe_load_all(text) if d}


def workload(docs):
    return docs.get("Job") or docs["StatefulSet"]


def pod_spec(docs):
    return workload(docs)["spec"]["template"]["spec"]


def trainer(docs):
    (container,) = pod_spec(docs)["containers"]
    return container


def env(docs):
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in trainer(docs)["env"]}


CASES = [(p, k) for p in PRESETS for k in KINDS]


@pytest.mark.parametrize("preset,kind", CASES)
def test_world_size_and_replicas_agree(preset, kind):
    docs = rendered(preset=preset, kind=kind)
    w = workload(docs)
    e = env(docs)
    nodes = int(e["NNODES"])
    nproc = int(e["NPROC_PER_NODE"])
    gpus = trainer(docs).get("resources", {}).get("limits", {}).get("nvidia.com/gpu", "0")
    assert isinstance(gpus, str), "a quantity, as the API server stores it"
    if kind == "job":
        assert w["spec"]["completions"] == w["spec"]["parallelism"] == nodes
        assert w["spec"]["completionMode"] == "Indexed"
    else:
        assert w["spec"]["replicas"] == nodes
        assert w["spec"]["podManagementPolicy"] == "Parallel"
    assert nproc == int(gpus)  # one process per GPU: world size = nodes x GPUs
    assert "WORLD_SIZE" not in e and "RANK" not in e and "LOCAL_RANK" not in e


@pytest.mark.parametrize("preset,kind", CASES)
def test_service_is_headless_and_selects_exactly_these_pods(preset, kind):
    docs = rendered(preset=preset, kind=kind)
    svc = docs["Service"]
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["publishNotReadyAddresses"] is True
    selector = svc["spec"]["selector"]
    pod_labels = workload(docs)["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= pod_labels.items()
    # The selector names this job's instance: another kgen job's pods never match.
    other = rendered(preset=preset, kind=kind, name="other-job")
    other_pods = workload(other)["spec"]["template"]["metadata"]["labels"]
    assert not selector.items() <= other_pods.items()
    # Nothing else rendered carries the pod labels (the ConfigMap and Service are not pods).
    assert svc["spec"]["ports"][0]["port"] == int(env(docs)["MASTER_PORT"])


@pytest.mark.parametrize("preset,kind", CASES)
def test_dns_wiring_master_addr_is_pod_zero(preset, kind):
    docs = rendered(preset=preset, kind=kind)
    w = workload(docs)
    svc_name = docs["Service"]["metadata"]["name"]
    if kind == "job":
        assert pod_spec(docs)["subdomain"] == svc_name
        assert pod_spec(docs)["restartPolicy"] == "Never"
    else:
        assert w["spec"]["serviceName"] == svc_name
        assert w["spec"]["selector"]["matchLabels"].items() <= w["spec"]["template"]["metadata"]["labels"].items()
    assert env(docs)["MASTER_ADDR"] == f"{w['metadata']['name']}-0.{svc_name}"
    assert env(docs)["MASTER_ADDR"] != svc_name


@pytest.mark.parametrize("preset,kind", CASES)
def test_gpu_requests_equal_limits_and_shm_is_memory(preset, kind):
    docs = rendered(preset=preset, kind=kind)
    res = trainer(docs)["resources"]
    assert res["requests"]["nvidia.com/gpu"] == res["limits"]["nvidia.com/gpu"] != "0"
    vols = {v["name"]: v for v in pod_spec(docs)["volumes"]}
    assert vols["dshm"]["emptyDir"]["medium"] == "Memory"
    mounts = {m["mountPath"]: m["name"] for m in trainer(docs)["volumeMounts"]}
    assert mounts["/dev/shm"] == "dshm"


@pytest.mark.parametrize("preset,kind", CASES)
def test_secure_by_default(preset, kind):
    docs = rendered(preset=preset, kind=kind)
    assert pod_spec(docs)["automountServiceAccountToken"] is False
    sc = trainer(docs)["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False and sc["privileged"] is False
    assert "capabilities" not in sc
    rdma = rendered(preset=preset, kind=kind, sets=["rdma=true"])
    assert trainer(rdma)["securityContext"]["capabilities"] == {"add": ["IPC_LOCK"]}
    assert trainer(rdma)["securityContext"]["privileged"] is False


def test_cpu_job_has_no_gpu_resources_and_configurable_processes():
    docs = rendered(gpus=0, sets=["nprocPerNode=3"])
    assert "nvidia.com/gpu" not in str(trainer(docs).get("resources", {}))
    assert env(docs)["NPROC_PER_NODE"] == "3"
    assert env(rendered(gpus=0))["NPROC_PER_NODE"] == "1"


@pytest.mark.parametrize("kind", KINDS)
def test_output_size_does_not_grow_with_nodes(kind):
    small = manifest_text(RenderRequest(flags={"nodes": "2", "kind": kind}))
    large = manifest_text(RenderRequest(flags={"nodes": "9999", "kind": kind}))
    assert abs(len(large) - len(small)) <= 10  # only the digits of the counts differ


def test_entrypoint_configmap_carries_the_pod_copy_of_the_entrypoint_file():
    from kgen.resources import pod_entrypoint_path

    docs = rendered()
    assert shipped_pod_copy(docs["ConfigMap"]) == pod_entrypoint_path().read_text()
    vols = {v["name"]: v for v in pod_spec(docs)["volumes"]}
    assert vols["kgen-entrypoint"]["configMap"]["name"] == docs["ConfigMap"]["metadata"]["name"]
    assert trainer(docs)["command"][1] == "/opt/kgen/kgen_entrypoint.py"


def test_kubernetes_version_gates_job_failure_features():
    old = workload(rendered(preset="4x8", kubernetes_version="1.30"))["spec"]
    assert old["backoffLimit"] == 0 and "podFailurePolicy" not in old and "podReplacementPolicy" not in old
    default = workload(rendered(preset="4x8"))["spec"]  # the default target (1.33) has the failure policy
    assert default["podFailurePolicy"]["rules"] and "podReplacementPolicy" not in default
    new = workload(rendered(preset="4x8", kubernetes_version="1.31"))["spec"]
    rules = new["podFailurePolicy"]["rules"]
    assert rules[0]["action"] == "Ignore"
    assert rules[0]["onPodConditions"] == [{"type": "DisruptionTarget", "status": "True"}]
    assert rules[-1]["action"] == "FailJob"
    assert rules[-1]["onExitCodes"]["operator"] == "NotIn"
    assert "podReplacementPolicy" not in new
    newest = workload(rendered(preset="4x8", kubernetes_version="1.34"))["spec"]
    assert newest["podReplacementPolicy"] == "Failed"


def test_statefulset_rank_sources():
    e = env(rendered(kind="statefulset"))
    assert e["KGEN_POD_INDEX"] == {"fieldRef": {"fieldPath": "metadata.labels['apps.kubernetes.io/pod-index']"}}
    assert e["KGEN_KIND"] == "statefulset"
    assert "KGEN_POD_INDEX" not in env(rendered(kind="job"))


def test_production_values_land_in_their_fields(tmp_path):
    values = tmp_path / "prod.yaml"
    values.write_text("""
namespace: ml-prod
resources:
  requests: {cpu: "32", memory: 256Gi}
  limits: {memory: 256Gi}
nodeSelector: {gpu.example.com/type: h100}
tolerations:
- {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}
- {key: spot, operator: Equal, value: "true", effect: NoExecute, tolerationSeconds: 300}
priorityClassName: training-high
imagePullSecrets: [regcred]
serviceAccountName: trainer
labels: {team: llm}
annotations: {example.com/owner: "ml@example.com"}
ttlSecondsAfterFinished: 86400
activeDeadlineSeconds: 172800
nccl: {socketIfname: eth0, ibDisable: true}
gloo: {socketIfname: eth0}
""")
    docs = rendered(preset="4x8", values_files=[str(values)])
    ps = pod_spec(docs)
    for d in docs.values():
        assert d["metadata"]["namespace"] == "ml-prod"
        assert d["metadata"]["labels"]["team"] == "llm"
        assert d["metadata"]["annotations"] == {"example.com/owner": "ml@example.com"}
    assert ps["nodeSelector"] == {"gpu.example.com/type": "h100"}
    assert ps["tolerations"][1]["tolerationSeconds"] == 300
    assert ps["priorityClassName"] == "training-high"
    assert ps["imagePullSecrets"] == [{"name": "regcred"}]
    assert ps["serviceAccountName"] == "trainer" and ps["automountServiceAccountToken"] is False
    res = trainer(docs)["resources"]
    assert res["requests"] == {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "8"}
    assert res["limits"] == {"memory": "256Gi", "nvidia.com/gpu": "8"}
    e = env(docs)
    assert (e["NCCL_SOCKET_IFNAME"], e["GLOO_SOCKET_IFNAME"], e["NCCL_IB_DISABLE"]) == ("eth0", "eth0", "1")
    assert workload(docs)["spec"]["ttlSecondsAfterFinished"] == 86400
    assert workload(docs)["spec"]["activeDeadlineSeconds"] == 172800
    assert "NCCL_IB_DISABLE" not in env(rendered(preset="4x8"))  # only when asked


def test_data_volumes_secrets_and_working_dir(tmp_path):
    values = tmp_path / "data.yaml"
    values.write_text("""
workingDir: /app
envFrom:
- secretRef: {name: hf-token}
volumes:
- {name: data, persistentVolumeClaim: {claimName: datasets-pvc, readOnly: true}}
- {name: out, persistentVolumeClaim: {claimName: outputs-pvc}}
volumeMounts:
- {name: data, mountPath: /data, readOnly: true}
- {name: out, mountPath: /out}
""")
    docs = rendered(preset="4x1", kind="statefulset", values_files=[str(values)])
    c = trainer(docs)
    assert c["workingDir"] == "/app"
    assert c["envFrom"] == [{"secretRef": {"name": "hf-token"}}]
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    assert mounts["/data"] == {"name": "data", "mountPath": "/data", "readOnly": True}
    assert {"/opt/kgen", "/dev/shm", "/out"} <= set(mounts)
    vols = {v["name"]: v for v in pod_spec(docs)["volumes"]}
    assert vols["data"]["persistentVolumeClaim"] == {"claimName": "datasets-pvc", "readOnly": True}


@pytest.mark.parametrize(
    "content,message",
    [
        ("volumes: [{name: dshm, emptyDir: {}}]\n", 'volume name "dshm" is already used'),
        ("volumes: [{name: Data_1, emptyDir: {}}]\n", "is not a DNS label"),
        ("volumeMounts: [{name: nope, mountPath: /x}]\n", 'mount "nope" names no volume'),
        (
            "volumes: [{name: d, emptyDir: {}}]\nvolumeMounts: [{name: d, mountPath: /dev/shm}]\n",
            "not /opt/kgen, /dev/shm or /var/run/secrets/kgen",
        ),
        (
            "volumes: [{name: d, emptyDir: {}}]\nvolumeMounts: [{name: d, mountPath: /var/run/secrets/kgen/}]\n",
            "not /opt/kgen, /dev/shm or /var/run/secrets/kgen",
        ),
        ("volumes: [{name: kgen-secret, emptyDir: {}}]\n", 'volume name "kgen-secret" is already used'),
    ],
)
def test_bad_volumes_are_rejected(tmp_path, content, message):
    from kgen.errors import UsageError

    values = tmp_path / "v.yaml"
    values.write_text(content)
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        rendered(preset="4x8", values_files=[str(values)])


@pytest.mark.parametrize("kind", KINDS)
def test_disruption_budget_is_opt_in_and_covers_exactly_the_pods(kind):
    assert "PodDisruptionBudget" not in rendered(preset="4x8", kind=kind)
    docs = rendered(preset="4x8", kind=kind, sets=["podDisruptionBudget=true"])
    pdb = docs["PodDisruptionBudget"]
    assert pdb["spec"]["maxUnavailable"] == 0
    assert pdb["spec"]["selector"]["matchLabels"] == docs["Service"]["spec"]["selector"]
    pods = workload(docs)["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pods.items()
    assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"  # GA 1.31, the default target is newer
    older = rendered(preset="4x8", kind=kind, sets=["podDisruptionBudget=true"], kubernetes_version="1.27")
    assert "unhealthyPodEvictionPolicy" not in older["PodDisruptionBudget"]["spec"]  # beta before 1.31: left out
