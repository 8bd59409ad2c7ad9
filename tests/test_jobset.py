"""--kind jobset and Kueue (--queue, priority, topology): goldens, derived names, failure policy
wiring, the stderr notes, and kgen lint on kgen's own output.

Goldens: every preset x jobset, with and without --queue (regenerate with --update-goldens and
review the diff, like tests/render/test_golden.py).
"""

import re

import pytest
import yaml
from click.testing import CliRunner

from kgen import RenderRequest
from kgen import jobset as js
from kgen.cli import cli
from kgen.lint.api import LintOptions, lint_text
from kgen.render.pipeline import build, manifest_text, render_documents
from kgen.yamlio import dump_yaml
from tests.conftest import PRESETS, ROOT

GOLDEN = ROOT / "tests" / "golden"
STUB = b"entrypoint/pod/kgen_entrypoint.pyz is embedded here\n"  # binaryData: base64 in the golden
QUEUE = "team-a"
GOLDEN_CASES = [(p, q) for p in PRESETS for q in (None, QUEUE)]


def golden_name(preset, queue):
    return f"{preset}-jobset" + ("-queue" if queue else "") + ".yaml"


def docs_of(text):
    return [d for d in yaml.safe_load_all(text) if d]


def rendered(**kw):
    flags = {"kind": kw.pop("kind", "jobset")}
    if "queue" in kw:
        flags["queue"] = kw.pop("queue")
    return docs_of(manifest_text(RenderRequest(flags=flags, **kw)))


def the(docs, kind):
    [doc] = [d for d in docs if d["kind"] == kind]
    return doc


def child_job(docs):
    return the(docs, "JobSet")["spec"]["replicatedJobs"][0]["template"]["spec"]


def pod(docs):
    return child_job(docs)["template"]


def trainer(docs):
    return pod(docs)["spec"]["containers"][0]


def env(docs):
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in trainer(docs)["env"]}


def run(*args):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.mark.parametrize("preset,queue", GOLDEN_CASES)
def test_golden(preset, queue, update_goldens):
    flags = {"kind": "jobset", "queue": queue}
    spec = build(RenderRequest(preset=preset, flags=flags))
    text = dump_yaml(render_documents(spec, entrypoint_source=STUB))
    path = GOLDEN / golden_name(preset, queue)
    if update_goldens:
        path.write_text(text)
    assert path.exists(), f"missing golden {path.name}: run pytest tests/test_jobset.py --update-goldens"
    assert text == path.read_text(), f"{path.name} differs: review, then --update-goldens"


@pytest.mark.parametrize("preset", PRESETS)
def test_one_replicated_job_of_n_indexed_pods_and_no_service(preset):
    docs = rendered(preset=preset)
    # JobSet creates the Service; the run's secret and NetworkPolicy are kgen's (the pods carry kgen's labels)
    assert [d["kind"] for d in docs] == ["ConfigMap", "NetworkPolicy", "JobSet"]
    selector = the(docs, "NetworkPolicy")["spec"]["podSelector"]["matchLabels"]
    assert selector.items() <= pod(docs)["metadata"]["labels"].items()
    jobset = the(docs, "JobSet")
    assert jobset["apiVersion"] == "jobset.x-k8s.io/v1alpha2"
    [rjob] = jobset["spec"]["replicatedJobs"]
    assert rjob["name"] == "node" and rjob["replicas"] == 1
    nodes = build(RenderRequest(preset=preset)).nodes
    job = child_job(docs)
    assert job["completionMode"] == "Indexed"
    assert job["completions"] == job["parallelism"] == nodes
    assert job["backoffLimit"] == 0
    assert pod(docs)["spec"]["restartPolicy"] == "Never"
    assert env(docs)["NNODES"] == str(nodes)


@pytest.mark.parametrize("preset", PRESETS)
def test_master_addr_is_pod_zero_in_jobset_hostname_scheme(preset):
    docs = rendered(preset=preset)
    name = the(docs, "JobSet")["metadata"]["name"]
    network = the(docs, "JobSet")["spec"]["network"]
    assert network == {"enableDNSHostnames": True, "subdomain": name, "publishNotReadyAddresses": True}
    assert env(docs)["MASTER_ADDR"] == f"{name}-node-0-0.{name}"
    assert pod(docs)["spec"]["subdomain"] == name  # what JobSet sets itself; kgen states it
    assert env(docs)["KGEN_KIND"] == "jobset"


