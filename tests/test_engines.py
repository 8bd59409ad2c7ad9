"""Every engine of the run verbs through the one protocol (kgen.runs.engine.Engine), the way kgen.sdk calls it:
located once by name, then status, watch, logs, stop and list, each answering with the same types and the same
kind of error for the same bad input. Cheap fixtures, no training: a cluster is the replay server of the recorded
API answers (tests/cluster/replay.py), a bare-metal run a local record on this machine (--local, its hosts asked
through the entrypoint), a Slurm run a local record and its folder with the Slurm client's answers stubbed
(tests/slurm runs the real controller). A fourth engine is one package and one line: the last test adds one."""

from __future__ import annotations

import inspect
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kgen import RenderRequest
from kgen.errors import UsageError
from kgen.runs.engine import (
    Engine,
    ListRequest,
    Located,
    LogsRequest,
    RunList,
    RunRef,
    RunStatus,
    StatusUpdate,
    StopReport,
    StopRequest,
    SubmitRequest,
    SubmitResult,
)
from kgen.runs.verdict import Verdict
from kgen.sdk import runs

CLUSTER_TESTS = Path(__file__).resolve().parent / "cluster"
VERBS = ("find", "record_path", "check_askable", "status", "watch", "logs", "stop", "submit", "list")


def test_every_engine_implements_the_protocol():
    """Each engine object has every member of the protocol, with the protocol's parameters (names, kinds)."""
    every = runs.engines()
    assert [e.name for e in every] == ["bare-metal", "slurm", "cluster"]
    assert sorted(runs.ON_CHOICES) == sorted(e.name for e in every)
    assert [e.local for e in every] == [True, True, False]  # exactly one engine is asked when no record names a run
    for engine in every:
        assert isinstance(engine.what, str) and isinstance(engine.kinds, tuple)
        for verb in VERBS:
            want = inspect.signature(getattr(Engine, verb)).parameters
            got = inspect.signature(getattr(type(engine), verb)).parameters
            assert [(p.name, p.kind) for p in got.values()] == [(p.name, p.kind) for p in want.values()], (
                engine.name,
                verb,
            )


# ------------------------------------------------------------------------------------------ a run per engine
def bare_metal_run(tmp_path, monkeypatch) -> RunRef:
    from kgen.baremetal import record as B

    nodes = [B.NodeRecord(0, "localhost"), B.NodeRecord(1, "localhost")]
    B.save(B.RunRecord(name="contract", mode="local", python=sys.executable, nodes=nodes, nproc=1))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    return RunRef("contract")


def slurm_run(tmp_path, monkeypatch) -> RunRef:
    from kgen.slurm import commands
    from kgen.slurm import record as S

    run = tmp_path / "slurm-run"
    run.mkdir()
    S.save(S.RunRecord(name="contract", job_id="42", run_dir=str(run), nodes=2, created="2026-11-26T08:00:00Z"))
    monkeypatch.setattr(commands, "job_info", lambda job, env=None: commands.JobInfo(job, "COMPLETED", exit_code="0:0"))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    return RunRef("contract")


@pytest.fixture
def cluster_run(tmp_path, monkeypatch) -> Iterator[RunRef]:
    monkeypatch.syspath_prepend(str(CLUSTER_TESTS))
    from recordings import ROOT

    if not (ROOT / "job-succeeded").is_dir():
        pytest.skip(f"the cluster recordings are not at {ROOT} (set KGEN_RECORDINGS)")
    from replay import Replay

    with Replay("job-succeeded") as r:
        kubeconfig = r.kubeconfig(tmp_path)
        monkeypatch.setenv("KUBECONFIG", kubeconfig)
        yield RunRef(r.name, kubeconfig=kubeconfig)


@pytest.fixture(params=["bare-metal", "slurm", "cluster"])
def a_run(request, tmp_path, monkeypatch) -> tuple[str, RunRef]:
    if request.param == "cluster":
        return "cluster", request.getfixturevalue("cluster_run")
    make = bare_metal_run if request.param == "bare-metal" else slurm_run
    return request.param, make(tmp_path, monkeypatch)


