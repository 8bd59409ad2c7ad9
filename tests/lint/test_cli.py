"""`kgen lint` through click's CliRunner: exact text output, formats, exit codes, suppression."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET

import pytest
from click.testing import CliRunner
from lint_helpers import BASES, FIXTURES, dump, hide_not_ready

from kgen.cli import cli


def run(args, input=None):
    result = CliRunner().invoke(cli, ["lint", *args], input=input)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def bad_file(tmp_path):
    docs = hide_not_ready(BASES["job"]())
    docs[1]["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"] = "512GB"
    path = tmp_path / "bad.yaml"
    path.write_text(dump(docs))
    return path


def test_clean_file_exits_0_with_no_output():
    code, out, err = run([str(FIXTURES / "valid-job.yaml")])
    assert (code, out, err) == (0, "", "")


def test_text_format_is_exact(bad_file):
    code, out, err = run([str(bad_file)])
    assert code == 1 and err == ""
    assert out.splitlines() == [
        f"{bad_file}:9:1: KG102 warning: set publishNotReadyAddresses: true so llama-N.llama resolves before the "
        "pods are Ready (a c10d rendezvous: pod 0 resolves its own name to decide that it hosts the store) [spec]",
        f"{bad_file}:70:13: KG047 error: '512GB' is not a Kubernetes quantity (e.g. 512Gi, 500m, 8) "
        "[spec.template.spec.containers[0].resources.limits.memory]",
    ]


def test_json_format(bad_file):
    code, out, _ = run(["--format", "json", str(bad_file)])
    payload = json.loads(out)
    assert code == 1
    assert payload["summary"] == {
        "files": 1,
        "documents": 3,
        "errors": 1,
        "warnings": 1,
        "info": 0,
        "skipped": 0,
        "excluded": 0,
        "units": 1,
        "strict": False,
        "exitCode": 1,
    }
    assert payload["findings"][1] == {
        "rule": "KG047",
        "severity": "error",
        "message": "'512GB' is not a Kubernetes quantity (e.g. 512Gi, 500m, 8)",
        "file": str(bad_file),
        "line": 70,
        "column": 13,
        "path": "spec.template.spec.containers[0].resources.limits.memory",
        "kind": "Job",
        "name": "llama",
        "unit": f"{bad_file.parent}/",  # the apply unit: the file's folder
    }
    assert out == json.dumps(payload, indent=2, ensure_ascii=False) + "\n"  # json's own layout, byte for byte


@pytest.mark.parametrize(
    "value",
    [
        {},
        [],
        {"a": [], "b": {}, "c": [[]]},
        {"m": 'é "q" \\ \n\t\x01\x7f \u2028 \u2603 \U0001f600', "n": None, "t": True, "f": False, "i": -3},
        {"fl": [1.5, -0.0, 1e300, float("nan"), float("inf"), -float("inf")]},
        [1, [2, [3, {"k": [{"a": [1]}]}]], "s"],
        "x",
        7,
        None,
        {1: "a non-string key"},
        {"a": ("a", "tuple")},
    ],
)
def test_json_writer_layout_is_json_dumps_indent_2(value):
    from kgen.output import indented_json

    assert indented_json(value) == json.dumps(value, indent=2, ensure_ascii=False)


def test_junit_format(bad_file, tmp_path):
    report = tmp_path / "report.xml"
    code, out, _ = run(["--format", "junit", "--output-file", str(report), str(bad_file)])
    assert code == 1 and out == ""
    root = ET.parse(report).getroot()
    assert root.tag == "testsuites" and root.get("tests") == "3" and root.get("failures") == "1"
    cases = root.findall("./testsuite/testcase")
    assert [c.get("name") for c in cases] == [
        "Service/llama (line 1)",
        "Job/llama (line 19) KG047 [spec.template.spec.containers[0].resources.limits.memory]",
        "NetworkPolicy/llama (line 81)",
    ]
    [failure] = cases[1].findall("failure")
    assert failure.get("type") == "KG047"
    assert "KG102 warning" in cases[0].find("system-out").text


def test_junit_has_one_failure_per_testcase(tmp_path):
    """QA #13: the JUnit schema allows one <failure> per testcase; GitLab and Jenkins show only the first."""
    docs = BASES["job"]()
    res = docs[1]["spec"]["template"]["spec"]["containers"][0]["resources"]
    res["limits"]["memory"] = "512GB"
    res["requests"]["cpu"] = "-1"
    docs[1]["spec"]["parallelism"] = 3
    (tmp_path / "job.yaml").write_text(dump(docs))
    report = tmp_path / "report.xml"
    code, out, _ = run(["--format", "junit", "--output-file", str(report), str(tmp_path / "job.yaml")])
    assert code == 1 and out == ""
    root = ET.parse(report).getroot()
    cases = root.findall("./testsuite/testcase")
    assert all(len(c.findall("failure")) <= 1 for c in cases)
    failing = [c for c in cases if c.find("failure") is not None]
    assert len(failing) >= 3 and root.get("failures") == str(len(failing)) and root.get("tests") == str(len(cases))
    assert {c.find("failure").get("type") for c in failing} >= {"KG047", "KG116"}


