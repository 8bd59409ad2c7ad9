# ruff: noqa: E501  (a table of cases, one per line)
"""A corpus of invalid manifests, each kgen's render with exactly one mistake, for the differential test
(test_k8s_lint_vs_server.py): `kgen lint` and the real API server must agree on each (reject, or accept).

A case is (id, base, edits): base is the kind rendered (job, statefulset, jobset); edits are (kind, path, value)
with path dotted (list indexes as numbers; `POD.` stands for the workload's pod spec, `CTR.` for its trainer
container); value DELETE removes the key. Every case is one mistake a user could make editing the output."""

from __future__ import annotations

import copy

DELETE = object()
POD = {
    "Job": "spec.template.spec",
    "StatefulSet": "spec.template.spec",
    "JobSet": "spec.replicatedJobs.0.template.spec.template.spec",
}
WL = "WL"  # the workload's kind, whichever it is

LONG = "x" * 64


def c(id_: str, path: str, value, kind: str = WL, base: str = "job"):
    return (id_, base, [(kind, path, value)])


CASES: list[tuple[str, str, list]] = [
    # the unmodified renders: both must accept
    ("valid-job", "job", []),
    ("valid-statefulset", "statefulset", []),
    ("valid-jobset", "jobset", []),
    # metadata
    c("job-name-uppercase", "metadata.name", "Bad_Name"),
    c("service-name-too-long", "metadata.name", "s" + LONG, "Service"),
    c("service-name-leading-digit", "metadata.name", "1svc", "Service"),
    c("configmap-name-invalid", "metadata.name", "bad name", "ConfigMap"),
    c("label-value-space", "metadata.labels.team", "has space"),
    c("label-key-two-slashes", "metadata.labels", {"a/b/c": "x"}),
    c("label-value-too-long", "metadata.labels.team", LONG),
    c("annotation-key-invalid", "metadata.annotations", {"bad key!": "x"}),
    c("template-label-value-invalid", "spec.template.metadata.labels.team", "-bad-"),
    # the trainer container
    c("container-name-uppercase", "CTR.name", "Trainer"),
    c("container-name-too-long", "CTR.name", "t" + LONG),
    c("image-empty", "CTR.image", ""),
    c("image-pull-policy-unknown", "CTR.imagePullPolicy", "Sometimes"),
    c("container-port-zero", "CTR.ports.0.containerPort", 0),
    c("container-port-too-big", "CTR.ports.0.containerPort", 70000),
    c("container-port-protocol-http", "CTR.ports.0.protocol", "HTTP"),
    c("container-port-name-too-long", "CTR.ports.0.name", "rendezvous-port-x"),
    c("container-port-name-uppercase", "CTR.ports.0.name", "Rdzv"),
    c("container-port-names-duplicate", "CTR.ports.1.name", "rendezvous"),
    c("container-port-as-string", "CTR.ports.0.containerPort", "29500"),
    c("env-name-empty", "CTR.env.0.name", ""),
    c("env-name-with-equals", "CTR.env.0.name", "A=B"),
    c("env-name-leading-digit", "CTR.env.0.name", "1NODES"),
    c("env-value-and-valuefrom", "CTR.env.0.valueFrom", {"fieldRef": {"fieldPath": "metadata.name"}}),
    c("env-value-int", "CTR.env.0.value", 2),
    c("env-fieldref-unknown-path", "CTR.env", [{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "metadata.foo"}}}]),
    c("env-fieldref-bad-label-key", "CTR.env", [{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['a b']"}}}]),
    c("env-valuefrom-empty", "CTR.env", [{"name": "X", "valueFrom": {}}]),
    c("env-secretkeyref-no-key", "CTR.env", [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "s"}}}]),
    c("requests-over-limits", "CTR.resources", {"requests": {"cpu": "4"}, "limits": {"cpu": "2"}}),
    c("cpu-quantity-word", "CTR.resources.requests.cpu", "lots"),
    c("cpu-quantity-negative", "CTR.resources.requests.cpu", "-1"),
    c("memory-suffix-gb", "CTR.resources.requests.memory", "2GB"),
    c("gpu-requests-not-limits", "CTR.resources", {"requests": {"nvidia.com/gpu": "8"}, "limits": {"nvidia.com/gpu": "4"}}),
    c("gpu-fraction", "CTR.resources", {"requests": {"nvidia.com/gpu": "0.5"}, "limits": {"nvidia.com/gpu": "0.5"}}),
    c("gpu-requests-only", "CTR.resources", {"requests": {"nvidia.com/gpu": "8"}}),
    c("volume-mount-unknown-volume", "CTR.volumeMounts.0.name", "nope"),
    c("volume-mount-duplicate-path", "CTR.volumeMounts.1.mountPath", "/opt/kgen"),
    c("volume-mount-no-name", "CTR.volumeMounts.0.name", DELETE),
    c("volume-mount-path-colon", "CTR.volumeMounts.0.mountPath", "/opt/kgen:ro"),
    c("volume-mount-path-empty", "CTR.volumeMounts.0.mountPath", ""),
    c("termination-message-policy-unknown", "CTR.terminationMessagePolicy", "Sometimes"),
    c("run-as-user-negative", "CTR.securityContext.runAsUser", -1),
    c("privileged-without-escalation", "CTR.securityContext.privileged", True),
    c("probe-without-handler", "CTR.readinessProbe", {"periodSeconds": 5}),
    c("probe-period-negative", "CTR.livenessProbe", {"tcpSocket": {"port": 29501}, "periodSeconds": -1}),
    c("probe-two-handlers", "CTR.livenessProbe", {"tcpSocket": {"port": 29501}, "exec": {"command": ["true"]}}),
    c("prestop-without-handler", "CTR.lifecycle", {"preStop": {}}),
    c("stdin-as-string", "CTR.stdin", "yes"),
    c("container-unknown-field", "CTR.imagePullPolice", "Always"),
    c("container-command-empty-string", "CTR.command", [""]),
    c("working-dir-relative", "CTR.workingDir", "work"),
    c("capability-lowercase", "CTR.securityContext.capabilities", {"add": ["ipc_lock"]}),
    # the pod spec
    c("restart-policy-unknown", "POD.restartPolicy", "Sometimes"),
    c("grace-period-negative", "POD.terminationGracePeriodSeconds", -5),
    c("active-deadline-zero", "POD.activeDeadlineSeconds", 0),
    c("dns-policy-unknown", "POD.dnsPolicy", "Google"),
    c("dns-policy-none-without-config", "POD.dnsPolicy", "None"),
    c("dns-config-four-nameservers", "POD.dnsConfig", {"nameservers": ["1.1.1.1", "1.0.0.1", "8.8.8.8", "8.8.4.4"]}),
    c("hostname-uppercase", "POD.hostname", "Host"),
    c("node-selector-key-invalid", "POD.nodeSelector", {"bad key": "x"}),
    c("node-selector-value-invalid", "POD.nodeSelector", {"gpu": "h100 sxm"}),
    c("toleration-operator-unknown", "POD.tolerations.0.operator", "Maybe"),
    c("toleration-exists-with-value", "POD.tolerations.0.value", "x"),
    c("toleration-effect-unknown", "POD.tolerations.0.effect", "Sometimes"),
    c("toleration-seconds-noschedule", "POD.tolerations.0.effect", "NoSchedule"),
    c("node-affinity-no-terms", "POD.affinity", {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}}),
    c("node-affinity-operator-unknown", "POD.affinity", {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "Equals", "values": ["b"]}]}]}}}),
    c("spread-max-skew-zero", "POD.topologySpreadConstraints", [{"maxSkew": 0, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}]),
    c("spread-when-unsatisfiable-unknown", "POD.topologySpreadConstraints", [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "Sometimes"}]),
    c("spread-no-topology-key", "POD.topologySpreadConstraints", [{"maxSkew": 1, "whenUnsatisfiable": "DoNotSchedule"}]),
    c("scheduler-name-space", "POD.schedulerName", "my scheduler"),
    c("image-pull-secret-empty-name", "POD.imagePullSecrets", [{"name": ""}]),
    c("service-account-invalid", "POD.serviceAccountName", "Bad_SA"),
    c("automount-as-string", "POD.automountServiceAccountToken", "no"),
    ("share-pid-and-host-pid", "job", [(WL, "POD.hostPID", True), (WL, "POD.shareProcessNamespace", True)]),
    c("containers-empty", "POD.containers", []),
    c("containers-same-name", "POD.containers", "DUPLICATE"),
    c("init-container-same-name", "POD.initContainers", [{"name": "trainer", "image": "busybox"}]),
    c("sysctl-name-invalid", "POD.securityContext", {"sysctls": [{"name": "net..bad", "value": "1"}]}),
    c("host-alias-ip-invalid", "POD.hostAliases", [{"ip": "300.1.1.1", "hostnames": ["a"]}]),
    c("runtime-class-invalid", "POD.runtimeClassName", "Bad_Class"),
    c("priority-class-invalid", "POD.priorityClassName", "Bad Class"),
    c("volume-two-sources", "POD.volumes.1.configMap", {"name": "x"}),
    c("volume-no-source", "POD.volumes.1", {"name": "dshm"}),
    c("volume-default-mode-too-big", "POD.volumes.0.configMap.defaultMode", 4096),
    c("volume-size-limit-invalid", "POD.volumes.1.emptyDir.sizeLimit", "16 Gi"),
    c("volume-names-duplicate", "POD.volumes.1.name", "kgen-entrypoint"),
    c("volume-name-uppercase", "POD.volumes.1.name", "DSHM"),
    c("volume-medium-unknown", "POD.volumes.1.emptyDir.medium", "Disk"),
    c("pod-unknown-field", "POD.hostNetwrok", True),
    # the Job
    c("job-restart-policy-always", "POD.restartPolicy", "Always"),
    c("job-restart-policy-missing", "POD.restartPolicy", DELETE),
    c("job-parallelism-negative", "spec.parallelism", -1),
    c("job-backoff-limit-negative", "spec.backoffLimit", -1),
    c("job-completion-mode-unknown", "spec.completionMode", "Ordered"),
    c("job-completions-over-parallelism", "spec.parallelism", 1),
    c("job-completions-zero", "spec.completions", 0),
    c("job-pfp-action-unknown", "spec.podFailurePolicy.rules.0.action", "Retry"),
    c("job-pfp-operator-unknown", "spec.podFailurePolicy.rules.1.onExitCodes.operator", "Equals"),
    c("job-pfp-in-zero", "spec.podFailurePolicy.rules.2.onExitCodes.values", [0, 70]),
    c("job-pfp-values-unsorted", "spec.podFailurePolicy.rules.1.onExitCodes.values", [143, 75]),
    c("job-pfp-values-duplicate", "spec.podFailurePolicy.rules.1.onExitCodes.values", [75, 75]),
    c("job-pfp-container-unknown", "spec.podFailurePolicy.rules.1.onExitCodes.containerName", "main"),
    c("job-pfp-rule-two-matchers", "spec.podFailurePolicy.rules.0.onExitCodes", {"operator": "In", "values": [1]}),
    c("job-pfp-with-onfailure", "POD.restartPolicy", "OnFailure"),
    c("job-pfp-condition-status-unknown", "spec.podFailurePolicy.rules.0.onPodConditions.0.status", "Yes"),
    c("job-per-index-not-indexed", "spec.completionMode", "NonIndexed"),
    c("job-max-failed-indexes-over-completions", "spec.maxFailedIndexes", 5),
    c("job-max-failed-indexes-alone", "spec.backoffLimitPerIndex", DELETE),
    c("job-replacement-policy-unknown", "spec.podReplacementPolicy", "Sometimes"),
    c("job-replacement-terminating-with-pfp", "spec.podReplacementPolicy", "TerminatingOrFailed"),
    c("job-ttl-negative", "spec.ttlSecondsAfterFinished", -1),
    c("job-active-deadline-zero", "spec.activeDeadlineSeconds", 0),
    c("job-selector-without-manual", "spec.selector", {"matchLabels": {"kgen.dev/role": "trainer"}}),
    c("job-suspend-as-string", "spec.suspend", "true"),
    c("job-success-policy-empty-rules", "spec.successPolicy", {"rules": []}),
    c("job-managed-by-invalid", "spec.managedBy", "not a domain"),
    c("job-unknown-field", "spec.completion", 2),
    c("job-api-version-wrong", "apiVersion", "batch/v2"),
    # the Service
    c("service-cluster-ip-invalid", "spec.clusterIP", "not-an-ip", "Service"),
    c("service-type-unknown", "spec.type", "Balancer", "Service"),
    c("service-port-zero", "spec.ports.0.port", 0, "Service"),
    c("service-port-names-duplicate", "spec.ports.1.name", "rendezvous", "Service"),
    c("service-target-port-zero", "spec.ports.0.targetPort", 0, "Service"),
    c("service-target-port-name-invalid", "spec.ports.0.targetPort", "Rendezvous_Port", "Service"),
    c("service-port-name-missing", "spec.ports.1.name", DELETE, "Service"),
    c("service-protocol-http", "spec.ports.0.protocol", "HTTP", "Service"),
    c("service-session-affinity-unknown", "spec.sessionAffinity", "Sticky", "Service"),
    c("service-publish-as-string", "spec.publishNotReadyAddresses", "yes", "Service"),
    c("service-selector-value-invalid", "spec.selector.kgen.dev/role", "train er", "Service"),
    c("service-headless-nodeport", "spec.type", "NodePort", "Service"),
    c("service-traffic-policy-clusterip", "spec.externalTrafficPolicy", "Local", "Service"),
    c("service-unknown-field", "spec.clusterIp", "None", "Service"),
    # the ConfigMap
    c("configmap-key-with-slash", "data", {"bad/key": "x"}, "ConfigMap"),
    c("configmap-value-int", "data", {"k": 5}, "ConfigMap"),
    c("configmap-binary-not-base64", "binaryData", {"b": "***"}, "ConfigMap"),
    c("configmap-key-in-data-and-binary", "binaryData", {"kgen_entrypoint.py": "eA=="}, "ConfigMap"),
    c("configmap-immutable-as-string", "immutable", "yes", "ConfigMap"),
    # the NetworkPolicy
    c("netpol-policy-type-unknown", "spec.policyTypes", ["Both"], "NetworkPolicy"),
    c("netpol-port-protocol-http", "spec.ingress.0.ports", [{"port": 9090, "protocol": "HTTP"}], "NetworkPolicy"),
    c("netpol-port-zero", "spec.ingress.0.ports", [{"port": 0}], "NetworkPolicy"),
    c("netpol-end-port-below-port", "spec.ingress.0.ports", [{"port": 9000, "endPort": 8000}], "NetworkPolicy"),
    c("netpol-cidr-invalid", "spec.ingress.0.from", [{"ipBlock": {"cidr": "10.0.0.0/33"}}], "NetworkPolicy"),
    c("netpol-except-outside-cidr", "spec.ingress.0.from", [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["192.168.0.0/16"]}}], "NetworkPolicy"),
    c("netpol-match-operator-unknown", "spec.podSelector", {"matchExpressions": [{"key": "a", "operator": "Equals", "values": ["b"]}]}, "NetworkPolicy"),
    c("netpol-match-in-no-values", "spec.podSelector", {"matchExpressions": [{"key": "a", "operator": "In", "values": []}]}, "NetworkPolicy"),
    c("netpol-match-label-invalid", "spec.podSelector.matchLabels.kgen.dev/role", "a b", "NetworkPolicy"),
    c("netpol-ipblock-with-selector", "spec.ingress.0.from.0.ipBlock", {"cidr": "10.0.0.0/8"}, "NetworkPolicy"),
    # the StatefulSet
    c("sts-pod-management-unknown", "spec.podManagementPolicy", "Random", base="statefulset"),
    c("sts-update-strategy-unknown", "spec.updateStrategy", {"type": "Rolling"}, base="statefulset"),
    c("sts-replicas-negative", "spec.replicas", -1, base="statefulset"),
    c("sts-selector-mismatch", "spec.selector.matchLabels", {"app": "other"}, base="statefulset"),
    c("sts-restart-policy-never", "POD.restartPolicy", "Never", base="statefulset"),
    c("sts-min-ready-negative", "spec.minReadySeconds", -1, base="statefulset"),
    c("sts-ordinals-negative", "spec.ordinals", {"start": -1}, base="statefulset"),
    c("sts-pvc-retention-unknown", "spec.persistentVolumeClaimRetentionPolicy", {"whenDeleted": "Keep"}, base="statefulset"),
    c("sts-service-name-invalid", "spec.serviceName", "Bad_Svc", base="statefulset"),
    c("sts-unknown-field", "spec.replica", 2, base="statefulset"),
    c("sts-container-name-uppercase", "CTR.name", "Trainer", base="statefulset"),
    # the JobSet (CRD schema and its CEL rules; JobSet's own webhook is not running)
    c("jobset-replicated-job-name-invalid", "spec.replicatedJobs.0.name", "Bad_Name", base="jobset"),
    c("jobset-replicas-negative", "spec.replicatedJobs.0.replicas", -1, base="jobset"),
    c("jobset-max-restarts-negative", "spec.failurePolicy.maxRestarts", -1, base="jobset"),
    c("jobset-success-operator-unknown", "spec.successPolicy", {"operator": "Some"}, base="jobset"),
    c("jobset-dns-hostnames-as-string", "spec.network", {"enableDNSHostnames": "yes"}, base="jobset"),
    c("jobset-unknown-field", "spec.replicatedJob", [], base="jobset"),
    c("jobset-container-name-uppercase", "CTR.name", "Trainer", base="jobset"),
    c("jobset-job-restart-policy-always", "POD.restartPolicy", "Always", base="jobset"),
    c("jobset-job-parallelism-negative", "spec.replicatedJobs.0.template.spec.parallelism", -1, base="jobset"),
]  # fmt: skip


