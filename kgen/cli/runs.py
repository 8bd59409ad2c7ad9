"""The run verbs: `kgen status`, `logs`, `stop`, `submit`, `list`, for cluster, bare-metal and Slurm runs.

Thin click commands: flags -> kgen.sdk (status, watch, logs, stop, submit, list_runs: this machine's record of a
bare-metal or Slurm run first, else the cluster; the ``kubernetes`` client is loaded only there, so `kgen
render`/`lint`/`--help` never load it) -> kgen.runs.views -> stdout.

Exit codes of `kgen status` (and of `--watch`), from kgen.runs.verdict.status_exit: 0 unless
the run failed (1); with --exit-code the state's own code: 0 succeeded, 1 failed, 3 running (starting,
running, degraded or restarting), 4 pending (unschedulable, image pull errors). 2 is always bad input or a
cluster error (no kubeconfig, unreachable, forbidden, unknown run), one line on stderr.
"""

from __future__ import annotations

import re
import sys
import time

import click

from kgen.cli.options import (
    ASCII_INT,
    KgenCommand,
    check_format,
    cluster_options,
    complete_run_names,
    note,
    on_option,
    output_format_option,
    slurm_refusal_explained,
)
from kgen.errors import KgenError, UsageError

STATUS_FORMATS = LIST_FORMATS = ("text", "wide", "json", "yaml")  # kgen.runs.views (not imported here: lazy)
SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def _ref(name, namespace, context, kubeconfig, on=None):
    from kgen.sdk import RunRef

    return RunRef(name, namespace=namespace, context=context, kubeconfig=kubeconfig, on=on)


# ------------------------------------------------------------------------------------------ status
STATUS_EPILOG = """\b
Examples:
  kgen status llama-70b                 # one row per node rank, then the verdict
  kgen status llama-70b -o wide         # ... with generation, pod IP and readiness
  kgen status llama-70b -o json | jq .root_cause
  kgen status llama-70b --watch         # follow until the run ends
  kgen status llama-70b -n team-a --context prod
  kgen status llama-70b --exit-code || echo "not done: $?"   # scripts: 3 running, 4 pending
  kgen status my-ssh-run                # a kgen launch run: every host asked over ssh
  kgen status llama --on slurm          # a kgen submit --kind slurm run: Slurm and its run folder asked

\b
Exit codes: 0 unless the run failed (1); 2 bad input, cluster error or no such run.
With --exit-code: 0 succeeded, 1 failed, 3 running (starting, running, degraded,
restarting), 4 pending (unschedulable, image pull errors).
"""


@click.command("status", cls=KgenCommand, epilog=STATUS_EPILOG, context_settings=SETTINGS)
@click.argument("name", shell_complete=complete_run_names)
@cluster_options
@output_format_option(STATUS_FORMATS, "text", help="Output format (wide: also generation, pod IP, readiness).")
@click.option(
    "-w", "--watch", is_flag=True, help="Follow the run's pods and workload; print each change until it ends."
)
@click.option("--no-logs", is_flag=True, help="Do not read log tails (FAIL-STOP lines) for the root cause.")
@click.option("--brief", is_flag=True, help="Only the verdict, no row per rank.")
@click.option(
    "--exit-code",
    "state_codes",
    is_flag=True,
    help="Exit with the state's code: 0 succeeded, 1 failed or stopped, 3 running, 4 pending "
    "(default: 0 unless it failed or was stopped).",
)
@on_option
def status(name, namespace, context, kubeconfig, output_format, watch, no_logs, brief, state_codes, on):
    """Show a run: one row per node rank and one verdict line (root cause of a failure).

    NAME is the run name (kgen render --name, kgen launch --name): a bare-metal run of that name
    (kgen launch's local record) is asked on its hosts, a Slurm run (kgen submit --kind slurm's record)
    of Slurm and its run folder; otherwise its Job or StatefulSet and its pods are found on the cluster
    by kgen's labels.
    """
    from kgen import sdk
    from kgen.runs import views
    from kgen.runs.verdict import status_exit

    check_format(output_format, STATUS_FORMATS, files=False)
    ref = _ref(name, namespace, context, kubeconfig, on)
    if not watch:
        st = sdk.status(ref, read_logs=not no_logs)
        if st.where:
            st.verdict.details.append(st.where)
        click.echo(views.status_view(st.verdict, output_format, rows=not brief), nl=False)
        sys.exit(status_exit(st.verdict.state, state_codes))
    try:
        v = show_watch(sdk.watch(ref, read_logs=not no_logs), output_format, brief)
    except KeyboardInterrupt:  # Ctrl-C on `kgen status --watch`: quiet, 128 + SIGINT
        sys.exit(130)
    sys.exit(status_exit(v.state, state_codes))


