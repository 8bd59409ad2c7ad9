"""kgen launch's verbs on a node: --launch-node (the checks, then the detached supervisor) and --run-dir DIR
--state | --log | --stop-node | --stacks. Not in pods."""

from __future__ import annotations

import errno
import json
import os
import re
import secrets
import signal
import socket
import sys
import time

from .baremetal import (
    ORDERLY_STOP,
    RUN_MARKER,
    STATE_EVENTS,
    STATE_TAIL,
    STATE_TAIL_FAILED,
    Supervisor,
    _read_json,
    _record,
    _same_process,
    _signal_all,
    _write_private,
    node_dir,
    run_processes,
)
from .hang import stacks_answer
from .header import EXIT_CONFIG, EXIT_OK, EXIT_STOPPED, _utc_stamp, fatal
from .proctree import proc_is_ours


def detach(run_dir: str) -> dict:
    """Start this node's supervisor in its own session (double fork); return its pid record once written."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the forked processes
        code = 1
        try:
            os.close(r)
            os.setsid()
            if os.fork():
                os._exit(0)
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)  # nothing of the launcher's ssh channel stays open
            os.umask(0o077)
            sup = Supervisor(run_dir)
            sup.write_pid()
            os.write(w, b"ok")
            os.close(w)
            code = sup.guarded_run()
        finally:
            os._exit(code if isinstance(code, int) and 0 <= code < 256 else 1)
    os.close(w)
    os.waitpid(pid, 0)
    with os.fdopen(r, "rb") as fh:
        ok = fh.read() == b"ok"
    rec = _read_json(os.path.join(run_dir, "pid"))
    if not ok or rec is None:
        fatal(EXIT_CONFIG, f"the node's supervisor did not start in {run_dir}")
    return rec or {}


def _script_problems(path: str, shown: str) -> list[str]:
    """The training script compiles with this host's interpreter (nothing of it runs)."""
    try:
        with open(path, "rb") as fh:
            source = fh.read(16 << 20)
        compile(source, shown, "exec", dont_inherit=True)
    except SyntaxError as exc:
        where = f"{exc.msg} (line {exc.lineno})"
        return [f"training script {shown!r} does not compile with {sys.executable} on this host: {where}"]
    except (OSError, ValueError) as exc:
        return [f"training script {shown!r} cannot be read on this host: {exc}"]
    return []


def _module_problems(name: str, workdir: str, pythonpath: str) -> list[str]:
    """`-m name` is importable as `python -m` would find it in `workdir` (nothing of it runs: the path
    finder only looks, package by package)."""
    from importlib.machinery import BuiltinImporter, PathFinder

    here = os.path.dirname(os.path.abspath(globals().get("__file__") or "")) if globals().get("__file__") else None
    search: list[str] | None = [workdir] + [p for p in pythonpath.split(os.pathsep) if p]
    search += [p for p in sys.path if p and p != here and p not in search]  # type: ignore[operator]
    parts = name.split(".")
    for i, part in enumerate(parts):
        spec = PathFinder.find_spec(part, search) or (BuiltinImporter.find_spec(part) if i == 0 else None)
        if spec is None:
            return [
                f"module {'.'.join(parts[: i + 1])!r} (of -m {name}) not found by {sys.executable} in {workdir} "
                "on this host: sync your code there (--workdir), install it, or set --env PYTHONPATH=..."
            ]
        search = list(spec.submodule_search_locations or []) or None
        if search is None and i < len(parts) - 1:
            return [f"-m {name}: {'.'.join(parts[: i + 1])!r} is a module, not a package, on this host"]
    if search is not None and PathFinder.find_spec("__main__", search) is None:
        return [f"-m {name}: {name!r} is a package without __main__.py on this host: name the module to run"]
    return []


def _port_problem(port: int) -> str | None:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("0.0.0.0", port))
    except OSError as exc:
        return f"port {port} is in use on this host ({exc.strerror})"
    finally:
        s.close()
    return None