def test_stdin_and_folders_recursively(tmp_path):
    sub = tmp_path / "a" / "b"
    sub.mkdir(parents=True)
    shutil.copy(FIXTURES / "seed003-statefulset-guide.yaml", sub / "sts.yml")
    (tmp_path / "notes.txt").write_text("not yaml: [")
    code, out, _ = run([str(tmp_path), "-"], input=(FIXTURES / "valid-job.yaml").read_text())
    assert code == 1
    files = {line.split(":")[0] for line in out.splitlines()}
    assert files == {str(sub / "sts.yml")}


def test_skip_option_and_annotation(bad_file):
    code, out, _ = run(["--skip", "KG047,KG102", str(bad_file)])
    assert (code, out) == (0, "")
    code, out, _ = run(["--skip", "KG047", "--skip", "KG102", str(bad_file)])
    assert (code, out) == (0, "")
    docs = BASES["job"]()
    docs[0]["spec"].pop("publishNotReadyAddresses")
    docs[0]["metadata"]["annotations"] = {"kgen.dev/lint-skip": "KG102"}
    code, out, _ = run(["-"], input=dump(docs))
    assert (code, out) == (0, "")


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--kubernetes-version", "1.24"], "--kubernetes-version: unsupported version '1.24'"),
        (["--kubernetes-version", "banana"], "--kubernetes-version: not a Kubernetes version"),
        (["--skip", "KG999"], "--skip: unknown rule id KG999"),
        (["--format", "xml"], '-o/--output: must be an output format, text, json, junit, github or sarif; got "xml"'),
        (["-o", "report.json"], "to write a file use --output-file report.json"),
        (["--engine", "kubeval"], "--engine: unknown engine 'kubeval'"),
        (["does-not-exist.yaml"], "does-not-exist.yaml: no such file or directory"),
    ],
)
def test_bad_input_exits_2_with_one_line(args, needle):
    if "does-not-exist.yaml" not in args:
        args = [*args, str(FIXTURES / "valid-job.yaml")]
    code, out, err = run(args)
    assert code == 2 and out == ""
    assert err.startswith("kgen: error: ") and needle in err and err.count("\n") == 1
    assert "Traceback" not in err


def test_yaml_syntax_error_is_reported_the_rest_linted_the_report_written_exit_2(tmp_path, bad_file):
    """One broken file no longer ends the run without a report."""
    path = tmp_path / "broken.yaml"
    path.write_text("apiVersion: v1\nkind: ConfigMap\ndata:\n  a: [1, 2\n")
    report = tmp_path / "report.xml"
    code, out, err = run(["--format", "junit", "--output-file", str(report), str(path), str(bad_file)])
    assert code == 2 and out == ""
    assert err.startswith(f"kgen: error: {path}:5:1: YAML syntax error") and err.count("\n") == 1
    root = ET.parse(report).getroot()
    failures = {f.get("type") for f in root.iter("failure")}
    assert failures == {"KG004", "KG047"}  # the broken file, and the other file's error finding
    code, out, _ = run([str(path), str(bad_file)])
    assert code == 2
    assert out.splitlines()[0] == (
        f"{path}:5:1: KG004 error: YAML syntax error: did not find expected ',' or ']'; "
        "the rest of this file is not linted"
    )
    assert any("KG047" in line for line in out.splitlines())


