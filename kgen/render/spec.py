"""The typed training spec: every value kgen renders, and everything derived from it.

Values arrive as a nested mapping (see ``kgen.render.layering``); ``build_spec`` checks each one and
derives names, MASTER_ADDR, world size and label sets, so templates only place values.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

from kgen import jobset as jobset_facts
from kgen.errors import NestedLauncherError, UsageError
from kgen.lint.k8s import ENV_VAR_NAME, is_dns1035_label, is_dns_label, is_dns_subdomain, parse_quantity
from kgen.render.runsecret import SECRET_DIR, SECRET_FILE
from kgen.versions import DEFAULT_K8S, MAX_K8S, MIN_K8S

# ---------------------------------------------------------------------------------------------
# The values reference. One entry per key: (type, default, one-line doc). Nested keys are dotted.
# Types: int, str, bool, "int?" (int or null), "bool?", "list[str]", "dict[str,str]", "list[dict]",
# "dict", "env" (NAME: string, or NAME: {valueFrom: ...}). The README's values table is generated from this
# (and a test keeps them in sync).
# ---------------------------------------------------------------------------------------------
VALUES: dict[str, tuple[str, Any, str]] = {
    "description": ("str", "", "One line about the preset (shown by `kgen presets list`; not rendered)."),
    "name": ("str", "kgen-train", "Name of the Job/StatefulSet and the Service; pods are `<name>-<index>`."),
    "namespace": ("str", "", "Namespace of every object; empty = kubectl's current namespace."),
    "kind": ("str", "job", "`job` (Indexed Job), `statefulset` or `jobset` (needs the JobSet controller); any case."),
    "nodes": ("int", 2, "Number of nodes (pods). One Job/StatefulSet object whatever the count."),
    "gpus": ("int", 8, "`nvidia.com/gpu` per node (requests = limits); 0 renders a CPU job (gloo)."),
    "nprocPerNode": ("int", 0, "Processes per node; 0 = auto (= gpus, or 1 for CPU jobs)."),
    "image": ("str", "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime", "Container image (needs python3 and torch)."),
    "imagePullPolicy": ("str", "IfNotPresent", "Always, IfNotPresent or Never."),
    "python": ("str", "python3", "Interpreter in the image that runs the entrypoint."),
    "command": (
        "argv",
        [],
        "Training script and arguments torchrun runs on every worker; empty = smoke test. "
        "A string is split like a shell would (`train.py --lr 3e-4` = 3 arguments). It starts with a script, "
        "a program or `-m module`, never an option or an empty string (the entrypoint's own check).",
    ),
    "port": ("int", 29500, "Rendezvous port (torchrun MASTER_PORT) on pod 0."),
    "livenessPort": ("int", 29501, "Port of the entrypoint's peer-liveness channel on pod 0."),
    "shmSize": (
        "str",
        "16Gi",
        "Size limit of the memory-backed /dev/shm (> 0); a warning when the memory limit is not above it.",
    ),
    "env": (
        "env",
        {},
        "Extra environment variables: `NAME: value` (values stay strings), or `NAME: {valueFrom: ...}` "
        "from a Secret or ConfigMap key, a pod field or a resource (secretKeyRef, configMapKeyRef, fieldRef, "
        "resourceFieldRef; Kubernetes form).",
    ),
    "cpu": (
        "str",
        "auto",
        "CPU request per pod (a quantity); auto = 2 per GPU (1 per process for CPU jobs); empty = none.",
    ),
    "memory": (
        "str",
        "auto",
        "Memory request per pod (a quantity); auto = 8Gi per GPU (2Gi per process for CPU jobs); empty = none.",
    ),
    "guaranteed": (
        "bool",
        False,
        "Guaranteed QoS: cpu and memory limits = requests (the memory limit then also bounds /dev/shm use).",
    ),
    "resources.requests": (
        "dict[str,str]",
        {},
        "Extra resource requests, e.g. ephemeral-storage: 100Gi (cpu/memory here override `cpu`/`memory`).",
    ),
    "resources.limits": ("dict[str,str]", {}, "Extra resource limits (GPUs are set from `gpus`)."),
    "envFrom": (
        "list[dict]",
        [],
        "Trainer envFrom (Kubernetes form): every key of a Secret (secretRef) or ConfigMap (configMapRef), "
        "e.g. [{secretRef: {name: hf-token}}].",
    ),
    "workingDir": ("str", "", "Trainer working directory; empty = the image's."),
    "volumes": ("list[dict]", [], "Extra pod volumes (Kubernetes form), e.g. data and checkpoint PVCs."),
    "volumeMounts": ("list[dict]", [], "Extra trainer volumeMounts (Kubernetes form)."),
    "nodeSelector": ("dict[str,str]", {}, "Pod nodeSelector."),
    "tolerations": ("list[dict]", [], "Pod tolerations (Kubernetes form)."),
    "affinity": ("dict", {}, "Pod affinity (Kubernetes form)."),
    "priorityClassName": ("str", "", "Pod priorityClassName."),
    "runtimeClassName": ("str", "", "Pod runtimeClassName, e.g. nvidia where the NVIDIA runtime is not the default."),
    "schedulerName": ("str", "", "Pod schedulerName (e.g. a gang scheduler); empty = the default scheduler."),
    "topologySpreadConstraints": ("list[dict]", [], "Pod topologySpreadConstraints (Kubernetes form)."),
    "podSecurityContext": ("dict", {}, "Pod securityContext (Kubernetes form), e.g. fsGroup: 1000, runAsUser."),
    "initContainers": ("list[dict]", [], "Pod initContainers (Kubernetes form), run before the trainer."),
    "hostNetwork": (
        "bool",
        False,
        "Use the node's network namespace (e.g. for RDMA without a CNI plugin); "
        "dnsPolicy then defaults to ClusterFirstWithHostNet.",
    ),
    "hostIPC": ("bool", False, "Use the node's IPC namespace and /dev/shm (no memory-backed /dev/shm volume)."),
    "dnsPolicy": (
        "str",
        "",
        "ClusterFirst, ClusterFirstWithHostNet or None; empty = ClusterFirst "
        "(ClusterFirstWithHostNet with hostNetwork).",
    ),
    "imagePullSecrets": ("list[str]", [], "Names of image pull Secrets."),
    "serviceAccountName": ("str", "", "Pod service account, a DNS subdomain (its token is still not mounted)."),
    "labels": (
        "dict[str,str]",
        {},
        "Extra labels on every object and on the pods; kgen's own (app.kubernetes.io/name, instance, managed-by, "
        "kgen.dev/role), Kueue's and the controllers' label keys are refused.",
    ),
    "annotations": ("dict[str,str]", {}, "Extra annotations on every object and on the pods."),
    "nccl.debug": ("str", "WARN", "NCCL_DEBUG (empty = not set)."),
    "nccl.socketIfname": ("str", "", "NCCL_SOCKET_IFNAME (empty = not set)."),
    "nccl.ibDisable": ("bool?", None, "NCCL_IB_DISABLE: true on plain-Ethernet clusters; null = not set."),
    "gloo.socketIfname": ("str", "", "GLOO_SOCKET_IFNAME (empty = not set)."),
    "timeouts.masterWait": ("int", 600, "Seconds a node waits for pod 0 to be reachable before it fails."),
    "timeouts.rendezvous": ("int", 300, "Seconds the rendezvous waits for every node (torchrun static timeout)."),
    "timeouts.heartbeat": ("int", 5, "Seconds of silence after which a peer counts as dead (fail-stop)."),
    "timeouts.heartbeatInterval": ("int", 1, "Seconds between liveness heartbeats."),
    "reform.maxReformations": (
        "int",
        10,
        "Times the group may re-form in place after a lost node (new generation); 0 = off (fail-stop, exit 75).",
    ),
    "reform.replacementTimeout": ("int", 300, "Seconds the others wait for a lost node's replacement to join."),
    "reform.onScriptError": ("str", "fail", "A training script's own non-zero exit: `fail` the run, or `reform`."),
    "reform.nodeLostTolerationSeconds": (
        "int?",
        30,
        "tolerationSeconds for the node not-ready/unreachable taints (a dead node's pod is evicted after "
        "this; Kubernetes' default is 300); null = not rendered.",
    ),
    "maxRestarts": (
        "int",
        0,
        "torchrun --max-restarts; must be 0 (fail-stop): the Job/StatefulSet restarts the whole group.",
    ),
    "terminationGracePeriodSeconds": ("int", 30, "Pod grace period on deletion."),
    "activeDeadlineSeconds": (
        "int?",
        None,
        "Job/JobSet: hard wall-clock limit in seconds (> 0); null = none. Keys a kind does not use "
        "(this one and ttlSecondsAfterFinished with a StatefulSet, reform.maxReformations and "
        "reform.replacementTimeout with a JobSet, jobset.maxRestarts with a Job or StatefulSet) "
        "render with a warning on stderr.",
    ),
    "ttlSecondsAfterFinished": (
        "int?",
        None,
        "Job/JobSet: delete the finished workload after this many seconds; null = keep.",
    ),
    "podDisruptionBudget": (
        "bool",
        False,
        "Render a PodDisruptionBudget (maxUnavailable 0): voluntary evictions such as node drains wait for the job.",
    ),
    "rdma": ("bool", False, "Opt-in for RDMA/InfiniBand: adds the IPC_LOCK capability (never privileged)."),
    # --- JobSet and Kueue (docs/jobset.md) ---
    "jobset.maxRestarts": (
        "int",
        3,
        "JobSet: group restarts after a crash or peer loss (failurePolicy.maxRestarts); preemptions do not count.",
    ),
    "queue": (
        "str",
        "",
        "Kueue LocalQueue (label kueue.x-k8s.io/queue-name); the workload waits suspended until Kueue admits it.",
    ),
    "workloadPriorityClass": ("str", "", "Kueue WorkloadPriorityClass (label kueue.x-k8s.io/priority-class)."),
    "topology.required": (
        "str",
        "",
        "Kueue TAS: node label of the level all pods must share, e.g. cloud.google.com/gce-topology-block.",
    ),
    "topology.preferred": ("str", "", "Kueue TAS: node label of the level the pods should share (best effort)."),
    # --- run authentication and port fencing (README, Security) ---
    "auth.secretName": (
        "str",
        "",
        "Secret holding the run's secret (key `secret`) that the nodes prove membership with; empty = render "
        "`<name>-auth`, derived from your kgen key ($KGEN_KEY_FILE, else ~/.config/kgen/run-key) and the run's "
        "namespace/name. Multi-node runs only.",
    ),
    "networkPolicy.enabled": (
        "bool",
        True,
        "Render a NetworkPolicy: the run's pods accept connections only from the run's own pods (every port).",
    ),
    "networkPolicy.extraIngress": (
        "list[dict]",
        [],
        "More NetworkPolicy ingress rules (Kubernetes form), e.g. a metrics port from a monitoring namespace.",
    ),
    "patches": (
        "list[dict]",
        [],
        "Escape hatch: [{target: {kind, name?}, patch: {...}}], JSON merge patches applied to the rendered "
        "objects (lists of named items merge by name), then linted like everything else.",
    ),
}

KINDS = ("job", "statefulset", "jobset")
ON_SCRIPT_ERROR = ("fail", "reform")
NODE_LOST_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
PULL_POLICIES = ("Always", "IfNotPresent", "Never")
DNS_POLICIES = ("ClusterFirst", "ClusterFirstWithHostNet", "None")

# Environment variables kgen sets itself: user env may not override them.
RESERVED_ENV = {
    "NNODES": "--nodes",
    "NPROC_PER_NODE": "--gpus or nprocPerNode",
    "MASTER_ADDR": "derived from --name",
    "MASTER_PORT": "port",
    "WORLD_SIZE": "derived by torchrun (nodes x processes per node)",
    "RANK": "derived by torchrun",
    "LOCAL_RANK": "derived by torchrun",
    "NODE_RANK": "derived from the pod index",
    "JOB_COMPLETION_INDEX": "set by Kubernetes",
    "NCCL_DEBUG": "nccl.debug",
    "NCCL_SOCKET_IFNAME": "nccl.socketIfname",
    "NCCL_IB_DISABLE": "nccl.ibDisable",
    "GLOO_SOCKET_IFNAME": "gloo.socketIfname",
}


# Labels kgen sets itself: the Service and workload selectors and the cluster verbs (kgen.cluster.labels)
# find a run by them, so values may not override them. The value says what sets the label instead.
RESERVED_LABELS = {
    "app.kubernetes.io/name": "kgen",
    "app.kubernetes.io/instance": "--name",
    "app.kubernetes.io/managed-by": "kgen (kgen list/status/stop find runs by it)",
    "kgen.dev/role": "kgen (the selectors match it)",
    jobset_facts.QUEUE_LABEL: "--queue",
    jobset_facts.PRIORITY_LABEL: "workloadPriorityClass",
}
# Label prefixes and keys the controllers set on the pods (the entrypoint reads some of them).
CONTROLLER_LABEL_PREFIXES = ("batch.kubernetes.io/", "jobset.sigs.k8s.io/", "kueue.x-k8s.io/")
CONTROLLER_LABELS = ("controller-revision-hash", "apps.kubernetes.io/pod-index", "statefulset.kubernetes.io/pod-name")

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


def reserved_label(key: str) -> str | None:
    """What sets label ``key`` when values may not (None: the key is free)."""
    if key in RESERVED_LABELS:
        return RESERVED_LABELS[key]
    if key in CONTROLLER_LABELS or key.startswith(CONTROLLER_LABEL_PREFIXES):
        return "Kubernetes' controllers"
    return None


def command_problem(command: list[str] | tuple[str, ...]) -> str | None:
    """The entrypoint's own start-up checks of the training command (kgen_entrypoint.check_command),
    minus the script-exists check, which only the pod can make; plus an empty program name.
    None when the command is fine; an empty command is the smoke test."""
    if not command:
        return None
    from kgen.launchers import nested_launcher, problem

    nested = nested_launcher(command)
    if nested is not None:
        return problem(nested)
    head = command[0]
    if head == "":
        return "the program is an empty string: torchrun would run ''"
    if head == "-m":
        if len(command) < 2 or command[1].startswith("-") or not command[1]:
            return "'-m' needs a module name: -- -m package.module [args]"
    elif head.startswith("-"):
        return f"starts with the option {head!r}: give a script, '-m module' or a program first"
    return None


def parse_k8s_version(text: str, option: str = "--kubernetes-version") -> int:
    """'1.31', 'v1.31', '1.31.2' -> 31 (the minor version); 1.27 ... 1.37 supported."""
    m = re.fullmatch(r"v?1\.(\d+)(\.\d+)?", str(text).strip())
    if not m:
        raise UsageError(f'must look like 1.31, got "{text}"', option=option)
    minor = int(m.group(1))
    if not MIN_K8S <= minor <= MAX_K8S:
        raise UsageError(f'supported versions are 1.{MIN_K8S} to 1.{MAX_K8S}, got "{text}"', option=option)
    return minor


class Features(NamedTuple):
    """Kubernetes features the output may use, from the oldest cluster it must run on."""

    minor: int

    @property
    def pod_failure_policy(self) -> bool:  # GA 1.31
        return self.minor >= 31

    @property
    def pod_replacement_policy(self) -> bool:  # GA 1.34
        return self.minor >= 34

    @property
    def backoff_limit_per_index(self) -> bool:  # GA 1.33: the pod-failure back-off is counted per index
        return self.minor >= 33


def kube_escape(text: str) -> str:
    """Escape a string for Kubernetes' $(VAR) expansion in command, args and env values.

    The kubelet turns "$$" into "$" and "$(NAME)" into NAME's value when NAME is defined earlier;
    doubling every "$" that precedes "$" or "(" makes the process see exactly ``text``."""
    return re.sub(r"\$(?=[$(])", "$$", text)


class EnvVar(NamedTuple):
    name: str
    value: str | None = None
    field_path: str | None = None  # downward API fieldRef (kgen's own variables)
    value_from: dict | None = None  # a user's valueFrom (secretKeyRef, configMapKeyRef, fieldRef, resourceFieldRef)


class TrainingSpec(NamedTuple):
    values: dict[str, Any]
    origins: dict[str, str]
    k8s: Features
    name: str
    namespace: str
    kind: str
    nodes: int
    gpus: int
    nproc_per_node: int
    image: str
    command: tuple[str, ...]
    port: int
    liveness_port: int
    env: tuple[EnvVar, ...] = ()
    resources: dict[str, dict[str, Any]] | None = None  # the trainer's requests/limits
    dns_policy: str = ""  # "" = leave Kubernetes' default
    run_secret_data: str = (
        ""  # the rendered Secret's data (base64); set by kgen.render.pipeline.build (kgen.render.runsecret)
    )

    # ---- derived names --------------------------------------------------------------------
    @property
    def service_name(self) -> str:
        return self.name

    @property
    def configmap_name(self) -> str:
        return f"{self.name}-entrypoint"

    @property
    def master_addr(self) -> str:
        """Pod 0's own DNS name: <name>-0.<service> (Job subdomain / StatefulSet serviceName), or
        JobSet's <name>-<replicatedJob>-0-0.<subdomain>."""
        return _master_addr(self.kind, self.name)

    @property
    def world_size(self) -> int:
        return self.nodes * self.nproc_per_node

    @property
    def is_job(self) -> bool:
        return self.kind == "job"

    @property
    def selector_labels(self) -> dict[str, str]:
        return {"app.kubernetes.io/instance": self.name, "kgen.dev/role": "trainer"}

    @property
    def object_labels(self) -> dict[str, str]:
        labels = {
            "app.kubernetes.io/name": "kgen",
            "app.kubernetes.io/instance": self.name,
            "app.kubernetes.io/managed-by": "kgen",
        }
        labels.update(self.values["labels"])
        return labels

    @property
    def pod_labels(self) -> dict[str, str]:
        labels = dict(self.object_labels)
        labels.update(self.selector_labels)
        return labels

    @property
    def entrypoint_args(self) -> list[str]:
        """The trainer's args, escaped so that Kubernetes' $(VAR) expansion leaves them as given."""
        return ["--", *map(kube_escape, self.command)] if self.command else ["--smoke-test"]

    @property
    def container_command(self) -> list[str]:
        return [kube_escape(self.values["python"]), "/opt/kgen/kgen_entrypoint.py"]

    @property
    def shm_volume(self) -> bool:
        """The memory-backed /dev/shm volume; with hostIPC the node's /dev/shm is used instead."""
        return not self.values["hostIPC"]

    @property
    def pod_tolerations(self) -> list[dict[str, Any]]:
        """The user's tolerations, plus a short toleration of the node-lost taints (unless the user
        tolerates those keys already), so a dead node's pod is evicted and replaced in tens of seconds."""
        tolerations = list(self.values["tolerations"])
        seconds = self.values["reform.nodeLostTolerationSeconds"]
        if seconds is None:
            return tolerations
        have = {t.get("key") for t in tolerations if isinstance(t, dict)}
        for key in NODE_LOST_TAINTS:
            if key not in have:
                tolerations.append(
                    {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds}
                )
        return tolerations

    def v(self, key: str) -> Any:
        return self.values[key]

    # ---- run authentication and port fencing (kgen/runsecret.py) ----------------------------
    @property
    def needs_secret(self) -> bool:
        """Multi-node runs authenticate their liveness channel; one node has none."""
        return self.nodes > 1

    @property
    def renders_secret(self) -> bool:
        return self.needs_secret and not self.values["auth.secretName"]

    @property
    def secret_name(self) -> str:
        return self.values["auth.secretName"] or f"{self.name}-auth"

    @property
    def secret_dir(self) -> str:
        return SECRET_DIR

    @property
    def renders_network_policy(self) -> bool:
        """NetworkPolicies do not apply to host-network pods: none is rendered for them."""
        return bool(self.values["networkPolicy.enabled"]) and not self.values["hostNetwork"]

    # ---- JobSet and Kueue (kgen/jobset.py has the naming facts) ----------------------------
    @property
    def is_jobset(self) -> bool:
        return self.kind == "jobset"

    @property
    def replicated_job(self) -> str:
        return jobset_facts.REPLICATED_JOB

    @property
    def subdomain(self) -> str:
        return self.name

    @property
    def workload_labels(self) -> dict[str, str]:
        """Labels of the Job/StatefulSet/JobSet itself: Kueue reads its queue and priority there."""
        labels = dict(self.object_labels)
        if self.values["queue"]:
            labels[jobset_facts.QUEUE_LABEL] = self.values["queue"]
        if self.values["workloadPriorityClass"]:
            labels[jobset_facts.PRIORITY_LABEL] = self.values["workloadPriorityClass"]
        return labels

    @property
    def pod_annotations(self) -> dict[str, str]:
        """Pod template annotations: the values' annotations plus Kueue's topology request."""
        annotations = dict(self.values["annotations"])
        if self.values["topology.required"]:
            annotations[jobset_facts.REQUIRED_TOPOLOGY] = self.values["topology.required"]
        if self.values["topology.preferred"]:
            annotations[jobset_facts.PREFERRED_TOPOLOGY] = self.values["topology.preferred"]
        return annotations

    @property
    def suspended(self) -> bool:
        """Created suspended: Kueue unsuspends a queued Job/JobSet when it admits it."""
        return bool(self.values["queue"]) and self.kind in ("job", "jobset")

    @property
    def jobset_failure_patterns(self) -> dict[str, str]:
        return {
            "disruption": jobset_facts.message_pattern(jobset_facts.PFP_DISRUPTION_INDEX),
            "not_retriable": jobset_facts.message_pattern(jobset_facts.PFP_NOT_RETRIABLE_INDEX),
        }

    @property
    def not_retriable_exit_codes(self) -> list[int]:
        return list(jobset_facts.NOT_RETRIABLE_EXIT_CODES)


