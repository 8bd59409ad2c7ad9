"""`kgen launch` (bare metal over ssh, or --local) and the bare-metal side of status/logs/stop/list.

Thin: flags -> kgen.baremetal (hosts, launch, ops) -> kgen.runs.views -> stdout. The verbs that
clusters share (`kgen status/logs/stop/list`) find a run here first (``bare_metal_run``: the local
record ``$XDG_STATE_HOME/kgen/runs/<RUN>.json``), else on the cluster; kgen.cli_cluster calls the hooks.
"""

from __future__ import annotations

import os
import sys
import threading
import time

import click

from kgen.cli.options import KgenCommand
from kgen.errors import UsageError

SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
ON_CHOICES = ("cluster", "bare-metal")
CLUSTER_CHECK_S = 3.0  # a run found in the local record is also looked for on a configured cluster this long


def _note(text: str) -> None:
    click.echo(f"kgen: {text}", err=True)


# ------------------------------------------------------------------------------------------ dispatch
def on_option(f):
    return click.option(
        "--on",
        "on",
        type=click.Choice(ON_CHOICES),
        default=None,
        help="Where the run is: found in the local bare-metal record first, else on the cluster.",
    )(f)


def cluster_configured(kubeconfig: str | None, context: str | None) -> bool:
    if kubeconfig or context or os.environ.get("KUBERNETES_SERVICE_HOST"):
        return True
    files = os.environ.get("KUBECONFIG")
    paths = [p for p in files.split(os.pathsep) if p] if files else [os.path.expanduser("~/.kube/config")]
    return any(os.path.isfile(p) for p in paths)


def cluster_has(name: str, namespace, context, kubeconfig) -> str | None:
    """The namespace where a cluster run ``name`` exists, when a cluster is configured and answers in time."""
    if not cluster_configured(kubeconfig, context):
        return None
    found: list[str | None] = []

    def probe() -> None:
        try:
            from kgen.cluster.client import Cluster

            cluster = Cluster.connect(kubeconfig=kubeconfig, context=context, namespace=namespace)
            if cluster.workload(name) is not None or cluster.pods(name):
                found.append(cluster.namespace)
        except Exception:  # noqa: BLE001 - no client, no cluster, no answer: the bare-metal run is the one
            pass

    t = threading.Thread(target=probe, daemon=True)
    t.start()
    t.join(CLUSTER_CHECK_S)
    return found[0] if found else None


def _no_such_run(name: str, record: object, kubeconfig, context) -> None:
    """No local record of ``name``: when no cluster can be asked either (no client, no kubeconfig), one
    error says both, so a bare-metal user's typo does not read as a cluster setup problem."""
    import importlib.util

    from kgen.cluster.errors import INSTALL_HINT

    here = f"no run {name}: no bare-metal run of that name (no local record {record})"
    if importlib.util.find_spec("kubernetes") is None:
        raise UsageError(f"{here}; cluster runs need the kubernetes package: {INSTALL_HINT}", option="NAME")
    if not cluster_configured(kubeconfig, context):
        raise UsageError(
            f"{here}, and no kubeconfig found for a cluster run (not in a pod either)",
            option="NAME",
            hint="`kgen list` shows the runs kgen knows; a cluster run: pass --kubeconfig FILE or set KUBECONFIG",
        )


def bare_metal_run(name: str, on: str | None, namespace=None, context=None, kubeconfig=None):
    """The bare-metal run ``name`` when the verb should act on it (else None: the cluster's turn)."""
    from kgen.baremetal import record as R

    if on == "cluster":
        return None
    rec = R.load(name) if R.NAME.fullmatch(name) and len(name) <= 63 else None
    if rec is None:
        if on == "bare-metal":
            raise UsageError(
                f"no bare-metal run {name} (no local record {R.path(name)})",
                option="--on",
                hint="`kgen list` shows the runs kgen knows",
            )
        if on is None:
            _no_such_run(name, R.path(name), kubeconfig, context)
        return None
    if on is None:
        ns = cluster_has(name, namespace, context, kubeconfig)
        if ns is not None:
            raise UsageError(
                f"{name} is both a bare-metal run (local record {R.path(name)}) and a cluster run (namespace {ns})",
                option="NAME",
                hint="say which with --on bare-metal or --on cluster",
            )
    return rec


def _which(rec) -> str:
    from kgen.baremetal import record as R

    where = "this machine (--local)" if rec.mode == "local" else f"{len(rec.nodes)} host(s) over ssh"
    return f"bare-metal run {rec.name} on {where}, local record {R.path(rec.name)}"


