"""JobSet and Kueue rules (KG150-KG163): kgen's own JobSet output lints clean, and each rule has a
failing mutation that reports it and a near miss that does not.

The JobSet base is what `kgen render --preset 4x8 --kind jobset` prints (entrypoint stubbed).
"""

from __future__ import annotations

import json

import pytest
from lint_helpers import BASES, lint_docs, rule_ids

from kgen import jobset as js
from kgen.api import RenderRequest, build, render_documents
from kgen.lint.registry import load_rules

JS = (1,)
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
    docs = render_documents(spec, entrypoint_source="# stub\n")
    return json.loads(json.dumps(docs))  # plain dicts for the YAML dumper


BASES_JS = {"jobset": jobset_base, "jobset-queue": lambda: jobset_base("team-a"), **BASES}


def _set(path, value):
    def mutate(docs):
        node = docs
        for step in path[:-1]:
            if isinstance(node, dict) and step not in node:
                node[step] = {}
            node = node[step]
        node[path[-1]] = value

    return mutate


def _del(path):
    def mutate(docs):
        node = docs
        for step in path[:-1]:
            node = node[step]
        del node[path[-1]]

    return mutate


def _all(*fns):
    def mutate(docs):
        for fn in fns:
            fn(docs)

    return mutate


TOPO = "cloud.google.com/gce-topology-block"

FAILING = [
    ("KG150", "jobset", _set(FP + ("rules", 0, "action"), "Restart")),
    ("KG150", "jobset", _set(SPEC + ("replicatedJob",), [])),
    ("KG150", "jobset", _set(FP + ("rules", 3, "onJobFailureReasons"), ["BackoffLimitExceded"])),
    ("KG150", "jobset", _set(FP + ("rules", 0, "onJobFailureMessagePatterns"), ["index (1$"])),
    ("KG150", "jobset", _set(FP + ("rules", 0, "name"), "not retriable")),
    ("KG150", "jobset", _set(FP + ("rules", 0, "targetReplicatedJobs"), ["workers"])),
    ("KG150", "jobset", _set(SPEC + ("network", "enableDNSHostnames"), "true")),
    ("KG150", "jobset", _set(SPEC + ("successPolicy",), {"operator": "Some"})),
    ("KG151", "jobset", _set(JOB + ("backoffLimitt",), 0)),
    ("KG151", "jobset", _set(JOB + ("completionMode",), "indexed")),
    ("KG151", "jobset", _set(JOB + ("podFailurePolicy", "rules", 1, "onExitCodes", "values"), [4, 2])),
    ("KG152", "jobset", _set(JS + ("metadata", "name"), "l" * 49)),  # 4 pods: 48 fit
    ("KG152", "jobset", _set(SPEC + ("network", "subdomain"), "7b")),
    ("KG153", "jobset", _set(ENV + (NNODES, "value"), "3")),
    ("KG153", "jobset", _set(ENV + (NPROC, "value"), "4")),
    ("KG153", "jobset", _set(JOB + ("parallelism",), 2)),
    ("KG153", "jobset", _set(RJ + ("replicas",), 2)),  # 8 pods, NNODES=4
    ("KG154", "jobset", _set(ENV + (MASTER, "value"), "kgen-train-0.kgen-train")),  # the Job's scheme
    ("KG154", "jobset", _set(ENV + (MASTER, "value"), "kgen-train")),  # the Service
    ("KG154", "jobset", _set(ENV + (MASTER, "value"), "kgen-train-node-0-0.other")),
    ("KG154", "jobset", _set(SPEC + ("network", "enableDNSHostnames"), False)),
    ("KG154", "jobset", _set(POD + ("subdomain",), "other")),
    ("KG155", "jobset", _set(SPEC + ("network", "publishNotReadyAddresses"), False)),
    ("KG156", "jobset", _del(C0 + ("volumeMounts", 1))),
    ("KG157", "jobset", _set(JOB + ("backoffLimit",), 3)),
    ("KG157", "jobset", _del(JOB + ("backoffLimit",))),
    ("KG157", "jobset", _set(POD + ("restartPolicy",), "OnFailure")),
    ("KG158", "jobset", _del(FP)),
    ("KG158", "jobset", _all(_del(FP + ("rules", 2, "onJobFailureMessagePatterns")), _del(FP + ("rules", 0)))),
    ("KG158", "jobset", _set(FP + ("rules", 2, "onJobFailureMessagePatterns"), ["matching FailJob rule at index 5$"])),
    ("KG158", "jobset", _all(_set(RJ + ("replicas",), 2), _set(FP + ("rules", 3, "action"), "RestartJob"))),
    ("KG160", "jobset", _set((0, "metadata", "labels", Q), "team-a")),  # ConfigMap
    ("KG160", "jobset-queue", _set(TPL + ("metadata", "labels", Q), "team-a")),
    ("KG160", "jobset-queue", _set(RJ + ("template", "metadata"), {"labels": {Q: "team-a"}})),
    ("KG160", "job", _set((0, "metadata", "labels", Q), "team-a")),  # Service
    ("KG160", "sts", _set((1, "spec", "template", "metadata", "labels", js.POD_GROUP_LABEL), "x")),
    ("KG161", "jobset-queue", _set(SPEC + ("suspend",), False)),
    ("KG161", "jobset-queue", _set(JOB + ("suspend",), True)),
    ("KG161", "job", _all(_set((1, "metadata", "labels", Q), "q"), _set((1, "spec", "suspend"), False))),
    (
        "KG162",
        "jobset-queue",
        _set(TPL + ("metadata", "annotations"), {js.REQUIRED_TOPOLOGY: TOPO, js.PREFERRED_TOPOLOGY: TOPO}),
    ),
    ("KG162", "jobset-queue", _set(TPL + ("metadata", "annotations"), {js.REQUIRED_TOPOLOGY: "rack 1"})),
    ("KG163", "jobset", _set(TPL + ("metadata", "annotations"), {js.REQUIRED_TOPOLOGY: TOPO})),
    ("KG163", "jobset-queue", _set(JS + ("metadata", "annotations"), {js.REQUIRED_TOPOLOGY: TOPO})),
    ("KG163", "sts", _set((1, "metadata", "labels", js.PRIORITY_LABEL), "high")),
]

