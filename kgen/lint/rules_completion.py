"""Workloads that should end but never do: a training operator that restarts a deterministic crash in place
forever (no backoff limit), a Job-like pod whose second regular container never exits (an exporter), and one
whose scripts hold the pod after their work (`sleep infinity`, an endless loop), so the pod never ends after
training and the Job never completes. All hold their GPUs until someone notices.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from kgen import k8s
from kgen.findings import Severity
from kgen.lint import kinds
from kgen.lint.kinds.base import as_int
from kgen.lint.registry import Context, rule

E, W = Severity.ERROR, Severity.WARNING


_IN_PLACE = ("OnFailure", "ExitCode", "Always")


@rule(
    "KG183",
    W,
    "An operator workload whose pods restart in place (restartPolicy OnFailure, a PyTorchJob's default, "
    "ExitCode or Always) with nothing bounding those restarts: a PyTorchJob without runPolicy.backoffLimit "
    "(kubedl's: spec.backoffLimit), or a Volcano Job, whose maxRetry counts only failed pods. A deterministic "
    "crash (a bug, a bad config, out of memory) restarts forever and holds its GPUs instead of failing the job.",
    "PyTorchJob: set spec.runPolicy.backoffLimit (e.g. 3), or restartPolicy: Never to fail at the first crash; "
    "Volcano Job: restartPolicy: Never with a PodFailed policy (RestartJob) and maxRetry.",
)
def operator_restarts_forever(doc: Any, ctx: Context) -> Iterator:
    facts = kinds.facts(doc)
    if facts is None or facts.restarts_unbounded is None:
        return
    offending = []
    for t in kinds.templates(doc):
        policy = t.restart_policy or t.spec.get("restartPolicy")
        if policy not in _IN_PLACE or as_int(t.spec.get("activeDeadlineSeconds")) is not None:
            continue  # fails at the first crash, or the kubelet fails the pod at its deadline
        path = t.restart_path or t.spec_path + ("restartPolicy",)
        offending.append((t, policy, path))
    if not offending:
        return
    said = ", ".join(
        f"{t.role} {policy}{'' if path[-1] == 'restartPolicy' else ' (default)'}".strip()
        for t, policy, path in offending
    )
    what = "a crash"
    if any(policy == "ExitCode" for _, policy, _ in offending):
        what = "a crash (ExitCode: one with a retryable exit code, e.g. OOM-killed 137)"
    missing, fix = facts.restarts_unbounded
    yield (
        offending[0][2],
        f"restartPolicy {said} and {missing}: {what} restarts in place forever, holding the GPUs; {fix}",
    )


# A container that serves until it is stopped: an exporter, a log shipper, a proxy, a dashboard (the image's
# last path component without its tag; "*-exporter" too).
_DAEMONS = frozenset(
    """dcgm-exporter node-exporter exporter fluent-bit fluentbit fluentd vector promtail otel-collector
    opentelemetry-collector opentelemetry-collector-contrib cloud-sql-proxy cloudsql-proxy envoy oauth2-proxy nginx
    redis memcached tensorboard prometheus pushgateway telegraf""".split()
)


def _daemon_image(image: str) -> bool:
    name = image.split("@", 1)[0].lower()
    last = name.rsplit("/", 1)[-1].split(":", 1)[0]
    return last in _DAEMONS or last.endswith("-exporter") or name.split(":", 1)[0].endswith("datadog/agent")


_FOREVER = re.compile(
    r"\bsleep\s+(?:inf|infinity)\b|\btail\s+-[fF]\b|\bwhile\s+(?:true|:|\[\s*1\s*\])\s*;?\s*do(?![\s\S]*\b(?:break|exit)\b)"
)


def _never_exits(c: dict) -> str | None:
    """Why the container runs until it is stopped, or None when it may end on its own."""
    words = [w for key in ("command", "args") for w in (c.get(key) or []) if isinstance(w, str)]
    text = " ".join(words)
    if words and _FOREVER.search(text):
        return f"it runs {_FOREVER.search(text).group(0).strip()!r}"  # type: ignore[union-attr]
    if words:
        return None  # its own command: may well end
    image = c.get("image")
    if isinstance(image, str) and _daemon_image(image):
        return f"its image {image!r} is a server that runs until stopped"
    if c.get("ports") and (c.get("readinessProbe") or c.get("livenessProbe")):
        return "it serves ports with probes (a server)"
    return None


@rule(
    "KG187",
    E,
    "A pod of a workload that runs to completion (Job, JobSet, PyTorchJob, Volcano Job, TrainJob) has a "
    "second regular container that never exits (an exporter, a log shipper, `sleep infinity`): the pod keeps "
    "running after training ends, so the Job never completes and keeps its GPUs.",
    "Make it a native sidecar (an initContainer with restartPolicy: Always, Kubernetes 1.29+), which the "
    "kubelet stops when the regular containers end; or drop it.",
    templates_only=True,
)
def sidecar_never_exits(doc: Any, ctx: Context) -> Iterator:
    facts = kinds.facts(doc)
    if facts is None or not facts.runs_to_completion:
        return
    for tpl in kinds.templates(doc):
        regular = list(k8s.containers(tpl.spec, tpl.spec_path, init=False))
        if len(regular) < 2:
            continue
        daemons = [(c, p, why) for c, p in regular for why in [_never_exits(c)] if why]
        if not daemons or len(daemons) == len(regular):
            continue  # all of them serve: not a batch pod lint can judge
        for c, path, why in daemons:
            yield (
                path + ("name",),
                f"container {c.get('name', '?')!r} never exits ({why}): the pod keeps running after training, so "
                f"the {facts.kind} never completes and keeps its GPUs; make it a native sidecar (initContainers "
                "with restartPolicy: Always)",
            )


# Commands that do no work of their own: what a script runs before it holds the pod must include another.
_NO_WORK = frozenset(
    """sleep echo printf true false : cat ls date env hostname set export exit cd pwd whoami id uname tail
    nvidia-smi [ [[ test local read wait trap source . unset shift""".split()
)


def _hold(scripted: Any) -> str | None:
    """How a container's script holds its pod after doing some work (`sleep infinity`, an endless loop without
    break, `tail -f`), or None: no hold, or nothing but the hold and idle commands (a pod kept for debugging)."""
    from kgen.launch import shelltree
    from kgen.launch.argv import skip_wrappers
    from kgen.lint.rules_scripts import _endless, _leaves, _long_sleep

    for script, _where in scripted.scripts:
        how, work = None, False
        for cmd in script.simple_commands():
            argv = cmd.argv[skip_wrappers(cmd.argv) :] if cmd.words else []
            if not argv:
                continue
            if argv[0] == "sleep" and any(_long_sleep(a) for a in argv[1:]):
                how = how or f"`{' '.join(argv)}`"
            elif argv[0] == "tail" and any(a in ("-f", "-F", "--follow") for a in argv[1:]):
                how = how or f"`{' '.join(argv)}`"
            work = work or argv[0].rsplit("/", 1)[-1] not in _NO_WORK
        for node in shelltree.compounds(script):
            if node.kind in ("while", "until") and _endless(node) and not _leaves(node.bodies[1]):
                how = how or f"an endless `{node.kind}` loop"
        if how and work:
            return how
    return None


@rule(
    "KG214",
    E,
    "A pod of a workload that runs to completion (Job, JobSet, Volcano Job, PyTorchJob, TrainJob) whose "
    "containers' scripts do their work and then hold the pod (`sleep infinity`, an endless `while true` loop "
    "without break, `tail -f`): the pod never ends, so the Job never completes, its dependants never start and "
    "its nodes (and GPUs) stay taken until someone deletes it.",
    "End the script when the work is done (exit with its status); keep a pod for debugging as a separate Pod, "
    "or with kubectl debug.",
    scope="stream",
)
def script_holds_pod(docs: list, ctx: Context) -> Iterator:
    from kgen.lint.model import containers_of, read

    for doc in docs:
        facts = kinds.facts(doc)
        if facts is None or not facts.runs_to_completion:
            continue
        for tpl in kinds.templates(doc):
            holds = [(c, p, _hold(read(doc, c, p, docs, tpl))) for c, p in containers_of(tpl)]
            if not holds or not all(how for _, _, how in holds):
                continue  # a container that ends: KG187 reports the others when they never exit
            for c, path, how in holds:
                yield (
                    doc,
                    path + ("name",),
                    f"container {c.get('name', '?')!r} holds its pod after its work ({how}): the pod never ends, so "
                    f"the {facts.kind} never completes and keeps its nodes; end the script when the work is done",
                )
