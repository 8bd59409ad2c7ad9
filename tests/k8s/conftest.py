"""One real control plane for the whole session (tests/k8s/cplab.py) with a kubelet stand-in's fake nodes
(kubeletstub.py). Without Go and without a build in the cache the tests skip with one line naming what is
missing; with CI set in the environment they fail instead."""

import os
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cplab import ControlPlane, build, cache_bin  # noqa: E402
from kubeletstub import INERT_PREFIX, KubeletStub  # noqa: E402

NODES = 4
COLD_BUILD_TIMEOUT = 5400  # the first build: ~25 min on 2 busy cores


def pytest_collection_modifyitems(config, items):
    mine = [i for i in items if "tests/k8s/" in str(i.fspath)]
    if mine and cache_bin() is None and shutil.which("go"):
        mine[0].add_marker(pytest.mark.timeout(COLD_BUILD_TIMEOUT))  # the session fixture builds within it
    if mine:
        # These run last: the control plane and the kubelet stand-in (session fixtures) keep threads running
        # until the session ends, and lint forks its workers only in a process without other threads
        # (tests/lint/test_parallel.py fails naming them).
        items[:] = [i for i in items if "tests/k8s/" not in str(i.fspath)] + mine


def missing() -> str | None:
    for tool, why in (("openssl", "the private PKI"), ("unshare", "the pods' namespaces")):
        if shutil.which(tool) is None:
            return f"no {tool} on PATH ({why})"
    if os.geteuid() != 0:
        return "needs root (the pods' PID and mount namespaces)"
    return None


def _unavailable(why: str):
    msg = f"real control plane unavailable: {why}"
    if os.environ.get("CI"):
        pytest.fail(msg + " (CI is set: these tests must run)", pytrace=False)
    pytest.skip(msg)


@pytest.fixture(scope="session")
def k8s_bin():
    why = missing()
    if why:
        _unavailable(why)
    bindir, why = build(COLD_BUILD_TIMEOUT)
    if bindir is None:
        _unavailable(why)
    return bindir


@pytest.fixture(scope="session")
def k8s(k8s_bin):
    """The control plane plus NODES fake nodes of 8 GPUs each; kgen's cluster verbs find it through KUBECONFIG."""
    import signal

    cp = ControlPlane(k8s_bin, ["127.0.0.1"])
    kubelet = None

    def interrupted(*_):  # a SIGTERM (e.g. `timeout`) still tears the control plane down
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupted)
    try:
        cp.start()
        crds = sorted((k8s_bin.parent / "crds" / "jobset").glob("*.yaml"))
        crds += sorted((k8s_bin.parent / "crds" / "kueue").glob("*.yaml"))
        if crds:
            cp.install_crds(crds, timeout=120)
        cp.addon_errors = {}
        for name, start in (("jobset-controller", cp.start_jobset), ("kueue", cp.start_kueue)):
            if not (k8s_bin / name).exists():
                cp.addon_errors[name] = f"{name} is not in the build ({k8s_bin})"
                continue
            try:
                start()
            except (RuntimeError, TimeoutError, OSError) as exc:  # the tests that need it fail naming this
                cp.addon_errors[name] = f"{name} did not start: {exc}"
        kubelet = KubeletStub(cp, nodes=NODES)
        kubelet.start()
        cp.kubelet = kubelet
        for name, why in cp.addon_errors.items():
            print(f"\n{name}: {why[:500]}")
        mp = pytest.MonkeyPatch()
        mp.setenv("KUBECONFIG", str(cp.kubeconfig))
        yield cp
        mp.undo()
    finally:
        if kubelet is not None:
            kubelet.stop()
        keep = os.environ.get("KGEN_K8S_LOGDIR")  # the control plane's logs, kept for a look afterwards
        if keep:
            Path(keep).mkdir(parents=True, exist_ok=True)
            for f in cp.root.glob("*.log"):
                shutil.copy(f, Path(keep) / f.name)
        cp.stop()
        signal.signal(signal.SIGTERM, previous)


@pytest.fixture
def addon(k8s):
    """addon(name): fails the test naming why when the JobSet or Kueue controller is not running."""

    def need(name: str) -> None:
        if name in k8s.addon_errors:
            pytest.fail(k8s.addon_errors[name][:2000], pytrace=False)

    return need


def _new_ns(k8s, request, prefix: str = "") -> str:
    import hashlib
    import re

    digest = hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:8]  # parameters past the cut stay apart
    name = prefix + re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:36].strip("-") + f"-{digest}"
    name = re.sub(r"-+", "-", name)
    code, out = k8s.request("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
    assert code == 201, out
    return name


@pytest.fixture
def inert_ns(k8s, request):
    """A fresh namespace whose pods the kubelet stand-in never starts (tests of the objects alone)."""
    name = _new_ns(k8s, request, INERT_PREFIX)
    yield name
    k8s.request("DELETE", f"/api/v1/namespaces/{name}")


@pytest.fixture
def ns(k8s, request):
    """A fresh namespace per test (deleted afterwards); pod logs printed when the test failed."""
    name = _new_ns(k8s, request)
    k8s.wait_for(
        lambda: k8s.request("GET", f"/api/v1/namespaces/{name}/serviceaccounts/default")[0] == 200,
        60,
        "the default ServiceAccount",
    )
    yield name
    failed = getattr(request.node, "rep_call", None)
    if failed is not None and failed.failed:
        print(k8s.kubelet.all_logs())
        print("--- kube-controller-manager\n" + k8s.log("kube-controller-manager"))
        print("--- kubelet stand-in errors\n" + "\n".join(k8s.kubelet.errors[-20:]))
    k8s.request("DELETE", f"/api/v1/namespaces/{name}")
