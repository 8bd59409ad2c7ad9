"""Values semantics: defaults that do not lie, requests, the pod keys
users asked for, the `patches:` escape hatch, commands given as strings, error messages that
point the right way, and the self-check's warnings on stderr."""

import re

import pytest
import yaml
from click.testing import CliRunner

from kgen.cli import cli


def run(*args, input=None):
    return CliRunner().invoke(cli, list(args), input=input, catch_exceptions=False)


def docs_of(res):
    assert res.exit_code == 0, res.stderr
    return {d["kind"]: d for d in yaml.safe_load_all(res.stdout) if d}


def workload(docs):
    return docs.get("Job") or docs["StatefulSet"]


def pod(docs):
    return workload(docs)["spec"]["template"]["spec"]


def trainer(docs):
    return pod(docs)["containers"][0]


def env(docs):
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in trainer(docs)["env"]}


def values_file(tmp_path, text, name="v.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def one_line_error(res):
    assert res.exit_code == 2 and res.stdout == "", (res.exit_code, res.stdout[:200])
    assert res.stderr.startswith("kgen: error: ") and res.stderr.count("\n") == 1, res.stderr
    return res.stderr


def kubelet_expand(value, defined):
    """Kubernetes' $(VAR) expansion of command, args and env values ($$ -> $; unknown stays)."""
    return re.sub(
        r"\$\$|\$\(([^)]*)\)", lambda m: "$" if m.group(0) == "$$" else defined.get(m.group(1), m.group(0)), value
    )


# ---------------------------------------------------------------- item 2: names and defaults
def test_shape_from_flags_carries_nothing_of_the_smoke_test_preset():
    docs = docs_of(run("render", "--nodes", "4", "--gpus", "8"))
    assert workload(docs)["metadata"]["name"] == "kgen-train"
    e = env(docs)
    assert e["MASTER_ADDR"] == "kgen-train-0.kgen-train"
    assert e["NCCL_DEBUG"] == "WARN"  # not the smoke test's INFO
    assert e["KGEN_MASTER_WAIT_TIMEOUT"] == "600"  # the built-in bound, not the smoke test's 300
    assert workload(docs)["spec"]["completions"] == 4


@pytest.mark.parametrize(
    "args",
    [["--gpus", "4"], ["--set", "nodes=3"], ["--set", "nprocPerNode=2", "--gpus", "0"], ["--", "train.py"]],
    ids=["gpus", "set-nodes", "set-nproc", "command"],
)
def test_anything_that_says_what_to_run_starts_from_the_built_in_defaults(args):
    docs = docs_of(run("render", *args))
    assert workload(docs)["metadata"]["name"] == "kgen-train"
    assert env(docs)["NCCL_DEBUG"] == "WARN"


@pytest.mark.parametrize(
    "args", [[], ["--kind", "statefulset"], ["--image", "ghcr.io/me/img:1"], ["--namespace", "ml"]]
)
def test_nothing_said_about_the_run_is_the_smoke_test(args):
    docs = docs_of(run("render", *args))
    assert workload(docs)["metadata"]["name"] == "kgen-2node-test"
    assert env(docs)["NCCL_DEBUG"] == "INFO"
    assert trainer(docs)["args"] == ["--smoke-test"]


def qos(pod_spec):
    """The pod's QoS class, computed the way the kubelet does (cpu and memory only)."""
    requests, limits = {}, {}
    for c in pod_spec.get("initContainers", []) + pod_spec["containers"]:
        requests.update({k: v for k, v in c.get("resources", {}).get("requests", {}).items() if k in ("cpu", "memory")})
        limits.update({k: v for k, v in c.get("resources", {}).get("limits", {}).items() if k in ("cpu", "memory")})
    if not requests and not limits:
        return "BestEffort"
    resources = [c.get("resources", {}) for c in pod_spec["containers"]]
    if all(
        all(
            r.get("limits", {}).get(k) and r.get("limits", {}).get(k) == r.get("requests", {}).get(k, r["limits"][k])
            for k in ("cpu", "memory")
        )
        for r in resources
    ):
        return "Guaranteed"
    return "Burstable"


@pytest.mark.parametrize("kind", ["job", "statefulset"])
@pytest.mark.parametrize("preset", ["2node-test", "4x8", "64x8", "4x1", None])
def test_every_preset_and_the_defaults_render_burstable_gpu_pods(preset, kind):
    args = ["--preset", preset] if preset else ["--nodes", "2", "--gpus", "8"]
    docs = docs_of(run("render", *args, "--kind", kind))
    requests = trainer(docs)["resources"]["requests"]
    assert requests["cpu"] and requests["memory"]
    assert qos(pod(docs)) == "Burstable"


def test_auto_requests_follow_the_shape_and_flags_override_them():
    docs = docs_of(run("render", "--gpus", "4"))
    assert trainer(docs)["resources"]["requests"] == {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "4"}
    cpu_job = docs_of(run("render", "--gpus", "0", "--set", "nprocPerNode=3"))
    assert trainer(cpu_job)["resources"] == {"requests": {"cpu": "3", "memory": "6Gi"}}
    flags = docs_of(run("render", "--preset", "4x8", "--cpu", "48", "--memory", "512Gi"))
    assert trainer(flags)["resources"]["requests"] == {"cpu": "48", "memory": "512Gi", "nvidia.com/gpu": "8"}
    none = docs_of(run("render", "--preset", "4x8", "--set", "cpu=", "--set", "memory="))
    assert trainer(none)["resources"]["requests"] == {"nvidia.com/gpu": "8"}
    specific = docs_of(run("render", "--preset", "4x8", "--set", "resources.requests.cpu=40"))
    assert trainer(specific)["resources"]["requests"]["cpu"] == "40"  # the more specific key wins


def test_guaranteed_sets_limits_equal_to_requests():
    docs = docs_of(run("render", "--preset", "4x8", "--set", "guaranteed=true"))
    res = trainer(docs)["resources"]
    assert res["limits"] == res["requests"] == {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "8"}
    assert qos(pod(docs)) == "Guaranteed"


@pytest.mark.parametrize(
    "args,message",
    [
        (["--cpu", "lots"], '--cpu: must be a positive quantity like 32 or 500m (or auto), got "lots"'),
        (["--memory", "64GB"], "--memory: must be a positive quantity like 256Gi (or auto)"),
        (["--set", "resources.limits.memory=8Gi"], "memory: limit 8Gi is below the request 64Gi"),
        (["--set", "guaranteed=true", "--set", "cpu="], "guaranteed: needs a cpu request"),
        (["--set", "guaranteed=true", "--set", "resources.limits.cpu=32"], "guaranteed needs limits = requests"),
    ],
)
def test_bad_requests(args, message):
    assert message in one_line_error(run("render", "--preset", "4x8", *args))


# ---------------------------------------------------------------- item 4: keys and patches
def test_pod_keys_land_in_the_pod_spec(tmp_path):
    path = values_file(
        tmp_path,
        """\
runtimeClassName: nvidia
schedulerName: volcano
podSecurityContext: {fsGroup: 1000, runAsUser: 1000, runAsNonRoot: true}
topologySpreadConstraints:
- {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: ScheduleAnyway,
   labelSelector: {matchLabels: {app.kubernetes.io/instance: kgen-train}}}
initContainers:
- {name: fetch, image: "busybox:1.36", command: [sh, -c, "echo fetch"]}
""",
    )
    for kind in ("job", "statefulset"):
        spec = pod(docs_of(run("render", "--preset", "4x8", "--kind", kind, "-f", path)))
        assert spec["runtimeClassName"] == "nvidia"
        assert spec["schedulerName"] == "volcano"
        assert spec["securityContext"] == {"fsGroup": 1000, "runAsUser": 1000, "runAsNonRoot": True}
        assert spec["topologySpreadConstraints"][0]["maxSkew"] == 1
        assert spec["initContainers"][0]["name"] == "fetch"
        assert "hostNetwork" not in spec and "dnsPolicy" not in spec


def test_set_runtime_class_name_works():
    docs = docs_of(run("render", "--set", "runtimeClassName=nvidia"))
    assert pod(docs)["runtimeClassName"] == "nvidia"


def test_host_network_resolves_cluster_names_and_host_ipc_replaces_the_shm_volume():
    docs = docs_of(run("render", "--preset", "4x8", "--set", "hostNetwork=true"))
    spec = pod(docs)
    assert spec["hostNetwork"] is True and "hostIPC" not in spec
    assert spec["dnsPolicy"] == "ClusterFirstWithHostNet"  # MASTER_ADDR is a cluster DNS name
    # hostIPC: the node's /dev/shm, so no memory-backed volume over it; the self-check (KG110) accepts it
    ipc = docs_of(run("render", "--preset", "4x8", "--set", "hostIPC=true"))
    assert pod(ipc)["hostIPC"] is True
    assert "dshm" not in [v["name"] for v in pod(ipc)["volumes"]]
    assert "/dev/shm" not in [m["mountPath"] for m in trainer(ipc)["volumeMounts"]]
    explicit = docs_of(run("render", "--set", "dnsPolicy=None", "--set", "patches=" + DNS_CONFIG_PATCH))
    assert pod(explicit)["dnsPolicy"] == "None"


DNS_CONFIG_PATCH = "[{target: {kind: Job}, patch: {spec: {template: {spec: {dnsConfig: {nameservers: [10.0.0.10]}}}}}}]"


@pytest.mark.parametrize(
    "sets,message",
    [
        (["dnsPolicy=Default"], "dnsPolicy: Default resolves through the node"),
        (["hostNetwork=true", "dnsPolicy=ClusterFirst"], "ClusterFirst with hostNetwork falls back"),
        (["dnsPolicy=clusterfirst"], "dnsPolicy: must be one of ClusterFirst, ClusterFirstWithHostNet, None"),
        (["runtimeClassName=NVIDIA Runtime"], "runtimeClassName: must be a DNS subdomain"),
        (["schedulerName=my scheduler"], "schedulerName: must be a scheduler name without spaces"),
        (["podSecurityContext={fsGroup: 1000, bogus: 1}"], "fails KG010"),
    ],
)
def test_bad_pod_keys(sets, message):
    args = [a for s in sets for a in ("--set", s)]
    assert message in one_line_error(run("render", *args))


PATCHES = """\
patches:
- target: {kind: Job}
  patch:
    spec:
      suspend: true
      template:
        metadata:
          annotations: {sidecar.istio.io/inject: "false"}
        spec:
          enableServiceLinks: null
          containers:
          - name: trainer
            securityContext: {readOnlyRootFilesystem: true}
            env:
            - {name: EXTRA, value: "1"}
            - {name: NCCL_DEBUG, $patch: delete}
- target: {kind: service, name: kgen-train}
  patch: {metadata: {annotations: {team: ml}}}
"""


def test_patches_merge_into_the_rendered_objects(tmp_path):
    docs = docs_of(run("render", "--preset", "4x8", "-f", values_file(tmp_path, PATCHES)))
    job = docs["Job"]
    assert job["spec"]["suspend"] is True
    assert job["spec"]["template"]["metadata"]["annotations"] == {"sidecar.istio.io/inject": "false"}
    assert job["spec"]["template"]["metadata"]["labels"]["kgen.dev/role"] == "trainer"  # merged, not replaced
    assert "enableServiceLinks" not in pod(docs)  # null removes
    (container,) = pod(docs)["containers"]  # merged by name: still one trainer
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "readOnlyRootFilesystem": True,
    }
    e = env(docs)
    assert e["EXTRA"] == "1" and "NCCL_DEBUG" not in e and e["NNODES"] == "4"
    assert container["image"]  # untouched fields stay
    assert docs["Service"]["metadata"]["annotations"] == {"team": "ml"}
    assert "annotations" not in docs["ConfigMap"]["metadata"]


