"""Values and streams that once hung or crashed `kgen render`: empty stdin, alias bombs,
deep nesting, endless inputs, empty and multi-document values files, stdout that cannot be written.

Every refusal is one line on stderr, exit 2, nothing on stdout, no traceback. Time bounds are on this
process's CPU time (time.process_time), which other sessions' load on the machine does not inflate.
"""

import io
import json
import os
import signal
import subprocess
import time

import pytest
from click.testing import CliRunner

from kgen.cli import cli
from kgen.inputs import read_text
from kgen.render.layering import MAX_DEPTH, MAX_NODES, MAX_VALUES_BYTES


def run(*args, input=None):
    return CliRunner().invoke(cli, list(args), input=input)


def refused(res, *needles) -> str:
    assert res.exit_code == 2, (res.exit_code, res.output)
    assert res.stdout == ""
    line = res.stderr
    assert line.startswith("kgen: error: ") and line.count("\n") == 1, line
    assert "Traceback" not in line
    for needle in needles:
        assert needle in line, line
    return line


def cpu_time_of(fn):
    start = time.process_time()
    result = fn()
    return result, time.process_time() - start


# ---- empty and odd values files -------------------------------------------------------------------
def test_empty_stdin_is_an_error_not_the_default_gpu_job():
    refused(run("render", "-f", "-", input=""), "<stdin>: empty input; no values to read", "command before the pipe")
    refused(run("render", "-f", "-", input="  \n\n"), "<stdin>: empty input")


def test_an_empty_values_file_is_an_error(tmp_path):
    path = tmp_path / "v.yaml"
    path.write_text("")
    refused(run("render", "-f", str(path)), f"{path}: empty file; no values in it")


def test_only_a_document_marker_says_so(tmp_path):
    path = tmp_path / "v.yaml"
    path.write_text("---\n")
    line = refused(run("render", "-f", str(path)), f"{path}: holds an empty YAML document (only ---): no values in it")
    assert "NoneType" not in line


@pytest.mark.parametrize("text,line", [("nodes: 2\n---\ngpus: 0\n", 2), ("---\nnodes: 2\n---\n", 3)])
def test_two_documents_say_where_the_second_starts(tmp_path, text, line):
    path = tmp_path / "v.yaml"
    path.write_text(text)
    said = refused(run("render", "-f", str(path)), f"{path}:{line}: a second YAML document starts here (---)")
    assert "give -f once per file" in said and "found another document" not in said


@pytest.mark.parametrize("text,what", [("- a\n- b\n", "got a list"), ("hello\n", "got one single value (not shown)")])
def test_a_values_file_that_is_not_a_mapping_says_what_it_is(tmp_path, text, what):
    path = tmp_path / "v.yaml"
    path.write_text(text)
    refused(run("render", "-f", str(path)), "must be a mapping of values (key: value, e.g. nodes: 4)", what)


def test_a_values_file_of_comments_only_sets_nothing(tmp_path):
    path = tmp_path / "v.yaml"
    path.write_text("# overrides go here\n")
    assert run("render", "-f", str(path)).exit_code == 0