def _reply(msg: dict) -> None:
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def launch_node(source: str | None = None) -> int:
    """--launch-node: the host side of `kgen launch`, a short dialogue on stdin/stdout.

    launcher -> one JSON line: run, rank, launch id, command, workdir, ports to check;
    host -> one JSON line: ok, problems, host name, run dir, python, the address ssh reached;
    launcher -> {"go": true, "env": ..., "secret": ..., "inject": ...} once every host answered ok
    (anything else, or EOF: nothing is created) -> host: run dir, supervisor pid."""
    import importlib.util

    header = json.loads(sys.stdin.readline() or "{}")
    run, rank = str(header.get("run") or ""), int(header.get("rank", -1))
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", run) or rank < 0:
        fatal(EXIT_CONFIG, f"--launch-node: bad run name {run!r} or rank {rank}")
    run_dir = node_dir(run, rank)
    run_root = os.path.dirname(run_dir)
    command = [str(a) for a in header.get("command") or []]
    workdir = str(header.get("workdir") or os.getcwd())
    problems = []
    if header.get("check_torch", True):
        try:
            has_torch = importlib.util.find_spec("torch") is not None
        except (ImportError, ValueError):
            has_torch = False
        if not has_torch:
            problems.append(
                f"torch is not installed for {sys.executable}: install it there, or pass --python with the "
                "interpreter that has it"
            )
    launch_id = str(header.get("launch_id") or "")
    owner = _read_json(os.path.join(run_root, "launch.json")) or {}
    if os.path.exists(run_root) and owner.get("launch_id") != launch_id:
        problems.append(
            f"a run named {run} already exists on this host ({run_root}): `kgen stop {run} --rm` removes it, "
            "or choose another --name"
        )
    if not os.path.isdir(workdir):
        problems.append(
            f"working directory {workdir} does not exist on this host: sync your code there or set --workdir"
        )
    elif command and command[0].endswith(".py") and not os.path.isfile(os.path.join(workdir, command[0])):
        problems.append(
            f"training script {command[0]!r} not found in {workdir} on this host: copy or sync it there "
            "(or set --workdir)"
        )
    elif command and command[0].endswith(".py"):
        problems.extend(_script_problems(os.path.join(workdir, command[0]), command[0]))
    elif command[:1] == ["-m"] and len(command) > 1:
        problems.extend(_module_problems(command[1], workdir, str(header.get("pythonpath") or "")))
    elif command and "/" in command[0] and not command[0].endswith(".py"):  # a program torchrun runs as is
        program = os.path.join(workdir, command[0])
        if os.path.isdir(program):
            problems.append(f"program {command[0]!r} is a directory on this host, not a program to run")
        elif not os.path.isfile(program):
            problems.append(
                f"program {command[0]!r} not found in {workdir} on this host: copy or sync it there (or set --workdir)"
            )
        elif not os.access(program, os.X_OK):
            problems.append(f"program {command[0]!r} in {workdir} is not executable on this host: chmod +x it")
    for port in header.get("ports") or []:
        problem = _port_problem(int(port))
        if problem:
            problems.append(f"{problem}: choose another --port (the run uses --port and --port+1)")
    conn = (os.environ.get("SSH_CONNECTION") or "").split()
    _reply(
        {
            "ok": not problems,
            "problems": problems,
            "host": socket.gethostname(),
            "dir": run_dir,
            "python": sys.executable,
            "addr": conn[2] if len(conn) == 4 else "",
        }
    )
    if problems:
        return EXIT_CONFIG
    try:
        go = json.loads(sys.stdin.readline() or "{}")
    except ValueError:
        go = {}
    if not isinstance(go, dict) or go.get("go") is not True:
        return EXIT_OK  # the launcher gave up (another host failed its checks): nothing was created
    try:
        os.makedirs(os.path.dirname(run_root), mode=0o700, exist_ok=True)
        # The run's folder appears whole or not at all: local nodes of one launch create it at the same
        # time, and each must see the launch id of whoever made it (a folder renamed into place).
        staging = os.path.join(os.path.dirname(run_root), f".staging-{secrets.token_hex(8)}")
        os.mkdir(staging, 0o700)
        _write_private(os.path.join(staging, "launch.json"), json.dumps({"launch_id": launch_id}))
        try:
            os.rename(staging, run_root)
        except OSError as exc:
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
            os.unlink(os.path.join(staging, "launch.json"))
            os.rmdir(staging)
            if (_read_json(os.path.join(run_root, "launch.json")) or {}).get("launch_id") != launch_id:
                raise FileExistsError(errno.EEXIST, "a run of this name exists", run_root) from None
        os.mkdir(run_dir, 0o700)
        os.chmod(run_dir, 0o700)
        env = {str(k): str(v) for k, v in (go.get("env") or {}).items()}
        env[RUN_MARKER] = run_dir
        if go.get("secret"):
            _write_private(os.path.join(run_dir, "secret"), str(go["secret"]) + "\n", exclusive=True)
            env["KGEN_SECRET_FILE"] = os.path.join(run_dir, "secret")
        _write_private(os.path.join(run_dir, "env"), json.dumps(env), exclusive=True)
        node = {"rank": rank, "run": run, "command": command, "workdir": workdir, "inject": go.get("inject") or []}
        _write_private(os.path.join(run_dir, "node.json"), json.dumps(node), exclusive=True)
        if source is None:
            with open(os.path.abspath(__file__)) as fh:
                source = fh.read()
        _write_private(os.path.join(run_dir, "kgen_entrypoint.py"), source, exclusive=True)
    except OSError as exc:
        _reply({"started": False, "error": f"cannot create the run directory {run_dir}: {exc}"})
        return EXIT_CONFIG
    rec = detach(run_dir)
    _reply({"started": True, "dir": run_dir, "pid": rec.get("pid"), "pgid": rec.get("pgid")})
    return EXIT_OK


