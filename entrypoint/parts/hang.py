"""The hang watchdog and the training processes' stacks (--stacks)."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import socket
import stat
import sys
import time

from .channel import Signals
from .config import Config
from .header import ABORT_GRACE, EXIT_HANG, Stop, _utc_stamp, emit, log, printable, shown
from .hub import Hub
from .proctree import Child
from .reform import _RANK, _TEXT, FIELDS, REQUIRED, _int
from .torchrun import poll

# --------------------------------------------------------------------------------------------
# Hang watchdog and stacks (docs/entrypoint.md#when-a-run-hangs)
#
# Stacks: every generation the workers get a sitecustomize (first on their PYTHONPATH, in this node's
# hang folder; it then runs the one that was there before) that registers faulthandler on
# STACKS_SIGNAL with a dump file of its own and records the process in <hang>/stacks/<pid>.json. Only
# recorded processes with the recorded start time are ever signalled (the default action would end any
# other). The watchdog (KGEN_HANG_TIMEOUT > 0): progress is a line of a rank (the Pump) or a step a rank
# wrote to KGEN_PROGRESS_FILE (kgen_progress(step), docs); a node tells node 0 its ranks made progress
# (`prog`, at most once per HANG_POLL); node 0 decides for the group: no progress for the timeout ->
# every node dumps and sends its ranks' stacks (`dump` -> `stacks` per rank, `stacked`), node 0 groups
# identical stacks (the odd ones out first), logs the report (HANG_MARK: a JSON line kgen status reads)
# and ends the run: every node exits EXIT_HANG. The size of this section counts twice in a pod's
# ConfigMap (tests/test_size_budget.py): keep it lean; the docs say the rest.
# --------------------------------------------------------------------------------------------

HANG_MARK = "kgen-entrypoint: hang: "
HANG_POLL, DUMP_WAIT, STACKS_WAIT, STACK_FRAMES = 1.0, 2.0, 4.0, 60
STACKS_SIGNAL = signal.SIGRTMIN + 4 if hasattr(signal, "SIGRTMIN") else signal.SIGUSR2
MSG_PROGRESS, MSG_DUMP, MSG_STACKS, MSG_STACKED = "prog", "dump", "stacks", "stacked"  # docs: When a run hangs
_WRAPPERS = {"wrapper", "inner", "wrapped", "fn", "decorate_context", "__call__"}
_FRAME_OK = lambda f: type(f) is list and len(f) == 3 and _TEXT(f[0]) and _int(0)(f[1]) and _TEXT(f[2])  # noqa: E731
FIELDS.update(
    {
        MSG_PROGRESS: {},
        MSG_DUMP: {},
        MSG_STACKS: {
            "rank": (_RANK, REQUIRED),
            "pid": (_int(0), 0),
            "frames": (lambda v: type(v) is list and len(v) <= STACK_FRAMES and all(map(_FRAME_OK, v)), []),
            **{k: (_TEXT, "") for k in ("what", "where", "why", "step")},
        },
        MSG_STACKED: {},
    }
)
SITECUSTOMIZE = r"""import os, sys
def _kgen():
    d, r = os.environ.get("KGEN_HANG_DIR"), os.environ.get("RANK")
    if d and r and os.environ.get("LOCAL_RANK") and not os.environ.get("KGEN_STACKS_PID"):
        try:
            import faulthandler, json, threading
            p, s = os.getpid(), os.path.join(d, "stacks", "%d." % os.getpid())
            sys._kgen_dump = open(s + "txt", "ab", buffering=0)
            faulthandler.register(int(os.environ["KGEN_STACKS_SIGNAL"]), sys._kgen_dump, all_threads=True)
            os.environ["KGEN_STACKS_PID"], os.environ["KGEN_PROGRESS_FILE"] = str(p), os.path.join(d, "progress", r)
            st = open("/proc/self/stat", "rb").read().rsplit(b")", 1)[1].split()[19].decode()
            with open(s + "tmp", "w") as fh:
                json.dump({"rank": int(r), "pid": p, "start": st, "main": threading.get_ident()}, fh)
            os.replace(s + "tmp", s + "json")
        except Exception as e:
            sys.stderr.write("kgen: no stacks on a signal in this process: %s\n" % e)
    import importlib.machinery as m, importlib.util as u
    h = os.path.dirname(os.path.abspath(__file__))
    spec = m.PathFinder.find_spec("sitecustomize", [p for p in sys.path if os.path.abspath(p or ".") != h])
    if spec and spec.loader:
        sys.modules["sitecustomize"] = u.module_from_spec(spec)
        spec.loader.exec_module(sys.modules["sitecustomize"])
