"""The fixed list of defect classes a label may name, and which kgen lint rules are about which class.

Every labelled defect names one class below (label.json: "class"); its free-text summary is "title".
A failing finding is a true finding only when its rule is mapped here to the defect's class and it
points at the defect (see run.py). The mapping says what a rule is *about*, written from the rule's
summary (`kgen lint --list-rules`), never from where it happened to fire on this corpus. A rule that
is not in RULE_CLASSES (a new rule) has no class, so its findings count as false until it is added here;
run.py names such rules in its output.
"""

from __future__ import annotations

# class id -> what a defect of this class is (the reviewer's test for using it)
CLASSES: dict[str, str] = {
    "unbounded-restarts": (
        "replicas restart in place with nothing bounding the restarts (restartPolicy OnFailure/ExitCode and no "
        "runPolicy.backoffLimit, or an equivalent): a deterministic crash restarts forever holding the GPUs"
    ),
    "image-never-pulls": (
        "a container image that cannot be pulled as written: a placeholder (your-registry/..., <registry>/..., "
        "${IMAGE}), or an unqualified local image that resolves to docker.io"
    ),
    "placeholder-value": (
        "a placeholder or unrendered template variable in a manifest field other than the image (names, "
        "buckets, service accounts, counts): the object is rejected or the pod never starts"
    ),
    "sbatch-directive": (
        "an #SBATCH directive sbatch refuses or silently drops (placeholder partition/account, ${VAR} in a "
        "directive, a directive after the first command), or a script sbatch refuses (no shebang on line 1)"
    ),
    "exit-status-lost": (
        "the training command's failure does not fail the job or pod (a later command decides the exit "
        "status, | tee without pipefail, || true, wait without status)"
    ),
    "world-size-mismatch": (
        "the world the launcher forms differs from what runs: node count or WORLD_SIZE disagrees with the "
        "pods/nodes, or torchrun without --nnodes in a multi-node run"
    ),
    "procs-gpus-mismatch": (
        "processes per node disagree with the GPUs each pod/node holds (more processes than GPUs, "
        "CUDA_VISIBLE_DEVICES or NVIDIA_VISIBLE_DEVICES that breaks the assignment)"
    ),
    "gpus-not-requested": (
        "GPUs used but not (validly) requested: no nvidia.com/gpu limit, a request without a limit, no "
        "--gres/--gpus for the job, a step asking for GPUs the job never allocated"
    ),
    "no-shm": "a multi-GPU (or DataLoader-heavy) pod with the default 64Mi /dev/shm",
    "launcher-per-task": "srun starts several tasks per node and each runs a per-node launcher",
    "rank-source": (
        "nodes do not get distinct ranks: the node rank expanded once in the batch shell, no rank source in "
        "the pod, LOCAL_RANK from the node index"
    ),
    "rendezvous-unreachable": (
        "the master/rendezvous address does not reach rank 0 from every node: no Service/subdomain, the "
        "wrong pod, another namespace, localhost or $(hostname) on each node"
    ),
    "rendezvous-port-or-id": "a random rendezvous port, or a rendezvous id that differs between nodes",
    "schema-rejected": (
        "the API server (or kubectl's strict validation) rejects the object: unknown field, wrong type, "
        "duplicate key, invalid enum value, invalid name"
    ),
    "env-not-expanded": (
        "an env value or exec-form argument that Kubernetes passes literally: $VAR or $(command) in an env "
        "value, a $(VAR) the container does not define, a downward-API path written as text, shell quotes"
    ),
    "never-completes": (
        "the workload cannot finish: the trainer's pod is restarted when it ends (restartPolicy Always), or a "
        "second regular container in a Job pod never exits"
    ),
    "launcher-not-on-every-node": (
        "the launcher runs on one node only (in the batch script without srun), or is not started at all "
        "(a launch mode that exits at once)"
    ),
    "shell-error": (
        "the job script does the wrong thing as bash runs it: an undefined variable or one Slurm never sets, "
        "`srun VAR=value cmd`, a launcher inside a launcher, invalid shell syntax"
    ),
    "gang-or-queue": (
        "scheduling that never admits or only partly starts the world: a gang minimum below the pods, a "
        "Kueue queue label where Kueue does not read it, contradictory suspend settings"
    ),
    "failure-policy": (
        "a failure restarts one pod alone while the others wait in a dead rendezvous (no group restart)"
    ),
    "step-not-fail-stop": "a multi-node srun step without a fail-stop: the others run on when one node dies",
    "besteffort-pod": "a training pod without cpu/memory requests (BestEffort, first to be evicted)",
    "slow-start": "start-up that waits for nothing (sleep before torchrun, OrderedReady StatefulSet)",
    "secret-in-manifest": "a secret written as a literal env value",
    "network-policy": "a NetworkPolicy that cuts the training pods off from each other, or none at all",
    "duplicate-definition": "the same object or env var defined twice: the later one silently wins",
    "other": "a real defect that none of the classes above describes (wrong data file, debug switch left on)",
}

_STRUCTURE = (
    "KG001 KG002 KG003 KG004 KG010 KG012 KG020 KG021 KG022 KG023 KG024 KG025 KG030 KG031 KG032 KG033 KG034 "
    "KG040 KG042 KG043 KG045 KG046 KG047 KG048 KG051 KG052 KG053 KG054 KG055 KG056 KG057 KG060 KG061 KG062 "
    "KG063 KG064 KG065 KG066 KG068 KG069 KG070 KG080 KG081 KG082 KG083 KG085 KG090 KG136 KG146 KG150 KG151 "
    "KG152 KG200 KG201 KG202 KG203 KG204 KG205"
).split()

