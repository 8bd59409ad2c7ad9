"""The transcripts of README.md and docs/*.md, recorded from real runs (bench/transcripts writes them;
tests/test_transcripts.py compares a fresh recording with what the docs show).

A transcript is the fenced block after a line ``<!-- transcript: NAME -->``: each command after ``$ ``, what
kgen printed (stdout and stderr as a terminal shows them), and ``[exit N]``. Recordings run kgen as a process
in a folder of their own whose path is shown as /tmp/demo (code in /tmp/demo/code, kgen's state in
/tmp/demo/state); options that only the lab needs (ports, the lab's ssh config and interpreter, short bounds)
run but are not shown. Two transcripts are the same when they differ only in times, durations, ids, ports,
addresses and PIDs, and in what depends on the moment of a snapshot: the training's progress, how many
processes or pods a stop found, the order in which two nodes' log lines came, which of two pods failing in the
same second the Job controller saw first, how many progress lines a wait printed (``normalized``,
``comparable``).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TRAIN = ROOT / "bench" / "demo_train.py"
SHOWN_ROOT = "/tmp/demo"
MARKER = re.compile(r"^<!-- transcript: ([a-z0-9-]+) -->\n```\n(.*?)^```$", re.M | re.S)


# ------------------------------------------------------------------------------------------ the docs
def blocks() -> dict[str, tuple[Path, str]]:
    """Every marked transcript: name -> (the Markdown file, the block's text)."""
    out: dict[str, tuple[Path, str]] = {}
    for path in DOCS:
        for m in MARKER.finditer(path.read_text(encoding="utf-8")):
            if m.group(1) in out:
                raise ValueError(f"transcript {m.group(1)} is marked twice ({out[m.group(1)][0].name}, {path.name})")
            out[m.group(1)] = (path, m.group(2))
    return out


def replace_block(name: str, text: str) -> Path:
    """Write ``text`` as transcript ``name``'s block (in whichever file marks it)."""
    path, _ = blocks()[name]
    doc = path.read_text(encoding="utf-8")
    m = next(m for m in MARKER.finditer(doc) if m.group(1) == name)
    body = text if text.endswith("\n") else text + "\n"
    path.write_text(doc[: m.start(2)] + body + doc[m.end(2) :], encoding="utf-8")
    return path


# -------------------------------------------------------------------------------------- comparing
RULES = [
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z?"), "<date>"),
    (re.compile(r"\b\d\d:\d\d:\d\d\b"), "<time>"),
    (re.compile(r"\+\d+(\.\d+)?s\b"), "+<dur>"),
    (re.compile(r"\b\d+(\.\d+)?(ms|s|m|h)\b"), "<dur>"),
    (re.compile(r"\bwithin \d+ s\b|\bin the same second\b"), "<when>"),
    (re.compile(r"\b\d{1,3}(\.\d{1,3}){3}(:\d+)?\b"), "<addr>"),
    (re.compile(r"\b(port|Port) \d+\b"), r"\1 <port>"),
    (re.compile(r"\b([Jj]ob) \d+\b"), r"\1 <id>"),
    (re.compile(r"\bstep \d+ loss \d+\.\d+"), "step <n> loss <x>"),
    (re.compile(r"\b\d+ lines of its shutdown report"), "<n> lines of its shutdown report"),
    (re.compile(r"\b\d+ process\(es\) ended"), "<n> process(es) ended"),  # alive at the stop: timing
    (re.compile(r"\S*\.\.\.(?=\s|$)"), "..."),  # a clipped cell: where it is cut depends on ids' lengths
    (re.compile(r"\b([a-z0-9-]+-\d+)-[bcdfghjklmnpqrstvwxz2456789]{5}\b"), r"\1-<id>"),  # a pod's generated name
    (re.compile(r"\bnode-\d+\b"), "node-<n>"),  # where the scheduler put a pod (the kubelet stand-in's nodes)
    (re.compile(r"\b\d+(s|m|h|d)\b(?= +\S)"), "<age>"),  # kgen list's AGE
    (re.compile(r"\b\d{4,}\b"), "<n>"),  # PIDs, job ids, ports elsewhere
]


# of two pods that failed in the same second, the one the Job controller saw first is the moment's (its FailJob rule)
FIRST_SEEN = re.compile(r"^( *Job reason: PodFailurePolicy: ).*$")
# `kgen stop --wait`'s progress lines (as many as the wait took) and how many pods were still there to delete (the
# Job controller removes a failed Job's pods on its own schedule)
PROGRESS = re.compile(r"^kgen: waiting: |^\d+ pod\(s\) deleting$")


HANG_JSON = re.compile(r"(kgen-entrypoint: hang: )\{.*$")  # the hang report's machine line (frames, times)


def normalized(text: str) -> list[str]:
    """The lines of a transcript with times, durations, ids, ports, addresses and PIDs replaced, runs of
    spaces made one (a wider cell shifts a table's columns), the commands' lines as written."""
    out = []
    for line in text.rstrip("\n").splitlines():
        if PROGRESS.match(line):
            continue
        line = FIRST_SEEN.sub(r"\1<the first failed pod the Job controller saw>", line)
        if not line.startswith("$ "):
            for rule, repl in RULES:
                line = rule.sub(repl, line)
        out.append(" ".join(line.split()))
    return out


def comparable(text: str) -> list[str]:
    """``normalized``, with the lines of each `kgen logs` (and `kgen launch --follow`) in sorted order: logs merge
    the nodes by time, and which of two nodes wrote first in the same instant is timing too."""
    out: list[str] = []
    chunk: list[str] = []
    logs = False
    for line in [*normalized(text), "$ "]:
        if line.startswith("$ ") or line.startswith("[exit "):
            out.extend(sorted(chunk) if logs else chunk)
            chunk = []
            if line.startswith("$ "):
                logs = line.startswith("$ kgen logs ") or (line.startswith("$ kgen launch ") and " --follow " in line)
            out.append(line)
        else:
            chunk.append(line)
    return out[:-1]


def differences(shown: str, recorded: str) -> list[str]:
    import difflib

    return list(difflib.unified_diff(comparable(shown), comparable(recorded), "docs", "recorded", lineterm="", n=1))


# -------------------------------------------------------------------------------------- recording
@dataclass
class Recorder:
    """Runs kgen commands in ``root`` (shown as /tmp/demo) and keeps the transcript."""

    root: Path
    env: dict[str, str] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)
    hidden: list[tuple[str, str]] = field(default_factory=list)  # (real text, shown text) replaced in outputs

    def __post_init__(self) -> None:
        given = dict(self.env)
        self.code = self.root / "code"
        self.state = self.root / "state"
        self.code.mkdir(parents=True, exist_ok=True)
        self.state.mkdir(exist_ok=True)
        shutil.copy(TRAIN, self.code / "train.py")
        self.env = {
            **os.environ,
            "XDG_STATE_HOME": str(self.state),
            "PYTHONPATH": str(ROOT),
            "COLUMNS": "200",
            **self.env,
        }
        if "KUBECONFIG" not in given:  # no cluster: `kgen list` shows this machine's
            self.env["KUBECONFIG"] = str(self.root / "no-kubeconfig")

    def shown(self, text: str) -> str:
        for real, shown in self.hidden:
            text = text.replace(real, shown)
        text = text.replace(str(self.root), SHOWN_ROOT)
        return text

    def kgen(
        self,
        *shown: str,
        extra: tuple[str, ...] = (),
        comment: str = "",
        redirect: str = "",
        timeout: float = 180,
        blank: bool = True,
    ) -> int:
        """Run ``kgen SHOWN... EXTRA...`` (``extra`` options run but are not shown; they go before a ``--``);
        ``redirect``: stdout goes to that file in the code folder (`> FILE`), stderr is shown."""
        args = list(shown)
        cut = args.index("--") if "--" in args else len(args)
        argv = [*args[:cut], *extra, *args[cut:]]
        res = subprocess.run(
            [sys.executable, "-m", "kgen", *argv],
            cwd=self.code,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE if redirect else subprocess.STDOUT,
            text=True,
            timeout=timeout,
        )
        if redirect:
            (self.code / redirect).write_text(res.stdout)
        line = self.shown("$ " + shlex.join(["kgen", *shown]) + (f" > {redirect}" if redirect else ""))
        if comment:
            line = f"{line:<65} # {comment}"
        if self.lines and blank:
            self.lines.append("")
        self.lines.append(line)
        self.lines.extend(self.shown(res.stderr if redirect else res.stdout).rstrip("\n").splitlines())
        if not redirect:
            self.lines.append(f"[exit {res.returncode}]")
        return res.returncode

    def status(self, name: str, *extra: str) -> dict:
        res = subprocess.run(
            [sys.executable, "-m", "kgen", "status", name, "-o", "json", *extra],
            cwd=self.code,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        return json.loads(res.stdout) if res.stdout.strip() else {}

    def wait(self, name: str, done: Callable[[dict], bool], timeout: float, what: str, *extra: str) -> dict:
        deadline = time.monotonic() + timeout
        v: dict = {}
        while time.monotonic() < deadline:
            v = self.status(name, *extra)
            if v and done(v):
                return v
            time.sleep(0.5)
        seen = json.dumps({k: v.get(k) for k in ("state", "headline", "nodes")})[:3000]
        raise TimeoutError(f"{name}: timed out after {timeout:g}s waiting for {what}; last status: {seen}")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def free_port_pair() -> int:
    """A port P with P+1 free too (the rendezvous and the liveness port), on loopback."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port < 65000:
            try:
                with socket.socket() as s2:
                    s2.bind(("127.0.0.1", port + 1))
                return port
            except OSError:
                continue
    raise RuntimeError("no free port pair")


def steps_at_least(n: int) -> Callable[[dict], bool]:
    """Every node's last line is a training line at step >= n."""

    def done(v: dict) -> bool:
        nodes = v.get("nodes") or []
        steps = [re.search(r"step (\d+) loss", node.get("last_line", "")) for node in nodes]
        return bool(nodes) and all(s and int(s.group(1)) >= n for s in steps)

    return done


# ------------------------------------------------------------------------------------- the scenarios
def local_failure(root: Path) -> str:
    """README: the training script fails on rank 3 (`--local 2`, 2 processes per node)."""
    rec = Recorder(root)
    port = str(free_port_pair())
    rec.kgen(
        "launch", "--name", "t3", "--local", "2", "--nproc-per-node", "2", "--env", "PYTHONWARNINGS=ignore",
        "--", "train.py", "--fail-rank", "3", "--fail-step", "35",
        extra=("--port", port),
    )  # fmt: skip
    rec.wait("t3", lambda v: v["state"] in ("failed", "succeeded", "stopped"), 150, "the run's end")
    rec.kgen("status", "t3")
    rec.kgen("logs", "t3", "--rank", "3", "--tail", "5")
    return rec.text()


def local_reform(root: Path) -> str:
    """README: a node killed at step 12 (`--inject kill:1@12`), the group re-formed, then `kgen stop`."""
    rec = Recorder(root)
    port = str(free_port_pair())
    rec.kgen(
        "launch", "--name", "t5", "--local", "2", "--env", "PYTHONWARNINGS=ignore", "--inject", "kill:1@12",
        "--", "train.py",
        extra=("--port", port),
    )  # fmt: skip
    rec.wait("t5", lambda v: v["reformations"] >= 1 and steps_at_least(10)(v), 180, "the re-formed group's step 10")
    rec.kgen("status", "t5")
    rec.kgen("stop", "t5")
    rec.kgen("logs", "t5", "--tail", "3")
    return rec.text()


def no_run(root: Path) -> dict[str, str]:
    """README: render's one-line errors; docs/slurm.md: lint on a hand-written sbatch script (the fixture
    tests/lint/fixtures/sbatch/per-task-torchrun.sbatch, modelled on a public HPC-centre example). No process
    but kgen's: seconds."""
    rec = Recorder(root)
    (rec.code / "v.yaml").write_text("port: 29501\n")
    rec.kgen("render", "--nodes", "0")
    rec.kgen("render", "--set", "nccl.debg=INFO")
    rec.kgen("render", "-f", "v.yaml", comment="v.yaml: port: 29501")
    errors = rec.text()
    rec.lines = []
    shutil.copy(
        ROOT / "tests" / "lint" / "fixtures" / "sbatch" / "per-task-torchrun.sbatch", rec.code / "handwritten.sbatch"
    )
    rec.kgen("lint", "handwritten.sbatch")
    return {"render-errors": errors, "slurm-lint-handwritten": rec.text()}


def local_hang(root: Path) -> str:
    """README: rank 3 waits on a queue at step 20 while the others wait for it in the next all-reduce; the hang
    watchdog (--hang-timeout 30: above start-up on a busy 2-core machine, which its clock counts) names it and
    its frame, ends the run (exit 77), and status and logs say so."""
    rec = Recorder(root)
    port = str(free_port_pair())
    rec.kgen(
        "launch", "--name", "stuck", "--local", "2", "--nproc-per-node", "2", "--hang-timeout", "30",
        "--env", "PYTHONWARNINGS=ignore", "--", "train.py", "--stuck-rank", "3", "--stuck-step", "20",
        extra=("--port", port),
    )  # fmt: skip
    rec.wait("stuck", lambda v: v["state"] in ("failed", "succeeded", "stopped"), 150, "the run's end")
    rec.kgen("status", "stuck")
    rec.kgen("logs", "stuck", "--tail", "2")
    return rec.text()


def local_hang_follow(root: Path) -> str:
    """docs/entrypoint.md: the hang watchdog's run followed (`--follow`) from the moment node 0 found no progress
    (the launch table, start-up and steps before it shown as one line), then `kgen debug stacks` on a healthy run
    whose ranks sleep between steps. The interpreter's library folders are shown as <site-packages>, <stdlib>."""
    import sysconfig

    rec = Recorder(root)
    rec.hidden += [(sysconfig.get_paths()["purelib"], "<site-packages>"), (sysconfig.get_paths()["stdlib"], "<stdlib>")]
    port = str(free_port_pair())
    rec.kgen(
        "launch", "--name", "stuck", "--local", "2", "--nproc-per-node", "2", "--hang-timeout", "30",
        "--env", "PYTHONWARNINGS=ignore", "--follow", "--", "train.py", "--stuck-rank", "3", "--stuck-step", "20",
        extra=("--port", port), timeout=240,
    )  # fmt: skip
    # from node 0's finding or node 1's answer to it, whichever the follower printed first (the same instant)
    start = next(i for i, ln in enumerate(rec.lines) if "no rank made progress for" in ln or "found no progress" in ln)
    first = next(i for i, ln in enumerate(rec.lines) if ln.startswith("$ kgen launch"))
    rec.lines[first + 1 : start] = [
        "[... the launch table, the start-up and the steps: kgen logs stuck shows them ...]"
    ]
    rec.lines = [HANG_JSON.sub(r"\1{...}", ln) for ln in rec.lines]
    port = str(free_port_pair())
    rec.kgen(
        "launch", "--name", "healthy", "--local", "2", "--nproc-per-node", "2", "--env", "PYTHONWARNINGS=ignore",
        "--", "train.py", "--sleep", "5",
        extra=("--port", port),
    )  # fmt: skip
    runs = rec.state / "kgen" / "runs" / "healthy"
    deadline = time.monotonic() + 120
    while not all(len(list((runs / f"node{n}" / "hang" / "stacks").glob("*.json"))) == 2 for n in range(2)):
        if time.monotonic() > deadline:
            raise TimeoutError("healthy: the workers did not register for stacks within 120s")
        time.sleep(0.5)
    time.sleep(8)  # past start-up and the first step: every rank sleeps between steps
    rec.kgen("debug", "stacks", "healthy")
    rec.kgen("stop", "healthy")
    return rec.text()


def ssh_crash(root: Path) -> str:
    """README: three ssh hosts (tests/baremetal/sshlab.py), 2 processes each, then host gpu2 crashes."""
    sys.path.insert(0, str(ROOT / "tests" / "baremetal"))
    from sshlab import SshLab, supported

    why = supported()
    if why:
        raise RuntimeError(f"the ssh lab cannot run here: {why}")
    lab = SshLab(root / "lab", 3, prefix="gpu").start()
    try:
        rec = Recorder(root)
        extra = ("--ssh-config", str(lab.ssh_config), "--python", sys.executable, "--port", str(free_port_pair()))
        rec.kgen(
            "launch", "--name", "llama", "--hosts", "gpu0,gpu1,gpu2", "--nproc-per-node", "2",
            "--env", "PYTHONWARNINGS=ignore", "--", "train.py",
            extra=extra,
        )  # fmt: skip
        rec.wait("llama", steps_at_least(30), 180, "step 30 on every node")
        rec.kgen("status", "llama")
        rec.kgen("logs", "llama", "--tail", "2")
        lab.crash(2)
        rec.wait(
            "llama", lambda v: v["nodes"][2]["state"] == "Unreachable" and v["state"] == "degraded", 90, "gpu2 lost"
        )
        rec.kgen("status", "llama")
        rec.kgen("stop", "llama")
        rec.kgen("status", "llama", "--brief")
        rec.kgen("logs", "llama", "--rank", "0,1", "--tail", "4")
        return rec.text()
    finally:
        lab.cleanup()


# the kubelet stand-in's pods (tests/k8s/kubeletstub.py) are local processes on one loopback: a CPU job of small
# requests, its own ports, gloo on lo, the lab's short bounds; run, not shown
def _k8s_hidden() -> tuple[str, ...]:
    port = free_port_pair()
    return ("--cpu", "1", "--memory", "1Gi", "--set", f"port={port}", "--set", f"livenessPort={port + 1}",
            "--set", "gloo.socketIfname=lo", "--set", "timeouts.heartbeat=5", "--set", "shmSize=256Mi",
            "--set", "timeouts.masterWait=60")  # fmt: skip


def k8s_day(root: Path, cp=None) -> dict[str, str]:
    """README, "The day of a run": the cluster verbs on a real control plane (tests/k8s/cplab.py: API server,
    controller manager, scheduler, etcd) with the kubelet stand-in's four nodes of 8 GPUs running the pods as
    local processes: a 3-node Job trains, a second submit of its name is refused, a run asking for 16 GPUs per
    pod stays unschedulable, a killed pod is replaced by the Job controller and the group re-forms, a script error
    fails a run naming rank, exception and line, then list and stop. ``cp``: a running control plane whose
    ``kubelet`` is the stand-in (tests/k8s's session fixture); else one is started and stopped here."""
    sys.path.insert(0, str(ROOT / "tests" / "k8s"))
    import signal

    from cplab import ControlPlane, build
    from kubeletstub import KubeletStub

    own = cp is None
    kubelet = None
    if own:
        bindir, why = build(600)
        if bindir is None:
            raise RuntimeError(f"the control plane cannot run here: {why}")
        cp = ControlPlane(bindir, ["127.0.0.1"])
    try:
        if own:
            cp.start()
            kubelet = KubeletStub(cp, nodes=4)
            kubelet.start()
            cp.kubelet = kubelet
        code, out = cp.request("POST", "/api/v1/namespaces", {"metadata": {"name": "demo"}})
        assert code in (201, 409), out
        rec = Recorder(root, env={"KUBECONFIG": str(cp.kubeconfig)})
        ns = ("-n", "demo")
        train = str(rec.code / "train.py")
        rec.kgen("submit", "--name", "llama", *ns, "--nodes", "3", "--gpus", "0", "--", train, extra=_k8s_hidden())
        rec.kgen("submit", "--name", "llama", *ns, "--nodes", "3", "--gpus", "0", "--", train, extra=_k8s_hidden())

        def steps(prefix: str) -> dict[int, list[int]]:  # each rank's step lines, from the pods' own logs
            out: dict[int, list[int]] = {}
            for r, n in re.findall(r"rank (\d+)/\d+ step (\d+) loss", cp.kubelet.logs("demo", prefix)):
                out.setdefault(int(r), []).append(int(n))
            return out

        def trained(prefix: str, done: Callable[[dict[int, list[int]]], bool]) -> None:
            deadline = time.monotonic() + 180
            while not done(steps(prefix)):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{prefix}: not training within 180s:\n{cp.kubelet.logs('demo')[-5000:]}")
                time.sleep(0.5)

        trained("llama-", lambda st: len(st) == 3 and min(max(v) for v in st.values()) >= 20)
        rec.kgen("status", "llama", *ns, comment="exit 0 (--exit-code: 3, running)")
        rec.kgen("logs", "llama", *ns, "--tail", "1", comment="-f follows every rank at once")
        rec.kgen("submit", "--name", "big", *ns, "--nodes", "3", "--gpus", "16", "--", train, extra=_k8s_hidden())
        rec.wait("big", lambda v: "unschedulable" in v.get("headline", ""), 120, "the scheduler's verdict", *ns)
        rec.kgen("status", "big", *ns, comment="exit 0 (--exit-code: 4, pending)")
        day = rec.text()

        rec.lines = []
        victim = next(p for p in cp.kubelet.running("demo", "llama-") if p.name.startswith("llama-1-"))
        before = {r: len(v) for r, v in steps("llama-").items()}
        victim.current.signal(signal.SIGKILL)
        rec.wait("llama", lambda v: v.get("reformations", 0) >= 1 and v["state"] == "running", 240,
                 "the re-formed group running", *ns)  # fmt: skip
        trained("llama-", lambda st: all(len(st.get(r, [])) >= n + 2 for r, n in before.items()))  # trains again
        rec.kgen("status", "llama", *ns, comment="pod llama-1 was SIGKILLed: replaced, re-formed")
        rec.kgen("submit", "--name", "t3", *ns, "--nodes", "2", "--gpus", "0", "--set", "nprocPerNode=2", "--",
                 train, "--fail-rank", "3", "--fail-step", "35", extra=_k8s_hidden())  # fmt: skip
        rec.wait("t3", lambda v: v["state"] in ("failed", "succeeded"), 240, "the run's end", *ns)
        rec.kgen("status", "t3", *ns, comment="exit 1: failed")
        rec.kgen("logs", "t3", *ns, "--rank", "3", "--tail", "5")
        failure = rec.text()

        rec.lines = []
        rec.kgen("list", *ns)
        rec.kgen("stop", "llama", *ns, "--wait")
        rec.kgen("stop", "llama", *ns, comment="again: nothing is left, exit 2")
        for name in ("big", "t3"):
            rec.kgen("stop", name, *ns, "--wait")
        stop = rec.text()
        return {"k8s-day": day, "k8s-failure": failure, "k8s-stop": stop}
    finally:
        if own:
            if kubelet is not None:
                kubelet.stop()
            cp.stop()


# the Slurm lab's CPU nodes and short bounds (tests/slurm/test_cli_slurm.py): run, not shown
SLURM_HIDDEN = ("--gpus", "0", "--memory", "500Mi", "--set", f"python={sys.executable}", "--set", "slurm.stepWait=8",
                "--set", "timeouts.heartbeat=3", "--set", "reform.maxReformations=2")  # fmt: skip


def slurm_runs(root: Path) -> dict[str, str]:
    """docs/slurm.md (and the README's excerpt): the loop on the Slurm lab, node n1 crashed, requeued, resumed;
    a group stop; a dry run against the cluster."""
    sys.path.insert(0, str(ROOT / "tests" / "slurm"))
    from slurmlab import SlurmLab, supported

    why = supported()
    if why:
        raise RuntimeError(f"the Slurm lab cannot run here: {why}")
    lab = SlurmLab(4)
    try:
        lab.start()
        rec = Recorder(root, env={"SLURM_CONF": str(lab.conf)})
        rec.hidden.append((str(lab.root), "/tmp/demo/slurm"))
        common = ("--kind", "slurm", "--nodes", "3")
        part = ("--set", "slurm.partition=main")
        rec.kgen("render", *common, "--name", "llama", *part, "--", "train.py", "100", extra=SLURM_HIDDEN,
                 redirect="llama.sbatch")  # fmt: skip
        rec.kgen("lint", "--strict", "llama.sbatch", blank=False)
        before = len(rec.lines) + 1  # after the blank line
        rec.kgen("submit", *common, "--name", "llama", *part, "--", "train.py", "100", extra=SLURM_HIDDEN)
        submitted = rec.lines[before:]
        rec.wait("llama", steps_at_least(20), 120, "step 20 on every node")
        rec.kgen("status", "llama")
        rec.kgen("logs", "llama", "--tail", "2")
        rec.kgen("list")
        first = rec.text()
        rec.lines = []
        lab.crash("n1")
        rec.wait("llama", lambda v: v["state"] in ("degraded", "restarting", "starting"), 60, "n1 lost")
        rec.kgen("status", "llama", "--watch", timeout=300)
        watched = rec.lines[:]
        rec.kgen("stop", "llama", "--rm")
        rec.kgen("submit", *common, "--name", "halt", *part, "--wait", "--", "train.py", "100000", extra=SLURM_HIDDEN)
        rec.kgen("stop", "halt")
        rec.kgen("status", "halt", "--brief", comment="exit 1: stopped")
        rec.kgen("submit", *common, "--name", "llama", *part, "--dry-run=server", "--", "train.py", "100",
                 extra=SLURM_HIDDEN)  # fmt: skip
        second = _short_script(rec.text())
        readme = "\n".join([*submitted, "", *watched]) + "\n"
        return {"slurm-loop": first, "slurm-crash": second, "slurm-crash-readme": readme}
    finally:
        lab.run("scancel", "--user=root", "--full")
        lab.cleanup()


def _short_script(text: str) -> str:
    """A dry run's sbatch script as its first line and "..." (the whole script is shown further up the page)."""
    lines = text.splitlines()
    out: list[str] = []
    skipping = False
    for line in lines:
        if line == "#!/bin/bash":
            out += [line, "..."]
            skipping = True
            continue
        if skipping and not line.startswith("kgen: dry run"):
            continue
        skipping = False
        out.append(line)
    return "\n".join(out) + "\n"


@dataclass
class Scenario:
    run: Callable[[Path], str | dict[str, str]]
    lab: str  # "quick" (kgen alone) | "local" | "ssh" | "slurm" | "k8s": what it needs
    blocks: tuple[str, ...] = ()  # the transcripts it records (default: its own name)


SCENARIOS: dict[str, Scenario] = {
    "no-run": Scenario(no_run, "quick", ("render-errors", "slurm-lint-handwritten")),
    "local-failure": Scenario(local_failure, "local"),
    "local-reform": Scenario(local_reform, "local"),
    "local-hang": Scenario(local_hang, "local"),
    "local-hang-follow": Scenario(local_hang_follow, "local"),
    "ssh-crash": Scenario(ssh_crash, "ssh"),
    "slurm": Scenario(slurm_runs, "slurm", ("slurm-loop", "slurm-crash", "slurm-crash-readme")),
    "k8s": Scenario(k8s_day, "k8s", ("k8s-day", "k8s-failure", "k8s-stop")),
}


def block_names() -> dict[str, str]:
    """transcript -> the scenario that records it."""
    return {b: name for name, s in SCENARIOS.items() for b in (s.blocks or (name,))}


def record(name: str, root: Path) -> dict[str, str]:
    """Scenario ``name``'s fresh transcripts, by transcript name."""
    out = SCENARIOS[name].run(root)
    return out if isinstance(out, dict) else {name: out}


def iter_names(lab: str | None = None) -> Iterator[str]:
    yield from (n for n, s in SCENARIOS.items() if lab is None or s.lab == lab)