def _tail_lines(path: str, lines: int, limit: int = 1 << 20) -> list[str]:
    """The last `lines` lines of a file, read backwards in blocks, at most `limit` bytes from its end."""
    if lines <= 0:
        return []
    try:
        with open(path, "rb") as fh:
            end = fh.seek(0, os.SEEK_END)
            data, start = b"", end
            while start > 0 and data.count(b"\n") <= lines and end - start < limit:
                step = min(65536, start, limit - (end - start))
                start -= step
                fh.seek(start)
                data = fh.read(step) + data
    except OSError:
        return []
    text = data.decode("utf-8", "replace").splitlines()
    if start > 0 and text:
        text = text[1:]  # the first line read may be cut
    return text[-lines:]


def node_state(run_dir: str) -> dict:
    """--state: this node's run state as one JSON object (what `kgen status` reads from every host)."""
    out: dict = {"dir": run_dir, "host": socket.gethostname()}
    if not os.path.isdir(run_dir):
        out["missing"] = True
        return out
    pid = _read_json(os.path.join(run_dir, "pid"))
    child = _read_json(os.path.join(run_dir, "child"))
    out["pid"] = pid
    out["alive"] = _same_process(pid) is not None
    child_state = _same_process(child)
    out["child"] = dict(child or {}, state=child_state)
    out["exit"] = _read_json(os.path.join(run_dir, "exit"))
    out["stopping"] = os.path.exists(os.path.join(run_dir, "stopping"))
    node = _read_json(os.path.join(run_dir, "node.json")) or {}
    out["rank"] = node.get("rank")
    try:
        out["log_size"] = os.path.getsize(os.path.join(run_dir, "log"))
    except OSError:
        out["log_size"] = 0
    failed = isinstance(out["exit"], dict) and out["exit"].get("code") not in (0, EXIT_STOPPED)
    out["tail"] = _tail_lines(os.path.join(run_dir, "log"), STATE_TAIL_FAILED if failed else STATE_TAIL, 256 << 10)
    out["events"] = _tail_lines(os.path.join(run_dir, "events"), STATE_EVENTS, 256 << 10)
    return out


def print_log(run_dir: str, tail: int | None, follow: bool) -> int:
    """--log: the node's log (the last `tail` lines); --follow: then every new line until the node ended."""
    path = os.path.join(run_dir, "log")
    if not os.path.isdir(run_dir):
        fatal(EXIT_CONFIG, f"no run directory {run_dir} on this host")
    out = sys.stdout.buffer
    pos = 0
    if tail is not None:
        lines = _tail_lines(path, tail, 64 << 20)
        out.write("".join(line + "\n" for line in lines).encode("utf-8", "replace"))
        out.flush()
        try:
            pos = os.path.getsize(path)
        except OSError:
            pos = 0
    partial = b""
    while True:
        ended = os.path.exists(os.path.join(run_dir, "exit")) or not _same_process(
            _read_json(os.path.join(run_dir, "pid"))
        )
        try:
            with open(path, "rb") as fh:
                fh.seek(pos)
                data = fh.read(4 << 20)
        except OSError:
            data = b""
        pos += len(data)
        if data:
            whole, _, partial = (partial + data).rpartition(b"\n")
            if whole:
                out.write(whole + b"\n")
                out.flush()
            continue
        if not follow or ended:
            break
        time.sleep(0.2)
    if partial:
        out.write(partial + b"\n")
    out.flush()
    return EXIT_OK


