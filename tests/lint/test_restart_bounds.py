"""In-place restarts with nothing bounding them (KG183), read through every operator kind's adapter: a Volcano
Job (maxRetry counts only failed pods), a kubeflow PyTorchJob without runPolicy.backoffLimit and kubedl's
PyTorchJob without spec.backoffLimit; each with the near miss that must stay clean."""

from __future__ import annotations

import copy

import pytest

from tests.lint.lint_helpers import lint_docs


def _volcano(policy: str | None, deadline: bool = False) -> dict:
    spec: dict = {
        "containers": [
            {
                "name": "t",
                "image": "ghcr.io/acme/train:1.4",
                "command": ["mpirun", "python", "train.py"],
                "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "1Gi"}},
            }
        ]
    }
    if policy is not None:
        spec["restartPolicy"] = policy
    if deadline:
        spec["activeDeadlineSeconds"] = 86400
    tpl = {"spec": spec}
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "vj", "namespace": "ml"},
        "spec": {
            "schedulerName": "volcano",
            "minAvailable": 3,
            "plugins": {"svc": [], "ssh": []},
            "maxRetry": 3,
            "policies": [{"event": "PodFailed", "action": "RestartJob"}],
            "tasks": [
                {"name": "mpimaster", "replicas": 1, "template": copy.deepcopy(tpl)},
                {"name": "mpiworker", "replicas": 2, "template": tpl},
            ],
        },
    }


def _kubedl(backoff: int | None) -> dict:
    replica = {
        "replicas": 1,
        "restartPolicy": "ExitCode",
        "template": {"spec": {"containers": [{"name": "pytorch", "image": "ghcr.io/acme/train:1.4"}]}},
    }
    doc = {
        "apiVersion": "training.kubedl.io/v1alpha1",
        "kind": "PyTorchJob",
        "metadata": {"name": "pt", "namespace": "ml"},
        "spec": {"pytorchReplicaSpecs": {"Master": replica, "Worker": {**copy.deepcopy(replica), "replicas": 2}}},
    }
    if backoff is not None:
        doc["spec"]["backoffLimit"] = backoff
    return doc


def _kg183(doc: dict) -> list:
    return [f for f in lint_docs([doc]).findings if f.rule_id == "KG183"]


@pytest.mark.parametrize("policy", ["OnFailure", "Always"])
def test_a_volcano_job_restarting_in_place_is_unbounded_whatever_its_max_retry(policy):
    (found,) = _kg183(_volcano(policy))
    assert found.path == "spec.tasks[0].template.spec.restartPolicy"
    assert f"mpimaster {policy}, mpiworker {policy}" in found.message
    assert "restartPolicy: Never" in found.message


@pytest.mark.parametrize("near_miss", [_volcano("Never"), _volcano(None), _volcano("OnFailure", deadline=True)])
def test_a_volcano_job_that_fails_its_pods_or_has_a_deadline_is_clean(near_miss):
    assert _kg183(near_miss) == []


def test_a_kubedl_pytorchjob_needs_its_inline_backoff_limit():
    (found,) = _kg183(_kubedl(None))
    assert "no spec.backoffLimit" in found.message and "ExitCode" in found.message
    assert found.path == "spec.pytorchReplicaSpecs.Master.restartPolicy"
    assert _kg183(_kubedl(3)) == []


def test_a_kubeflow_pytorchjob_reads_runpolicy_not_a_kubedl_style_spec_field():
    doc = _kubedl(3)
    doc["apiVersion"] = "kubeflow.org/v1"
    (found,) = _kg183(doc)
    assert "spec.backoffLimit is no field of kubeflow.org/v1" in found.message
    doc["spec"]["runPolicy"] = {"backoffLimit": 3}
    del doc["spec"]["backoffLimit"]
    assert _kg183(doc) == []