def _set(obj, path: list[str], value) -> None:
    for i, key in enumerate(path[:-1]):
        nxt = path[i + 1]
        if isinstance(obj, list):
            obj = obj[int(key)]
        else:
            obj = obj.setdefault(key, [] if nxt.isdigit() else {})
    last = path[-1]
    if isinstance(obj, list):
        obj[int(last)] = value
    elif value is DELETE:
        obj.pop(last, None)
    else:
        obj[last] = value


def split(path: str) -> list[str]:
    """Dotted path; a key holding dots (label keys such as kgen.dev/role) is the rest after a known map."""
    for m in ("labels.", "matchLabels.", "selector."):
        if m in path and "/" in path.split(m, 1)[1]:
            head, tail = path.split(m, 1)
            return [*head.split("."), m[:-1], tail] if head else [m[:-1], tail]
    return path.split(".")


def apply_edits(docs: list[dict], edits: list) -> list[dict]:
    docs = copy.deepcopy(docs)
    wl = next(d for d in docs if d["kind"] in POD)
    for kind, path, value in edits:
        target = wl if kind == WL else next(d for d in docs if d["kind"] == kind)
        path = path.replace("POD.", POD[wl["kind"]] + ".").replace("CTR.", POD[wl["kind"]] + ".containers.0.")
        if value == "DUPLICATE":
            pod = target
            for k in POD[wl["kind"]].split("."):
                pod = pod[int(k)] if isinstance(pod, list) else pod[k]
            pod["containers"].append(copy.deepcopy(pod["containers"][0]))
            continue
        _set(target, split(path), value)
    return docs