_kgen()
"""


def hang_home(env: dict) -> str:
    """This node's hang folder: <run dir>/hang (bare metal, Slurm), else a private one in the temporary folder."""
    if (env.get("KGEN_RUN_DIR") or "").strip():
        return os.path.join(env["KGEN_RUN_DIR"].strip(), "hang")
    import tempfile

    tag = "-".join(x for x in ((env.get("MASTER_PORT") or "").strip(), (env.get("NODE_RANK") or "").strip(),
                               socket.gethostname()) if x)  # fmt: skip
    return os.path.join(tempfile.gettempdir(), f"kgen-hang-{os.getuid()}-{re.sub(r'[^0-9A-Za-z]', '_', tag)}")


def _private_dir(path: str) -> bool:
    try:
        os.makedirs(path, 0o700, exist_ok=True)
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077


def parse_dump(text: str) -> list[tuple[int, list[list]]]:
    """faulthandler's dump: [(thread id, frames innermost first as [file, line, function])]."""
    threads: list[tuple[int, list[list]]] = []
    for line in text.splitlines():
        if line.startswith(("Thread 0x", "Current thread 0x")):
            threads.append((int(line.split("0x", 1)[1].split()[0], 16), []))
        elif line.startswith('  File "') and threads and " in " in line:
            path, _, rest = line[8:].rpartition('", line ')
            num, _, func = rest.partition(" in ")
            if num.isdigit():
                threads[-1][1].append([path, int(num), func])
    return threads


def is_library(path: str) -> bool:
    """A frame of the standard library or of an installed package: not the user's own code."""
    import sysconfig

    libs = {sysconfig.get_paths().get(k, "") for k in ("stdlib", "platstdlib")} - {""}
    return "-packages/" in path or path.startswith("<frozen ") or any(path.startswith(lib + "/") for lib in libs)


def stack_summary(frames: list[list]) -> tuple[str, str]:
    """(what, where) of a stack (innermost frame first): the library call the user's innermost frame is in
    ("queue.get"; decorators skipped) and that frame's file:line."""
    user = next((i for i, f in enumerate(frames) if not is_library(f[0])), len(frames))
    inside = [f for f in frames[:user] if f[2] not in _WRAPPERS and not f[2].startswith("_")] or frames[:user]
    at = frames[user] if user < len(frames) else frames[-1] if frames else None
    if at is None:
        return "", ""
    called = f"{os.path.basename(inside[-1][0]).removesuffix('.py')}.{inside[-1][2]}" if inside else at[2]
    return called, f"{at[0]}:{at[1]}"


