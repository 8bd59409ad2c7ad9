"""The Slurm client: sbatch, scontrol, sacct, scancel, each call bounded in time, answers typed.

The controller is whatever the Slurm client finds (SLURM_CONF, or the site's configuration). Facts this
module relies on, measured on Slurm 22.05 (docs/slurm.md): `sbatch --parsable` prints ``ID`` or
``ID;CLUSTER``; `scontrol show job -o ID` is one line of ``Key=Value`` (values may hold spaces: a word
without ``=`` belongs to the value before it) and fails with "Invalid job id" once the job is purged
(MinJobAge after its end); `sacct` works only with accounting storage (slurmdbd), else it says so and
exits 1; `squeue --json` ignores ``-j`` there, so it is not used.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kgen.errors import KgenError

TIMEOUT = 30.0  # seconds a Slurm command may take (a busy controller answers in well under that)
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE",
            "PREEMPTED", "REVOKED", "SPECIAL_EXIT"}  # fmt: skip


class SlurmError(KgenError):
    """A Slurm command could not run or refused: one line, the command and its last words."""


@dataclass
class JobInfo:
    """One job as Slurm sees it now."""

    job_id: str
    state: str  # PENDING, RUNNING, COMPLETING, COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL, ... ("" unknown)
    reason: str = ""
    nodelist: str = ""
    batch_host: str = ""
    restarts: int = 0
    exit_code: str = ""  # rc:signal
    start: str = ""
    end: str = ""
    source: str = "scontrol"  # scontrol | sacct

    @property
    def ended(self) -> bool:
        return self.state in TERMINAL

    @property
    def running(self) -> bool:
        return self.state in ("RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "STOPPED")


def _run(argv: list[str], env: Mapping[str, str] | None = None, timeout: float = TIMEOUT,
         cwd: str | None = None) -> subprocess.CompletedProcess:  # fmt: skip
    if shutil.which(argv[0], path=(env or os.environ).get("PATH")) is None:
        raise SlurmError(
            f"{argv[0]}: not found: run kgen on a Slurm login node (Debian/Ubuntu: apt-get install slurm-client)"
        )
    try:
        return subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, env=dict(env) if env is not None else None, cwd=cwd,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{argv[0]}: no answer within {timeout:g}s: is the Slurm controller up?") from None
    except OSError as exc:
        raise SlurmError(f"{argv[0]}: cannot run it: {exc.strerror or exc}") from None


def _last_words(res: subprocess.CompletedProcess) -> str:
    lines = [ln.strip() for ln in (res.stderr or res.stdout or "").splitlines() if ln.strip()]
    return lines[-1] if lines else f"exit {res.returncode}"


def sbatch(
    script: str,
    cwd: str,
    env: Mapping[str, str] | None = None,
    options: Sequence[str] = (),
    args: Sequence[str] = (),
) -> str:
    """Submit ``script`` (a file) from ``cwd`` with sbatch ``options`` and the script's ``args``; the job id."""
    res = _run(["sbatch", "--parsable", *options, script, *args], env=env, cwd=cwd)
    if res.returncode != 0:
        raise SlurmError(f"sbatch refused the job: {_last_words(res)}")
    job = res.stdout.strip().split(";", 1)[0]
    if not job.isdigit():
        raise SlurmError(f"sbatch printed {res.stdout.strip()!r}, not a job id")
    return job


def sbatch_test_only(script: str, cwd: str, env: Mapping[str, str] | None = None) -> str:
    """`sbatch --test-only` of ``script`` (its text, on stdin): Slurm's one line on when and where it would
    start ("Job 12 to start at ... on nodes n[0-2] in partition debug"); nothing is submitted."""
    argv = ["sbatch", "--test-only"]
    if shutil.which(argv[0], path=(env or os.environ).get("PATH")) is None:
        raise SlurmError(
            "sbatch: not found: run kgen on a Slurm login node (Debian/Ubuntu: apt-get install slurm-client)"
        )
    try:
        res = subprocess.run(argv, input=script, capture_output=True, text=True, timeout=TIMEOUT,
                             env=dict(env) if env is not None else None, cwd=cwd)  # fmt: skip
    except subprocess.TimeoutExpired:
        raise SlurmError(f"sbatch: no answer within {TIMEOUT:g}s: is the Slurm controller up?") from None
    except OSError as exc:
        raise SlurmError(f"sbatch: cannot run it: {exc.strerror or exc}") from None
    if res.returncode != 0:
        raise SlurmError(f"sbatch --test-only refused the job: {_last_words(res)}")
    words = [ln.strip() for ln in (res.stderr + res.stdout).splitlines() if ln.strip()]
    line = words[-1] if words else "accepted"
    return line.removeprefix("sbatch: ")


