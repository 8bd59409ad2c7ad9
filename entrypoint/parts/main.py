"""main: the command line, and the one last line that says why this node stopped."""

from __future__ import annotations

import json
import os
import signal
import sys

from .command import check_command
from .config import load_config
from .diagnose import diagnose
from .hang import hang_home, stacks_answer
from .header import DROPPED, EXIT_CONFIG, EXIT_INTERNAL, Stop, emit, fatal, internal_error, log, printable, script_path
from .nodeverbs import launch_node, run_dir_verb
from .proctree import SUPERVISOR_PID, die_with_parent
from .slurm import slurm_end, slurm_node
from .smoke import smoke_worker
from .torchrun import request_stop, run

# --------------------------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------------------------

USAGE = (
    "usage: kgen_entrypoint.py [--diagnose | --smoke-test | --stop | -- COMMAND [ARGS...]]\n"
    "  -- train.py ARGS      run a script on every worker through torchrun\n"
    "  -- -m pkg.mod ARGS    run a module\n"
    "  -- PROGRAM ARGS       run any program (torchrun --no-python)\n"
    "  --smoke-test          all-reduce check instead of training\n"
    "  --diagnose            environment and network checks, one PASS/FAIL line each\n"
    "  --stop                stop the whole group (with the run's environment, on any host)\n"
    "  --stacks              this node's training processes' Python stacks, one JSON line\n"
    "bare metal (kgen launch; docs/baremetal.md):\n"
    "  --run-dir DIR --detach -- COMMAND   start this node detached (DIR/env: its environment, JSON)\n"
    "  --run-dir DIR --state               the node's run state, one JSON line\n"
    "  --run-dir DIR --log [--tail N] [--follow]\n"
    "  --run-dir DIR --stop-node [--grace S] [--interrupt]   end every process of the node\n"
    "  --run-dir DIR --stacks              the node's training processes' Python stacks, one JSON line\n"
    "slurm (docs/slurm.md):\n"
    "  --slurm-node RUN -- COMMAND   this node of the job step (srun, one task per node)\n"
    "  --slurm-end RUN RC            after srun: succeeded, failed, stopped, or requeue the job\n"
)


def main(argv: list[str] | None = None) -> int:
    """Run, then end every log with one line saying why this node stopped."""
    try:
        code = _main(argv)
    except Stop as stop:
        _said_dropped()
        emit(sys.stderr, f"kgen-entrypoint: stopped: {printable(stop.reason)}\n")
        return stop.code
    except Exception as exc:  # noqa: BLE001 - kgen's own fault outside a run (--diagnose, --stop, a verb)
        emit(sys.stderr, f"kgen-entrypoint: stopped: {internal_error(exc)}\n")
        return EXIT_INTERNAL
    _said_dropped()
    return code


def _said_dropped() -> None:
    if DROPPED[0]:
        log(f"{DROPPED[0]} line(s) of this node's output could not be written (a full or failing disk?)")


def _main(argv: list[str] | None = None) -> int:
    global _TAG
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--smoke-worker"]:
        return smoke_worker()
    parent = os.environ.get(SUPERVISOR_PID, "")
    if parent.isdigit():  # run by a node's supervisor: its death is this node's (SIGTERM: leave, stop torch)
        die_with_parent(signal.SIGTERM, int(parent))
    verbs = {"--launch-node": "launch_node", "--run-dir": "run_dir_verb", "--slurm-node": "slurm_node"}
    verbs["--slurm-end"] = "slurm_end"
    if args and args[0] in verbs and verbs[args[0]] not in globals():
        fatal(
            EXIT_CONFIG,
            f"{args[0]} is for bare metal or Slurm: this is the pod copy kgen render ships, without that "
            "section; `kgen entrypoint` prints the whole file",
        )
    if args[:1] == ["--launch-node"]:  # kgen launch, over ssh (bare metal, docs/baremetal.md)
        return launch_node(globals().get("KGEN_SOURCE"))
    if args[:1] == ["--run-dir"]:
        return run_dir_verb(args[1:])
    if args[:1] == ["--slurm-node"]:  # a Slurm job step's task, one per node (docs/slurm.md)
        return slurm_node(args[1:])
    if args[:1] == ["--slurm-end"]:  # the sbatch script after srun: succeeded, failed, stopped or requeue
        return slurm_end(args[1:])
    if args[:1] in (["-h"], ["--help"]):
        sys.stdout.write(USAGE)
        return 0
    if args[:1] == ["--diagnose"]:
        if len(args) > 1:
            fatal(EXIT_CONFIG, "--diagnose takes no arguments")
        return diagnose(dict(os.environ))
    if args[:1] == ["--stacks"]:  # a pod (kubectl exec): this node's ranks' stacks, one JSON line
        print(json.dumps(stacks_answer(hang_home(dict(os.environ)))), flush=True)
        return 0
    if args[:1] == ["--stop"]:
        if len(args) > 1:
            fatal(EXIT_CONFIG, "--stop takes no arguments")
        return request_stop(dict(os.environ))
    if args[:1] == ["--smoke-test"]:
        if len(args) > 1:
            fatal(EXIT_CONFIG, "--smoke-test takes no arguments")
        command = [script_path(), "--smoke-worker"]
    elif args[:1] == ["--"]:
        command = args[1:]
        check_command(command)
    elif args and not args[0].startswith("-"):
        command = args
        check_command(command)
    else:
        sys.stderr.write(USAGE)
        fatal(EXIT_CONFIG, f"unknown option {args[0]!r}" if args else "no command given")
    cfg = load_config(dict(os.environ))
    if cfg.problems:
        fatal(EXIT_CONFIG, cfg.problems)
    _TAG = f"kgen node {cfg.node_rank}"  # type: ignore[name-defined]  # header's: one module once assembled
    log(cfg.summary())
    for note in cfg.notes:
        log(f"note: {note}")
    return run(cfg, command)
