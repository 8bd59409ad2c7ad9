"""Large inputs are checked on every core: apply-unit groups go to forked workers,
and the report is the same, byte for byte and in the same order, whatever the number of processes;
small inputs stay in one process; a worker that dies or raises never hangs the run."""

from __future__ import annotations

import io
import os
import signal
import threading
import time

import pytest
from test_scale import _bench

from kgen.lint import api, check, workers
from kgen.lint.api import LintOptions, lint_paths
from kgen.output import write_findings

pytestmark = pytest.mark.skipif(not workers.can_fork(), reason="workers are forked (Linux, one thread)")


@pytest.fixture(autouse=True)
def _no_other_thread():
    """Workers are forked only while this process runs no other thread (workers.can_fork): a thread an earlier
    test left running would turn these tests into one-process runs (the dying-worker test would then wait for a
    worker that never comes). Threads that are ending get 10 s; then the test fails, naming them."""
    deadline = time.monotonic() + 10
    while not workers.can_fork() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert workers.can_fork(), f"threads left running by an earlier test: {[t.name for t in threading.enumerate()]}"


def report(folder, **opts) -> tuple[str, list, list]:
    result = lint_paths([str(folder)], LintOptions(kubernetes_version="1.33", **opts))
    out = io.StringIO()
    write_findings(result, "json", out)
    return out.getvalue(), result.skipped, result.units


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("corpus")
    _bench().write_corpus(folder, 1200)  # 300 files in 50 folders (units), ~5 % defects
    (folder / "ns03" / "broken.yaml").write_text("a: [1\n")  # a KG004 in the middle
    (folder / "ns07" / "kustomization.yaml").write_text("resources: [app-00007.yaml]\n")
    return folder


def test_the_report_is_the_same_whatever_the_processes(corpus):
    one = report(corpus, jobs=1)
    assert '"KG004"' in one[0] and '"KG010"' in one[0] and len(one[2]) == 50
    for jobs in (2, 3):
        assert report(corpus, jobs=jobs) == one


def test_small_inputs_stay_in_one_process(tmp_path, monkeypatch):
    def no_workers(*args, **kwargs):
        raise AssertionError("forked for a small input")

    _bench().write_corpus(tmp_path, 40)  # 10 files in 10 folders (units), ~22 KiB
    monkeypatch.setattr(workers, "run", no_workers)
    assert len(report(tmp_path)[2]) == 10
    assert 64 * 1024 <= api.PARALLEL_MIN_BYTES <= 1024 * 1024  # bench/lint_scale --crossover


def test_a_worker_that_dies_is_a_finding_not_a_hang(corpus, monkeypatch, tmp_path):
    main = os.getpid()
    real = check.check_group
    took = tmp_path / "a worker took a group"

    def dies_in_a_worker(files, *args, **kwargs):
        if os.getpid() != main:
            took.touch()
            os.kill(os.getpid(), signal.SIGKILL)  # the first group a worker takes
        deadline = time.monotonic() + 20  # this process waits until the worker took one (a busy machine may
        while not took.exists() and time.monotonic() < deadline:  # start it late: this one would take them all)
            time.sleep(0.01)
        return real(files, *args, **kwargs)

    monkeypatch.setattr(check, "check_group", dies_in_a_worker)
    result = lint_paths([str(corpus)], LintOptions(kubernetes_version="1.33", jobs=2))
    dead = [f for f in result.findings if f.message.endswith("the worker process killed by SIGKILL")]
    assert result.exit_code == 2 and dead and all(f.rule_id == "KG004" for f in dead)
    folders = {os.path.dirname(f.file) for f in dead}
    assert len(folders) == 1 and {f.file for f in dead} == {f for f in result.files if os.path.dirname(f) in folders}
    serial = lint_paths([str(corpus)], LintOptions(kubernetes_version="1.33", jobs=1))
    alive = [f for f in serial.findings if os.path.dirname(f.file) not in folders]
    assert [f for f in result.findings if os.path.dirname(f.file) not in folders] == alive  # the rest is linted


def test_an_exception_in_a_worker_is_raised_here(corpus, monkeypatch):
    real = check.check_group

    def raises(files, *args, **kwargs):
        if any("/ns09/" in f for f in files):
            raise ZeroDivisionError("a bug in a rule")
        return real(files, *args, **kwargs)

    monkeypatch.setattr(check, "check_group", raises)
    with pytest.raises(ZeroDivisionError, match="a bug in a rule"):
        lint_paths([str(corpus)], LintOptions(kubernetes_version="1.33", jobs=2))


def test_the_alias_budget_is_the_runs(tmp_path, monkeypatch):
    """Workers each have the run's budget; when together they spent more, the run is redone in one
    process, so the same document is refused as with one process."""
    from kgen.lint import parse

    monkeypatch.setattr(parse, "MAX_ALIAS_NODES", 60)
    monkeypatch.setattr(api, "PARALLEL_MIN_BYTES", 0)
    items = "".join("  - *x\n" for _ in range(10))
    for i in range(4):
        (tmp_path / f"d{i}").mkdir()
        text = f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c{i}}}\ndata: {{}}\nx: &x [1, 2]\ny:\n{items}"
        (tmp_path / f"d{i}" / "c.yaml").write_text(text)
    one = report(tmp_path, jobs=1)
    assert one[0].count("YAML aliases of this run expand to more than") == 2
    assert report(tmp_path, jobs=2) == one
