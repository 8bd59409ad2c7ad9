# ruff: noqa: E501  (tables of cases, one per line)
"""`kgen lint` against the real API server on a corpus of one-mistake manifests (lint_corpus.py): for each case both
must reject it, or both accept it. A disagreement is either a known lint gap (xfail, strict: the day lint is
fixed the case must move to agreement) or a documented exception where lint is right to differ."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from k8sutil import create, kgen, reason, render
from lint_corpus import CASES, apply_edits

LINT_VERSION = "1.37"  # the server's version
CHILD = (
    "JobSet's API (CRD schema, webhook) does not validate the child Job template: the JobSet is stored and the "
    "JobSet controller's create of the child Job fails later, so lint rejecting it up front is right"
)

# lint is stricter than the server on purpose: the server accepts these, but the run cannot work as kgen's
# entrypoint and the Job controller need it (each reason says why); lint rejecting them is right.
LINT_STRICTER: dict[str, str] = {
    "volume-no-source": "the server defaults a volume without a source to a disk emptyDir; KG110 (an 8-GPU pod "
    "without a memory-backed /dev/shm: NCCL's shared memory is 64 MiB) is a training rule the server cannot know",
    "volume-medium-unknown": "the API server does not check emptyDir.medium (the kubelet refuses the pod later: "
    "unknown storage medium); KG110 rejects it as no memory-backed /dev/shm",
    "job-completions-over-parallelism": "KG116: with parallelism < completions the ranks never start together and the "
    "world never forms; a valid Job otherwise",
    "job-completions-zero": "KG116: completions 0 is a valid Job that completes at once without running anything",
    "job-active-deadline-zero": "KG070: the server takes activeDeadlineSeconds 0 on a Job, which fails it at once "
    "(DeadlineExceeded)",
    "jobset-replicas-negative": "the JobSet CRD schema has no minimum and its webhook lets -1 pass; the controller "
    "cannot make -1 Jobs",
    "jobset-max-restarts-negative": "the JobSet CRD schema has no minimum and its webhook lets -1 pass",
    "jobset-container-name-uppercase": CHILD,
    "jobset-job-restart-policy-always": CHILD,
    "jobset-job-parallelism-negative": CHILD,
}


# lint's gaps, for the lint owner: lint accepts what the server rejects (or the reverse, said so). xfail(strict):
# the day lint is fixed the case passes, fails as XPASS, and must leave this list.
LINT_GAPS: dict[str, str] = {}


@pytest.fixture(scope="module")
def verdicts(k8s, tmp_path_factory):
    """Every case linted (one `kgen lint --unit file` run over the corpus folder) and dry-run created on the
    server (strict field validation): {id: (lint errors, server rejections)}."""
    ns = "corpus"
    k8s.request("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
    bases = {
        kind: render("--kind", kind, "-n", ns, "--name", "c", "--nodes", "2", "--kubernetes-version", LINT_VERSION)
        for kind in ("job", "statefulset", "jobset")
    }
    folder = tmp_path_factory.mktemp("corpus")
    docs_of = {}
    for id_, base, edits in CASES:
        docs = apply_edits(bases[base], edits)
        docs_of[id_] = docs
        (folder / f"{id_}.yaml").write_text(yaml.safe_dump_all(docs, sort_keys=False))
    res = kgen("lint", "--unit", "file", "-o", "json", "--kubernetes-version", LINT_VERSION, str(folder), timeout=300)
    assert res.returncode in (0, 1), res.stderr
    lint: dict[str, list[str]] = {id_: [] for id_ in docs_of}
    for f in json.loads(res.stdout)["findings"]:
        if f["severity"] == "error":
            lint[f["file"].rsplit("/", 1)[1][: -len(".yaml")]].append(f"{f['rule']} {f['path']}: {f['message']}")
    out = {}
    for id_, docs in docs_of.items():
        server = []
        for d in docs:
            code, answer = create(k8s, d, ns)
            if code >= 400:
                server.append(f"{d['kind']} {code}: {reason(answer)[:400]}")
        out[id_] = (lint[id_], server)
    table = Path(os.environ.get("KGEN_K8S_VERDICTS") or folder / "verdicts.json")
    table.write_text(json.dumps(out, indent=1))
    print(f"\ndifferential corpus: {len(CASES)} cases, verdicts in {table}")
    return out


def _params():
    for id_, _base, _edits in CASES:
        marks = []
        if id_ in LINT_GAPS:
            marks.append(pytest.mark.xfail(strict=True, reason=LINT_GAPS[id_]))
        yield pytest.param(id_, marks=marks, id=id_)


@pytest.mark.parametrize("case", list(_params()))
def test_lint_agrees_with_the_api_server(verdicts, case):
    lint, server = verdicts[case]
    if case in LINT_STRICTER:
        assert lint and not server, (lint, server)
        return
    if case.startswith("valid-"):
        assert not lint and not server, (lint, server)
        return
    assert bool(lint) == bool(server), (
        f"lint {'rejects' if lint else 'accepts'}, the API server {'rejects' if server else 'accepts'}:\n"
        f"  lint: {lint}\n  server: {server}"
    )


def test_corpus_size():
    assert len(CASES) >= 100
    assert len({c[0] for c in CASES}) == len(CASES)