def show_watch(updates, output_format: str, brief: bool):
    """Print what `kgen status --watch` shows of each kgen.sdk.StatusUpdate; return the last verdict: the first
    view in full, then a line per change (a document for json/yaml), the final view in full."""
    from kgen.runs import views

    v = None
    for u in updates:
        v = u.status.verdict
        if u.kind == "first":
            if u.status.where:
                v.details.append(u.status.where)
            click.echo(views.status_view(v, output_format, rows=not brief, document=True), nl=False)
        elif u.kind == "change":
            if output_format in ("text", "wide"):
                click.echo(f"{time.strftime('%H:%M:%S', time.gmtime())}  {v.headline}")
            else:
                click.echo(views.status_view(v, output_format, document=True), nl=False)
        elif u.kind == "final":  # re-read in full after the run ended
            if output_format in ("text", "wide"):
                click.echo("")
            click.echo(views.status_view(v, output_format, rows=not brief, document=True), nl=False)
        elif u.kind == "ended" and output_format in ("text", "wide"):  # the last change, in full
            click.echo("")
            click.echo(views.status_view(v, output_format, rows=not brief), nl=False)
    assert v is not None  # a watch yields its first verdict at least
    return v


# ------------------------------------------------------------------------------------------ logs
LOGS_EPILOG = """\b
Examples:
  kgen logs llama-70b                       # every rank, merged by time, "[rank] " prefixes
  kgen logs llama-70b --full                # torchrun's shutdown tracebacks in full (one line each by default)
  kgen logs llama-70b -f                    # follow all pods at once, and new pods of re-formed groups
  kgen logs llama-70b --rank 0 --rank 17-19 --tail 100
  kgen logs llama-70b --since 10m --timestamps
  kgen logs llama-70b --previous            # the containers before their last restart
  kgen logs my-ssh-run -f --rank 0          # a kgen launch run: every host's log over ssh
  kgen logs llama --on slurm -f             # a Slurm run: every node's log in its run folder, requeues too
"""


def parse_ranks(values) -> set[int] | None:
    if not values:
        return None
    out: set[int] = set()
    for value in values:
        for part in str(value).split(","):
            part = part.strip()
            m = re.fullmatch(r"([0-9]+)(?:-([0-9]+))?", part)
            if not m:
                raise UsageError(f'expected N, N-M or a comma list, got "{value}"', option="--rank", hint="e.g. 0,3-5")
            lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
            if hi < lo:
                raise UsageError(f'empty range "{part}"', option="--rank", hint="write the lower rank first")
            out.update(range(lo, hi + 1))
    return out


def parse_duration(value: str | None) -> int | None:
    """--since in seconds; 0 (0s, 0m ...) means from now on: no line written before."""
    if value is None:
        return None
    m = re.fullmatch(r"([0-9]+)([smhd]?)", value.strip())
    if not m:
        raise UsageError(f'expected a duration like 30s, 10m or 2h (0s: from now on), got "{value}"', option="--since")
    return int(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]