def collect_stacks(home: str, wait: float = DUMP_WAIT) -> list[dict]:
    """Every registered training process of this node dumps its stacks: [{rank, pid, frames (main thread,
    innermost first), what, where, why, threads, text}]."""
    sdir, procs = os.path.join(home, "stacks"), []
    for name in sorted(n for n in os.listdir(sdir) if n.endswith(".json")) if os.path.isdir(sdir) else []:
        try:
            with open(os.path.join(sdir, name)) as fh:
                rec = json.load(fh)
            pid, path = int(rec["pid"]), os.path.join(sdir, f"{rec['pid']}.txt")
            with open(f"/proc/{pid}/stat", "rb") as fh:
                if fh.read().rsplit(b")", 1)[1].split()[19].decode() != rec["start"]:
                    continue  # gone, or its PID is another process's now: never signalled
            size = os.path.getsize(path)
            os.kill(pid, STACKS_SIGNAL)
            procs.append([rec, size, path, 0.0, -1])
        except (OSError, ValueError, KeyError, TypeError, IndexError):
            continue
    deadline = time.monotonic() + wait
    while procs and time.monotonic() < deadline:  # every dump written, and not growing for 0.15 s
        time.sleep(0.05)
        now = time.monotonic()
        for p in procs:
            size = os.path.getsize(p[2]) if os.path.exists(p[2]) else p[4]
            p[3], p[4] = (now, size) if size != p[4] else (p[3], size)
        if all(p[4] > p[1] and now - p[3] >= 0.15 for p in procs):
            break
    out = []
    for rec, start, path, _, _ in procs:
        try:
            with open(path, "rb") as fh:
                fh.seek(start)
                text = fh.read(1 << 18).decode("utf-8", "replace")
        except OSError:
            text = ""
        threads = parse_dump(text)
        frames = next((t[1] for t in threads if t[0] == rec.get("main")), threads[-1][1] if threads else [])
        what, where = stack_summary(frames[:STACK_FRAMES])
        why = "" if threads else f"no dump within {wait:g}s (stuck outside Python?)"
        out.append(dict(rank=rec["rank"], pid=rec["pid"], frames=frames[:STACK_FRAMES], what=what, where=where,
                        why=why, threads=len(threads), text=text))  # fmt: skip
    return sorted(out, key=lambda r: (r["rank"], r["pid"]))


def rank_spans(ranks: list[int]) -> str:
    """[0, 1, 2, 5] -> "ranks 0-2, 5"; [7] -> "rank 7"."""
    rs = sorted(set(ranks))
    parts: list[list[int]] = []
    for r in rs:
        if parts and parts[-1][1] == r - 1:
            parts[-1][1] = r
        else:
            parts.append([r, r])
    return ("rank " if len(rs) == 1 else "ranks ") + ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in parts)


def group_stacks(stacks: list[dict], world: int | None = None) -> list[dict]:
    """Identical stacks together, the odd ones out first (`differs`): the groups smaller than the one largest,
    or, the largest tied, those not inside torch.distributed; ranks without a stack are groups of their own."""
    groups: dict = {}
    for s in stacks:
        f = s.get("frames") or []
        g = groups.setdefault(str(f) if f else s.get("why") or "no stack", dict(s, ranks=[], frames=f))
        g["ranks"].append(s["rank"])
    missing = [r for r in range(world or 0) if r not in {s["rank"] for s in stacks}]
    if missing:
        groups[""] = {"ranks": missing, "frames": [], "why": "no stack: not registered"}
    out = [{k: g.get(k) or "" for k in ("what", "where", "why")} | {"ranks": g["ranks"], "frames": g["frames"]}
           for g in groups.values()]  # fmt: skip
    sizes = sorted((len(g["ranks"]) for g in out if g["frames"]), reverse=True) + [0, 0]
    waits = lambda g: any("torch/distributed/" in f[0] for f in g["frames"])  # noqa: E731
    anywait = any(map(waits, out))
    for g in out:  # a tie of the largest: those not waiting inside torch.distributed differ (the others wait)
        tie = not (len(g["ranks"]) < sizes[0] if sizes[0] > sizes[1] else anywait and not waits(g))
        g["differs"] = not g["frames"] or not tie
    return sorted(out, key=lambda g: (not g["differs"], len(g["ranks"]), min(g["ranks"])))


def group_line(g: dict) -> str:
    if not g["frames"]:
        return f"{rank_spans(g['ranks'])}: {g['why']}"
    path, _, line = g["where"].rpartition(":")
    odd = (" (the one that differs)" if len(g["ranks"]) == 1 else " (differs)") if g["differs"] else ""
    return f"{rank_spans(g['ranks'])}: {g['what']} at {os.path.basename(path)}:{line}{odd}"


