"""A launcher after `--`: kgen.launch.launchers and the entrypoint's own copy read it
alike (one table), and render, submit, values `command:` and the entrypoint refuse it with the command
to use instead."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kgen.cli import cli
from kgen.launch.launchers import LOCAL_RANK_NOTE, PROBLEM, nested_launcher

ROOT = Path(__file__).resolve().parent.parent
ENTRYPOINT = ROOT / "entrypoint" / "kgen_entrypoint.py"


def _entrypoint():
    spec = importlib.util.spec_from_file_location("kgen_entrypoint_launchers", ENTRYPOINT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


EP = _entrypoint()

# command | launcher as written | training command inside it | processes per node | nodes ("-": none);
# a row without "|" is a command that is no launcher; a line starting with "  |" continues the one above.
TABLE_TEXT = """
torchrun --standalone --nproc-per-node 8 train.py | torchrun | train.py | 8 | 1
torchrun --nproc_per_node=4 --nnodes=2 train.py --lr 3e-4 | torchrun | train.py --lr 3e-4 | 4 | 2
/usr/local/bin/torchrun --nnodes 1:4 -m pkg.train --x | /usr/local/bin/torchrun | -m pkg.train --x | - | -
torchrun --no-python ./run.sh a | torchrun | ./run.sh a | - | -
torchrun --nproc-per-node gpu -r 3 --tee=3 train.py | torchrun | train.py | - | -
torchrun -r3 --max-restarts 0 -- train.py -v | torchrun | train.py -v | - | -
torchrun --nproc-per-node 2 train | torchrun | python3 train | 2 | -
torchrun --standalone | torchrun | SCRIPT | - | 1
python -m torch.distributed.run --nproc_per_node 8 train.py | python -m torch.distributed.run | train.py | 8 | -
python3 -u -m torch.distributed.launch --use_env --nproc_per_node=2 x
  | python3 -u -m torch.distributed.launch | python3 x | 2 | -
python3.11 -X dev -mtorch.distributed.run train.py | python3.11 -X dev -m torch.distributed.run | train.py | - | -
/usr/bin/python3 -m torch.distributed.run --nnodes 4 t.py | /usr/bin/python3 -m torch.distributed.run | t.py | - | 4
-m torch.distributed.run --nproc-per-node 4 train.py | -m torch.distributed.run | train.py | 4 | -
accelerate launch --multi_gpu --num_processes 16 --num_machines 2 t.py | accelerate launch | t.py | 8 | 2
accelerate launch --num-processes=4 --mixed_precision bf16 -m pkg.train | accelerate launch | -m pkg.train | 4 | -
accelerate-launch --num_processes 3 --num_machines 2 train.py | accelerate-launch | train.py | - | 2
python -m accelerate.commands.launch --cpu t.py | python -m accelerate.commands.launch | t.py | - | -
deepspeed --num_gpus 8 --num_nodes 2 t.py --deepspeed --config c | deepspeed | t.py --deepspeed --config c | 8 | 2
deepspeed -H hostfile --no_local_rank --num_accelerators=2 train.py | deepspeed | train.py | 2 | -
train.py --launcher torchrun
-m pkg.train --nproc-per-node 8
python3 train.py
python3 -c 'import torch.distributed.run'
python3 -m pkg.torchrun
./torchrun.sh
torchrunner train.py
accelerate config
accelerate env
bash -c 'echo torchrun'
"""


def _row(line: str):
    if "|" not in line:
        return line, None
    command, launcher, inner, nproc, nnodes = (part.strip() for part in line.split("|"))
    number = lambda x: None if x == "-" else int(x)  # noqa: E731
    return command, (launcher, _split(inner), number(nproc), number(nnodes))


def _split(text):
    import shlex

    return shlex.split(text)


TABLE = [_row(line) for line in TABLE_TEXT.replace("\n  |", " |").strip().splitlines()]
IDS = [c for c, _ in TABLE]


@pytest.mark.parametrize("text,expected", TABLE, ids=IDS)
def test_kgen_and_the_entrypoint_read_launchers_alike(text, expected):
    command = _split(text)
    ours, theirs = nested_launcher(command), EP.nested_launcher(command)
    if expected is None:
        assert ours is None and theirs is None
        return
    launcher, inner, nproc, nnodes = expected
    assert (ours.launcher, ours.command, ours.nproc, ours.nnodes) == (launcher, inner, nproc, nnodes)
    assert (theirs[0], theirs[1], theirs[2], theirs[4]) == (launcher, inner, nproc, nnodes)
    assert theirs[3] == ours.option
    assert theirs[5] == ours.local_rank_arg


@pytest.mark.parametrize(
    "text,passes",
    [
        ("python -m torch.distributed.launch --nproc_per_node 8 train.py", True),
        ("python -m torch.distributed.launch --use-env train.py", False),
        ("python3 -m torch.distributed.launch --use_env train.py", False),
        ("python -m torch.distributed.run train.py", False),
        ("torchrun train.py", False),
        ("deepspeed train.py", True),
        ("deepspeed --no_local_rank train.py", False),
    ],
)
def test_both_know_which_launchers_passed_local_rank_as_an_argument(text, passes):
    """torch.distributed.launch without --use-env passes --local-rank=N to the script (torch 2.13
    run.py: `if not use_env: cmd_args.append("--local-rank=...")`); under kgen's torchrun it would not come."""
    command = _split(text)
    assert nested_launcher(command).local_rank_arg is passes
    assert EP.nested_launcher(command)[5] is passes
    said = EP.launcher_problem(command, {"NPROC_PER_NODE": "8"})
    assert (LOCAL_RANK_NOTE in said) is passes