# ---- bounded: aliases, depth, size -----------------------------------------------------------------
def alias_bomb(levels: int = 9) -> str:
    lines = ["volumes:", "- name: data", "  emptyDir: {}", "  bomb:", "    a: &a [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels + 1):
        prev, cur = chr(ord("a") + i - 1), chr(ord("a") + i)
        lines.append(f"    {cur}: &{cur} [" + ", ".join([f"*{prev}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def test_an_alias_bomb_is_refused_at_once():
    res, cpu = cpu_time_of(lambda: run("render", "-f", "-", input=alias_bomb()))
    refused(res, f"more than {MAX_NODES} values with its YAML aliases expanded")
    assert cpu < 1.0, f"{cpu:.2f}s of CPU"


def test_aliases_within_the_bound_still_work():
    text = "volumes: &v [{name: data, emptyDir: {}}]\nvolumeMounts: [{name: data, mountPath: /data}]\nx: *v\n"
    assert "unknown key" in refused(run("render", "-f", "-", input=text))  # parsed, then `x` is unknown
    ok = "nodeSelector: &s {pool: a100}\nlabels: *s\n"
    assert run("render", "-f", "-", input=ok).exit_code == 0


def test_a_400_deep_mapping_is_one_line():
    text = "".join("  " * i + f"k{i}:\n" for i in range(400)) + "  " * 400 + "v\n"
    res, cpu = cpu_time_of(lambda: run("render", "-f", "-", input=text))
    refused(res, f"<stdin>:{MAX_DEPTH + 1}: nests deeper than {MAX_DEPTH} levels")
    assert cpu < 1.0, f"{cpu:.2f}s of CPU"


def test_a_100000_deep_flow_sequence_is_one_line():
    text = "volumes: " + "[" * 100_000 + "]" * 100_000 + "\n"
    res, cpu = cpu_time_of(lambda: run("render", "-f", "-", input=text))
    refused(res, f"nests deeper than {MAX_DEPTH} levels")
    assert cpu < 1.0, f"{cpu:.2f}s of CPU"


def test_deep_and_bombed_set_values_are_refused_too():
    refused(run("render", "--set", "volumes=" + "[" * 5000 + "]" * 5000), "--set volumes:1: nests deeper")


class Endless(io.RawIOBase):
    """stdin that never ends (`yes | kgen render -f -`)."""

    def __init__(self):
        self.served = 0

    def readable(self):
        return True

    def readinto(self, buffer):
        buffer[:] = b"a" * len(buffer)
        self.served += len(buffer)
        return len(buffer)

    def readall(self):
        raise AssertionError("read without a bound: this never returns")


def test_endless_stdin_ends_at_the_bound():
    endless = Endless()
    res, cpu = cpu_time_of(lambda: run("render", "-f", "-", input=endless))
    refused(res, "-f -: <stdin>: larger than 1 MiB, the most kgen reads as one values file")
    assert endless.served < 2 * MAX_VALUES_BYTES
    assert cpu < 1.0


def test_dev_zero_ends_at_once(kgen_cmd):
    done = subprocess.run([*kgen_cmd, "render", "-f", "/dev/zero"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (
        "kgen: error: -f/--values: /dev/zero: larger than 1 MiB, the most kgen reads as one values file "
        "(is it the right file?)\n"
    )


def test_a_huge_values_file_is_refused_without_reading_it_all(tmp_path):
    path = tmp_path / "huge.yaml"
    with open(path, "wb") as fh:
        fh.truncate(1 << 34)  # 16 GiB, sparse: reading it all would take minutes
    res, cpu = cpu_time_of(lambda: run("render", "-f", str(path)))
    refused(res, f"{path}: larger than 1 MiB")
    assert cpu < 1.0


def test_the_reader_names_what_it_read(tmp_path):
    from kgen.errors import InputError

    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"name: caf\xe9\n")
    with pytest.raises(InputError, match=r"latin1.yaml: not UTF-8 text \(invalid continuation byte at byte 9\)"):
        read_text(str(path), limit=100)
    with pytest.raises(InputError, match=r"latin1.yaml: larger than 8 bytes, the most kgen reads as one manifest"):
        read_text(str(path), limit=8, what="manifest")
    with pytest.raises(InputError, match=r"cannot read .*missing.yaml: No such file or directory"):
        read_text(str(tmp_path / "missing.yaml"), limit=8)


# ---- stdout that cannot be written -------------------------------------------------------------------
def test_a_full_stdout_is_one_line(kgen_cmd):
    with open("/dev/full", "wb") as full:
        done = subprocess.run([*kgen_cmd, "render"], stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr == (
        "kgen: error: cannot write to stdout: No space left on device; "
        "redirect it elsewhere, or write a file with --output-file FILE\n"
    )


@pytest.mark.parametrize("args", [["presets", "list"], ["values"], ["--help"]])
def test_a_full_stdout_suggests_output_file_only_where_the_command_has_it(kgen_cmd, args):
    """`kgen presets list > /dev/full` once said "write a file with --output-file FILE", an option that
    command does not have (its --output-file is refused: not an option)."""
    with open("/dev/full", "wb") as full:
        done = subprocess.run([*kgen_cmd, *args], stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr == "kgen: error: cannot write to stdout: No space left on device; redirect it elsewhere\n"


def test_a_closed_stdout_is_one_line(kgen_cmd):
    done = subprocess.run(
        [*kgen_cmd, "presets", "list"],
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
        preexec_fn=lambda: os.close(1),
    )
    assert done.returncode == 2
    assert done.stderr.startswith("kgen: error: cannot write to stdout: stdout is closed (>&-); ")
    assert done.stderr.count("\n") == 1


@pytest.mark.parametrize("args", [["render", "--preset", "64x8"], ["--help"], ["presets", "show", "4x8"]])
def test_a_reader_that_went_away_ends_kgen_quietly_by_sigpipe(kgen_cmd, args):
    """As `yes | head -1`: the writer ends by SIGPIPE and says nothing. The pipe's reader is closed before
    kgen starts, so the first write fails whatever the load."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run([*kgen_cmd, *args], stdout=write_end, stderr=subprocess.PIPE, timeout=120)
    finally:
        os.close(write_end)
    assert done.returncode == -signal.SIGPIPE
    assert done.stderr == b""


# ---- a name with a trailing newline ------------------------------------------------------------------
@pytest.mark.parametrize(
    "args,option",
    [
        (["--name", "llama\n"], "--name"),
        (["-n", "ml\n"], "--namespace"),
        (["--set", "serviceAccountName=sa\n"], "--set serviceAccountName"),
        (["--set", "queue=team-a\n"], "--set queue"),
        (["--env", "HF_HOME\n=/data"], "--env"),
        (["--set", 'envFrom=[{secretRef: {name: s}, prefix: "P_\\n"}]'], "--set envFrom"),
        (["--set", 'env.X={valueFrom: {secretKeyRef: {name: "s\\n", key: k}}}'], "--set env.X"),
    ],
)
def test_a_name_ending_in_a_newline_is_refused(args, option):
    """Kubernetes' name patterns were anchored with `$`, which also matches before a final newline:
    `kgen render -n $'ml\\n'` printed `namespace: |` + `ml` (exit 0) and kubectl apply failed on it."""
    line = refused(run("render", *args), f"kgen: error: {option}")
    assert "\n" not in line.rstrip("\n")


def test_lint_reports_names_ending_in_a_newline():
    manifest = 'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: "cfg\\n"\n  namespace: "ml\\n"\ndata: {"k\\n": v}\n'
    res = run("lint", "-o", "json", "-", input=manifest)
    assert res.exit_code == 1
    assert [f["rule"] for f in json.loads(res.stdout)["findings"]] == ["KG021", "KG023", "KG085"]


def test_a_key_with_a_newline_or_tab_keeps_each_finding_on_one_line():
    """A finding's field path wrote such a key raw: `[data.k` on one line and `]` on the next."""
    manifest = 'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\ndata: {"k\\n": v, "x\\ty": w, "q\\"": z}\n'
    res = run("lint", "-", input=manifest)
    lines = res.stdout.splitlines()
    assert [line.split()[1] for line in lines] == ["KG085", "KG085", "KG085"]
    assert [line.rsplit(" [", 1)[1] for line in lines] == ['data["k\\n"]]', 'data["x\\ty"]]', 'data["q\\""]]']
    github = run("lint", "-o", "github", "-", input=manifest).stdout.splitlines()
    assert len(github) == 3 and all(line.startswith("::error ") for line in github)
