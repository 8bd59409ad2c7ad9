"""Rule dispatch skips work that cannot produce a finding, and nothing else.

Rules registered with ``templates_only`` read nothing but the object's pod templates
(``kgen.lint.kinds``); ``Prepared.rules_for`` leaves them out for objects lint has no adapter for.
These tests call every such rule directly on objects without an adapter -- every fixture document,
and pod-shaped objects of unknown kinds full of defects -- and require that none of them finds
anything there, so leaving them out changes no report.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kgen.lint.check import Prepared
from kgen.lint.document import Document
from kgen.lint.kinds import adapter_for
from kgen.lint.parse import parse_stream_partial
from kgen.lint.registry import Context, load_rules

FIXTURES = Path(__file__).resolve().parent / "fixtures"
TEMPLATES_ONLY = sorted((r.id, r.fn) for r in load_rules().values() if r.templates_only)

# Every pod-template defect the templates_only rules look for, in one pod template.
_BAD_POD = {
    "metadata": {
        "labels": {"kueue.x-k8s.io/queue-name": "q"},
        "annotations": {
            "kueue.x-k8s.io/podset-required-topology": "bad key!",
            "kueue.x-k8s.io/podset-preferred-topology": "x",
        },
    },
    "spec": {
        "restartPolicy": "Sometimes",
        "hostname": "a.b",
        "serviceAccountName": "V_KSA",
        "priorityClassName": "High Priority",
        "activeDeadlineSeconds": 0,
        "tolerations": [{"operator": "Exists", "value": "x", "tolerationSeconds": 5}],
        "volumes": [
            {"name": "Bad_Vol", "emptyDir": {"medium": "memory", "sizeLimit": "1.5 Gi"}},
            {"name": "Bad_Vol", "csi": {"driver": "gcsfuse.csi.storage.gke.io", "volumeAttributes": {"b": "<B>"}}},
        ],
        "containers": [
            {
                "name": "Trainer_1",
                "image": "gcr.io/PROJECT/train",
                "command": ["python", "--data='x'"],
                "ports": [{"name": "a-very-long-port-name", "containerPort": 0}],
                "env": [
                    {"name": "A=B", "value": "$(date +%s)"},
                    {"name": "A=B", "value": "$(UNDEFINED)"},
                    {"name": "RANK", "value": "metadata.name"},
                    {"name": "HF_TOKEN", "value": "hf_abc"},
                    {"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "spec.nope"}}},
                ],
                "resources": {
                    "requests": {"gpu": "1.5", "memory": "512GB", "nvidia.com/gpu": "2"},
                    "limits": {"memory": "1Gi", "nvidia.com/gpu": "1.5"},
                },
                "volumeMounts": [{"name": "missing", "mountPath": "/a"}, {"name": "missing", "mountPath": "/a"}],
                "securityContext": {"runAsUser": -1},
                "terminationMessagePolicy": "Always",
            },
            {"name": "Trainer_1", "image": "ubuntu"},
            {"name": "fetch", "image": "your-registry/fetch:v1", "command": ["python", "fetch.py"]},
            {"name": "local", "image": "medical-training:latest", "imagePullPolicy": "Always", "command": ["x"]},
            {
                "name": "local-2",
                "image": "medical-training:1.4",
                "command": ["x", "--out=$OUT"],
            },  # IfNotPresent, on 2 pods
            {"name": "metrics", "image": "nvcr.io/nvidia/k8s/dcgm-exporter:3.3.5"},
        ],
    },
}


def _fixture_documents() -> list[Document]:
    docs = []
    for path in sorted(FIXTURES.rglob("*.y*ml")):
        parsed, _ = parse_stream_partial(path.read_text(encoding="utf-8"), str(path))
        docs += [d for d in parsed if isinstance(d.data, dict)]
    return docs


def _pod_shaped(api_version: str, kind: str) -> Document:
    data = {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": "x"},
        "spec": {
            "template": _BAD_POD,
            "jobTemplate": {"spec": {"template": _BAD_POD}},
            "replicatedJobs": [{"name": "w", "template": {"spec": {"template": _BAD_POD}}}],
            "pytorchReplicaSpecs": {"Worker": {"replicas": 2, "template": _BAD_POD}},
            "tasks": [{"name": "w", "template": _BAD_POD}],
            "leaderWorkerTemplate": {"workerTemplate": _BAD_POD},
            "completions": 2,
            "parallelism": 2,
            **_BAD_POD["spec"],
        },
    }
    return Document("<test>", 0, None, data)


def _findings(doc: Document) -> list[tuple[str, tuple, str]]:
    ctx = Context("1.37")
    return [(rule_id, path, message) for rule_id, fn in TEMPLATES_ONLY for path, message in fn(doc, ctx)]


def test_templates_only_rules_find_nothing_in_fixture_objects_without_an_adapter():
    docs = [d for d in _fixture_documents() if adapter_for(d) is None]
    assert len(docs) > 50  # ConfigMaps, Services, CRDs, NetworkPolicies ... of every fixture
    assert [(d.file, d.index, f) for d in docs for f in _findings(d)] == []


@pytest.mark.parametrize(
    ("api_version", "kind"),
    [
        ("example.com/v1", "Job"),  # a Job of another group is no Job
        ("example.com/v1", "PyTorchJob"),
        ("v1", "ConfigMap"),
        ("v1", "Service"),
        ("apps/v1", "Pod"),  # a Pod is v1's
        ("batch/v2", "Job"),  # an unserved version of a known group is the group's, so it has an adapter
    ],
)
def test_pod_shaped_objects_without_an_adapter_get_nothing_from_templates_only_rules(api_version, kind):
    doc = _pod_shaped(api_version, kind)
    if adapter_for(doc) is not None:
        # where an adapter reads the templates, every one of these rules finds its defect
        assert {f[0] for f in _findings(doc)} == {i for i, _ in TEMPLATES_ONLY}
        return
    assert _findings(doc) == []


def test_a_workload_gets_every_templates_only_rule_and_other_kinds_none():
    from kgen.lint.api import LintOptions

    p = Prepared(LintOptions())
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "x"}}
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}
    ids = {i for i, _ in TEMPLATES_ONLY}
    assert ids <= {rule_id for _, rule_id, _ in p.rules_for(Document("a", 0, None, job))}
    assert not ids & {rule_id for _, rule_id, _ in p.rules_for(Document("a", 0, None, cm))}
    assert "KG020" in {rule_id for _, rule_id, _ in p.rules_for(Document("a", 0, None, cm))}


@pytest.mark.parametrize(
    "raw", ["4", "2:8", "", "a=b", "/usr/bin/getent", "1,2", "x@y%z+w", "$(getent hosts x | wc -l)"]
)
def test_a_plain_nnodes_value_is_not_parsed_as_a_script_and_the_answer_is_the_same(raw, monkeypatch):
    from kgen.lint import rules_scripts

    fast = rules_scripts._dns_use(raw, {"N": "getent"})
    monkeypatch.setattr(rules_scripts, "_ONE_WORD", rules_scripts.re.compile(r"(?!)"))  # never the early exit
    assert fast == rules_scripts._dns_use(raw, {"N": "getent"})
    assert (fast is None) == ("$" not in raw)