@pytest.mark.timeout(60)  # an engine that did not honour watch(timeout=0) would follow the run forever
def test_every_engine_answers_every_verb_alike(a_run):
    name, ref = a_run
    engine, run = runs.locate(ref)
    assert engine.name == name and isinstance(run, Located) and run.ref == ref
    assert runs.locate(RunRef(ref.name, kubeconfig=ref.kubeconfig, on=name))[0] is engine

    st = runs.status(ref)
    assert isinstance(st, RunStatus) and isinstance(st.verdict, Verdict) and st.on == name

    updates = list(runs.watch(ref, timeout=0))
    assert all(isinstance(u, StatusUpdate) and u.status.on == name for u in updates)
    assert updates[0].kind == "first" and updates[-1].kind in ("final", "ended", "last"), [u.kind for u in updates]

    notes: list[str] = []
    lines = list(runs.logs(LogsRequest(ref, tail=5), note=notes.append))
    assert all(isinstance(line, str) and "\n" not in line for line in lines + notes)
    with pytest.raises(UsageError) as err:  # the same bad input, the same kind of one-line error
        list(runs.logs(LogsRequest(ref, ranks=frozenset({999}))))
    assert err.value.option == "--rank"

    listed = runs.list_runs(ListRequest(kubeconfig=ref.kubeconfig))
    assert isinstance(listed, RunList) and ref.name in [row["name"] for row in listed.runs]
    assert all({"namespace", "name", "kind", "shape", "state", "age", "headline"} <= set(row) for row in listed.runs)

    said: list[str] = []
    report = runs.stop(StopRequest(ref, grace=1), say=said.append)
    assert isinstance(report, StopReport) and report.on == name and report.stopped and report.removed is None
    assert all(isinstance(line, str) for line in report.lines + said)


@pytest.mark.parametrize("kind,on", [("job", "cluster"), ("slurm", "slurm")])
def test_submit_goes_to_the_engine_of_the_kind(kind, on):
    """A client dry run asks no cluster and no Slurm: the engine chosen by the kind answers."""
    request = SubmitRequest(RenderRequest(name="contract", kind=kind, command=["train.py"]), dry_run="client")
    result = runs.submit(request)
    assert isinstance(result, SubmitResult) and result.on == on and not result.applied and result.outcome


# ------------------------------------------------------------------------------------------ a fourth engine
class Toy:
    """An engine that keeps its records in a dict: all a new engine needs to be located and asked."""

    name = "toy"
    what = "toy"
    local = True
    kinds: tuple[str, ...] = ("toy",)

    def __init__(self) -> None:
        self.runs: dict[str, Verdict] = {}

    def find(self, ref):
        return Located(ref, self.runs[ref.name], "toy record") if ref.name in self.runs else None

    def record_path(self, name):
        return f"toy:{name}"

    def check_askable(self, ref, missing):
        return None

    def status(self, run, *, read_logs=True):
        return RunStatus(run.record, self.name, "the toy")

    def watch(self, run, *, read_logs=True, first_logs=None, until_running=False, timeout=None):
        yield StatusUpdate("first", self.status(run))
        yield StatusUpdate("last", self.status(run))

    def logs(self, run, req, note):
        yield "[0] hello"

    def stop(self, run, req, say, note):
        return StopReport(self.name, lines=["toy stopped"])

    def submit(self, checked, req, say, note):
        raise UsageError("toys are not submitted", option="--kind")

    def list(self, req, note):
        return RunList([{"name": n} for n in self.runs], "")


def test_a_fourth_engine_is_one_package_and_one_line(monkeypatch, tmp_path):
    toy = Toy()
    toy.runs["tiny"] = Verdict(name="tiny", kind="toy", state="succeeded", headline="Succeeded: 1/1 ranks completed")
    every = runs.engines()
    monkeypatch.setattr(runs, "engines", lambda: [*every[:-1], toy, every[-1]])  # the one line
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    assert runs.status(RunRef("tiny")).where == "the toy"
    assert list(runs.logs(LogsRequest(RunRef("tiny")))) == ["[0] hello"]
    assert runs.stop(StopRequest(RunRef("tiny"))).lines == ["toy stopped"]
    assert "tiny" in [row["name"] for row in runs.list_runs().runs]
    with pytest.raises(UsageError, match="no run nope: no bare-metal or Slurm or toy run of that name"):
        runs.status(RunRef("nope"))
