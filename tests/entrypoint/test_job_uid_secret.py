"""The run's secret of a Job's (and a JobSet's) pods, from the Job's UID, without torch.

The Job controller labels every pod of a Job with the Job's UID (batch.kubernetes.io/controller-uid), a
random version-4 UUID the API server made when the Job was created; `kgen render` hands it to the
entrypoint as KGEN_JOB_UID by the downward API, and the entrypoint derives the liveness channel's secret
from it (docs/entrypoint.md, "Security"). The attacks on pods run as local processes are in test_security.py.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid

import pytest
from test_entrypoint_fast import BASE, BUSY_BOUND, ENTRYPOINT, ep, free_port_pair, run_ep

UID = "5fcd3ff9-7af4-40bf-93f3-01c80698ef2c"  # a real Job UID from /work/shared/cluster-recordings (job-running)


def job_env(uid: str = UID, **more: str) -> dict:
    env = {k: v for k, v in BASE.items() if k != "KGEN_SECRET_FILE"}
    return {**env, "KGEN_JOB_UID": uid, "KGEN_NAMESPACE": "ml", "KGEN_JOB_NAME": "llm", "KGEN_KIND": "job", **more}


def one_error(res: subprocess.CompletedProcess) -> str:
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("kgen-entrypoint: error:")]
    assert res.returncode == 2 and len(errors) == 1 and "Traceback" not in res.stderr, res.stderr
    return errors[0]


def test_the_secret_is_a_keyed_hash_of_the_jobs_uid_namespace_and_name():
    cfg = ep.load_config({**job_env(), "NODE_RANK": "1"})
    assert cfg.problems == [] and cfg.secret_from_uid and cfg.secret_file == ""
    assert cfg.secret == ep.secret_from_job_uid(UID, "ml", "llm") and len(cfg.secret) == 64
    assert UID.encode() not in cfg.secret and UID.replace("-", "").encode() not in cfg.secret
    other = str(uuid.uuid4())
    assert ep.secret_from_job_uid(other, "ml", "llm") != cfg.secret  # a new Job (re-created): a new secret
    assert ep.secret_from_job_uid(UID, "ml2", "llm") != cfg.secret != ep.secret_from_job_uid(UID, "ml", "llm2")
    assert "run secret from the Job's UID (KGEN_JOB_UID)" in cfg.summary()


def test_every_pod_of_the_job_gets_the_same_secret_and_a_replacement_too():
    secrets = {ep.load_config({**job_env(), "NODE_RANK": str(r)}).secret for r in range(4)}
    assert len(secrets) == 1


def test_the_rendezvous_id_never_carries_the_uid():
    """torch's store on MASTER_PORT names every key after the rendezvous id, and anyone who reaches it can
    list them (TCPStore.list_keys, torch 2.13): with a secret from the UID, the id holds a digest of it."""
    cfg = ep.load_config({**job_env(KGEN_RUN_ID=UID), "NODE_RANK": "1"})
    assert UID not in cfg.rdzv_id and UID.split("-")[0] not in cfg.rdzv_id
    assert cfg.rdzv_id.startswith("llm-") and len(cfg.rdzv_id) == len("llm-") + 16
    again = ep.load_config({**job_env(KGEN_RUN_ID=UID), "NODE_RANK": "3"})
    assert again.rdzv_id == cfg.rdzv_id  # every node agrees
    jobset_env = job_env(KGEN_RUN_ID=UID, KGEN_RESTART_ATTEMPT="2", KGEN_KIND="jobset")
    jobset = ep.load_config({**jobset_env, "NODE_RANK": "1"})
    assert jobset.rdzv_id == cfg.rdzv_id + "-attempt2"
    with_file = ep.load_config({**BASE, "KGEN_RUN_ID": UID, "KGEN_JOB_NAME": "llm", "NODE_RANK": "1"})
    assert with_file.rdzv_id == f"llm-{UID}"  # a secret from a file: the run id is not secret


def test_a_pod_without_the_label_is_one_line_and_exit_2():
    """The downward API gives "" for a label the pod does not have (a pod not made by the Job controller)."""
    line = one_error(run_ep({**job_env(uid=""), "NODE_RANK": "1"}, "--", "/bin/true"))
    assert "KGEN_JOB_UID is empty" in line and "batch.kubernetes.io/controller-uid" in line
    assert "auth.secretName" in line


def test_a_uid_that_is_not_random_is_refused():
    for bad in ("job-1", "00000000-0000-0000-0000-000000000000", "5fcd3ff9-7af4-10bf-93f3-01c80698ef2c", UID.upper()):
        cfg = ep.load_config({**job_env(uid=bad), "NODE_RANK": "1"})
        assert cfg.secret is None and cfg.problems == [cfg.secret_problem], bad
        assert "is not a random (version 4) UUID" in cfg.secret_problem


def test_a_file_and_a_uid_together_are_refused():
    cfg = ep.load_config({**job_env(), "KGEN_SECRET_FILE": BASE["KGEN_SECRET_FILE"], "NODE_RANK": "1"})
    assert cfg.secret is None and "both set" in cfg.secret_problem


def test_one_node_needs_no_secret_at_all():
    assert ep.load_config({**job_env(uid=""), "NNODES": "1", "NODE_RANK": "0"}).problems == []


def test_a_missing_secret_volume_names_the_secret_and_the_command(tmp_path):
    """A StatefulSet's pods mount Secret <name>-auth optionally: when nobody created it, the file is not
    there and the log says which Secret and the exact command that creates it."""
    env = {**BASE, "NODE_RANK": "1", "KGEN_KIND": "statefulset", "KGEN_NAMESPACE": "ml"}
    env.update(KGEN_SECRET_FILE=str(tmp_path / "kgen" / "secret"), KGEN_AUTH_NAME="llm-auth")
    line = one_error(run_ep(env, "--", "/bin/true"))
    assert "the run's secret is missing: Secret llm-auth (key `secret`" in line and "in namespace ml" in line
    assert (
        "kubectl create secret generic llm-auth -n ml --from-literal=secret=\"$(python3 -c 'import secrets; "
        "print(secrets.token_hex(32))')\"" in line
    )
    assert "kgen submit creates it for you" in line


def test_the_pod_copy_refuses_bare_metal_verbs_in_one_line(tmp_path):
    from kgen.resources import pod_entrypoint_path

    pod = tmp_path / "kgen_entrypoint.py"
    pod.write_text(pod_entrypoint_path().read_text())
    for verb in ("--run-dir", "--launch-node", "--slurm-node", "--slurm-end"):
        res = subprocess.run([sys.executable, str(pod), verb, "x"], capture_output=True, text=True, timeout=30)
        assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
        assert f"{verb} is for bare metal or Slurm: this is the pod copy kgen render ships" in res.stderr


class UidHub:
    """A real node 0 of a Job whose pods derive the secret from the Job's UID, waiting for its peers."""

    def __init__(self, tmp_path, uid: str = UID) -> None:
        self.live = free_port_pair() + 1
        self.env = {
            **job_env(uid),
            "NNODES": "3",
            "NPROC_PER_NODE": "1",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(self.live - 1),
            "KGEN_LIVENESS_PORT": str(self.live),
            "KGEN_RUN_ID": uid,
            "PATH": "/usr/bin:/bin",
        }
        self.log_path = tmp_path / "hub.log"
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, str(ENTRYPOINT), "--", "/bin/true"],
                env={**self.env, "NODE_RANK": "0"},
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + BUSY_BOUND
        while "liveness channel listening" not in self.log() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "liveness channel listening" in self.log(), self.log()

    def log(self) -> str:
        return self.log_path.read_text()

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(30)


