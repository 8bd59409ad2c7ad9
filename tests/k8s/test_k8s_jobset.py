"""JobSet's restart semantics for kgen's rendered JobSet under the real JobSet controller (v0.12): a script error
restarts the whole group (counted), a configuration error (exit 2) fails the JobSet at once by its NotRetriable
rule, kgen's own error (exit 70) is a counted restart as well, `jobset.maxRestarts` ends it, and an eviction
restarts the group without using up maxRestarts (docs/jobset.md, "Failure policy")."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pytest
from k8sutil import apply, kgen, render, wait
from reformk8s import first_steps, submit

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "entrypoint"))
from podharness import CKPTLOOP  # noqa: E402

pytestmark = pytest.mark.torch

ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"


def jobset(k8s, ns: str, name: str) -> dict:
    code, out = k8s.request("GET", f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets/{name}")
    assert code == 200, out
    return out


def condition(obj: dict, *types: str) -> dict | None:
    for c in obj.get("status", {}).get("conditions") or []:
        if c["type"] in types and c["status"] == "True":
            return c
    return None


def finished(k8s, ns: str, name: str, timeout: float) -> dict:
    """The JobSet once it is Completed or Failed (its status printed when it is not within the timeout)."""
    try:
        wait(lambda: condition(jobset(k8s, ns, name), "Completed", "Failed"), timeout, f"JobSet {name} finished")
    except AssertionError:
        print(jobset(k8s, ns, name).get("status"))
        raise
    return jobset(k8s, ns, name)


def attempt(pod) -> str:
    return pod.obj["metadata"].get("labels", {}).get(ATTEMPT, "?")


def by_attempt(k8s, ns: str, prefix: str) -> dict[str, list]:
    out: dict[str, list] = {}
    for p in k8s.kubelet.history(ns, prefix):
        out.setdefault(attempt(p), []).append(p)
    return out


def codes(pods) -> list:
    return sorted((p.current.exit_code if p.current else None) for p in pods)


def first_attempt_script(tmp_path: Path, always: bool = False) -> Path:
    """Rank 1 raises ValueError (exit 1 on its node; node 0 fail-stops with 5): on the first attempt only (a
    marker file remembers it), or on every attempt."""
    marker = tmp_path / "failed-once"
    script = tmp_path / "flaky.py"
    fail = "True" if always else f"not os.path.exists({str(marker)!r})"
    script.write_text(
        "import os, time\nimport torch.distributed as dist\ndist.init_process_group('gloo')\n"
        f"if dist.get_rank() == 1 and {fail}:\n"
        f"    open({str(marker)!r}, 'w').close()\n"
        "    raise ValueError('learning rate is not a number (deliberate)')\n"
        "dist.barrier()\n"
        "print('trained on attempt', os.environ.get('KGEN_RESTART_ATTEMPT'), flush=True)\n"
    )
    return script


@pytest.mark.timeout(360)
def test_script_error_restarts_the_whole_group_and_status_says_so(k8s, ns, addon, tmp_path):
    """A training script's exception on one node: the child Job fails (BackoffLimitExceeded), the `Restart` rule
    restarts the whole group (status.restarts 1, counted), the next attempt's new pods train and complete;
    `kgen status` says the run succeeded after one group restart."""
    addon("jobset-controller")
    submit(ns, "se", 2, [str(first_attempt_script(tmp_path))], kind="jobset")
    js = finished(k8s, ns, "se", 300)
    done = condition(js, "Completed", "Failed")
    assert done["type"] == "Completed", (done, k8s.kubelet.logs(ns))
    st = js["status"]
    print(f"\nJobSet status after a restart and success: {st}")
    assert st.get("restarts") == 1 and st.get("restartsCountTowardsMax") == 1, st
    groups = by_attempt(k8s, ns, "se-")
    assert sorted(groups) == ["0", "1"] and all(len(g) == 2 for g in groups.values()), groups
    first, second = groups["0"], groups["1"]
    assert 1 in codes(first), codes(first)  # the script's node; the other fail-stops (5) or is deleted (143)
    assert codes(second) == [0, 0]
    failed_at = min(p.failed_at for p in first if p.current.exit_code == 1)
    print(
        f"\nJobSet script error: attempt 0 exit codes {codes(first)}; attempt 1 pods bound "
        f"{min(p.started_at for p in second) - failed_at:.1f} s after the failed pod's status"
    )
    assert "trained on attempt 1" in k8s.kubelet.logs(ns, "se-")
    out = kgen("status", "se", "-n", ns)
    print(f"kgen status after a restart:\n{out.stdout}{out.stderr}")
    assert out.returncode == 0, out.stderr
    assert re.search(r"(?i)succeeded", out.stdout), out.stdout
    assert re.search(r"1 group restart\b", out.stdout), out.stdout
    # why, from the Events (the first attempt's Job and pods are gone): the child Job's failure, then the action
    assert re.search(r"child Job se-node-0 failed: BackoffLimitExceeded.*\n.*RestartJobSetFailurePolicyAction, "
                     r"counted", out.stdout), out.stdout  # fmt: skip


def exit_on_index_1(docs: list[dict], code: int, max_restarts: int | None = None) -> list[dict]:
    """The rendered JobSet with node 1's container exiting `code` at once and node 0's sleeping."""
    for d in docs:
        if d["kind"] == "JobSet":
            if max_restarts is not None:
                d["spec"]["failurePolicy"]["maxRestarts"] = max_restarts
            tmpl = d["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
            c = tmpl["spec"]["containers"][0]
            c["command"] = [
                "python3",
                "-c",
                "import os, signal, sys, time\nif os.environ['JOB_COMPLETION_INDEX'] == '1':\n"
                f" print('boom', flush=True); sys.exit({code})\n"
                # PID 1 of its namespace: without a handler SIGTERM would wait out the 30 s grace period
                "signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))\ntime.sleep(600)",
            ]
            c["args"] = []
    return docs


@pytest.mark.timeout(180)
def test_configuration_error_fails_the_jobset_at_once(k8s, ns, addon):
    """Exit 2 (a configuration error) matches the child Job's FailJob rule at index 1, and the JobSet's
    NotRetriable rule fails the JobSet at once: no restart, no new pods."""
    addon("jobset-controller")
    docs = render("-n", ns, "--name", "e2", "--kind", "jobset", "--nodes", "2", "--gpus", "0", "--cpu", "1",
                  "--memory", "1Gi")  # fmt: skip
    for d in exit_on_index_1(docs, 2):
        assert apply(k8s, d, ns)[0] in (200, 201)
    js = finished(k8s, ns, "e2", 120)
    failed = condition(js, "Failed")
    boom = next(p for p in k8s.kubelet.history(ns, "e2-") if p.current.exit_code == 2)
    took = time.time() - boom.failed_at
    assert failed and failed["reason"] == "FailJobSetFailurePolicyAction", js["status"]
    assert js["status"].get("restarts", 0) == 0, js["status"]
    time.sleep(3)  # nothing comes after
    assert set(by_attempt(k8s, ns, "e2-")) == {"0"}
    assert len(k8s.kubelet.history(ns, "e2-")) == 2
    why = f"{failed['reason']}: {failed['message']}"
    print(f"\nJobSet exit 2: Failed ({why}) <= {took:.1f} s after the exit-2 pod's status")


@pytest.mark.timeout(240)
def test_internal_error_is_a_counted_group_restart(k8s, ns, addon):
    """Exit 70 (kgen's own error) matches no FailJob rule of the child Job (backoffLimit 0:
    BackoffLimitExceeded), so the JobSet's Restart rule restarts the group, counted: with maxRestarts 1 the
    second attempt's exit 70 fails the JobSet (ReachedMaxRestarts) after one restart."""
    addon("jobset-controller")
    docs = render("-n", ns, "--name", "e70", "--kind", "jobset", "--nodes", "2", "--gpus", "0", "--cpu", "1",
                  "--memory", "1Gi")  # fmt: skip
    for d in exit_on_index_1(docs, 70, max_restarts=1):
        assert apply(k8s, d, ns)[0] in (200, 201)
    js = finished(k8s, ns, "e70", 180)
    failed = condition(js, "Failed")
    assert failed and failed["reason"] == "ReachedMaxRestarts", js["status"]
    assert js["status"].get("restarts") == 1 and js["status"].get("restartsCountTowardsMax") == 1, js["status"]
    groups = by_attempt(k8s, ns, "e70-")
    assert sorted(groups) == ["0", "1"], groups
    print(f"\nJobSet exit 70 with maxRestarts 1: {failed['reason']}: {failed['message']}")


