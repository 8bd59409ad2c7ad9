"""Issue 17.2-17.3 in the manifests: the run's Secret (derived, deterministic, mounted read-only) and
the NetworkPolicy that admits only the run's own pods, for every kind."""

from __future__ import annotations

import base64
import os
import stat

import pytest
import yaml
from click.testing import CliRunner

from kgen.api import RenderRequest, render
from kgen.cli import cli
from kgen.errors import UsageError
from kgen.render import runsecret
from tests.conftest import RUN_KEY


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


@pytest.mark.parametrize("kind", ["job", "statefulset", "jobset"])
def test_every_kind_mounts_the_runs_secret_read_only_and_is_fenced(kind):
    docs = docs_of(render(RenderRequest(preset="4x8", flags={"kind": kind, "name": "llm", "namespace": "ml"})))
    objs = by_kind(docs)
    secret = objs["Secret"]
    assert secret["metadata"]["name"] == "llm-auth" and secret["immutable"] is True
    value = base64.b64decode(secret["data"]["secret"]).decode()
    assert value == runsecret.derive(RUN_KEY.read_bytes().strip(), "ml", "llm") and len(value) == 64
    spec = pod_spec(docs)
    [vol] = [v for v in spec["volumes"] if v["name"] == "kgen-secret"]
    assert vol["secret"]["secretName"] == "llm-auth"
    [mount] = [m for m in spec["containers"][0]["volumeMounts"] if m["name"] == "kgen-secret"]
    assert mount == {"name": "kgen-secret", "mountPath": "/var/run/secrets/kgen", "readOnly": True}
    env = {e["name"]: e for e in spec["containers"][0]["env"]}
    assert env["KGEN_SECRET_FILE"] == {"name": "KGEN_SECRET_FILE", "value": "/var/run/secrets/kgen/secret"}
    assert value not in yaml.safe_dump(spec)  # the secret itself never in the pod spec or the environment
    policy = objs["NetworkPolicy"]["spec"]
    selector = {"app.kubernetes.io/instance": "llm", "kgen.dev/role": "trainer"}
    assert policy["podSelector"] == {"matchLabels": selector}
    assert selector.items() <= pod_labels(docs).items()  # the run's pods (JobSet: through its template)
    assert policy["policyTypes"] == ["Ingress"]  # egress open: DNS, images, storage
    assert policy["ingress"] == [{"from": [{"podSelector": {"matchLabels": selector}}]}]  # every port


def test_rendering_again_gives_the_same_secret_and_another_run_another():
    def secret(**flags):
        return by_kind(docs_of(render(RenderRequest(preset="4x8", flags=flags))))["Secret"]["data"]["secret"]

    assert secret(name="a") == secret(name="a") != secret(name="b")
    assert secret(name="a", namespace="x") != secret(name="a", namespace="y")


def test_the_key_is_created_0600_on_first_use_under_xdg_config(tmp_path, monkeypatch):
    monkeypatch.delenv("KGEN_KEY_FILE")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    first = render(RenderRequest(preset="4x8"))
    key = tmp_path / "cfg" / "kgen" / "run-key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and stat.S_IMODE(key.parent.stat().st_mode) == 0o700
    assert len(key.read_text().strip()) == 64
    assert render(RenderRequest(preset="4x8")) == first  # the same key from then on
    key.write_text("0" * 64 + "\n")
    assert render(RenderRequest(preset="4x8")) != first


@pytest.mark.parametrize(
    "content, message",
    [(None, "cannot read the run key"), ("short\n", "must hold 32 to 4096 characters, it holds 5")],
)
def test_a_bad_key_file_is_one_line_exit_2(tmp_path, monkeypatch, content, message):
    path = tmp_path / "key"
    if content is not None:
        path.write_text(content)
    monkeypatch.setenv("KGEN_KEY_FILE", str(path))
    res = CliRunner().invoke(cli, ["render", "--preset", "4x8"])
    assert res.exit_code == 2 and res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kgen: error: KGEN_KEY_FILE: ") and message in lines[0]
    assert "auth.secretName" in lines[0]


def test_a_named_secret_is_mounted_and_none_rendered(monkeypatch):
    monkeypatch.setenv("KGEN_KEY_FILE", "/nonexistent/key")  # not needed at all then
    docs = docs_of(render(RenderRequest(preset="4x8", sets=["auth.secretName=team-run-secret"])))
    assert "Secret" not in by_kind(docs)
    [vol] = [v for v in pod_spec(docs)["volumes"] if v["name"] == "kgen-secret"]
    assert vol["secret"]["secretName"] == "team-run-secret"
    with pytest.raises(UsageError, match="auth.secretName: must be a Secret name"):
        render(RenderRequest(preset="4x8", sets=["auth.secretName=Bad_Name"]))


def test_one_node_needs_no_secret():
    docs = docs_of(render(RenderRequest(flags={"nodes": "1", "gpus": "0"})))
    assert "Secret" not in by_kind(docs) and "NetworkPolicy" in by_kind(docs)  # torch's store is still fenced
    spec = pod_spec(docs)
    assert all(v["name"] != "kgen-secret" for v in spec["volumes"])
    assert "KGEN_SECRET_FILE" not in {e["name"] for e in spec["containers"][0]["env"]}


def test_more_ingress_or_none():
    rule = (
        "{from: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: monitoring}}}], ports: [{port: 9090}]}"
    )
    docs = docs_of(render(RenderRequest(preset="4x8", sets=[f"networkPolicy.extraIngress=[{rule}]"])))
    ingress = by_kind(docs)["NetworkPolicy"]["spec"]["ingress"]
    assert len(ingress) == 2 and ingress[1]["ports"] == [{"port": 9090}]
    assert "NetworkPolicy" not in by_kind(
        docs_of(render(RenderRequest(preset="4x8", sets=["networkPolicy.enabled=false"])))
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


def test_the_real_home_is_not_touched():
    assert os.environ["KGEN_KEY_FILE"] == str(RUN_KEY)  # tests/conftest.py: every test renders with it
