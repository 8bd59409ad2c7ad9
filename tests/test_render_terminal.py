"""`kgen render` to a terminal ends with a summary of the objects on stderr (kind/name/size; how to see the
entrypoint the ConfigMap holds); stdout is the same bytes as through a pipe, and a pipe gets no summary."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
import threading

import pytest

pytestmark = pytest.mark.timeout(120)

ARGS = ["render", "--nodes", "2", "--gpus", "0", "--name", "tty-test"]


def kgen_on_a_terminal(args: list[str]) -> tuple[bytes, str, int]:
    """kgen with its stdout on a pseudo-terminal (read until the child closes it), stderr on a pipe."""
    master, slave = pty.openpty()
    import termios

    attrs = termios.tcgetattr(slave)
    attrs[1] &= ~termios.ONLCR  # the terminal passes "\n" as written (no "\r\n"): the bytes compare as they are
    termios.tcsetattr(slave, termios.TCSANOW, attrs)
    proc = subprocess.Popen(
        [sys.executable, "-m", "kgen", *args], stdin=subprocess.DEVNULL, stdout=slave, stderr=subprocess.PIPE
    )
    os.close(slave)
    chunks: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        _, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(timeout=10)
    os.close(master)
    return b"".join(chunks), err.decode(), proc.returncode


def test_a_terminal_gets_the_same_bytes_and_a_summary_on_stderr():
    piped = subprocess.run([sys.executable, "-m", "kgen", *ARGS], capture_output=True, timeout=90)
    assert piped.returncode == 0 and "objects" not in piped.stderr.decode()
    out, err, code = kgen_on_a_terminal(ARGS)
    assert code == 0
    assert out == piped.stdout  # what `| kubectl apply -f -` would apply is unchanged
    lines = err.splitlines()
    total = piped.stdout.count(b"\n")
    assert lines[0] == f"kgen: 4 objects, {total:,} lines on stdout:"
    rows = [ln.split() for ln in lines[1:5]]
    assert [r[1] for r in rows] == [
        "ConfigMap/tty-test-entrypoint",
        "Service/tty-test",
        "NetworkPolicy/tty-test",
        "Job/tty-test",
    ]
    assert "`kgen entrypoint` prints it" in lines[1] and "kubectl apply -f -" in lines[5]
    # the sizes add up to the output: each document's lines and the three "---" between them
    assert sum(int(r[2].replace(",", "")) for r in rows) + 3 == total


def test_json_and_an_output_file_on_a_terminal(tmp_path):
    out, err, code = kgen_on_a_terminal([*ARGS, "-o", "json"])
    assert code == 0 and out.startswith(b"{") and "4 objects" in err
    target = tmp_path / "run.yaml"
    out, err, code = kgen_on_a_terminal([*ARGS, "--output-file", str(target)])
    assert code == 0 and out == b"" and "objects" not in err and target.read_text().startswith("apiVersion")
