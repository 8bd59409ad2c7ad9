"""Entrypoint behaviour that needs no torch: configuration, rank, command line, master wait."""

from __future__ import annotations

import atexit
import importlib.util
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from podharness import free_port_pair

ENTRYPOINT = Path(__file__).resolve().parents[2] / "entrypoint" / "kgen_entrypoint.py"

spec = importlib.util.spec_from_file_location("kgen_entrypoint", ENTRYPOINT)
ep = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ep)

_SECRET_DIR = tempfile.mkdtemp(prefix="kgen-test-secret-")
atexit.register(shutil.rmtree, _SECRET_DIR, True)
SECRET_FILE = os.path.join(_SECRET_DIR, "secret")
with open(os.open(SECRET_FILE, os.O_WRONLY | os.O_CREAT, 0o600), "w") as _fh:
    _fh.write(secrets.token_hex(32) + "\n")

BASE = {
    "NNODES": "4",
    "NPROC_PER_NODE": "2",
    "MASTER_ADDR": "job-0.job",
    "MASTER_PORT": "29500",
    "KGEN_SECRET_FILE": SECRET_FILE,
    "KGEN_HEALTH_GATE": "off",  # a stand-in node 0 hosts no store for the gate (its tests: test_health_gate_netns.py)
}
# A generous bound for "promptly" on a machine busy with other test runs: far below the waits a bug
# would show (the 600 s default master wait), never a tight wall-clock figure.
BUSY_BOUND = 60.0