@click.command("logs", cls=KgenCommand, epilog=LOGS_EPILOG, context_settings=SETTINGS)
@click.argument("name", shell_complete=complete_run_names)
@cluster_options
@click.option("-f", "--follow", is_flag=True, help="Follow every rank's log until the run ends.")
@click.option(
    "--rank",
    "ranks",
    multiple=True,
    metavar="N[-M][,..]",
    help="Only these ranks (repeatable); a node's own lines come with all its ranks.",
)
@click.option("--tail", type=ASCII_INT, metavar="N", help="The last N lines of each node's log.")
@click.option(
    "--since", metavar="DURATION", help="Only lines newer than DURATION (30s, 10m, 2h; 0s: from now on, with -f)."
)
@click.option("--timestamps", is_flag=True, help="Show the API server's timestamp on every line.")
@click.option("-p", "--previous", is_flag=True, help="The previous container of each rank (after a restart).")
@click.option(
    "--max-streams", default=128, show_default=True, metavar="N", type=ASCII_INT, help="Concurrent log streams at most."
)
@click.option("--full", is_flag=True, help="torchrun's shutdown tracebacks as written (default: one kgen line each).")
@on_option
def logs(name, namespace, context, kubeconfig, follow, ranks, tail, since, timestamps, previous, max_streams, full, on):
    """Every rank's log, merged by time: one whole line of one process each, after "[R] " (the training process
    of global rank R) or "[node N] " (node N's own: kgen, torchrun)."""
    from kgen import sdk

    rank_set = parse_ranks(ranks)
    since_s = parse_duration(since)
    ref = _ref(name, namespace, context, kubeconfig, on)
    request = sdk.LogsRequest(
        ref,
        ranks=frozenset(rank_set) if rank_set is not None else None,
        tail=tail,
        since_s=since_s,
        timestamps=timestamps,
        previous=previous,
        follow=follow,
        max_streams=max_streams,
        full=full,
    )
    try:
        for line in sdk.logs(request, note=note):
            click.echo(line)
    except KeyboardInterrupt:  # Ctrl-C on `kgen logs -f`: quiet, 128 + SIGINT
        sys.exit(130)
    if follow:
        sys.exit(followed_result(ref))


def followed_result(ref) -> int:
    """`kgen logs -f` ends with the run's result, as `kgen launch --follow` does: 0 succeeded, 1 failed or
    stopped (its verdict on stderr), 3 when the logs ended before the run did; 2 when the run is gone."""
    from kgen import sdk
    from kgen.runs.verdict import status_exit

    try:
        v = sdk.status(ref).verdict
    except KgenError as exc:
        note(f"the logs ended and the run's result cannot be read: {exc}")
        return 2
    if v.state == "succeeded":
        return 0
    note(v.headline)
    if v.state in ("failed", "stopped"):
        return status_exit(v.state)
    note(f"the logs ended before the run did ({v.state}): kgen status {ref.name}")
    return 3


# ------------------------------------------------------------------------------------------ stop
STOP_EPILOG = """\b
Examples:
  kgen stop llama-70b                 # delete the workload, Service, ConfigMap, Secret, NetworkPolicy, PDB, pods
  kgen stop llama-70b --wait          # ... and wait (at most --timeout) until the pods are gone
  kgen stop llama-70b -n team-a       # a run with nothing left: an error (exit 2); --ignore-not-found: exit 0
  kgen stop my-ssh-run --rm           # a kgen launch run: every process on every host, then its files
  kgen stop llama --on slurm          # a Slurm run: the group stop (SIGINT to every node), then scancel
"""


@click.command("stop", cls=KgenCommand, epilog=STOP_EPILOG, context_settings=SETTINGS)
@click.argument("name", shell_complete=complete_run_names)
@cluster_options
@click.option("--wait", is_flag=True, help="Wait until the run's pods are gone.")
@click.option("--timeout", default=300.0, show_default=True, metavar="SECONDS", help="Bound for --wait.")
@click.option(
    "--grace",
    default=10.0,
    show_default=True,
    metavar="SECONDS",
    help="Bare metal: SIGKILL what is left this long after the stop began; Slurm: scancel what is left then.",
)
@click.option(
    "--rm", "remove", is_flag=True, help="Bare metal and Slurm: then delete the run's folders and its record."
)
@click.option(
    "--ignore-not-found", is_flag=True, help="A cluster run with nothing left is no error (exit 0), as in kubectl."
)
@on_option
def stop(name, namespace, context, kubeconfig, wait, timeout, grace, remove, ignore_not_found, on):
    """Stop a run: delete its workload, Service, ConfigMap, Secret, NetworkPolicy, PDB and pods (foreground);
    a bare-metal run: end every process of it on every host (group stop, SIGTERM, SIGKILL after --grace);
    a Slurm run: the group stop on every node (exit 6, "stopped by user"), scancel after --grace."""
    from kgen import sdk

    ref = _ref(name, namespace, context, kubeconfig, on)
    request = sdk.StopRequest(ref, wait, timeout, grace, remove, ignore_not_found)
    report = sdk.stop(request, say=click.echo, note=note)
    for line in report.lines:
        click.echo(line)
    if not report.stopped:
        note(report.left)
        sys.exit(1)
    if report.removed:
        note(f"run {name} stopped, but not removed: {'; '.join(report.removed)}")
        sys.exit(1)
    if remove:
        click.echo(f"run {name} stopped and removed ({report.removed_what})")
    elif report.done:
        click.echo(report.done)