# ---------------------------------------------------------------------------------------------
def _fail(origins: dict[str, str], key: str, message: str, hint: str | None = None) -> UsageError:
    """An error naming where the value came from: the flag, `file: key`, `preset P: key` or the key."""
    origin = origins.get(key, "default")
    return UsageError(message, option=key if origin == "default" else origin, hint=hint)


def _where(origins: dict[str, str], key: str) -> str:
    """How a message names another value: `livenessPort (default)` or `livenessPort (from v.yaml)`."""
    origin = origins.get(key, "default")
    if origin == "default":
        return f"{key} (the default)"
    source = origin[: -len(f": {key}")] if origin.endswith(f": {key}") else origin
    return f"{key} (from {source})"


def build_spec(values: dict[str, Any], origins: dict[str, str], k8s_minor: int = DEFAULT_K8S) -> TrainingSpec:
    """Check every value (naming the option or file it came from) and derive the spec."""
    o = origins
    v = values

    def integer(key: str, low: int, high: int = INT32_MAX) -> int:
        """An integer in [low, high]; the default bound is the API's int32 range."""
        val = v[key]
        if isinstance(val, bool) or not isinstance(val, int):
            raise _fail(o, key, f'must be an integer, got "{val}"')
        if not low <= val <= high:
            raise _fail(o, key, f'must be an integer between {low} and {high}, got "{val}"')
        return val

    def text(key: str) -> str:
        val = v[key]
        if not isinstance(val, str):
            raise _fail(o, key, f'must be a string, got "{val}"')
        return val

    kind = text("kind").lower()
    if kind not in KINDS:
        raise _fail(o, "kind", f'must be job, statefulset or jobset, got "{kind}"')
    nodes = integer("nodes", 1, 100_000)
    gpus = integer("gpus", 0, 1024)
    nproc = integer("nprocPerNode", 0, 1024)
    if nproc == 0:
        nproc = gpus if gpus else 1
    elif gpus and nproc != gpus:
        raise _fail(
            o,
            "nprocPerNode",
            f"is {nproc} but gpus is {gpus}: one process per GPU",
            hint="leave nprocPerNode at 0 (auto) for GPU jobs",
        )
    _check_nested_launcher(v, o, gpus, nodes)

    name = text("name")
    if len(name) > 63:
        raise _fail(
            o,
            "name",
            f"is {len(name)} characters: a name is a DNS label of at most 63 characters",
            hint="use a shorter name",
        )
    if not is_dns_label(name):
        raise _fail(
            o,
            "name",
            f'must be a DNS label (lower-case letters, digits, "-"), got "{name}"',
            hint="for example --name llama-pretrain",
        )
    if k8s_minor < 36 and not is_dns1035_label(name):
        raise _fail(
            o,
            "name",
            f'must start with a letter (it names the Service), got "{name}"',
            hint="Kubernetes before 1.36 rejects Service names starting with a digit",
        )
    longest_host = f"{name}-{nodes - 1}"
    if len(longest_host) > 63:
        raise _fail(
            o,
            "name",
            f'is too long: pod hostname "{longest_host}" has {len(longest_host)} characters, the limit is 63',
            hint=f"use at most {63 - 1 - len(str(nodes - 1))} characters",
        )
    if kind == "statefulset" and len(name) > 52:
        raise _fail(
            o,
            "name",
            f"is {len(name)} characters: StatefulSet names must stay <= 52 "
            "(the controller appends a revision hash to a 63-character label)",
        )
    _check_jobset_and_kueue(v, o, kind, name, nodes)
    namespace = text("namespace")
    if namespace and not is_dns_label(namespace):
        raise _fail(o, "namespace", f'must be a DNS label, got "{namespace}"')

    image = text("image")
    if not image.strip() or any(c.isspace() for c in image):
        raise _fail(o, "image", f'must be a non-empty image reference without spaces, got "{image}"')
    if text("imagePullPolicy") not in PULL_POLICIES:
        raise _fail(o, "imagePullPolicy", f'must be one of {", ".join(PULL_POLICIES)}, got "{v["imagePullPolicy"]}"')
    if not text("python").strip():
        raise _fail(o, "python", "must name the interpreter in the image, e.g. python3")
    port = integer("port", 1, 65535)
    liveness = integer("livenessPort", 1, 65535)
    if port == liveness:
        # Blame the value the user set (the later layer), and name the other one and its origin.
        liveness_was_set = o.get("livenessPort", "default") != "default"
        blame, other = ("livenessPort", "port") if liveness_was_set else ("port", "livenessPort")
        raise _fail(
            o,
            blame,
            f"is {port}, already used by {_where(o, other)}: the rendezvous and liveness ports must differ",
            hint=f"choose another {blame}, or set {other} too",
        )
    shm = text("shmSize")
    shm_bytes = parse_quantity(shm)
    if shm_bytes is None or shm_bytes <= 0:
        raise _fail(o, "shmSize", f'must be a Kubernetes quantity > 0 such as 16Gi, got "{shm}"')
    for key in ("resources.requests", "resources.limits"):
        for res, qty in v[key].items():
            amount = parse_quantity(str(qty))
            if amount is None or amount < 0:
                raise _fail(o, key, f'{res}: must be a Kubernetes quantity >= 0 such as 8 or 64Gi, got "{qty}"')
            if res == "nvidia.com/gpu":
                raise _fail(o, key, "nvidia.com/gpu is set from gpus", hint="use --gpus")
    resources = _resources(v, o, gpus, nproc)
    dns_policy = _dns_policy(v, o)
    for key in ("runtimeClassName", "priorityClassName", "serviceAccountName"):
        if text(key) and not is_dns_subdomain(v[key]):
            raise _fail(o, key, f'must be a DNS subdomain (lower-case letters, digits, "-", "."), got "{v[key]}"')
    scheduler = text("schedulerName")
    if scheduler and (not scheduler.strip() or any(c.isspace() for c in scheduler)):
        raise _fail(o, "schedulerName", f'must be a scheduler name without spaces, got "{scheduler}"')
    _check_patches(v, o)
    for key in ("timeouts.masterWait", "timeouts.rendezvous", "timeouts.heartbeat", "timeouts.heartbeatInterval"):
        integer(key, 1)
    if v["timeouts.heartbeat"] <= v["timeouts.heartbeatInterval"]:
        raise _fail(o, "timeouts.heartbeat", "must be larger than timeouts.heartbeatInterval")
    if integer("maxRestarts", 0) != 0:
        raise _fail(
            o,
            "maxRestarts",
            f'must be 0, got "{v["maxRestarts"]}": torchrun restarts with static rendezvous hang in torch 2.13',
            hint="the Job or StatefulSet restarts the whole group instead",
        )
    integer("reform.maxReformations", 0, 10_000)
    integer("reform.replacementTimeout", 1)
    if text("reform.onScriptError") not in ON_SCRIPT_ERROR:
        raise _fail(o, "reform.onScriptError", f'must be fail or reform, got "{v["reform.onScriptError"]}"')
    if v["reform.nodeLostTolerationSeconds"] is not None:
        integer("reform.nodeLostTolerationSeconds", 0, INT64_MAX)  # tolerationSeconds: int64
    integer("terminationGracePeriodSeconds", 0, INT64_MAX)  # int64 in the API
    if v["activeDeadlineSeconds"] is not None:
        integer("activeDeadlineSeconds", 1, INT64_MAX)  # int64; the API requires > 0
    if v["ttlSecondsAfterFinished"] is not None:
        integer("ttlSecondsAfterFinished", 0)  # int32
    _check_labels(v, o)
    if text("auth.secretName") and not is_dns_subdomain(v["auth.secretName"]):
        raise _fail(o, "auth.secretName", f'must be a Secret name (a DNS subdomain), got "{v["auth.secretName"]}"')

    _check_volumes(v, o)
    _check_command(v, o)

    user_env = _user_env(v, o)

    features = Features(k8s_minor)
    env = _kgen_env(v, kind, name, nodes, nproc, port, liveness, _master_addr(kind, name)) + user_env
    return TrainingSpec(
        values=v,
        origins=o,
        k8s=features,
        name=name,
        namespace=namespace,
        kind=kind,
        nodes=nodes,
        gpus=gpus,
        nproc_per_node=nproc,
        image=image,
        command=tuple(v["command"]),
        port=port,
        liveness_port=liveness,
        env=tuple(env),
        resources=resources,
        dns_policy=dns_policy,
    )