def wait_until(predicate, timeout: float = BUSY_BOUND) -> bool:
    """Wait for an event (a log line ...) instead of sleeping a fixed time and hoping it happened."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def run_ep(env: dict, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    full = {"PATH": "/usr/bin:/bin", "HOSTNAME": "somehost", **env}
    return subprocess.run(
        [sys.executable, str(ENTRYPOINT), *args], env=full, capture_output=True, text=True, timeout=timeout
    )


# -- node rank ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "env, rank, source",
    [
        ({"NODE_RANK": "3", "JOB_COMPLETION_INDEX": "1", "KGEN_POD_INDEX": "2"}, 3, "NODE_RANK"),
        ({"JOB_COMPLETION_INDEX": "1", "KGEN_POD_INDEX": "2", "HOSTNAME": "x-3"}, 1, "JOB_COMPLETION_INDEX"),
        ({"KGEN_POD_INDEX": "2", "HOSTNAME": "x-3"}, 2, "KGEN_POD_INDEX"),
        # StatefulSet on Kubernetes < 1.28: the pod-index label is missing, the fieldRef is empty
        ({"KGEN_POD_INDEX": "", "HOSTNAME": "train-3", "KGEN_JOB_NAME": "train"}, 3, "HOSTNAME"),
        ({"HOSTNAME": "my-job-name-2", "KGEN_JOB_NAME": "my-job-name"}, 2, "HOSTNAME"),
        ({"HOSTNAME": "other-1"}, 1, "HOSTNAME"),
        ({"NODE_RANK": " 0 ", "HOSTNAME": "x-3"}, 0, "NODE_RANK"),
    ],
)
def test_rank_order(env, rank, source):
    cfg = ep.load_config({**BASE, **env})
    assert cfg.problems == []
    assert cfg.node_rank == rank
    assert cfg.rank_source.startswith(source)


def test_rank_missing_names_everything_it_looked_at():
    cfg = ep.load_config({**BASE, "KGEN_POD_INDEX": "", "HOSTNAME": "gpu"})
    (problem,) = cfg.problems
    for looked in ("NODE_RANK (unset)", "JOB_COMPLETION_INDEX (unset)", "KGEN_POD_INDEX (empty)", "HOSTNAME='gpu'"):
        assert looked in problem
    assert "set NODE_RANK" in problem


# -- bad environment: exit 2, one line per problem, no traceback ------------------------------


@pytest.mark.parametrize(
    "env, expected",
    [
        ({"NNODES": None}, "NNODES is not set"),
        ({"NNODES": "two"}, "NNODES='two' is not an integer"),
        ({"NNODES": "0"}, "NNODES='0' must be >= 1"),
        ({"NODE_RANK": "4"}, "node rank 4 (from NODE_RANK=4) is outside [0, NNODES=4)"),
        ({"NODE_RANK": "-1"}, "node rank -1 (from NODE_RANK=-1) is outside"),
        ({"NODE_RANK": "1.5"}, "NODE_RANK='1.5' is not an integer node rank"),
        ({"NODE_RANK": None, "JOB_COMPLETION_INDEX": "7"}, "(from JOB_COMPLETION_INDEX=7) is outside"),
        ({"NPROC_PER_NODE": "auto"}, "NPROC_PER_NODE='auto' is not an integer"),
        ({"MASTER_PORT": "http"}, "MASTER_PORT='http' is not an integer"),
        ({"MASTER_PORT": "70000"}, "MASTER_PORT='70000' must be between 1 and 65535"),
        ({"MASTER_ADDR": None}, "MASTER_ADDR is not set"),
        ({"MASTER_ADDR": "job-0.job:29500"}, "is not a bare host name or IP"),
        ({"KGEN_LIVENESS_PORT": "29500"}, "KGEN_LIVENESS_PORT=29500 equals MASTER_PORT"),
        ({"KGEN_HEARTBEAT_TIMEOUT": "1", "KGEN_HEARTBEAT_INTERVAL": "1"}, "less than twice"),
        ({"KGEN_HEARTBEAT_TIMEOUT": "soon"}, "KGEN_HEARTBEAT_TIMEOUT='soon' is not a number"),
        ({"KGEN_MASTER_WAIT_TIMEOUT": "-5"}, "KGEN_MASTER_WAIT_TIMEOUT='-5' must be >= 1"),
        ({"KGEN_RDZV_TIMEOUT": "1.5"}, "KGEN_RDZV_TIMEOUT='1.5' is not an integer"),
        ({"KGEN_KIND": "deployment"}, "KGEN_KIND='deployment' is not 'job', 'statefulset' or 'jobset'"),
        ({"KGEN_MAX_RESTARTS": "3"}, "KGEN_MAX_RESTARTS=3: in-place torchrun restarts are not supported"),
    ],
)
def test_bad_environment_exits_2_with_message(env, expected):
    full = {**BASE, "NODE_RANK": "1"}
    for key, value in env.items():
        if value is None:
            full.pop(key, None)
        else:
            full[key] = value
    res = run_ep(full, "--", "/bin/true")
    assert res.returncode == 2, res.stderr
    assert expected in res.stderr
    assert "Traceback" not in res.stderr
    assert res.stderr.startswith("kgen-entrypoint: error: ")


def test_all_problems_reported_at_once():
    res = run_ep({"NNODES": "x", "NPROC_PER_NODE": "0", "MASTER_PORT": "1", "NODE_RANK": "0"}, "--", "/bin/true")
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert any("NNODES='x'" in line for line in lines)
    assert any("NPROC_PER_NODE='0'" in line for line in lines)
    assert any("MASTER_ADDR is not set" in line for line in lines)


@pytest.mark.parametrize(
    "args, expected",
    [
        ([], "no command given"),
        (["--bogus"], "unknown option '--bogus'"),
        (["--"], "no command after '--'"),
        (["--", "-x"], "command starts with the option '-x'"),
        (["--", "-m"], "'-m' needs a module name"),
        (["--", "missing_train.py"], "training script 'missing_train.py' not found"),
        (["--smoke-test", "extra"], "--smoke-test takes no arguments"),
    ],
)
def test_bad_command_line(args, expected):
    res = run_ep({**BASE, "NODE_RANK": "0"}, *args)
    assert res.returncode == 2
    assert expected in res.stderr
    assert "Traceback" not in res.stderr


# -- torchrun command ------------------------------------------------------------------------


def test_torchrun_argv_is_one_static_configuration():
    cfg = ep.load_config(
        {
            **BASE,
            "JOB_COMPLETION_INDEX": "2",
            "KGEN_JOB_NAME": "llm",
            "KGEN_RUN_ID": "uid-1",
            "KGEN_RDZV_TIMEOUT": "120",
        }
    )
    argv = ep.torchrun_argv(cfg, ["train.py", "--lr", "3e-4"])
    assert argv[:3] == [sys.executable, "-m", "torch.distributed.run"]
    flags = argv[3:-3]
    assert flags == [
        "--nnodes=4",
        "--nproc-per-node=2",
        "--rdzv-backend=static",
        "--master-addr=job-0.job",
        "--master-port=29500",
        "--node-rank=2",
        "--rdzv-id=llm-uid-1-g0",
        "--rdzv-conf=timeout=120",
        "--max-restarts=0",
        "--monitor-interval=0.1",
    ]
    assert not any("rdzv-endpoint" in f or "c10d" in f for f in argv)
    assert argv[-3:] == ["train.py", "--lr", "3e-4"]
    assert ep.torchrun_argv(cfg, ["-m", "pkg.mod", "a"])[-3:] == ["-m", "pkg.mod", "a"]
    assert ep.torchrun_argv(cfg, ["bash", "run.sh"])[-3:] == ["--no-python", "bash", "run.sh"]


def test_script_arguments_survive_torchruns_local_rank_macro():
    """torchrun runs every worker argument through string.Template (for ${local_rank}): "$$" would reach
    the script as "$". The entrypoint escapes every other "$", so arguments arrive exactly."""
    from string import Template

    args = ["$$", "a$", "$HOME", "${HOME}", "$$(MASTER_ADDR)", "x$$y$", "$local_rankX", "--rank=${local_rank}"]
    cfg = ep.load_config({**BASE, "JOB_COMPLETION_INDEX": "0"})
    seen = [Template(a).safe_substitute(local_rank="3") for a in ep.torchrun_argv(cfg, ["t.py", *args])[-len(args) :]]
    assert seen == [*args[:-1], "--rank=3"]  # torchrun's own macro still works
    program = ep.torchrun_argv(cfg, ["./run$.sh", "$$"])
    assert program[-3:] == ["--no-python", "./run$.sh", "$$$$"]  # the program is not substituted by torchrun


def test_bare_metal_defaults():
    cfg = ep.load_config({**BASE, "NODE_RANK": "0"})
    assert cfg.problems == []
    assert cfg.liveness_port == 29501
    assert (cfg.master_wait, cfg.rdzv_timeout, cfg.hb_interval, cfg.hb_timeout) == (600, 300, 1, 5)
    assert cfg.rdzv_id == "kgen-local"
    assert "node 0/4" in cfg.summary() and "world size 8" in cfg.summary()


def test_supervisor_does_not_import_torch():
    code = (
        "import importlib.util, sys;"
        f"s = importlib.util.spec_from_file_location('e', {str(ENTRYPOINT)!r});"
        "m = importlib.util.module_from_spec(s); s.loader.exec_module(m);"
        "m.load_config({'NNODES': '2', 'NPROC_PER_NODE': '1', 'MASTER_ADDR': 'a',"
        " 'MASTER_PORT': '1000', 'NODE_RANK': '0'});"
        "print('torch' in sys.modules)"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert res.stdout.strip() == "False"


# -- waiting for node 0 (no torch: node 0 is never reached) -----------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_master_dns_never_resolves_exits_3_with_diagnosis():
    t = time.monotonic()
    res = run_ep(
        {**BASE, "MASTER_ADDR": "nobody.invalid", "NODE_RANK": "1", "KGEN_MASTER_WAIT_TIMEOUT": "3"},
        "--",
        "/bin/true",
        timeout=BUSY_BOUND + 30,
    )
    elapsed = time.monotonic() - t
    assert res.returncode == 3, res.stderr
    assert "not reachable within KGEN_MASTER_WAIT_TIMEOUT=3s" in res.stderr
    assert "does not resolve" in res.stderr and "never resolved" in res.stderr
    assert 2.5 < elapsed < BUSY_BOUND  # waited the 3 s bound, not the 600 s default


def test_master_port_closed_exits_3_with_diagnosis():
    port = _free_port()
    t = time.monotonic()
    res = run_ep(
        {
            **BASE,
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port - 1),
            "KGEN_LIVENESS_PORT": str(port),
            "NODE_RANK": "2",
            "KGEN_MASTER_WAIT_TIMEOUT": "3",
        },
        "--",
        "/bin/true",
        timeout=BUSY_BOUND + 30,
    )
    elapsed = time.monotonic() - t
    assert res.returncode == 3
    assert "resolved but not accepting" in res.stderr
    assert "nothing answered on the liveness port" in res.stderr
    assert 2.5 < elapsed < BUSY_BOUND  # waited the 3 s bound, not the 600 s default
    attempts = int(re.search(r"after (\d+) attempts", res.stderr).group(1))
    assert attempts > 15, res.stderr  # a refusing port is tried every 0.025-0.05 s, not with the 1 s backoff


@pytest.mark.parametrize(
    "nnodes, refused, lookup", [(2, 0.05, 0.25), (3, 0.05, 0.25), (101, 0.05, 0.5), (1001, 0.5, 1.0), (4001, 1.0, 1.0)]
)
def test_waiting_for_node0_that_is_not_there_yet_polls_at_a_group_wide_rate(nnodes, refused, lookup):
    assert ep.refused_poll(nnodes) == pytest.approx(refused)  # at most 2,000 connections/s at node 0 (or 1 s)
    assert ep.lookup_poll(nnodes) == pytest.approx(lookup)  # at most 200 lookups/s, never slower than 1 s


def test_master_wait_prints_progress_about_every_10s():
    res = run_ep(
        {
            **BASE,
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": "1",
            "KGEN_LIVENESS_PORT": str(_free_port()),
            "NODE_RANK": "1",
            "KGEN_MASTER_WAIT_TIMEOUT": "12",
        },
        "--",
        "/bin/true",
        timeout=40,
    )
    assert res.returncode == 3
    progress = [line for line in res.stderr.splitlines() if "still waiting for node 0" in line]
    assert len(progress) == 1, res.stderr


def test_sigterm_while_waiting_exits_promptly():
    proc = subprocess.Popen(
        [sys.executable, str(ENTRYPOINT), "--", "/bin/true"],
        env={
            "PATH": "/usr/bin:/bin",
            **BASE,
            "MASTER_ADDR": "127.0.0.1",
            "NODE_RANK": "1",
            "MASTER_PORT": "1",
            "KGEN_LIVENESS_PORT": str(_free_port()),
        },
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # its signal handlers are in place once it says it waits (not after a fixed sleep: a busy machine
        # can take longer to start it, and SIGTERM before the handlers would kill it with -15)
        for line in iter(proc.stderr.readline, ""):
            if "waiting for node 0" in line:
                break
        proc.terminate()
        rc = proc.wait(BUSY_BOUND)  # promptly: the master wait it was in is 600 s (the default)
    finally:
        proc.kill()
    assert rc == 128 + 15


def test_diagnose_bad_environment_lists_failures():
    res = run_ep(
        {
            "NNODES": "2",
            "NPROC_PER_NODE": "1",
            "MASTER_ADDR": "nobody.invalid",
            "MASTER_PORT": "29500",
            "GLOO_SOCKET_IFNAME": "nosuchif0",
        },
        "--diagnose",
        timeout=60,
    )
    assert res.returncode == 1
    out = res.stdout
    assert "FAIL node rank: cannot derive the node rank" in out
    assert "FAIL master DNS: nobody.invalid does not resolve" in out
    assert "FAIL interface: GLOO_SOCKET_IFNAME=nosuchif0: no interface matches nosuchif0" in out
    assert "PASS interface: NCCL_SOCKET_IFNAME not set" in out
    assert "PASS environment:" in out
    for line in out.strip().splitlines():
        assert line.startswith(("PASS ", "FAIL ")), line


# -- refusals, --diagnose in a running job, no torch, the last line, /proc -------


class Hub:
    """A real node 0 entrypoint that waits for its peers (torchrun is never reached)."""

    def __init__(self, tmp_path, nnodes: int = 3, extra: dict | None = None) -> None:
        self.live = free_port_pair() + 1  # MASTER_PORT (torch's store) is live - 1: both free
        self.env = {
            **BASE,
            "NNODES": str(nnodes),
            "NPROC_PER_NODE": "1",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(self.live - 1),
            "KGEN_LIVENESS_PORT": str(self.live),
            "KGEN_JOB_NAME": "t",
            "KGEN_RUN_ID": "r1",
            "PATH": "/usr/bin:/bin",
            **(extra or {}),
        }
        self.log_path = tmp_path / "hub.log"
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, str(ENTRYPOINT), "--", "/bin/true"],
                env={**self.env, "NODE_RANK": "0"},
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + BUSY_BOUND
        while "liveness channel listening" not in self.log() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "liveness channel listening" in self.log(), self.log()

    def log(self) -> str:
        return self.log_path.read_text()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            return self.proc.wait(30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()


def test_node0_logs_why_it_refused_a_peer(tmp_path):
    hub = Hub(tmp_path, nnodes=3)
    try:
        res = run_ep({**hub.env, "NNODES": "2", "NODE_RANK": "1"}, "--", "/bin/true")
        assert res.returncode == 2, res.stderr
        assert "node 0 refused this node: NNODES 2 vs 3" in res.stderr
        assert res.stderr.rstrip().splitlines()[-1] == "kgen-entrypoint: stopped: configuration error"
        assert wait_until(lambda: "refused node 1 (host somehost): NNODES 2 vs 3" in hub.log()), hub.log()
    finally:
        assert hub.stop() == 128 + 15
    assert hub.log().rstrip().endswith("kgen-entrypoint: stopped: signal SIGTERM")


def test_diagnose_inside_a_running_job_does_not_fail_on_the_jobs_own_ports(tmp_path):
    hub = Hub(tmp_path)
    store = socket.socket()  # what torchrun's TCPStore holds on node 0
    try:
        store.bind(("0.0.0.0", hub.live - 1))
        store.listen(1)
        res = run_ep({**hub.env, "NODE_RANK": "0"}, "--diagnose")
        for label, port in (("rendezvous", hub.live - 1), ("liveness", hub.live)):
            assert f"PASS master {label} port: {port} is in use by this job: node 0's entrypoint (run t-r1)" in (
                res.stdout
            ), res.stdout
        assert "FAIL master" not in res.stdout
    finally:
        store.close()
        hub.stop()


def test_diagnose_port_held_by_something_else_fails(tmp_path):
    live = _free_port()
    other = socket.socket()
    try:
        other.bind(("0.0.0.0", live))
        other.listen(1)
        env = {**BASE, "NODE_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(live - 1)}
        res = run_ep({**env, "KGEN_LIVENESS_PORT": str(live)}, "--diagnose")
        assert f"FAIL master liveness port: {live} cannot be bound on node 0" in res.stdout
        assert "another process holds it" in res.stdout
    finally:
        other.close()


def test_image_without_torch_gets_one_clear_line(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    env = {"PATH": "/usr/bin:/bin", "NNODES": "1", "NPROC_PER_NODE": "1", "MASTER_ADDR": "127.0.0.1"}
    env.update({"MASTER_PORT": str(_free_port()), "NODE_RANK": "0"})
    # -S: no site-packages, so this interpreter has no torch (the entrypoint itself needs none)
    res = subprocess.run(
        [sys.executable, "-S", str(ENTRYPOINT), "--", str(script)], env=env, capture_output=True, text=True, timeout=30
    )
    assert res.returncode == 2
    errors = [line for line in res.stderr.splitlines() if line.startswith("kgen-entrypoint: error:")]
    assert len(errors) == 1 and "torch is not installed for" in errors[0], res.stderr
    assert "Traceback" not in res.stderr
    assert res.stderr.rstrip().splitlines()[-1] == "kgen-entrypoint: stopped: configuration error"


def test_every_exit_ends_with_a_stopped_line():
    res = run_ep({**BASE, "NNODES": "two"}, "--", "/bin/true")
    assert res.returncode == 2
    assert res.stderr.rstrip().splitlines()[-1] == "kgen-entrypoint: stopped: configuration error"


@pytest.mark.skipif(not hasattr(__import__("os"), "geteuid") or __import__("os").geteuid() != 0, reason="needs root")
def test_proc_of_another_pid_namespace_is_never_used():
    """In a new PID namespace without its own /proc mount, /proc shows the outer processes: the
    process-tree walk must find nothing there (and stop torch by process group instead)."""
    import shutil

    if shutil.which("unshare") is None:
        pytest.skip("needs util-linux unshare")
    code = (
        "import importlib.util, os, sys;"
        f"s = importlib.util.spec_from_file_location('e', {str(ENTRYPOINT)!r});"
        "e = importlib.util.module_from_spec(s); s.loader.exec_module(e);"
        "print(os.getpid(), e.proc_is_ours(), len(e.descendants(1)))"
    )
    res = subprocess.run(
        ["unshare", "--pid", "--fork", sys.executable, "-c", code], capture_output=True, text=True, timeout=30
    )
    assert res.returncode == 0, res.stderr
    pid, ours, found = res.stdout.split()
    assert pid == "1" and ours == "False" and found == "0", res.stdout
    assert "/proc is not this PID namespace's" in res.stderr
    # and with its own /proc (as in a pod) the walk works
    res = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount", "--mount-proc", sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert res.stdout.split()[:2] == ["1", "True"], res.stdout + res.stderr
