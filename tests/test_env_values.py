"""A secret into the environment: values `env` takes valueFrom (secretKeyRef,
configMapKeyRef, fieldRef, resourceFieldRef) and `envFrom` for every kind, checked with one-line
errors, rendered and linted clean under --strict; a patch targets the workload (or its pod template)
whatever its kind."""

import pytest
import yaml
from click.testing import CliRunner

from kgen.cli import cli

KINDS = ["job", "statefulset", "jobset"]

VALUES = """\
env:
  HF_TOKEN:
    valueFrom:
      secretKeyRef: {name: hf-token, key: token}
  LR: "3e-4"
  ANSWER: y
  POD_IP:
    valueFrom: {fieldRef: {fieldPath: status.podIP}}
  RACK:
    valueFrom: {fieldRef: {fieldPath: "metadata.labels['topology/rack']"}}
  MEM_MB:
    valueFrom: {resourceFieldRef: {resource: limits.memory, divisor: 1Mi}}
  CFG:
    valueFrom: {configMapKeyRef: {name: train-config, key: y, optional: true}}
envFrom:
- secretRef: {name: wandb}
- configMapRef: {name: train-env, optional: false}
  prefix: TRAIN_
"""


def run(*args, input=None):
    return CliRunner().invoke(cli, list(args), input=input)


def trainer(text: str) -> dict:
    docs = [d for d in yaml.safe_load_all(text) if d]
    workload = next(d for d in docs if d["kind"] in ("Job", "StatefulSet", "JobSet"))
    spec = workload["spec"]
    if workload["kind"] == "JobSet":
        spec = spec["replicatedJobs"][0]["template"]["spec"]
    return next(c for c in spec["template"]["spec"]["containers"] if c["name"] == "trainer")


@pytest.mark.parametrize("kind", KINDS)
def test_value_from_and_env_from_render_for_every_kind_and_lint_clean(kind, tmp_path):
    values = tmp_path / "v.yaml"
    values.write_text(VALUES)
    res = run("render", "-f", str(values), "--kind", kind, "--nodes", "2", "--gpus", "0")
    assert res.exit_code == 0, res.stderr
    assert "warning" not in res.stderr
    env = {e["name"]: e for e in trainer(res.stdout)["env"]}
    assert env["HF_TOKEN"] == {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}}}
    assert env["LR"] == {"name": "LR", "value": "3e-4"} and env["ANSWER"]["value"] == "y"  # strings stay strings
    assert env["POD_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert env["RACK"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.labels['topology/rack']"
    assert env["MEM_MB"]["valueFrom"] == {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}
    assert env["CFG"]["valueFrom"] == {"configMapKeyRef": {"name": "train-config", "key": "y", "optional": True}}
    assert trainer(res.stdout)["envFrom"] == [
        {"secretRef": {"name": "wandb"}},
        {"configMapRef": {"name": "train-env", "optional": False}, "prefix": "TRAIN_"},
    ]
    manifest = tmp_path / "m.yaml"
    manifest.write_text(res.stdout)
    linted = run("lint", "--strict", str(manifest))
    assert linted.exit_code == 0, linted.stdout


def test_a_literal_secret_warns_and_a_secret_reference_does_not():
    literal = run("render", "--set", "env.HF_TOKEN=hf_abc123")
    assert literal.exit_code == 0 and "KG058" in literal.stderr
    ref = run("render", "--set", "env.HF_TOKEN={valueFrom: {secretKeyRef: {name: hf-token, key: token}}}")
    assert ref.exit_code == 0 and ref.stderr == ""
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}}} in trainer(
        ref.stdout
    )["env"]


def test_a_json_value_given_with_set_stays_a_string():
    res = run("render", "--set", 'env.CONFIG={"a": 1}')
    assert {"name": "CONFIG", "value": '{"a": 1}'} in trainer(res.stdout)["env"]


def test_env_layers_merge_by_name(tmp_path):
    values = tmp_path / "v.yaml"
    values.write_text(VALUES)
    res = run("render", "-f", str(values), "--env", "HF_TOKEN=override", "--set", "env.EXTRA=1")
    env = {e["name"]: e for e in trainer(res.stdout)["env"]}
    assert env["HF_TOKEN"] == {"name": "HF_TOKEN", "value": "override"}  # the flag wins, as every layer
    assert env["EXTRA"]["value"] == "1" and "POD_IP" in env