def _resources(v: dict[str, Any], o: dict[str, str], gpus: int, nproc: int) -> dict[str, dict[str, Any]]:
    """The trainer's requests and limits: cpu/memory (auto from the shape), resources.*, the GPUs."""
    auto = {"cpu": str(2 * gpus) if gpus else str(nproc), "memory": f"{8 * gpus}Gi" if gpus else f"{2 * nproc}Gi"}
    requests: dict[str, Any] = {}
    for key in ("cpu", "memory"):
        val = v[key]
        if not isinstance(val, str):
            raise _fail(o, key, f'must be a string, got "{val}"')
        val = auto[key] if val == "auto" else val
        amount = parse_quantity(val) if val else 0
        if amount is None or (val and amount <= 0):
            example = "32 or 500m" if key == "cpu" else "256Gi"
            raise _fail(o, key, f'must be a positive quantity like {example} (or auto), got "{val}"')
        if val:
            requests[key] = val
    requests.update(v["resources.requests"])
    limits: dict[str, Any] = dict(v["resources.limits"])
    if v["guaranteed"]:
        for key in ("cpu", "memory"):
            if key not in requests:
                raise _fail(o, "guaranteed", f"needs a {key} request", hint=f"set {key}")
            limits.setdefault(key, requests[key])
            if limits[key] != requests[key]:
                raise _fail(
                    o,
                    "resources.limits",
                    f"{key}: is {limits[key]}, but guaranteed needs limits = requests ({requests[key]})",
                    hint=f"drop resources.limits.{key} or set it to {requests[key]}",
                )
    for res in sorted(set(requests) & set(limits)):
        request, limit = parse_quantity(str(requests[res])), parse_quantity(str(limits[res]))
        if request is not None and limit is not None and limit < request:
            source = "resources.requests" if res in v["resources.requests"] else res
            raise _fail(
                o,
                "resources.limits",
                f"{res}: limit {limits[res]} is below the request {requests[res]} (from {source})",
                hint=f"raise the limit, or lower {source}",
            )
    if gpus:
        requests["nvidia.com/gpu"] = gpus
        limits["nvidia.com/gpu"] = gpus
    out: dict[str, dict[str, Any]] = {}
    if requests:
        out["requests"] = requests
    if limits:
        out["limits"] = limits
    return out


