"""How kgen calls ssh (pure), and that its remote command survives a real POSIX shell with hostile words."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from kgen.baremetal.transport import SshTransport, classify_ssh, entrypoint_source


def test_ssh_options_keys_only_bounded_never_trusting_unknown_hosts():
    t = SshTransport("python3", "/cfg/ssh_config", connect_timeout=7, persist=300)
    argv = t.ssh_argv("gpu1", "true")
    text = " ".join(argv)
    assert argv[:3] == ["ssh", "-F", "/cfg/ssh_config"]
    assert "BatchMode=yes" in text and "ConnectTimeout=7" in text and "ServerAliveInterval=5" in text
    assert "StrictHostKeyChecking" not in text and "UserKnownHostsFile" not in text
    assert argv[-4:] == ["-T", "--", "gpu1", "true"]  # "--": a host can never be read as an option
    if t.control_dir:
        assert "ControlMaster=auto" in text and f"ControlPath={t.control_dir}/" in text
        assert oct(os.stat(t.control_dir).st_mode & 0o777) == "0o700"
    assert "ControlMaster" not in " ".join(SshTransport("python3", persist=0).ssh_argv("h", "true"))


def test_remote_command_through_a_real_shell_with_hostile_words(tmp_path):
    """The interpreter path and the run directory land exactly through `sh -c` (what sshd runs)."""
    weird = tmp_path / "py $(touch pwned) 'q' \"d\" `x` ;&|"
    weird.mkdir()
    python = weird / "python"
    python.symlink_to(sys.executable)
    run_dir = str(weird / "run dir\twith\nnewline")
    t = SshTransport(str(python), persist=0)
    query = subprocess.run(
        ["/bin/sh", "-c", t.remote_command(["--run-dir", run_dir, "--state"])],
        capture_output=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert query.returncode == 0, query.stderr
    answer = json.loads(query.stdout)
    assert answer["dir"] == run_dir and answer["missing"] is True
    # the launch form: the entrypoint's source on stdin, run by the bootstrap
    source = entrypoint_source()
    launch = subprocess.run(
        ["/bin/sh", "-c", t.remote_command(["--help"])],
        input=b"%d\n" % len(source) + source,
        capture_output=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert launch.returncode == 0 and b"--run-dir DIR --state" in launch.stdout, launch.stderr
    assert not (tmp_path / "pwned").exists()


def test_ssh_failures_say_why_and_the_fix():
    def why(err, rc=255):
        return classify_ssh("gpu1", rc, err, 10, None)

    assert "authorized_keys" in why("root@gpu1: Permission denied (publickey).") and "never uses passwords" in why(
        "Permission denied (publickey)."
    )
    assert "never turns host-key checking off" in why("Host key verification failed.")
    assert "does not resolve" in why("ssh: Could not resolve hostname gpu1: Name or service not known")
    assert "connection refused" in why("ssh: connect to host gpu1 port 22: Connection refused")
    assert "ConnectTimeout=10s" in why("Connection timed out during banner exchange")
    assert "no answer in time" in why("", rc=None)
    assert why("Traceback ...", rc=1) == ""  # the command ran: not an ssh failure
    # a host that crashed under a running `kgen logs -f` (ssh says nothing at LogLevel=ERROR)
    assert why("") == "gpu1: the ssh connection ended without a message (exit 255): the host or its sshd went away?"