# ------------------------------------------------------------------------------------------ submit
def print_dry_run(docs: list[dict], outcome: str) -> None:
    """The objects of a dry run as YAML on stdout (the API server's answers for --dry-run=server), one line
    on stderr per object and what happened."""
    from kgen.yamlio import dump_yaml

    click.echo(dump_yaml(docs), nl=False)
    names = ", ".join(f"{d.get('kind', '?').lower()}/{(d.get('metadata') or {}).get('name')}" for d in docs)
    click.echo(f"kgen: dry run: {names} would be applied (server-side, field manager kgen); {outcome}", err=True)


SUBMIT_EPILOG = """\b
Examples:
  kgen submit --preset 4x8 --name llama-70b --image ghcr.io/me/train:1.4 -- train.py --lr 3e-4
  kgen submit --nodes 2 --gpus 0 --wait         # the smoke test; wait until every rank runs
  kgen submit -f prod.yaml --name llama-70b --replace   # stop the old run of that name first
  kgen submit --kind jobset --nodes 4 --gpus 8  # needs the JobSet CRD (checked before applying)
  kgen submit --preset 4x8 --dry-run -- train.py          # print what would be applied, change nothing
  kgen submit --preset 4x8 --dry-run=server -- train.py   # ... as the API server would take it
  kgen submit --kind slurm --preset 4x8 --name llama -- train.py   # sbatch on this machine's Slurm
  kgen submit --kind slurm --nodes 2 --gpus 0 --dry-run=server     # sbatch --test-only: where and when

\b
Render options are those of `kgen render` (all but -o/--output and --output-file); the manifest is
linted, then applied with server-side apply (field manager "kgen"): ConfigMap, Service, workload.
If an apply fails, the objects this submit created are deleted again. A run of the same name must
be stopped first (a Job's pod template is immutable): `kgen stop NAME`, another --name, or --replace.
With --kind slurm the sbatch script is linted, a run folder made (--run-dir, on a file system every
node shares: the entrypoint and a new secret in a 0600 file) and the script submitted with sbatch.
"""

# Render's options that only say where render writes its text: submit applies instead.
RENDER_OUTPUT_OPTIONS = ("output_file", "output_format")
# RenderRequest's own fields; every other render option is a values flag (kgen.api.FLAG_NAMES).
REQUEST_FIELDS = ("preset", "values_files", "sets", "env", "command", "kubernetes_version")


def render_options(render_command: click.Command) -> list[click.Parameter]:
    """Copies of `kgen render`'s options as `kgen submit` takes them: all of them (same names, metavars and
    help, so the two cannot drift) except the output ones and --namespace (submit's -n/--namespace, from
    cluster_options, takes its place), and without the COMMAND argument (submit's own, last)."""
    import copy

    return [
        copy.copy(p)
        for p in render_command.params
        if isinstance(p, click.Option) and p.name not in (*RENDER_OUTPUT_OPTIONS, "namespace")
    ]