def _dns_policy(v: dict[str, Any], o: dict[str, str]) -> str:
    """hostNetwork pods must still resolve MASTER_ADDR (a cluster DNS name): ClusterFirstWithHostNet."""
    policy = v["dnsPolicy"]
    if not isinstance(policy, str):
        raise _fail(o, "dnsPolicy", f'must be a string, got "{policy}"')
    if policy == "Default":
        raise _fail(
            o,
            "dnsPolicy",
            "Default resolves through the node, not the cluster DNS: MASTER_ADDR (pod 0's DNS name) would not resolve",
            hint=f"use one of {', '.join(DNS_POLICIES)}",
        )
    if policy and policy not in DNS_POLICIES:
        raise _fail(o, "dnsPolicy", f'must be one of {", ".join(DNS_POLICIES)}, got "{policy}"')
    if v["hostNetwork"]:
        if policy == "ClusterFirst":
            raise _fail(
                o,
                "dnsPolicy",
                "ClusterFirst with hostNetwork falls back to the node's DNS: MASTER_ADDR would not resolve",
                hint="use ClusterFirstWithHostNet (the default with hostNetwork)",
            )
        return policy or "ClusterFirstWithHostNet"
    return policy


PATCH_KEYS = ("target", "patch")


def _check_labels(v: dict[str, Any], o: dict[str, str]) -> None:
    for key in v["labels"]:
        owner = reserved_label(key)
        if owner:
            raise _fail(
                o, "labels", f"{key} is set by {owner}; do not set it in labels", hint="choose another label key"
            )


