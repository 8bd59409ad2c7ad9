"""The fault matrix as tests: one test per row of faultmatrix.py, the table docs/entrypoint.md shows.

Rows of one mechanism share one run (`group`): the run is made once per session (real supervisors, the real
entrypoint, real torchrun and gloo workers: faultrun.py) and each row checks its own observation. A row whose
run does not come out as its row says fails; a row no run observes yet fails too, saying so."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest
from faultmatrix import Cell, cells, markdown
from faultrun import Run

DOC = Path(__file__).resolve().parents[2] / "docs" / "entrypoint.md"
FAST = {"KGEN_REPLACEMENT_TIMEOUT": "8", "KGEN_RDZV_TIMEOUT": "8", "KGEN_MASTER_WAIT_TIMEOUT": "8"}
STOP_FOR = 10.0


def test_the_doc_table_is_the_matrix():
    text = DOC.read_text()
    begin, end = "<!-- fault matrix: tests/entrypoint/faultmatrix.py -->\n", "<!-- end of the fault matrix -->"
    assert begin in text and end in text, "docs/entrypoint.md has no fault matrix block"
    shown = text.split(begin, 1)[1].split(end, 1)[0]
    assert shown == markdown(), "docs/entrypoint.md's fault matrix differs from tests/entrypoint/faultmatrix.py"


def test_every_cell_is_there_once():
    ids = [c.id for c in cells()]
    assert len(ids) == len(set(ids)) == 4 * 2 * 3 * 4 + 11


# -- observations: what a group's run showed, per row id ------------------------------------------------------
class Seen:
    """One row's observation: the run's final state, the ranks its root cause names, the victim's exit code
    (or 'replaced' codes), whether the run re-formed, and how long the verdict took."""

    def __init__(self, state: str, named: list[int], exit: str, outcome: str, took: float = 0.0) -> None:
        self.state, self.named, self.exit, self.outcome, self.took = state, named, exit, outcome, took

    def __repr__(self) -> str:
        return f"Seen({self.state}, named {self.named}, exit {self.exit}, {self.outcome}, {self.took:.1f}s)"


_SEEN: dict[str, Seen | Exception] = {}
_DONE: set[str] = set()


def _tmp(factory) -> Path:
    return factory.mktemp("faults")


def _final(run: Run, timeout: float) -> tuple[dict, object]:
    codes = run.wait(timeout)
    assert None not in codes.values(), f"the run did not end within {timeout}s: {codes}\n{run.logs()}"
    return codes, run.verdict()


def _named(v) -> list[int]:
    rc = v.root_cause
    return sorted(set(rc.node_ranks or rc.ranks)) if rc else []


def _replaced(run: Run, rank: int) -> list[int]:
    return [int(c) for c in re.findall(r"entrypoint ended with code (\d+): replacing it", run.log(rank))]


def _in_training(run: Run, ranks, gen: int, steps: int = 2) -> None:
    rx = re.compile(rf"generation {gen}: starting")

    def ok() -> bool:
        return all(rx.search(run.log(r)) and _steps_after(run.log(r), gen) >= steps for r in ranks)

    run.wait_for(ok, 120)


def _steps_after(log: str, gen: int) -> int:
    part = log.split(f"generation {gen}: starting", 1)
    return len(re.findall(r"KGEN_EVT \S+ rank=\d+ step ", part[1])) if len(part) == 2 else 0


# -- the groups -------------------------------------------------------------------------------------------------
def _entry_formation(tmp: Path, node: str) -> dict[str, Seen]:
    """The victim alone, forming: its entrypoint SIGKILLed, then SIGTERMed (each replaced), then SIGSTOPped
    10 s together with its supervisor; then the other node starts and the run must succeed."""
    victim = 0 if node == "node 0" else 1
    other = 1 - victim
    run = Run(tmp, nodes=2, steps=6, sleep=0.2)
    out: dict[str, Seen] = {}
    tag = "n0" if victim == 0 else "peer"
    try:
        run.start(victim)
        waiting = "liveness channel listening" if victim == 0 else "waiting for node 0 at"
        run.wait_for(lambda: run.log(victim).count(waiting) >= 1, 60)
        absent = run.pid(victim, "torchrun") is None
        for sig, name in ((signal.SIGKILL, "sigkill"), (signal.SIGTERM, "sigterm")):
            n = len(_replaced(run, victim))
            run.signal(victim, "entrypoint", sig)
            run.wait_for(lambda n=n: len(_replaced(run, victim)) > n, 30)
            run.wait_for(lambda n=n: run.log(victim).count(waiting) >= n + 2, 30)
            out[f"entrypoint-{tag}-{name}-formation"] = Seen("", [], f"{_replaced(run, victim)[-1]}, replaced", "")
        for kind in ("entrypoint", "supervisor"):
            run.signal(victim, kind, signal.SIGSTOP)
        time.sleep(STOP_FOR)
        for kind in ("supervisor", "entrypoint"):
            run.signal(victim, kind, signal.SIGCONT)
        run.start(other)
        codes, v = _final(run, 120)
        for cid in list(out):
            out[cid] = Seen(v.state, _named(v), out[cid].exit, "succeeds" if v.state == "succeeded" else v.state)
        for kind in ("entrypoint", "supervisor"):
            out[f"{kind}-{tag}-sigstop-formation"] = Seen(
                v.state, _named(v), str(codes[victim]), "succeeds" if v.state == "succeeded" else v.state
            )
        if absent:
            _ABSENT.add(f"{tag}-formation")
        return out
    finally:
        run.cleanup()


_ABSENT: set[str] = set()


def _outcome(v, before: int = 0) -> str:
    if v.state == "succeeded":
        return "re-forms" if v.reformations > before else "succeeds"
    return "fails" if v.state == "failed" else v.state


def _entry_training(tmp: Path, node: str) -> dict[str, Seen]:
    """Training: the victim's entrypoint SIGKILLed (generation 1 follows), SIGTERMed (generation 2), SIGSTOPped
    10 s (dropped, 76 at thaw, generation 3); its supervisor SIGSTOPped 10 s while generation 3 trains."""
    victim = 0 if node == "node 0" else 1
    tag = "n0" if victim == 0 else "peer"
    run = Run(tmp, nodes=2, steps=40, sleep=0.25)
    out: dict[str, Seen] = {}
    try:
        run.start()
        for gen, (sig, name) in enumerate(((signal.SIGKILL, "sigkill"), (signal.SIGTERM, "sigterm"),
                                           (signal.SIGSTOP, "sigstop"))):  # fmt: skip
            _in_training(run, (0, 1), gen)
            t0 = time.monotonic()
            run.signal(victim, "entrypoint", sig)
            if gen == 0:  # the survivor re-forms: no torch process of it is left meanwhile
                other = 1 - victim
                run.wait_for(lambda other=other: "re-forming" in run.log(other), 30)
                while f"generation {gen + 1}: starting" not in run.log(other):
                    if run.pid(other, "torchrun") is None:
                        _ABSENT.add(f"{'n0' if other == 0 else 'peer'}-re-formation")
                        break
                    time.sleep(0.05)
            if sig == signal.SIGSTOP:
                time.sleep(STOP_FOR)
                run.signal(victim, "entrypoint", signal.SIGCONT)
            _in_training(run, (0, 1), gen + 1, steps=1)
            took = time.monotonic() - t0
            out[f"entrypoint-{tag}-{name}-training"] = Seen("", [], f"{_replaced(run, victim)[-1]}, replaced", "", took)
        run.signal(victim, "supervisor", signal.SIGSTOP)
        time.sleep(STOP_FOR)
        run.signal(victim, "supervisor", signal.SIGCONT)
        codes, v = _final(run, 120)
        for cid, seen in out.items():
            outcome = "re-forms" if v.reformations >= 3 else _outcome(v)
            out[cid] = Seen(v.state, _named(v), seen.exit, outcome, seen.took)
        out[f"supervisor-{tag}-sigstop-training"] = Seen(v.state, [], str(codes[victim]), _outcome(v, 3))
        return out
    finally:
        run.cleanup()


def _entry_reformation(tmp: Path, node: str) -> dict[str, Seen]:
    """Re-formation held open: 3 nodes train, node 2's supervisor is frozen and its entrypoint killed, so the
    others re-form and wait. Meanwhile the victim's entrypoint is SIGKILLed, SIGTERMed (each replaced) and
    SIGSTOPped 10 s together with its supervisor; then node 2's supervisor thaws, replaces node 2, and the run
    must re-form and succeed."""
    victim = 0 if node == "node 0" else 1
    tag = "n0" if victim == 0 else "peer"
    run = Run(tmp, nodes=3, steps=12, sleep=0.25)
    out: dict[str, Seen] = {}
    try:
        run.start()
        _in_training(run, (0, 1, 2), 0)
        run.signal(2, "supervisor", signal.SIGSTOP)
        run.signal(2, "entrypoint", signal.SIGKILL)
        run.wait_for(lambda: "re-forming" in run.log(0) and "re-forming" in run.log(1), 30)
        run.wait_for(lambda: run.pid(victim, "torchrun") is None, 30)
        for sig, name in ((signal.SIGKILL, "sigkill"), (signal.SIGTERM, "sigterm")):
            n = len(_replaced(run, victim))
            run.signal(victim, "entrypoint", sig)
            run.wait_for(lambda n=n: len(_replaced(run, victim)) > n, 30)
            run.wait_for(lambda: run.pid(victim, "entrypoint") is not None, 30)
            out[f"entrypoint-{tag}-{name}-re-formation"] = Seen("", [], f"{_replaced(run, victim)[-1]}, replaced", "")
            time.sleep(2.0)  # the replacement joins what is left
        for kind in ("entrypoint", "supervisor"):
            run.signal(victim, kind, signal.SIGSTOP)
        time.sleep(STOP_FOR)
        for kind in ("supervisor", "entrypoint"):
            run.signal(victim, kind, signal.SIGCONT)
        run.signal(2, "supervisor", signal.SIGCONT)
        codes, v = _final(run, 120)
        for cid in list(out):
            out[cid] = Seen(v.state, _named(v), out[cid].exit, _outcome(v))
        for kind in ("entrypoint", "supervisor"):
            out[f"{kind}-{tag}-sigstop-re-formation"] = Seen(v.state, _named(v), str(codes[victim]), _outcome(v))
        return out
    finally:
        try:
            run.signal(2, "supervisor", signal.SIGCONT)
        except (AssertionError, OSError):
            pass
        run.cleanup()


def _sup_lost(tmp: Path, phase: str) -> dict[str, Seen]:
    """The supervisor SIGKILLed / SIGTERMed: its node ends for good. Peers: a 3-node run, node 1's supervisor
    SIGKILLed and node 2's SIGTERMed (node 0 fails, exit 4, naming both); node 0: two 2-node runs (the peer
    fails, exit 3, naming node 0). Formation: the victims wait alone; training: after step 2; re-formation:
    while the group re-forms for a node whose supervisor is held (SIGSTOP) after its entrypoint was killed."""
    out: dict[str, Seen] = {}
    nodes = 4 if phase == "re-formation" else 3
    runs = [Run(tmp, nodes=nodes, steps=40, sleep=0.25, **FAST)]
    runs += [Run(tmp, nodes=3 if phase == "re-formation" else 2, steps=40, sleep=0.25, **FAST) for _ in range(2)]
    plan = [(runs[0], 1, signal.SIGKILL, "peer", "sigkill"), (runs[0], 2, signal.SIGTERM, "peer", "sigterm"),
            (runs[1], 0, signal.SIGKILL, "n0", "sigkill"), (runs[2], 0, signal.SIGTERM, "n0", "sigterm")]  # fmt: skip
    try:
        if phase == "formation":
            runs[0].start(1, 2)
            runs[1].start(0)
            runs[2].start(0)
        else:
            for run in runs:
                run.start()
            for run in runs:
                _in_training(run, range(run.nodes), 0)
        if phase == "re-formation":
            for run in runs:
                held = run.nodes - 1
                run.signal(held, "supervisor", signal.SIGSTOP)
                run.signal(held, "entrypoint", signal.SIGKILL)
            for run in runs:
                run.wait_for(lambda run=run: "re-forming" in run.log(0) or "re-forming" in run.log(1), 30)
        t0 = time.monotonic()
        for run, rank, sig, _tag, _name in plan:
            if phase == "formation":
                waiting = "liveness channel listening" if rank == 0 else "waiting for node 0"
                run.wait_for(lambda run=run, rank=rank, w=waiting: w in run.log(rank), 60)
            entry = run.pid(rank, "entrypoint")
            run.signal(rank, "supervisor", sig)
            assert entry is not None
            run.wait_for(lambda e=entry: _gone(e), 15)  # the node dies with its supervisor
        if phase == "formation":
            runs[0].start(0)
            runs[1].start(1)
            runs[2].start(1)
        if phase == "re-formation":  # the held node comes back: its replacement joins what is left
            for run in runs:
                run.signal(run.nodes - 1, "supervisor", signal.SIGCONT)
        for run, rank, _sig, tag, name in plan:
            codes, v = _final(run, 60)
            ex = run.exits()[rank]
            exit_code = str(ex["code"]) if ex else "none"
            out[f"supervisor-{tag}-{name}-{phase}"] = Seen(v.state, _named(v), exit_code, _outcome(v),
                                                           time.monotonic() - t0)  # fmt: skip
        return out
    finally:
        for run in runs:
            for rank in range(run.nodes):
                try:
                    run.signal(rank, "supervisor", signal.SIGCONT)
                except (AssertionError, OSError):
                    pass
            run.cleanup()


def _gone(pid: int) -> bool:
    from faultrun import ep

    st = ep._proc_stat(pid)
    return st is None or st[0] in ("Z", "X")


def _torch_signal(tmp: Path, cid: str) -> dict[str, Seen]:
    kind, tag, name = cid.split("-")[:3]
    victim = 0 if tag == "n0" else 1
    sig = signal.SIGKILL if name == "sigkill" else signal.SIGTERM
    run = Run(tmp, nodes=2, steps=40, sleep=0.25)
    try:
        run.start()
        _in_training(run, (0, 1), 0)
        t0 = time.monotonic()
        run.signal(victim, kind, sig)
        codes, v = _final(run, 60)
        ex = run.exits()[victim]
        return {cid: Seen(v.state, _named(v), str(ex["code"]) if ex else "none", _outcome(v), time.monotonic() - t0)}
    finally:
        run.cleanup()


def _torch_stops(tmp: Path) -> dict[str, Seen]:
    """SIGSTOP 10 s of torch processes while training: the peer's worker with node 0's torchrun, then the
    peer's torchrun with node 0's worker; the run must end as an undisturbed one."""
    run = Run(tmp, nodes=2, steps=24, sleep=0.25)
    try:
        run.start()
        _in_training(run, (0, 1), 0)
        for pair in (((1, "worker"), (0, "torchrun")), ((1, "torchrun"), (0, "worker"))):
            pids = [run.pid(r, k) for r, k in pair]
            for (r, k), pid in zip(pair, pids, strict=True):
                assert pid is not None, f"no {k} on node {r}"
                run.signal(r, k, signal.SIGSTOP)
            time.sleep(STOP_FOR)
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
        codes, v = _final(run, 120)
        said = run.log(1).split("torchrun finished successfully", 1)
        if codes[1] == 0 and len(said) == 2 and said[1].count("\n") <= 3:  # the peer ended as it said done
            _ABSENT.add("peer-shutdown")
        seen = Seen(v.state, _named(v), "0" if set(codes.values()) == {0} else str(codes), _outcome(v))
        return {f"{k}-{t}-sigstop-training": seen for k in ("torchrun", "worker") for t in ("n0", "peer")}
    finally:
        run.cleanup()


def _shutdown(tmp: Path) -> dict[str, Seen]:
    """Node 0 has no shutdown phase of its own: rank 1 lingers 10 s after its last step, and node 0's torchrun
    (torchrun's exit barrier) finishes only with it; node 0's entrypoint then ends at once with the others."""
    run = Run(tmp, nodes=2, steps=4, sleep=0.2, KGEN_TEST_LINGER_RANK="1", KGEN_TEST_LINGER="10")
    try:
        run.start()
        codes, v = _final(run, 120)
        stamps = {}
        for r in (0, 1):
            for line in run.log(r).splitlines():
                if "torchrun finished successfully" in line or "KGEN_EVT" in line and " done" in line:
                    stamps[(r, "done" if "KGEN_EVT" in line else "finished")] = _utc(line.split(" ", 1)[0])
        waited = stamps[(0, "finished")] - stamps[(0, "done")]
        together = abs(stamps[(0, "finished")] - stamps[(1, "finished")])
        assert codes == {0: 0, 1: 0} and v.state == "succeeded", (codes, v.headline)
        assert waited >= 8.0 and together < 2.0, (waited, together, run.logs())
        _ABSENT.add("n0-shutdown")
        return {}
    finally:
        run.cleanup()


def _utc(stamp: str) -> float:
    from datetime import datetime

    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").timestamp()


def _protocol(tmp: Path) -> dict[str, Seen]:
    """The extra faults of the protocol and the run folder, each through its test in test_faults.py (the
    mechanism's own reproduction) plus a 1 MiB line without a newline through the supervisor."""
    import pytest as _pytest
    import test_faults as tf

    out: dict[str, Seen | Exception] = {}

    def attempt(cid: str, seen: Seen, fn, *args) -> None:
        try:
            fn(*args)
            out[cid] = seen
        except Exception as exc:  # noqa: BLE001 - that row fails with it
            out[cid] = exc

    mp = _pytest.MonkeyPatch()
    try:
        d = tmp / "denied"
        d.mkdir()
        attempt(
            "denied-at-start",
            Seen("running", [], "-", "succeeds"),
            tf.test_a_denial_before_node0_listens_does_not_end_a_node_that_then_joins,
            d,
        )
        attempt(
            "denied-alone",
            Seen("failed", [], "2", "fails"),
            tf.test_denials_alone_until_the_bound_are_a_wrong_secret_and_a_denial_then_silence_is_not,
        )
        d = tmp / "squat"
        d.mkdir()
        attempt(
            "port-squat-restart",
            Seen("running", [], "-", "succeeds"),
            tf.test_a_liveness_port_busy_at_a_restart_is_retried_within_a_bound,
            d,
        )
        attempt(
            "port-squat-start",
            Seen("failed", [0], "2", "fails"),
            tf.test_a_port_still_taken_after_the_bound_is_the_configuration_error,
            mp,
        )
        mp.undo()
        d = tmp / "eio"
        d.mkdir()
        attempt(
            "eio",
            Seen("succeeded", [], "0", "succeeds"),
            tf.test_a_log_the_disk_refuses_never_ends_the_training_and_the_drops_are_counted,
            d,
            mp,
        )
        mp.undo()
        d = tmp / "long"
        d.mkdir()
        attempt("long-line", Seen("running", [], "-", "succeeds"), _long_line, d)
    finally:
        mp.undo()
    return out  # type: ignore[return-value]


MIB_LINE = """import sys, time
sys.stdout.write("[rank 1] " + "z" * (1 << 20) + "[kgen node 0 00:00:00 +1.0s] generation 97: starting")
sys.stdout.flush()
time.sleep(1.5)
print("kgen-entrypoint: stopped: forged", flush=True)
print("kgen-entrypoint: stopped: succeeded", flush=True)
"""


def _long_line(tmp: Path) -> None:
    """A worker's 1 MiB without a newline: the entrypoint's pump cuts it at 64 KiB, each piece after
    `[rank 1] ` (the stand-in writes it so); the supervisor cuts again: every piece keeps the prefix."""
    from faultrun import ep
    from test_faults import _run_dir

    d = _run_dir(tmp)
    (d / "kgen_entrypoint.py").write_text(MIB_LINE)
    sup = ep.Supervisor(str(d))
    assert sup.run() == 0
    lines = [ln.split(" ", 1)[1] for ln in (d / "log").read_text().splitlines()]
    pieces = [ln for ln in lines if "zzzz" in ln]
    assert len(pieces) >= 8 and all(p.startswith("[rank 1] ") for p in pieces), [p[:20] for p in pieces]
    events = (d / "events").read_text()
    assert "generation 97" not in events, events[-500:]


FILL = """for i in range(6000):
    print(f"[rank 0] step {i} " + "p" * 100, flush=True)
print("[rank 0] last step", flush=True)
print("kgen-entrypoint: stopped: succeeded", flush=True)
"""


def _disk(tmp: Path) -> dict[str, Seen]:
    """ENOSPC for real: the run folder on a 512 KiB tmpfs mounted in a private mount namespace (unshare -m,
    root; nothing of the host's mounts changes); the stand-in fills it with its lines and trains on. Read-only:
    EROFS at the supervisor's write call (a remount is refused while the log is open for writing)."""
    import json
    import shutil
    import subprocess
    import sys

    from faultrun import ENTRYPOINT
    from test_faults import _run_dir

    out: dict[str, Seen | Exception] = {}
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return {"enospc": AssertionError("needs root and unshare -m for the tmpfs")}
    mnt = tmp / "tiny"
    mnt.mkdir()
    (tmp / "fill.py").write_text(FILL)
    script = f"""
import json, os, sys, importlib.util as u
s = u.spec_from_file_location('ep', {str(ENTRYPOINT)!r}); ep = u.module_from_spec(s); s.loader.exec_module(ep)
d = {str(mnt / "node0")!r}
os.makedirs(d, mode=0o700)
open(os.path.join(d, "node.json"), "w").write(json.dumps({{"rank": 0, "command": ["t"]}}))
open(os.path.join(d, "env"), "w").write("{{}}")
open(os.path.join(d, "kgen_entrypoint.py"), "w").write(open({str(tmp / "fill.py")!r}).read())
sup = ep.Supervisor(d); sup.write_pid()
code = sup.run()
ex = json.load(open(os.path.join(d, "exit")))
print(json.dumps({{"code": code, "exit": ex, "files": sorted(os.listdir(d))}}))
"""
    cmd = ["unshare", "-m", "--propagation", "private", "sh", "-c",
           f"mount -t tmpfs -o size=512k kgen-faults {mnt} && exec {sys.executable} -c \"$0\"", script]  # fmt: skip
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        got = json.loads(res.stdout.strip().splitlines()[-1])
        assert got["code"] == 0 and got["exit"]["code"] == 0, got
        assert got["exit"].get("dropped", 0) > 0 and got["exit"]["drop_error"].startswith("ENOSPC"), got
        assert not [f for f in got["files"] if ".tmp" in f], got
        out["enospc"] = Seen("succeeded", [], "0", "succeeds")
    except Exception as exc:  # noqa: BLE001
        out["enospc"] = AssertionError(f"{exc}: {locals().get('res') and res.stderr[-2000:]}")
    import pytest as _pytest

    mp = _pytest.MonkeyPatch()
    try:
        from faultrun import ep

        d = _run_dir(tmp / "ro") if (tmp / "ro").mkdir() is None else None
        assert d is not None
        sup = ep.Supervisor(str(d))
        sup.write_pid()
        real, calls = os.write, [0]

        def ro(fd, data):  # the folder turns read-only after the 5th line, for good
            if fd in (sup.logf, sup.eventsf):
                calls[0] += 1
                if calls[0] > 5:
                    raise OSError(30, "Read-only file system")
            return real(fd, data)

        mp.setattr(ep.os, "write", ro)
        mp.setattr(ep, "_write_private", lambda *a, **k: (_ for _ in ()).throw(OSError(30, "Read-only file system")))
        mp.setattr(ep, "RECORD_BOUND", 0.0)
        code = sup.run()
        mp.undo()
        ex = json.loads((d / "exit").read_text())
        assert code == 0 and ex["code"] == 0 and ex["dropped"] > 0 and ex["drop_error"].startswith("EROFS"), ex
        out["read-only"] = Seen("succeeded", [], "0", "succeeds")
    except Exception as exc:  # noqa: BLE001
        out["read-only"] = exc
    finally:
        mp.undo()
    return out  # type: ignore[return-value]


def _clock(tmp: Path) -> dict[str, Seen]:
    """The wall clock steps +1 h, then -1 h (injected: the module's time.time), while node 0 and a node
    exchange heartbeats over a real socket for 3 s: no loss, since every bound is on time.monotonic."""
    import selectors
    import socket

    from faultrun import ep
    from test_entrypoint_fast import BASE

    out: dict[str, Seen | Exception] = {}
    for cid, step in (("clock-plus-1h", 3600.0), ("clock-minus-1h", -3600.0)):
        try:
            c0 = ep.load_config({**BASE, "NNODES": "2", "NODE_RANK": "0", "MASTER_ADDR": "127.0.0.1"})
            c1 = ep.load_config({**BASE, "NNODES": "2", "NODE_RANK": "1", "MASTER_ADDR": "127.0.0.1"})
            s0, s1 = selectors.DefaultSelector(), selectors.DefaultSelector()
            hub = ep.Hub(c0, s0)
            srv = socket.create_server(("127.0.0.1", 0))
            a = socket.create_connection(srv.getsockname())
            b, _ = srv.accept()
            srv.close()
            conn = ep.Conn(b)
            conn.register(s0)
            conn.rank, conn.session = 1, ep.Session(b"k" * 64, "n", "c", "server")
            hub.peers[1], hub.lasts[1], hub.state = conn, -1, "training"
            link = ep.Conn(a)
            link.session = ep.Session(b"k" * 64, "n", "c", "client")
            spoke = ep.Spoke(c1, s1, link)
            real = ep.time.time
            ep.time.time = lambda real=real, step=step: real() + step  # type: ignore[assignment]
            try:
                end = time.monotonic() + 3.0
                while time.monotonic() < end:
                    for sel in (s0, s1):
                        for key, _ in sel.select(0.05):
                            kind, obj = key.data
                            hub.on_event(key.data) if sel is s0 else spoke.on_event(key.data)
                    hub.tick(time.monotonic())
                    spoke.tick(time.monotonic())
            finally:
                ep.time.time = real  # type: ignore[assignment]
            assert hub.lost is None and spoke.verdict is None, (hub.lost, spoke.verdict)
            hub.close()
            spoke.close()
            out[cid] = Seen("running", [], "-", "succeeds")
        except Exception as exc:  # noqa: BLE001
            out[cid] = exc
    return out  # type: ignore[return-value]


def _storm(tmp: Path) -> dict[str, Seen]:
    """50 connect+RST per second for 20 s at node 0 (a real entrypoint) while a node is joined and sends
    heartbeats: the node is never lost, no fd error, the log stays within its rate limit."""
    import socket
    import struct
    import subprocess

    from test_entrypoint_fast import Hub, ep

    hub = Hub(tmp, nnodes=3)
    node1 = None
    try:
        log1 = open(tmp / "node1.log", "w")  # noqa: SIM115
        node1 = subprocess.Popen(
            [sys_executable(), str(ep.__file__), "--", "/bin/true"], env={**hub.env, "NODE_RANK": "1"}, stderr=log1
        )
        deadline = time.monotonic() + 30
        while "node 1 joined" not in hub.log():
            assert time.monotonic() < deadline, hub.log()
            time.sleep(0.05)
        t0 = time.monotonic()
        n = 0
        while time.monotonic() - t0 < 20.0:
            try:
                s = socket.create_connection(("127.0.0.1", hub.live), timeout=1)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                s.close()
                n += 1
            except OSError:
                pass
            time.sleep(max(0.0, t0 + n / 50.0 - time.monotonic()))
        time.sleep(1.0)
        said = hub.log()
        assert node1.poll() is None and "node 1" not in said.split("node 1 joined", 1)[1], said[-3000:]
        assert "already registered" not in said and "Traceback" not in said, said[-3000:]
        assert said.count("\n") < 400, f"{said.count(chr(10))} log lines for {n} resets"
        return {"rst-storm": Seen("running", [], "-", "succeeds", float(n))}
    finally:
        if node1 is not None:
            node1.kill()
            node1.wait(10)
        hub.stop()


def sys_executable() -> str:
    import sys

    return sys.executable


GROUPS = {
    "protocol": _protocol,
    "disk": _disk,
    "clock": _clock,
    "storm": _storm,
    "entry-node0-formation": lambda tmp: _entry_formation(tmp, "node 0"),
    "entry-peer-formation": lambda tmp: _entry_formation(tmp, "peer"),
    "entry-node0-training": lambda tmp: _entry_training(tmp, "node 0"),
    "entry-peer-training": lambda tmp: _entry_training(tmp, "peer"),
    "entry-node0-re-formation": lambda tmp: _entry_reformation(tmp, "node 0"),
    "entry-peer-re-formation": lambda tmp: _entry_reformation(tmp, "peer"),
    "sup-lost-formation": lambda tmp: _sup_lost(tmp, "formation"),
    "sup-lost-training": lambda tmp: _sup_lost(tmp, "training"),
    "sup-lost-re-formation": lambda tmp: _sup_lost(tmp, "re-formation"),
    "torch-stops": _torch_stops,
    "shutdown": _shutdown,
}
for _c in cells():
    if _c.group.startswith("torch-") and _c.group != "torch-stops":
        GROUPS[_c.group] = lambda tmp, cid=_c.id: _torch_signal(tmp, cid)


def _observe(group: str, factory) -> None:
    if group in _DONE:
        return
    _DONE.add(group)
    runner = GROUPS.get(group)
    if runner is None:
        return
    try:
        _SEEN.update(runner(_tmp(factory)))
    except Exception as exc:  # noqa: BLE001 - every row of the group fails with it
        _SEEN[group] = exc


def _check(cell: Cell, seen: Seen) -> None:
    assert seen.state == cell.verdict, f"{cell.fault}: the run ended {seen.state}, the matrix says {cell.verdict}"
    if cell.named != "-":
        want = [int(x) for x in re.findall(r"\d+", cell.named)]
        assert set(want) <= set(seen.named), f"{cell.fault}: names {seen.named}, the matrix says {cell.named}"
    if cell.exit not in ("-",):
        assert seen.exit.split(",")[0].strip() == cell.exit.split(",")[0].split()[0].strip() or (
            cell.exit.startswith("none") and seen.exit in ("", "None")
        ), f"{cell.fault}: exit {seen.exit}, the matrix says {cell.exit}"
    assert seen.outcome == cell.outcome, f"{cell.fault}: {seen.outcome}, the matrix says {cell.outcome}"


@pytest.mark.torch
@pytest.mark.parametrize("cell", cells(), ids=lambda c: c.id)
def test_fault(cell: Cell, tmp_path_factory):
    if cell.group == "absent":
        phase = "re-formation" if cell.id.endswith("re-formation") else cell.id.rsplit("-", 1)[1]
        tag = "n0" if "-n0-" in cell.id else "peer"
        where = {
            ("n0", "formation"): "entry-node0-formation",
            ("peer", "formation"): "entry-peer-formation",
            ("n0", "re-formation"): "entry-peer-training",
            ("peer", "re-formation"): "entry-node0-training",
            ("n0", "shutdown"): "shutdown",
            ("peer", "shutdown"): "torch-stops",
        }[(tag, phase)]
        _observe(where, tmp_path_factory)
        assert f"{tag}-{phase}" in _ABSENT, f"{cell.fault}: no run observed that phase without torch processes"
        return
    _observe(cell.group, tmp_path_factory)
    if isinstance(_SEEN.get(cell.group), Exception):
        raise _SEEN[cell.group]  # type: ignore[misc]
    seen = _SEEN.get(cell.id)
    if isinstance(seen, Exception):
        raise seen
    assert seen is not None, f"{cell.fault}: no run observes this row yet (group {cell.group})"
    assert isinstance(seen, Seen)
    report = os.environ.get("KGEN_FAULT_REPORT")  # bench: every row's observation, one line each
    if report:
        with open(report, "a") as fh:
            fh.write(f"{cell.id}\t{seen!r}\n")
    _check(cell, seen)
