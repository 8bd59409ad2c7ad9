"""Stage 6 of render, the self-check: kgen lint (schemas and rules) on the documents render is about to
print; an error stops the render with a hint that points back at the values, warnings are printed with the
manifest. Also what the manifest alone does not say (notes) and values that likely do not do what was meant
(cautions).
"""

from __future__ import annotations

import re

from kgen.errors import RenderError
from kgen.findings import Finding
from kgen.render.spec import TrainingSpec

# Keys the chosen kind does not render: (key, kinds that use it, why).
KIND_ONLY_KEYS = (
    ("activeDeadlineSeconds", ("job", "jobset"), "a StatefulSet has no deadline"),
    ("ttlSecondsAfterFinished", ("job", "jobset"), "a StatefulSet never finishes"),
    ("jobset.maxRestarts", ("jobset",), "the Job or StatefulSet restarts the group itself"),
    (
        "reform.maxReformations",
        ("job", "statefulset"),
        "a JobSet restarts its whole group instead, see jobset.maxRestarts",
    ),
    (
        "reform.replacementTimeout",
        ("job", "statefulset"),
        "a JobSet restarts its whole group instead, see jobset.maxRestarts",
    ),
    *(
        (key, ("slurm",), "it is an sbatch option (--kind slurm)")
        for key in ("slurm.partition", "slurm.account", "slurm.qos", "slurm.time", "slurm.stepWait", "slurm.directives")
    ),
)  # (--kind slurm's own cautions, for the Kubernetes keys it ignores: kgen.render.slurmkind)


def render_cautions(spec: TrainingSpec) -> list[str]:
    """Values that render but do nothing, or likely not what was meant: keys the kind ignores (set by
    the user, not the defaults), and a memory limit that /dev/shm alone can fill."""
    from kgen.k8s import parse_quantity

    out = []
    for key, kinds, why in KIND_ONLY_KEYS:
        origin = spec.origins.get(key, "default")
        if origin != "default" and spec.kind not in kinds:
            where = origin if origin.endswith(key) else f"{origin} ({key})"
            out.append(f"{where}: has no effect with kind {spec.kind}: {why}")
    resources = spec.resources or {}
    limit = resources.get("limits", {}).get("memory")
    request = resources.get("requests", {}).get("memory")
    shm = spec.v("shmSize")
    shm_bytes = parse_quantity(shm)
    if spec.shm_volume and shm_bytes is not None:
        if limit is not None and (limit_bytes := parse_quantity(str(limit))) is not None and limit_bytes <= shm_bytes:
            out.append(
                f"memory limit {limit} <= shmSize {shm}: what the processes write to the memory-backed /dev/shm "
                "counts against the memory limit, so the pod can be OOM-killed before /dev/shm is full; "
                "raise memory above shmSize plus the processes' own use, or lower shmSize"
            )
        elif limit is None and request is not None and (req := parse_quantity(str(request))) is not None:
            # a sizeLimit caps /dev/shm, it reserves nothing: only a user's own shmSize/memory choice is
            # questioned here, not kgen's defaults or a preset's (e.g. a CPU job's 2Gi with the default 16Gi cap)
            chosen = any(
                not spec.origins.get(k, "default").startswith(("default", "preset ")) for k in ("shmSize", "memory")
            )
            if chosen and req < shm_bytes:
                out.append(
                    f"shmSize {shm} is above the memory request {request}: /dev/shm is memory of the node, "
                    "and a pod using far more than it requested is the first evicted under memory pressure; "
                    "raise memory above shmSize plus the processes' own use, or lower shmSize"
                )
    return out


def render_notes(spec: TrainingSpec) -> list[str]:
    """What the user must know about the output that the manifest alone does not say."""
    notes = []
    gpus = spec.v("gpus")
    if isinstance(gpus, int) and gpus > spec.nproc_per_node:  # set explicitly: validate refuses what does not divide
        share = gpus // spec.nproc_per_node
        notes.append(
            f"nprocPerNode {spec.nproc_per_node} with {gpus} GPUs per node: each process sees all {gpus} GPUs and "
            f"drives {share} of them (model parallel); the script picks its own (from cuda:LOCAL_RANK*{share} on)"
        )
    queue = spec.v("queue")
    if queue and spec.suspended:
        what = "JobSet" if spec.is_jobset else "Job"
        notes.append(
            f"queue {queue}: the {what} is created suspended and starts only when Kueue admits it "
            f"from LocalQueue {queue!r}; on a cluster without Kueue it never starts"
        )
    elif queue:
        notes.append(
            f"queue {queue}: Kueue's webhook gates the StatefulSet's pods until it admits them (needs Kueue's "
            "pod and statefulset integrations); on a cluster without Kueue the StatefulSet starts at once, unqueued"
        )
    if spec.v("hostNetwork") and spec.v("networkPolicy.enabled"):
        notes.append(
            "hostNetwork: NetworkPolicies do not apply to host-network pods, so none is rendered; fence the "
            "rendezvous and liveness ports on the nodes (a host firewall; README, Security)"
        )
    if spec.secret_optional:
        from kgen.render.runsecret import create_secret_line

        notes.append(
            f"kind statefulset: its pods carry no Job UID to derive the run's secret from, so they mount Secret "
            f"{spec.secret_name}; kgen submit creates it (owned by the StatefulSet), with kubectl apply create it "
            f"yourself: {create_secret_line(spec.secret_name, spec.namespace, spec.name)}"
        )
    if spec.is_jobset:
        notes.append(
            "kind jobset: needs the JobSet controller (v0.10.0 or newer for onJobFailureMessagePatterns); "
            "JobSet creates the headless Service itself"
        )
    return notes