def _check_command(v: dict[str, Any], o: dict[str, str]) -> None:
    """The entrypoint's start-up checks (``command_problem``), made at render time instead of in every pod;
    and a script or module name with spaces is a command line given as one argument: torchrun would
    look for a script or module called "train.py --lr 3e-4" and fail in the cluster."""
    command = v["command"]
    problem = command_problem(command)
    if problem:
        raise _fail(
            o,
            "command",
            problem,
            hint="the script or module comes first, e.g. -- train.py --lr 3e-4 or -- -m pkg.train --lr 3e-4",
        )
    at = 1 if command[:1] == ["-m"] and len(command) > 1 else 0
    head = command[at] if command else ""
    if any(c.isspace() for c in head):
        import shlex

        try:
            words = [*command[:at], *shlex.split(head), *command[at + 1 :]]
        except ValueError:
            words = command
        fixed = shlex.join(words)
        from_cli = o.get("command") == "-- COMMAND"
        raise _fail(
            o,
            "command",
            f"{head!r} is one argument with spaces: torchrun would look for a script or module of that name",
            hint=f"drop the quotes: -- {fixed}"
            if from_cli
            else f"give one string to split like a shell, command: {fixed}, or one list item per argument",
        )


def _check_nested_launcher(v: dict[str, Any], o: dict[str, str], gpus: int, nodes: int) -> None:
    """A launcher as the training command (torchrun, python -m torch.distributed.run, accelerate launch,
    deepspeed) would run inside the entrypoint's own torchrun: refused, with the command to use instead."""
    import shlex

    from kgen.launchers import correction, nested_launcher, problem

    command = v["command"]
    nested = nested_launcher(command) if isinstance(command, list) else None
    if nested is None:
        return
    fix = correction(
        nested,
        gpus=gpus,
        nproc=v["nprocPerNode"],
        nproc_set=o.get("nprocPerNode", "default") != "default",
        nodes=nodes,
        nodes_set=o.get("nodes", "default") != "default",
    )
    origin = o.get("command", "command")
    if origin == "-- COMMAND":  # the CLI rewrites this into the whole command line
        use = shlex.join([*fix.flags(), "--", *fix.command])
    elif origin.startswith("--set"):
        use = shlex.join(["--set", "command=" + shlex.join(fix.command), *fix.flags()])
    else:  # a values file: the keys to write there (JSON lists and numbers are YAML)
        import json

        use = ", ".join(f"{k}: {json.dumps(val)}" for k, val in {"command": fix.command, **fix.values()}.items())
    raise NestedLauncherError(
        problem(nested), option=origin, use=use, command=fix.command, add=fix.flags(), notes=list(fix.notes)
    )