def test_a_pod_of_another_job_is_refused_and_the_same_jobs_pod_is_not(tmp_path):
    hub = UidHub(tmp_path)
    try:
        assert UID not in hub.log()  # nothing node 0 logs or serves names the UID
        res = run_ep({**hub.env, "NODE_RANK": "1"}, "--diagnose", timeout=60)
        assert "PASS run secret: the Job's UID (KGEN_JOB_UID) (64 characters)" in res.stdout, res.stdout
        assert "node 0's entrypoint (run llm-" in res.stdout and "has 0 of 2 peers" in res.stdout, res.stdout
        other = {**hub.env, "KGEN_JOB_UID": str(uuid.uuid4()), "NODE_RANK": "1", "KGEN_MASTER_WAIT_TIMEOUT": "3"}
        line = one_error(run_ep(other, "--", "/bin/true"))
        assert "wrong secret: node 0 at 127.0.0.1:" in line and "a pod of another Job" in line
        assert hub.proc.poll() is None  # node 0 is unaffected
    finally:
        hub.stop()


@pytest.mark.timeout(120)
def test_statefulset_pods_without_their_secret_say_so_in_one_line(cluster):
    """Rendered StatefulSet pods, run as local processes, when nobody made Secret <name>-auth (its optional
    volume mounts empty): each exits 2 at once with the Secret's name and the command that creates it."""
    from podharness import free_port_pair, render_cpu_job

    c = cluster(
        render_cpu_job("sts-nosecret", 2, "statefulset", free_port_pair()), missing_secrets=("sts-nosecret-auth",)
    )
    c.start()
    assert c.wait_all(90) == [2, 2], c.logs()
    for pod in c.pods:
        errors = [ln for ln in pod.log().splitlines() if ln.startswith("kgen-entrypoint: error:")]
        assert len(errors) == 1 and "Secret sts-nosecret-auth (key `secret`" in errors[0], pod.log()
        assert (
            "in namespace default; create it: kubectl create secret generic sts-nosecret-auth -n default" in errors[0]
        )
        assert "Traceback" not in pod.log()


@pytest.mark.timeout(120)
def test_job_pods_without_the_controller_uid_label_say_so_in_one_line(cluster):
    """A Job's pod template run by something that is not the Job controller (no controller-uid label)."""
    from podharness import free_port_pair, render_cpu_job

    c = cluster(render_cpu_job("nouid", 2, "job", free_port_pair()), env_overrides={"KGEN_JOB_UID": ""})
    c.start()
    assert c.wait_all(90) == [2, 2], c.logs()
    for pod in c.pods:
        assert "KGEN_JOB_UID is empty: this pod has no batch.kubernetes.io/controller-uid label" in pod.log()
