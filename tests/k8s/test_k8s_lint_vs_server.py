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
LINT_GAPS: dict[str, str] = {
    "env-value-and-valuefrom": "lint accepts, the API server rejects: an env item with both value and valueFrom",
    "env-fieldref-bad-label-key": "lint accepts, the API server rejects: a fieldRef to metadata.labels['<key>'] whose key is not a valid label key",
    "env-valuefrom-empty": "lint accepts, the API server rejects: valueFrom with none of fieldRef, resourceFieldRef, configMapKeyRef, secretKeyRef, fileKeyRef",
    "volume-mount-path-empty": "lint accepts, the API server rejects: an empty volumeMounts[].mountPath (Required)",
    "termination-message-policy-unknown": "lint accepts, the API server rejects: terminationMessagePolicy not File or FallbackToLogsOnError",
    "privileged-without-escalation": "lint accepts, the API server rejects: privileged: true with allowPrivilegeEscalation: false",
    "probe-without-handler": "lint accepts, the API server rejects: a probe without a handler (exec, httpGet, tcpSocket, grpc)",
    "probe-period-negative": "lint accepts, the API server rejects: a negative probe periodSeconds",
    "probe-two-handlers": "lint accepts, the API server rejects: a probe with two handler types",
    "prestop-without-handler": "lint accepts, the API server rejects: a lifecycle hook without a handler",
    "dns-policy-none-without-config": "lint accepts, the API server rejects: dnsPolicy None without dnsConfig",
    "dns-config-four-nameservers": "lint accepts, the API server rejects: more than 3 dnsConfig.nameservers",
    "node-affinity-no-terms": "lint accepts, the API server rejects: required node affinity with an empty nodeSelectorTerms",
    "node-affinity-operator-unknown": "lint accepts, the API server rejects: a node selector requirement with an unknown operator",
    "spread-max-skew-zero": "lint accepts, the API server rejects: topologySpreadConstraints maxSkew 0",
    "spread-when-unsatisfiable-unknown": "lint accepts, the API server rejects: topologySpreadConstraints whenUnsatisfiable not DoNotSchedule/ScheduleAnyway",
    "share-pid-and-host-pid": "lint accepts, the API server rejects: shareProcessNamespace together with hostPID",
    "sysctl-name-invalid": "lint accepts, the API server rejects: a securityContext.sysctls name that is not a sysctl name",
    "host-alias-ip-invalid": "lint accepts, the API server rejects: hostAliases[].ip that is not an IP address",
    "runtime-class-invalid": "lint accepts, the API server rejects: runtimeClassName that is not a DNS subdomain",
    "priority-class-invalid": "lint accepts, the API server rejects: priorityClassName that is not a DNS subdomain",
    "volume-two-sources": "lint accepts, the API server rejects: a volume with two sources (emptyDir and configMap)",
    "volume-default-mode-too-big": "lint accepts, the API server rejects: configMap defaultMode above 0777",
    "job-pfp-condition-status-unknown": "lint accepts, the API server rejects: podFailurePolicy onPodConditions status not True/False/Unknown",
    "job-success-policy-empty-rules": "lint accepts, the API server rejects: a Job successPolicy with no rules",
    "job-managed-by-invalid": "lint accepts, the API server rejects: Job spec.managedBy that is not a domain-prefixed path",
    "service-session-affinity-unknown": "lint accepts, the API server rejects: Service sessionAffinity not ClientIP/None",
    "service-traffic-policy-clusterip": "lint accepts, the API server rejects: externalTrafficPolicy on a ClusterIP (headless) Service",
    "configmap-binary-not-base64": "lint accepts, the API server rejects: ConfigMap binaryData that is not base64",
    "netpol-policy-type-unknown": "lint accepts, the API server rejects: NetworkPolicy policyTypes not Ingress/Egress",
    "netpol-cidr-invalid": "lint accepts, the API server rejects: an ipBlock cidr that is not a CIDR",
    "netpol-except-outside-cidr": "lint accepts, the API server rejects: an ipBlock except entry outside its cidr",
    "netpol-match-operator-unknown": "lint accepts, the API server rejects: a label selector requirement with an unknown operator",
    "netpol-match-in-no-values": "lint accepts, the API server rejects: a label selector In/NotIn requirement without values",
    "netpol-ipblock-with-selector": "lint accepts, the API server rejects: an ingress peer with ipBlock and podSelector together",
    "sts-min-ready-negative": "lint accepts, the API server rejects: StatefulSet minReadySeconds < 0",
    "sts-ordinals-negative": "lint accepts, the API server rejects: StatefulSet ordinals.start < 0",
    "sts-pvc-retention-unknown": "lint accepts, the API server rejects: persistentVolumeClaimRetentionPolicy whenDeleted not Retain/Delete",
    "service-target-port-zero": "lint rejects (KG033), the API server accepts: targetPort 0 means unset, defaulted to the port",
}


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