def patch_origin(origins: dict[str, str], index: int) -> str:
    """`v.yaml: patches[1]`, `--set patches[0]`, `patches[0]` (the default cannot hold patches)."""
    origin = origins.get("patches", "default")
    return f"{'patches' if origin == 'default' else origin}[{index}]"


def _check_patches(v: dict[str, Any], o: dict[str, str]) -> None:
    for i, item in enumerate(v["patches"]):
        where = patch_origin(o, i)
        extra = sorted(set(item) - set(PATCH_KEYS))
        if extra or "target" not in item or "patch" not in item:
            raise UsageError(
                "must have exactly the keys target and patch"
                + (f", got {', '.join(map(str, extra))}" if extra else ""),
                option=where,
                hint="for example {target: {kind: Workload}, patch: {metadata: {annotations: {team: ml}}}}",
            )
        target = item["target"]
        if not isinstance(target, dict) or not isinstance(target.get("kind"), str) or not target["kind"]:
            raise UsageError("target: must be a mapping with a kind, e.g. {kind: Job}", option=where)
        bad = sorted(set(target) - {"kind", "name"})
        if bad or not isinstance(target.get("name", ""), str):
            raise UsageError("target: only kind and name (a string) select objects", option=where)
        patch = item["patch"]
        if not isinstance(patch, dict) or not patch:
            raise UsageError("patch: must be a non-empty mapping (a JSON merge patch)", option=where)
        for key in ("kind", "apiVersion"):
            if key in patch:
                raise UsageError(f"patch: cannot change {key}", option=where, hint="a patch edits an object")


