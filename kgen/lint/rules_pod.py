"""Pod template rules the schemas miss (validation.md §D rows 13-32)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, TypeGuard

from kgen import k8s
from kgen.findings import Severity
from kgen.lint import kinds
from kgen.lint.registry import Context, rule

E, W, INFO = Severity.ERROR, Severity.WARNING, Severity.INFO
_STANDARD_RESOURCES = {"cpu", "memory", "ephemeral-storage", "storage"}
_MEDIUMS = re.compile(r"^(|Memory|HugePages|HugePages-.+)$")


def _pod(doc: Any) -> Iterator[tuple[dict, tuple]]:
    """Every pod spec of the object: one per pod template, for every kind (JobSet, PyTorchJob ...)."""
    yield from kinds.pod_specs(doc)


@rule(
    "KG040",
    E,
    "Container names are DNS-1123 labels and unique within the pod.",
    "Use lower case, digits and '-' (e.g. 'trainer').",
    templates_only=True,
)
def container_names(doc: Any, ctx: Context) -> Iterator:
    for spec, base in _pod(doc):
        seen: set = set()
        for c, path in k8s.containers(spec, base):
            name = c.get("name")
            if not isinstance(name, str):
                continue
            if not k8s.is_dns_label(name):
                yield path + ("name",), f"container name {name!r} must be a DNS-1123 label (lower case, digits, '-')"
            if name in seen:
                yield path + ("name",), f"duplicate container name {name!r}"
            seen.add(name)


@rule(
    "KG041",
    E,
    "Every container needs a non-empty image (the schema has it optional), and the image must be a valid "
    "reference (lower-case repository path, tag, digest): the kubelet refuses anything else with "
    "InvalidImageName, e.g. a placeholder left in ('<image>', 'gcr.io/PROJECT/train', '${IMAGE}').",
    "Set image to a real reference, e.g. ghcr.io/org/train:1.4 (render templates before applying).",
    templates_only=True,
)
def container_image(doc: Any, ctx: Context) -> Iterator:
    from kgen.lint import kinds

    for spec, base in _pod(doc):
        for c, path in k8s.containers(spec, base):
            if not c.get("image"):
                yield path, f"container {c.get('name', '?')!r} has no image; set image"
    containers = [cp for spec, base in _pod(doc) for cp in k8s.containers(spec, base)]
    containers += [cp for t in kinds.templates(doc) if t.containers is not None for cp in t.containers]  # TrainJob
    for c, path in containers:
        image = c.get("image")
        if isinstance(image, str) and image and not k8s.is_image_reference(image):
            yield (
                path + ("image",),
                (
                    f"image {image!r} is not a valid image reference (a placeholder left in?); "
                    "the kubelet fails the pod with InvalidImageName"
                ),
            )


@rule(
    "KG042",
    E,
    "Container port names are IANA service names: at most 15 characters, lower case, digits and "
    "'-', at least one letter, no '--'; unique per container.",
    "Shorten the name, e.g. 'c10d' or 'rdzv'.",
    templates_only=True,
)
def container_port_names(doc: Any, ctx: Context) -> Iterator:
    for spec, base in _pod(doc):
        for c, path in k8s.containers(spec, base):
            ports = c.get("ports")
            if not isinstance(ports, list):
                continue
            seen: set = set()
            for i, p in enumerate(ports):
                name = p.get("name") if isinstance(p, dict) else None
                if not isinstance(name, str):
                    continue
                problem = k8s.iana_port_name_problem(name)
                if problem:
                    yield path + ("ports", i, "name"), f"port name {name!r} {problem}"
                if name in seen:
                    yield path + ("ports", i, "name"), f"duplicate port name {name!r} in this container"
                seen.add(name)


@rule(
    "KG043",
    E,
    "Env var names: printable ASCII without '=' (Kubernetes >= 1.32); before 1.32 they must "
    "match [-._a-zA-Z][-._a-zA-Z0-9]*.",
    "Rename the variable (e.g. NCCL_DEBUG, not NCCL=DEBUG).",
    templates_only=True,
)
def env_names(doc: Any, ctx: Context) -> Iterator:
    for spec, base in _pod(doc):
        for c, path in k8s.containers(spec, base):
            for i, e in enumerate(k8s.env_list(c)):
                name = e.get("name") if isinstance(e, dict) else None
                if not isinstance(name, str):
                    continue
                p = path + ("env", i, "name")
                if ctx.minor >= 32:
                    if not name or "=" in name or any(not 32 <= ord(ch) <= 126 for ch in name):
                        yield p, f"env var name {name!r} must be printable ASCII without '='"
                elif not k8s.ENV_VAR_NAME.match(name):
                    yield (
                        p,
                        (
                            f"env var name {name!r} must match [-._a-zA-Z][-._a-zA-Z0-9]* on Kubernetes "
                            f"{ctx.kubernetes_version} (no leading digit)"
                        ),
                    )


@rule(
    "KG044",
    W,
    "The same env var name twice in one container: the later one silently wins.",
    "Delete one of them.",
    templates_only=True,
)
def env_duplicates(doc: Any, ctx: Context) -> Iterator:
    for spec, base in _pod(doc):
        for c, path in k8s.containers(spec, base):
            seen: set = set()
            for i, e in enumerate(k8s.env_list(c)):
                name = e.get("name") if isinstance(e, dict) else None
                if isinstance(name, str):
                    if name in seen:
                        yield path + ("env", i, "name"), f"env var {name!r} is set twice; the later one hides the first"
                    seen.add(name)


@rule(
    "KG045",
    E,
    "env valueFrom.fieldRef.fieldPath must be one the API server supports (metadata.name, "
    "metadata.labels['k'], status.podIP, ...).",
    "Use a supported field path, e.g. metadata.name.",
    templates_only=True,
)
def field_ref(doc: Any, ctx: Context) -> Iterator:
    for spec, base in _pod(doc):
        for c, path in k8s.containers(spec, base):
            for i, e in enumerate(k8s.env_list(c)):
                fp = k8s.get(e, "valueFrom", "fieldRef", "fieldPath")
                if isinstance(fp, str) and not k8s.is_env_field_path(fp):
                    sub = k8s.ENV_FIELD_PATH_SUBSCRIPTED.fullmatch(fp)
                    if sub:
                        yield (
                            path + ("env", i, "valueFrom", "fieldRef", "fieldPath"),
                            f"fieldPath {fp!r}: {sub[2]!r} is not a valid {sub[1][:-1]} key "
                            f"({k8s.qualified_name_problem(sub[2])})",
                        )
                        continue
                    yield (
                        path + ("env", i, "valueFrom", "fieldRef", "fieldPath"),
                        f"fieldPath {fp!r} is not supported; use metadata.name, metadata.labels['...'], "
                        "status.podIP, ...",
                    )


def _resources(doc: Any) -> Iterator[tuple[dict, tuple]]:
    containers = [cp for spec, base in _pod(doc) for cp in k8s.containers(spec, base)]
    if doc.kind == "TrainJob":  # the trainer's resourcesPerNode
        containers += [cp for t in kinds.templates(doc) if t.containers is not None for cp in t.containers]
    for c, path in containers:
        res = c.get("resources")
        if isinstance(res, dict):
            yield res, path + ("resourcesPerNode",) if path == ("spec", "trainer") else path + ("resources",)


def _is_extended(name: str) -> bool:
    return "/" in name and not name.startswith("kubernetes.io/") and not name.startswith("requests.")


@rule(
    "KG046",
    E,
    "Resource names are cpu, memory, ephemeral-storage, hugepages-<size> or domain-qualified (nvidia.com/gpu).",
    "Use nvidia.com/gpu, not gpu.",
    templates_only=True,
)
def resource_names(doc: Any, ctx: Context) -> Iterator:
    for res, path in _resources(doc):
        for section in ("limits", "requests"):
            values = res.get(section)
            if not isinstance(values, dict):
                continue
            for name in values:
                if name in _STANDARD_RESOURCES or name.startswith("hugepages-") or "/" in name:
                    if "/" in name and k8s.qualified_name_problem(name):
                        yield path + (section, name), f"resource name {name!r} is not a valid qualified name"
                    continue
                yield (
                    path + (section, name),
                    (
                        f"resource name {name!r} is not a standard resource; use a "
                        "domain-qualified name such as nvidia.com/gpu"
                    ),
                )


@rule(
    "KG047",
    E,
    "Resource quantities must parse (e.g. 512Gi, 500m, 2); '512GB' or '1.5 Gi' are rejected while decoding; "
    "requests, limits and an emptyDir sizeLimit must not be negative (the API server rejects them).",
    "Use a non-negative Kubernetes quantity: binary suffixes Ki Mi Gi Ti, decimal k M G T, or m.",
    templates_only=True,
)
def quantities(doc: Any, ctx: Context) -> Iterator:
    for res, path in _resources(doc):
        for section in ("limits", "requests"):
            values = res.get(section)
            if isinstance(values, dict):
                for name, value in values.items():
                    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
                        continue
                    q = k8s.parse_quantity(value)
                    if q is None:
                        yield path + (section, name), f"{value!r} is not a Kubernetes quantity (e.g. 512Gi, 500m, 8)"
                    elif q < 0:
                        yield path + (section, name), f"{section} {name} is {value!r}: must not be negative"
    for spec, base in _pod(doc):
        for i, v in enumerate(spec.get("volumes") or []):
            size = k8s.get(v, "emptyDir", "sizeLimit")
            if not isinstance(size, (str, int, float)) or isinstance(size, bool):
                continue
            q = k8s.parse_quantity(size)
            if q is None:
                yield (
                    base + ("volumes", i, "emptyDir", "sizeLimit"),
                    f"{size!r} is not a Kubernetes quantity (e.g. 64Gi)",
                )
            elif q < 0:
                yield base + ("volumes", i, "emptyDir", "sizeLimit"), f"sizeLimit {size!r} must not be negative"


@rule(
    "KG048",
    E,
    "A resource request must not exceed its limit.",
    "Lower the request or raise the limit.",
    templates_only=True,
)
def requests_le_limits(doc: Any, ctx: Context) -> Iterator:
    for res, path in _resources(doc):
        req, lim = res.get("requests"), res.get("limits")
        if not isinstance(req, dict) or not isinstance(lim, dict):
            continue
        for name, rv in req.items():
            if name in lim:
                r, m = k8s.parse_quantity(rv), k8s.parse_quantity(lim[name])
                if r is not None and m is not None and r > m:
                    yield path + ("requests", name), f"request {rv} for {name} exceeds the limit {lim[name]}"


@rule(
    "KG049",
    E,
    "Extended resources (nvidia.com/gpu) and hugepages cannot be overcommitted: a request needs a "
    "limit and must equal it.",
    "Set nvidia.com/gpu in limits (requests may be left out) to the same number.",
    templates_only=True,
)
def extended_request_equals_limit(doc: Any, ctx: Context) -> Iterator:
    for res, path in _resources(doc):
        req, lim = res.get("requests"), res.get("limits")
        if not isinstance(req, dict):
            continue
        if not isinstance(lim, dict):
            lim = {}
        for name, rv in req.items():
            if not _is_extended(name) and not str(name).startswith("hugepages-"):
                continue
            if name not in lim:
                yield path + ("requests", name), f"{name} is requested without a limit; set limits.{name}: {rv}"
                continue
            r, m = k8s.parse_quantity(rv), k8s.parse_quantity(lim[name])
            if r is not None and m is not None and r != m:
                yield path + ("requests", name), f"{name} request {rv} must equal the limit {lim[name]}"


@rule(
    "KG050",
    E,
    "Extended resources are whole numbers (nvidia.com/gpu: 0.5 is rejected).",
    "Request whole GPUs (or use MIG/time-slicing resource names).",
    templates_only=True,
)
def extended_whole_numbers(doc: Any, ctx: Context) -> Iterator:
    for res, path in _resources(doc):
        for section in ("limits", "requests"):
            values = res.get(section)
            if isinstance(values, dict):
                for name, value in values.items():
                    q = k8s.parse_quantity(value)
                    if _is_extended(name) and q is not None and q != q.to_integral_value():
                        yield path + (section, name), f"{name}: {value} must be a whole number"


@rule(
    "KG051",
    E,
    "Volume names are DNS-1123 labels and unique.",
    "Use lower case, digits and '-' (dshm, not dshm_vol).",
    templates_only=True,
)
def volume_names(doc: Any, ctx: Context) -> Iterator:
    for spec, base in _pod(doc):
        vols = spec.get("volumes")
        if not isinstance(vols, list):
            continue
        seen: set = set()
        for i, v in enumerate(vols):
            name = v.get("name") if isinstance(v, dict) else None
            if not isinstance(name, str):
                continue
            if not k8s.is_dns_label(name):
                yield (
                    base + ("volumes", i, "name"),
                    f"volume name {name!r} must be a DNS-1123 label (lower case, digits, '-')",
                )
            if name in seen:
                yield base + ("volumes", i, "name"), f"duplicate volume name {name!r}"
            seen.add(name)


def _claim_volumes(doc: Any) -> set:
    """Volume names the controller adds to every pod from claim templates: a StatefulSet's or a
    LeaderWorkerSet's volumeClaimTemplates, a JobSet's volumeClaimPolicies (also in a TrainingRuntime's
    JobSet template)."""
    templates: list = []
    if doc.kind == "StatefulSet":
        templates += k8s.get(doc.data, "spec", "volumeClaimTemplates") or []
    elif doc.kind == "LeaderWorkerSet":
        templates += k8s.get(doc.data, "spec", "leaderWorkerTemplate", "volumeClaimTemplates") or []
    elif doc.kind in ("JobSet", "TrainingRuntime", "ClusterTrainingRuntime"):
        spec = k8s.get(doc.data, "spec") if doc.kind == "JobSet" else k8s.get(doc.data, "spec", "template", "spec")
        for policy in k8s.get(spec, "volumeClaimPolicies") or [] if isinstance(spec, dict) else []:
            if isinstance(policy, dict) and isinstance(policy.get("templates"), list):
                templates += policy["templates"]
    return {
        t["metadata"]["name"]
        for t in templates
        if isinstance(t, dict) and isinstance(k8s.get(t, "metadata", "name"), str)
    }


@rule(
    "KG052",
    E,
    "Every volumeMount names a volume of the pod (or a claim template: StatefulSet and LeaderWorkerSet "
    "volumeClaimTemplates, JobSet volumeClaimPolicies), and mountPaths are "
    "unique per container.",
    "Add the volume, or fix the mount's name.",
    templates_only=True,
)
def volume_mounts(doc: Any, ctx: Context) -> Iterator:
    claims = _claim_volumes(doc)
    for spec, base in _pod(doc):
        vols = {v.get("name") for v in spec.get("volumes") or [] if isinstance(v, dict)} | claims
        for c, path in k8s.containers(spec, base):
            mounts = c.get("volumeMounts")
            if not isinstance(mounts, list):
                continue
            seen: set = set()
            for i, m in enumerate(mounts):
                if not isinstance(m, dict):
                    continue
                if m.get("name") not in vols:
                    yield (
                        path + ("volumeMounts", i, "name"),
                        f"volumeMount {m.get('name')!r} names no volume of the pod",
                    )
                mp = m.get("mountPath")
                if mp in seen:
                    yield path + ("volumeMounts", i, "mountPath"), f"mountPath {mp!r} is used twice in this container"
                seen.add(mp)


@rule(
    "KG053",
    E,
    'emptyDir medium must be "" or "Memory" (or HugePages); the API server accepts \'memory\' but '
    "the kubelet then fails to mount it.",
    "Write medium: Memory (capital M).",
    templates_only=True,
)
def empty_dir_medium(doc: Any, ctx: Context) -> Iterator:
    for spec, base in _pod(doc):
        for i, v in enumerate(spec.get("volumes") or []):
            medium = k8s.get(v, "emptyDir", "medium")
            if isinstance(medium, str) and not _MEDIUMS.match(medium):
                yield (
                    base + ("volumes", i, "emptyDir", "medium"),
                    f'emptyDir medium {medium!r} is unknown to the kubelet; use "Memory" or leave it empty',
                )


@rule(
    "KG054",
    E,
    "restartPolicy is Always, OnFailure or Never; imagePullPolicy is Always, IfNotPresent or Never; "
    "dnsPolicy is ClusterFirst, ClusterFirstWithHostNet, Default or None.",
    "Use one of the listed values.",
    templates_only=True,
)
def pod_enums(doc: Any, ctx: Context) -> Iterator:
    for spec, base in _pod(doc):
        rp = spec.get("restartPolicy")
        if isinstance(rp, str) and rp not in ("Always", "OnFailure", "Never"):
            yield base + ("restartPolicy",), f"restartPolicy {rp!r} must be Always, OnFailure or Never"
        dp = spec.get("dnsPolicy")
        if isinstance(dp, str) and dp not in ("ClusterFirst", "ClusterFirstWithHostNet", "Default", "None"):
            yield (
                base + ("dnsPolicy",),
                f"dnsPolicy {dp!r} must be ClusterFirst, ClusterFirstWithHostNet, Default or None",
            )
        for c, path in k8s.containers(spec, base):
            pp = c.get("imagePullPolicy")
            if isinstance(pp, str) and pp not in ("Always", "IfNotPresent", "Never"):
                yield path + ("imagePullPolicy",), f"imagePullPolicy {pp!r} must be Always, IfNotPresent or Never"


@rule(
    "KG055",
    E,
    "Pod hostname and subdomain are DNS-1123 labels (at most 63, no dots).",
    "Use the Service's name (a label) as subdomain.",
    templates_only=True,
)
def hostname_subdomain(doc: Any, ctx: Context) -> Iterator:
    if doc.kind == "StatefulSet":
        return  # the controller overwrites both
    for spec, base in _pod(doc):
        for key in ("hostname", "subdomain"):
            v = spec.get(key)
            if isinstance(v, str) and v and not k8s.is_dns_label(v):
                yield base + (key,), f"{key} {v!r} must be a DNS-1123 label (no dots, at most 63)"


@rule(
    "KG056",
    E,
    "Tolerations: key has label-key syntax; operator Exists means no value; an empty key needs "
    "Exists; tolerationSeconds needs effect NoExecute.",
    "Fix the toleration as the message says.",
    templates_only=True,
)
def tolerations(doc: Any, ctx: Context) -> Iterator:
    for spec, base in _pod(doc):
        tols = spec.get("tolerations")
        if not isinstance(tols, list):
            continue
        for i, t in enumerate(tols):
            if not isinstance(t, dict):
                continue
            p = base + ("tolerations", i)
            key, op = t.get("key"), t.get("operator", "Equal")
            if key:
                problem = k8s.qualified_name_problem(key)
                if problem:
                    yield p + ("key",), f"toleration key {key!r} {problem}"
            elif op != "Exists":
                yield p, "a toleration without key must use operator: Exists"
            if op not in ("Equal", "Exists"):
                yield p + ("operator",), f"operator {op!r} must be Equal or Exists"
            if op == "Exists" and t.get("value"):
                yield p + ("value",), "operator Exists must not have a value"
            if t.get("tolerationSeconds") is not None and t.get("effect") != "NoExecute":
                yield p + ("tolerationSeconds",), "tolerationSeconds requires effect: NoExecute"


@rule(
    "KG057",
    E,
    "activeDeadlineSeconds of a pod is 1 ... 2^31-1, and user and group ids (runAsUser, runAsGroup, fsGroup, "
    "supplementalGroups) are 0 ... 2^31-1: the API server's limits, narrower than the schema's int64.",
    "Use a positive number of seconds and a uid/gid below 2147483648.",
    templates_only=True,
)
def pod_deadline(doc: Any, ctx: Context) -> Iterator:
    for spec, base in _pod(doc):
        ads = spec.get("activeDeadlineSeconds")
        if _is_int(ads) and not 1 <= ads <= 2**31 - 1:
            yield base + ("activeDeadlineSeconds",), f"activeDeadlineSeconds {ads} must be in 1 ... 2147483647"
        contexts = [(spec.get("securityContext"), base + ("securityContext",))]
        contexts += [(c.get("securityContext"), path + ("securityContext",)) for c, path in k8s.containers(spec, base)]
        for sc, path in contexts:
            if not isinstance(sc, dict):
                continue
            ids = [(key, sc.get(key), path + (key,)) for key in ("runAsUser", "runAsGroup", "fsGroup")]
            groups = sc.get("supplementalGroups")
            if isinstance(groups, list):
                ids += [("supplementalGroups", g, path + ("supplementalGroups", i)) for i, g in enumerate(groups)]
            for key, value, at in ids:
                if _is_int(value) and not 0 <= value <= 2**31 - 1:
                    yield at, f"{key} {value} must be in 0 ... 2147483647"


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


# Whole words of the variable's name (split at '_', '-', '.'): HF_TOKEN, GITHUB_TOKEN, DB_PASSWORD,
# WANDB_API_KEY, AWS_SECRET_ACCESS_KEY -- not TOKENIZERS_PARALLELISM or MAX_TOKENS, whose words only
# begin like one.
_SECRET_WORDS = re.compile(
    r"(?:^|[_.-])(TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_KEY|PRIVATE_KEY|SECRET_KEY)(?:$|[_.-])", re.I
)
_PATH_SUFFIXES = ("_FILE", "_PATH", "_DIR")
_PLACEHOLDER = re.compile(r"^\$\{?\w+\}?$")  # $HF_TOKEN, ${HF_TOKEN}: meant for envsubst, never expanded
# A switch or a count, not a secret: TOKEN_LIMIT=1024, PASSWORD_AUTH=false.
_NOT_A_SECRET = re.compile(r"^(?:[+-]?\d+|true|false|yes|no|on|off|none|null)$", re.I)


@rule(
    "KG058",
    W,
    "A secret-looking env var (a word of its name is TOKEN, SECRET, PASSWORD, API_KEY ...: HF_TOKEN, "
    "WANDB_API_KEY, DB_PASSWORD; not TOKENIZERS_PARALLELISM) has a literal value other than a number, a "
    "switch or a shell variable ($HF_TOKEN, KG130's case): it ends up in the manifest, in git and in "
    "`kubectl get -o yaml`.",
    "Put it in a Secret and use valueFrom.secretKeyRef.",
    templates_only=True,
)
def secret_in_env(doc: Any, ctx: Context) -> Iterator:
    for spec, base in _pod(doc):
        for c, path in k8s.containers(spec, base):
            for i, e in enumerate(k8s.env_list(c)):
                if not isinstance(e, dict):
                    continue
                name, value = e.get("name"), e.get("value")
                if isinstance(name, str) and _SECRET_WORDS.search(name) and isinstance(value, str) and value:
                    if "$(" in value or _NOT_A_SECRET.match(value.strip()):
                        continue  # a reference to another variable, or a switch / count
                    if name.upper().endswith(_PATH_SUFFIXES) and value.startswith("/"):
                        continue  # where a secret is mounted (KGEN_SECRET_FILE, *_PASSWORD_FILE), not the secret
                    if _PLACEHOLDER.match(value):
                        continue  # no secret in the manifest, but a shell variable left unexpanded: KG130's case
                    message = f"{name} has a literal value; move it to a Secret and use valueFrom.secretKeyRef"
                    yield path + ("env", i, "value"), message


@rule(
    "KG059",
    INFO,
    "An image without a tag or with :latest: every node may run a different build, and image caches of "
    "10-20 GB training images are not reused predictably (info: a pinning policy, not a defect of the "
    "layout; Kustomize and Helm often pin the tag at build time).",
    "Pin a tag or a digest (image: repo/train:1.4 or repo/train@sha256:...).",
    templates_only=True,
)
def image_tag(doc: Any, ctx: Context) -> Iterator:
    from kgen.lint import kinds
    from kgen.lint.rules_images import placeholder

    containers = [cp for spec, base in _pod(doc) for cp in k8s.containers(spec, base)]
    containers += [cp for t in kinds.templates(doc) if t.containers is not None for cp in t.containers]  # TrainJob
    for c, path in containers:
        image = c.get("image")
        if not isinstance(image, str) or not image or "@" in image or not k8s.is_image_reference(image):
            continue  # KG041 reports an invalid reference
        if placeholder(image):
            continue  # KG181 reports a placeholder
        last = image.rsplit("/", 1)[-1]
        tag = last.split(":", 1)[1] if ":" in last else ""
        if tag in ("", "latest"):
            yield path + ("image",), f"image {image!r} is not pinned; use a version tag or a digest"