@pytest.mark.timeout(360)
def test_max_restarts_ends_a_jobset_whose_script_always_fails(k8s, ns, addon, tmp_path):
    """`--set jobset.maxRestarts=1` and a script that fails on every attempt: one restart, then the JobSet is
    Failed (ReachedMaxRestarts); `kgen status` says Failed and names the script's exception."""
    addon("jobset-controller")
    script = first_attempt_script(tmp_path, always=True)
    submit(ns, "mr", 2, [str(script)], "--set", "jobset.maxRestarts=1", kind="jobset")
    js = finished(k8s, ns, "mr", 300)
    failed = condition(js, "Failed")
    assert failed and failed["reason"] == "ReachedMaxRestarts", js["status"]
    assert js["status"].get("restarts") == 1, js["status"]
    groups = by_attempt(k8s, ns, "mr-")
    assert sorted(groups) == ["0", "1"], groups
    assert all(1 in codes(g) for g in groups.values()), {a: codes(g) for a, g in groups.items()}
    out = kgen("status", "mr", "-n", ns)
    print(f"\nkgen status after maxRestarts:\n{out.stdout}{out.stderr}")
    text = out.stdout + out.stderr
    assert re.search(r"(?i)failed", text) and "ValueError" in text, text
    assert "ReachedMaxRestarts" in text and re.search(r"1 group restart\b", text), text


