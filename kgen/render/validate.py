"""Stage 2 of render, the checks: every value checked as the API server (and kgen's entrypoint) would check
what it becomes, before anything is rendered; each problem is one UsageError naming where the value came
from (the flag, `file: key`, `preset P: key`, or the key). kgen.render.spec derives the spec from what
passes (``validate_values``).
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

from kgen import jobset as jobset_facts
from kgen.errors import NestedLauncherError, UsageError
from kgen.k8s import ENV_VAR_NAME, is_dns1035_label, is_dns_label, is_dns_subdomain, parse_quantity
from kgen.render.runsecret import SECRET_DIR
from kgen.render.values import DNS_POLICIES, HEALTH_GATES, KINDS, ON_SCRIPT_ERROR, PULL_POLICIES
from kgen.versions import DEFAULT_K8S, MAX_K8S, MIN_K8S

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
    from kgen.launch.launchers import nested_launcher, problem

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
    m = re.fullmatch(r"v?1\.([0-9]+)(\.[0-9]+)?", str(text).strip())
    if not m:
        raise UsageError(f'must look like 1.31, got "{text}"', option=option)
    minor = int(m.group(1))
    if not MIN_K8S <= minor <= MAX_K8S:
        raise UsageError(f'supported versions are 1.{MIN_K8S} to 1.{MAX_K8S}, got "{text}"', option=option)
    return minor


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


class CheckedValues(NamedTuple):
    """The values as checked: what the spec is derived from (kgen.render.spec.build_spec)."""

    kind: str
    nodes: int
    gpus: int
    nproc: int  # processes per node, auto resolved
    name: str
    namespace: str
    image: str
    port: int
    liveness: int
    resources: dict[str, dict[str, Any]]
    dns_policy: str
    user_env: tuple[tuple[str, str | dict], ...]  # NAME -> its string, or its checked valueFrom
    patches: tuple[Patch, ...]


class Patch(NamedTuple):
    """One checked entry of ``patches``, with where it came from (`v.yaml: patches[1]`), said once."""

    kind: str  # the target kind as written (Workload and PodTemplate name roles)
    name: str | None
    patch: dict[str, Any]
    origin: str


def validate_values(values: dict[str, Any], origins: dict[str, str], k8s_minor: int = DEFAULT_K8S) -> CheckedValues:
    """Check every value, in a fixed order, naming the option or file it came from (the first problem
    raises UsageError)."""
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
        raise _fail(o, "kind", f'must be job, statefulset, jobset or slurm, got "{kind}"')
    nodes = integer("nodes", 1, 100_000)
    gpus = integer("gpus", 0, 1024)
    nproc = integer("nprocPerNode", 0, 1024)
    if nproc == 0:
        nproc = gpus if gpus else 1
    elif gpus and (nproc > gpus or gpus % nproc):
        fits = [str(n) for n in range(gpus, 0, -1) if gpus % n == 0][:6]
        problem = (
            "more processes than GPUs: two ranks on one GPU (NCCL refuses that)"
            if nproc > gpus
            else f"{gpus} GPUs do not split evenly among {nproc} processes"
        )
        raise _fail(
            o,
            "nprocPerNode",
            f"is {nproc} but gpus is {gpus}: {problem}",
            hint=f"use {', '.join(fits[:-1])} or {fits[-1]}, or 0 for one process per GPU"
            if len(fits) > 1
            else "use 1, or 0 for one process per GPU",
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
    if kind != "slurm" and k8s_minor < 36 and not is_dns1035_label(name):
        raise _fail(
            o,
            "name",
            f'must start with a letter (it names the Service), got "{name}"',
            hint="Kubernetes before 1.36 rejects Service names starting with a digit",
        )
    longest_host = f"{name}-{nodes - 1}"
    if kind != "slurm" and len(longest_host) > 63:  # pod hostnames (a Slurm job names no host after itself)
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
    patches = _check_patches(v, o)
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
    integer("hang.timeout", 0)
    if text("health.gate") not in HEALTH_GATES:
        raise _fail(o, "health.gate", f'must be off, warn or fail, got "{v["health.gate"]}"')
    if v["reform.nodeLostTolerationSeconds"] is not None:
        integer("reform.nodeLostTolerationSeconds", 0, INT64_MAX)  # tolerationSeconds: int64
    integer("terminationGracePeriodSeconds", 0, INT64_MAX)  # int64 in the API
    if v["activeDeadlineSeconds"] is not None:
        integer("activeDeadlineSeconds", 1, INT64_MAX)  # int64; the API requires > 0
    if v["ttlSecondsAfterFinished"] is not None:
        integer("ttlSecondsAfterFinished", 0)  # int32
    _check_labels(v, o)
    _check_not_privileged(v, o)
    if text("auth.secretName") and not is_dns_subdomain(v["auth.secretName"]):
        raise _fail(o, "auth.secretName", f'must be a Secret name (a DNS subdomain), got "{v["auth.secretName"]}"')

    _check_volumes(v, o)
    _check_command(v, o)

    user_env = _user_env(v, o)
    return CheckedValues(
        kind,
        nodes,
        gpus,
        nproc,
        name,
        namespace,
        image,
        port,
        liveness,
        resources,
        dns_policy,
        tuple(user_env),
        patches,
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
        requests["nvidia.com/gpu"] = str(gpus)
        limits["nvidia.com/gpu"] = str(gpus)
    # Quantities as the API server stores them: strings. A number (8, or 4 from --set) is re-applied as an int
    # where the server keeps "8", which a JobSet (a CRD, int-or-string) reports as a spec change.
    requests = {res: _quantity_text(q) for res, q in requests.items()}
    limits = {res: _quantity_text(q) for res, q in limits.items()}
    out: dict[str, dict[str, Any]] = {}
    if requests:
        out["requests"] = requests
    if limits:
        out["limits"] = limits
    return out


def _quantity_text(qty: Any) -> Any:
    """A number as its quantity string (8 -> "8"); a string (already checked by parse_quantity) as given."""
    return str(qty) if isinstance(qty, (int, float)) and not isinstance(qty, bool) else qty


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


def _check_not_privileged(v: dict[str, Any], o: dict[str, str]) -> None:
    """kgen never renders a privileged container (README, Security): not through initContainers either."""
    for c in v["initContainers"]:
        if (
            isinstance(c, dict)
            and isinstance(c.get("securityContext"), dict)
            and c["securityContext"].get("privileged") is True
        ):
            raise _fail(
                o,
                "initContainers",
                f"{c.get('name')}: securityContext.privileged: true; kgen never renders a privileged container",
                hint="drop it; rdma: true adds the IPC_LOCK capability RDMA needs",
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

        from kgen.render.layering import shell_operator

        operator = shell_operator(head)
        if operator:  # a shell command line: splitting it would make nonsense of it (`sleep '30;' python`)
            raise _fail(
                o,
                "command",
                f"{head!r} is a shell command line ({operator!r} is a shell operator), but no shell runs the command",
                hint="put it in a script and run that (-- bash run.sh), or give the training command alone",
            )
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

    from kgen.launch.launchers import correction, nested_launcher, problem

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


def _check_patches(v: dict[str, Any], o: dict[str, str]) -> tuple[Patch, ...]:
    checked = []
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
        checked.append(Patch(target["kind"], target.get("name"), patch, where))
    return tuple(checked)


RESERVED_VOLUMES = {"kgen-entrypoint", "dshm", "kgen-secret"}
RESERVED_MOUNTS = {"/opt/kgen", "/dev/shm", SECRET_DIR}


def _user_env(v: dict[str, Any], o: dict[str, str]) -> list[tuple[str, str | dict]]:
    """values env (a string, or valueFrom a Secret, ConfigMap, pod field or resource) and envFrom, checked
    as the API server checks them (kgen.render.envvars): each NAME with its string or its valueFrom."""
    from kgen.render.envvars import EnvProblem, env_from, value_from

    containers = {"trainer", *(str(c.get("name")) for c in v["initContainers"] if isinstance(c, dict))}
    out: list[tuple[str, str | dict]] = []
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
            out.append((key, val))
            continue
        try:
            out.append((key, value_from(key, val, containers)))
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


def _check_jobset_and_kueue(v: dict[str, Any], o: dict[str, str], kind: str, name: str, nodes: int) -> None:
    from kgen.k8s import qualified_name_problem

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
