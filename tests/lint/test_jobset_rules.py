"""JobSet and Kueue rules (KG150-KG163): kgen's own JobSet output lints clean, and each rule has a
failing mutation that reports it and a near miss that does not.

The JobSet base is what `kgen render --preset 4x8 --kind jobset` prints (entrypoint stubbed).
"""

from __future__ import annotations

import json

import pytest
from lint_helpers import BASES, all_of, delete_at, lint_docs, rule_ids, set_at

from kgen import RenderRequest
from kgen import jobset as js
from kgen.lint.registry import load_rules
from kgen.render.pipeline import build, render_documents

JS = (2,)  # ConfigMap, NetworkPolicy, JobSet
SPEC = JS + ("spec",)
FP = SPEC + ("failurePolicy",)
RJ = SPEC + ("replicatedJobs", 0)
JOB = RJ + ("template", "spec")
TPL = JOB + ("template",)
POD = TPL + ("spec",)
C0 = POD + ("containers", 0)
ENV = C0 + ("env",)
NNODES, NPROC, MASTER = 0, 1, 2  # env order of kgen's trainer
Q = js.QUEUE_LABEL


def jobset_base(queue: str | None = None) -> list:
    spec = build(RenderRequest(preset="4x8", flags={"kind": "jobset", "queue": queue}))
    docs = render_documents(spec, entrypoint_source=b"# stub\n")
    docs = json.loads(json.dumps(docs))  # plain dicts for the YAML dumper
    if not any(d["kind"] == "NetworkPolicy" for d in docs):  # until render emits it
        docs.append(_network_policy(docs))
    return docs


def _network_policy(docs: list) -> dict:
    name = next(d for d in docs if d["kind"] == "JobSet")["metadata"]["name"]
    sel = {"matchLabels": {"app.kubernetes.io/instance": name, "kgen.dev/role": "trainer"}}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"podSelector": sel, "policyTypes": ["Ingress"], "ingress": [{"from": [{"podSelector": sel}]}]},
    }


BASES_JS = {"jobset": jobset_base, "jobset-queue": lambda: jobset_base("team-a"), **BASES}


TOPO = "cloud.google.com/gce-topology-block"

