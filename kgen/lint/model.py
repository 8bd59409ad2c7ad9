"""The training-workload views every training rule reads, built once per lint run.

A *training workload* is an object of a kind lint has an adapter for (``kgen.lint.kinds``) with at
least one *training container*:

1. a container whose command runs a recognised launcher: torchrun, ``python -m
   torch.distributed.run|launch``, deepspeed, ``accelerate launch`` or kgen's entrypoint, seen
   through shells and wrappers (``kgen.launch.command``); or
2. in a workload of several pods, a container whose environment names a distributed world
   (MASTER_ADDR, WORLD_SIZE, RANK, NODE_RANK, NNODES, PET_NNODES ...: env:// initialisation by
   ``python train.py``, or an image ENTRYPOINT that launches), or that requests GPUs in a
   workload that runs to completion (Job, JobSet, Volcano Job) and runs more than a GPU smoke test
   (sleep, echo, nvidia-smi); or
3. the trainer of a training operator's kind (PyTorchJob's ``pytorch`` container, a TrainJob's
   trainer, a TrainingRuntime's ``node``; not a runtime's dataset/model initializer), whatever it runs; or
4. in a workload that runs to completion, a container that requests several GPUs and runs more than a
   GPU smoke test, even in a single pod.

StatefulSets and LeaderWorkerSets need (1) or a distributed environment: GPUs alone are an
inference server there. Every pod rule applies to a training container whatever launches it
(an unknown launcher too); the launcher rules apply where the launcher is known. A workload that is
training by its GPUs alone (2 or 4, no launcher, no distributed environment: it may be a parallel batch
of independent GPU tasks) gets the pod rules but not the multi-node wiring rules.

One ``Workload`` view is made per pod template of a training workload (a JobSet's replicatedJob,
a PyTorchJob's Master and Worker ...), carrying the workload's facts (pods in the world, DNS
wiring, injected environment, rank sources, restart policy), so a rule written once applies to
every kind.
"""

from __future__ import annotations

import re
from typing import Any

from kgen import k8s
from kgen.launch.argv import Launch, host_of, resolve
from kgen.launch.command import Scripted, read_container
from kgen.lint import kinds, scripts
from kgen.lint.kinds.base import Facts, Template

DIST_ENV = {
    "MASTER_ADDR",
    "MASTER_PORT",
    "WORLD_SIZE",
    "RANK",
    "NODE_RANK",
    "NNODES",
    "NUM_NODES",
    "PET_NNODES",
    "PET_NODE_RANK",
    "PET_MASTER_ADDR",
    "PET_RDZV_ENDPOINT",
}
# Variables that state the node count wherever a manifest writes it down (torchrun itself reads
# PET_NNODES when --nnodes is absent).
NNODES_VARS = ("NNODES", "NUM_NODES", "N_NODES", "NODE_COUNT", "PET_NNODES")
_GPUS_ONLY = "GPUs in a multi-pod workload"
_GPUS_IN_POD = "several GPUs in a pod that runs to completion"
# The kinds the training rules read (for --list-rules; the adapters in kgen.lint.kinds decide).
TRAINING_KINDS = (
    "Job",
    "StatefulSet",
    "JobSet",
    "PyTorchJob",
    "TrainJob",
    "TrainingRuntime",
    "ClusterTrainingRuntime",
    "LeaderWorkerSet",
)
_OPERATOR_KINDS = {"PyTorchJob", "TrainJob", "TrainingRuntime", "ClusterTrainingRuntime"}


