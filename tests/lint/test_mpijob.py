"""The MPIJob adapter (kubeflow.org/v2beta1): lint reads its Launcher and Worker pod templates like every other
kind's, so the pod rules run on them; its structure (one Launcher, served versions) is KG136's."""

from __future__ import annotations

import copy

from tests.lint.lint_helpers import lint_docs, rule_ids


def _container(name: str, command: list[str]) -> dict:
    return {
        "name": name,
        "image": "ghcr.io/acme/mpi-train:1.4",
        "command": command,
        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "1Gi"}},
    }


def _mpijob() -> dict:
    """kueue's sample-mpijob.yaml layout: mpirun in the Launcher, sshd in two Workers."""
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": "pi", "namespace": "ml"},
        "spec": {
            "slotsPerWorker": 1,
            "runPolicy": {"cleanPodPolicy": "Running", "ttlSecondsAfterFinished": 60},
            "sshAuthMountPath": "/home/mpiuser/.ssh",
            "mpiReplicaSpecs": {
                "Launcher": {
                    "replicas": 1,
                    "template": {"spec": {"containers": [_container("launcher", ["mpirun", "-n", "2", "/pi"])]}},
                },
                "Worker": {
                    "replicas": 2,
                    "template": {"spec": {"containers": [_container("worker", ["/usr/sbin/sshd", "-De"])]}},
                },
            },
        },
    }


def test_a_v2beta1_mpijob_lints_clean_under_strict():
    result = lint_docs([_mpijob()], fail_on_warnings=True)
    assert result.exit_code == 0, "\n".join(f.text() for f in result.findings)


def test_its_pod_templates_are_read_by_the_pod_rules():
    doc = _mpijob()
    launcher = doc["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    launcher["env"] = [{"name": "HF_TOKEN", "value": "$HF_TOKEN"}]
    found = [f for f in lint_docs([doc]).findings if f.rule_id == "KG130"]
    assert [f.path for f in found] == ["spec.mpiReplicaSpecs.Launcher.template.spec.containers[0].env[0].value"]


def test_an_mpijob_version_no_operator_serves_is_rejected():
    old = {
        "apiVersion": "kubeflow.org/v1alpha1",
        "kind": "MPIJob",
        "metadata": {"name": "tf", "namespace": "ml"},
        "spec": {"replicas": 2, "template": copy.deepcopy(_mpijob()["spec"]["mpiReplicaSpecs"]["Worker"]["template"])},
    }
    found = [f for f in lint_docs([old]).findings if f.rule_id == "KG136"]
    assert len(found) == 1 and "v2beta1" in found[0].message and found[0].path == "apiVersion"


def test_the_launcher_is_one_pod():
    doc = _mpijob()
    doc["spec"]["mpiReplicaSpecs"]["Launcher"]["replicas"] = 2
    assert "KG136" in rule_ids(lint_docs([doc]))
    del doc["spec"]["mpiReplicaSpecs"]["Launcher"]
    found = [f for f in lint_docs([doc]).findings if f.rule_id == "KG136"]
    assert any("needs a Launcher" in f.message for f in found)


def _launcher_script(script: str) -> dict:
    doc = _mpijob()
    launcher = doc["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    launcher["command"] = ["/bin/bash", "-c", script]
    return doc


MPIEXEC = "mpiexec --allow-run-as-root --host ${MPI_HOST} -np 2 --prefix /usr/local/openmpi python /tmp/train.py"


def test_a_command_after_mpirun_that_decides_the_exit_status_is_seen_through_mpirun():
    """Volcano's MindSpore example: `mpiexec ... python train.py; sleep 3600` holds the pods an hour and
    exits 0 whatever training did; the launch model reads the program mpirun starts on every rank."""
    found = [f for f in lint_docs([_launcher_script(f"/usr/sbin/sshd; {MPIEXEC}; sleep 3600")]).findings]
    [kg126] = [f for f in found if f.rule_id == "KG126"]
    assert "`sleep 3600` runs after it" in kg126.message
    assert kg126.path.startswith("spec.mpiReplicaSpecs.Launcher")


def test_mpirun_as_the_scripts_last_command_keeps_its_exit_status():
    assert "KG126" not in rule_ids(lint_docs([_launcher_script(f"/usr/sbin/sshd; sleep 10; {MPIEXEC}")]))
    assert "KG126" not in rule_ids(lint_docs([_launcher_script(f"set -e; {MPIEXEC}; sleep 3600")]))


def test_any_program_mpirun_starts_is_the_worlds():
    """Volcano's MPI example: `mpiexec ... -np 10 mpi_hello_world` (no python) is the job's work all the same."""
    doc = _launcher_script("/usr/sbin/sshd; mpiexec --allow-run-as-root -np 2 /opt/bench/all_reduce; sleep 600")
    [kg126] = [f for f in lint_docs([doc]).findings if f.rule_id == "KG126"]
    assert kg126.message.startswith("mpiexec's program's exit status is lost")
    assert "KG126" not in rule_ids(lint_docs([_launcher_script("mpiexec -np 2 /opt/bench/all_reduce")]))
