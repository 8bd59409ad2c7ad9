"""The other kinds end to end on the real control plane: a StatefulSet (runs once, then idles; `kgen submit`
makes its Secret), a JobSet under the real JobSet controller, and a Job with `--queue` admitted by a real Kueue
ClusterQueue (suspended until admitted)."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pytest
from k8sutil import kgen, wait
from reformk8s import submit

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "entrypoint"))
from podharness import CKPTLOOP  # noqa: E402

pytestmark = pytest.mark.torch


def get(k8s, path: str) -> dict | None:
    code, out = k8s.request("GET", path)
    return out if code == 200 else None


def condition(obj: dict | None, *types: str) -> dict | None:
    for c in (obj or {}).get("status", {}).get("conditions") or []:
        if c["type"] in types and c["status"] == "True":
            return c
    return None


@pytest.mark.timeout(300)
def test_statefulset_runs_once_then_idles_with_the_secret_submit_made(k8s, ns, tmp_path):
    ckpt = tmp_path / "ckpt.json"
    out = submit(
        ns, "ss", 2, [str(CKPTLOOP), "--steps", "4", "--sleep", "0.05", "--ckpt", str(ckpt)], kind="statefulset"
    )
    assert get(k8s, f"/api/v1/namespaces/{ns}/secrets/ss-auth") is not None, out
    hold = "run succeeded; holding idle so restartPolicy Always does not retrain"
    wait(lambda: k8s.kubelet.logs(ns, "ss-").count(hold) == 2, 180, "both pods succeeded and hold idle")
    time.sleep(5)  # idle: nobody restarts, nobody trains twice
    pods = [p for p in k8s.kubelet.history(ns, "ss-") if not p.gone]
    assert len(pods) == 2 and all(p.restarts == 0 and not p.current.done.is_set() for p in pods), [
        (p.name, p.restarts) for p in pods
    ]
    assert len(re.findall(r"rank=0 step 3 gen=0", k8s.kubelet.logs(ns, "ss-"))) == 1
    st = kgen("status", "ss", "-n", ns)
    assert st.returncode == 0, st.stderr
    print(f"\nkgen status of an idle StatefulSet after success:\n{st.stdout}")
    assert re.search(r"(?i)succeeded", st.stdout), st.stdout


@pytest.mark.timeout(300)
def test_jobset_trains_under_the_real_jobset_controller(k8s, ns, addon, tmp_path):
    addon("jobset-controller")
    ckpt = tmp_path / "ckpt.json"
    submit(ns, "js", 2, [str(CKPTLOOP), "--steps", "4", "--sleep", "0.05", "--ckpt", str(ckpt)], kind="jobset")
    path = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets/js"
    done = wait(lambda: condition(get(k8s, path), "Completed", "Failed"), 240, "the JobSet finished")
    assert done["type"] == "Completed", (done, k8s.kubelet.logs(ns))
    st = kgen("status", "js", "-n", ns)
    assert st.returncode == 0 and re.search(r"(?i)succeeded|complete", st.stdout), st.stdout + st.stderr
    lg = kgen("logs", "js", "-n", ns, "--tail", "5")
    assert lg.returncode == 0 and "stopped: succeeded" in lg.stdout, lg.stdout + lg.stderr


def kueue_queues(k8s, ns: str, gpu: bool = False) -> None:
    base = "/apis/kueue.x-k8s.io/v1beta2"
    k8s.request("POST", f"{base}/resourceflavors", {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                                                     "metadata": {"name": "default"}})  # fmt: skip
    resources = [{"name": "cpu", "nominalQuota": "8"}, {"name": "memory", "nominalQuota": "32Gi"}]
    if gpu:  # 8 GPUs: one run of 2 nodes x 4 at a time
        resources.append({"name": "nvidia.com/gpu", "nominalQuota": "8"})
    code, out = k8s.request("POST", f"{base}/clusterqueues", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": f"cq-{ns}"},
        "spec": {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": [r["name"] for r in resources],
                 "flavors": [{"name": "default", "resources": resources}]}]}})  # fmt: skip
    assert code in (201, 409), out


def local_queue(k8s, ns: str) -> None:
    code, out = k8s.request("POST", f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{ns}/localqueues", {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "lq"},
        "spec": {"clusterQueue": f"cq-{ns}"}})  # fmt: skip
    assert code == 201, out


@pytest.mark.timeout(300)
def test_queued_job_waits_suspended_until_kueue_admits_it(k8s, ns, addon, tmp_path):
    addon("kueue")
    ckpt = tmp_path / "ckpt.json"
    submit(ns, "q", 2, [str(CKPTLOOP), "--steps", "4", "--sleep", "0.05", "--ckpt", str(ckpt)], "--queue", "lq")
    job = f"/apis/batch/v1/namespaces/{ns}/jobs/q"
    time.sleep(5)  # no LocalQueue yet: nothing may run
    assert get(k8s, job)["spec"]["suspend"] is True
    assert not k8s.kubelet.history(ns, "q-")
    st = kgen("status", "q", "-n", ns)
    print("\n" + st.stdout)
    assert st.returncode == 0 and "Pending: " in st.stdout, st.stdout + st.stderr
    kueue_queues(k8s, ns)
    local_queue(k8s, ns)
    t0 = time.time()
    wait(lambda: get(k8s, job)["spec"].get("suspend") is False, 120, "Kueue admitted and unsuspended the Job")
    admitted = time.time() - t0
    done = wait(lambda: condition(get(k8s, job), "Complete", "Failed"), 180, "the Job finished")
    assert done["type"] == "Complete", (done, k8s.kubelet.logs(ns))
    wl = k8s.request("GET", f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{ns}/workloads")[1]["items"]
    assert len(wl) == 1 and condition(wl[0], "Admitted"), wl
    print(f"\nKueue: LocalQueue created -> Job unsuspended in {admitted:.1f} s")


@pytest.mark.timeout(300)
def test_a_run_past_the_gpu_quota_waits_and_status_says_how_many_gpus_more(k8s, ns, addon, tmp_path):
    """A ClusterQueue of 8 GPUs: run qa (2 nodes x 4 GPUs) is admitted, run qb (the same) stays suspended and `kgen
    status` quotes Kueue's reason (8 GPUs more needed); stopping qa releases the quota and Kueue admits qb."""
    addon("kueue")
    kueue_queues(k8s, ns, gpu=True)
    local_queue(k8s, ns)
    script = tmp_path / "idle.py"
    script.write_text("import time\nprint('KGEN_QUOTA_UP', flush=True)\ntime.sleep(600)\n")

    def unsuspended(name: str) -> bool:
        return get(k8s, f"/apis/batch/v1/namespaces/{ns}/jobs/{name}")["spec"].get("suspend") is False

    on_gpus = ("--set", "shmSize=256Mi", "--queue", "lq")
    submit(ns, "qa", 2, [str(script)], *on_gpus, gpus=4)
    wait(lambda: unsuspended("qa"), 120, "Kueue admitted qa")
    submit(ns, "qb", 2, [str(script)], *on_gpus, gpus=4)
    st = wait(lambda: (r := kgen("status", "qb", "-n", ns)) and "quota" in r.stdout and r, 60, "Kueue's reason")
    print("\n" + st.stdout)
    headline = next(ln for ln in st.stdout.splitlines() if ln.startswith("Pending"))
    assert "not admitted by its queue yet (Kueue: " in headline and "nvidia.com/gpu" in headline, headline
    assert "8 more needed" in headline, headline
    assert kgen("status", "qb", "-n", ns, "--exit-code").returncode == 4  # pending
    assert not unsuspended("qb") and not k8s.kubelet.history(ns, "qb-")
    stop = kgen("stop", "qa", "-n", ns, "--wait", "--timeout", "60", timeout=120)
    assert stop.returncode == 0, stop.stdout + stop.stderr
    t0 = time.time()
    wait(lambda: unsuspended("qb"), 120, "Kueue admitted qb once qa's GPUs were free")
    print(f"qa stopped -> qb admitted in {time.time() - t0:.1f} s")
    wait(lambda: len(k8s.kubelet.history(ns, "qb-")) == 2, 120, "qb's pods running")
    wait(lambda: kgen("status", "qb", "-n", ns, "--exit-code").returncode == 3, 120, "kgen status: qb running")
    assert kgen("stop", "qb", "-n", ns, "--wait", "--timeout", "60", timeout=120).returncode == 0