def test_both_say_it_in_the_same_words():
    assert EP.NESTED_PROBLEM == PROBLEM
    assert EP.LOCAL_RANK_NOTE == LOCAL_RANK_NOTE


def run(*args, input=None):
    return CliRunner().invoke(cli, list(args), input=input)


def one_line(res) -> str:
    assert res.exit_code == 2, (res.exit_code, res.output)
    assert res.stdout == ""
    lines = res.stderr.splitlines()
    assert len(lines) == 1, lines
    return lines[0]


NESTED = PROBLEM.format(launcher="torchrun")


def test_render_refuses_torchrun_with_the_corrected_command():
    line = one_line(
        run(
            "render",
            "--nodes",
            "4",
            "--gpus",
            "8",
            "--",
            "torchrun",
            "--standalone",
            "--nproc-per-node",
            "8",
            "train.py",
        )
    )
    assert line == f"kgen: error: -- COMMAND: {NESTED}; use: kgen render --nodes 4 --gpus 8 -- train.py"


def test_the_script_arguments_and_the_other_options_are_kept():
    line = one_line(
        run(
            "render",
            "--preset",
            "4x8",
            "--name",
            "llama",
            "--",
            "torchrun",
            "--nproc_per_node=8",
            "train.py",
            "--lr",
            "3e-4",
            "--msg",
            "a b",
        )
    )
    assert line.endswith("; use: kgen render --preset 4x8 --name llama -- train.py --lr 3e-4 --msg 'a b'")


def test_a_cpu_job_carries_the_process_count_into_nproc_per_node():
    line = one_line(
        run(
            "render", "--gpus", "0", "--", "python3", "-m", "torch.distributed.run", "--nproc-per-node", "4", "train.py"
        )
    )
    assert line == (
        "kgen: error: -- COMMAND: "
        + PROBLEM.format(launcher="python3 -m torch.distributed.run")
        + "; use: kgen render --gpus 0 --set nprocPerNode=4 -- train.py"
    )


def test_a_process_count_that_divides_the_gpus_is_carried_as_model_parallel():
    line = one_line(run("render", "--nodes", "4", "--gpus", "8", "--", "torchrun", "--nproc-per-node=4", "train.py"))
    assert line == (
        f"kgen: error: -- COMMAND: {NESTED}; use: kgen render --nodes 4 --gpus 8 --set nprocPerNode=4 -- train.py"
    )
    # and what it suggests renders: 4 processes per node, each driving 2 of the 8 GPUs
    suggested = run("render", "--nodes", "4", "--gpus", "8", "--set", "nprocPerNode=4", "--", "train.py")
    assert suggested.exit_code == 0, suggested.stderr