class Workload:
    """One pod template of a training workload, with the workload's facts."""

    __slots__ = ("doc", "tpl", "facts", "spec", "base", "nodes", "launches", "containers", "primary", "distributed")

    def __init__(self, doc: Any, tpl: Template, facts: Facts, primary: bool) -> None:
        self.doc = doc
        self.tpl = tpl
        self.facts = facts
        self.spec = tpl.spec  # pod spec
        self.base = tpl.spec_path  # path of the pod spec
        self.nodes = facts.nodes  # pods of the training world
        self.launches: list[tuple[dict, tuple, list[Launch]]] = []  # training containers with a known launcher
        self.containers: list[tuple[dict, tuple, Scripted, str]] = []  # every training container, and why
        self.primary = primary  # the first template of its workload (workload-level findings go once)
        self.distributed = False  # a launcher, a distributed environment or an operator's trainer (not GPUs alone)

    def __repr__(self) -> str:
        return f"Workload({self.doc.kind}/{self.doc.name} {self.tpl.role or '-'})"

    @property
    def name(self) -> str:
        """The workload's name; with only ``metadata.generateName``, the one the API server makes
        (``<generateName><suffix>``), so that messages name it instead of ''."""
        if self.doc.name:
            return self.doc.name
        generate = self.doc.metadata.get("generateName")
        return f"{generate}<suffix>" if isinstance(generate, str) and generate else ""

    @property
    def kind(self) -> str:
        return self.facts.kind

    @property
    def user_wired(self) -> bool:
        """The user makes the pods' DNS names (Job subdomain, StatefulSet serviceName + a Service)."""
        return self.facts.dns in ("subdomain", "serviceName")

    @property
    def dns_field(self) -> tuple[str | None, tuple]:
        return self.facts.dns_name, self.facts.dns_path

    def env(self, container: dict) -> dict[str, Any]:
        """The container's literal env (None for valueFrom) plus what the controller injects (None)."""
        env: dict[str, Any] = {name: None for name in self.tpl.injected_env}
        for e in k8s.env_list(container):
            if isinstance(e, dict) and isinstance(e.get("name"), str):
                env[e["name"]] = e.get("value") if "value" in e else None
        return env


def readiness_held(w: Workload) -> str | None:
    """What holds the pods of ``w`` back from Ready after their containers start, or None (without a probe
    a pod is Ready a moment after they start): a readiness gate, a readiness or startup probe (of a
    container, or of a sidecar init container)."""
    if w.spec.get("readinessGates"):
        return "a readiness gate holds readiness back"
    for key in ("initContainers", "containers"):
        for c in w.spec.get(key) or []:
            if not isinstance(c, dict):
                continue
            for probe in ("readinessProbe", "startupProbe"):
                if c.get(probe) and (key == "containers" or c.get("restartPolicy") == "Always"):
                    return f"container {c.get('name')!r} has a {probe}, so its pod is not Ready until it passes"
    return None


def stated_nnodes(launch: Launch | None, env: dict) -> list[tuple[int, int, str]]:
    """(min, max nodes, where) stated by a launch: --nnodes (N or MIN:MAX) and the container's
    literal NNODES-like variables (``where`` is "--nnodes=..." or "VAR=...")."""
    out = []
    raw = resolve(launch.flag("nnodes"), env) if launch is not None and launch.has("nnodes") else None
    if raw:
        parts = raw.split(":")
        if len(parts) <= 2 and all(p.isdigit() for p in parts):
            out.append((int(parts[0]), int(parts[-1]), f"--nnodes={raw}"))
    for var in NNODES_VARS:
        nn = env.get(var)
        if isinstance(nn, str) and nn.isdigit():
            out.append((int(nn), int(nn), f"{var}={nn}"))
    if launch is not None and launch.training:
        out += _script_nnodes(launch.child[1:])
    return out


# The training script's own node count, as Lightning reads it: Hydra overrides (NeMo, BioNeMo:
# ++trainer.num_nodes=2) and LightningCLI's --trainer.num_nodes=2.
_SCRIPT_NNODES = re.compile(r"^(?:\+{0,2}|--)trainer\.num_nodes=(\d+)$")


def _script_nnodes(args: list[str]) -> list[tuple[int, int, str]]:
    out = []
    for word in args:
        m = _SCRIPT_NNODES.match(word)
        if m:
            out.append((int(m.group(1)), int(m.group(1)), f"the script's {word.lstrip('+-')}"))
    return out


def containers_of(tpl: Template) -> list[tuple[dict, tuple]]:
    if tpl.containers is not None:
        return tpl.containers
    return list(k8s.containers(tpl.spec, tpl.spec_path, init=False))


