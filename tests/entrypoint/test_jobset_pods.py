"""A JobSet's pods run locally: `kgen render --kind jobset` output, with the hostnames and env JobSet
gives them, through success, fail-stop and a group restart (a new attempt is a new run).

The JobSet controller turns the JobSet into what podharness.py already runs: a headless Service
named like network.subdomain and one Indexed child Job `<jobset>-<replicatedJob>-0` whose pods are
`<jobset>-node-0-<i>.<subdomain>` and carry the labels jobset.sigs.k8s.io/jobset-name and
jobset.sigs.k8s.io/restart-attempt. JobSetCluster does exactly that translation, then the pods are
real PID/mount namespaces with real torch (gloo) on loopback.
"""

from __future__ import annotations

import hmac
import os
import re
import shutil
import time

import pytest
import yaml
from podharness import TRAINLOOP, Cluster, free_port_pair, render_cpu_job

pytestmark = pytest.mark.torch

RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"


def rdzv_digest(uid: str) -> str:
    """The rendezvous id's run part when the secret comes from the Job's UID: a digest, never the UID."""
    return hmac.new(b"kgen rendezvous id", uid.encode(), "sha256").hexdigest()[:16]


def as_controller_objects(manifest: str) -> str:
    """What the JobSet controller creates from the JobSet: its Service and the child Job."""
    docs = [d for d in yaml.safe_load_all(manifest) if d]
    [jobset] = [d for d in docs if d["kind"] == "JobSet"]
    name = jobset["metadata"]["name"]
    [rjob] = jobset["spec"]["replicatedJobs"]
    subdomain = jobset["spec"]["network"].get("subdomain") or name
    child = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"{name}-{rjob['name']}-0"},
        "spec": rjob["template"]["spec"],
    }
    child["spec"]["template"]["spec"]["subdomain"] = subdomain
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": subdomain},
        "spec": {"clusterIP": "None", "publishNotReadyAddresses": True},
    }
    others = [d for d in docs if d["kind"] not in ("JobSet",)]
    return yaml.safe_dump_all([*others, service, child], sort_keys=False)


class JobSetCluster(Cluster):
    def __init__(self, manifest: str, restart_attempt: int = 0, **kw) -> None:
        docs = [d for d in yaml.safe_load_all(manifest) if d]
        self.jobset = next(d for d in docs if d["kind"] == "JobSet")
        self.restart_attempt = restart_attempt
        super().__init__(as_controller_objects(manifest), **kw)

    def labels(self, index: int) -> dict[str, str]:
        labels = super().labels(index)  # child Job labels: controller-uid (new per attempt), index
        labels["jobset.sigs.k8s.io/jobset-name"] = self.jobset["metadata"]["name"]
        labels["jobset.sigs.k8s.io/replicatedjob-name"] = self.jobset["spec"]["replicatedJobs"][0]["name"]
        labels[RESTART_ATTEMPT] = str(self.restart_attempt)
        return labels


@pytest.fixture
def jobset_cluster():
    """Factory: jobset_cluster(manifest, **kw) -> JobSetCluster; every pod is killed at the end."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and util-linux unshare (see podharness.py)")
    made: list[JobSetCluster] = []

    def make(manifest: str, **kw) -> JobSetCluster:
        c = JobSetCluster(manifest, **kw)
        made.append(c)
        return c

    yield make
    for c in made:
        c.cleanup()


def _jobset(name: str, nodes: int, port: int, command=None, **kw) -> str:
    return render_cpu_job(name, nodes, "jobset", port, command=command, **kw)


@pytest.mark.timeout(150)
def test_jobset_pods_smoke_test_with_jobset_hostnames(jobset_cluster):
    port = free_port_pair()
    c = jobset_cluster(_jobset("js", 2, port))
    env = {e["name"]: e.get("value") for e in c.container["env"]}
    assert env["MASTER_ADDR"] == "js-node-0-0.js" and env["KGEN_KIND"] == "jobset"
    t = time.monotonic()
    c.start()
    codes = c.wait_all(130)
    print(f"\njobset x2: all pods done in {time.monotonic() - t:.1f}s")
    assert codes == [0, 0], c.logs()
    logs = c.logs()
    assert re.search(r"kgen smoke-test: PASS world_size=4 backend=gloo", logs), logs
    for i, pod in enumerate(c.pods):
        assert pod.name == f"js-node-0-{i}"
        assert f"node {i}/2 (rank from JOB_COMPLETION_INDEX={i})" in pod.log()
        assert f"id=js-{rdzv_digest(c.run_uid)}-attempt0" in pod.log() and c.run_uid not in pod.log()


@pytest.mark.timeout(240)
def test_jobset_fail_stop_then_group_restart_is_a_new_run(jobset_cluster):
    port = free_port_pair()
    manifest = _jobset("jr", 2, port, command=[str(TRAINLOOP), "--steps", "3000", "--sleep", "0.1"])
    first = jobset_cluster(manifest, restart_attempt=0)
    first.start()
    assert first.wait_for_log(r"step \d+", 4, 90), first.logs()
    t0 = time.time()
    first.pods[1].kill()  # a node dies: the survivor fail-stops with 75 -> BackoffLimitExceeded
    codes = first.wait_all(60)
    print(f"\nsurvivor exited {first.pods[0].exited_at - t0:.1f}s after the kill")
    assert codes[0] == 75, first.logs()
    assert first.pods[0].exited_at - t0 < 30
    first.cleanup()
    # Exit 75 is not in the child Job's FailJob rule (2, 4): the Job fails with BackoffLimitExceeded
    # and the JobSet rule "Restart" (RestartJobSet) recreates the group: new child Job UID, attempt 1.
    js_doc = next(d for d in yaml.safe_load_all(manifest) if d and d["kind"] == "JobSet")
    pfp = js_doc["spec"]["replicatedJobs"][0]["template"]["spec"]["podFailurePolicy"]["rules"]
    assert 75 not in pfp[1]["onExitCodes"]["values"]
    second = jobset_cluster(_jobset("jr", 2, port, command=[str(TRAINLOOP), "--steps", "5"]), restart_attempt=1)
    second.start()
    assert second.wait_all(120) == [0, 0], second.logs()
    assert f"id=jr-{rdzv_digest(second.run_uid)}-attempt1" in second.pods[0].log()
    assert second.run_uid != first.run_uid


@pytest.mark.timeout(60)
def test_jobset_config_error_exits_with_a_code_the_failure_policy_does_not_retry(jobset_cluster):
    port = free_port_pair()
    manifest = _jobset("jc", 2, port)
    c = jobset_cluster(manifest, env_overrides={"NNODES": "zero"})
    c.start()
    codes = c.wait_all(40)
    js_doc = next(d for d in yaml.safe_load_all(manifest) if d and d["kind"] == "JobSet")
    not_retriable = js_doc["spec"]["replicatedJobs"][0]["template"]["spec"]["podFailurePolicy"]["rules"][1]
    assert codes == [2, 2], c.logs()
    assert set(codes) <= set(not_retriable["onExitCodes"]["values"])  # -> FailJob -> FailJobSet
