"""kgen's output meets the real API server: every kind x preset, and each value that changes the objects, is
created by server-side apply (strict field validation), then applied again byte for byte: nothing changes
(resourceVersion kept), nothing fails."""

from __future__ import annotations

import json

import pytest
from k8sutil import apply, create, object_path, reason, render

PRESETS = ["2node-test", "4x8", "64x8", "4x1"]
KINDS = ["job", "statefulset", "jobset"]

# values that change the objects (each on the Job kind and, where it applies, the others)
VARIANTS: dict[str, list[str]] = {
    "queue": ["--queue", "team-a"],
    "priority-class": ["--set", "workloadPriorityClass=high"],
    "tas-required": ["--queue", "team-a", "--set", "topology.required=cloud.google.com/gce-topology-block"],
    "tas-preferred": ["--queue", "team-a", "--set", "topology.preferred=cloud.google.com/gce-topology-block"],
    "rdma": ["--set", "rdma=true"],
    "ib-disable": ["--set", "nccl.ibDisable=true"],
    "host-network": ["--set", "hostNetwork=true"],
    "pdb": ["--set", "podDisruptionBudget=true"],
    "no-netpol": ["--set", "networkPolicy.enabled=false"],
    "netpol-extra": [
        "--set",
        'networkPolicy.extraIngress=[{"from":[{"namespaceSelector":{"matchLabels":'
        '{"kubernetes.io/metadata.name":"monitoring"}}}],"ports":[{"port":9090,"protocol":"TCP"}]}]',
    ],
    "patch": [
        "--set",
        'patches=[{"target":{"kind":"Workload"},"patch":{"metadata":{"annotations":{"a":"b"}}}},'
        '{"target":{"kind":"ConfigMap"},"patch":{"metadata":{"labels":{"team":"x"}}}}]',
    ],
    "cpu-gloo": ["--gpus", "0", "--cpu", "2", "--memory", "4Gi"],
    "env": ["--env", "FOO=bar", "--env", "HF_HOME=/cache"],
    "node-selector": [
        "--set",
        'nodeSelector={"gpu":"h100"}',
        "--set",
        'tolerations=[{"key":"nvidia.com/gpu","operator":"Exists","effect":"NoSchedule"}]',
    ],
    "k8s-1.27": ["--kubernetes-version", "1.27"],
    "k8s-1.31": ["--kubernetes-version", "1.31"],
    "k8s-1.34": ["--kubernetes-version", "1.34"],
    "k8s-1.37": ["--kubernetes-version", "1.37"],
    "pull-secret": ["--set", "imagePullSecrets=[regcred]"],
    "reform-script-errors": ["--set", "reform.onScriptError=reform"],
}


def kgen_entry(obj: dict) -> dict:
    return next(m for m in obj["metadata"]["managedFields"] if m["manager"] == "kgen" and m["operation"] == "Apply")


def apply_twice(k8s, ns: str, docs: list[dict]) -> None:
    """Every object created by server-side apply; the same bytes again change nothing: the generation (spec
    changes) and kgen's managed-fields entry (its time moves on any change of kgen's fields) stay as they were
    just before. (The resourceVersion is no measure: the controllers write the workloads' status meanwhile, and
    the JobSet controller changes a new JobSet's spec once, generation 1 -> 2, after kgen's create.)"""
    for d in docs:
        code, out = apply(k8s, d, ns)
        assert code in (200, 201), f"{d['kind']}/{d['metadata']['name']}: {code} {reason(out)}"
    for d in docs:
        code, was = k8s.request("GET", object_path(d, ns))
        assert code == 200, was
        code, out = apply(k8s, d, ns)
        assert code == 200, f"second apply {d['kind']}/{d['metadata']['name']}: {code} {reason(out)}"
        assert out["metadata"].get("generation") == was["metadata"].get("generation"), d["kind"]
        assert kgen_entry(out) == kgen_entry(was), f"{d['kind']}: a no-op apply changed kgen's fields"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("preset", PRESETS)
def test_preset_kind_applies_twice(k8s, inert_ns, preset, kind):
    docs = render("--preset", preset, "--kind", kind, "-n", inert_ns, "--name", f"r-{kind[:3]}")
    apply_twice(k8s, inert_ns, docs)


@pytest.mark.parametrize("kind, variant", [pytest.param(k, v, id=f"{k}-{v}") for k in KINDS for v in sorted(VARIANTS)])
def test_value_applies_twice(k8s, inert_ns, kind, variant):
    args = VARIANTS[variant]
    docs = render("--kind", kind, "-n", inert_ns, "--name", "v", "--nodes", "3", *args)
    apply_twice(k8s, inert_ns, docs)


def test_json_output_applies(k8s, inert_ns):
    """`-o json` is a kubectl List: its items are what the server takes."""
    from k8sutil import kgen

    res = kgen("render", "-o", "json", "-n", inert_ns, "--name", "j")
    assert res.returncode == 0, res.stderr
    items = json.loads(res.stdout)["items"]
    apply_twice(k8s, inert_ns, items)


IMMUTABLE_CHANGES = {
    # what a user changes between two renders of the same name, and the field the server names
    "template": (["--nodes", "2"], ["--nodes", "2", "--set", "port=29600"], "spec.template"),
    "command": (["--nodes", "2"], ["--nodes", "2", "--", "train.py"], "spec.template"),
}


@pytest.mark.parametrize("change", sorted(IMMUTABLE_CHANGES))
def test_job_reapply_with_an_immutable_change_names_the_field(k8s, inert_ns, change):
    """A Job's pod template is immutable: applying a changed render under the same name is refused, and the
    server names the field (what a user sees from `kubectl apply`; `kgen submit` says to delete first)."""
    a, b, field = IMMUTABLE_CHANGES[change]
    for d in render("-n", inert_ns, "--name", "imm", *a):
        code, out = apply(k8s, d, inert_ns)
        assert code in (200, 201), reason(out)
    wl = [d for d in render("-n", inert_ns, "--name", "imm", *b) if d["kind"] == "Job"][0]
    code, out = apply(k8s, wl, inert_ns)
    assert code == 422, out
    assert field in reason(out) and "immutable" in reason(out), reason(out)


def test_job_nodes_change_is_refused_as_a_template_change(k8s, inert_ns):
    """Elastic Indexed Jobs may change completions with parallelism, but a re-render with another --nodes also
    changes the pod template (NNODES, the pods' environment), which is immutable: the real server refuses the
    whole change naming spec.template (what `kgen submit` says before applying: --replace or stop first)."""
    for d in render("-n", inert_ns, "--name", "el", "--nodes", "2"):
        assert apply(k8s, d, inert_ns)[0] in (200, 201)
    wl = [d for d in render("-n", inert_ns, "--name", "el", "--nodes", "3") if d["kind"] == "Job"][0]
    code, out = apply(k8s, wl, inert_ns)
    assert code == 422, out
    assert "spec.template" in reason(out) and "field is immutable" in reason(out), reason(out)[:300]
    code, live = k8s.request("GET", f"/apis/batch/v1/namespaces/{inert_ns}/jobs/el")
    assert code == 200 and live["spec"]["completions"] == 2, live["spec"]  # nothing of it was applied


def test_dry_run_create_matches_apply(k8s, inert_ns):
    """A server-side dry-run create (what `kubectl apply --dry-run=server` does first) takes every object."""
    for d in render("--preset", "4x8", "-n", inert_ns, "--name", "dry"):
        code, out = create(k8s, d, inert_ns)
        assert code == 201, f"{d['kind']}: {reason(out)}"