def read(doc: Any, container: dict, path: tuple, docs: list | None = None, tpl: Template | None = None) -> Scripted:
    """What the container at ``path`` of ``doc`` runs (memoized per document). With the run's ``docs``
    and the pod template, scripts from ConfigMaps of the linted set that the container mounts are read
    too (``kgen.lint.scripts``)."""
    cache = doc.memo.setdefault("kg_read", {})
    got = cache.get(path)
    if got is None:
        files = None
        if docs is not None and tpl is not None:
            by_name = memo("configmaps", docs, scripts.configmaps_by_name)
            if by_name:
                files = scripts.files_of(tpl.spec, container, scripts.configmap_lookup(by_name, doc.namespace))
        got = cache[path] = read_container(container, files)
    return got


def _why_training(w: Workload, c: dict, scripted: Scripted, multi: bool | None) -> str | None:
    if any(launch.training for launch in scripted.launches):
        forms = sorted({launch.form for launch in scripted.launches if launch.training})
        return "launcher " + ", ".join(forms)
    via = sorted({launch.via for launch in scripted.launches if launch.via})
    if via:
        return "launcher " + ", ".join(via)  # an MPI launcher starting the program on the workload's pods
    if w.doc.kind in _OPERATOR_KINDS and w.tpl.operator_step:
        trainer = w.tpl.trainer_container
        names = [x.get("name") for x, _ in containers_of(w.tpl)]
        if trainer is None or c.get("name") == trainer or trainer not in names:
            return f"the {w.doc.kind}'s trainer"
    if multi is not False:
        env = {e["name"] for e in k8s.env_list(c) if isinstance(e, dict) and isinstance(e.get("name"), str)}
        env |= set(w.tpl.injected_env)
        dist = sorted(env & DIST_ENV)
        if dist:
            return f"distributed environment ({', '.join(dist[:3])})"
        if multi and w.facts.runs_to_completion and k8s.gpu_limit(c) and not _trivial(scripted):
            return _GPUS_ONLY
    if (
        w.doc.kind not in _OPERATOR_KINDS
        and w.facts.runs_to_completion
        and k8s.gpu_limit(c) > 1
        and not _trivial(scripted)
    ):
        return _GPUS_IN_POD  # one process driving them, or several of a launcher lint cannot see
    return None


_TRIVIAL = {
    "sleep",
    "echo",
    "printf",
    "nvidia-smi",
    "true",
    "false",
    "cat",
    "ls",
    "date",
    "env",
    "hostname",
    "set",
    "export",
    "exit",
    "cd",
    "pwd",
    "whoami",
    "id",
    "uname",
    "nvcc",
    "rocm-smi",
    "tail",
}


def _trivial(scripted: Scripted) -> bool:
    """A command that runs only shell builtins and tools such as sleep, echo, nvidia-smi: a GPU smoke
    test, not training (an image ENTRYPOINT or any other program may be training)."""
    if scripted.no_command or not scripted.commands:
        return False
    from kgen.launch.command import _SHELLS

    return all(argv[0].rsplit("/", 1)[-1] in _TRIVIAL | _SHELLS for argv, _ in scripted.commands if argv)


def workloads(docs: list) -> list[Workload]:
    return memo("workloads", docs, _workloads)


def _workloads(docs: list) -> list[Workload]:
    out = []
    for doc in docs:
        facts = kinds.facts(doc)
        if facts is None:
            continue
        first = True
        for tpl in kinds.templates(doc):
            w = Workload(doc, tpl, facts, primary=False)
            multi = None if facts.nodes is None else facts.nodes > 1
            for c, path in containers_of(tpl):
                scripted = read(doc, c, path, docs, tpl)
                why = _why_training(w, c, scripted, multi)
                if why is None:
                    continue
                w.containers.append((c, path, scripted, why))
                w.distributed = w.distributed or why not in (_GPUS_ONLY, _GPUS_IN_POD)
                found = [launch for launch in scripted.launches if launch.training]
                if found:
                    w.launches.append((c, path, found))
            if w.containers:
                w.primary = first
                first = False
                out.append(w)
    return out


def explicit_hostname(w: Workload) -> str | None:
    """The hostname the pod template gives its pods (``spec.hostname``) where it is the pods' DNS name: a
    Job that is not Indexed (an Indexed Job's controller names the pods <job>-<index>), a Pod's template.
    A StatefulSet's controller sets its own."""
    if w.doc.kind != "Job" or w.facts.dns != "subdomain" or (w.tpl.job or {}).get("completionMode") == "Indexed":
        return None
    host = w.spec.get("hostname")
    return host if isinstance(host, str) and host else None