@click.command("submit", cls=KgenCommand, epilog=SUBMIT_EPILOG, context_settings=SETTINGS)
@cluster_options
@click.option("--replace", is_flag=True, help="Stop an existing run of the same name first (waits for its pods).")
@click.option("--wait", is_flag=True, help="Show progress until every rank runs or the run ends.")
@click.option("--timeout", default=600.0, show_default=True, metavar="SECONDS", help="Bound for --wait/--replace.")
@click.option(
    "--dry-run",
    "dry_run",
    is_flag=False,
    flag_value="client",
    default="none",
    metavar="[client|server]",
    help="Print what would be applied and change nothing: client (--dry-run alone) needs no cluster; "
    "server sends it to the API server as a dry run (admission, defaults, conflicts).",
)
@click.option(
    "--run-dir",
    metavar="DIR",
    type=click.Path(file_okay=False),  # completes folders
    help="Slurm: the run's folder, on a file system every node shares [$XDG_STATE_HOME/kgen/slurm/NAME].",
)
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="[-- COMMAND [ARGS...]]")
def submit(namespace, context, kubeconfig, replace, wait, timeout, dry_run, run_dir, command, **render_params):
    """Render, lint and apply a run in one step, after checking no run of that name exists (--kind slurm:
    submit it with sbatch)."""
    from kgen import sdk
    from kgen.cli.options import corrected_launcher, read_stdin_values

    sdk.check_submit(timeout, dry_run, wait)
    fields = {k: render_params.pop(k) for k in REQUEST_FIELDS if k != "command"}
    stdin = read_stdin_values(fields.get("values_files") or ())  # `-f -`, as render
    # every other render option is a values flag; submit's -n/--namespace is render's --namespace too
    render = sdk.RenderRequest(**fields, **render_params, namespace=namespace, command=command, stdin=stdin)
    request = sdk.SubmitRequest(render, namespace, context, kubeconfig, replace, timeout, dry_run, run_dir)
    with corrected_launcher("kgen submit"), slurm_refusal_explained(render):
        result = sdk.submit(request, say=click.echo, note=note)
    if not result.applied and result.on == "slurm":
        click.echo(result.checked.script, nl=False)
        click.echo(f"kgen: dry run: the sbatch script above would be submitted; {result.outcome}", err=True)
        return
    if not result.applied:
        print_dry_run(result.documents, result.outcome)
        return
    if result.on == "slurm" and not wait:
        name = result.record.name
        click.echo(f"next: kgen status {name} · kgen logs {name} -f · kgen stop {name}")
        return
    if wait:
        name = result.checked.spec.name
        ref = sdk.RunRef(name, namespace=result.namespace or None, context=context, kubeconfig=kubeconfig,
                         on=result.on)  # fmt: skip
        updates = sdk.watch(ref, first_logs=False, until_running=True, timeout=timeout)
        v = show_watch(updates, "text", True)
        sys.exit(0 if v.state in ("running", "succeeded") else v.state_code)  # else 3 or 4: still waiting


# ------------------------------------------------------------------------------------------ list
LIST_EPILOG = """\b
Examples:
  kgen list                 # kgen runs in the current namespace
  kgen list -A              # in every namespace
  kgen list -o json

\b
Bare-metal runs (kgen launch, from this machine's records) come first, each asked on its hosts;
then Slurm runs (kgen submit --kind slurm), each asked of Slurm; then the cluster's, when a
cluster is configured.
"""


@click.command("list", cls=KgenCommand, epilog=LIST_EPILOG, context_settings=SETTINGS)
@cluster_options
@click.option("-A", "--all-namespaces", is_flag=True, help="Runs in every namespace.")
@output_format_option(LIST_FORMATS, "text", help="Output format (wide: also nodes up and re-formations).")
def list_runs(namespace, context, kubeconfig, all_namespaces, output_format):
    """The kgen-managed runs: bare-metal runs (kgen launch), Slurm runs (kgen submit --kind slurm) and the
    cluster's (found by kgen's labels): shape, kind, state, age and verdict."""
    import json

    from kgen import sdk
    from kgen.runs import views

    check_format(output_format, LIST_FORMATS, files=False)
    listed = sdk.list_runs(sdk.ListRequest(namespace, context, kubeconfig, all_namespaces), note=note)
    runs = listed.runs
    if output_format == "json":
        click.echo(json.dumps(views.list_document(runs), indent=2))
    elif output_format == "yaml":
        click.echo(views.to_yaml(views.list_document(runs)), nl=False)
    elif not runs:
        click.echo(f"no kgen runs in {listed.where}")
    else:
        for line in views.list_rows(runs, wide=output_format == "wide"):
            click.echo(line)


COMMANDS = (status, logs, stop, submit, list_runs)
SUBMIT_OWN_PARAMS = list(submit.params)  # -n/--namespace, --context, --kubeconfig, --replace, --wait, --timeout


def register(group: click.Group) -> None:
    """Add the cluster verbs to ``group``; `kgen submit` takes `kgen render`'s options (``group``'s render)."""
    render_command = group.commands.get("render")
    if render_command is None:
        raise RuntimeError("register the render command before the cluster verbs")
    submit.params = render_options(render_command) + SUBMIT_OWN_PARAMS
    for command in COMMANDS:
        group.add_command(command)