def check_rendered(docs: list[dict], spec: TrainingSpec) -> list[Finding]:
    """Run kgen lint (schema + rules) on the documents render is about to print.

    The documents are checked as parsed, not re-read from the printed text: the emitter writes a
    string plain only when YAML 1.1 (kubectl) and 1.2 read it back alike, and the string tests
    check that round trip through PyYAML for every hostile value.
    """
    from kgen.lint.api import LintOptions, lint_documents

    # nprocPerNode set below gpus (validate lets only an even split through): several GPUs per process, asked
    # for; KG139 (processes fewer than GPUs: idle GPUs) is what the user chose, render's note says it instead
    gpus = spec.v("gpus")
    skip = {"KG139"} if isinstance(gpus, int) and gpus > spec.nproc_per_node else set()
    # the command's words reach the program exactly as the user gave them (docs/entrypoint.md): a $HOME there is
    # the user's text, not a shell variable of a hand-written manifest that no shell expands (KG215)
    skip.add("KG215")
    result = lint_documents(
        docs, "<render>", LintOptions(kubernetes_version=f"1.{spec.k8s.minor}", skip=frozenset(skip))
    )
    errors = [f for f in result.findings if f.severity.value == "error"]
    if errors:
        first = errors[0]
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise RenderError(
            f"the rendered manifest fails {first.rule_id}: {first.message} "
            f"[{first.kind}/{first.name} {first.path}]{more}",
            hint=self_check_hint(first, spec),
        )
    return [f for f in result.findings if f.severity.value == "warning"]  # info (e.g. KG011 for a CRD) stays quiet


# Pass-through values keys, by the field of the rendered manifest they land in (the last match wins).
FIELD_KEYS = (
    ("tolerations", "tolerations"),
    ("nodeSelector", "nodeSelector"),
    ("affinity", "affinity"),
    ("topologySpreadConstraints", "topologySpreadConstraints"),
    ("initContainers", "initContainers"),
    ("volumes", "volumes"),
    ("volumeMounts", "volumeMounts"),
    ("envFrom", "envFrom"),
    ("imagePullSecrets", "imagePullSecrets"),
    ("spec.securityContext", "podSecurityContext"),
    ("labels", "labels"),
    ("annotations", "annotations"),
    ("ingress", "networkPolicy.extraIngress"),
)


def self_check_hint(finding: Finding, spec: TrainingSpec) -> str:
    """Point a self-check error back at the values: the layer that set the field's key, and for a
    YAML 1.1 boolean or number where the API wants a string (`value: yes`), "quote it"."""
    key = None
    for field, values_key in FIELD_KEYS:
        if f".{field}" in f".{finding.path}":
            key = values_key
    if key is not None and key == "volumeMounts" and "initContainers" in finding.path:
        key = "initContainers"
    origin = spec.origins.get(key, "default") if key else "default"
    where = (origin if origin.endswith(key or "") else f"{origin} ({key})") if key and origin != "default" else ""
    typed = re.search(r"expected string, got (boolean|integer|number)", finding.message)
    if typed:
        fix = "quote it in the values (YAML reads yes/no/on/off/true and numbers unquoted as non-strings)"
        return f"{where}: {fix}" if where else fix
    if where:
        return f"check {where}" + (" and the patches" if spec.v("patches") else "")
    return "check the values named in that field" + (" and the patches" if spec.v("patches") else "")


def warning_line(finding: Finding) -> str:
    """One self-check finding as ``kgen render`` prints it on stderr (after "kgen: ")."""
    return (
        f"{finding.severity.value}: {finding.rule_id}: {finding.message} [{finding.kind}/{finding.name} {finding.path}]"
    )