class Hang:
    """This node's watchdog (module singleton HANG): its ranks' progress; on node 0 the group's."""

    def __init__(self) -> None:
        self.timeout, self.home, self.armed, self.told = 0.0, "", False, 0.0
        self.last = self.reported = self.next_poll = 0.0
        self.files: dict = {}
        self.steps: dict = {}  # rank -> the last step it reported
        self.nodes: dict = {}  # node 0: node rank -> when it last reported progress
        self.remote: dict = {}  # node 0: rank -> its `stacks` message
        self.stacked: set = set()

    def configure(self, env: dict, problems: list[str]) -> float:
        raw = (env.get("KGEN_HANG_TIMEOUT") or "0").strip()
        try:
            self.timeout = float(raw)
            assert self.timeout == 0 or 1 <= self.timeout < math.inf
        except (ValueError, AssertionError):
            self.timeout = 0.0
            problems.append(
                f"KGEN_HANG_TIMEOUT={raw!r} is not 0 or a number of seconds >= 1: set values hang.timeout to the "
                f"seconds without progress after which the run is a hang (e.g. 600), or 0 (off)"
            )
        return self.timeout

    def worker_env(self, env: dict) -> dict:
        """A generation starts: a fresh hang folder and sitecustomize; the workers' extra environment."""
        self.armed, self.last, self.files, self.steps, self.nodes = bool(self.timeout), time.monotonic(), {}, {}, {}
        home = hang_home(env)
        self.home = home if all(_private_dir(os.path.join(home, d)) for d in ("", "py", "stacks", "progress")) else ""
        if not self.home or (env.get("KGEN_STACKS") or "").strip().lower() in ("0", "off", "false", "no"):
            self.home = ""
            return {}
        for sub in ("stacks", "progress"):
            for name in os.listdir(os.path.join(home, sub)):
                try:
                    os.unlink(os.path.join(home, sub, name))
                except OSError:
                    pass
        with open(os.path.join(home, "py", "sitecustomize.tmp"), "w") as fh:
            fh.write(SITECUSTOMIZE)
        os.replace(os.path.join(home, "py", "sitecustomize.tmp"), os.path.join(home, "py", "sitecustomize.py"))
        path = os.path.join(home, "py") + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        return {"KGEN_HANG_DIR": home, "KGEN_STACKS_SIGNAL": str(int(STACKS_SIGNAL)), "PYTHONPATH": path}

    def saw(self, prefix: str) -> None:
        self.last = time.monotonic()  # the Pump wrote a line of a rank: progress

    def poll(self, now: float) -> None:
        """Progress files (kgen_progress(step)) changed since the last look."""
        if now < self.next_poll or not self.home:
            return
        self.next_poll = now + HANG_POLL
        try:
            for e in os.scandir(os.path.join(self.home, "progress")):
                key = (e.stat().st_mtime_ns, e.stat().st_size)
                if self.files.get(e.name) != key and e.name.isdigit():
                    self.files[e.name], self.last = key, now
                    with open(e.path, "rb") as fh:
                        self.steps[int(e.name)] = printable(fh.read(40).decode("utf-8", "replace").strip())
        except OSError:
            pass

    def report(self, spoke, now: float) -> None:
        """A node (not node 0): tell node 0 its ranks made progress, at most once per HANG_POLL."""
        if self.armed:
            self.poll(now)
            if self.last > self.reported and now - self.told >= HANG_POLL:
                spoke.conn.send({"t": MSG_PROGRESS})
                self.reported, self.told = self.last, now

    def silent(self, now: float) -> float:
        return now - max([self.last, *self.nodes.values()])

    def due(self, now: float) -> bool:
        """Node 0 (or a single node): no rank of the group made progress for the timeout."""
        if self.armed:
            self.poll(now)
        return self.armed and self.silent(now) >= self.timeout

    def from_node(self, node: int, msg: dict) -> None:
        if msg["t"] == MSG_PROGRESS:
            self.nodes[node] = time.monotonic()
        elif msg["t"] == MSG_STACKS:
            self.remote[msg["rank"]] = msg
        else:
            self.stacked.add(node)

    def local(self) -> list[dict]:
        """This node's ranks' stacks, each logged (header, then its main thread's frames)."""
        stacks = collect_stacks(self.home) if self.home else []
        for s in stacks:
            log(f"stack of rank {s['rank']} (pid {s['pid']}, {s['threads']} thread(s)): {s['what']} at {s['where']}")
            for f in s["frames"]:
                log(f"  {f[0]}:{f[1]} in {f[2]}")
        return stacks

    def cleanup(self) -> None:
        """The node ends: its hang folder goes (a run directory's stays for kgen stop --rm)."""
        if self.home and not os.environ.get("KGEN_RUN_DIR"):
            import shutil

            shutil.rmtree(self.home, ignore_errors=True)

    def dump_for(self, spoke) -> None:
        """A node: node 0 found a hang and asks for this node's stacks."""
        log("node 0 found no progress for the hang timeout: sending this node's stacks")
        for s in self.local():  # bounded and printable: the gate of node 0 drops a connection for less
            frames = [[shown(f[0], 500), f[1], shown(f[2], 100)] for f in s["frames"]]
            wire = {k: shown(s[k], 600) for k in ("what", "where", "why")} | {"step": self.steps.get(s["rank"], "")}
            spoke.conn.send({"t": MSG_STACKS, "rank": s["rank"], "pid": s["pid"], "frames": frames, **wire})
        spoke.conn.send({"t": MSG_STACKED})
        spoke.conn.flush(1.0)


