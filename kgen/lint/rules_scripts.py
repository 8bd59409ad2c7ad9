"""Rules on what a training container's command does, read through the launch model
(``kgen.launch.command``, shells parsed by ``kgen.launch.shell``): scripts bash refuses, exit
statuses a script loses, rendezvous ids and node counts that differ per pod, long-running kinds
whose command ends, env values that are shell code, and launchers nested in launchers (kgen.launch.launchers).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from kgen import k8s
from kgen.findings import Severity
from kgen.launch import shell, shelltree
from kgen.launch.argv import Launch, skip_wrappers
from kgen.lint import kinds
from kgen.lint.model import containers_of, read, workloads
from kgen.lint.registry import Context, rule
from kgen.lint.rules_training import _launch_path, _multi

E, W = Severity.ERROR, Severity.WARNING
_DNS_TOOLS = {"getent", "nslookup", "dig", "host", "kubectl"}
_PER_POD_FIELDS = {"metadata.name", "metadata.uid", "status.podIP", "status.podIPs", "spec.nodeName", "status.hostIP"}
_PER_POD_VARS = {"HOSTNAME", "RANDOM", "SRANDOM", "BASHPID", "$"}
_PER_POD_COMMANDS = {"date", "hostname", "uuidgen", "openssl", "od", "head", "cat", "shuf", "mktemp"}
_SHELL_CODE = re.compile(r"\$\((?![A-Za-z_][A-Za-z0-9_]*\))[^)]*\)")


def _each_container(doc: Any) -> Iterator[tuple[Any, dict, tuple]]:
    for tpl in kinds.templates(doc):
        for c, path in containers_of(tpl):
            yield tpl, c, path


def _each_read(docs: list) -> Iterator[tuple[Any, tuple, Any]]:
    """(document, container path, what the container runs) for every container of every pod template,
    scripts from the linted set's ConfigMaps included."""
    for doc in docs:
        for tpl in kinds.templates(doc):
            for c, path in containers_of(tpl):
                yield doc, path, read(doc, c, path, docs, tpl)


@rule(
    "KG125",
    E,
    "A container's shell script (sh -c / bash -c) is not valid shell syntax (an unclosed quote, $( or "
    "here-document, a missing fi/done): bash refuses to run it and the container exits at once.",
    "Fix the script at the line the message gives (bash -n -c '...' checks it).",
    scope="stream",
)
def script_syntax(docs: list, ctx: Context) -> Iterator:
    for doc, path, scripted in _each_read(docs):
        for where, problem in scripted.errors:
            yield doc, path + where, f"the shell script does not parse: {problem}"


@rule(
    "KG210",
    W,
    "A `[` test in a container's shell script without its closing `]` word (`[ $a == x || [ $b == y]`): bash's "
    "`[` fails with \"missing ']'\", so the test is never true and its branch never runs (KG209 in an sbatch "
    "script).",
    'Close every `[` with a separate `]` word (`[ "$a" == x ] || [ "$b" == y ]`), or use `[[ ... ]]`.',
    scope="stream",
)
def script_unclosed_test(docs: list, ctx: Context) -> Iterator:
    for doc, path, scripted in _each_read(docs):
        for script, where in scripted.scripts:
            for _cmd, text in shelltree.unclosed_tests(script):
                yield (
                    doc,
                    path + where,
                    f"`{text}` has no closing `]` word: bash's [ fails (missing ']'), so the test is never true",
                )


@rule(
    "KG126",
    W,
    "A training command's exit status is lost in its script (`torchrun ... || echo failed`, `&& echo OK || "
    "echo FAILED`, `; exit 0`, `|| true`, `| tee log` without pipefail, a command after it without set -e, "
    "`&` then a plain `wait`, which returns 0): "
    "the pod exits 0 when training failed, so the Job (JobSet, PyTorchJob ...) reports success.",
    "Let the launcher's status be the script's: `exec torchrun ...`, or `set -eo pipefail`, or `|| exit 1`.",
    scope="stream",
)
def exit_status_swallowed(docs: list, ctx: Context) -> Iterator:
    seen: set = set()
    for w in workloads(docs):
        if not w.facts.runs_to_completion:
            continue
        for _c, cpath, scripted, _why in w.containers:
            seen.add((id(w.doc), cpath))
            yield from _swallowed(w.doc, cpath, scripted, w.kind)
    # A one-pod GPU Job is no training *world*, but its training script's status is its result just as well.
    for doc in docs:
        facts = kinds.facts(doc) if doc.kind in _GPU_BATCH_KINDS else None
        if facts is None or not facts.runs_to_completion:
            continue
        for tpl in kinds.templates(doc):
            for c, cpath in containers_of(tpl):
                if (id(doc), cpath) not in seen and k8s.gpu_limit(c):
                    yield from _swallowed(doc, cpath, read(doc, c, cpath, docs, tpl), facts.kind)