@pytest.mark.timeout(300)
def test_topology_required_keeps_the_group_in_one_block_or_waits_with_kueues_reason(k8s, ns, addon, tmp_path):
    """Kueue's topology-aware scheduling on `--set topology.required=LEVEL`: nodes 0-1 form block b1 and 2-3 block
    b2 (8 GPUs each); a run of 2 nodes x 8 GPUs lands in one block; a run of 3 nodes x 8 GPUs fits in no block and
    waits suspended, `kgen status` quoting Kueue's reason."""
    addon("kueue")
    base = "/apis/kueue.x-k8s.io/v1beta2"
    level = "kgen.test/block"
    for i in range(4):
        code, out = k8s.request("PATCH", f"/api/v1/nodes/node-{i}", {"metadata": {"labels": {
            level: "b1" if i < 2 else "b2", "kgen.test/tas": ns[-8:]}}},
            content_type="application/merge-patch+json")  # fmt: skip
        assert code == 200, out
    try:
        objs = [
            (f"{base}/topologies", {"kind": "Topology", "metadata": {"name": f"t-{ns}"[:63]},
             "spec": {"levels": [{"nodeLabel": level}, {"nodeLabel": "kubernetes.io/hostname"}]}}),
            (f"{base}/resourceflavors", {"kind": "ResourceFlavor", "metadata": {"name": f"tas-{ns}"[:63]},
             "spec": {"nodeLabels": {"kgen.test/tas": ns[-8:]}, "topologyName": f"t-{ns}"[:63]}}),
            (f"{base}/clusterqueues", {"kind": "ClusterQueue", "metadata": {"name": f"cq-{ns}"}, "spec": {
             "namespaceSelector": {}, "resourceGroups": [{"coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
             "flavors": [{"name": f"tas-{ns}"[:63], "resources": [{"name": "cpu", "nominalQuota": "64"},
             {"name": "memory", "nominalQuota": "256Gi"}, {"name": "nvidia.com/gpu", "nominalQuota": "64"}]}]}]}}),
        ]  # fmt: skip
        for path, obj in objs:
            code, out = k8s.request("POST", path, {"apiVersion": "kueue.x-k8s.io/v1beta2", **obj})
            assert code == 201, out
        local_queue(k8s, ns)
        script = tmp_path / "idle.py"
        script.write_text("import time\nprint('KGEN_TAS_UP', flush=True)\ntime.sleep(600)\n")

        in_block = ("--set", "shmSize=256Mi", "--queue", "lq", "--set", f"topology.required={level}")
        submit(ns, "two", 2, [str(script)], *in_block, gpus=8)
        pods = wait(lambda: len(p := k8s.kubelet.history(ns, "two-")) == 2 and p, 120, "run two's pods bound")
        hosts = sorted(p.obj["spec"]["nodeName"] for p in pods)
        print(f"\nrun two (2 x 8 GPUs, one block required): pods on {hosts}")
        assert hosts in (["node-0", "node-1"], ["node-2", "node-3"]), hosts
        submit(ns, "three", 3, [str(script)], *in_block, gpus=8)
        st = wait(lambda: (r := kgen("status", "three", "-n", ns)) and "Kueue: " in r.stdout and r, 60, "a reason")
        headline = next(ln for ln in st.stdout.splitlines() if ln.startswith("Pending"))
        print(headline)
        assert "not admitted by its queue yet (Kueue: " in headline, headline
        assert not k8s.kubelet.history(ns, "three-")
        for name in ("two", "three"):
            assert kgen("stop", name, "-n", ns, "--wait", "--timeout", "60", timeout=120).returncode == 0
    finally:
        unlabel = {"metadata": {"labels": {level: None, "kgen.test/tas": None}}}
        for i in range(4):
            k8s.request("PATCH", f"/api/v1/nodes/node-{i}", unlabel, content_type="application/merge-patch+json")
