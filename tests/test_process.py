"""The `kgen` process (kgen/__main__.py) ends with os._exit after flushing: nothing may be lost.

Real processes through the installed console script, compared with the in-process CLI.
"""

import os
import signal
import subprocess
import sys

from click.testing import CliRunner

from kgen.cli import cli
from tests.conftest import ROOT


def proc(cmd, *args, **kw):
    return subprocess.run([*cmd, *args], capture_output=True, timeout=60, **kw)


def test_output_is_byte_identical_to_the_in_process_cli(kgen_cmd):
    """64x8 as JSON is ~90 KB, more than a pipe holds: the flush before os._exit must write it all."""
    for args in (["render", "--preset", "64x8", "--format", "json"], ["render", "--kind", "statefulset"]):
        done = proc(kgen_cmd, *args)
        assert done.returncode == 0, done.stderr
        inproc = CliRunner().invoke(cli, args, catch_exceptions=False)
        assert len(done.stdout) > 10_000
        assert done.stdout == inproc.stdout_bytes
        # a StatefulSet's render notes on stderr how to create its <name>-auth Secret; nothing else
        assert done.stderr == inproc.stderr_bytes
        assert done.stderr == b"" if args[1] == "--preset" else done.stderr.startswith(b"kgen: note: ")


def test_python_dash_m_kgen_is_the_same_process():
    done = proc([sys.executable, "-m", "kgen"], "--version")
    assert done.returncode == 0 and done.stdout.decode().startswith("kgen ")


def test_exit_codes_survive_the_fast_exit(kgen_cmd):
    bad = proc(kgen_cmd, "render", "--nodes", "0")
    assert bad.returncode == 2 and bad.stdout == b""
    assert bad.stderr.decode().count("\n") == 1 and b"--nodes" in bad.stderr
    findings = proc(kgen_cmd, "lint", str(ROOT / "tests/lint/fixtures"))
    clean = proc(kgen_cmd, "lint", "-", input=proc(kgen_cmd, "render").stdout)
    assert (findings.returncode, clean.returncode) == (1, 0), (findings.stderr, clean.stderr)


def test_output_file_is_complete_after_the_fast_exit(kgen_cmd, tmp_path):
    out = tmp_path / "m.yaml"
    done = proc(kgen_cmd, "render", "--preset", "64x8", "--output-file", str(out))
    assert done.returncode == 0 and done.stdout == b""
    assert out.read_bytes() == proc(kgen_cmd, "render", "--preset", "64x8").stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.yaml"]  # no temp file left behind


def test_a_reader_that_went_away_ends_kgen_by_sigpipe_without_a_traceback(kgen_cmd):
    read_end, write_end = os.pipe()
    os.close(read_end)  # `kgen render | head -c0`: nobody reads
    try:
        done = subprocess.run(
            [*kgen_cmd, "render", "--preset", "64x8", "--format", "json"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            timeout=60,
        )
    finally:
        os.close(write_end)
    assert done.returncode == -signal.SIGPIPE  # as `yes | head -c0`: quiet, by the signal
    assert done.stderr == b""