FAILING = [
    ("KG150", "jobset", set_at(FP + ("rules", 0, "action"), "Restart")),
    ("KG150", "jobset", set_at(SPEC + ("replicatedJob",), [])),
    ("KG150", "jobset", set_at(FP + ("rules", 3, "onJobFailureReasons"), ["BackoffLimitExceded"])),
    ("KG150", "jobset", set_at(FP + ("rules", 0, "onJobFailureMessagePatterns"), ["index (1$"])),
    ("KG150", "jobset", set_at(FP + ("rules", 0, "name"), "not retriable")),
    ("KG150", "jobset", set_at(FP + ("rules", 0, "targetReplicatedJobs"), ["workers"])),
    ("KG150", "jobset", set_at(SPEC + ("network", "enableDNSHostnames"), "true")),
    ("KG150", "jobset", set_at(SPEC + ("successPolicy",), {"operator": "Some"})),
    ("KG151", "jobset", set_at(JOB + ("backoffLimitt",), 0)),
    ("KG151", "jobset", set_at(JOB + ("completionMode",), "indexed")),
    ("KG151", "jobset", set_at(JOB + ("podFailurePolicy", "rules", 1, "onExitCodes", "values"), [4, 2])),
    ("KG152", "jobset", set_at(JS + ("metadata", "name"), "l" * 49)),  # 4 pods: 48 fit
    ("KG152", "jobset", set_at(SPEC + ("network", "subdomain"), "7b")),
    ("KG106", "jobset", set_at(ENV + (NNODES, "value"), "3")),  # was KG153
    ("KG107", "jobset", set_at(ENV + (NPROC, "value"), "16")),  # was KG153
    ("KG139", "jobset", set_at(ENV + (NPROC, "value"), "6")),  # fewer processes than GPUs, no even share: a warning
    ("KG116", "jobset", set_at(JOB + ("parallelism",), 2)),  # was KG153
    ("KG106", "jobset", set_at(RJ + ("replicas",), 2)),  # 8 pods, NNODES=4 (was KG153)
    ("KG105", "jobset", set_at(ENV + (MASTER, "value"), "kgen-train-0.kgen-train")),  # the Job's scheme (was KG154)
    ("KG105", "jobset", set_at(ENV + (MASTER, "value"), "kgen-train")),  # the Service (was KG154)
    ("KG105", "jobset", set_at(ENV + (MASTER, "value"), "kgen-train-node-0-0.other")),  # was KG154
    ("KG104", "jobset", set_at(SPEC + ("network", "enableDNSHostnames"), False)),  # was KG154
    ("KG104", "jobset", set_at(POD + ("subdomain",), "other")),  # was KG154
    ("KG102", "jobset", set_at(SPEC + ("network", "publishNotReadyAddresses"), False)),  # was KG155
    ("KG110", "jobset", delete_at(C0 + ("volumeMounts", 1))),  # was KG156
    ("KG117", "jobset", set_at(JOB + ("backoffLimit",), 3)),  # was KG157
    ("KG117", "jobset", delete_at(JOB + ("backoffLimit",))),  # was KG157
    ("KG117", "jobset", set_at(POD + ("restartPolicy",), "OnFailure")),  # was KG157
    ("KG206", "jobset", delete_at(FP)),  # info: no failurePolicy at all
    (
        "KG158",
        "jobset",
        all_of(delete_at(FP + ("rules", 2, "onJobFailureMessagePatterns")), delete_at(FP + ("rules", 0))),
    ),
    (
        "KG158",
        "jobset",
        set_at(FP + ("rules", 2, "onJobFailureMessagePatterns"), ["matching FailJob rule at index 5$"]),
    ),
    ("KG158", "jobset", all_of(set_at(RJ + ("replicas",), 2), set_at(FP + ("rules", 3, "action"), "RestartJob"))),
    ("KG160", "jobset", set_at((0, "metadata", "labels", Q), "team-a")),  # ConfigMap
    ("KG160", "jobset-queue", set_at(TPL + ("metadata", "labels", Q), "team-a")),
    ("KG160", "jobset-queue", set_at(RJ + ("template", "metadata"), {"labels": {Q: "team-a"}})),
    ("KG160", "job", set_at((0, "metadata", "labels", Q), "team-a")),  # Service
    ("KG160", "sts", set_at((1, "spec", "template", "metadata", "labels", js.POD_GROUP_LABEL), "x")),
    ("KG161", "jobset-queue", set_at(SPEC + ("suspend",), False)),
    ("KG161", "jobset-queue", set_at(JOB + ("suspend",), True)),
    ("KG161", "job", all_of(set_at((1, "metadata", "labels", Q), "q"), set_at((1, "spec", "suspend"), False))),
    (
        "KG162",
        "jobset-queue",
        set_at(TPL + ("metadata", "annotations"), {js.REQUIRED_TOPOLOGY: TOPO, js.PREFERRED_TOPOLOGY: TOPO}),
    ),
    ("KG162", "jobset-queue", set_at(TPL + ("metadata", "annotations"), {js.REQUIRED_TOPOLOGY: "rack 1"})),
    ("KG163", "jobset", set_at(TPL + ("metadata", "annotations"), {js.REQUIRED_TOPOLOGY: TOPO})),
    ("KG163", "jobset-queue", set_at(JS + ("metadata", "annotations"), {js.REQUIRED_TOPOLOGY: TOPO})),
    ("KG163", "sts", set_at((1, "metadata", "labels", js.PRIORITY_LABEL), "high")),
]