# ------------------------------------------------------------------------------------------ status
def status_baremetal(rec, output_format: str, watch: bool, brief: bool, state_codes: bool = False) -> int:
    """`kgen status RUN` for a bare-metal run: the same views and exit codes as a cluster run (C2)."""
    from kgen.baremetal import ops
    from kgen.runs import views
    from kgen.runs.verdict import status_exit

    transport = ops.transport_for(rec)
    v = ops.status(rec, transport)
    v.details.append(_which(rec))
    click.echo(views.status_view(v, output_format, rows=not brief, document=watch), nl=False)
    if not watch:
        return status_exit(v.state, state_codes)
    last = v.headline
    while v.state not in ("succeeded", "failed", "stopped"):
        time.sleep(2.0)
        v = ops.status(rec, transport)
        if v.headline != last:
            last = v.headline
            if output_format in ("json", "yaml"):
                click.echo(views.status_view(v, output_format, document=True), nl=False)
            else:
                click.echo(f"{time.strftime('%H:%M:%S', time.gmtime())}  {v.headline}")
    if output_format in ("text", "wide"):
        click.echo("")
        click.echo(views.status_view(v, output_format, rows=not brief), nl=False)
    return status_exit(v.state, state_codes)


# ------------------------------------------------------------------------------------------ logs
def logs_baremetal(rec, follow: bool, ranks, tail, since_s, timestamps: bool) -> None:
    from kgen.baremetal import ops

    transport = ops.transport_for(rec)
    if ranks is not None:
        unknown = sorted(ranks - {n.rank for n in rec.nodes})
        if unknown:
            raise UsageError(f"run {rec.name} has ranks 0..{len(rec.nodes) - 1}, not {unknown}", option="--rank")
    if not follow:
        lines, warnings = ops.logs(rec, transport, ranks, tail, since_s, timestamps)
        for w in warnings:
            _note(w)
        for line in lines:
            click.echo(line)
        return
    for line in ops.follow(rec, transport, ranks, tail, since_s, timestamps):
        click.echo(line)


# ------------------------------------------------------------------------------------------ stop
def stop_baremetal(rec, grace: float, remove: bool) -> int:
    from kgen.baremetal import ops

    transport = ops.transport_for(rec)
    report = ops.stop(rec, transport, grace=grace)
    for n in report.nodes:
        click.echo(f"rank {n.node.rank} ({n.node.host}): {n.describe()}")
    if not report.all_stopped:
        left = ", ".join(f"rank {n.node.rank} on {n.node.host}" for n in report.nodes if not n.stopped)
        _note(f"run {rec.name}: not confirmed stopped: {left}; `kgen stop {rec.name}` again once the host answers")
        return 1
    if remove:
        problems = ops.remove(rec, transport)
        if problems:
            _note(f"run {rec.name} stopped, but not removed: {'; '.join(problems)}")
            return 1
        click.echo(f"run {rec.name} stopped and removed (run directories on every host and the local record)")
        return 0
    click.echo(f"run {rec.name} stopped on every node in {report.took:.1f}s (logs kept: kgen logs {rec.name})")
    return 0


# ------------------------------------------------------------------------------------------ list
def list_entries() -> list[dict]:
    """One `kgen list` row per bare-metal run (its verdict from every host, all runs at once)."""
    from datetime import datetime, timezone

    from kgen.baremetal import ops
    from kgen.runs import views

    now = datetime.now(timezone.utc)
    return [
        {
            "namespace": "-",
            "name": rec.name,
            "kind": rec.kind,
            "shape": f"{len(rec.nodes)}x{rec.nproc}",
            "state": v.state,
            "age": views.age(rec.created, now),
            "headline": v.headline,
            "ranks_up": v.ranks_up,
            "ranks_expected": v.ranks_expected,
            "reformations": v.reformations,
            "hosts": rec.hosts,
        }
        for rec, v in ops.list_runs()
    ]