def test_a_patched_manifest_is_linted_like_everything_else(tmp_path):
    bad = "patches:\n- target: {kind: Job}\n  patch: {spec: {completionMode: indexed}}\n"
    err = one_line_error(run("render", "-f", values_file(tmp_path, bad)))
    assert "the rendered manifest fails" in err and "completionMode" in err and "patches" in err


@pytest.mark.parametrize(
    "text,message",
    [
        ("patches:\n- target: {kind: Deployment}\n  patch: {spec: {}}\n", "target Deployment matches no rendered"),
        ("patches:\n- target: {kind: Job, name: other}\n  patch: {x: 1}\n", "target Job/other matches no rendered"),
        ("patches:\n- {kind: Job, patch: {x: 1}}\n", "must have exactly the keys target and patch"),
        ("patches:\n- target: {kind: Job}\n  patch: {kind: Pod}\n", "cannot change kind"),
        ("patches:\n- target: {kind: Job}\n  patch: []\n", "must be a non-empty mapping"),
        ("patches: {kind: Job}\n", "patches: must be a list of mappings"),
    ],
)
def test_bad_patches_name_the_file(tmp_path, text, message):
    err = one_line_error(run("render", "-f", values_file(tmp_path, text)))
    assert message in err and "v.yaml: patches" in err, err


