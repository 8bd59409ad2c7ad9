"""A launcher's argv read into a ``Launch``: the wrappers in front of it looked through (``exec``, ``env``,
``nohup``, ``timeout``, ``numactl``, ``tini --`` ...), the launcher recognised (``torchrun``, ``python -m
torch.distributed.run``, ``deepspeed``, ``accelerate launch``, kgen's entrypoint, a plain ``python``) and its
flags mapped onto torchrun's names; and the values a flag holds (``resolve``, ``host_of``).
"""

from __future__ import annotations

import re
from typing import Any

from kgen.launch.launchers import (
    ACCELERATE_FLAGS,
    DEEPSPEED_FLAGS,
    LAUNCHER_MODULES,
    PYTHON_VALUE_OPTIONS,
    TORCHRUN_FLAGS,
)

TRAINING_FORMS = ("torchrun", "deepspeed", "accelerate", "kgen")
_DEEPSPEED_MAP = {"num_nodes": "nnodes", "num_gpus": "nproc_per_node", "num_procs": "nproc_per_node"}
_ACCELERATE_MAP = {
    "num_machines": "nnodes",
    "machine_rank": "node_rank",
    "main_process_ip": "master_addr",
    "main_process_port": "master_port",
    "num_processes": "world_processes",
}
_VAR = re.compile(r"^\$(?:\{(\w+)\}|\((\w+)\)|(\w+))$")


class Launch:
    """One launcher found in a container's command."""

    __slots__ = (
        "form",
        "flags",
        "exports",
        "sleeps",
        "where",
        "flag_where",
        "script",
        "opaque",
        "child",
        "nested",
        "swallowed",
        "words",
        "shell_words",
        "config_file",
        "spelled",
        "assigned",
        "branch",
        "origin",
        "via",
    )

    def __init__(self, form: str, flags: dict[str, str | None] | None = None) -> None:
        self.form = form  # torchrun | deepspeed | accelerate | kgen | python | mpi (a program mpirun starts)
        self.flags: dict[str, str | None] = flags if flags is not None else {}  # torchrun's names: nnodes, ...
        self.exports: list[str] = []  # variables the script exports (export, declare -x, A=1 cmd)
        self.sleeps: list[str] = []  # sleep commands of the script
        self.where: tuple = ()  # ("command"|"args", index) of the launcher (or of the shell script)
        self.flag_where: dict[str, tuple] = {}  # flag -> ("command"|"args", index) of the item holding it
        self.script = False  # found inside a shell script
        self.opaque = False  # some flags come from an expansion ($ARGS, "$@") or a config file
        self.child: list[str] = []  # what the launcher runs: the training script and its arguments
        self.nested: Launch | None = None  # a launcher this launcher runs (never right)
        self.swallowed: str | None = None  # how the script loses the launcher's exit status
        self.words: list[str] = []  # the launcher's own words, as written (after quote removal)
        self.shell_words: dict[str, list[str]] = {}  # flag -> the shell source of its value (for $RANDOM ...)
        self.config_file = False  # accelerate --config_file / deepspeed config: flags may live there
        self.spelled: dict[str, str] = {}  # flag -> how the command line wrote it ("--main_process_ip")
        self.assigned: list[str] = []  # plain shell variables the script sets (not exported)
        self.branch = False  # in an if/case branch: it runs in some pods only
        self.origin = ""  # the script file it is in (a ConfigMap key, a here-document), "" when inline
        self.via = ""  # the MPI launcher that starts it on every rank ("mpirun", "mpiexec"), "" when none

    def __repr__(self) -> str:
        return f"Launch({self.form!r}, {self.flags!r})"

    def at(self, flag: str | None = None) -> tuple:
        """Where in the container a flag (or the launch itself) is written: ("args", 3), ..."""
        if flag is not None and flag in self.flag_where:
            return self.flag_where[flag]
        return self.where

    def flag(self, name: str) -> str | None:
        return self.flags.get(name)

    def spelling(self, name: str) -> str:
        """The flag as written on the command line (``--main_process_ip`` for accelerate's master)."""
        return self.spelled.get(name, "--" + name.replace("_", "-"))

    def master_flags(self) -> list[tuple[str, str]]:
        """(key, value) of the flags that name the master (pod 0): --master-addr, and --rdzv-endpoint
        unless the rendezvous is etcd (then it names the etcd server)."""
        out = []
        for key in ("master_addr", "rdzv_endpoint"):
            raw = self.flags.get(key)
            if raw and not (key == "rdzv_endpoint" and (self.flags.get("rdzv_backend") or "").startswith("etcd")):
                out.append((key, raw))
        return out

    def has(self, name: str) -> bool:
        return name in self.flags

    @property
    def training(self) -> bool:
        return self.form in TRAINING_FORMS