def test_a_process_count_that_does_not_divide_the_gpus_is_said_not_carried():
    line = one_line(run("render", "--nodes", "4", "--gpus", "8", "--", "torchrun", "--nproc-per-node=3", "train.py"))
    assert line == (
        f"kgen: error: -- COMMAND: {NESTED}; its --nproc-per-node 3 disagrees with 8 GPUs per node "
        "(kgen starts one process per GPU, or nprocPerNode processes when it divides the GPU count); "
        "use: kgen render --nodes 4 --gpus 8 -- train.py"
    )
    chosen = one_line(
        run("render", "--gpus", "8", "--set", "nprocPerNode=2", "--", "torchrun", "--nproc-per-node=4", "train.py")
    )
    assert "its --nproc-per-node 4 disagrees with 8 GPUs per node" in chosen


def test_a_cpu_job_with_its_own_nproc_per_node_says_which_disagrees():
    line = one_line(
        run("render", "--gpus", "0", "--set", "nprocPerNode=2", "--", "torchrun", "--nproc-per-node", "4", "t.py")
    )
    assert "its --nproc-per-node 4 disagrees with nprocPerNode 2" in line
    assert line.endswith("; use: kgen render --gpus 0 --set nprocPerNode=2 -- t.py")


def test_the_node_count_is_carried_when_left_at_the_default_and_said_when_chosen():
    line = one_line(
        run("render", "--gpus", "8", "--", "torchrun", "--nnodes", "4", "--nproc-per-node", "8", "train.py")
    )
    assert line.endswith("; use: kgen render --gpus 8 --nodes 4 -- train.py")
    line = one_line(run("render", "--nodes", "2", "--", "torchrun", "--nnodes", "4", "train.py"))
    assert "its 4 nodes disagree with the 2 nodes kgen runs" in line
    assert line.endswith("; use: kgen render --nodes 2 -- train.py")


@pytest.mark.parametrize(
    "launcher,argv",
    [
        ("accelerate launch", ["accelerate", "launch", "--multi_gpu", "--num_processes", "16", "--num_machines", "2"]),
        ("deepspeed", ["deepspeed", "--num_gpus", "8", "--no_local_rank"]),
        ("python -m torch.distributed.launch", ["python", "-m", "torch.distributed.launch", "--use-env"]),
    ],
)
def test_every_launcher_is_refused(launcher, argv):
    line = one_line(run("render", "--nodes", "2", "--", *argv, "train.py", "--bs", "8"))
    expected = f"kgen: error: -- COMMAND: {PROBLEM.format(launcher=launcher)}"
    assert line == f"{expected}; use: kgen render --nodes 2 -- train.py --bs 8"


def test_options_without_a_kgen_equivalent_are_named():
    line = one_line(run("render", "--", "accelerate", "launch", "--mixed_precision", "bf16", "train.py"))
    assert "its options --mixed_precision bf16 have no kgen equivalent (configure them in the script)" in line
    line = one_line(run("render", "--", "deepspeed", "train.py"))
    assert "the script gets LOCAL_RANK in its environment, not a --local_rank argument" in line


def test_values_command_and_set_command_are_refused_in_their_own_words(tmp_path):
    values = tmp_path / "v.yaml"
    values.write_text("gpus: 0\ncommand: torchrun --nproc-per-node 4 train.py --lr 3e-4\n")
    line = one_line(run("render", "-f", str(values)))
    assert (
        line == f'kgen: error: {values}: command: {NESTED}; use: command: ["train.py", "--lr", "3e-4"], nprocPerNode: 4'
    )
    line = one_line(run("render", "--set", "command=torchrun -m pkg.train"))
    assert line == f"kgen: error: --set command: {NESTED}; use: --set 'command=-m pkg.train'"


def test_submit_refuses_before_touching_a_cluster():
    line = one_line(
        run(
            "submit",
            "--nodes",
            "4",
            "--kubeconfig",
            "/nonexistent",
            "--",
            "torchrun",
            "--nproc-per-node",
            "8",
            "train.py",
        )
    )
    assert (
        line == f"kgen: error: -- COMMAND: {NESTED}; use: kgen submit --nodes 4 --kubeconfig /nonexistent -- train.py"
    )