HANG = Hang()


def end_hang(cfg: Config, child: Child, hub: Hub | None = None, sigs: Signals | None = None) -> Stop:
    """No rank of the group made progress for the timeout (node 0, or a single node): every rank's stacks,
    grouped, into the log and the HANG_MARK line, then the run ends as a hang (every node exits EXIT_HANG)."""
    silent, HANG.armed, HANG.remote, HANG.stacked = HANG.silent(time.monotonic()), False, {}, set()
    log(
        f"no rank made progress for {silent:.1f}s (KGEN_HANG_TIMEOUT={HANG.timeout:g}s): collecting every rank's stacks"
    )
    for conn in list(hub.peers.values()) if hub else []:
        conn.send({"t": MSG_DUMP})
    stacks, deadline = HANG.local(), time.monotonic() + STACKS_WAIT
    while hub and sigs and not set(hub.peers) <= HANG.stacked and time.monotonic() < deadline and not sigs.pending:
        poll(hub.sel, sigs, hub)
        hub.tick(time.monotonic())
    groups = group_stacks(stacks + list(HANG.remote.values()), cfg.world_size)
    steps = {r: m["step"] for r, m in HANG.remote.items() if m["step"]} | HANG.steps
    lead = next((g for g in groups if g["differs"] and g["frames"]), groups[0])
    report = {"timeout": HANG.timeout, "silent": round(silent, 1), "world": cfg.world_size, "time": _utc_stamp(),
              "headline": f"no rank made progress for {silent:.0f}s; {group_line(lead)}", "steps": steps,
              "groups": [dict(g, frames=g["frames"][:8]) for g in groups]}  # fmt: skip
    log(f"HANG: {report['headline']}")
    for g in groups:
        log(f"hang report: {group_line(g)}")
    if steps:
        log("hang report: last steps reported: " + ", ".join(f"rank {k}: {v}" for k, v in sorted(steps.items())))
    emit(sys.stderr, f"{HANG_MARK}{json.dumps(report, sort_keys=True)}\n")
    if hub is not None:
        hub.end(EXIT_HANG, f"hang: {report['headline']}")
    child.kill_tree(ABORT_GRACE)
    return Stop(EXIT_HANG, f"hang: {report['headline']}")


def stacks_answer(home: str) -> dict:
    """--stacks (kubectl exec) and --run-dir DIR --stacks: this node's ranks' stacks, one JSON line."""
    stacks = collect_stacks(home)
    note = "" if stacks else f"no training process of this node registered for stacks in {home}"
    return {"host": socket.gethostname(), "ranks": [dict(s, text=s["text"][-65536:]) for s in stacks], "note": note}