BAD = [
    (
        "env: {A: {valueFrom: {secretRef: {name: x, key: k}}}}",
        "env: A: valueFrom must name exactly one of secretKeyRef, configMapKeyRef, fieldRef, resourceFieldRef; "
        "got secretRef (did you mean secretKeyRef?)",
    ),
    ("env: {A: {valueFrom: {secretKeyRef: {name: x}}}}", "env: A: valueFrom.secretKeyRef: needs key"),
    (
        "env: {A: {valueFrom: {secretKeyRef: {name: x, key: k}, fieldRef: {fieldPath: status.podIP}}}}",
        "got secretKeyRef, fieldRef",
    ),
    ("env: {A: {valueFrom: {secretKeyRef: {name: Bad_Name, key: k}}}}", "must be a Secret name (a DNS subdomain)"),
    ("env: {A: {valueFrom: {configMapKeyRef: {name: c, key: 'a b'}}}}", "must be a ConfigMap key"),
    ("env: {A: {valueFrom: {secretKeyRef: {name: s, key: ..data}}}}", "must be a Secret key"),  # IsConfigMapKey
    ("env: {A: {valueFrom: {secretKeyRef: {name: x, key: k, optional: maybe}}}}", "optional: must be true or false"),
    ("env: {A: {valueFrom: {secretKeyRef: {name: x, key: k, keyy: 1}}}}", "unknown field keyy (did you mean key?)"),
    ("env: {A: {valueFrom: {fieldRef: {fieldPath: status.ip}}}}", '"status.ip" is not a field env can read'),
    ("env: {A: {valueFrom: {fieldRef: {fieldPath: \"metadata.labels['a b']\"}}}}", '"a b" in "metadata.labels'),
    ("env: {A: {valueFrom: {resourceFieldRef: {resource: limits.gpu}}}}", '"limits.gpu" is not a resource env can'),
    (
        "env: {A: {valueFrom: {resourceFieldRef: {resource: limits.cpu, containerName: sidecar}}}}",
        '"sidecar" is no container of the pod',
    ),
    ("env: {A: {valueFrom: {resourceFieldRef: {resource: limits.cpu, divisor: 0}}}}", "divisor: must be a quantity"),
    ("env: {A: {value: x}}", "env: A: must be a string or a mapping with only valueFrom, got value"),
    ("env: {A: [x]}", "env: A: must be a string or {valueFrom: ...}"),
    ("env: [A]", "env: must be a mapping of NAME: value (or NAME: {valueFrom: ...}), got \"['A']\""),
    ("envFrom: [{secretRef: {name: x}, configMapRef: {name: y}}]", "envFrom: [0]: needs exactly one of"),
    ("envFrom: [{secretKeyRef: {name: x}}]", "envFrom: [0]: unknown field secretKeyRef (did you mean secretRef?)"),
    ("envFrom: [{secretRef: {}}]", "envFrom: [0].secretRef.name: must be a Secret name"),
    ("envFrom: [{secretRef: {name: x}, prefix: '1X'}]", "envFrom: [0].prefix: must be a valid environment"),
]


@pytest.mark.parametrize("text,words", BAD, ids=[t for t, _ in BAD])
def test_bad_env_is_one_line_that_names_the_file_and_key(text, words, tmp_path):
    values = tmp_path / "v.yaml"
    values.write_text(text + "\n")
    res = run("render", "-f", str(values))
    assert res.exit_code == 2 and res.stdout == ""
    assert res.stderr.startswith(f"kgen: error: {values}: ") and res.stderr.count("\n") == 1, res.stderr
    assert words in res.stderr


def test_reserved_names_stay_refused_for_references_too():
    res = run("render", "--set", "env.MASTER_ADDR={valueFrom: {fieldRef: {fieldPath: status.podIP}}}")
    assert res.exit_code == 2 and "MASTER_ADDR is set by kgen" in res.stderr


# ---- patches that target the workload whatever its kind -----------------------------------------------
PATCHES = """\
patches:
- target: {kind: PodTemplate}
  patch:
    metadata: {annotations: {team: ml}}
    spec:
      containers:
      - name: trainer
        env: [{name: EXTRA, valueFrom: {secretKeyRef: {name: s, key: k}}}]
- target: {kind: workload}
  patch:
    metadata: {annotations: {owner: me}}
"""


@pytest.mark.parametrize("kind", KINDS)
def test_a_patch_targets_the_workload_and_its_pod_template_for_every_kind(kind, tmp_path):
    values = tmp_path / "v.yaml"
    values.write_text(PATCHES)
    res = run("render", "-f", str(values), "--kind", kind, "--gpus", "0")
    assert res.exit_code == 0, res.stderr
    docs = [d for d in yaml.safe_load_all(res.stdout) if d]
    workload = next(d for d in docs if d["kind"] in ("Job", "StatefulSet", "JobSet"))
    assert workload["metadata"]["annotations"]["owner"] == "me"
    assert all("owner" not in (d["metadata"].get("annotations") or {}) for d in docs if d is not workload)
    spec = workload["spec"]["replicatedJobs"][0]["template"]["spec"] if kind == "jobset" else workload["spec"]
    assert spec["template"]["metadata"]["annotations"]["team"] == "ml"
    env = {e["name"]: e for e in trainer(res.stdout)["env"]}
    assert env["EXTRA"]["valueFrom"]["secretKeyRef"] == {"name": "s", "key": "k"} and "NNODES" in env
    manifest = tmp_path / "m.yaml"
    manifest.write_text(res.stdout)
    assert run("lint", "--strict", str(manifest)).exit_code == 0


def test_a_pod_template_patch_cannot_change_kgens_labels(tmp_path):
    values = tmp_path / "v.yaml"
    values.write_text(
        "patches:\n- target: {kind: PodTemplate}\n  patch: {metadata: {labels: {app.kubernetes.io/instance: x}}}\n"
    )
    res = run("render", "-f", str(values), "--kind", "jobset")
    assert res.exit_code == 2
    assert "changes label app.kubernetes.io/instance of the pod template" in res.stderr


def test_a_kind_patch_that_misses_points_at_workload(tmp_path):
    values = tmp_path / "v.yaml"
    values.write_text("patches:\n- target: {kind: Job}\n  patch: {metadata: {annotations: {a: b}}}\n")
    res = run("render", "-f", str(values), "--kind", "statefulset")
    assert res.exit_code == 2 and "target Job matches no rendered object" in res.stderr
    assert "kind Workload or PodTemplate targets the workload whatever its kind" in res.stderr
