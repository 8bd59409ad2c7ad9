"""Hostile input ends quickly, in bounded memory, as one KG004 finding per offending file.

The end-to-end cases run the real `kgen lint` process with a hard timeout and check its exit code
(never a signal: a 30,000-deep sequence used to overflow libyaml's recursive composer, SIGSEGV),
its report, its stderr (no traceback) and its peak memory (wait4's rusage).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from lint_helpers import FIXTURES, run_lint

from kgen.inputs import MAX_FILE_BYTES, NotText, TooLarge, read_stream
from kgen.lint.api import LintOptions, lint_text
from kgen.lint.parse import MAX_DEPTH, MAX_REFUSED_DOCUMENTS, Budget, ParseError, parse_stream, parse_stream_partial

PEAK_RSS_MIB = 1024


def _kg004_lines(out: str, name: str) -> list[str]:
    return [line for line in out.splitlines() if name in line and " KG004 error: " in line]


def _deep_flow(n: int) -> str:
    return "[" * n + "]" * n + "\n"


def _bomb(levels: int = 9) -> str:
    lines = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for i in range(1, levels + 1):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def _write_big_document(path: Path, mib: int = 50) -> None:
    line = "    " + "x" * 95 + "\n"
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: big}\ndata:\n  blob: |\n")
        block = line * 10_000
        for _ in range(mib * 2**20 // len(block) + 1):
            fh.write(block)


CASES = {
    "dev-zero": ("/dev/zero", "a NUL byte"),
    "dev-urandom": ("/dev/urandom", "not "),  # not UTF-8 text / not YAML text: whichever byte comes first
    "50MB": ("big.yaml", "document is longer than 3 MiB"),
    "deep-flow": ("deep.yaml", f"nests more than {MAX_DEPTH} levels"),
    "deep-block": ("deep-block.yaml", f"nests more than {MAX_DEPTH} levels"),
    "alias-bomb": ("bomb.yaml", "excessive aliasing"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_hostile_input_ends_fast_with_one_KG004_and_the_report(case, tmp_path):
    target, needle = CASES[case]
    if not target.startswith("/"):
        path = tmp_path / target
        if case == "50MB":
            _write_big_document(path)
        elif case == "deep-flow":
            path.write_text(_deep_flow(30_000))
        elif case == "deep-block":
            path.write_text("- " * 30_000 + "x\n")
        else:
            path.write_text(_bomb())
        target = str(path)
    good = tmp_path / "good.yaml"
    good.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: Bad_Name}\n")
    code, out, err, seconds, rss = run_lint([target, str(good)])
    assert code == 2, (code, out, err)  # exit 2, never a signal (-11 / 139)
    assert "Traceback" not in err and err.startswith("kgen: error: ") and len(err.splitlines()) == 1
    [line] = _kg004_lines(out, target)
    assert needle in line
    assert f"{good}:3:" in out and "KG021" in out  # the rest of the report is still written
    assert seconds < 60 and rss < PEAK_RSS_MIB, (seconds, rss)


def test_a_30000_deep_sequence_is_reported_with_line_and_column_not_a_segfault(tmp_path):
    path = tmp_path / "deep.yaml"
    path.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: " + _deep_flow(30_000))
    code, out, err, _, _ = run_lint([str(path)])
    assert code == 2 and "Traceback" not in err
    assert out.startswith(f"{path}:4:{6 + MAX_DEPTH}: KG004 error: YAML nests more than {MAX_DEPTH} levels deep")


def test_an_endless_stdin_stops_at_the_size_limit(tmp_path):
    def endless(pipe):
        block = b"a: b\n" * 100_000
        try:
            while True:
                pipe.write(block)
        except (BrokenPipeError, OSError):
            pass

    code, out, err, seconds, rss = run_lint(["-"], stdin_writer=endless)
    assert code == 2 and "Traceback" not in err
    assert out.startswith("<stdin>: KG004 error: larger than 64 MiB")
    assert seconds < 60 and rss < PEAK_RSS_MIB


def test_a_100000_document_stream_is_linted_in_bounded_time_and_memory(tmp_path):
    path = tmp_path / "stream.yaml"
    path.write_text("".join("---\n- x\n" for _ in range(100_000)))
    code, out, err, seconds, rss = run_lint([str(path)])
    assert code == 1 and "Traceback" not in err and err == ""  # findings only: 100,000 KG003
    assert out.count(" KG003 error: ") == 100_000
    assert seconds < 60 and rss < PEAK_RSS_MIB


# ---------------------------------------------------------------------------------------------
# The limits one by one (in-process, fast)


def _errors(text: str, budget: Budget | None = None) -> tuple[list, list[ParseError]]:
    return parse_stream_partial(text, "x.yaml", budget)


def test_documents_after_a_refused_one_are_still_read():
    text = "a: 1\n---\nb: " + _deep_flow(MAX_DEPTH + 5) + "---\nc: 3\n"
    docs, errors = _errors(text)
    assert [d.data for d in docs] == [{"a": 1}, {"c": 3}]
    assert [(e.line, e.stops) for e in errors] == [(3, False)]
    result = lint_text(text, "x.yaml", LintOptions())
    [kg004] = [f for f in result.findings if f.rule_id == "KG004"]
    assert "rest of this file" not in kg004.message and result.exit_code == 2


def test_a_file_of_refused_documents_is_given_up_after_a_hundred():
    text = ("---\n" + _deep_flow(MAX_DEPTH + 1)) * 5000
    start = time.process_time()
    docs, errors = _errors(text)
    assert docs == [] and len(errors) == MAX_REFUSED_DOCUMENTS + 1 and time.process_time() - start < 10
    assert errors[-1].stops and errors[-1].problem == f"more than {MAX_REFUSED_DOCUMENTS} documents refused"
    assert errors[-1].line == 2 * MAX_REFUSED_DOCUMENTS + 2


def _deep_crd(levels: int) -> str:
    lines = [
        "apiVersion: apiextensions.k8s.io/v1",
        "kind: CustomResourceDefinition",
        "metadata: {name: foos.example.com}",
        "spec:",
        "  group: example.com",
        "  names: {kind: Foo, plural: foos}",
        "  scope: Namespaced",
        "  versions:",
        "  - name: v1",
        "    served: true",
        "    storage: true",
        "    schema:",
        "      openAPIV3Schema:",
    ]
    indent = 8
    for i in range(levels):
        lines += [" " * indent + "type: object", " " * indent + "properties:", " " * (indent + 2) + f"p{i}:"]
        indent += 4
    return "\n".join([*lines, " " * indent + "type: string"]) + "\n"


def test_documents_up_to_the_depth_limit_are_fully_checked():
    """A CRD schema ~990 levels deep: parsed, schema-validated (recursively) and linted, no RecursionError."""
    result = lint_text(_deep_crd(490), "crd.yaml", LintOptions())
    assert result.exit_code == 0 and result.findings == []
    result = lint_text(_deep_crd(500), "crd.yaml", LintOptions())
    assert [f.rule_id for f in result.findings] == ["KG004"] and "nests more than" in result.findings[0].message


def test_depth_limit_holds_exactly_and_through_aliases():
    assert _errors("a: " + _deep_flow(MAX_DEPTH - 1))[1] == []  # the root mapping is level 1
    assert _errors("a: " + _deep_flow(MAX_DEPTH))[1][0].problem.startswith("YAML nests more than")
    half = MAX_DEPTH // 2 + 10
    text = f"a: &deep {_deep_flow(half).strip()}\nb: {'[' * half}*deep{']' * half}\n"
    [err] = _errors(text)[1]
    assert "through aliases" in err.problem and err.line == 2


@pytest.mark.parametrize(
    "text",
    [
        _bomb(),  # sequences
        "a0: &a0 {a: x, b: x, c: x, d: x, e: x, f: x, g: x, h: x, i: x}\n"
        + "".join(
            f"a{i}: &a{i} {{{', '.join(f'k{j}: *a{i - 1}' for j in range(9))}}}\n" for i in range(1, 10)
        ),  # mappings
        _bomb().replace("a9: &a9", "top:\n  <<: *a8\n  a9: &a9"),  # inside a merge key's document
        _bomb(7) + "k:\n  ? *a7\n  : v\n",  # an alias as a mapping key
    ],
    ids=["sequences", "mappings", "merge", "key"],
)
def test_alias_bombs_of_every_shape_are_refused_without_expanding(text):
    start = time.process_time()
    docs, errors = _errors(text)
    assert docs == [] and len(errors) == 1
    assert "excessive aliasing" in errors[0].problem or "invalid map key" in errors[0].problem
    assert time.process_time() - start < 2


def test_aliases_share_one_budget_across_documents_and_files():
    budget = Budget(100)
    small = "a: &a [1, 2, 3, 4, 5, 6, 7, 8, 9]\nb: [*a, *a, *a]\n"  # aliases add 30 nodes
    assert _errors(small, budget)[1] == [] and _errors(small, budget)[1] == []
    assert _errors(small, budget)[1] == []
    docs, errors = _errors(small + "---\nc: 1\n---\n" + small, budget)  # 120 > 100: refused from here on
    assert [d.data for d in docs] == [{"c": 1}] and len(errors) == 2
    assert all("of this run expand to more than" in e.problem for e in errors)


def test_duplicate_keys_are_listed_up_to_a_hundred_per_document_then_counted():
    text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata:\n" + "  a: x\n" * 5000
    result = lint_text(text, "dups.yaml", LintOptions())
    dups = [f for f in result.findings if f.rule_id == "KG001"]
    assert len(dups) == 101 and dups[0].line == 6 and dups[0].path == "data.a"
    assert dups[-1].message.startswith("4899 more duplicate keys in this document (the first 100 are listed)")


def test_findings_in_wide_mappings_are_located_at_once():
    text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata:\n"
    text += "".join(f"  bad key {i}: x\n" for i in range(20_000)) + "  y: x\n"
    start = time.process_time()
    result = lint_text(text, "wide.yaml", LintOptions())
    assert len(result.findings) == 20_000 and result.findings[-1].line == 20_004
    assert time.process_time() - start < 10  # a linear scan per finding took ~10 s here, 100k took minutes


def test_a_mapping_or_list_as_key_is_refused_like_kubectl():
    [err] = _errors("? [a, b]\n: 1\n")[1]
    assert "invalid map key" in err.problem and (err.line, err.column) == (1, 3)


def test_anchors_may_be_redefined_and_undefined_aliases_are_syntax_errors():
    [doc] = parse_stream("a: &x 1\nb: &x 2\nc: *x\n", "x.yaml")
    assert doc.data == {"a": 1, "b": 2, "c": 2}  # goyaml: the latest definition wins
    [err] = _errors("a: *nope\n")[1]
    assert err.stops and "found undefined alias 'nope'" in err.problem and (err.line, err.column) == (1, 4)


def test_anchors_do_not_leak_into_the_next_document():
    [err] = _errors("a: &x 1\n---\nb: *x\n")[1]
    assert "undefined alias" in err.problem and err.line == 3


def test_the_reader_stops_at_the_first_byte_that_is_not_text():
    import io

    with pytest.raises(NotText) as got:
        read_stream(io.BytesIO(b"a: 1\nb: caf\xc3\xa9 \x00\n"), "f.yaml")
    assert (got.value.line, got.value.column) == (2, 9) and "NUL byte" in got.value.problem
    with pytest.raises(NotText) as got:
        read_stream(io.BytesIO(b"a: 1\n\n  x: \xff"), "f.yaml")
    assert (got.value.line, got.value.column) == (3, 6) and "not UTF-8" in got.value.problem
    with pytest.raises(NotText):
        read_stream(io.StringIO("a: \x1b[31m\n"), "f.yaml")
    with pytest.raises(NotText) as got:  # a C1 control character (libyaml and goyaml refuse them too)
        read_stream(io.BytesIO("é: 1\nb: x\x86y\n".encode()), "f.yaml")
    assert (got.value.line, got.value.column) == (2, 5) and "U+0086" in got.value.problem
    assert read_stream(io.BytesIO("a: x\x85y\n".encode()), "f.yaml") == "a: x\x85y\n"  # NEL is a line break
    with pytest.raises(TooLarge):
        read_stream(io.BytesIO(b"a: b\n" * 300), "f.yaml", limit=1000)
    assert read_stream(io.BytesIO("\ufeffa: \tb\r\n".encode()), "f.yaml") == "\ufeffa: \tb\r\n"
    assert MAX_FILE_BYTES == 64 * 2**20


def test_the_reader_refuses_exactly_the_ascii_bytes_yaml_refuses():
    import io
    import re

    refused = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # C0 controls but TAB, LF, CR; DEL
    for byte in range(128):
        data = b"a: 1\nb: x" + bytes([byte]) + b"y\n"  # ASCII: read without searching, when nothing is refused
        if refused.match(bytes([byte])):
            with pytest.raises(NotText) as got:
                read_stream(io.BytesIO(data), "f.yaml")
            assert (got.value.line, got.value.column) == (2, 5)
        else:
            assert read_stream(io.BytesIO(data), "f.yaml") == data.decode()
    with pytest.raises(NotText) as got:  # an ASCII chunk after a chunk that ends inside a character
        read_stream(io.BytesIO(b"a: " + b"b" * (2**20 - 4) + b"\xc3" + b"c: 1\n"), "f.yaml")
    assert "not UTF-8" in got.value.problem


def test_positions_are_read_back_exactly_after_the_documents_before(tmp_path):
    text = (FIXTURES / "valid-job.yaml").read_text()
    bad = text.replace("restartPolicy: Never", "restartPolicy: Sometimes", 1)
    combined = "# lead\n" + text + "---\n" + bad
    result = lint_text(combined, "x.yaml", LintOptions())
    [f] = [f for f in result.findings if f.rule_id == "KG054"]
    line = combined.splitlines().index(next(ln for ln in combined.splitlines() if "Sometimes" in ln)) + 1
    assert f.line == line and f.column > 1


# ---------------------------------------------------------------------------------------------
# The depth limit is kgen's, whatever libyaml a PyYAML release bundles. PyYAML 6.0.4 bundles
# libyaml 0.2.6, whose parser stops a whole stream at 1,000 levels (its scanner reads ahead, so flow
# nesting fails before the first event); 6.0.3's libyaml 0.2.5 has no limit. The tests above pin kgen's
# behaviour (MAX_DEPTH, the message, the position, the documents after); these pin the mechanism.


def test_libyaml_nesting_limit_is_raised_only_while_kgen_reads_and_put_back():
    from kgen.lint import parse

    if parse._get_max_nest_level is None:
        pytest.skip("this PyYAML's libyaml has no nesting limit (PyYAML <= 6.0.3): nothing to raise")
    before = parse._get_max_nest_level()
    seen = []
    real = parse._build

    def spy(*args):
        seen.append(parse._get_max_nest_level())
        return real(*args)

    mp = pytest.MonkeyPatch()
    mp.setattr(parse, "_build", spy)
    try:
        _errors("a: " + _deep_flow(MAX_DEPTH + 5))
    finally:
        mp.undo()
    assert seen == [max(before, parse.PARSER_DEPTH)] and parse._get_max_nest_level() == before
    assert parse.PARSER_DEPTH > MAX_DEPTH + 1024  # past kgen's limit plus libyaml's look-ahead


def test_a_parser_that_stops_first_is_read_as_kgens_depth_refusal(monkeypatch):
    """Where libyaml's own limit cannot be raised (or is met first), its error is the same KG004
    refusal of that document, and the documents after it are still read."""
    from kgen.lint import parse

    if parse._set_max_nest_level is None:
        pytest.skip("this PyYAML's libyaml has no nesting limit (PyYAML <= 6.0.3)")
    monkeypatch.setattr(parse, "_set_max_nest_level", None)  # libyaml keeps its default of 1,000
    text = "a: 1\n---\nb: " + _deep_flow(MAX_DEPTH + 30) + "---\nc: 3\n"
    docs, errors = _errors(text)
    assert [d.data for d in docs] == [{"a": 1}, {"c": 3}]
    [err] = errors
    assert not err.stops and err.line == 3 and err.problem.startswith(f"YAML nests more than {MAX_DEPTH} levels")
