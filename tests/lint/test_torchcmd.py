"""Finding torchrun launches in container commands, in every form the training rules accept."""

from __future__ import annotations

import pytest
from lint_helpers import BASES, lint_docs, rule_ids

from kgen.launch.argv import host_of, resolve
from kgen.launch.command import find_launches


@pytest.mark.parametrize(
    "container",
    [
        {"command": ["torchrun", "--nnodes=4", "--nproc-per-node", "8", "train.py"]},
        {
            "command": ["/usr/local/bin/torchrun"],
            "args": ["--nnodes", "4", "--nproc_per_node=8", "train.py", "--nnodes=9"],
        },
        {"command": ["python3", "-m", "torch.distributed.run", "--nnodes=4", "--nproc-per-node=8", "train.py"]},
        {
            "command": [
                "bash",
                "-c",
                "set -e\ncd /app && exec torchrun \\\n  --nnodes=4 \\\n  --nproc_per_node=8 train.py",
            ]
        },
        {
            "command": ["/bin/sh", "-c"],
            "args": ["echo hi; OMP_NUM_THREADS=1 torchrun --nnodes=4 --nproc-per-node=8 t.py"],
        },
    ],
)
def test_launch_forms_and_flag_spellings(container):
    [launch] = find_launches(container)
    assert launch.form == "torchrun"
    assert (launch.flag("nnodes"), launch.flag("nproc_per_node")) == ("4", "8")  # script args are not flags


def test_kgen_entrypoint_form():
    [launch] = find_launches({"command": ["python3", "/opt/kgen/kgen_entrypoint.py"], "args": ["--", "train.py"]})
    assert launch.form == "kgen" and launch.flags == {}


def test_non_training_commands_are_ignored():
    assert find_launches({"command": ["python", "serve.py", "--port", "80"]}) == []
    assert find_launches({"command": ["bash", "-c", "echo torchrun is great"]}) == []


def test_script_exports_and_sleeps_are_recorded():
    [launch] = find_launches(
        {
            "command": [
                "bash",
                "-c",
                "export RANK=$((I*8)) LOCAL_RANK=0\n  sleep $((RANDOM % 30))\ntorchrun --nnodes=2 t.py",
            ]
        }
    )
    assert launch.exports == ["RANK", "LOCAL_RANK"] and launch.sleeps == ["sleep $((RANDOM % 30))"]


def test_resolve_and_host():
    env = {"NNODES": "4", "FROM": None}
    assert resolve("$NNODES", env) == "4" and resolve("${NNODES}", env) == "4" and resolve("$(NNODES)", env) == "4"
    assert resolve("$FROM", env) is None and resolve("x$NNODES", env) is None and resolve("8", env) == "8"
    assert host_of("llama-0.llama:29500") == "llama-0.llama" and host_of("[::1]:29500") == "::1"


def _entrypoint_job(nodes_env, nproc_env, completions=4, gpus=8):
    docs = BASES["job"]()
    c = docs[1]["spec"]["template"]["spec"]["containers"][0]
    c["command"], c["args"] = ["python3", "/opt/kgen/kgen_entrypoint.py"], ["--", "train.py"]
    c["env"] = [
        {"name": "NNODES", "value": nodes_env},
        {"name": "NPROC_PER_NODE", "value": nproc_env},
        {"name": "MASTER_ADDR", "value": "llama-0.llama"},
    ]
    docs[1]["spec"]["completions"] = docs[1]["spec"]["parallelism"] = completions
    return docs


def test_kgen_entrypoint_env_is_checked_against_completions_and_gpus():
    assert lint_docs(_entrypoint_job("4", "8")).findings == []
    assert rule_ids(lint_docs(_entrypoint_job("2", "8"))) == {"KG106"}
    assert rule_ids(lint_docs(_entrypoint_job("4", "4"))) == {"KG194"}  # 2 GPUs per process: info
    assert rule_ids(lint_docs(_entrypoint_job("4", "3"))) == {"KG139"}  # no even share: 2 of 8 GPUs idle
    assert rule_ids(lint_docs(_entrypoint_job("4", "16"))) == {"KG107"}  # 8 ranks without a GPU


def test_python_module_form_in_a_statefulset_is_checked():
    docs = BASES["sts"]()
    c = docs[1]["spec"]["template"]["spec"]["containers"][0]
    c["command"] = ["python", "-m", "torch.distributed.run"]
    docs[1]["spec"]["replicas"] = 2
    assert "KG106" in rule_ids(lint_docs(docs))


@pytest.mark.parametrize("nnodes,flagged", [("2:8", False), ("4:4", False), ("1:3", True), ("5:8", True)])
def test_elastic_nnodes_range_must_contain_the_pod_count(nnodes, flagged):
    docs = BASES["job"]()
    docs[1]["spec"]["template"]["spec"]["containers"][0]["args"][0] = f"--nnodes={nnodes}"
    assert ("KG106" in rule_ids(lint_docs(docs))) is flagged


def test_flags_know_the_command_or_args_item_that_holds_them():
    c = {"command": ["torchrun", "--standalone"], "args": ["--nnodes", "4", "--nproc-per-node=8", "train.py", "--x=1"]}
    [launch] = find_launches(c)
    assert launch.where == ("command", 0)
    assert launch.at("standalone") == ("command", 1)
    assert launch.at("nnodes") == ("args", 0) and launch.at("nproc_per_node") == ("args", 2)
    assert launch.at("x") == ("command", 0)  # the script's own flags are not torchrun's
    script = {"command": ["bash", "-c"], "args": ["exec torchrun --nnodes=4 train.py"]}
    [launch] = find_launches(script)
    assert launch.script and launch.at("nnodes") == ("args", 0)