def test_merge_patch_follows_rfc_7396():
    from kgen.render.patching import merge_patch

    # RFC 7396 appendix A examples (lists of unnamed items replace)
    assert merge_patch({"a": "b"}, {"a": "c"}) == {"a": "c"}
    assert merge_patch({"a": "b"}, {"b": "c"}) == {"a": "b", "b": "c"}
    assert merge_patch({"a": "b"}, {"a": None}) == {}
    assert merge_patch({"a": [{"b": "c"}]}, {"a": [1]}) == {"a": [1]}
    assert merge_patch({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}) == {"a": {"b": "d"}}
    assert merge_patch({"a": "foo"}, "bar") == "bar"
    assert merge_patch({"e": None}, {"a": 1}) == {"e": None, "a": 1}
    original = {"a": {"b": 1}}
    merge_patch(original, {"a": {"b": 2}})
    assert original == {"a": {"b": 1}}  # inputs are not modified


# ---------------------------------------------------------------- item 4: commands as strings
@pytest.mark.parametrize(
    "text,args",
    [
        ('command: "train.py --lr 3e-4"\n', ["train.py", "--lr", "3e-4"]),
        ("command: train.py --lr 3e-4\n", ["train.py", "--lr", "3e-4"]),
        ("command: \"-m pkg.train --name 'x y'\"\n", ["-m", "pkg.train", "--name", "x y"]),
        ("command: [train.py, --name, x y]\n", ["train.py", "--name", "x y"]),  # a list is taken as written
    ],
)
def test_a_command_string_is_split_like_a_shell(tmp_path, text, args):
    docs = docs_of(run("render", "-f", values_file(tmp_path, text)))
    assert trainer(docs)["args"] == ["--", *args]


