"""The subset JSON-schema validator: keyword coverage of every bundled schema, agreement with
jsonschema, the compile cache, versions, CRDs and --schema-location."""

from __future__ import annotations

import json
import os

import pytest
from lint_helpers import BASES, dump, lint_docs, rule_ids

from kgen import schema
from kgen.errors import UsageError
from kgen.lint.api import LintOptions, lint_text


def _version_dirs():
    root = schema.schema_root()
    return sorted(d for d in os.listdir(root) if d.startswith("v"))


def test_supported_versions_are_1_25_to_1_37():
    versions = schema.supported_versions()
    assert versions[0] == "1.25" and versions[-1] == "1.37" and len(versions) == 13


@pytest.mark.parametrize(
    "value,expected", [("1.33", "1.33"), ("1.33.0", "1.33"), ("v1.33", "1.33"), ("v1.25.4", "1.25")]
)
def test_version_spellings(value, expected):
    assert schema.normalize_version(value) == expected


@pytest.mark.parametrize("value", ["1.24", "1.38", "latest", "2", ""])
def test_bad_versions_are_usage_errors_naming_the_option(value):
    with pytest.raises(UsageError) as err:
        schema.normalize_version(value)
    assert str(err.value).startswith("--kubernetes-version:") and "1.25" in str(err.value)


def test_every_bundled_definition_uses_only_the_supported_keywords():
    """compact() raises SchemaError on any keyword the validator does not implement."""
    root = schema.schema_root()
    count = 0
    for d in _version_dirs():
        with open(root / d / "_definitions.json", encoding="utf-8") as fh:
            defs = json.load(fh)["$defs"]
        for sub in defs.values():
            schema.compact(sub)
        count += len(defs)
    assert count > 10_000


def test_bundled_kind_files_use_only_the_supported_keywords():
    """Kind files repeat the definitions (checked above for every version) with absolute $refs;
    the oldest and newest versions, strict and not, cover their shape."""
    root = schema.schema_root()
    count = 0
    dirs = _version_dirs()
    for d in dirs[:2] + dirs[-2:]:
        for name in os.listdir(root / d):
            if name.startswith("_") or name == "all.json":
                continue
            with open(root / d / name, encoding="utf-8") as fh:
                schema.compact(json.load(fh))
            count += 1
    assert count > 2_000


def test_unknown_keyword_fails_loudly():
    with pytest.raises(schema.SchemaError, match="pattern"):
        schema.compact({"type": "string", "pattern": "^a$"})


INVALID = [
    ("spec", "completions", "four"),
    ("spec", "bogusField", 1),
    ("metadata", "labels", {"a": True}),
    ("spec", "template", "spec", "containers", 0, "resources", "limits", {"cpu": True}),
    ("spec", "template", "spec", "containers", 0, "ports", [{"name": "x"}]),  # containerPort required
    ("spec", "template", "spec", "containers", 0, "env", "not-a-list"),
    ("apiVersion", "batch/v2"),
]


def _mutated_job(mutation):
    doc = BASES["job"]()[1]
    node = doc
    *path, last = mutation
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = last
    return doc


def _jsonschema_paths(doc, version="1.37"):
    import jsonschema
    from referencing import Registry, Resource

    folder = schema.schema_root() / f"v{version}.0-local-strict"
    kind = json.loads((folder / "job-batch-v1.json").read_text())
    defs = json.loads((folder / "_definitions.json").read_text())
    registry = Resource.from_contents(defs) @ (Resource.from_contents(kind) @ Registry())
    validator = jsonschema.Draft202012Validator(kind, registry=registry)
    return {tuple(e.absolute_path) for e in validator.iter_errors(doc)}


@pytest.mark.parametrize("mutation", INVALID, ids=[str(m[-2]) for m in INVALID])
def test_errors_agree_with_jsonschema(mutation):
    doc = _mutated_job(mutation)
    ours = schema.bundled("1.37").validator("batch/v1", "Job").validate(doc)
    assert ours
    # jsonschema reports unknown fields and missing fields at the parent object
    ours_paths = {p[:-1] if m.startswith("unknown field") else p for p, m in ours}
    assert ours_paths == _jsonschema_paths(doc)


def test_valid_job_agrees_with_jsonschema():
    doc = BASES["job"]()[1]
    assert schema.bundled("1.37").validator("batch/v1", "Job").validate(doc) == []
    assert _jsonschema_paths(doc) == set()


def test_unknown_field_suggests_the_spelling():
    doc = _mutated_job(("spec", "completion", 4))
    [(path, message)] = schema.bundled("1.37").validator("batch/v1", "Job").validate(doc)
    assert path == ("spec", "completion") and "did you mean 'completions'" in message