def stop_node(run_dir: str, grace: float, interrupt: bool, group_wait: float) -> dict:
    """--stop-node: end every process of this node. With `interrupt`, first the deliberate group stop
    (SIGINT to the node's entrypoint: the group stop); every node then waits up to `group_wait` s for the
    group to end by itself; then SIGTERM to the entrypoint (it stops torchrun, which stops the workers),
    SIGTERM to whatever is left after ORDERLY_STOP s (with SIGCONT, for a frozen tree), SIGKILL at
    `grace` s; verified by a /proc scan of the run's marker. Idempotent."""
    t0 = time.monotonic()
    out: dict = {"dir": run_dir, "host": socket.gethostname()}
    if not os.path.isdir(run_dir):
        out.update(missing=True, left=[])
        return out
    try:
        _write_private(os.path.join(run_dir, "stopping"), _utc_stamp(), exclusive=True)
    except FileExistsError:
        pass
    pid = _read_json(os.path.join(run_dir, "pid")) or {}
    sid = pid.get("sid") if _same_process(pid) else None

    def left() -> list[int]:
        return run_processes(run_dir, sid)

    procs = left()
    out["found"] = len(procs)
    if not proc_is_ours() and isinstance(pid.get("pgid"), int):
        # a sandbox without its own /proc: the supervisor's process group is all that can be reached
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(pid["pgid"], sig)
            except OSError:
                break
            time.sleep(min(grace, 5.0) if sig == signal.SIGTERM else 0)
        out.update(steps=["SIGTERM process group (no /proc of this PID namespace)"], left=[], unverified=True)
        return out
    if not procs:
        out.update(already=True, left=[], took=round(time.monotonic() - t0, 3))
        return out
    steps = []
    child = _read_json(os.path.join(run_dir, "child"))
    supervisor = pid.get("pid") if sid else None

    def wait_until(t: float) -> list[int]:
        procs = left()
        while procs and time.monotonic() < t:
            time.sleep(0.05)
            procs = left()
        return procs

    if interrupt and _same_process(child):
        os.kill(child["pid"], signal.SIGINT)  # type: ignore[index]  # the deliberate group stop (the group stop every node joins)
        steps.append("SIGINT (group stop)")
    if group_wait > 0:  # every node gives the group stop this long to end it
        procs = wait_until(t0 + min(group_wait, grace))
        if not procs and not steps:
            steps.append("ended by the group stop")
    if procs and _same_process(child):
        # the orderly way first: the entrypoint stops torchrun, which stops the workers
        _signal_all([child["pid"]], signal.SIGTERM)  # type: ignore[index]
        _signal_all(procs, signal.SIGCONT)  # a frozen (SIGSTOPped) tree acts on signals only once continued
        steps.append("SIGTERM entrypoint")
        procs = wait_until(min(time.monotonic() + ORDERLY_STOP, t0 + grace))
    if procs:
        _signal_all([p for p in procs if p != supervisor], signal.SIGTERM)
        _signal_all(procs, signal.SIGCONT)
        steps.append("SIGTERM all")
        procs = wait_until(t0 + grace)
    if procs:
        _signal_all(procs, signal.SIGKILL)
        steps.append("SIGKILL")
        procs = wait_until(time.monotonic() + 5.0)
    if not os.path.exists(os.path.join(run_dir, "exit")) and not procs:
        # the supervisor was killed before it could write it
        rec = {"code": 128 + 9, "reason": "killed by kgen stop", "time": _utc_stamp(), "restarts": None}
        _record(os.path.join(run_dir, "exit"), json.dumps(rec))
    out.update(steps=steps, left=procs, took=round(time.monotonic() - t0, 3))
    return out