def pod0_label(w: Workload) -> str:
    """The first DNS label of pod 0 of a user-wired workload: its explicit hostname, else <name>-0."""
    return explicit_hostname(w) or f"{w.name}-0"


def pod0_name(w: Workload, service: str | None) -> str:
    """Pod 0's name under ``service`` (``<name>-0.<service>``, or ``<hostname>.<service>``)."""
    return f"{pod0_label(w)}.{service or '<headless service>'}"


class World:
    """One training world that spans several workloads of one namespace: the leader's pod 0 is
    everyone's master, and the world has the pods of all members."""

    __slots__ = ("leader", "members", "nodes", "leader_host", "service")

    def __init__(self, leader: Workload, members: list[Workload], service: str | None = None) -> None:
        self.leader = leader.doc
        self.leader_host = service or pod0_label(leader)
        self.members = {id(m.doc) for m in members}
        self.nodes = sum(m.nodes or 0 for m in members)
        # A headless Service that selects exactly the leader's one pod, whose name every member uses as the
        # master address: it resolves to that pod alone (no subdomain needed).
        self.service = service


def world(docs: list, w: Workload) -> World | None:
    """The world ``w`` shares with other workloads, or None (the usual case: a world of its own).

    Several workloads form one world when they share a subdomain/serviceName, one of them (the leader)
    names its own pod 0 as the master and every other names the leader's pod 0 -- and no member states a
    node count other than the world's. Two layouts do this: one Indexed Job (or StatefulSet) per topology
    segment (nebius/ml-cookbook's KAI layout: MASTER_ADDR <first-job>-0.<service> in every pod), and one
    single-pod Job per node with an explicit ``hostname`` (Helm charts: hostname <release>-<i>, subdomain
    <release>, MASTER_ADDR <release>-0.<release>). A member that names another workload's pod 0 but states
    its own pod count as --nnodes is a copied master address, not a shared world."""
    return memo("worlds", docs, _worlds).get(id(w.doc))


def literal_masters(w: Workload) -> set[tuple[str, str]]:
    """(first label, second label) of the literal master hosts ``w``'s training containers name
    (MASTER_ADDR, --master-addr, --rdzv-endpoint): ``("llama-0", "llama")`` for llama-0.llama.ml.svc."""
    hosts = []
    for c, _cpath, scripted, _why in w.containers:
        ma = w.env(c).get("MASTER_ADDR")
        if isinstance(ma, str):
            hosts.append(ma)
        hosts += [host_of(raw) for launch in scripted.launches if launch.training for _, raw in launch.master_flags()]
    out = set()
    for host in hosts:
        if not host or "$" in host:
            continue
        parts = host.lower().rstrip(".").split(".")
        if len(parts) >= 2 and parts[0] and parts[1]:
            out.add((parts[0], parts[1]))
    return out


def replaced_hostname(w: Workload) -> str | None:
    """An Indexed Job's ``spec.hostname``: its controller replaces it with <job>-<index>, so pods never
    get that name (a Helm chart that adds completionMode: Indexed to one-Job-per-node)."""
    if w.doc.kind != "Job" or (w.tpl.job or {}).get("completionMode") != "Indexed":
        return None
    host = w.spec.get("hostname")
    return host if isinstance(host, str) and host else None


def _worlds(docs: list) -> dict[int, World]:
    wired = [w for w in workloads(docs) if w.primary and w.user_wired and w.facts.dns_name]
    by_host = {(w.doc.namespace, pod0_label(w), w.facts.dns_name): w for w in wired}
    for w in wired:  # the name meant for pod 0 (KG105 says it never resolves)
        meant = replaced_hostname(w)
        if meant:
            by_host.setdefault((w.doc.namespace, meant, w.facts.dns_name), w)
    led: dict[int, list[Workload]] = {}
    for w in wired:
        sub = w.facts.dns_name
        for host, svc in literal_masters(w):
            leader = by_host.get((w.doc.namespace, host, svc))
            if (
                leader is not None
                and leader is not w
                and svc == sub
                and literal_masters(leader) in ({(pod0_label(leader), sub)}, {(replaced_hostname(leader), sub)})
            ):
                led.setdefault(id(leader.doc), [leader]).append(w)
    out: dict[int, World] = {}
    for members in led.values():
        shared = World(members[0], members)
        if all(_states_nodes(m, shared.nodes) for m in members):
            out.update((id(m.doc), shared) for m in members)
    for shared in _service_worlds(docs):
        out.update((m, shared) for m in shared.members if m not in out)
    return out


