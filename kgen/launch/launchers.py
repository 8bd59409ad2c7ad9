"""Launchers inside the training command: `torchrun`, `python -m torch.distributed.run|launch`,
`accelerate launch`, `deepspeed`: refused as the training command (nested launchers).

kgen's entrypoint starts torchrun on every node itself. A training command that is a launcher again
nests them: each node's inner launcher forms its own one-node world (4 nodes train as 4 separate
jobs, each "succeeding"). ``nested_launcher`` recognises such a command and reads it the way the
launcher's own argument parser would: its options (which take a value, which do not), the script or
module it runs and that script's arguments, and the processes per node it asked for. The entrypoint
(``entrypoint/kgen_entrypoint.py``, stdlib only, one file) carries its own copy of this reading;
tests/test_launchers.py holds one table both must agree on.

Pure functions, no I/O; the option tables come from the launchers' argparse definitions
(torch 2.13 ``torch.distributed.run.get_args_parser``, accelerate ``commands/launch.py``,
DeepSpeed ``launcher/runner.py``): an option not listed as a flag takes one value.
"""

from __future__ import annotations

import re
from typing import NamedTuple

# The words every refusal shares (kgen render/submit and the entrypoint; a test keeps them equal).
PROBLEM = (
    "{launcher} is a launcher, and kgen's entrypoint already starts torchrun on every node "
    "(nested, each node would train alone as its own one-node world)"
)

# What the corrected command changes for a script that read --local_rank (the entrypoint says the same).
LOCAL_RANK_NOTE = "the script gets LOCAL_RANK in its environment, not a --local_rank argument"

# Options that take no value, by launcher (names normalised: no leading dashes, "-" -> "_").
TORCHRUN_FLAGS = frozenset({"standalone", "m", "module", "no_python", "run_path", "virtual_local_rank", "use_env", "h"})
ACCELERATE_FLAGS = frozenset(
    {
        "h",
        "help",
        "q",
        "quiet",
        "cpu",
        "multi_gpu",
        "tpu",
        "ipex",
        "enable_cpu_affinity",
        "dynamo_use_fullgraph",
        "dynamo_use_dynamic",
        "use_deepspeed",
        "use_fsdp",
        "use_megatron_lm",
        "use_xpu",
        "same_network",
        "m",
        "module",
        "no_python",
        "tpu_cluster",
        "no_tpu_cluster",
        "tpu_use_sudo",
        "downcast_bf16",
        "fp8_use_autocast_during_eval",
        "debug",
    }
)
DEEPSPEED_FLAGS = frozenset(
    {
        "h",
        "help",
        "module",
        "no_python",
        "no_local_rank",
        "no_ssh",
        "no_ssh_check",
        "force_multi",
        "save_pid",
        "elastic_training",
        "bind_cores_to_rank",
    }
)
# Short options whose value may be attached (`-r3`, `-t3`, `-H file`): argparse reads them so.
SHORT_WITH_VALUE = frozenset({"r", "t", "H", "i", "e"})

# Options kgen's entrypoint takes over (shape, rendezvous, restarts, how the script is run) or that only
# concern the launcher's own logging; any other option is named in the refusal as one that does not carry.
TAKEN_OVER = {
    "torchrun": None,  # every torchrun option is the entrypoint's to set, or its log handling
    "accelerate": frozenset(
        {
            "num_processes",
            "num_machines",
            "machine_rank",
            "main_process_ip",
            "main_process_port",
            "multi_gpu",
            "same_network",
            "rdzv_backend",
            "rdzv_conf",
            "max_restarts",
            "monitor_interval",
            "m",
            "module",
            "no_python",
            "gpu_ids",
            "cpu",
            "q",
            "quiet",
            "debug",
            "tee",
            "t",
            "log_dir",
            "role",
            "config_file",
        }
    ),
    "deepspeed": frozenset(
        {
            "num_gpus",
            "num_accelerators",
            "num_nodes",
            "master_addr",
            "master_port",
            "node_rank",
            "H",
            "hostfile",
            "i",
            "include",
            "e",
            "exclude",
            "launcher",
            "launcher_args",
            "no_ssh",
            "no_ssh_check",
            "force_multi",
            "module",
            "no_python",
            "no_local_rank",
            "ssh_port",
            "save_pid",
            "min_elastic_nodes",
            "max_elastic_nodes",
            "elastic_training",
        }
    ),
}