def test_flags_in_an_expansion_are_unknown():
    [launch] = find_launches({"command": ["bash", "-c", "torchrun $DISTRIBUTED_ARGS train.py"]})
    assert launch.opaque and not launch.has("nnodes")
    [launch] = find_launches({"command": ["torchrun", "--nnodes=2", "train.py"]})
    assert not launch.opaque


def test_launch_path_accepts_the_container_as_older_callers_pass_it():
    from kgen.lint.rules_training import _launch_path

    c = {"command": ["torchrun"], "args": ["--nnodes=4", "train.py"]}
    assert _launch_path(("c",), c) == ("c", "args", 0)
    assert _launch_path(("c",), {"command": ["python", "train.py"]}) == ("c",)


@pytest.mark.parametrize("ref", ["$(JOB_COMPLETION_INDEX)", "$JOB_COMPLETION_INDEX", "${JOB_COMPLETION_INDEX}"])
def test_variable_references_in_a_script_are_ordinary_words(ref):
    # Kubernetes expands $(VAR) before bash runs; its parentheses are not shell operators (QA #1)
    script = f"torchrun --nnodes=2 --node-rank={ref} --master-addr=$(MASTER_ADDR) --nproc-per-node=1 train.py"
    [launch] = find_launches({"command": ["bash", "-c", script]})
    assert launch.flags == {
        "nnodes": "2",
        "node_rank": ref,
        "master_addr": "$(MASTER_ADDR)",
        "nproc_per_node": "1",
    }
    assert launch.opaque is False


def test_shell_substitutions_stay_one_word_and_operators_still_split():
    script = "cd /app && torchrun --nnodes=$((N)) --master-addr=$(hostname -i) --node-rank=${R:-0} t.py; echo done"
    [launch] = find_launches({"command": ["sh", "-c", script]})
    assert launch.flags == {"nnodes": "$((N))", "master_addr": "$(hostname -i)", "node_rank": "${R:-0}"}


def _script_job(script: str) -> list:
    docs = BASES["job"]()
    c = docs[1]["spec"]["template"]["spec"]["containers"][0]
    c["command"] = ["bash", "-c", script]
    del c["args"]
    return docs


def test_flags_after_a_k8s_reference_in_bash_c_are_seen_by_the_launch_rules():
    ok = "torchrun --nnodes=4 --nproc-per-node=8 --node-rank=$(NODE_RANK) --master-addr=llama-0.llama train.py"
    assert rule_ids(lint_docs(_script_job(ok), strict=True)) == set()
    # KG119's own suggested fix lints clean
    fix = "torchrun --nnodes=4 --nproc-per-node=8 --master-addr=$(MASTER_ADDR) --node-rank=$(NODE_RANK) train.py"
    docs = _script_job(fix)
    docs[1]["spec"]["template"]["spec"]["containers"][0]["env"].append(
        {"name": "MASTER_ADDR", "value": "llama-0.llama"}
    )
    assert rule_ids(lint_docs(docs, strict=True)) == set()
    # a wrong --master-addr / --nnodes after the reference is still caught
    bad = "torchrun --node-rank=$(NODE_RANK) --nnodes=3 --nproc-per-node=8 --master-addr=llama train.py"
    assert {"KG105", "KG106"} <= rule_ids(lint_docs(_script_job(bad)))


def test_lint_reads_launchers_by_the_one_launch_table():
    """Lint's reading of a launcher's argv (kgen.launch.argv) and render's refusal of a nested launcher
    (kgen.launch.launchers) share one table: which options take a value, which modules are launchers."""
    from kgen.launch import argv as launch_argv
    from kgen.launch import launchers

    assert launch_argv.TORCHRUN_FLAGS is launchers.TORCHRUN_FLAGS
    assert launch_argv.PYTHON_VALUE_OPTIONS is launchers.PYTHON_VALUE_OPTIONS
    assert launch_argv.LAUNCHER_MODULES is launchers.LAUNCHER_MODULES
    # Python's --check-hash-based-pycs takes a value: the module after it is still the launcher
    argv = ["python3", "--check-hash-based-pycs", "always", "-m", "torch.distributed.run", "--nnodes=4", "t.py"]
    [launch] = find_launches({"command": argv})
    assert launch.form == "torchrun" and launch.flag("nnodes") == "4"
    # DeepSpeed's --enable_each_rank_log takes a folder: the script after it is the child, not the folder
    [launch] = find_launches({"command": ["deepspeed", "--enable_each_rank_log", "/logs", "--num_nodes=2", "t.py"]})
    assert launch.flag("nnodes") == "2" and launch.child[-1] == "t.py"


def test_an_expansion_after_torchruns_module_flag_is_the_module_not_more_flags():
    """`torchrun ... -m ${training_commands}` (OpenRLHF's Slurm launcher): the flags before -m are all there is."""
    [launch] = find_launches({"command": ["torchrun", "--nnodes", "2", "--node_rank", "0", "-m", "${cmds}"]})
    assert not launch.opaque and launch.flag("node_rank") == "0" and launch.child[-1] == "${cmds}"
    [launch] = find_launches({"command": ["torchrun", "$DISTRIBUTED_ARGS", "-m", "mod"]})
    assert launch.opaque  # flags from an expansion before the module