RESERVED_VOLUMES = {"kgen-entrypoint", "dshm", "kgen-secret"}
RESERVED_MOUNTS = {"/opt/kgen", "/dev/shm", SECRET_DIR}


def _user_env(v: dict[str, Any], o: dict[str, str]) -> list[EnvVar]:
    """values env (a string, or valueFrom a Secret, ConfigMap, pod field or resource) and envFrom, checked
    as the API server checks them (kgen.render.envvars)."""
    from kgen.render.envvars import EnvProblem, env_from, value_from

    containers = {"trainer", *(str(c.get("name")) for c in v["initContainers"] if isinstance(c, dict))}
    out: list[EnvVar] = []
    for key, val in v["env"].items():
        if not ENV_VAR_NAME.match(key):
            raise _fail(
                o,
                "env",
                f'"{key}" is not a valid environment variable name',
                hint="use letters, digits, _ . - and no leading digit",
            )
        if key in RESERVED_ENV or key.startswith("KGEN_"):
            where = RESERVED_ENV.get(key, "kgen's entrypoint")
            raise _fail(o, "env", f"{key} is set by kgen ({where}); do not set it by hand")
        if isinstance(val, str):
            out.append(EnvVar(key, kube_escape(val)))
            continue
        try:
            out.append(EnvVar(key, value_from=value_from(key, val, containers)))
        except EnvProblem as exc:
            raise _fail(o, "env", exc.message, hint=exc.hint) from None
    try:
        env_from(v["envFrom"])
    except EnvProblem as exc:
        raise _fail(o, "envFrom", exc.message, hint=exc.hint) from None
    return out


def _check_volumes(v: dict[str, Any], o: dict[str, str]) -> None:
    names = set()
    for vol in v["volumes"]:
        name = vol.get("name")
        if not is_dns_label(name):
            raise _fail(o, "volumes", f'volume name "{name}" is not a DNS label', hint="for example data")
        if name in RESERVED_VOLUMES or name in names:
            raise _fail(
                o,
                "volumes",
                f'volume name "{name}" is already used',
                hint="kgen uses kgen-entrypoint, dshm, kgen-secret",
            )
        names.add(name)
    for mount in v["volumeMounts"]:
        name, path = mount.get("name"), mount.get("mountPath")
        if name not in names:
            raise _fail(o, "volumeMounts", f'mount "{name}" names no volume', hint="add it under volumes")
        if not isinstance(path, str) or not path.startswith("/") or path.rstrip("/") in RESERVED_MOUNTS:
            raise _fail(
                o, "volumeMounts", f'mountPath "{path}" must be absolute and not /opt/kgen, /dev/shm or {SECRET_DIR}'
            )