# python -m MODULE forms, and the launcher each one is.
LAUNCHER_MODULES = {
    "torch.distributed.run": "torchrun",
    "torch.distributed.launch": "torchrun",
    "accelerate.commands.launch": "accelerate",
    "deepspeed.launcher.runner": "deepspeed",
}
# Python's own options that take a value (`python -X dev -m torch.distributed.run`).
PYTHON_VALUE_OPTIONS = frozenset({"-X", "-W", "--check-hash-based-pycs"})
_PYTHON = re.compile(r"python(\d+(\.\d+)*)?$")


# mpirun / mpiexec (Open MPI, MPICH/Hydra, Intel MPI): options that take no value, and those that take two
# (`--mca btl ^openib`, `-genv NAME value`); any other option takes one (`-np 16`, `--host a,b`, `-x NCCL_DEBUG`).
MPI_LAUNCHERS = frozenset({"mpirun", "mpiexec", "mpiexec.hydra", "orterun", "prterun"})
MPI_FLAGS = frozenset(
    {
        "allow_run_as_root",
        "oversubscribe",
        "nooversubscribe",
        "tag_output",
        "timestamp_output",
        "report_bindings",
        "display_map",
        "display_allocation",
        "merge_stderr_to_stdout",
        "noprefix",
        "use_hwthread_cpus",
        "bind_to_core",
        "bind_to_socket",
        "bynode",
        "byslot",
        "nolocal",
        "pernode",
        "v",
        "verbose",
        "q",
        "quiet",
        "l",
        "prepend_rank",
        "print_rank_map",
        "print_all_exitcodes",
        "ordered_output",
        "enable_recovery",
        "disable_recovery",
        "show_progress",
        "debug",
    }
)
MPI_TWO_VALUES = frozenset({"mca", "gmca", "genv", "env", "prtemca", "pmixmca"})


def mpi_program(args: list[str]) -> int:
    """Index in ``args`` (mpirun's words after its name) of the program it starts on every rank; len(args)
    when there is none."""
    i = 0
    while i < len(args):
        word = args[i]
        if word == "--":
            return i + 1
        if not word.startswith("-") or word == "-":
            return i
        name = _norm(word.split("=", 1)[0])
        if "=" in word or name in MPI_FLAGS:
            i += 1
        elif name in MPI_TWO_VALUES:
            i += 3
        else:
            i += 2
    return len(args)


class Nested(NamedTuple):
    """A launcher found at the start of a training command."""

    launcher: str  # as the user wrote it: "torchrun", "python3 -m torch.distributed.run", "accelerate launch"
    family: str  # torchrun | accelerate | deepspeed
    command: list[str]  # the training command without the launcher: what kgen's entrypoint should run
    nproc: int | None  # processes per node the launcher was asked for (None: not given, or not a number)
    nnodes: int | None  # nodes the launcher was asked for (None: not given, elastic, or not a number)
    option: str  # how the processes per node were given, e.g. "--nproc-per-node 8" ("" when not)
    foreign: tuple[
        str, ...
    ] = ()  # options kgen has no equivalent for, as written (accelerate's --mixed_precision bf16)
    # deepspeed (without --no_local_rank) and torch.distributed.launch (without --use-env) pass --local_rank=N
    # to the script; torchrun sets LOCAL_RANK instead
    local_rank_arg: bool = False


def _norm(option: str) -> str:
    return option.lstrip("-").replace("-", "_")


def _base(word: str) -> str:
    return word.rsplit("/", 1)[-1]


