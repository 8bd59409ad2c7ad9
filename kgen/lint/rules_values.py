"""What a training container is given, read the way the program receives it: env values that are text
where a field reference was meant, rank variables fed from the wrong index, GPU visibility overridden,
exec-form arguments that keep their shell quotes, and names the API server or a CSI driver resolves
that are still placeholders."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from kgen import k8s
from kgen.findings import Severity
from kgen.launch.command import _SHELLS, _shell_options
from kgen.lint.model import TRAINING_KINDS, workloads
from kgen.lint.registry import Context, rule
from kgen.lint.rules_pod import _pod
from kgen.lint.rules_training import _SETS_RANKS, _env_path

E, W = Severity.ERROR, Severity.WARNING

# The downward API's field paths (what valueFrom.fieldRef.fieldPath takes), written as a plain value.
_FIELD_PATH = re.compile(
    r"^(metadata\.(name|namespace|uid|labels\[.+\]|annotations\[.+\])|spec\.(nodeName|serviceAccountName)"
    r"|status\.(podIP|podIPs|hostIP|hostIPs))$"
)
_NAMES_A_FIELD = re.compile(r"(_PATH|_FIELD|_FIELDPATH|_KEY|_SELECTOR)$", re.I)
# Where a pod's (node's) index comes from: fieldRefs and the variables controllers inject.
_NODE_INDEX_REFS = ("job-completion-index", "apps.kubernetes.io/pod-index", "volcano.sh/task-index", "worker-index")
_NODE_INDEX_VARS = re.compile(
    r"\$[({]?(JOB_COMPLETION_INDEX|VC_TASK_INDEX|VK_TASK_INDEX|LWS_WORKER_INDEX|NODE_RANK|PET_NODE_RANK)\b"
)


@rule(
    "KG142",
    E,
    "An env value that is a downward-API field path written as text (RANK: metadata.name, POD_IP: status.podIP): "
    "the program receives the text, not the pod's value (int('metadata.name') fails; an address that is the text "
    "'status.podIP' never resolves).",
    "Use valueFrom.fieldRef.fieldPath: metadata.name (or the field meant) instead of value.",
    templates_only=True,
)
def field_path_as_text(doc: Any, ctx: Context) -> Iterator:
    for spec, base in _pod(doc):
        for c, path in k8s.containers(spec, base):
            for i, e in enumerate(k8s.env_list(c)):
                if not isinstance(e, dict) or not isinstance(e.get("value"), str) or not isinstance(e.get("name"), str):
                    continue
                value = e["value"].strip()
                if _FIELD_PATH.match(value) and not _NAMES_A_FIELD.search(e["name"]):
                    yield (
                        path + ("env", i, "value"),
                        f"{e['name']}={value} is that text, not the pod's {value}; use valueFrom: "
                        f"{{fieldRef: {{fieldPath: {value}}}}}",
                    )


@rule(
    "KG143",
    E,
    "LOCAL_RANK is the process's index on its node (0 for the one process of a 1-GPU pod); set from the pod's "
    "node index (the completion index, pod index, VC_TASK_INDEX, NODE_RANK ...) without a launcher that sets it, "
    "the process of pod N asks for GPU N, which its pod does not have (invalid device ordinal).",
    "Set LOCAL_RANK=0 for one process per pod, or launch with torchrun (it sets LOCAL_RANK per worker); keep the "
    "node index in RANK/NODE_RANK.",
    kinds=TRAINING_KINDS,
    scope="stream",
)
def local_rank_from_node_index(docs: list, ctx: Context) -> Iterator:
    for w in workloads(docs):
        if w.nodes is not None and w.nodes <= 1:
            continue
        for c, cpath, scripted, _why in w.containers:
            if any(launch.form in _SETS_RANKS for launch in scripted.launches):
                continue  # the launcher sets LOCAL_RANK per worker (a hand-set one is KG109's)
            for i, e in enumerate(k8s.env_list(c)):
                if not isinstance(e, dict) or e.get("name") != "LOCAL_RANK":
                    continue
                ref = k8s.get(e, "valueFrom", "fieldRef", "fieldPath")
                value = e.get("value")
                source = None
                if isinstance(ref, str) and any(k in ref for k in _NODE_INDEX_REFS):
                    source, at = ref, cpath + ("env", i, "valueFrom", "fieldRef", "fieldPath")
                elif isinstance(value, str) and _NODE_INDEX_VARS.search(value):
                    source, at = value, cpath + ("env", i, "value")
                if source is not None:
                    yield (
                        w.doc,
                        at,
                        f"LOCAL_RANK from {source} is the pod's node index, not the process's index on its node: "
                        "the process of pod N asks for GPU N (invalid device ordinal); set LOCAL_RANK to 0 for one "
                        "process per pod",
                    )


@rule(
    "KG144",
    W,
    "NVIDIA_VISIBLE_DEVICES=all on a container that requests GPUs replaces the device plugin's assignment: the "
    "container sees every GPU of the node, so two training pods on one node both use GPU 0 (contention, out of "
    "memory, NCCL's 'duplicate GPU').",
    "Delete NVIDIA_VISIBLE_DEVICES (the device plugin sets it to the GPUs the pod was given).",
    kinds=TRAINING_KINDS,
    scope="stream",
)
def all_gpus_visible(docs: list, ctx: Context) -> Iterator:
    for w in workloads(docs):
        for c, cpath, _scripted, _why in w.containers:
            value = w.env(c).get("NVIDIA_VISIBLE_DEVICES")
            if k8s.gpu_limit(c) and isinstance(value, str) and value.strip().lower() == "all":
                yield (
                    w.doc,
                    _env_path(cpath, c, "NVIDIA_VISIBLE_DEVICES"),
                    f"NVIDIA_VISIBLE_DEVICES=all shows the container every GPU of the node, not the "
                    f"{k8s.gpu_limit(c)} it was given; delete it (the device plugin sets it)",
                )


# --flag="value" / --flag='value' / "value" as one exec-form item: no shell removes the quotes.
_QUOTED_ITEM = re.compile(r"""^(?:-{1,2}[\w.-]+=)?(["'])[^"']*\1$""")


@rule(
    "KG145",
    E,
    "An exec-form command/args item with shell quotes (--dataset=\"imagenet\", '--lr=3e-4' is fine but "
    "--lr='3e-4' is not): the kubelet runs no shell, so the program receives the quotes as part of the value "
    "(a path or name that does not exist, a number that does not parse).",
    "Drop the quotes (YAML quotes the item, not the program): - --dataset=imagenet.",
    templates_only=True,
)
def exec_form_quotes(doc: Any, ctx: Context) -> Iterator:
    for spec, base in _pod(doc):
        for c, path in k8s.containers(spec, base):
            skip = _script_item(c)
            for key in ("command", "args"):
                items = c.get(key)
                for j, item in enumerate(items if isinstance(items, list) else []):
                    if (key, j) == skip or not isinstance(item, str) or not _QUOTED_ITEM.match(item):
                        continue
                    yield (
                        path + (key, j),
                        f"{item} keeps its quotes: no shell runs this command, so the program receives "
                        f"{item.split('=', 1)[-1]} with the quote characters; write it without them",
                    )


def _script_item(c: dict) -> tuple[str, int] | None:
    """The command/args item that is a shell's -c script (its quotes are shell syntax)."""
    src = [(key, j) for key in ("command", "args") for j, _ in enumerate(c.get(key) or [])]
    argv = [str(x) for key in ("command", "args") for x in (c.get(key) or [])]
    if argv and argv[0].rsplit("/", 1)[-1] in _SHELLS:
        opts = _shell_options(argv)
        if opts is not None:
            return src[opts[1]]
    return None


# A GCS bucket name (cloud.google.com/storage/docs/buckets#naming), or "_" (all buckets the account sees).
_GCS_BUCKET = re.compile(r"^(_|[a-z0-9][a-z0-9._-]{1,220}[a-z0-9])$")
_PLACEHOLDER = re.compile(r"<[^<>]*>|\$\{[^}]*\}|^\$[A-Z_][A-Z0-9_]*$|\{\{.*\}\}")


@rule(
    "KG146",
    E,
    "Names the API server or a CSI driver resolves must be real: serviceAccountName is a DNS-1123 subdomain "
    "(a placeholder such as V_KSA is rejected), and a CSI volume's attributes hold no template placeholder "
    "(bucketName: <MODEL_BUCKET>, ${BUCKET}; a GCS Fuse bucketName must be a bucket name): the driver fails "
    "the mount and the pod never starts.",
    "Replace the placeholder with the real name (render the template before applying).",
    templates_only=True,
)
def placeholders(doc: Any, ctx: Context) -> Iterator:
    for spec, base in _pod(doc):
        for key in ("serviceAccountName", "serviceAccount"):
            name = spec.get(key)
            if isinstance(name, str) and name and not k8s.is_dns_subdomain(name):
                yield (
                    base + (key,),
                    f"{key} {name!r} is not a DNS-1123 subdomain (lower case, digits, '-', '.'), so the API server "
                    "rejects the pod (a placeholder left in?)",
                )
        for i, v in enumerate(spec.get("volumes") or []):
            csi = v.get("csi") if isinstance(v, dict) else None
            attrs = csi.get("volumeAttributes") if isinstance(csi, dict) else None
            if not isinstance(attrs, dict):
                continue
            driver = str(csi.get("driver", "")) if isinstance(csi, dict) else ""
            for attr, value in attrs.items():
                if not isinstance(value, str):
                    continue
                at = base + ("volumes", i, "csi", "volumeAttributes", attr)
                if _PLACEHOLDER.search(value):
                    yield (
                        at,
                        f"{attr}: {value} is a placeholder: the {driver or 'CSI'} driver fails the mount and the pod "
                        "never starts",
                    )
                elif attr == "bucketName" and driver.startswith("gcsfuse.") and not _GCS_BUCKET.match(value):
                    yield at, f"bucketName {value!r} is not a GCS bucket name: the mount fails and the pod never starts"


# $VAR / ${VAR} in an exec-form item ($$ escapes, $(VAR) is Kubernetes' own expansion: KG114's)
_SHELL_VAR = re.compile(r"(?<!\$)\$(\{[A-Za-z_]\w*(?:[^}]*)\}|[A-Za-z_]\w*)")


def _runs_shell_script(argv: list) -> bool:
    """A shell with -c anywhere in the command (``bash -c``, ``/usr/bin/env bash -lc``, ``tini -- sh -c``)."""
    for i, x in enumerate(argv):
        if isinstance(x, str) and x.rsplit("/", 1)[-1] in _SHELLS:
            if any(isinstance(y, str) and re.fullmatch(r"-[a-zA-Z]*c[a-zA-Z]*", y) for y in argv[i + 1 : i + 4]):
                return True
    return False


@rule(
    "KG215",
    E,
    "An exec-form command/args item (no shell runs it) holds a shell variable, $VAR or ${VAR} "
    "(--master-addr=$LWS_LEADER_ADDRESS, --data=${DATA_DIR}/train): the kubelet starts the program directly "
    "and Kubernetes expands only $(VAR), so the program receives the text $VAR.",
    "Write $(VAR) for a variable of the container's env (Kubernetes expands it), or run the command through "
    "a shell: command: [bash, -c, 'exec ... \"$VAR\"'].",
    templates_only=True,
)
def exec_form_shell_var(doc: Any, ctx: Context) -> Iterator:
    for spec, base in _pod(doc):
        for c, path in k8s.containers(spec, base):
            src = [(key, j) for key in ("command", "args") for j, _ in enumerate(c.get(key) or [])]
            argv = [x for key in ("command", "args") for x in (c.get(key) or [])]
            if not argv or _runs_shell_script(argv):
                continue  # a shell's -c script expands its variables
            for k, item in enumerate(argv):
                if not isinstance(item, str) or (k and argv[k - 1] in ("-c", "-e")):
                    continue  # python -c / perl -e code: its own syntax
                m = _SHELL_VAR.search(item)
                if m:
                    name = m.group(1).strip("{}").split(":", 1)[0]
                    yield (
                        path + src[k],
                        f"{item}: {m.group(0)} stays literal (no shell runs this command, and Kubernetes expands "
                        f"only $({name})); write $({name}) if the container's env has {name}, or run it with "
                        "bash -c",
                    )