def _kgen_env(
    v: dict[str, Any], kind: str, name: str, nodes: int, nproc: int, port: int, liveness: int, master: str
) -> list[EnvVar]:
    env = [
        EnvVar("NNODES", str(nodes)),
        EnvVar("NPROC_PER_NODE", str(nproc)),
        EnvVar("MASTER_ADDR", master),
        EnvVar("MASTER_PORT", str(port)),
        EnvVar("KGEN_LIVENESS_PORT", str(liveness)),
        EnvVar("KGEN_JOB_NAME", name),
        EnvVar("KGEN_KIND", kind),
    ]
    if kind == "job":
        env.append(EnvVar("KGEN_RUN_ID", field_path="metadata.labels['batch.kubernetes.io/controller-uid']"))
    elif kind == "jobset":
        # The child Job's UID: JobSet recreates the child Job on every group restart, so every
        # attempt is a new run; the attempt number itself goes into the rendezvous id as well.
        env.append(EnvVar("KGEN_RUN_ID", field_path="metadata.labels['batch.kubernetes.io/controller-uid']"))
        env.append(
            EnvVar("KGEN_RESTART_ATTEMPT", field_path=f"metadata.labels['{jobset_facts.RESTART_ATTEMPT_LABEL}']")
        )
    else:
        env.append(EnvVar("KGEN_RUN_ID", field_path="metadata.labels['controller-revision-hash']"))
        env.append(EnvVar("KGEN_POD_INDEX", field_path="metadata.labels['apps.kubernetes.io/pod-index']"))
    env += [
        EnvVar("KGEN_MASTER_WAIT_TIMEOUT", str(v["timeouts.masterWait"])),
        EnvVar("KGEN_RDZV_TIMEOUT", str(v["timeouts.rendezvous"])),
        EnvVar("KGEN_HEARTBEAT_INTERVAL", str(v["timeouts.heartbeatInterval"])),
        EnvVar("KGEN_HEARTBEAT_TIMEOUT", str(v["timeouts.heartbeat"])),
        EnvVar("KGEN_MAX_RESTARTS", str(v["maxRestarts"])),
        # A JobSet restarts its whole group itself (jobset.maxRestarts): no re-formation in place there.
        EnvVar("KGEN_MAX_REFORMATIONS", "0" if kind == "jobset" else str(v["reform.maxReformations"])),
        EnvVar("KGEN_REPLACEMENT_TIMEOUT", str(v["reform.replacementTimeout"])),
        EnvVar("KGEN_ON_SCRIPT_ERROR", v["reform.onScriptError"]),
    ]
    if v["nccl.debug"]:
        env.append(EnvVar("NCCL_DEBUG", v["nccl.debug"]))
    if v["nccl.socketIfname"]:
        env.append(EnvVar("NCCL_SOCKET_IFNAME", v["nccl.socketIfname"]))
    if v["gloo.socketIfname"]:
        env.append(EnvVar("GLOO_SOCKET_IFNAME", v["gloo.socketIfname"]))
    if v["nccl.ibDisable"] is not None:
        env.append(EnvVar("NCCL_IB_DISABLE", "1" if v["nccl.ibDisable"] else "0"))
    if nodes > 1:  # the run's secret, mounted read-only from a Secret (never an environment value)
        env.append(EnvVar("KGEN_SECRET_FILE", SECRET_FILE))
    return env


# ---- JobSet and Kueue ----------------------------------------------------------------------
def _master_addr(kind: str, name: str) -> str:
    if kind == "jobset":
        return jobset_facts.pod_fqdn(name, name, 0)
    return f"{name}-0.{name}"


def _check_jobset_and_kueue(v: dict[str, Any], o: dict[str, str], kind: str, name: str, nodes: int) -> None:
    from kgen.lint.k8s import qualified_name_problem

    if kind == "jobset":
        longest = jobset_facts.longest_pod_name(name, nodes)
        if len(longest) > 63:
            raise _fail(
                o,
                "name",
                f'is too long for a JobSet of {nodes} pods: pod name "{longest}" (with the 5-character random '
                f"suffix) has {len(longest)} characters, the limit is 63",
                hint=f"use at most {jobset_facts.max_name_length(nodes)} characters",
            )
        if not is_dns1035_label(name):
            raise _fail(o, "name", f'must start with a letter (it is the JobSet\'s DNS subdomain), got "{name}"')
    restarts = v["jobset.maxRestarts"]
    if isinstance(restarts, bool) or not isinstance(restarts, int) or not 0 <= restarts <= 2**31 - 1:
        raise _fail(o, "jobset.maxRestarts", f'must be an integer >= 0, got "{restarts}"')
    for key in ("queue", "workloadPriorityClass"):
        value = v[key]
        if not isinstance(value, str):
            raise _fail(o, key, f'must be a string, got "{value}"')
        if value and not is_dns_subdomain(value):
            raise _fail(o, key, f'must be a Kubernetes object name (lower case, digits, "-", "."), got "{value}"')
    for key in ("topology.required", "topology.preferred"):
        value = v[key]
        if not isinstance(value, str):
            raise _fail(o, key, f'must be a string, got "{value}"')
        problem = qualified_name_problem(value) if value else None
        if problem:
            raise _fail(
                o,
                key,
                f'must be a node label key, got "{value}": {problem}',
                hint="e.g. cloud.google.com/gce-topology-block",
            )
    if v["topology.required"] and v["topology.preferred"]:
        raise _fail(
            o,
            "topology.preferred",
            "set either topology.required or topology.preferred, not both (Kueue takes exactly one per pod set)",
        )