PASSING = [
    ("KG150", "jobset", _set(FP + ("rules", 0, "name"), "Not_Retriable:2,4")),
    ("KG150", "jobset", _set(FP + ("restartStrategy",), "BlockingRecreate")),
    ("KG151", "jobset", _set(JOB + ("activeDeadlineSeconds",), 3600)),
    ("KG152", "jobset", _set(JS + ("metadata", "name"), "l" * 48)),
    ("KG153", "jobset", _del(JOB + ("completionMode",))),  # the JobSet webhook defaults it to Indexed
    ("KG154", "jobset", _set(ENV + (MASTER, "value"), "kgen-train-node-0-0.kgen-train.ml.svc.cluster.local")),
    ("KG154", "jobset", _del(POD + ("subdomain",))),  # JobSet sets it
    ("KG155", "jobset", _del(SPEC + ("network", "publishNotReadyAddresses"))),
    ("KG157", "jobset", _set(JOB + ("completions",), 4)),
    ("KG158", "jobset", _set(FP + ("rules", 3, "onJobFailureReasons"), [])),  # NotRetriable comes first
    ("KG158", "jobset", _del(FP + ("rules", 2, "onJobFailureMessagePatterns"))),  # ditto
    ("KG160", "jobset-queue", _set(JS + ("metadata", "labels", js.PRIORITY_LABEL), "high")),
    ("KG160", "sts", _set((1, "metadata", "labels", Q), "team-a")),
    ("KG161", "jobset-queue", _set(SPEC + ("suspend",), True)),
    ("KG161", "jobset", _set(SPEC + ("suspend",), True)),  # suspended by hand, resumed by hand: fine
    ("KG162", "jobset-queue", _set(TPL + ("metadata", "annotations"), {js.PREFERRED_TOPOLOGY: TOPO})),
    ("KG163", "jobset-queue", _set(TPL + ("metadata", "annotations"), {js.REQUIRED_TOPOLOGY: TOPO})),
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
    assert ids == {c[0] for c in FAILING}


def test_a_broken_jobset_is_caught_with_messages_that_say_what_to_do():
    docs = jobset_base()
    _set(ENV + (MASTER, "value"), "kgen-train-0.kgen-train")(docs)
    _del(FP + ("rules", 0, "onJobFailureMessagePatterns"))(docs)  # FailJobSet now takes disruptions too
    _set(POD + ("restartPolicy",), "OnFailure")(docs)
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
    _set(SPEC + ("suspend",), "yes")(docs)
    result = lint_docs(docs, schema_location=str(folder))
    ids = rule_ids(result)
    assert "KG011" not in ids and "KG150" in ids
