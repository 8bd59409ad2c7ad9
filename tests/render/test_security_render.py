"""In the manifests: where each kind's pods get the run's secret (never from the
rendered output) and the NetworkPolicy that admits only the run's own pods, for every kind."""

from __future__ import annotations

import pytest
import yaml
from click.testing import CliRunner

from kgen import RenderRequest
from kgen.cli import cli
from kgen.errors import UsageError
from kgen.render.pipeline import manifest_text

UID_REF = {"fieldRef": {"fieldPath": "metadata.labels['batch.kubernetes.io/controller-uid']"}}
NAMESPACE_REF = {"fieldRef": {"fieldPath": "metadata.namespace"}}


def docs_of(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d]


def by_kind(docs: list[dict]) -> dict[str, dict]:
    return {d["kind"]: d for d in docs}


def pod_spec(docs: list[dict]) -> dict:
    wl = docs[-1]
    if wl["kind"] == "JobSet":
        return wl["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    return wl["spec"]["template"]["spec"]


def pod_labels(docs: list[dict]) -> dict:
    wl = docs[-1]
    if wl["kind"] == "JobSet":
        return wl["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"]["labels"]
    return wl["spec"]["template"]["metadata"]["labels"]


def env_of(docs: list[dict]) -> dict[str, dict]:
    return {e["name"]: e for e in pod_spec(docs)["containers"][0]["env"]}


@pytest.mark.parametrize("kind", ["job", "jobset"])
def test_job_pods_derive_the_secret_from_their_jobs_uid_and_nothing_is_rendered(kind):
    docs = docs_of(manifest_text(RenderRequest(preset="4x8", flags={"kind": kind, "name": "llm", "namespace": "ml"})))
    assert "Secret" not in by_kind(docs)
    env = env_of(docs)
    assert env["KGEN_JOB_UID"] == {"name": "KGEN_JOB_UID", "valueFrom": UID_REF}
    assert env["KGEN_NAMESPACE"] == {"name": "KGEN_NAMESPACE", "valueFrom": NAMESPACE_REF}
    assert "KGEN_SECRET_FILE" not in env and "KGEN_AUTH_NAME" not in env
    spec = pod_spec(docs)
    assert all(v["name"] != "kgen-secret" for v in spec["volumes"])
    assert all(m["name"] != "kgen-secret" for m in spec["containers"][0]["volumeMounts"])


def test_a_statefulsets_pods_mount_its_secret_optionally_and_render_says_how_to_make_it():
    res = CliRunner().invoke(cli, ["render", "--preset", "4x8", "--kind", "statefulset", "--name", "llm", "-n", "ml"])
    assert res.exit_code == 0, res.output
    docs = docs_of(res.stdout)
    assert "Secret" not in by_kind(docs)
    spec = pod_spec(docs)
    [vol] = [v for v in spec["volumes"] if v["name"] == "kgen-secret"]
    assert vol["secret"] == {"secretName": "llm-auth", "defaultMode": 0o444, "optional": True}
    [mount] = [m for m in spec["containers"][0]["volumeMounts"] if m["name"] == "kgen-secret"]
    assert mount == {"name": "kgen-secret", "mountPath": "/var/run/secrets/kgen", "readOnly": True}
    env = env_of(docs)
    assert env["KGEN_SECRET_FILE"] == {"name": "KGEN_SECRET_FILE", "value": "/var/run/secrets/kgen/secret"}
    assert env["KGEN_AUTH_NAME"] == {"name": "KGEN_AUTH_NAME", "value": "llm-auth"}
    assert "KGEN_JOB_UID" not in env
    note = [ln for ln in res.stderr.splitlines() if "Secret llm-auth" in ln]
    assert len(note) == 1 and note[0].startswith("kgen: note: kind statefulset: its pods carry no Job UID")
    assert note[0].endswith(
        "kubectl create secret generic llm-auth -n ml --from-literal=secret=\"$(python3 -c 'import secrets; "
        "print(secrets.token_hex(32))')\" && kubectl label secret llm-auth -n ml app.kubernetes.io/instance=llm "
        "app.kubernetes.io/managed-by=kgen"
    )
    assert "warning" not in res.stderr


def test_render_and_the_entrypoint_give_the_same_command():
    import importlib.util

    from kgen.render.runsecret import create_secret_line
    from kgen.resources import entrypoint_path

    spec = importlib.util.spec_from_file_location("kgen_entrypoint_secret_line", entrypoint_path())
    ep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ep)
    for ns in ("ml", "", "team-a"):
        assert create_secret_line("llm-auth", ns, "llm") == ep.create_secret_line("llm-auth", ns, "llm")