@pytest.mark.timeout(420)
def test_eviction_restarts_the_group_without_using_up_max_restarts(k8s, ns, addon, tmp_path):
    """An eviction (the Eviction API: DisruptionTarget, then the pod's deletion) of node 1's pod: the child Job
    fails by its FailJob rule at index 0 and the JobSet's Disruption rule restarts the group without counting it
    (status.restarts 1, restartsCountTowardsMax 0); the new attempt trains again from the checkpoint."""
    addon("jobset-controller")
    ckpt = tmp_path / "ckpt.json"
    submit(ns, "ev", 2, [str(CKPTLOOP), "--steps", "100000", "--sleep", "0.15", "--ckpt", str(ckpt)], kind="jobset")
    kubelet = k8s.kubelet
    wait(lambda: len(first_steps(kubelet.logs(ns, "ev-"), 0)) == 2, 180, "both ranks training", every=0.3)
    victim = next(p for p in kubelet.running(ns, "ev-") if p.name.startswith("ev-node-0-1-"))
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": victim.name, "namespace": ns}}
    t0 = time.time()
    code, out = k8s.request("POST", f"/api/v1/namespaces/{ns}/pods/{victim.name}/eviction", body)
    assert code == 201, out
    wait(lambda: jobset(k8s, ns, "ev")["status"].get("restarts") == 1, 120, "the JobSet restarted")
    restarted = time.time() - t0
    st = jobset(k8s, ns, "ev")["status"]
    restarting = next((c for c in st["conditions"] if c["type"] == "RestartingJobSet"), {})
    first = [(p.name, p.current.exit_code, round(p.current.finished - t0, 2)) for p in kubelet.history(ns, "ev-")
             if attempt(p) == "0"]  # fmt: skip
    print(f"\nJobSet eviction: restarts {st.get('restarts')}, counted {st.get('restartsCountTowardsMax', 0)}, "
          f"condition {restarting.get('reason')}; attempt 0 (pod, exit, ended s after the eviction) {first}, "
          f"restart after {restarted:.1f} s")  # fmt: skip
    if st.get("restartsCountTowardsMax", 0):
        # docs/jobset.md, Limits: the survivor fail-stops (exit 75) as soon as its peer's connection closes, and
        # when its Failed status reaches the Job controller before the evicted pod's, the child Job fails by
        # BackoffLimitExceeded, not by the DisruptionTarget rule: the JobSet's Restart rule counts the restart
        pytest.xfail(f"the survivor's exit 75 decided before the evicted pod (a counted restart): {first}")

    def again():
        new = [p for p in kubelet.history(ns, "ev-") if attempt(p) == "1"]
        return len(new) == 2 and len(first_steps(kubelet.logs(ns, "ev-"), 0)) == 2 and new

    def steps_of_attempt_1():
        return re.findall(r"rank=(\d) step \d+ gen=0", "".join(
            b"".join(ln.partition(b" ")[2] for ln in c.lines()).decode(errors="replace")
            for p in kubelet.history(ns, "ev-") if attempt(p) == "1" for c in p.containers))  # fmt: skip

    wait(lambda: again() and {"0", "1"} <= set(steps_of_attempt_1()), 180, "attempt 1 training", every=0.5)
    print(f"attempt 1 training {time.time() - t0:.1f} s after the eviction")
    out = kgen("status", "ev", "-n", ns)
    print(f"kgen status after an eviction restart:\n{out.stdout}{out.stderr}")
    assert re.search(r"1 group restart\b", out.stdout), out.stdout
    res = kgen("stop", "ev", "-n", ns, "--wait", "--timeout", "120", timeout=200)
    assert res.returncode == 0, res.stdout + res.stderr