def test_a_script_named_like_a_launcher_option_is_not_refused():
    assert run("render", "--", "train.py", "--launcher", "torchrun").exit_code == 0


# ---- the entrypoint, on bare metal -----------------------------------------------------------------
def test_the_entrypoint_refuses_with_the_same_words(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("NPROC_PER_NODE", "NNODES")}
    proc = subprocess.run(
        [sys.executable, str(ENTRYPOINT), "--", "torchrun", "--standalone", "--nproc-per-node", "8", "train.py"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    first = proc.stderr.splitlines()[0]
    assert first == f"kgen-entrypoint: error: {NESTED}; use: NPROC_PER_NODE=8 python3 {ENTRYPOINT} -- train.py"


def test_the_entrypoint_names_a_disagreeing_nproc_per_node():
    problem = EP.launcher_problem(
        ["torchrun", "--nproc-per-node", "4", "train.py"], {"NPROC_PER_NODE": "8", "NNODES": "2"}
    )
    assert problem.startswith(NESTED + "; its --nproc-per-node 4 disagrees with NPROC_PER_NODE=8; use: ")
    assert problem.endswith(" -- train.py")
    assert EP.launcher_problem(["train.py"], {}) is None


def test_two_bare_metal_nodes_refuse_before_starting_torch(tmp_path):
    """Two real nodes (NNODES=2, NODE_RANK 0 and 1, loopback) told to run `torchrun ... train.py`: both exit 2
    at once with the refusal; neither imports torch, starts torchrun or opens the rendezvous port."""
    import socket

    (tmp_path / "train.py").write_text("open('ran', 'w').close()\n")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank in (0, 1):
        env = dict(os.environ, NNODES="2", NPROC_PER_NODE="2", NODE_RANK=str(rank), MASTER_ADDR="127.0.0.1")
        env["MASTER_PORT"] = str(port)
        argv = [
            sys.executable,
            "-X",
            "importtime",
            str(ENTRYPOINT),
            "--",
            "torchrun",
            "--nproc-per-node",
            "2",
            "train.py",
        ]
        procs.append(subprocess.Popen(argv, env=env, cwd=tmp_path, stderr=subprocess.PIPE, text=True))
    try:
        errs = [p.communicate(timeout=120)[1] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, err in zip(procs, errs, strict=True):
        assert p.returncode == 2, err
        imported = {line.rsplit("|", 1)[-1].strip() for line in err.splitlines() if line.startswith("import time:")}
        assert "json" in imported and not {m for m in imported if m.split(".")[0] == "torch"}
        said = [line for line in err.splitlines() if not line.startswith("import time:")]
        assert said == [
            f"kgen-entrypoint: error: {NESTED}; use: python3 {ENTRYPOINT} -- train.py",
            "kgen-entrypoint: stopped: configuration error",
        ]
    assert not (tmp_path / "ran").exists()
    with socket.socket() as s:  # node 0 never listened: the rendezvous and liveness ports are free
        s.bind(("127.0.0.1", port))


def test_a_launcher_without_the_separator_gets_both_fixes_at_once():
    line = one_line(run("render", "--nodes", "4", "torchrun", "--nproc-per-node", "8", "train.py", "--lr", "3"))
    assert line == (
        f"kgen: error: --nproc-per-node: not an option of kgen render; {NESTED} (its --nproc-per-node 8: "
        "kgen's --gpus, or --set nprocPerNode for a CPU job); use: kgen render --nodes 4 -- train.py --lr 3"
    )


@pytest.mark.parametrize(
    "argv", [["env", "NCCL_DEBUG=INFO", "torchrun", "train.py"], ["bash", "-c", "exec torchrun --nnodes 2 train.py"]]
)
def test_a_launcher_behind_a_wrapper_or_shell_is_said_in_the_same_words(argv):
    """kgen.launch.launchers reads only a launcher at the start; lint (KG131, through render's self-check) sees
    through wrappers and shells, and said it in other words ("kgen's entrypoint runs torchrun itself, so ...")."""
    line = one_line(run("render", "--nodes", "2", "--gpus", "0", "--", *argv))
    assert f"KG131: {NESTED} (`torchrun " in line and "; use `-- train.py`" in line
