"""The training command: torchrun's argv around it, and the refusal of a launcher given as the command."""

from __future__ import annotations

import os
import re
import shlex
import sys

from .config import Config
from .header import EXIT_CONFIG, fatal, script_path

# --------------------------------------------------------------------------------------------
# the training command
# --------------------------------------------------------------------------------------------


def torchrun_argv(cfg: Config, command: list[str], gen: int = 0, log_dir: str = "") -> list[str]:
    argv = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nnodes={cfg.nnodes}",
        f"--nproc-per-node={cfg.nproc}",
        "--rdzv-backend=static",
        f"--master-addr={cfg.master_addr}",
        f"--master-port={cfg.master_port}",
        f"--node-rank={cfg.node_rank}",
        f"--rdzv-id={cfg.rdzv_id}-g{gen}",
        f"--rdzv-conf=timeout={cfg.rdzv_timeout}",
        "--max-restarts=0",
        "--monitor-interval=0.1",
    ]
    if log_dir:  # each worker's output into files the Pump reads (whole lines, "[rank R] ")
        argv += ["--redirects=3", f"--log-dir={log_dir}"]
    if command[0] == "-m":
        return argv + ["-m"] + [torchrun_literal(a) for a in command[1:]]
    if command[0].endswith(".py"):
        return argv + [torchrun_literal(a) for a in command]
    return argv + ["--no-python", command[0]] + [torchrun_literal(a) for a in command[1:]]


_NOT_TORCHRUN_MACRO = re.compile(r"\$(?!\{local_rank\}|local_rank(?![A-Za-z0-9_]))")


def torchrun_literal(arg: str) -> str:
    """torchrun passes every worker argument through string.Template (its ${local_rank} macro), which
    turns "$$" into "$": escape every other "$" so that the script gets its arguments exactly."""
    return _NOT_TORCHRUN_MACRO.sub("$$", arg)


# A launcher as the command nests launchers: every node's inner torchrun (accelerate, deepspeed) would form
# its own one-node world. Read as the launcher reads its arguments; kgen.launch.launchers holds the same reading
# (tests/test_launchers.py keeps the two on one table). Options not listed as flags take one value.
NESTED_PROBLEM = (
    "{launcher} is a launcher, and kgen's entrypoint already starts torchrun on every node "
    "(nested, each node would train alone as its own one-node world)"
)
LOCAL_RANK_NOTE = "the script gets LOCAL_RANK in its environment, not a --local_rank argument"
_LAUNCHER_FLAGS = {
    "torchrun": {"standalone", "m", "module", "no_python", "run_path", "virtual_local_rank", "use_env", "h"},
    "accelerate": {"h", "help", "q", "quiet", "cpu", "multi_gpu", "tpu", "ipex", "enable_cpu_affinity",
                   "dynamo_use_fullgraph", "dynamo_use_dynamic", "use_deepspeed", "use_fsdp", "use_megatron_lm",
                   "use_xpu", "same_network", "m", "module", "no_python", "tpu_cluster", "no_tpu_cluster",
                   "tpu_use_sudo", "downcast_bf16", "fp8_use_autocast_during_eval", "debug"},
    "deepspeed": {"h", "help", "module", "no_python", "no_local_rank", "no_ssh", "no_ssh_check", "force_multi",
                  "save_pid", "elastic_training", "bind_cores_to_rank"},
}  # fmt: skip
_LAUNCHER_MODULES = {
    "torch.distributed.run": "torchrun",
    "torch.distributed.launch": "torchrun",
    "accelerate.commands.launch": "accelerate",
    "deepspeed.launcher.runner": "deepspeed",
}
_NPROC_OPTIONS = {"torchrun": ("nproc_per_node",), "deepspeed": ("num_gpus", "num_accelerators")}


def _launcher_start(command: list[str]) -> tuple[str, str, int] | None:
    """(the launcher as written, its family, where its options start) when `command` starts with one."""
    head = command[0].rsplit("/", 1)[-1] if command else ""
    if head in ("torchrun", "deepspeed", "accelerate-launch"):
        return command[0], {"accelerate-launch": "accelerate"}.get(head, head), 1
    if head == "accelerate":
        i = 1
        while i < len(command) and command[i].startswith("-") and command[i] not in ("-h", "--help"):
            i += 1
        return (f"{command[0]} launch", "accelerate", i + 1) if command[i : i + 1] == ["launch"] else None
    at = 0
    if re.fullmatch(r"python(\d+(\.\d+)*)?", head):  # python [options] -m MODULE
        at = 1
        while at < len(command) and not (command[at] == "-m" or re.match(r"-m[^-]", command[at])):
            if not command[at].startswith("-") or command[at] in ("-", "-c", "--"):
                return None
            at += 2 if command[at] in ("-X", "-W", "--check-hash-based-pycs") else 1
    if at < len(command) - 1 and command[at] == "-m":
        module, first = command[at + 1], at + 2
    elif at < len(command) and re.match(r"-m[^-]", command[at]):
        module, first = command[at][2:], at + 1
    else:
        return None
    family = _LAUNCHER_MODULES.get(module)
    return (" ".join([*command[:at], "-m", module]), family, first) if family else None