def _start(command: list[str]) -> tuple[str, str, int] | None:
    """(launcher as written, family, index of its first option) when ``command`` starts with a launcher."""
    if not command:
        return None
    head = _base(command[0])
    if head == "torchrun":
        return command[0], "torchrun", 1
    if head == "deepspeed":
        return command[0], "deepspeed", 1
    if head == "accelerate-launch":
        return command[0], "accelerate", 1
    if head == "accelerate":
        i = 1
        while i < len(command) and command[i].startswith("-") and command[i] not in ("-h", "--help"):
            i += 1  # accelerate's own options come before the subcommand (none take a value)
        if i < len(command) and command[i] == "launch":
            return f"{command[0]} launch", "accelerate", i + 1
        return None
    at = 0
    if _PYTHON.fullmatch(head):  # python [options] -m MODULE
        at = 1
        while at < len(command):
            word = command[at]
            if word == "-m" or re.match(r"-m[^-]", word):
                break
            if not word.startswith("-") or word in ("-", "-c", "--"):
                return None  # a script, a -c program, stdin: not a launcher module
            at += 2 if word in PYTHON_VALUE_OPTIONS else 1
        if at >= len(command):
            return None
    if command[at] == "-m" and at + 1 < len(command):  # also kgen's own `-- -m MODULE` form
        module, first = command[at + 1], at + 2
    elif re.match(r"-m[^-]", command[at]):
        module, first = command[at][2:], at + 1
    else:
        return None
    family = LAUNCHER_MODULES.get(module)
    if family is None:
        return None
    written = " ".join([*command[:at], "-m", module])
    return written, family, first


def nested_launcher(command: list[str] | tuple[str, ...]) -> Nested | None:
    """The launcher ``command`` starts with, read as that launcher reads its arguments; None when there is none."""
    command = list(command)
    found = _start(command)
    if found is None:
        return None
    launcher, family, i = found
    flags = {"torchrun": TORCHRUN_FLAGS, "accelerate": ACCELERATE_FLAGS, "deepspeed": DEEPSPEED_FLAGS}[family]
    options: dict[str, tuple[str, str | None]] = {}  # normalised name -> (as written, value)
    while i < len(command):
        word = command[i]
        if word == "--":
            i += 1
            break
        if not word.startswith("-") or word == "-":
            break
        if word.startswith("--") and "=" in word:
            name, value = word.split("=", 1)
            options[_norm(name)] = (name, value)
            i += 1
        elif word[:1] == "-" and word[1:2] in SHORT_WITH_VALUE and len(word) > 2 and not word.startswith("--"):
            options[word[1]] = (word[:2], word[2:])
            i += 1
        elif _norm(word) in flags:
            options[_norm(word)] = (word, None)
            i += 1
        else:
            options[_norm(word)] = (word, command[i + 1] if i + 1 < len(command) else None)
            i += 2
    script, args = (command[i], command[i + 1 :]) if i < len(command) else ("SCRIPT", [])
    if "m" in options or "module" in options:
        inner = ["-m", script, *args]
    elif "no_python" in options or script.endswith(".py") or script == "SCRIPT":
        inner = [script, *args]
    else:  # the launcher runs `python SCRIPT` for a script without .py; kgen's entrypoint would exec it
        inner = ["python3", script, *args]
    nproc, option = _nproc(family, options)
    nnodes = _int(_value(options, "nnodes" if family == "torchrun" else _NODES[family]))
    if family == "torchrun" and "standalone" in options:
        nnodes = 1
    taken = TAKEN_OVER[family]
    foreign = tuple(
        f"{written} {value}" if value is not None else written
        for name, (written, value) in options.items()
        if taken is not None and name not in taken
    )
    local_rank_arg = (family == "deepspeed" and "no_local_rank" not in options) or (
        launcher.endswith("torch.distributed.launch") and "use_env" not in options
    )
    return Nested(launcher, family, inner, nproc, nnodes, option, foreign, local_rank_arg)


_NODES = {"accelerate": "num_machines", "deepspeed": "num_nodes"}


def _value(options: dict[str, tuple[str, str | None]], name: str) -> str | None:
    return options[name][1] if name in options else None