# ------------------------------------------------------------------------------------------ launch
LAUNCH_EPILOG = """\b
Examples:
  kgen launch --name llama --hosts gpu1,gpu2,gpu3 --nproc-per-node 8 -- train.py --lr 3e-4
  kgen launch --name llama --hostfile hosts.txt --workdir /data/code --follow -- train.py
  kgen launch --name llama --hosts a,b --ssh-config ./ssh_config --python /opt/venv/bin/python -- train.py
  kgen launch --name dev --local 2 -- train.py                  # 2 nodes on this machine
  kgen launch --name drill --local 3 --inject kill:1@20 -- train.py   # rehearse a lost node

\b
Every host is checked first (ssh with BatchMode and a connect timeout, the interpreter has torch,
the working directory and script exist, the run name is new, node 0's --port and --port+1 are free);
any problem: nothing starts anywhere and the error names the host. Then every node starts at once,
detached (it survives this command, the ssh connection and SIGHUP): kgen status/logs/stop RUN work
from any terminal. Node rank = position in --hosts; node 0 (the first host) is the master, reached
at --master-addr (default: the address ssh reached it at). --workdir is the training script's working
directory on every host (default: this command's directory). --follow streams the merged logs and
exits with the run's result (0 succeeded, 1 failed or stopped; Ctrl-C leaves the run running).
"""


def _resolve_hosts(hosts, hostfile, local_n):
    from kgen.baremetal.hosts import parse_hosts, read_hostfile

    given = [o for o, v in (("--hosts", hosts), ("--hostfile", hostfile), ("--local", local_n)) if v is not None]
    if not given:
        raise UsageError(
            "where should the nodes run? give --hosts H1,H2,... or --hostfile FILE (ssh), or --local N",
            option="--hosts",
        )
    if len(given) > 1:
        raise UsageError(f"{' and '.join(given)} cannot be used together: choose one", option=given[1])
    if local_n is not None:
        if not 1 <= local_n <= 64:
            raise UsageError(f"must be between 1 and 64 nodes, got {local_n}", option="--local")
        return ["localhost"] * local_n, None
    parsed = parse_hosts(hosts) if hosts is not None else read_hostfile(hostfile)
    return list(parsed.hosts), parsed.slots