def nested_launcher(command: list[str]) -> tuple[str, list[str], int | None, str, int | None, bool] | None:
    """(launcher as written, the training command inside it, processes per node it was asked for and how,
    nodes it was asked for, whether it passed --local_rank to the script) when `command` is a launcher."""
    found = _launcher_start(command)
    if found is None:
        return None
    launcher, family, i = found
    opts: dict[str, tuple[str, str | None]] = {}
    while i < len(command) and command[i].startswith("-") and command[i] != "-":
        word = command[i]
        if word == "--":
            i += 1
            break
        name = word.split("=", 1)[0]
        if word.startswith("--") and "=" in word:
            opts[name.lstrip("-").replace("-", "_")] = (name, word.split("=", 1)[1])
            i += 1
        elif not word.startswith("--") and word[1:2] in "rtHie" and len(word) > 2:
            opts[word[1]] = (word[:2], word[2:])
            i += 1
        elif word.lstrip("-").replace("-", "_") in _LAUNCHER_FLAGS[family]:
            opts[word.lstrip("-").replace("-", "_")] = (word, None)
            i += 1
        else:
            opts[word.lstrip("-").replace("-", "_")] = (word, command[i + 1] if i + 1 < len(command) else None)
            i += 2
    script, args = (command[i], command[i + 1 :]) if i < len(command) else ("SCRIPT", [])
    if "m" in opts or "module" in opts:
        inner = ["-m", script, *args]
    elif "no_python" in opts or script.endswith(".py") or script == "SCRIPT":
        inner = [script, *args]
    else:
        inner = ["python3", script, *args]

    def number(name: str) -> int | None:
        value = opts.get(name, ("", None))[1]
        return int(value) if value is not None and re.fullmatch(r"\d+", value.strip()) else None

    nproc, option = None, ""
    if family == "accelerate" and "num_processes" in opts:
        total, machines = number("num_processes"), number("num_machines") or 1
        nproc = total // machines if total is not None and total % machines == 0 else None
        option = " ".join(opts["num_processes"]) + (f" over {machines} machines" if machines > 1 else "")  # type: ignore[arg-type]
    for name in _NPROC_OPTIONS.get(family, ()):
        if name in opts and not option:
            nproc, option = number(name), " ".join(opts[name])  # type: ignore[arg-type]
    nnodes = number({"torchrun": "nnodes", "accelerate": "num_machines", "deepspeed": "num_nodes"}[family])
    local_rank_arg = (family == "deepspeed" and "no_local_rank" not in opts) or (
        launcher.endswith("torch.distributed.launch") and "use_env" not in opts
    )
    return launcher, inner, nproc, option, 1 if "standalone" in opts else nnodes, local_rank_arg


def launcher_problem(command: list[str], env: dict) -> str | None:
    """The refusal of a launcher as the command, with the command to run instead (`use: ...`)."""
    nested = nested_launcher(command)
    if nested is None:
        return None
    launcher, inner, nproc, option, nnodes, local_rank_arg = nested
    notes, prefix = [], []
    for var, asked, how in (("NPROC_PER_NODE", nproc, f"its {option}"), ("NNODES", nnodes, f"its {nnodes} nodes")):
        have = (env.get(var) or "").strip()
        if asked is None or (var == "NNODES" and asked < 2):
            continue
        if not have:
            prefix.append(f"{var}={asked}")
        elif have != str(asked):
            notes.append(f"{how} disagree{'s' * (var == 'NPROC_PER_NODE')} with {var}={have}")
    if local_rank_arg:
        notes.append(LOCAL_RANK_NOTE)
    name = os.path.basename(script_path())
    me = sys.argv[0] if os.path.basename(sys.argv[0]) == name else name
    use = " ".join(shlex.quote(w) for w in [*prefix, "python3", me, "--", *inner])
    return "; ".join([NESTED_PROBLEM.format(launcher=launcher), *notes, f"use: {use}"])


def check_command(command: list[str], env: dict | None = None) -> None:
    if not command:
        fatal(
            EXIT_CONFIG,
            "no command after '--': give the training command, e.g. "
            "-- train.py --lr 3e-4, or use --smoke-test / --diagnose",
        )
    nested = launcher_problem(command, os.environ if env is None else env)  # type: ignore[arg-type]
    if nested:
        fatal(EXIT_CONFIG, nested)
    head = command[0]
    if head == "-m":
        if len(command) < 2 or command[1].startswith("-"):
            fatal(EXIT_CONFIG, "'-m' needs a module name: -- -m package.module [args]")
    elif head.startswith("-"):
        fatal(
            EXIT_CONFIG, f"command starts with the option {head!r}: give a script, '-m module' or a program after '--'"
        )
    elif head.endswith(".py") and not os.path.isfile(head):
        fatal(
            EXIT_CONFIG,
            f"training script {head!r} not found (working directory "
            f"{os.getcwd()}): check the path, the image and workingDir",
        )