def remove_node(run_dir: str) -> dict:
    """--remove-node: delete this node's run directory (and the run's folder once empty), unless it still runs."""
    import shutil

    out: dict = {"dir": run_dir, "host": socket.gethostname()}
    if not os.path.isdir(run_dir):
        out["missing"] = True
        return out
    if not os.path.basename(run_dir).startswith("node") or not os.path.isfile(os.path.join(run_dir, "node.json")):
        out["error"] = f"{run_dir} is not a kgen node run directory: not removed"
        return out
    pid = _read_json(os.path.join(run_dir, "pid")) or {}
    left = run_processes(run_dir, pid.get("sid") if _same_process(pid) else None)
    if left:
        out["error"] = f"{len(left)} process(es) of the run still alive: not removed (kgen stop first)"
        return out
    shutil.rmtree(run_dir, ignore_errors=True)
    root = os.path.dirname(run_dir)
    try:
        if set(os.listdir(root)) <= {"launch.json"}:  # the run's last node on this host
            shutil.rmtree(root, ignore_errors=True)
    except OSError:
        pass  # another node of the run on this host removed it just now
    out["removed"] = not os.path.exists(run_dir)
    return out


def run_dir_verb(args: list[str]) -> int:
    """--run-dir DIR (--state | --log [--tail N] [--follow] | --stop-node [--grace S] [--interrupt]
    [--group-wait S] | --remove-node | --detach -- COMMAND...)."""
    if len(args) < 2:
        fatal(EXIT_CONFIG, "--run-dir needs a directory and a verb (--state, --log, --stop-node, --detach)")
    run_dir, verb, rest = os.path.abspath(args[0]), args[1], args[2:]
    opts: dict = {"tail": None, "follow": False, "grace": 10.0, "interrupt": False, "group_wait": 0.0}
    command: list[str] = []
    i = 0
    while i < len(rest):
        arg = rest[i]
        if arg == "--":
            command = rest[i + 1 :]
            break
        if arg in ("--follow", "--interrupt"):
            opts[arg[2:]] = True
            i += 1
            continue
        if arg in ("--tail", "--grace", "--group-wait") and i + 1 < len(rest):
            try:
                value = float(rest[i + 1])
            except ValueError:
                fatal(EXIT_CONFIG, f"{arg} needs a number, got {rest[i + 1]!r}")
            opts[arg.lstrip("-").replace("-", "_")] = int(value) if arg == "--tail" else value
            i += 2
            continue
        fatal(EXIT_CONFIG, f"--run-dir: unknown option {arg!r}")
    if verb == "--state":
        _reply(node_state(run_dir))
        return EXIT_OK
    if verb == "--log":
        return print_log(run_dir, opts["tail"], opts["follow"])
    if verb == "--stop-node":
        _reply(stop_node(run_dir, opts["grace"], opts["interrupt"], opts["group_wait"]))
        return EXIT_OK
    if verb == "--remove-node":
        _reply(remove_node(run_dir))
        return EXIT_OK
    if verb == "--stacks":
        _reply(dict(stacks_answer(os.path.join(run_dir, "hang")), dir=run_dir))
        return EXIT_OK
    if verb == "--detach":  # by hand: DIR/env (JSON) written beforehand; the command after --
        if not command:
            fatal(EXIT_CONFIG, "--detach needs the training command after --")
        if not os.path.isfile(os.path.join(run_dir, "env")):
            fatal(EXIT_CONFIG, f"{run_dir}/env is missing: write the node's environment there (JSON, mode 0600)")
        node = {"command": command, "workdir": os.getcwd(), "inject": []}
        _write_private(os.path.join(run_dir, "node.json"), json.dumps(node))
        if not os.path.isfile(os.path.join(run_dir, "kgen_entrypoint.py")):
            with open(os.path.abspath(__file__)) as fh:
                _write_private(os.path.join(run_dir, "kgen_entrypoint.py"), fh.read())
        _reply(detach(run_dir))
        return EXIT_OK
    fatal(EXIT_CONFIG, f"--run-dir: unknown verb {verb!r} (--state, --log, --stop-node, --remove-node, --detach)")
    return EXIT_CONFIG