def test_syntax_error_cannot_be_skipped(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("kind: [\n")
    code, out, _ = run(["--skip", "KG004", str(path)])
    assert code == 2 and "KG004" in out


def test_a_file_that_is_not_utf8_is_a_finding_too(tmp_path):
    (tmp_path / "latin1.yaml").write_bytes("data: caf\xe9\n".encode("latin-1"))
    (tmp_path / "ok.yaml").write_text((FIXTURES / "valid-job.yaml").read_text())
    code, out, err = run([str(tmp_path)])
    assert code == 2 and "latin1.yaml:1:10: KG004 error:" in out and "not UTF-8" in out and "not UTF-8" in err


@pytest.mark.skipif(shutil.which("kubeconform") is not None, reason="kubeconform is installed here")
def test_kubeconform_engine_without_binary_is_a_clear_error():
    code, out, err = run(["--engine", "kubeconform", str(FIXTURES / "valid-job.yaml")])
    assert code == 2 and out == ""
    assert "--engine: kubeconform is not on PATH" in err


def test_empty_stdin_is_an_input_error_not_a_clean_pass():
    """`kgen render --nodes 0 | kgen lint -` must fail even without `set -o pipefail`."""
    from click.testing import CliRunner

    from kgen.cli import cli

    for text in ("", "\n  \n"):
        res = CliRunner().invoke(cli, ["lint", "-"], input=text)
        assert res.exit_code == 2
        assert res.stdout == ""
        assert (
            res.stderr == "kgen: error: <stdin>: empty input; nothing to lint (did the command before the pipe fail?)\n"
        )


# --- lint fit for CI ----------------------------------------------------------------------------


@pytest.fixture
def warning_only_file(tmp_path):
    docs = hide_not_ready(BASES["job"]())  # KG102, a warning
    path = tmp_path / "warn.yaml"
    path.write_text(dump(docs))
    return path


def test_strict_makes_warnings_fail(warning_only_file, tmp_path):
    code, out, _ = run([str(warning_only_file)])
    assert code == 0 and " KG102 warning: " in out
    code, out, _ = run(["--strict", str(warning_only_file)])
    assert code == 1 and " KG102 warning: " in out
    report = tmp_path / "r.xml"
    code, _, _ = run(["--strict", "--format", "junit", "--output-file", str(report), str(warning_only_file)])
    [failure] = ET.parse(report).getroot().iter("failure")  # a failing warning is a JUnit failure
    assert code == 1 and failure.get("type") == "KG102"
    code, out, _ = run(["--strict", "--format", "json", str(warning_only_file)])
    assert code == 1 and json.loads(out)["summary"]["strict"] is True and json.loads(out)["summary"]["exitCode"] == 1


def test_strict_does_not_fail_on_info(tmp_path):
    crd = "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n"
    (tmp_path / "crd.yaml").write_text(crd)
    code, out, _ = run(["--strict", str(tmp_path / "crd.yaml")])
    assert code == 0 and " KG011 info: " in out


@pytest.mark.parametrize("name", ["valid-job.yaml", "valid-statefulset.yaml", "valid-web-app.yaml"])
def test_valid_fixtures_are_clean_under_strict(name):
    assert run(["--strict", str(FIXTURES / name)]) == (0, "", "")


def _split(tmp_path, docs, names):
    for doc, name in zip(docs, names, strict=True):
        (tmp_path / name).write_text(dump([doc]))


def test_a_folder_is_one_context(tmp_path):
    """Service in svc.yaml, Job in job.yaml: no 'Service missing' (KG100), and cross-file checks run."""
    _split(tmp_path, BASES["job"](), ["svc.yaml", "job.yaml", "netpol.yaml"])
    assert run(["--strict", str(tmp_path)]) == (0, "", "")
    assert run(["--strict", *(str(tmp_path / f) for f in ("job.yaml", "svc.yaml", "netpol.yaml"))]) == (0, "", "")
    code, out, _ = run(["--strict", str(tmp_path / "job.yaml")])  # alone, the Service is missing
    assert code == 1 and " KG100 warning: names Service 'llama', which is not among the linted files" in out
    # a cross-file defect is still found: the Service in svc.yaml is not headless (KG101)
    docs = BASES["job"]()
    docs[0]["spec"]["clusterIP"] = "10.0.0.9"
    _split(tmp_path, docs, ["svc.yaml", "job.yaml", "netpol.yaml"])
    code, out, _ = run([str(tmp_path)])
    assert code == 1 and out.startswith(f"{tmp_path / 'svc.yaml'}:") and " KG101 error: " in out


def test_stdin_is_a_unit_of_its_own_and_unit_tree_joins_everything(tmp_path):
    svc, job, netpol = BASES["job"]()
    (tmp_path / "svc.yaml").write_text(dump([svc, netpol]))
    code, out, _ = run(["--strict", "-", str(tmp_path / "svc.yaml")], input=dump([job]))
    assert code == 1 and out.startswith("<stdin>:") and " KG100 warning: " in out  # its own unit: no Service
    assert run(["--strict", "--unit", "tree", "-", str(tmp_path / "svc.yaml")], input=dump([job])) == (0, "", "")


def test_services_pair_with_workloads_of_the_same_namespace(tmp_path):
    svc, job, netpol = BASES["job"]()
    svc["metadata"]["namespace"] = "other"
    _split(tmp_path, [svc, job, netpol], ["svc.yaml", "job.yaml", "netpol.yaml"])
    code, out, _ = run([str(tmp_path)])
    assert code == 1 and "KG124 error: Service 'llama' is in namespace other, but the pods run in 'ml'" in out
    assert "KG100" not in out
    del svc["metadata"]["namespace"]  # no namespace: goes wherever it is applied
    _split(tmp_path, [svc, job, netpol], ["svc.yaml", "job.yaml", "netpol.yaml"])
    assert run(["--strict", str(tmp_path)]) == (0, "", "")


def test_a_broken_file_does_not_make_the_others_report_a_missing_service(tmp_path):
    svc, job, netpol = BASES["job"]()
    (tmp_path / "svc.yaml").write_text(dump([svc]).replace("clusterIP: None", "clusterIP: [None"))
    (tmp_path / "job.yaml").write_text(dump([job]))
    code, out, _ = run([str(tmp_path)])
    assert code == 2 and "KG004" in out and "KG100" not in out


def test_skip_is_case_insensitive_and_unknown_ids_suggest(bad_file):
    assert run(["--skip", "kg047,Kg102", str(bad_file)])[:2] == (0, "")
    code, out, err = run(["--skip", "KG10", str(bad_file)])
    assert code == 2 and out == ""
    assert err.startswith("kgen: error: --skip: unknown rule id KG10; did you mean KG") and err.count("\n") == 1
    docs = BASES["job"]()
    docs[0]["spec"].pop("publishNotReadyAddresses")
    docs[0]["metadata"]["annotations"] = {"kgen.dev/lint-skip": "kg102"}
    assert run(["--strict", "-"], input=dump(docs)) == (0, "", "")


def test_list_rules_prints_every_rule():
    from kgen.lint.registry import load_rules

    code, out, _ = run(["--list-rules"])
    assert code == 0 and [line.split()[0] for line in out.splitlines()] == sorted(load_rules())


def test_list_rules_as_json_and_other_formats_refused(tmp_path):
    """QA #15: --list-rules --format json printed text."""
    from kgen.lint.registry import load_rules

    code, out, err = run(["--list-rules", "--format", "json"])
    rows = json.loads(out)
    assert (code, err) == (0, "") and [r["id"] for r in rows] == sorted(load_rules())
    kg110 = next(r for r in rows if r["id"] == "KG110")
    assert kg110["severity"] == "error" and kg110["kinds"] and kg110["summary"] and kg110["fix"]
    assert next(r for r in rows if r["id"] == "KG001")["kinds"] is None
    listing = tmp_path / "rules.json"
    assert run(["--list-rules", "--format", "json", "--output-file", str(listing)]) == (0, "", "")
    assert json.loads(listing.read_text()) == rows
    code, out, err = run(["--list-rules", "--format", "junit"])
    assert (code, out) == (
        2,
        "",
    ) and err == 'kgen: error: -o/--output: must be text or json with --list-rules, got "junit"\n'


def test_findings_in_args_point_at_the_args_item(tmp_path):
    """A wrong --nnodes in args: is located at that args item, not at command:."""
    docs = BASES["job"]()
    docs[1]["spec"]["template"]["spec"]["containers"][0]["args"][0] = "--nnodes=2"
    path = tmp_path / "job.yaml"
    path.write_text(dump(docs))
    lines = path.read_text().splitlines()
    code, out, _ = run([str(path)])
    [line] = [x for x in out.splitlines() if " KG106 " in x]
    lineno = int(line.split(":")[1])
    assert lines[lineno - 1].strip() == "- --nnodes=2"
    assert line.endswith("[spec.template.spec.containers[0].args[0]]")


def test_github_annotations(bad_file):
    code, out, _ = run(["--format", "github", str(bad_file)])
    assert code == 1
    assert out.splitlines() == [
        f"::warning file={bad_file},line=9,col=1,title=KG102::set publishNotReadyAddresses: true so llama-N.llama "
        "resolves before the pods are Ready (a c10d rendezvous: pod 0 resolves its own name to decide that it hosts "
        "the store) [spec]",
        f"::error file={bad_file},line=70,col=13,title=KG047::'512GB' is not a Kubernetes quantity (e.g. 512Gi, "
        "500m, 8) [spec.template.spec.containers[0].resources.limits.memory]",
    ]


def test_github_annotation_escaping():
    from kgen.findings import Finding, Severity
    from kgen.output import github_line

    f = Finding("KG004", Severity.ERROR, "100% bad\nline", "a,b:c.yaml", 3, 2)
    assert github_line(f) == "::error file=a%2Cb%3Ac.yaml,line=3,col=2,title=KG004::100%25 bad%0Aline"


def check_sarif(log: dict) -> None:
    """The key structure of SARIF 2.1.0 (OASIS sarif-v2.1.0 §3.13-3.27) that code scanning reads."""
    assert log["version"] == "2.1.0" and log["$schema"].endswith("sarif-2.1.0.json")
    assert isinstance(log["runs"], list) and log["runs"]
    for run_ in log["runs"]:
        driver = run_["tool"]["driver"]
        assert isinstance(driver["name"], str) and driver["name"]
        ids = [r["id"] for r in driver["rules"]]
        assert len(ids) == len(set(ids))
        for r in driver["rules"]:
            assert r["shortDescription"]["text"] and r["defaultConfiguration"]["level"] in ("error", "warning", "note")
        for res in run_["results"]:
            assert set(res) <= {"ruleId", "ruleIndex", "level", "message", "locations"}
            assert res["level"] in ("none", "note", "warning", "error")
            assert isinstance(res["message"]["text"], str) and res["message"]["text"]
            if "ruleIndex" in res:
                assert driver["rules"][res["ruleIndex"]]["id"] == res["ruleId"]
            for loc in res["locations"]:
                phys = loc["physicalLocation"]
                assert isinstance(phys["artifactLocation"]["uri"], str)
                region = phys.get("region")
                if region is not None:
                    assert region["startLine"] >= 1 and region.get("startColumn", 1) >= 1


def test_sarif_report(bad_file, tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text("kind: [\n")
    report = tmp_path / "kgen.sarif"
    code, out, err = run(["--format", "sarif", "--output-file", str(report), str(bad_file), str(broken), "-"], input="")
    assert code == 2 and "empty input" in err and not report.exists()  # empty stdin: a usage error, no report
    code, out, _ = run(["--format", "sarif", "--output-file", str(report), str(bad_file), str(broken)])
    assert code == 2 and out == ""
    log = json.loads(report.read_text())
    check_sarif(log)
    results = log["runs"][0]["results"]
    assert [(r["ruleId"], r["level"]) for r in results] == [
        ("KG102", "warning"),
        ("KG047", "error"),
        ("KG004", "error"),
    ]
    loc = results[1]["locations"][0]["physicalLocation"]
    assert loc["artifactLocation"]["uri"] == "file://" + str(bad_file)
    assert loc["region"] == {"startLine": 70, "startColumn": 13}
    assert log["runs"][0]["invocations"][0] == {"executionSuccessful": False, "exitCode": 2}


def test_sarif_relative_paths_stay_relative(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "deploy").mkdir()
    (tmp_path / "deploy" / "cm.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: Bad_Name}\n")
    code, out, _ = run(["--format", "sarif", "deploy"])
    log = json.loads(out)
    check_sarif(log)
    [res] = log["runs"][0]["results"]
    assert code == 1 and res["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "deploy/cm.yaml"


def test_a_folder_of_several_apps_sharing_labels_is_clean(tmp_path):
    """One context must not pair app A's Service with app B's Job because both carry
    app.kubernetes.io/name: kgen (found by bench/lint_throughput: 37,611 false KG103)."""
    from lint_helpers import job, network_policy, service

    for name in ("llama", "mistral", "qwen"):
        (tmp_path / f"{name}.yaml").write_text(dump([service(name), job(name), network_policy(name)]))
    assert run(["--strict", str(tmp_path)]) == (0, "", "")
    # a Service that selects nothing is still reported, once, against the workload it resembles
    broken = service("mistral")
    broken["metadata"]["name"] = "mistral-master"
    broken["spec"]["selector"]["role"] = "master"
    (tmp_path / "master.yaml").write_text(dump([broken]))
    code, out, _ = run([str(tmp_path)])
    assert code == 0 and out.count(" KG140 ") == 1  # a warning: no workload names it
    assert "selects none of the pods of Job 'mistral': the pod template lacks role=master" in out


def test_a_file_named_twice_is_linted_once(tmp_path, monkeypatch):
    """QA #14: the same file twice (or also inside a folder given) was a KG027 duplicate of itself."""
    (tmp_path / "deploy").mkdir()
    svc = tmp_path / "deploy" / "svc.yaml"
    svc.write_text(dump([BASES["job"]()[0]]))
    monkeypatch.chdir(tmp_path)
    once = run(["--format", "json", str(svc)])
    for args in ([str(svc), str(svc)], [str(svc), "deploy/../deploy/svc.yaml"], [str(svc), "deploy"]):
        code, out, _ = run(["--format", "json", *args])
        assert (code, out) == once[:2] and "KG027" not in out


def test_an_empty_file_named_explicitly_is_an_input_error_like_empty_stdin(tmp_path):
    """QA #16: an empty named file exited 0 silently while empty stdin exits 2."""
    empty = tmp_path / "empty.yaml"
    empty.write_text("\n  \n")
    code, out, err = run([str(empty)])
    assert (code, out) == (2, "") and err == f"kgen: error: {empty}: empty file; nothing to lint\n"
    # inside a folder an empty file is skipped; the folder's other files are linted
    shutil.copy(FIXTURES / "valid-job.yaml", tmp_path / "job.yaml")
    assert run(["--strict", str(tmp_path)]) == (0, "", "")