def _norm(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def basename(word: str) -> str:
    return word.rsplit("/", 1)[-1]


# --- a launcher's argv ---------------------------------------------------------------------------

_WRAPPERS = {
    "exec",
    "nohup",
    "time",
    "stdbuf",
    "timeout",
    "nice",
    "numactl",
    "tini",
    "dumb-init",
    "env",
    "sudo",
    "command",
    "builtin",
    "taskset",
    "chrt",
    "ionice",
}
_WRAPPER_VALUE_OPTS = {
    "timeout": {"-s", "--signal", "-k", "--kill-after"},
    "nice": {"-n", "--adjustment"},
    "env": {"-u", "--unset", "-C", "--chdir", "-S", "--split-string"},
    "sudo": {"-u", "-g", "-C", "-h", "-p"},
    "stdbuf": {"-i", "-o", "-e"},
    "exec": {"-a"},
    "time": {"-f", "-o"},
    "ionice": {"-c", "-n"},
    "numactl": {"-C", "-N", "-m", "-p", "-i"},
}


def skip_wrappers(argv: list[str]) -> int:
    """Index of the real command after ``exec``, ``env A=1``, ``timeout 1h`` ... and assignments."""
    i = 0
    while i < len(argv):
        word = argv[i]
        base = basename(word)
        if re.match(r"^[A-Za-z_]\w*=", word):
            i += 1
            continue
        if base not in _WRAPPERS:
            return i
        i += 1
        values = _WRAPPER_VALUE_OPTS.get(base, set())
        while i < len(argv) and argv[i].startswith("-") and argv[i] != "-":
            opt = argv[i]
            i += 1
            if opt == "--":
                break
            if opt in values and "=" not in opt:
                i += 1
        if base == "timeout" and i < len(argv):
            i += 1  # the duration
        if base in ("taskset", "chrt") and i < len(argv):
            i += 1  # the mask / priority
    return i


def read_launch(argv: list[str], src: list[tuple], in_script: tuple | None) -> Launch | None:
    head = basename(argv[0])
    if head == "torchrun":
        return _torchrun(argv, src, 1, in_script)
    if head == "deepspeed":
        return _flagged("deepspeed", argv, src, 1, in_script, DEEPSPEED_FLAGS, _DEEPSPEED_MAP)
    if head == "accelerate" and len(argv) > 1 and argv[1] == "launch":
        launch = _flagged("accelerate", argv, src, 2, in_script, ACCELERATE_FLAGS, _ACCELERATE_MAP)
        _accelerate_nproc(launch)
        return launch
    if head.endswith("kgen_entrypoint.py"):
        return _kgen(argv, src, 1, in_script)
    if re.match(r"^python[0-9.]*$", head) or head == "pypy3":
        return _python(argv, src, in_script)
    return None


def _python(argv: list[str], src: list[tuple], in_script: tuple | None) -> Launch | None:
    i = 1
    while i < len(argv):
        tok = argv[i]
        if tok == "-m" and i + 1 < len(argv):
            module = argv[i + 1]
            form = LAUNCHER_MODULES.get(module)
            if form == "torchrun":
                return _torchrun(argv, src, i + 2, in_script)
            if form == "deepspeed":
                return _flagged("deepspeed", argv, src, i + 2, in_script, DEEPSPEED_FLAGS, _DEEPSPEED_MAP)
            if form == "accelerate":
                launch = _flagged("accelerate", argv, src, i + 2, in_script, ACCELERATE_FLAGS, _ACCELERATE_MAP)
                _accelerate_nproc(launch)
                return launch
            launch = _at(Launch("python"), src, i, in_script)
            launch.child = argv[i:]
            launch.words = argv
            return launch
        if tok == "-c":
            return None  # an inline program
        if tok in PYTHON_VALUE_OPTIONS:
            i += 2
            continue
        if tok.startswith("-"):
            i += 1
            continue
        if tok.endswith("kgen_entrypoint.py"):
            return _kgen(argv, src, i + 1, in_script)
        launch = _at(Launch("python"), src, i, in_script)
        launch.child = argv[i:]
        launch.words = argv
        return launch
    return None


def _at(launch: Launch, src: list[tuple], index: int, in_script: tuple | None) -> Launch:
    launch.where = src[index] if index < len(src) else (src[-1] if src else ())
    return launch


def _kgen(argv: list[str], src: list[tuple], start: int, in_script: tuple | None) -> Launch:
    launch = _at(Launch("kgen"), src, max(start - 1, 0), in_script)
    launch.words = argv
    if "--" in argv[start:]:
        launch.child = argv[argv.index("--", start) + 1 :]
        if launch.child and (launch.child[0].endswith(".py") or launch.child[0] == "-m"):
            launch.child = ["python3", *launch.child]  # the entrypoint runs torchrun on a script or module
    return launch


def _torchrun(argv: list[str], src: list[tuple], start: int, in_script: tuple | None) -> Launch:
    launch = _flagged("torchrun", argv, src, start, in_script, TORCHRUN_FLAGS, {})
    if launch.child:
        if launch.has("no_python"):
            pass  # the child is a program
        elif launch.has("module") or launch.has("m"):
            launch.child = ["python3", "-m", *launch.child]
        else:
            launch.child = ["python3", *launch.child]
    return launch


def _flagged(
    form: str,
    argv: list[str],
    src: list[tuple],
    start: int,
    in_script: tuple | None,
    booleans: frozenset[str],
    names: dict[str, str],
) -> Launch:
    """A launcher's flags (``--a=b``, ``--a b``, booleans) up to its script; the rest is the child."""
    launch = _at(Launch(form), src, max(start - 1, 0), in_script)
    launch.words = argv
    i = start
    while i < len(argv):
        tok = argv[i]
        if tok.startswith("$") and not tok.startswith("$("):
            if i > start and _norm(argv[i - 1]) in ("m", "module"):
                break  # torchrun -m ${MODULE_AND_ARGS}: the module (a positional), not more flags
            launch.opaque = True  # torchrun $DISTRIBUTED_ARGS train.py
            i += 1
            continue
        if tok == "--":
            i += 1
            break
        if not tok.startswith("-") or tok == "-":
            break
        if "=" in tok:
            name, value = tok.split("=", 1)
            key = _norm(name)
            used = i
        elif _norm(tok) in booleans:
            key, value, used = _norm(tok), None, i
        else:
            key = _norm(tok)
            value = argv[i + 1] if i + 1 < len(argv) else None
            used = i
            i += 1
        if key in ("config_file", "deepspeed_config", "hostfile"):
            launch.config_file = True
        spelled = tok.split("=", 1)[0]
        key = names.get(key, key)
        launch.flags[key] = value
        launch.spelled[key] = spelled
        if used < len(src):
            launch.flag_where[key] = src[used]
        i += 1
    launch.child = argv[i:]
    if form == "accelerate" and launch.config_file:
        launch.opaque = True
    return launch


def _accelerate_nproc(launch: Launch) -> None:
    """accelerate's --num_processes counts every process of every machine."""
    total = launch.flags.get("world_processes")
    machines = launch.flags.get("nnodes") or "1"
    if total and total.isdigit() and machines.isdigit() and int(machines) > 0 and int(total) % int(machines) == 0:
        launch.flags["nproc_per_node"] = str(int(total) // int(machines))


# --- values ---------------------------------------------------------------------------------------


def resolve(value: str | None, env: dict[str, Any]) -> str | None:
    """A flag value with a whole-token $VAR / ${VAR} / $(VAR) replaced by the env literal."""
    if value is None:
        return None
    m = _VAR.match(value)
    if m:
        name = m.group(1) or m.group(2) or m.group(3)
        lit = env.get(name)
        return lit if isinstance(lit, str) else None
    return None if "$" in value else value


def host_of(endpoint: str) -> str:
    if endpoint.startswith("["):
        return endpoint[1:].split("]", 1)[0]
    return endpoint.rsplit(":", 1)[0] if endpoint.count(":") == 1 else endpoint
