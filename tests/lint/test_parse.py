"""Parsing like kubectl: YAML 1.1 resolution, duplicate keys, positions, syntax errors."""

from __future__ import annotations

import math

import pytest

from kgen.errors import InputError
from kgen.lint.api import LintOptions, lint_text
from kgen.lint.parse import parse_stream

JOB_HEAD = """\
apiVersion: batch/v1
kind: Job
metadata:
  name: llama
spec:
  completions: 1
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: trainer
        image: ghcr.io/acme/train:1.4
"""


def test_values_resolve_like_kubectl_not_like_pyyaml():
    doc = parse_stream(
        "a: y\nb: N\nc: 'yes'\nd: 2024-01-02\ne: 0o17\nf: 017\ng: 1e3\nh: 1:30\ni: ~\nj: .inf\nk: 0x1F\n"
        "l: !!str 5\nm: 3e-4\nnum: 1_000\ny: key\n",
        "x.yaml",
    )[0].data
    assert doc["a"] is True and doc["b"] is False and doc["c"] == "yes"
    assert doc["d"] == "2024-01-02"  # kubectl keeps timestamps as strings
    assert doc["e"] == 15 and doc["f"] == 15 and doc["k"] == 31 and doc["num"] == 1000
    assert doc["g"] == 1000.0 and doc["m"] == 0.0003
    assert doc["h"] == "1:30"  # no sexagesimal in goyaml.v2
    assert doc["i"] is None and doc["j"] == math.inf and doc["l"] == "5"
    assert doc["true"] == "key"  # a `y:` key is the boolean true, which sigs.k8s.io/yaml turns into "true"


def test_multi_document_stream_skips_empty_documents_and_keeps_lines():
    docs = parse_stream("---\n# only a comment\n---\nkind: A\n---\n---\nkind: B\n", "x.yaml")
    assert [d.kind for d in docs] == ["A", "B"]
    assert [d.line for d in docs] == [4, 7]


def test_anchors_and_merge_keys():
    doc = parse_stream("base: &b {x: 1, z: 2}\nother:\n  <<: *b\n  z: 3\n", "x.yaml")[0].data
    assert doc["other"] == {"x": 1, "z": 3}


def test_duplicate_key_is_KG001_with_position_and_path():
    text = JOB_HEAD + "        env:\n        - name: A\n          value: '1'\n          value: '2'\n"
    result = lint_text(text, "dup.yaml", LintOptions())
    dups = [f for f in result.findings if f.rule_id == "KG001"]
    assert len(dups) == 1
    f = dups[0]
    assert (f.file, f.line, f.column) == ("dup.yaml", 16, 11)
    assert f.path == "spec.template.spec.containers[0].env[0].value"
    assert result.exit_code == 1


@pytest.mark.parametrize("word", ["on", "yes", "y", "off", "no", "N", "True"])
def test_unquoted_yaml11_boolean_in_string_field_is_KG002(word):
    text = JOB_HEAD + f"        env:\n        - name: FLAG\n          value: {word}\n"
    result = lint_text(text, "b.yaml", LintOptions())
    found = [f for f in result.findings if f.rule_id == "KG002"]
    assert len(found) == 1, [f.text() for f in result.findings]
    assert (found[0].line, found[0].column) == (15, 11)
    assert f'"{word}"' in found[0].message
    assert found[0].path == "spec.template.spec.containers[0].env[0].value"


def test_quoted_boolean_words_and_booleans_in_boolean_fields_are_fine():
    text = (
        JOB_HEAD.replace("  template:\n", "  suspend: yes\n  template:\n")
        + '        env:\n        - name: FLAG\n          value: "on"\n'
    )
    result = lint_text(text, "b.yaml", LintOptions())
    assert result.findings == [], [f.text() for f in result.findings]


def test_unquoted_number_in_string_field_says_quote_it():
    text = JOB_HEAD + "        env:\n        - name: PORT\n          value: 29500\n"
    f = lint_text(text, "n.yaml", LintOptions()).findings[0]
    assert f.rule_id == "KG010" and 'quote it: "29500"' in f.message and f.line == 15


def _input_error(text, name):
    """The one KG004 finding (exit 2) that an unparsable stream becomes."""
    result = lint_text(text, name, LintOptions())
    [f] = result.input_errors
    assert result.exit_code == 2 and f in result.findings and f.rule_id == "KG004"
    return f


def test_yaml_syntax_error_is_a_KG004_finding_with_file_and_line():
    f = _input_error("kind: Job\nmetadata:\n  name: [unclosed\n", "broken.yaml")
    assert f.text().startswith("broken.yaml:4:") and "YAML syntax error" in f.message and "\n" not in f.message
    with pytest.raises(InputError, match="broken.yaml:4:"):  # parse_stream itself still raises
        parse_stream("kind: Job\nmetadata:\n  name: [unclosed\n", "broken.yaml")


def test_documents_before_a_syntax_error_are_still_linted():
    text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: Bad_Name}\n---\nkind: [\n"
    result = lint_text(text, "half.yaml", LintOptions())
    assert [(f.rule_id, f.line) for f in result.findings] == [("KG021", 3), ("KG004", 6)]
    assert result.exit_code == 2


def test_non_object_documents_are_KG003():
    result = lint_text("- a\n- b\n---\nmetadata: {name: x}\n", "x.yaml", LintOptions())
    assert [f.rule_id for f in result.findings] == ["KG003", "KG003"]
    assert [f.line for f in result.findings] == [1, 4]


def test_billion_laughs_is_refused_not_expanded():
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 10):
        refs = ", ".join([f"*a{i - 1}"] * 9)
        lines.append(f"a{i}: &a{i} [{refs}]")
    assert "excessive aliasing" in _input_error("\n".join(lines) + "\n", "bomb.yaml").message


