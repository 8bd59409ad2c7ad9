"""The entrypoint's Slurm section, without daemons: the host list parser against the real `scontrol show
hostnames`, what a job step's environment gives (rank, world, node 0, ports, restarts) and what it refuses, and
the decision after a step (succeeded, failed, stopped, requeue)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("kgen_entrypoint_slurm", ROOT / "entrypoint" / "kgen_entrypoint.py")
ep = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ep)

HOSTLISTS = [
    "n0",
    "n[0-2]",
    "n[0-2],login1",
    "gpu-[01-03,7],n[0-2],login1",
    "node[008-011]",
    "r[1-2]-n[0-1]",
    "a[1,3-4],c[9-10]",
    "host-1,host-2",
    "x[0-0]",
    "n[98-101]",
]


@pytest.mark.skipif(shutil.which("scontrol") is None, reason="needs scontrol (slurm-client)")
@pytest.mark.parametrize("text", HOSTLISTS)
def test_hostlist_as_scontrol_show_hostnames(text, tmp_path):
    # scontrol expands host lists without a controller; an empty config keeps it off the system's
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=x\nSlurmctldHost=localhost\n")
    res = subprocess.run(["scontrol", "show", "hostnames", text], capture_output=True, text=True, timeout=30,
                         env={"SLURM_CONF": str(conf), "PATH": "/usr/bin:/bin"})  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert ep.hostlist(text) == res.stdout.split()


@pytest.mark.parametrize("bad", ["n[0-2", "n0-2]", "n[2-1]", "n[a-b]", "n[[0-1]]", "n[0-99999999]", "a b"])
def test_hostlist_refuses_what_slurm_would_not_write(bad):
    with pytest.raises(ValueError):
        ep.hostlist(bad)


def step_env(**over: str) -> dict:
    env = {
        "SLURM_JOB_ID": "4711",
        "SLURM_STEP_ID": "0",
        "SLURM_NNODES": "3",
        "SLURM_STEP_NUM_NODES": "3",
        "SLURM_STEP_NUM_TASKS": "3",
        "SLURM_NODEID": "2",
        "SLURM_JOB_NODELIST": "gpu-[07-09]",
        "SLURM_STEP_NODELIST": "gpu-[07-09]",
        "SLURM_JOB_NAME": "llama 8n",
        "NPROC_PER_NODE": "8",
        "KGEN_SECRET_FILE": "/nonexistent",
    }
    env.update(over)
    return {k: v for k, v in env.items() if v is not None}


def config(env: dict):
    cfg = ep.load_config(env)
    return cfg, [p for p in cfg.problems if "KGEN_SECRET_FILE" not in p]


def test_a_job_step_gives_rank_world_node0_and_ports():
    cfg, problems = config(step_env())
    assert problems == []
    assert (cfg.nnodes, cfg.node_rank, cfg.rank_source) == (3, 2, "SLURM_NODEID=2")
    assert cfg.master_addr == "gpu-07"
    assert (cfg.master_port, cfg.liveness_port) == (20000 + 2 * 4711, 20000 + 2 * 4711 + 1)
    assert cfg.run_id == "4711" and cfg.job_name == "llama-8n"
    assert cfg.restart_base == 0 and cfg.rdzv_id == "llama-8n-4711-attempt0"
    assert any("Slurm job 4711 step 0" in n for n in cfg.notes)


def test_restart_count_follows_slurm_and_names_the_rendezvous():
    cfg, problems = config(step_env(SLURM_RESTART_COUNT="2"))
    assert problems == []
    assert cfg.restart_base == 2 and cfg.rdzv_id.endswith("-attempt2")


def test_two_jobs_never_share_a_port():
    ports = {ep.slurm_port(str(j)) for j in range(1, 5001)}
    pairs = ports | {p + 1 for p in ports}
    assert len(pairs) == 2 * 5000
    assert min(pairs) >= 20000 and max(pairs) < 32768  # below Linux's ephemeral range


def test_explicit_values_win_when_they_agree_and_are_refused_when_not():
    cfg, problems = config(step_env(MASTER_ADDR="10.0.0.7", MASTER_PORT="29500", NNODES="3"))
    assert problems == [] and (cfg.master_addr, cfg.master_port, cfg.node_rank) == ("10.0.0.7", 29500, 2)
    _, problems = config(step_env(NNODES="4"))
    assert problems == [
        "NNODES=4 but the Slurm step says 3 (SLURM_STEP_NUM_NODES): unset NNODES, kgen takes it from Slurm"
    ]
    _, problems = config(step_env(NODE_RANK="0"))
    assert problems == [
        "NODE_RANK=0 but the Slurm step says 2 (SLURM_NODEID): unset NODE_RANK, kgen takes it from Slurm"
    ]


def test_ranks_given_by_hand_are_taken_as_given():
    """kgen launch --local 2 in an `srun --pty bash` shell: NNODES and NODE_RANK are the launcher's, not Slurm's."""
    env = step_env(NNODES="2", NODE_RANK="1", MASTER_ADDR="127.0.0.1", MASTER_PORT="29500")
    cfg, problems = config(env)
    assert problems == [] and cfg.slurm is None
    assert (cfg.nnodes, cfg.node_rank, cfg.rank_source) == (2, 1, "NODE_RANK=1")


def test_one_task_per_node_is_required():
    _, problems = config(step_env(SLURM_STEP_NUM_TASKS="24"))
    assert len(problems) == 1 and problems[0].startswith("Slurm job step with 24 tasks on 3 node(s)")
    assert "srun --ntasks-per-node=1" in problems[0]


def test_the_batch_script_itself_is_not_a_node():
    """The classic mistake: torchrun (here the entrypoint) run in the batch script without srun."""
    env = step_env(SLURM_STEP_ID=None, SLURM_STEP_NUM_NODES=None, SLURM_STEP_NUM_TASKS=None, SLURM_NODEID="0")
    _, problems = config(env)
    assert any(p.startswith("this is the batch script (or allocation) of Slurm job 4711") for p in problems)
    assert any("start the entrypoint with srun" in p for p in problems)


def test_outside_slurm_or_switched_off_nothing_changes():
    plain = {"NNODES": "1", "NPROC_PER_NODE": "1", "MASTER_ADDR": "h0", "MASTER_PORT": "29500", "NODE_RANK": "0"}
    for env in (plain, {**step_env(), **plain, "KGEN_SLURM": "0"}):
        cfg = ep.load_config(env)
        assert cfg.slurm is None and cfg.problems == [] and cfg.master_addr == "h0"


def test_a_bad_node_list_says_why_node_0_is_unknown():
    _, problems = config(step_env(SLURM_STEP_NODELIST="gpu-[07-", SLURM_JOB_NODELIST="gpu-[07-"))
    assert problems[0] == (
        "SLURM_STEP_NODELIST='gpu-[07-': unbalanced brackets in host list 'gpu-[07-': set MASTER_ADDR to node 0's host"
    )


def test_inside_a_step_nothing_re_forms_in_place():
    cfg, _ = config(step_env())
    assert ep.decide(cfg, "lost", 0)[:2] == (ep.FAIL, ep.EXIT_PEER_LOST)
    assert ep.decide(cfg, "script", 0)[:2] == (ep.FAIL, ep.EXIT_RUN_FAILED)
    cfg.on_script_error = "reform"
    assert ep.decide(cfg, "script", 0)[:2] == (ep.FAIL, ep.EXIT_PEER_LOST)


def rec(code, attempt=0, job="7", reason=""):
    return {"code": code, "attempt": attempt, "job": job, "reason": reason}


@pytest.mark.parametrize(
    ("exits", "attempt", "stopping", "want"),
    [
        ({0: rec(0), 1: rec(0), 2: rec(0)}, 0, False, ("succeeded", 0)),
        ({0: rec(75), 1: None, 2: rec(75)}, 0, False, ("requeue", 75)),  # a node died
        ({0: rec(75, 1), 1: rec(0, 0), 2: rec(75, 1)}, 1, False, ("requeue", 75)),  # a stale record: lost
        ({0: rec(75), 1: rec(137), 2: rec(75)}, 0, False, ("requeue", 75)),  # its entrypoint was killed
        ({0: rec(75), 1: rec(76), 2: rec(75)}, 0, False, ("requeue", 75)),  # it froze and was dropped
        ({0: rec(75, 2), 1: None, 2: rec(75, 2)}, 2, False, ("failed", 5)),  # the requeue limit (2)
        ({0: rec(5), 1: rec(5), 2: rec(1)}, 0, False, ("failed", 1)),  # a script error: its own code
        ({0: rec(2), 1: rec(2), 2: rec(2)}, 0, False, ("failed", 2)),  # a configuration error
        ({0: rec(6), 1: rec(6), 2: rec(6)}, 0, False, ("stopped", 6)),
        ({0: rec(75), 1: None, 2: rec(75)}, 0, True, ("stopped", 6)),  # kgen stop: never requeued
        ({}, 0, False, ("failed", 1)),  # no node started: srun's code
    ],
)
def test_what_an_attempt_comes_to(exits, attempt, stopping, want):
    decision, code, why = ep.slurm_outcome(exits, 3, attempt, "7", 1, 2, stopping)
    assert (decision, code) == want, why


def test_a_lost_node_is_named_in_the_decision():
    _, _, why = ep.slurm_outcome({0: rec(75), 1: None, 2: rec(75)}, 3, 0, "7", 75, 2, False)
    assert why == "node 1: no exit record (its node was lost)"


def node_task(run: Path, **env: str) -> subprocess.CompletedProcess:
    """The entrypoint as srun starts it on a node (the step's variables as Slurm sets them), without torch running."""
    base = {"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "9", "SLURM_STEP_ID": "0", "SLURM_NODEID": "0",
            "SLURM_NNODES": "1", "SLURM_STEP_NUM_NODES": "1", "SLURM_STEP_NUM_TASKS": "1",
            "SLURM_STEP_NODELIST": "n0", "NPROC_PER_NODE": "1"}  # fmt: skip
    (run / "t.py").write_text("raise SystemExit('must not run')\n")
    argv = [sys.executable, str(ROOT / "entrypoint" / "kgen_entrypoint.py"), "--slurm-node", str(run), "--", "t.py"]
    return subprocess.run(argv, env={**base, **env}, capture_output=True, text=True, timeout=60, cwd=run)


def test_an_attempt_past_the_requeue_limit_ends_at_once(tmp_path):
    """Slurm requeued the job itself (a node failure) more often than KGEN_MAX_REFORMATIONS allows."""
    res = node_task(tmp_path, SLURM_RESTART_COUNT="3", KGEN_MAX_REFORMATIONS="2")
    assert res.returncode == 5, res.stderr
    reason = "requeue limit reached: attempt 3 (SLURM_RESTART_COUNT) is more than KGEN_MAX_REFORMATIONS=2"
    assert f"kgen-entrypoint: stopped: {reason}" in res.stdout
    ex = json.loads((tmp_path / "node0" / "exit").read_text())
    assert (ex["code"], ex["attempt"], ex["job"], ex["reason"]) == (5, 3, "9", reason)
    lines = [json.loads(x) for x in (tmp_path / "node0" / "attempts").read_text().splitlines()]
    assert [x["event"] for x in lines] == ["start", "exit"]
    assert stat.S_IMODE((tmp_path / "node0").stat().st_mode) == 0o700


def test_an_attempt_after_kgen_stop_does_not_train(tmp_path):
    (tmp_path / "stopping").write_text("")
    res = node_task(tmp_path, SLURM_RESTART_COUNT="1")
    assert res.returncode == 6
    assert json.loads((tmp_path / "node0" / "exit").read_text())["reason"].startswith("stopped by user (kgen stop")


def test_the_node_task_outside_a_step_is_a_configuration_error(tmp_path):
    res = node_task(tmp_path, SLURM_STEP_ID="")
    assert res.returncode == 2
    assert "--slurm-node runs inside a Slurm job step" in res.stderr
    assert not (tmp_path / "node0").exists()
    assert res.stdout == ""