_GPU_BATCH_KINDS = frozenset({"Job", "JobSet", "PyTorchJob", "TrainJob", "TrainingRuntime", "ClusterTrainingRuntime"})


def _swallowed(doc: Any, cpath: tuple, scripted: Any, kind: str) -> Iterator:
    for launch in scripted.launches:
        if launch.swallowed and (launch.training or launch.form in ("python", "mpi")):
            yield (
                doc,
                _launch_path(cpath, launch),
                f"{_name(launch)}'s exit status is lost: {launch.swallowed}; a failed run ends the pod "
                f"with 0 and the {kind} succeeds. Use exec, set -eo pipefail, or `|| exit 1`",
            )


def _name(launch: Launch) -> str:
    names = {"kgen": "kgen's entrypoint", "python": "the training script", "mpi": f"{launch.via}'s program"}
    return names.get(launch.form, launch.form)


@rule(
    "KG127",
    E,
    "The rendezvous id (--rdzv-id / --rdzv_id, or PET_RDZV_ID) must be the same in every pod of the run; "
    "$RANDOM, $(date ...), $HOSTNAME, the pod's name or IP differ per pod, so each pod waits in a "
    "rendezvous of its own and the world never forms.",
    "Use one id for the run: the workload's name, or a value every pod shares (e.g. $(JOB_NAME) from a "
    "fieldRef to metadata.labels['batch.kubernetes.io/job-name']).",
    scope="stream",
)
def rdzv_id_per_pod(docs: list, ctx: Context) -> Iterator:
    for w in workloads(docs):
        if not _multi(w):
            continue
        for c, cpath, scripted, launch, raw in _flag_values(w, "rdzv_id"):
            why = _varies(raw, _per_pod_names(c, scripted))
            if why:
                yield (
                    w.doc,
                    _launch_path(cpath, launch, "rdzv_id"),
                    f"--rdzv-id={raw} {why}, so every pod has its own rendezvous and the world never forms; "
                    f"use one id for the run, e.g. --rdzv-id={w.name}",
                )
        for c, cpath, scripted, _why in w.containers:
            env = k8s.env_value(c, "PET_RDZV_ID")
            if env and isinstance(env[1], str):
                why = _varies(env[1], _per_pod_names(c, scripted))
                if why:
                    yield w.doc, cpath + ("env", env[0], "value"), f"PET_RDZV_ID={env[1]} {why}; use one id for the run"


def _flag_values(w: Any, flag: str) -> Iterator[tuple[dict, tuple, Any, Launch, str]]:
    """(container, its path, what reading it found, launch, value) for every value ``flag`` has in the
    launches of ``w``'s training containers."""
    for c, cpath, scripted, _why in w.containers:
        for launch in scripted.launches:
            raw = launch.flag(flag)
            if raw is not None:
                yield c, cpath, scripted, launch, raw


def _per_pod_names(c: dict, scripted: Any) -> dict[str, str]:
    """Variables whose value differs per pod: fieldRefs to the pod's name/IP, $HOSTNAME ..., and script
    variables assigned from those or from $(date), $RANDOM."""
    names = {v: "which differs per pod" for v in _PER_POD_VARS}
    for e in k8s.env_list(c):
        if isinstance(e, dict) and isinstance(e.get("name"), str):
            ref = k8s.get(e, "valueFrom", "fieldRef", "fieldPath")
            if ref in _PER_POD_FIELDS:
                names[e["name"]] = f"the pod's {ref}"
    for script, _where in scripted.scripts:
        for cmd in script.simple_commands():
            for a in cmd.assigns:
                name, _, _ = a.raw.partition("=")
                value = a.text.split("=", 1)[1] if "=" in a.text else ""
                if _varies(value, names):
                    names[name] = f"assigned {value} in the script"
    return names


def _varies(text: str, per_pod: dict[str, str]) -> str | None:
    for m in re.finditer(r"\$(?:\{(\w+)\}|\((\w+)\)|(\w+|\$))", text):  # ${HOSTNAME%-*}: cannot tell
        name = m.group(1) or m.group(2) or m.group(3)
        if name in per_pod:
            return f"uses {m.group(0)} ({per_pod[name]})"
    for m in re.finditer(r"\$\(\s*([\w./-]+)|`\s*([\w./-]+)", text):
        command = (m.group(1) or m.group(2)).rsplit("/", 1)[-1]
        if command in _PER_POD_COMMANDS and command not in per_pod:
            return f"runs {command} in each pod, which gives each its own value"
    if "/proc/sys/kernel/random" in text:
        return "reads a random id in each pod"
    return None