def test_self_referencing_alias_is_an_input_error():
    f = _input_error("apiVersion: v1\nkind: ConfigMap\nmetadata: &m {labels: {a: *m}}\n", "bad.yaml")
    assert f.text().startswith("bad.yaml:3:11: KG004 error: YAML alias refers to a node that contains it")


def test_kind_list_items_are_linted_as_objects_with_exact_lines():
    text = (
        "apiVersion: v1\nkind: List\nitems:\n"
        "- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: Bad_Name}\n"
        "- apiVersion: v1\n  kind: Service\n  metadata: {name: web}\n  spec: {selector: {app: web}}\n"
    )
    result = lint_text(text, "list.yaml", LintOptions())
    assert [(f.rule_id, f.line, f.kind) for f in result.findings] == [
        ("KG021", 6, "ConfigMap"),
        ("KG030", 10, "Service"),
    ]
    assert [d.kind for d in result.documents] == ["ConfigMap", "Service"]


# ---------------------------------------------------------------------------------------------
# The event builder against libyaml's own composer


def _composed(text: str) -> list:
    """Reference: libyaml composes the node tree (PyYAML's C composer), converted with kubectl's
    scalar rules -- what kgen did before it built values from events."""
    import yaml
    from yaml.nodes import MappingNode, ScalarNode

    from kgen.lint.parse import _EXPLICIT_NONSTR, _MERGE, _key_string, _plain

    class Loader(yaml.CSafeLoader):
        def resolve(self, kind, value, implicit):
            if kind is ScalarNode:
                return "!plain" if implicit[0] else "tag:yaml.org,2002:str"
            return "tag:yaml.org,2002:map" if kind is MappingNode else "tag:yaml.org,2002:seq"

    memo: dict = {}

    def convert(node):
        if isinstance(node, ScalarNode):
            return _plain(node.value) if node.tag == "!plain" or node.tag in _EXPLICIT_NONSTR else node.value
        if id(node) in memo:
            return memo[id(node)]
        if isinstance(node, MappingNode):
            out: dict = {}
            memo[id(node)] = out
            for k, v in node.value:
                if (k.tag == "!plain" and k.value == "<<") or k.tag == _MERGE:
                    value = convert(v)
                    for src in value if isinstance(value, list) else [value]:
                        if isinstance(src, dict):
                            for kk, vv in src.items():
                                out.setdefault(kk, vv)
                    continue
                key = convert(k)
                out[key if isinstance(key, str) else _key_string(key)] = convert(v)
            return out
        seq: list = []
        memo[id(node)] = seq
        seq.extend(convert(v) for v in node.value)
        return seq

    out = []
    for node in yaml.compose_all(text, Loader=Loader):
        memo.clear()  # per document (node ids are reused once a tree is freed)
        d = convert(node)
        is_list = isinstance(d, dict) and str(d.get("kind", "")).endswith("List") and isinstance(d.get("items"), list)
        out.extend(d["items"] if is_list else [d] if d is not None else [])  # kgen lints a List's items
    return out


TRICKY = [
    "a: y\nb: N\nc: 'yes'\nd: 2024-01-02\ne: 0o17\nf: 017\ng: 1e3\nh: 1:30\ni: ~\nj: .inf\nk: 0x1F\nl: !!str 5\n",
    "base: &b {x: 1, z: 2}\nother:\n  <<: *b\n  z: 3\nlist: &l [1, [2, [3]]]\nagain: *l\nm: {<<: [*b, {q: 1}]}\n",
    "--- |\n  literal\n   text\n--- >-\n  folded\n  text\n---\n- !!int '7'\n- !!float '1'\n- !custom x\n",
    "? complex key\n: v\n1: one\ntrue: t\nnull: n\n'quoted': \"double\\ttab\"\n",
    "%YAML 1.1\n---\na: [1, {b: c}, [d]]\n...\n---\n- - - nested\n    - seq\n",
    "---\n# only a comment\n---\n---\nkind: A\nmetadata: &m\n  labels: {a: b}\nspec: {template: {metadata: *m}}\n",
]


@pytest.mark.parametrize("text", TRICKY, ids=range(len(TRICKY)))
def test_values_equal_libyamls_composer_on_tricky_yaml(text):
    assert [d.data for d in parse_stream(text, "x.yaml")] == _composed(text)


def test_values_equal_libyamls_composer_on_every_fixture_and_a_generated_corpus(tmp_path):
    from importlib.machinery import SourceFileLoader
    from pathlib import Path

    texts = [p.read_text() for p in sorted(Path(__file__).parent.glob("fixtures/**/*.y*ml"))]
    import importlib.util

    loader = SourceFileLoader("lint_scale", str(Path(__file__).parents[2] / "bench" / "lint_scale"))
    spec = importlib.util.spec_from_loader("lint_scale", loader)
    assert spec is not None
    bench = importlib.util.module_from_spec(spec)
    loader.exec_module(bench)
    bench.write_corpus(tmp_path, 200)
    texts += [p.read_text() for p in sorted(tmp_path.glob("**/*.yaml"))]
    checked = 0
    for text in texts:
        try:
            want = _composed(text)
        except Exception:
            continue  # not valid YAML for libyaml either (the syntax-error fixtures)
        assert [d.data for d in parse_stream(text, "x.yaml")] == want
        checked += 1
    assert checked > 50