def parse_show_job(line: str) -> dict[str, str]:
    """`scontrol show job -o` text -> its fields (a word without ``=`` continues the value before it)."""
    out: dict[str, str] = {}
    key = ""
    for word in line.split():
        name, eq, value = word.partition("=")
        if eq and name and (name[0].isalpha()) and all(c.isalnum() or c in "_:/" for c in name):
            key = name
            out[key] = value
        elif key:
            out[key] += " " + word
    return out


def job_info(job: str, env: Mapping[str, str] | None = None) -> JobInfo | None:
    """The job from the controller (scontrol), else from accounting (sacct); None when neither knows it."""
    res = _run(["scontrol", "show", "job", "-o", job], env=env)
    if res.returncode == 0 and res.stdout.strip():
        f = parse_show_job(res.stdout.strip().splitlines()[0])
        restarts = f.get("Restarts", "0")
        return JobInfo(
            job_id=f.get("JobId", job),
            state=f.get("JobState", ""),
            reason=f.get("Reason", "") if f.get("Reason") not in (None, "None") else "",
            nodelist=f.get("NodeList", "") if f.get("NodeList") not in (None, "(null)") else "",
            batch_host=f.get("BatchHost", ""),
            restarts=int(restarts) if restarts.isdigit() else 0,
            exit_code=f.get("ExitCode", ""),
            start=f.get("StartTime", ""),
            end=f.get("EndTime", ""),
        )
    if res.returncode != 0 and "Invalid job id" not in (res.stderr + res.stdout):
        raise SlurmError(f"scontrol show job {job}: {_last_words(res)}")
    return sacct_info(job, env)


def sacct_info(job: str, env: Mapping[str, str] | None = None) -> JobInfo | None:
    """The job from Slurm's accounting (slurmdbd); None without accounting or when it does not know the job."""
    res = _run(["sacct", "-X", "-P", "-n", "-j", job, "-o", "JobID,State,ExitCode,NodeList,Start,End"], env=env)
    if res.returncode != 0:
        return None  # "Slurm accounting storage is disabled": the run folder's records speak instead
    for line in res.stdout.splitlines():
        parts = line.split("|")
        if len(parts) >= 6 and parts[0] == job:
            state = parts[1].split()[0].rstrip("+")  # "CANCELLED by 0", "CANCELLED+"
            return JobInfo(job, state, nodelist=parts[3], exit_code=parts[2], start=parts[4], end=parts[5],
                           source="sacct")  # fmt: skip
    return None


def scancel(job: str, signal: str | None = None, env: Mapping[str, str] | None = None) -> None:
    """Cancel the job, or (``signal``) send that signal to its steps' processes without cancelling it."""
    argv = ["scancel", *([f"--signal={signal}"] if signal else []), job]
    res = _run(argv, env=env)
    if res.returncode != 0 and "already completing or completed" not in (res.stderr + res.stdout):
        raise SlurmError(f"{' '.join(argv)}: {_last_words(res)}")


def srun(
    args: list[str], env: Mapping[str, str] | None = None, timeout: float = TIMEOUT
) -> subprocess.CompletedProcess:
    """``srun ARGS`` (a step, e.g. ``--overlap`` in a running job): what it printed, whatever its exit status."""
    return _run(["srun", *args], env=env, timeout=timeout)


def last_words(res: subprocess.CompletedProcess) -> str:
    """A command's last non-empty line of output (stderr first), or its exit status."""
    return _last_words(res)