@click.command("launch", cls=KgenCommand, epilog=LAUNCH_EPILOG, context_settings=SETTINGS)
@click.option("--name", required=True, metavar="RUN", help="Run name (a DNS label); new on every host.")
@click.option("--hosts", metavar="H1,H2,...", help="ssh destinations in rank order (aliases, user@host).")
@click.option("--hostfile", metavar="FILE", help="One host per line (# comments, optional slots=N).")
@click.option("--local", "local_n", type=int, metavar="N", help="N nodes on this machine, on loopback.")
@click.option("--ssh-config", metavar="FILE", help="ssh -F FILE instead of ~/.ssh/config.")
@click.option(
    "--python", "python", metavar="PATH", help="Interpreter with torch on the hosts [python3; --local: this one]."
)
@click.option("--nproc-per-node", type=int, metavar="N", help="Processes per node (GPUs per node) [1].")
@click.option("--workdir", metavar="DIR", help="Working directory of the script on every host [current directory].")
@click.option("--env", "env", multiple=True, metavar="K=V", help="Environment variable for every node (repeatable).")
@click.option("--port", default=29500, show_default=True, type=int, metavar="P", help="Master port (P+1: liveness).")
@click.option("--master-addr", metavar="ADDR", help="Node 0's address on the training fabric [as ssh reached it].")
@click.option(
    "--inject",
    multiple=True,
    metavar="kill:R@S|freeze:R@S[+T]",
    help="--local only: SIGKILL or SIGSTOP (for T s) node R's processes S s after launch.",
)
@click.option("--connect-timeout", default=10, show_default=True, type=int, metavar="S", help="ssh ConnectTimeout.")
@click.option("-f", "--follow", is_flag=True, help="Stream the merged logs; exit with the run's result.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="-- SCRIPT [ARGS...]")
def launch(
    name,
    hosts,
    hostfile,
    local_n,
    ssh_config,
    python,
    nproc_per_node,
    workdir,
    env,
    port,
    master_addr,
    inject,
    connect_timeout,
    follow,
    command,
):
    """Start a multi-node run on ssh hosts (or --local N), detached; then kgen status/logs/stop RUN."""
    from kgen.baremetal import launch as L
    from kgen.baremetal.record import check_name
    from kgen.baremetal.transport import LocalTransport, SshTransport

    check_name(name)
    host_list, slots = _resolve_hosts(hosts, hostfile, local_n)
    local = local_n is not None
    if not command:
        raise UsageError(
            "no training command: put it after --, e.g. kgen launch --name NAME --hosts a,b -- train.py --lr 3e-4",
            option="--",
        )
    nproc = nproc_per_node if nproc_per_node is not None else (slots or 1)
    if nproc < 1:
        raise UsageError(f"must be 1 or more, got {nproc}", option="--nproc-per-node")
    _refuse_nested_launcher(list(command), nproc, nproc_per_node is not None or slots is not None, len(host_list))
    from kgen.render.validate import command_problem

    problem = command_problem(list(command))
    if problem:  # what every node's entrypoint would refuse (exit 2) once started
        raise UsageError(problem, option="--")
    if not 1 <= port <= 65534:
        raise UsageError(f"must be between 1 and 65534 (the liveness port is P+1), got {port}", option="--port")
    if not 1 <= connect_timeout <= 600:
        raise UsageError(f"must be between 1 and 600 seconds, got {connect_timeout}", option="--connect-timeout")
    if inject and not local:
        raise UsageError("fault injection is for --local runs (rehearsal on this machine)", option="--inject")
    if ssh_config is not None:
        if local:
            raise UsageError("is for ssh hosts, not --local", option="--ssh-config")
        if not os.path.isfile(ssh_config):
            raise UsageError(f"{ssh_config} does not exist", option="--ssh-config")
        ssh_config = os.path.abspath(ssh_config)
    if master_addr is not None and (not master_addr or any(c.isspace() for c in master_addr) or "/" in master_addr):
        raise UsageError(f"must be a host name or IP address, got {master_addr!r}", option="--master-addr")
    if workdir is None:
        workdir = os.getcwd()
    elif "\x00" in workdir or not workdir:
        raise UsageError("must be a directory path", option="--workdir")
    elif local:
        workdir = os.path.abspath(workdir)
    py = python or (sys.executable if local else "python3")
    req = L.LaunchRequest(
        name=name,
        hosts=host_list,
        command=list(command),
        local=local,
        python=py,
        ssh_config=ssh_config,
        nproc=nproc,
        workdir=workdir,
        env=L.parse_env(env),
        port=port,
        master_addr=master_addr,
        inject=L.parse_inject(inject, len(host_list)),
    )
    transport = LocalTransport(py) if local else SshTransport(py, ssh_config, connect_timeout)
    rec = L.launch(req, transport, say=_note)
    where = "this machine" if local else f"{len(rec.nodes)} host(s)"
    click.echo(
        f"launched run {rec.name} on {where}: {len(rec.nodes)} node(s) x {rec.nproc} process(es), "
        f"master {rec.master_addr}:{rec.port}"
    )
    from kgen.runs.views import table

    rows = [[str(n.rank), n.host, n.hostname or "-", str(n.pid or "-"), n.dir] for n in rec.nodes]
    for line in table(["RANK", "HOST", "NODE", "PID", "RUN DIRECTORY"], rows):
        click.echo(f"  {line}")
    if not follow:
        click.echo(f"next: kgen status {rec.name} · kgen logs {rec.name} -f · kgen stop {rec.name}")
        return
    sys.exit(follow_run(rec))


def _refuse_nested_launcher(command: list[str], nproc: int, nproc_set: bool, nodes: int) -> None:
    """A launcher as the command (torchrun, accelerate launch, ...; contract C5) is refused before any host
    is asked, in render's words, with the launch command to run instead (its process count carried as
    --nproc-per-node): every node's entrypoint would refuse it anyway, after the run had started."""
    from kgen.cli.options import corrected_launcher
    from kgen.errors import NestedLauncherError
    from kgen.launchers import correction, nested_launcher, problem

    nested = nested_launcher(command)
    if nested is None:
        return
    fix = correction(nested, gpus=0, nproc=nproc, nproc_set=nproc_set, nodes=nodes, nodes_set=True)
    add = ["--nproc-per-node", str(fix.nproc)] if fix.nproc is not None else []
    with corrected_launcher("kgen launch"):
        raise NestedLauncherError(
            problem(nested),
            option="-- COMMAND",
            use="",
            command=fix.command,
            add=add,
            notes=[n.replace("nprocPerNode", "--nproc-per-node") for n in fix.notes],
        )


def follow_run(rec) -> int:
    """--follow: the merged logs until every node ended, then the verdict; the run's result as exit code."""
    from kgen.baremetal import ops

    transport = ops.transport_for(rec)
    try:
        for line in ops.follow(rec, transport):
            click.echo(line)
    except KeyboardInterrupt:
        _note(f"stopped following; the run goes on: kgen logs {rec.name} -f, kgen stop {rec.name}")
        return 130
    v = ops.status(rec, transport)
    _note(v.headline)
    for d in v.details:
        _note(f"  {d}")
    if v.state == "succeeded":
        return 0
    if v.state in ("failed", "stopped"):
        return 1
    _note(f"the logs ended before the run did ({v.state}): kgen status {rec.name}")
    return 3


def register(group: click.Group) -> None:
    group.add_command(launch)