def test_a_command_string_from_set_is_split_too():
    docs = docs_of(run("render", "--set", "command=train.py --lr 3e-4"))
    assert trainer(docs)["args"] == ["--", "train.py", "--lr", "3e-4"]


@pytest.mark.parametrize(
    "value,message",
    [
        ("train.py --name 'x", 'cannot split "train.py --name \'x" into arguments: no closing quotation'),
        ("train.py | tee log", "'|' in 'train.py | tee log' is a shell operator, but no shell runs the command"),
        ("train.py && echo done", "'&&' in"),
        ("train.py > out.log", "'>' in"),
    ],
)
def test_a_command_string_a_shell_would_treat_differently_is_refused(value, message):
    err = one_line_error(run("render", "--set", f"command={value}"))
    assert err.startswith("kgen: error: --set command: ") and message in err, err


@pytest.mark.parametrize(
    "args,message",
    [
        (["--", "train.py --lr 3e-4"], "-- COMMAND: 'train.py --lr 3e-4' is one argument with spaces"),
        (["--", "-m", "pkg.train --x"], "(drop the quotes: -- -m pkg.train --x)"),
        (["--set", 'command=["train.py --lr 3e-4"]'], "command: train.py --lr 3e-4, or one list item per argument"),
    ],
)
def test_a_command_line_given_as_one_argument_is_refused(args, message):
    err = one_line_error(run("render", *args))
    assert message in err, err


# ---------------------------------------------------------------- item 5: messages
@pytest.mark.parametrize(
    "source,message",
    [
        ("file", 'v.yaml: nccl: must be a mapping with the keys debug, socketIfname, ibDisable, got "INFO"'),
        ("set", '--set nccl: must be a mapping with the keys debug, socketIfname, ibDisable, got "INFO"'),
    ],
)
def test_a_mapping_key_given_a_scalar_says_the_type_is_wrong(tmp_path, source, message):
    args = ["-f", values_file(tmp_path, "nccl: INFO\n")] if source == "file" else ["--set", "nccl=INFO"]
    err = one_line_error(run("render", *args))
    assert message in err and "unknown key" not in err and "nccl: {debug: INFO}" in err, err


def test_a_port_clash_names_the_file_and_the_other_port(tmp_path):
    err = one_line_error(run("render", "-f", values_file(tmp_path, "port: 29501\n")))
    assert "v.yaml: port: is 29501, already used by livenessPort (the default)" in err, err
    both = values_file(tmp_path, "port: 4000\nlivenessPort: 4000\n", "both.yaml")
    err = one_line_error(run("render", "-f", both))
    assert "both.yaml: livenessPort: is 4000, already used by port (from " in err and "both.yaml)" in err, err


