"""The run, end to end, on the real Job controller and scheduler with the kubelet stand-in's pods: `kgen submit`,
training with gloo, a killed pod's replacement by the Job controller and the group's re-formation, the
podFailurePolicy's FailJob rules, and `kgen status/logs/stop/list` against the real API server."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from k8sutil import kgen, wait
from reformk8s import describe, first_steps, reform_run, submit

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "entrypoint"))
from podharness import CKPTLOOP  # noqa: E402

pytestmark = pytest.mark.torch


def job(k8s, ns: str, name: str) -> dict:
    code, out = k8s.request("GET", f"/apis/batch/v1/namespaces/{ns}/jobs/{name}")
    assert code == 200, out
    return out


def job_condition(k8s, ns: str, name: str) -> dict | None:
    for c in job(k8s, ns, name).get("status", {}).get("conditions") or []:
        if c["type"] in ("Complete", "Failed") and c["status"] == "True":
            return c
    return None


def wait_finished(k8s, ns: str, name: str, timeout: float) -> dict:
    try:
        return wait(lambda: job_condition(k8s, ns, name), timeout, f"job {name} finished")
    except AssertionError:
        print(json.dumps(job(k8s, ns, name).get("status"), indent=1))
        raise


def test_indexed_job_trains_and_the_verbs_see_it(k8s, ns, tmp_path):
    """`kgen submit` -> the Job controller's pods, bound by the scheduler, train with gloo and complete;
    `kgen status`, `kgen logs` and `kgen list` read it through the real API server (logs via the kubelet API)."""
    ckpt = tmp_path / "ckpt.json"
    out = submit(ns, "ok", 2, [str(CKPTLOOP), "--steps", "6", "--sleep", "0.05", "--ckpt", str(ckpt)])
    assert "applied (server-side" in out, out
    cond = wait_finished(k8s, ns, "ok", 180)
    assert cond["type"] == "Complete", (cond, k8s.kubelet.logs(ns))
    assert json.loads(ckpt.read_text())["step"] == 6
    st = kgen("status", "ok", "-n", ns)
    assert st.returncode == 0, st.stderr
    assert re.search(r"(?i)succeeded|complete", st.stdout), st.stdout
    lg = kgen("logs", "ok", "-n", ns, "--tail", "50")
    assert lg.returncode == 0, lg.stderr
    assert "kgen-entrypoint: stopped: succeeded" in lg.stdout, lg.stdout
    assert re.search(r"rank=1 step 5 gen=0", lg.stdout), lg.stdout
    ls = kgen("list", "-n", ns)
    assert ls.returncode == 0 and "ok" in ls.stdout, (ls.stdout, ls.stderr)
    pods = k8s.kubelet.history(ns, "ok-")
    assert len(pods) == 2 and all(p.containers[-1].exit_code == 0 for p in pods)


@pytest.mark.timeout(420)
def test_killed_pod_is_replaced_by_the_job_controller_and_the_group_reforms(k8s, ns, tmp_path):
    """SIGKILL of a worker pod's processes (exit 137: Ignore), then of the master's: each time the Job controller
    makes a replacement pod for that index only, the survivors re-form with it and training resumes from the
    checkpoint. Prints the re-formation time split into the controllers', kgen's and the stand-in's shares."""
    nodes = 3
    ckpt = tmp_path / "ckpt.json"
    results = reform_run(k8s, ns, "rk", ckpt, nodes, victims=(1, 0))
    for r in results:
        print("\nreform on the real control plane N=3: " + describe(r))
        assert r["exit_code"] == 137 and len(r["replaced"]) == 1, r  # only the lost index: the survivors stayed
        assert r["total"] < 150, r
    assert job_condition(k8s, ns, "rk") is None  # still running: Ignore, not FailJob
    res = kgen("stop", "rk", "-n", ns, "--wait", "--timeout", "120", timeout=200)
    assert res.returncode == 0, res.stdout + res.stderr


def test_exit_70_ends_the_job_by_its_failjob_rule(k8s, ns):
    """Exit 70 (kgen's own error) matches the FailJob rule: the Job fails at once with reason PodFailurePolicy,
    no replacement pod; the status names the rule."""
    from k8sutil import apply, render

    docs = render("-n", ns, "--name", "e70", "--nodes", "2", "--gpus", "0", "--cpu", "1", "--memory", "1Gi")
    for d in docs:
        if d["kind"] == "Job":
            c = d["spec"]["template"]["spec"]["containers"][0]
            c["command"] = [
                "python3",
                "-c",
                "import os, sys, time\nif os.environ['JOB_COMPLETION_INDEX'] == '1':\n"
                " print('boom', flush=True); sys.exit(70)\ntime.sleep(600)",
            ]
            c["args"] = []
        assert apply(k8s, d, ns)[0] in (200, 201)
    cond = wait_finished(k8s, ns, "e70", 120)
    assert cond["type"] == "Failed" and cond["reason"] == "PodFailurePolicy", cond
    assert "exit code 70" in cond["message"] and "rule at index 2" in cond["message"], cond
    pods = k8s.kubelet.history(ns, "e70-")
    assert len(pods) == 2, [p.name for p in pods]  # nothing replaced
    # the Job controller deletes the running pod of a failed Job: index 0 is terminated (SIGTERM)
    wait(lambda: all(p.current.done.is_set() for p in pods), 60, "every pod ended")


def test_script_error_fails_the_job_and_status_names_the_exception(k8s, ns, tmp_path):
    """A training script's exception: the node exits 1 (FailJob), the others 5; the Job is Failed and
    `kgen status` names the exception."""
    script = tmp_path / "bad.py"
    script.write_text(
        "import os, time\nimport torch.distributed as dist\ndist.init_process_group('gloo')\n"
        "if dist.get_rank() == 1:\n    raise ValueError('learning rate is not a number (deliberate)')\n"
        "time.sleep(60)\n"
    )
    submit(ns, "se", 2, [str(script)])
    cond = wait_finished(k8s, ns, "se", 180)
    assert cond["type"] == "Failed", cond
    st = kgen("status", "se", "-n", ns)
    text = st.stdout + st.stderr
    assert "ValueError" in text and "learning rate is not a number" in text, text


@pytest.mark.timeout(300)
def test_stop_ends_a_running_job(k8s, ns, tmp_path):
    ckpt = tmp_path / "ckpt.json"
    submit(ns, "st", 2, [str(CKPTLOOP), "--steps", "2000", "--sleep", "0.2", "--ckpt", str(ckpt)])
    wait(lambda: len(first_steps(k8s.kubelet.logs(ns, "st-"), 0)) == 2, 180, "training")
    res = kgen("stop", "st", "-n", ns, "--wait", "--timeout", "120", timeout=200)
    assert res.returncode == 0, res.stdout + res.stderr
    assert not k8s.kubelet.running(ns, "st-")
    codes = [p.current.exit_code for p in k8s.kubelet.history(ns, "st-")]
    print(f"\nkgen stop: {res.stdout.strip()} exit codes {codes}")