@rule(
    "KG128",
    W,
    "--nnodes (or NNODES) counted from DNS at start-up (getent hosts / nslookup / dig ... | wc -l) counts "
    "the pods that happen to exist yet: pods start at different times, so nodes disagree on the world size "
    "and the rendezvous hangs or forms a smaller world.",
    "Write the node count (it is the workload's pod count), or derive it from the spec (kgen render).",
    scope="stream",
)
def nnodes_from_dns(docs: list, ctx: Context) -> Iterator:
    for w in workloads(docs):
        for _c, cpath, scripted, launch, raw in _flag_values(w, "nnodes"):
            why = _dns_use(raw, _dns_counted(scripted))
            if why:
                yield (
                    w.doc,
                    _launch_path(cpath, launch, "nnodes"),
                    f"--nnodes={raw} {why} at start-up, which counts only the pods that exist yet; "
                    f"write the node count ({w.nodes if w.nodes is not None else 'the pod count'})",
                )


def _dns_counted(scripted: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    for script, _where in scripted.scripts:
        for cmd in script.simple_commands():
            for a in cmd.assigns:
                name = a.raw.split("=", 1)[0]
                tool = _dns_tool(a)
                if tool:
                    out[name] = tool
    return out


def _dns_tool(word: shelltree.Word) -> str | None:
    for part in word.parts:
        if part.script is not None:
            for cmd in part.script.simple_commands():
                if cmd.words and cmd.argv[0].rsplit("/", 1)[-1] in _DNS_TOOLS:
                    return cmd.argv[0].rsplit("/", 1)[-1]
    return None


# A value of one plain word (4, 2:8, $-free): the shell runs no command and expands no variable in it.
_ONE_WORD = re.compile(r"[A-Za-z0-9_.:,/+=@%-]*\Z")


def _dns_use(raw: str, counted: dict[str, str]) -> str | None:
    if _ONE_WORD.match(raw):
        return None
    try:
        script = shell.parse("x " + raw)
    except shelltree.ShellSyntaxError:
        return None
    for cmd in script.simple_commands():
        if cmd.words and cmd.argv[0].rsplit("/", 1)[-1] in _DNS_TOOLS:
            return f"runs {cmd.argv[0]}"
    for m in re.finditer(r"\$\{?(\w+)", raw):
        if m.group(1) in counted:
            return f"is ${m.group(1)}, counted with {counted[m.group(1)]}"
    return None


@rule(
    "KG129",
    W,
    "A training command whose pods are restarted when it ends (a StatefulSet or LeaderWorkerSet, restartPolicy "
    "Always; a Volcano Job task or PyTorchJob replica with restartPolicy: Always) trains again from the start "
    "every time it finishes, forever (a wait loop that breaks does not keep the pod idle).",
    "Run training as a Job, JobSet or Indexed Job (restartPolicy Never/OnFailure for a Volcano task or "
    "PyTorchJob replica); or keep the pod idle after training (kgen's entrypoint does, or `sleep infinity`).",
    scope="stream",
)
def restarted_forever(docs: list, ctx: Context) -> Iterator:
    for w in workloads(docs):
        explicit = w.tpl.restart_policy if w.tpl.restart_policy is not None else w.spec.get("restartPolicy")
        if w.facts.runs_to_completion and explicit != "Always":
            continue
        who = f"the {w.kind}'s restartPolicy Always" if not w.facts.runs_to_completion else "restartPolicy: Always"
        for _c, cpath, scripted, _why in w.containers:
            launches = [launch for launch in scripted.launches if launch.training]
            if any(launch.form == "kgen" for launch in launches):
                continue  # kgen's entrypoint holds the pod idle after training
            if not launches and not w.facts.runs_to_completion:
                continue  # a StatefulSet/LWS without a known launcher may be a server
            if _holds(scripted):
                continue
            what = _name(launches[0]) if launches else "the training command"
            yield (
                w.doc,
                _launch_path(cpath, launches[0]) if launches else cpath,
                f"{what} ends when training ends, and {who} starts it again, forever; run "
                "training to completion (a Job/JobSet, restartPolicy Never), or keep the pod idle afterwards",
            )


def _holds(scripted: Any) -> bool:
    """The script keeps the pod alive after training: `sleep infinity` (or a day and more), `tail -f`,
    or an endless loop (`while true`, `while :`, `until false`) without break, exit or return."""
    for script, _where in scripted.scripts:
        for cmd in script.simple_commands():
            argv = cmd.argv[skip_wrappers(cmd.argv) :] if cmd.words else []
            if argv[:1] == ["sleep"] and any(_long_sleep(a) for a in argv[1:]):
                return True
            if argv[:1] == ["tail"] and any(a in ("-f", "-F", "--follow") for a in argv[1:]):
                return True
        for node in shelltree.compounds(script):
            if node.kind in ("while", "until") and _endless(node) and not _leaves(node.bodies[1]):
                return True
    return False


def _long_sleep(arg: str) -> bool:
    m = re.fullmatch(r"(\d+)([smhd]?)", arg)
    if arg in ("inf", "infinity"):
        return True
    if not m:
        return False
    seconds = int(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]
    return seconds >= 10_000


def _endless(loop: shelltree.Compound) -> bool:
    cond = [c.argv for c in shelltree.walk_seq(loop.bodies[0])]
    want = ("true", ":") if loop.kind == "while" else ("false",)
    return len(cond) == 1 and len(cond[0]) == 1 and cond[0][0] in want


def _leaves(body: shelltree.Sequence) -> bool:
    return any(c.argv[:1] and c.argv[0] in ("break", "exit", "return") for c in shelltree.walk_seq(body))


# A whole env value that is a shell variable ($HF_TOKEN, ${MODEL}): meant for envsubst or a shell, never expanded.
_SHELL_VARIABLE = re.compile(r"^\$\{?[A-Za-z_]\w*\}?$")


@rule(
    "KG130",
    E,
    "An env value holds a shell command substitution ($(command ...)) or is a shell variable ($HF_TOKEN, "
    "${MODEL}): Kubernetes expands only $(VAR) references in env values and runs no shell, so the program "
    "receives the text as it is written.",
    "Compute the value in the container's command (a shell script), or use valueFrom (fieldRef, configMapKeyRef).",
    templates_only=True,
)
def shell_in_env_value(doc: Any, ctx: Context) -> Iterator:
    for _tpl, c, path in _each_container(doc):
        for i, e in enumerate(k8s.env_list(c)):
            value = e.get("value") if isinstance(e, dict) else None
            if not isinstance(value, str):
                continue
            if _SHELL_VARIABLE.match(value):
                yield (
                    path + ("env", i, "value"),
                    f"{e.get('name')} is the text {value!r}: Kubernetes expands only $(VAR), so the program gets "
                    "the placeholder, not a value (a template not rendered?); use $(VAR) or valueFrom",
                )
                continue
            m = _SHELL_CODE.search(value.replace("$$(", "\0\0"))
            if m:
                yield (
                    path + ("env", i, "value"),
                    f"{e.get('name')}={value}: {m.group(0)} stays literal (Kubernetes runs no shell for env "
                    "values); compute it in the container's command",
                )


@rule(
    "KG131",
    E,
    "A launcher runs another launcher (kgen's entrypoint `-- torchrun ...`, `torchrun --no-python torchrun "
    "...`, `torchrun -m torch.distributed.run`, deepspeed or accelerate inside torchrun): every node starts "
    "a world of its own inside the outer launcher's, so the job trains as independent one-node worlds.",
    "Give the outer launcher the training script itself (kgen's entrypoint: `-- train.py ARGS`, with "
    "--nproc-per-node as NPROC_PER_NODE / kgen render --gpus).",
    scope="stream",
)
def nested_launchers(docs: list, ctx: Context) -> Iterator:
    for doc, path, scripted in _each_read(docs):
        for launch in scripted.launches:
            inner = launch.nested
            if inner is None:
                continue
            yield doc, _launch_path(path, launch), _nested_message(launch, inner)


def _nested_message(outer: Launch, inner: Launch) -> str:
    script = [w for w in inner.child if w not in ("python", "python3")]
    fixed = " ".join(script) if script else "train.py"
    nproc = inner.flag("nproc_per_node")
    if outer.form == "kgen":
        import shlex

        from kgen.launch.launchers import PROBLEM, nested_launcher, problem  # render's and the entrypoint's words (C5)

        after = outer.words[outer.words.index("--") + 1 :] if "--" in outer.words else inner.words
        nested = nested_launcher(after)
        if nested is not None:
            per_node = f" and NPROC_PER_NODE={nested.nproc}" if nested.nproc else ""
            return f"{problem(nested)}; use `-- {shlex.join(nested.command)}`{per_node}"
        extra = f" and NPROC_PER_NODE={nproc}" if nproc else ""
        # a launcher behind a wrapper or a shell (`-- env A=1 torchrun ...`, `-- bash -c "torchrun ..."`): the
        # same words, naming what the entrypoint would run
        return f"{PROBLEM.format(launcher=inner.form)} (`{' '.join(inner.words)}`); use `-- {fixed}`{extra}"
    return (
        f"{outer.form} runs {inner.form} (`{' '.join(inner.words)}`): every node starts a world of its own "
        f"inside {outer.form}'s; launch {fixed} with one launcher"
    )