@pytest.mark.parametrize(
    "key,hint",
    [
        ("fooClassName", "(`kgen values` lists every key)"),
        ("gpuz", '(did you mean "gpus"?)'),
        ("HOSTNETWORK", '(did you mean "hostNetwork"?)'),
    ],
)
def test_did_you_mean_only_for_close_matches(key, hint):
    err = one_line_error(run("render", "--set", f"{key}=1"))
    assert err == f'kgen: error: --set: unknown key "{key}" {hint}\n'


def test_a_long_name_states_the_63_character_limit():
    err = one_line_error(run("render", "--name", "a" * 70))
    assert err == (
        "kgen: error: --name: is 70 characters: a name is a DNS label of at most 63 characters (use a shorter name)\n"
    )


@pytest.mark.parametrize("spelling", ["StatefulSet", "STATEFULSET", "Job"])
def test_kind_is_case_insensitive(tmp_path, spelling):
    docs = docs_of(run("render", "--kind", spelling))
    assert workload(docs)["kind"].lower() == spelling.lower()
    from_file = docs_of(run("render", "-f", values_file(tmp_path, f"kind: {spelling}\n")))
    assert workload(from_file)["kind"].lower() == spelling.lower()


def test_values_reference_lists_every_key_with_type_default_and_meaning():
    from kgen.render.values import VALUES

    res = run("values")
    assert res.exit_code == 0 and res.stderr == ""
    lines = res.stdout.splitlines()
    for key, (kind, _, doc) in VALUES.items():
        row = next((i for i, ln in enumerate(lines) if ln.split()[:2] == [key, kind]), None)
        assert row is not None, key
        assert lines[row + 1].strip() == doc
    assert "runtimeClassName" in res.stdout and "patches" in res.stdout


def test_help_and_hints_point_to_the_values_reference():
    assert "kgen values" in run("render", "--help").stdout
    assert "kgen values" in " ".join(run("presets", "show", "--help").stdout.split())
    assert "`kgen values`" in one_line_error(run("render", "--set", "zzz=1"))


def test_the_readme_values_table_is_the_generated_reference():
    from kgen.render.reference import values_reference
    from tests.conftest import ROOT

    readme = (ROOT / "README.md").read_text()
    table = values_reference("markdown")
    assert table in readme, "README's values table differs: paste `kgen values --format markdown` into it"
    assert run("values", "--format", "markdown").stdout == table


# ---------------------------------------------------------------- item 6: the self-check
def test_render_prints_the_self_check_warnings_on_stderr():
    res = run("render", "--env", "HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123456789")
    assert res.exit_code == 0
    assert yaml.safe_load_all(res.stdout)
    assert res.stderr.startswith("kgen: warning: KG058: HF_TOKEN has a literal value"), res.stderr
    assert "[Job/kgen-2node-test spec.template.spec.containers[0].env[" in res.stderr
    assert run("render").stderr == ""  # a clean render stays quiet


def test_dollar_parenthesis_lands_literally_instead_of_refusing():
    res = run("render", "--env", "X=$(HOME)", "--", "train.py", "--out", "$(KGEN_JOB_NAME)/$$")
    docs = docs_of(res)
    assert res.stderr == ""
    defined = {"HOME": "/root", "KGEN_JOB_NAME": "kgen-train"}
    assert kubelet_expand(env(docs)["X"], defined) == "$(HOME)"
    assert [kubelet_expand(a, defined) for a in trainer(docs)["args"]] == [
        "--",
        "train.py",
        "--out",
        "$(KGEN_JOB_NAME)/$$",
    ]


@pytest.mark.parametrize("kind", ["job", "statefulset", "jobset"])
def test_host_ipc_renders_for_every_kind(kind):
    """hostIPC: true is the host's /dev/shm: the shm rules of every kind accept it (KG110; KG156 before)."""
    res = run("render", "--preset", "4x8", "--kind", kind, "--set", "hostIPC=true")
    assert res.exit_code == 0, res.stderr
    mounts = re.findall(r"mountPath: (\S+)", res.stdout)
    assert "/opt/kgen" in mounts and "/dev/shm" not in mounts