def test_same_env_resources_volumes_and_values_as_the_job():
    kw = dict(preset="4x8", sets=["nccl.socketIfname=eth0", "shmSize=32Gi"], env=["HF_HOME=/data/hf"])
    job_docs = docs_of(manifest_text(RenderRequest(flags={"kind": "job"}, **kw)))
    set_docs = rendered(**kw)
    job_c = the(job_docs, "Job")["spec"]["template"]["spec"]["containers"][0]
    set_c = trainer(set_docs)
    for key in ("image", "command", "args", "resources", "volumeMounts", "ports", "securityContext"):
        assert set_c[key] == job_c[key], key
    job_env = {e["name"]: e for e in job_c["env"]}
    set_env = {e["name"]: e for e in set_c["env"]}
    # a JobSet restarts the whole group itself: the entrypoint does not re-form in place (0)
    changed = {"MASTER_ADDR", "KGEN_KIND", "KGEN_RESTART_ATTEMPT", "KGEN_MAX_REFORMATIONS"}
    assert set(set_env) - set(job_env) == {"KGEN_RESTART_ATTEMPT"}
    assert {k: v for k, v in set_env.items() if k not in changed} == {
        k: v for k, v in job_env.items() if k not in changed
    }
    job_pod = the(job_docs, "Job")["spec"]["template"]["spec"]
    assert pod(set_docs)["spec"]["volumes"] == job_pod["volumes"]
    assert the(set_docs, "ConfigMap") == the(job_docs, "ConfigMap")


def test_restart_attempt_and_child_job_uid_reach_the_entrypoint():
    e = env(rendered(preset="4x8"))
    assert e["KGEN_RESTART_ATTEMPT"] == {"fieldRef": {"fieldPath": f"metadata.labels['{js.RESTART_ATTEMPT_LABEL}']"}}
    assert e["KGEN_RUN_ID"] == {"fieldRef": {"fieldPath": "metadata.labels['batch.kubernetes.io/controller-uid']"}}


def test_failure_policy_wires_the_entrypoint_exit_codes():
    docs = rendered(preset="4x8", sets=["jobset.maxRestarts=5"])
    fp = the(docs, "JobSet")["spec"]["failurePolicy"]
    assert fp["maxRestarts"] == 5
    pfp = child_job(docs)["podFailurePolicy"]["rules"]
    # The Job controller's failure message names the index of the podFailurePolicy rule that matched.
    assert pfp[js.PFP_DISRUPTION_INDEX]["onPodConditions"] == [{"type": "DisruptionTarget", "status": "True"}]
    codes = pfp[js.PFP_NOT_RETRIABLE_INDEX]["onExitCodes"]
    assert codes == {"containerName": "trainer", "operator": "In", "values": [2, 4, 6]}
    assert all(r["action"] == "FailJob" for r in pfp)
    rules = {r["name"]: r for r in fp["rules"]}
    assert [r["name"] for r in fp["rules"]] == ["NotRetriable", "Deadline", "Disruption", "Restart"]  # fail first
    assert rules["Deadline"]["onJobFailureReasons"] == ["DeadlineExceeded"]
    msg_2 = "Container trainer for pod ml/x-node-0-1-abcde failed with exit code 2 matching FailJob rule at index 1"
    msg_disrupted = "Pod ml/x-node-0-1-abcde has condition DisruptionTarget matching FailJob rule at index 0"
    [p_fail] = rules["NotRetriable"]["onJobFailureMessagePatterns"]
    [p_dis] = rules["Disruption"]["onJobFailureMessagePatterns"]
    assert re.search(p_fail, msg_2) and not re.search(p_fail, msg_disrupted)
    assert re.search(p_dis, msg_disrupted) and not re.search(p_dis, msg_2)
    assert rules["NotRetriable"]["action"] == "FailJobSet"
    assert rules["Disruption"]["action"] == "RestartJobSetAndIgnoreMaxRestarts"
    assert rules["Restart"] == {
        "name": "Restart",
        "action": "RestartJobSet",
        "onJobFailureReasons": ["BackoffLimitExceeded"],
    }


def test_name_length_follows_the_jobset_webhook():
    limit = js.max_name_length(64)
    ok = "a" * limit
    spec = build(RenderRequest(preset="64x8", flags={"kind": "jobset", "name": ok}))
    assert len(js.longest_pod_name(spec.name, spec.nodes)) == 63
    res = run("render", "--preset", "64x8", "--kind", "jobset", "--name", ok + "b")
    assert res.exit_code == 2 and res.stdout == ""
    assert res.stderr.startswith("kgen: error: --name: is too long for a JobSet of 64 pods") and "\n" == res.stderr[-1]
    assert f"use at most {limit} characters" in res.stderr
    res = run("render", "--kind", "jobset", "--name", "7b-train", "--kubernetes-version", "1.37")
    assert res.exit_code == 2 and "must start with a letter" in res.stderr