# rule id -> the classes it is about (a rule may serve several: KG041 reads a placeholder image, and an
# unrendered template's image, as an invalid reference). Every structural check (names, types, formats,
# enums, the training CRDs' structure) is about an object the API server rejects, and equally about a
# placeholder or unrendered variable that breaks that syntax (replicas: $NUM_NODES, a label value
# ${USER}), so each maps to both classes.
RULE_CLASSES: dict[str, tuple[str, ...]] = {rule: ("schema-rejected", "placeholder-value") for rule in _STRUCTURE}
RULE_CLASSES.update(
    {
        "KG041": ("image-never-pulls", "placeholder-value"),
        "KG059": ("image-never-pulls",),
        "KG026": ("schema-rejected",),
        "KG027": ("duplicate-definition",),
        "KG044": ("duplicate-definition",),
        "KG049": ("gpus-not-requested", "schema-rejected", "placeholder-value"),
        "KG050": ("gpus-not-requested", "schema-rejected", "placeholder-value"),
        "KG058": ("secret-in-manifest",),
        "KG060": ("schema-rejected", "never-completes"),
        "KG100": ("rendezvous-unreachable",),
        "KG101": ("rendezvous-unreachable",),
        "KG102": ("rendezvous-unreachable",),
        "KG103": ("rendezvous-unreachable",),
        "KG104": ("rendezvous-unreachable",),
        "KG105": ("rendezvous-unreachable",),
        "KG106": ("world-size-mismatch",),
        "KG107": ("procs-gpus-mismatch",),
        "KG108": ("world-size-mismatch",),
        "KG109": ("world-size-mismatch", "rank-source"),
        "KG110": ("no-shm",),
        "KG111": ("slow-start",),
        "KG112": ("rendezvous-unreachable", "rank-source"),
        "KG113": ("slow-start",),
        "KG114": ("env-not-expanded",),
        "KG115": ("rank-source",),
        "KG116": ("world-size-mismatch",),
        "KG117": ("failure-policy",),
        "KG118": ("besteffort-pod",),
        "KG119": ("launcher-not-on-every-node", "world-size-mismatch", "rendezvous-unreachable", "rank-source"),
        "KG120": ("rank-source",),
        "KG121": ("procs-gpus-mismatch",),
        "KG122": ("gpus-not-requested",),
        "KG123": ("rendezvous-unreachable",),
        "KG124": ("rendezvous-unreachable",),
        "KG125": ("shell-error",),
        "KG126": ("exit-status-lost",),
        "KG127": ("rendezvous-port-or-id",),
        "KG128": ("world-size-mismatch",),
        "KG129": ("never-completes",),
        "KG130": ("env-not-expanded", "placeholder-value"),
        "KG131": ("shell-error",),
        "KG132": ("gang-or-queue",),
        "KG133": ("gang-or-queue",),
        "KG134": ("network-policy",),
        "KG135": ("network-policy",),
        "KG138": ("no-shm",),
        "KG139": ("procs-gpus-mismatch",),
        "KG140": ("rendezvous-unreachable",),
        "KG141": ("procs-gpus-mismatch",),
        "KG142": ("env-not-expanded",),
        "KG143": ("rank-source",),
        "KG144": ("procs-gpus-mismatch",),
        "KG145": ("env-not-expanded",),
        "KG158": ("failure-policy",),
        "KG206": ("failure-policy",),
        "KG207": ("image-never-pulls",),
        "KG208": ("shell-error",),
        "KG209": ("shell-error",),
        "KG210": ("shell-error",),
        "KG211": ("rendezvous-port-or-id",),
        "KG212": ("rendezvous-unreachable",),
        "KG213": ("slow-start",),
        "KG214": ("never-completes",),
        "KG215": ("env-not-expanded",),
        "KG160": ("gang-or-queue",),
        "KG161": ("gang-or-queue",),
        "KG162": ("gang-or-queue", "schema-rejected", "placeholder-value"),
        "KG163": ("gang-or-queue",),
        "KG170": ("sbatch-directive", "shell-error"),
        "KG171": ("launcher-per-task",),
        "KG172": ("world-size-mismatch",),
        "KG173": ("world-size-mismatch",),
        "KG174": ("rendezvous-unreachable",),
        "KG175": ("launcher-not-on-every-node",),
        "KG176": ("rank-source",),
        "KG177": ("rendezvous-port-or-id",),
        "KG178": ("step-not-fail-stop",),
        "KG179": ("step-not-fail-stop",),
        "KG180": ("sbatch-directive",),
        "KG181": ("image-never-pulls",),
        "KG182": ("image-never-pulls",),
        "KG183": ("unbounded-restarts",),
        "KG184": ("sbatch-directive",),
        "KG185": ("shell-error",),
        "KG186": ("gpus-not-requested",),
        "KG187": ("never-completes",),
        "KG191": ("exit-status-lost",),
        "KG192": ("gpus-not-requested",),
        "KG193": ("sbatch-directive", "placeholder-value"),
        "KG194": ("procs-gpus-mismatch",),
    }
)
# rules that report, not judge (no-schema notes, --explain): never a finding about a defect
REPORT_ONLY = ("KG011", "KG067", "KG137")


def classes_of(rule: str) -> tuple[str, ...]:
    """The defect classes ``rule`` is about; () for a rule not mapped (its findings are never true)."""
    return RULE_CLASSES.get(rule, ())
