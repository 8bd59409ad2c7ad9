"""Slurm: the task's supervisor and the batch script's decision after srun. Not in pods."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

from .baremetal import Supervisor, _identity, _read_json, _record, _reserve, _signal_reason, _write_private
from .command import check_command
from .header import (
    DEFAULTS,
    EXIT_CONFIG,
    EXIT_DROPPED,
    EXIT_OK,
    EXIT_PEER_LOST,
    EXIT_RUN_FAILED,
    EXIT_STOPPED,
    RECORD_BOUND,
    _utc_stamp,
    fatal,
)
from .proctree import set_child_subreaper
from .slurmenv import SLURM_REQUEUE_CODES


def _slurm_int(name: str, default: int = 0) -> int:
    raw = (os.environ.get(name) or "").strip()
    return int(raw) if raw.isdigit() else default


def slurm_max_requeues(env: dict) -> int:
    raw = (env.get("KGEN_MAX_REFORMATIONS") or "").strip()
    return int(raw) if raw.isdigit() else int(DEFAULTS["KGEN_MAX_REFORMATIONS"])  # type: ignore[call-overload]


class SlurmNode(Supervisor):
    """Node R of a Slurm job step, in the foreground of its srun task: bare metal's stamping (RUN/node<R>/log
    and events; every line also to stdout, which is Slurm's output file), one attempt (Slurm requeues the
    job, nothing is replaced here), RUN/node<R>/exit tagged with the attempt."""

    def __init__(self, run: str, rank: int, command: list[str]) -> None:
        self.run_root = run
        self.job = (os.environ.get("SLURM_JOB_ID") or "").strip()
        self.attempt = _slurm_int("SLURM_RESTART_COUNT")
        node_dir = os.path.join(run, f"node{rank}")
        os.makedirs(node_dir, mode=0o700, exist_ok=True)
        _write_private(os.path.join(node_dir, "node.json"), json.dumps({"command": command, "rank": rank,
                                                                          "workdir": os.getcwd()}))  # fmt: skip
        with open(os.path.abspath(__file__)) as fh:
            _write_private(os.path.join(node_dir, "kgen_entrypoint.py"), fh.read())
        super().__init__(node_dir)

    def write_line(self, line: str) -> None:
        super().write_line(line)
        try:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()
        except (OSError, ValueError):
            pass

    def finish(self, code: int, reason: str) -> int:
        rec = {"code": code, "reason": reason, "time": _utc_stamp(), "attempt": self.attempt, "job": self.job,
               "host": socket.gethostname(), **self.drops()}  # fmt: skip
        _record(os.path.join(self.dir, "exit"), json.dumps(rec), RECORD_BOUND)
        self.note(dict(rec, event="exit"))
        return code

    def note(self, rec: dict) -> None:
        """One line of RUN/node<R>/attempts: every attempt's start (host) and exit, kept across requeues."""
        try:
            fd = os.open(os.path.join(self.dir, "attempts"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        except OSError:
            return
        try:
            self._append(fd, (json.dumps(rec) + "\n").encode())
        finally:
            os.close(fd)

    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT):
            signal.signal(sig, self._on_signal)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.signal(signal.SIGCHLD, self._on_signal)
        set_child_subreaper()
        rec = _identity(os.getpid())
        rec.update(host=socket.gethostname(), attempt=self.attempt, job=self.job, time=_utc_stamp())
        _write_private(os.path.join(self.dir, "pid"), json.dumps(rec))
        _reserve(os.path.join(self.dir, "exit"))
        self.note(
            {"event": "start", "attempt": self.attempt, "job": self.job, "host": rec["host"], "time": rec["time"]}
        )
        limit = slurm_max_requeues(dict(os.environ))
        if os.path.exists(os.path.join(self.run_root, "stopping")):
            reason = "stopped by user (kgen stop asked before this attempt started)"
            self.write_line(f"kgen-entrypoint: stopped: {reason}")
            return self.finish(EXIT_STOPPED, reason)
        if self.attempt > limit:
            reason = (f"requeue limit reached: attempt {self.attempt} (SLURM_RESTART_COUNT) is more than "
                      f"KGEN_MAX_REFORMATIONS={limit}")  # fmt: skip
            self.write_line(f"kgen-entrypoint: stopped: {reason}")
            return self.finish(EXIT_RUN_FAILED, reason)
        self.say(f"Slurm job {self.job}, attempt {self.attempt} (requeues up to {limit}) on {socket.gethostname()}")
        code = self.run_child(self.attempt)
        reason = self.last_stop_line.replace("kgen-entrypoint: stopped: ", "", 1) or _signal_reason(code)
        return self.finish(code, reason)


def slurm_node(args: list[str]) -> int:
    """--slurm-node RUN -- COMMAND: node SLURM_NODEID of the run, supervised in the foreground."""
    if len(args) < 3 or args[1] != "--" or not os.path.isdir(args[0]):
        fatal(EXIT_CONFIG, "--slurm-node needs the run's folder (an existing directory) and -- COMMAND")
    rank = _slurm_int("SLURM_NODEID", -1)
    if rank < 0 or not (os.environ.get("SLURM_STEP_ID") or os.environ.get("SLURM_STEPID")):
        fatal(EXIT_CONFIG, "--slurm-node runs inside a Slurm job step: start it with srun --ntasks-per-node=1")
    command = args[2:]
    if command[:1] not in (["--smoke-test"], ["--diagnose"]):
        check_command(command)
    os.umask(0o077)
    return SlurmNode(os.path.abspath(args[0]), rank, command).run()


def slurm_outcome(exits: dict, nnodes: int, attempt: int, job: str, srun_rc: int, limit: int,
                  stopping: bool) -> tuple[str, int, str]:  # fmt: skip
    """What one attempt of a Slurm run comes to: (succeeded | failed | stopped | requeue, exit code, why).

    ``exits``: node rank -> its RUN/node<R>/exit record (any attempt; older ones count as missing). Pure."""
    current = {
        r: rec if isinstance(rec, dict) and rec.get("attempt") == attempt and str(rec.get("job")) == job else None
        for r, rec in ((r, exits.get(r)) for r in range(nnodes))
    }
    codes = {r: rec.get("code") for r, rec in current.items() if rec is not None and isinstance(rec.get("code"), int)}
    missing = sorted(r for r in range(nnodes) if r not in codes)

    def said(r: int) -> str:
        rec = current.get(r) or {}
        return f"node {r}: exit {codes[r]} ({rec.get('reason') or _signal_reason(codes[r])})"  # type: ignore[arg-type]

    if stopping:
        return "stopped", EXIT_STOPPED, "stopped by user (kgen stop)"
    if codes and not missing and all(c == 0 for c in codes.values()):
        return "succeeded", EXIT_OK, f"all {nnodes} nodes finished"
    stopped = [r for r, c in codes.items() if c == EXIT_STOPPED]
    if stopped:
        return "stopped", EXIT_STOPPED, (current[stopped[0]] or {}).get("reason") or "stopped by user"
    if not codes:
        return "failed", srun_rc or EXIT_CONFIG, f"no node of the step started (srun exit {srun_rc})"
    causes = [r for r, c in codes.items() if c not in SLURM_REQUEUE_CODES and c not in (0, EXIT_RUN_FAILED)]
    whole = [r for r, c in codes.items() if c == EXIT_RUN_FAILED]
    if causes or whole:
        first = (causes or whole)[0]
        return "failed", codes[first], said(first)  # type: ignore[return-value]
    lost = [f"node {r}: no exit record (its node was lost)" for r in missing]
    lost += [said(r) for r, c in sorted(codes.items()) if c in (EXIT_DROPPED, 128 + 9)]
    why = "; ".join(lost or [said(r) for r, c in sorted(codes.items()) if c != 0][:3])
    if attempt >= limit:
        return "failed", EXIT_RUN_FAILED, f"requeue limit reached (KGEN_MAX_REFORMATIONS={limit}): {why}"
    return "requeue", EXIT_PEER_LOST, why


def slurm_end(args: list[str]) -> int:
    """--slurm-end RUN RC: the batch script after srun (RC: srun's exit status). Decides the attempt from
    every node's exit record, writes RUN/end and RUN/history, and requeues the job when a node was lost."""
    if len(args) != 2 or not os.path.isdir(args[0]) or not args[1].lstrip("-").isdigit():
        fatal(EXIT_CONFIG, "--slurm-end needs the run's folder and srun's exit status")
    run, srun_rc = os.path.abspath(args[0]), int(args[1])
    job = (os.environ.get("SLURM_JOB_ID") or "").strip()
    attempt = _slurm_int("SLURM_RESTART_COUNT")
    nnodes = _slurm_int("SLURM_NNODES", 1)
    limit = slurm_max_requeues(dict(os.environ))
    exits = {r: _read_json(os.path.join(run, f"node{r}", "exit")) for r in range(nnodes)}
    stopping = os.path.exists(os.path.join(run, "stopping"))
    decision, code, why = slurm_outcome(exits, nnodes, attempt, job, srun_rc, limit, stopping)
    pids = {r: _read_json(os.path.join(run, f"node{r}", "pid")) or {} for r in range(nnodes)}
    rec = {"job": job, "attempt": attempt, "decision": decision, "code": code, "reason": why, "srun": srun_rc,
           "codes": {str(r): (e or {}).get("code") if (e or {}).get("attempt") == attempt else None
                     for r, e in exits.items()},
           "hosts": {str(r): p.get("host") for r, p in pids.items() if p.get("attempt") == attempt},
           "time": _utc_stamp()}  # fmt: skip
    _write_private(os.path.join(run, "end"), json.dumps(rec))
    with open(os.path.join(run, "history"), "a") as fh:
        fh.write(json.dumps(rec) + "\n")
    print(f"kgen-slurm: job {job} attempt {attempt}: {decision}: {why}", flush=True)
    if decision != "requeue":
        return code
    print(f"kgen-slurm: scontrol requeue {job} (attempt {attempt + 1} of at most {limit + 1})", flush=True)
    try:
        res = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, timeout=60)
        err = (res.stderr or res.stdout).strip() if res.returncode else ""
    except (OSError, subprocess.TimeoutExpired) as exc:
        err = str(exc)
    if err:
        print(f"kgen-slurm: error: scontrol requeue {job} failed ({err}): the job fails", flush=True)
        return code
    time.sleep(30)  # Slurm ends this script (SIGTERM) as it requeues the job
    return code