@pytest.mark.parametrize("kind,suspended", [("job", True), ("jobset", True), ("statefulset", False)])
def test_queue_label_on_the_workload_and_suspend_where_kueue_documents_it(kind, suspended):
    docs = rendered(
        preset="4x8",
        kind=kind,
        queue=QUEUE,
        sets=["workloadPriorityClass=high", "topology.required=cloud.google.com/gce-topology-block"],
    )
    wl_kind = {"job": "Job", "jobset": "JobSet", "statefulset": "StatefulSet"}[kind]
    wl = the(docs, wl_kind)
    assert wl["metadata"]["labels"][js.QUEUE_LABEL] == QUEUE
    assert wl["metadata"]["labels"][js.PRIORITY_LABEL] == "high"
    assert wl["spec"].get("suspend") is (True if suspended else None)
    for d in docs:
        if d is not wl:
            assert js.QUEUE_LABEL not in d["metadata"].get("labels", {}), d["kind"]
    tpl = pod(docs) if kind == "jobset" else wl["spec"]["template"]
    assert js.QUEUE_LABEL not in tpl["metadata"]["labels"]  # Kueue reads the workload's label
    assert tpl["metadata"]["annotations"] == {js.REQUIRED_TOPOLOGY: "cloud.google.com/gce-topology-block"}
    text = manifest_text(RenderRequest(preset="4x8", flags={"kind": kind, "queue": QUEUE}))
    assert lint_text(text, "<t>", LintOptions()).exit_code == 0


def test_without_queue_nothing_is_suspended_or_labelled():
    for kind in ("job", "jobset", "statefulset"):
        text = manifest_text(RenderRequest(preset="4x8", flags={"kind": kind}))
        assert "kueue.x-k8s.io" not in text and "suspend" not in text


def test_queue_note_on_stderr_says_it_never_starts_without_kueue():
    res = run("render", "--kind", "jobset", "--queue", QUEUE)
    assert res.exit_code == 0
    assert docs_of(res.stdout)[-1]["spec"]["suspend"] is True
    assert "starts only when Kueue admits it" in res.stderr and "never starts" in res.stderr
    res = run("render", "--kind", "statefulset", "--queue", QUEUE)
    assert "starts at once, unqueued" in res.stderr
    res = run("render")
    assert res.stderr == ""


@pytest.mark.parametrize(
    "args,message",
    [
        (
            ["--queue", "Team A"],
            '--queue: must be a Kubernetes object name (lower case, digits, "-", "."), got "Team A"',
        ),
        (
            ["--queue", "q", "--set", "topology.required=a/b", "--set", "topology.preferred=a/c"],
            "--set topology.preferred: set either topology.required or topology.preferred, not both",
        ),
        (
            ["--queue", "q", "--set", "topology.required=a b"],
            '--set topology.required: must be a node label key, got "a b"',
        ),
        (
            ["--kind", "jobset", "--set", "jobset.maxRestarts=-1"],
            '--set jobset.maxRestarts: must be an integer >= 0, got "-1"',
        ),
    ],
)
def test_bad_kueue_and_jobset_values_are_one_line_errors(args, message):
    res = run("render", *args)
    assert res.exit_code == 2 and res.stdout == ""
    assert res.stderr.startswith("kgen: error: ") and res.stderr.count("\n") == 1
    assert message in res.stderr, res.stderr


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("version", ["1.27", "1.31", "1.34", "1.37"])
@pytest.mark.parametrize("queue", [None, QUEUE])
def test_kgen_lint_is_clean_on_its_own_jobset_output(preset, version, queue):
    text = manifest_text(
        RenderRequest(preset=preset, flags={"kind": "jobset", "queue": queue}, kubernetes_version=version)
    )
    result = lint_text(text, "<render>", LintOptions(kubernetes_version=version))
    assert "kind: NetworkPolicy" in text  # the run is fenced, so no KG134
    assert [f.rule_id for f in result.findings] == ["KG011"], [f.text() for f in result.findings]
    assert result.exit_code == 0


def test_docs_and_readme_explain_the_choice():
    readme = (ROOT / "README.md").read_text()
    assert "## Job, StatefulSet or JobSet?" in readme and "never starts on a cluster without Kueue" in readme
    doc = (ROOT / "docs" / "jobset.md").read_text()
    for needle in (
        "onJobFailureMessagePatterns",
        "RestartJobSetAndIgnoreMaxRestarts",
        "KGEN_RESTART_ATTEMPT",
        "Limits",
    ):
        assert needle in doc, needle


def test_entrypoint_accepts_jobset_and_puts_the_restart_attempt_in_the_rendezvous_id():
    import importlib.util

    path = ROOT / "entrypoint" / "kgen_entrypoint.py"
    spec = importlib.util.spec_from_file_location("kgen_entrypoint_js", path)
    ep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ep)
    base = {"NNODES": "1", "NPROC_PER_NODE": "1", "MASTER_ADDR": "t-node-0-0.t", "MASTER_PORT": "29500"}
    env = {**base, "JOB_COMPLETION_INDEX": "0", "KGEN_KIND": "jobset", "KGEN_JOB_NAME": "t", "KGEN_RUN_ID": "u1"}
    cfg = ep.load_config({**env, "KGEN_RESTART_ATTEMPT": "3"})
    assert cfg.problems == [] and cfg.node_rank == 0
    assert cfg.rdzv_id == "t-u1-attempt3"
    assert ep.load_config(env).rdzv_id == "t-u1"  # Job / StatefulSet pods: unchanged