def service_masters(w: Workload) -> set[str]:
    """The one-label names (a Service's: ``ddp-master``, ``ddp-master.ml.svc...``) ``w``'s training
    containers give as the master address."""
    hosts = []
    for c, _cpath, scripted, _why in w.containers:
        ma = w.env(c).get("MASTER_ADDR")
        if isinstance(ma, str):
            hosts.append(ma)
        hosts += [host_of(raw) for launch in scripted.launches if launch.training for _, raw in launch.master_flags()]
    out = set()
    for host in hosts:
        parts = (host or "").lower().rstrip(".").split(".")
        if parts[0] and "$" not in host and (len(parts) == 1 or parts[1] == (w.doc.namespace or parts[1])):
            if len(parts) == 1 or (len(parts) >= 3 and parts[2] == "svc") or len(parts) == 2:
                out.add(parts[0])
    return out


def _service_worlds(docs: list) -> list[World]:
    """Worlds of separate single-pod workloads (a master Job and a worker Job) joined by a headless Service
    that selects exactly the master workload's one pod and whose name every member gives as its master
    address: the Service's name resolves to that pod alone."""
    wired = [w for w in workloads(docs) if w.primary and w.user_wired]
    naming: dict[tuple, list[Workload]] = {}
    for w in wired:
        for host in service_masters(w):
            naming.setdefault((w.doc.namespace, host), []).append(w)
    if not naming:
        return []
    out = []
    for svc in docs:
        if svc.kind != "Service" or not svc.name or k8s.get(svc.data, "spec", "clusterIP") != "None":
            continue
        selector = k8s.get(svc.data, "spec", "selector")
        if not isinstance(selector, dict) or not selector:
            continue
        users = [w for (ns, host), ws in naming.items() if host == svc.name and (not svc.namespace or not ns or
                 ns == svc.namespace) for w in ws]  # fmt: skip
        if not users:
            continue
        near = [w for w in wired if not svc.namespace or not w.doc.namespace or w.doc.namespace == svc.namespace]
        selected = [w for w in near if k8s.selector_scope(selector, w.doc) != "none"]
        if len(selected) != 1 or selected[0].nodes != 1:
            continue  # the name must resolve to one pod: the leader's
        leader = selected[0]
        members = [leader] + [w for w in users if w is not leader]
        shared = World(leader, members, service=svc.name)
        if len(members) > 1 and all(_states_nodes(m, shared.nodes) for m in members):
            out.append(shared)
    return out


def _states_nodes(w: Workload, nodes: int) -> bool:
    """Every node count ``w`` states admits ``nodes``."""
    for c, _cpath, scripted, _why in w.containers:
        env = w.env(c)
        launches: list[Launch | None] = [x for x in scripted.launches if x.training]
        for launch in launches or [None]:
            if any(not low <= nodes <= high for low, high, _ in stated_nnodes(launch, env)):
                return False
    return True


_MEMO: dict[str, tuple[list, Any]] = {}


def memo(key: str, docs: list, build: Any) -> Any:
    """One result per lint run: every stream rule gets the same ``docs`` list object."""
    got = _MEMO.get(key)
    if got is not None and got[0] is docs:
        return got[1]
    value = build(docs)
    _MEMO[key] = (docs, value)
    return value


def with_embedded(docs: list) -> list:
    """``docs`` plus the objects embedded in them (AppWrapper components), each right after its
    wrapper, so every rule sees them as objects of their own (a wrapper inside a wrapper too)."""
    out = []
    for doc in docs:
        out.append(doc)
        adapter = kinds.adapter_for(doc) if isinstance(doc.data, dict) else None
        if adapter is not None:
            for path, obj in adapter.embedded(doc):
                out.extend(with_embedded([doc.child(path, obj, embedded=True)]))
    return out