def _int(value: str | None) -> int | None:
    return int(value) if value is not None and re.fullmatch(r"[0-9]+", value.strip()) else None


def _nproc(family: str, options: dict[str, tuple[str, str | None]]) -> tuple[int | None, str]:
    """Processes per node, and the option as written (accelerate's --num_processes counts every machine's)."""
    names = {"torchrun": ("nproc_per_node",), "deepspeed": ("num_gpus", "num_accelerators")}
    if family == "accelerate":
        if "num_processes" not in options:
            return None, ""
        written, value = options["num_processes"]
        total, machines = _int(value), _int(_value(options, "num_machines")) or 1
        per_node = total // machines if total is not None and total % machines == 0 else None
        return per_node, f"{written} {value}" + (f" over {machines} machines" if machines > 1 else "")
    for name in names[family]:
        if name in options:
            written, value = options[name]
            return _int(value), f"{written} {value}"
    return None, ""


def problem(nested: Nested) -> str:
    return PROBLEM.format(launcher=nested.launcher)


class Correction(NamedTuple):
    """What to run instead: the training command, the values that carry what the launcher was asked for,
    and notes on what it was asked for that disagrees with kgen's values."""

    command: list[str]
    nproc: int | None = None  # carried as nprocPerNode
    nodes: int | None = None  # carried as nodes
    notes: tuple[str, ...] = ()

    def values(self) -> dict[str, int]:
        carried = {"nprocPerNode": self.nproc, "nodes": self.nodes}
        return {k: v for k, v in carried.items() if v is not None}

    def flags(self) -> list[str]:
        """The kgen options that carry them: ``--set nprocPerNode=N``, ``--nodes M``."""
        out = ["--set", f"nprocPerNode={self.nproc}"] if self.nproc is not None else []
        return out + (["--nodes", str(self.nodes)] if self.nodes is not None else [])


def correction(nested: Nested, *, gpus: int, nproc: int, nproc_set: bool, nodes: int, nodes_set: bool) -> Correction:
    """How kgen takes over what the launcher was asked for.

    ``gpus`` and ``nodes`` are the spec's, ``nproc`` the values' nprocPerNode (0 = auto); ``*_set`` say
    whether the user chose them (anything but the built-in default). Processes per node: a GPU job runs
    one per GPU, or fewer that divide the GPU count (model parallel: carried as nprocPerNode unless chosen
    already), so another count is a note; a CPU job takes it as
    nprocPerNode unless nprocPerNode was chosen already (then a note when they differ). Nodes: carried
    when the user left the default, a note when they chose another count (``--standalone`` or a one-node
    count is the single-box habit being migrated away from: ignored)."""
    carry_nproc = carry_nodes = None
    notes: list[str] = []
    n = nested.nproc
    if n is not None:
        if gpus and n != gpus and not nproc_set and n > 0 and gpus % n == 0:
            carry_nproc = n  # fewer processes than GPUs, each driving gpus/n of them (model parallel)
        elif gpus and n != gpus and (not nproc_set or n != nproc):
            notes.append(
                f"its {nested.option} disagrees with {gpus} GPUs per node (kgen starts one process per GPU, "
                "or nprocPerNode processes when it divides the GPU count)"
            )
        elif not gpus and nproc_set and nproc and n != nproc:
            notes.append(f"its {nested.option} disagrees with nprocPerNode {nproc}")
        elif not gpus and not nproc_set and n != 1:
            carry_nproc = n
    m = nested.nnodes
    if m is not None and m > 1 and m != nodes:
        if nodes_set:
            notes.append(f"its {m} nodes disagree with the {nodes} nodes kgen runs")
        else:
            carry_nodes = m
    if nested.foreign:
        notes.append(f"its options {' '.join(nested.foreign)} have no kgen equivalent (configure them in the script)")
    if nested.local_rank_arg:
        notes.append(LOCAL_RANK_NOTE)
    return Correction(nested.command, carry_nproc, carry_nodes, tuple(notes))