@pytest.mark.parametrize("kind", ["job", "statefulset", "jobset"])
def test_every_kind_is_fenced(kind):
    docs = docs_of(manifest_text(RenderRequest(preset="4x8", flags={"kind": kind, "name": "llm", "namespace": "ml"})))
    policy = by_kind(docs)["NetworkPolicy"]["spec"]
    selector = {"app.kubernetes.io/instance": "llm", "kgen.dev/role": "trainer"}
    assert policy["podSelector"] == {"matchLabels": selector}
    assert selector.items() <= pod_labels(docs).items()  # the run's pods (JobSet: through its template)
    assert policy["policyTypes"] == ["Ingress"]  # egress open: DNS, images, storage
    assert policy["ingress"] == [{"from": [{"podSelector": {"matchLabels": selector}}]}]  # every port


@pytest.mark.parametrize("kind", ["job", "statefulset", "jobset"])
def test_a_named_secret_is_mounted_for_every_kind_waited_for_and_none_rendered(kind):
    docs = docs_of(manifest_text(RenderRequest(preset="4x8", flags={"kind": kind}, sets=["auth.secretName=team-run"])))
    assert "Secret" not in by_kind(docs)
    [vol] = [v for v in pod_spec(docs)["volumes"] if v["name"] == "kgen-secret"]
    assert vol["secret"] == {"secretName": "team-run", "defaultMode": 0o444}  # not optional: the kubelet waits
    env = env_of(docs)
    assert env["KGEN_SECRET_FILE"]["value"] == "/var/run/secrets/kgen/secret" and "KGEN_JOB_UID" not in env
    with pytest.raises(UsageError, match="auth.secretName: must be a Secret name"):
        manifest_text(RenderRequest(preset="4x8", sets=["auth.secretName=Bad_Name"]))


def test_one_node_needs_no_secret():
    docs = docs_of(manifest_text(RenderRequest(flags={"nodes": "1", "gpus": "0"})))
    assert "Secret" not in by_kind(docs) and "NetworkPolicy" in by_kind(docs)  # torch's store is still fenced
    spec = pod_spec(docs)
    assert all(v["name"] != "kgen-secret" for v in spec["volumes"])
    assert not {"KGEN_SECRET_FILE", "KGEN_JOB_UID", "KGEN_AUTH_NAME"} & set(env_of(docs))


def test_nothing_kgen_renders_is_immutable():
    """Re-applying a run's manifest, rendered anywhere, or after `kubectl delete <workload>`, never meets an
    immutable object of a fixed name."""
    for kind in ("job", "statefulset", "jobset"):
        request = RenderRequest(preset="64x8", flags={"kind": kind}, sets=["podDisruptionBudget=true"])
        for doc in docs_of(manifest_text(request)):
            assert "immutable" not in doc, doc["kind"]


def test_more_ingress_or_none():
    rule = (
        "{from: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: monitoring}}}], ports: [{port: 9090}]}"
    )
    docs = docs_of(manifest_text(RenderRequest(preset="4x8", sets=[f"networkPolicy.extraIngress=[{rule}]"])))
    ingress = by_kind(docs)["NetworkPolicy"]["spec"]["ingress"]
    assert len(ingress) == 2 and ingress[1]["ports"] == [{"port": 9090}]
    assert "NetworkPolicy" not in by_kind(
        docs_of(manifest_text(RenderRequest(preset="4x8", sets=["networkPolicy.enabled=false"])))
    )


def test_a_bad_ingress_rule_is_refused_naming_the_values_key():
    res = CliRunner().invoke(cli, ["render", "--set", "networkPolicy.extraIngress=[{from: [{podSelector: 3}]}]"])
    assert res.exit_code == 2 and res.stdout == ""
    assert "NetworkPolicy/" in res.stderr and "(check --set networkPolicy.extraIngress)" in res.stderr, res.stderr


def test_host_network_pods_get_no_policy_and_a_note():
    res = CliRunner().invoke(cli, ["render", "--preset", "4x8", "--set", "hostNetwork=true"])
    assert res.exit_code == 0
    assert "NetworkPolicy" not in by_kind(docs_of(res.stdout))
    assert "kgen: note: hostNetwork: NetworkPolicies do not apply to host-network pods" in res.stderr