def test_compiled_kind_is_cached_on_disk_and_reused(tmp_path, monkeypatch):
    monkeypatch.setenv("KGEN_CACHE_DIR", str(tmp_path))
    first = schema.BundledSchemas("1.30")
    assert first.validator("batch/v1", "Job") is not None
    assert (first.compiled_from_json, first.loaded_from_cache) == (1, 0)
    files = list(tmp_path.rglob("job-batch-v1-*.marshal"))
    assert len(files) == 1 and not list(tmp_path.rglob(".tmp-*"))
    second = schema.BundledSchemas("1.30")
    v = second.validator("batch/v1", "Job")
    assert (second.compiled_from_json, second.loaded_from_cache) == (0, 1)
    assert second._definitions is None  # the 1.8 MB definitions file was not read
    assert v.validate({"apiVersion": "batch/v1", "kind": "Job", "spec": {"completions": "x"}})


def test_unwritable_cache_is_silently_skipped(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("KGEN_CACHE_DIR", str(blocker / "sub"))
    b = schema.BundledSchemas("1.31")
    assert b.validator("v1", "Service") is not None and b.compiled_from_json == 1


_RES = {"requests": {"cpu": "1", "memory": "1Gi"}}
_WORKER = {
    "replicas": 1,
    "restartPolicy": "Never",  # (OnFailure, the default, restarts forever without runPolicy.backoffLimit: KG183)
    "template": {"spec": {"containers": [{"name": "pytorch", "image": "t:1", "args": ["x"], "resources": _RES}]}},
}


def test_crd_without_schema_is_skipped_with_info():
    """No JSON schema: KG011; kgen's own structure check of the kind (KG136) still runs (it finds nothing here)."""
    crd = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "x"}}
    crd["spec"] = {"pytorchReplicaSpecs": {"Worker": _WORKER}}
    result = lint_docs([crd])
    assert [(f.rule_id, f.severity.value) for f in result.findings] == [("KG011", "info")]
    assert result.exit_code == 0


def test_crd_shadowing_a_builtin_file_name_is_not_validated_as_builtin():
    doc = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "x"}}
    doc["spec"] = {"tasks": [{"name": "w", "replicas": 1, "template": _WORKER["template"]}]}
    assert rule_ids(lint_docs([doc])) == {"KG011"}


def test_builtin_group_version_not_served_is_KG012():
    doc = BASES["job"]()[1]
    doc["apiVersion"] = "batch/v1beta1"
    assert "KG012" in rule_ids(lint_docs([doc]))


def _crd_schema_folder(tmp_path):
    folder = tmp_path / "schemas" / "kubeflow.org"
    folder.mkdir(parents=True)
    (folder / "pytorchjob_v1.json").write_text(
        json.dumps(
            {
                "type": "object",
                "properties": {
                    "spec": {
                        "type": "object",
                        "properties": {"nprocPerNode": {"type": "string", "pattern": "^(auto|gpu|[0-9]+)$"}},
                    }
                },
            }
        )
    )
    return tmp_path / "schemas"


def test_schema_location_folder_validates_crds(tmp_path):
    folder = _crd_schema_folder(tmp_path)
    bad = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "x"},
        "spec": {"nprocPerNode": "eight", "pytorchReplicaSpecs": {"Worker": _WORKER}},
    }
    result = lint_text(dump([bad]), "crd.yaml", LintOptions(schema_location=str(folder)))
    [f] = [f for f in result.findings if f.rule_id == "KG010"]
    assert f.path == "spec.nprocPerNode" and f.line == 6
    bad["spec"]["nprocPerNode"] = "8"
    assert lint_text(dump([bad]), "crd.yaml", LintOptions(schema_location=str(folder))).findings == []


def test_schema_location_template(tmp_path):
    folder = _crd_schema_folder(tmp_path)
    tpl = str(folder) + "/{{ .Group }}/{{ .ResourceKind }}_{{ .ResourceAPIVersion }}.json"
    bad = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "x"},
        "spec": {"nprocPerNode": "eight", "pytorchReplicaSpecs": {"Worker": _WORKER}},
    }
    assert "KG010" in rule_ids(lint_text(dump([bad]), "crd.yaml", LintOptions(schema_location=tpl)))


def test_remote_schema_location_is_refused():
    with pytest.raises(UsageError, match="--schema-location"):
        lint_text("", "x", LintOptions(schema_location="https://example.com/{{ .ResourceKind }}.json"))