PASSING = [
    ("KG150", "jobset", set_at(FP + ("rules", 0, "name"), "Not_Retriable:2,4")),
    ("KG150", "jobset", set_at(FP + ("restartStrategy",), "BlockingRecreate")),
    ("KG151", "jobset", set_at(JOB + ("activeDeadlineSeconds",), 3600)),
    # jobset examples/failure-policy/host-maintenance-event-model.yaml: onPodConditions without status
    # is KG067's info for a Job (the server defaults it), never a KG151 error for a child Job
    (
        "KG151",
        "jobset",
        set_at(
            JOB + ("podFailurePolicy",),
            {
                "rules": [
                    {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [1]}, "onPodConditions": []},
                    {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
                ]
            },
        ),
    ),
    ("KG152", "jobset", set_at(JS + ("metadata", "name"), "l" * 48)),
    ("KG115", "jobset", delete_at(JOB + ("completionMode",))),  # the JobSet webhook defaults it to Indexed
    ("KG105", "jobset", set_at(ENV + (MASTER, "value"), "kgen-train-node-0-0.kgen-train.ml.svc.cluster.local")),
    ("KG104", "jobset", delete_at(POD + ("subdomain",))),  # JobSet sets it
    ("KG102", "jobset", delete_at(SPEC + ("network", "publishNotReadyAddresses"))),
    ("KG117", "jobset", set_at(JOB + ("completions",), 4)),
    ("KG158", "jobset", set_at(FP + ("rules", 3, "onJobFailureReasons"), [])),  # NotRetriable comes first
    ("KG158", "jobset", delete_at(FP + ("rules", 2, "onJobFailureMessagePatterns"))),  # ditto
    # one pod: no group to restart, nothing for a failure policy to add
    ("KG206", "jobset", all_of(delete_at(FP), set_at(JOB + ("completions",), 1), set_at(JOB + ("parallelism",), 1))),
    ("KG160", "jobset-queue", set_at(JS + ("metadata", "labels", js.PRIORITY_LABEL), "high")),
    ("KG160", "sts", set_at((1, "metadata", "labels", Q), "team-a")),
    ("KG161", "jobset-queue", set_at(SPEC + ("suspend",), True)),
    ("KG161", "jobset", set_at(SPEC + ("suspend",), True)),  # suspended by hand, resumed by hand: fine
    ("KG162", "jobset-queue", set_at(TPL + ("metadata", "annotations"), {js.PREFERRED_TOPOLOGY: TOPO})),
    ("KG163", "jobset-queue", set_at(TPL + ("metadata", "annotations"), {js.REQUIRED_TOPOLOGY: TOPO})),
]


def _id(case):
    return f"{case[0]}-{case[1]}"


@pytest.mark.parametrize("case", FAILING, ids=[_id(c) for c in FAILING])
def test_rule_fails(case):
    rule_id, base, mutate = case
    docs = BASES_JS[base]()
    mutate(docs)
    result = lint_docs(docs)
    assert rule_id in rule_ids(result), [f.text() for f in result.findings]
    finding = next(f for f in result.findings if f.rule_id == rule_id)
    assert finding.line > 0 and finding.column > 0
    assert finding.severity is load_rules()[rule_id].severity


@pytest.mark.parametrize("case", PASSING, ids=[_id(c) for c in PASSING])
def test_rule_near_miss_passes(case):
    rule_id, base, mutate = case
    docs = BASES_JS[base]()
    mutate(docs)
    result = lint_docs(docs)
    assert rule_id not in rule_ids(result), [f.text() for f in result.findings]


@pytest.mark.parametrize("base", ["jobset", "jobset-queue"])
def test_kgen_jobset_output_is_clean_but_for_the_missing_crd_schema(base):
    result = lint_docs(BASES_JS[base]())
    assert [f.rule_id for f in result.findings] == ["KG011"], [f.text() for f in result.findings]


def test_every_jobset_and_kueue_rule_has_a_failing_case():
    ids = {r for r in load_rules() if "KG150" <= r <= "KG169"}
    assert ids == {c[0] for c in FAILING if "KG150" <= c[0] <= "KG169"}


def test_a_broken_jobset_is_caught_with_messages_that_say_what_to_do():
    docs = jobset_base()
    set_at(ENV + (MASTER, "value"), "kgen-train-0.kgen-train")(docs)
    delete_at(FP + ("rules", 0, "onJobFailureMessagePatterns"))(docs)  # FailJobSet now takes disruptions too
    set_at(POD + ("restartPolicy",), "OnFailure")(docs)
    result = lint_docs(docs)
    text = "\n".join(f.text() for f in result.findings)
    assert result.exit_code == 1
    assert "use kgen-train-node-0-0.kgen-train" in text
    assert "restartPolicy is 'OnFailure'" in text


def test_schema_location_still_validates_with_the_crd_schema(tmp_path):
    """The builtin rules do not hide a user-given CRD schema: KG011 turns into schema findings."""
    schema = {
        "type": "object",
        "properties": {"spec": {"type": "object", "properties": {"suspend": {"type": "boolean"}}}},
    }
    folder = tmp_path / "schemas"
    folder.mkdir()
    (folder / "jobset-jobset-v1alpha2.json").write_text(json.dumps(schema))
    docs = jobset_base()
    set_at(SPEC + ("suspend",), "yes")(docs)
    result = lint_docs(docs, schema_location=str(folder))
    ids = rule_ids(result)
    assert "KG011" not in ids and "KG150" in ids
