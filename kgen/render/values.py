"""Stage 1 of render, the vocabulary: every key a values file, --set or a flag can give, with its type, its
default and one line about it (the values reference: `kgen values`, the README's table); the words a few
keys accept. Data only: kgen.render.layering reads values by it, kgen.render.validate checks them.
"""

from __future__ import annotations

from typing import Any

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
    "kind": (
        "str",
        "job",
        "`job` (Indexed Job), `statefulset`, `jobset` (needs the JobSet controller), or `slurm` (an sbatch script, "
        "docs/slurm.md); any case.",
    ),
    "nodes": ("int", 2, "Number of nodes (pods). One Job/StatefulSet object whatever the count."),
    "gpus": ("int", 8, "`nvidia.com/gpu` per node (requests = limits); 0 renders a CPU job (gloo)."),
    "nprocPerNode": (
        "int",
        0,
        "Processes per node; 0 = auto (= gpus, or 1 for CPU jobs). Below gpus (a divisor: 8 GPUs, 4 processes) "
        "each process drives several GPUs (model parallel).",
    ),
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
    "hang.timeout": (
        "int",
        0,
        "Seconds without progress from any rank (a line of output, or kgen_progress(step)) after which the run "
        "is a hang: every rank's Python stacks are reported and the run ends with exit 77; 0 = off.",
    ),
    "health.gate": (
        "str",
        "warn",
        "The health gate before training (2+ nodes): devices, an all-reduce and a ping-pong between every two "
        "nodes over the real backend, one line per node; `off`, `warn` (go on) or `fail` (stop with exit 78).",
    ),
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
    # --- Slurm (--kind slurm: the sbatch script; docs/slurm.md) ---
    "slurm.partition": ("str", "", "Slurm: the partition (#SBATCH --partition); empty = the cluster's default."),
    "slurm.account": ("str", "", "Slurm: the account the job is charged to (#SBATCH --account)."),
    "slurm.qos": ("str", "", "Slurm: the quality of service (#SBATCH --qos)."),
    "slurm.time": (
        "str",
        "",
        "Slurm: the wall-clock limit (#SBATCH --time): minutes, HH:MM:SS or D-HH:MM:SS; empty = the partition's.",
    ),
    "slurm.stepWait": (
        "int",
        30,
        "Slurm: seconds srun waits after the first node's task ended before it ends the others (srun --wait).",
    ),
    "slurm.directives": (
        "list[str]",
        [],
        "Slurm: more #SBATCH options, one `--name=value` each, e.g. [--exclusive, --constraint=h100] (not those "
        "kgen sets from other keys).",
    ),
    # --- run authentication and port fencing (README, Security) ---
    "auth.secretName": (
        "str",
        "",
        "Secret holding the run's secret (key `secret`) that the nodes prove membership with, for any kind; "
        "empty = a Job's (JobSet's) pods derive it from their Job's UID, a StatefulSet's mount Secret "
        "`<name>-auth` (kgen submit creates it). Multi-node runs only.",
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

KINDS = ("job", "statefulset", "jobset", "slurm")
K8S_KINDS = ("job", "statefulset", "jobset")
ON_SCRIPT_ERROR = ("fail", "reform")
HEALTH_GATES = ("off", "warn", "fail")
PULL_POLICIES = ("Always", "IfNotPresent", "Never")
DNS_POLICIES = ("ClusterFirst", "ClusterFirstWithHostNet", "None")