def test_render_path_does_not_import_jsonschema():
    import subprocess
    import sys

    code = (
        "import sys; from kgen.lint.api import lint_text, LintOptions; "
        "import yaml; r = lint_text(open(sys.argv[1]).read(), 'x', LintOptions()); "
        "assert r.findings == [], r.findings; "
        "bad = [m for m in ('jsonschema', 'kubernetes_validate', 'click', 'ruamel') if m in sys.modules]; "
        "assert not bad, bad"
    )
    path = os.path.join(os.path.dirname(__file__), "fixtures", "valid-job.yaml")
    subprocess.run([sys.executable, "-c", code, path], check=True, timeout=60)


@pytest.mark.parametrize("version", ["1.33", "1.37"])
def test_on_pod_conditions_status_is_a_warning_not_a_schema_error(version):
    """validation.md §D #47: schemas <= 1.34 require status, the server defaults it to "True"."""
    docs = BASES["job"]()
    docs[1]["spec"]["podFailurePolicy"] = {
        "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]
    }
    result = lint_docs(docs, version)
    assert rule_ids(result) == {"KG067"} and result.exit_code == 0
    raw = schema.bundled(version).validator("batch/v1", "Job").validate(docs[1])
    assert bool(raw) is (version == "1.33")  # the schema itself differs between the versions


@pytest.mark.parametrize("base,index", [("job", 1), ("sts", 1)])
@pytest.mark.parametrize("spec", ["missing", "null"])
def test_a_workload_without_spec_is_KG010(base, index, spec):
    # the schemas mark spec optional, the API server requires it (QA #4); `spec: {}` was caught already
    docs = BASES[base]()
    if spec == "missing":
        del docs[index]["spec"]
    else:
        docs[index]["spec"] = None
    result = lint_docs(docs)
    [f] = [f for f in result.findings if f.rule_id == "KG010"]  # one finding, whether the schema requires spec or not
    assert f"spec is {spec}" in f.message or "missing required field 'spec'" in f.message
    assert result.exit_code == 1


def test_a_pod_without_spec_is_KG010_and_a_configmap_needs_none():
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}
    assert "KG010" in rule_ids(lint_docs([pod]))
    assert rule_ids(lint_docs(BASES["cm"](), fail_on_warnings=True)) == set()


@pytest.mark.parametrize(
    "path,value,fmt",
    [
        (("spec", "ttlSecondsAfterFinished"), 3_000_000_000, "int32"),
        (("spec", "backoffLimit"), -(2**31) - 1, "int32"),
        (("spec", "activeDeadlineSeconds"), 99999999999999999999, "int64"),
        (("spec", "template", "spec", "terminationGracePeriodSeconds"), 2**63, "int64"),
    ],
)
def test_integers_outside_their_schema_format_are_KG010(path, value, fmt):
    # the API server rejects an int32 field of 3000000000 while decoding (QA #3); the schema says format: int32
    docs = BASES["job"]()
    node = docs[1]
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    found = [f for f in lint_docs(docs).findings if f.rule_id == "KG010"]
    assert [f.path for f in found] == [".".join(path)], [f.text() for f in found]
    assert f"out of range for an {fmt}" in found[0].message


def test_integers_at_the_edge_of_their_format_pass_the_schema():
    docs = BASES["job"]()
    docs[1]["spec"]["ttlSecondsAfterFinished"] = 2**31 - 1
    docs[1]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 2**63 - 1
    assert "KG010" not in rule_ids(lint_docs(docs))


@pytest.mark.parametrize("fmt", [None, "int32", "int64"])
@pytest.mark.parametrize(
    "types", [["string"], ["integer"], ["number"], ["boolean"], ["string", "null"], ["integer", "null"], ["object"]]
)
def test_a_one_of_branch_accepts_what_its_type_check_accepts(types, fmt):
    # oneOf branches of types only are tested by a predicate, without building their error messages
    values = ["8", "", 0, 1, -1, 2**31 - 1, 2**31, -(2**31) - 1, 2**63, 1.0, 1.5, 2.0**31, 2.0**70, float("nan")]
    values += [float("inf"), True, False, None, {}, [], {"a": 1}]
    ok, check = schema.Compiler._type_ok(types, fmt), schema.Compiler._type(types, fmt)
    assert [ok(v) for v in values] == [check(v) is None for v in values]


def test_one_of_of_types_reports_as_before():
    c = schema.Compiler({})
    quantity = c.compile({"oneOf": [{"type": ["string", "null"]}, {"type": ["number", "null"]}]})
    port = c.compile({"oneOf": [{"type": ["string"]}, {"type": ["integer"], "format": "int32"}]})
    assert quantity("8Gi") is None and quantity(8) is None
    assert quantity(None) == [((), "expected string or number, got null")]
    assert quantity([1]) == [((), "expected string or number, got array")]
    assert port(2**31) == [((), "expected string or integer, got integer 2147483648")]
    assert port(True) == [((), "expected string or integer, got boolean true")]
