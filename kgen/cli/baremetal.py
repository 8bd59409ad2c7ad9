"""`kgen launch` (bare metal over ssh, or --local): flags -> kgen.sdk.launch -> stdout; --follow streams the
merged logs (kgen.sdk.logs) and exits with the run's result. The verbs a bare-metal run shares with cluster
runs (`kgen status/logs/stop/list`) are kgen.cli.runs's: kgen.sdk finds the run.
"""

from __future__ import annotations

import sys

import click

from kgen.cli.options import ASCII_INT, KgenCommand, corrected_launcher, note

SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


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


@click.command("launch", cls=KgenCommand, epilog=LAUNCH_EPILOG, context_settings=SETTINGS)
@click.option("--name", required=True, metavar="RUN", help="Run name (a DNS label); new on every host.")
@click.option("--hosts", metavar="H1,H2,...", help="ssh destinations in rank order (aliases, user@host).")
@click.option("--hostfile", metavar="FILE", help="One host per line (# comments, optional slots=N).")
@click.option("--local", "local_n", type=ASCII_INT, metavar="N", help="N nodes on this machine, on loopback.")
@click.option("--ssh-config", metavar="FILE", help="ssh -F FILE instead of ~/.ssh/config.")
@click.option(
    "--python", "python", metavar="PATH", help="Interpreter with torch on the hosts [python3; --local: this one]."
)
@click.option("--nproc-per-node", type=ASCII_INT, metavar="N", help="Processes per node (GPUs per node) [1].")
@click.option("--workdir", metavar="DIR", help="Working directory of the script on every host [current directory].")
@click.option("--env", "env", multiple=True, metavar="K=V", help="Environment variable for every node (repeatable).")
@click.option(
    "--hang-timeout",
    type=ASCII_INT,
    metavar="S",
    help="Seconds without progress from any rank after which the run is a hang: stacks reported, exit 77 [0: off].",
)
@click.option(
    "--health-gate",
    type=click.Choice(["off", "warn", "fail"]),
    help="Before training, check every node's devices and links: off, warn (report, go on) or fail (exit 78) [warn].",
)
@click.option(
    "--port", default=29500, show_default=True, type=ASCII_INT, metavar="P", help="Master port (P+1: liveness)."
)
@click.option("--master-addr", metavar="ADDR", help="Node 0's address on the training fabric [as ssh reached it].")
@click.option(
    "--inject",
    multiple=True,
    metavar="kill:R@S|freeze:R@S[+T]",
    help="--local only: SIGKILL or SIGSTOP (for T s) node R's processes S s after launch.",
)
@click.option(
    "--connect-timeout", default=10, show_default=True, type=ASCII_INT, metavar="S", help="ssh ConnectTimeout."
)
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
    hang_timeout,
    health_gate,
    port,
    master_addr,
    inject,
    connect_timeout,
    follow,
    command,
):
    """Start a multi-node run on ssh hosts (or --local N), detached; then kgen status/logs/stop RUN."""
    from kgen import sdk

    if hang_timeout is not None:  # the hang watchdog (docs/entrypoint.md, When a run hangs)
        env = (*env, f"KGEN_HANG_TIMEOUT={hang_timeout}")
    if health_gate is not None:  # the health gate (docs/entrypoint.md, The health gate)
        env = (*env, f"KGEN_HEALTH_GATE={health_gate}")
    request = sdk.LaunchRequest(
        name=name,
        command=list(command),
        hosts=hosts,
        hostfile=hostfile,
        local=local_n,
        ssh_config=ssh_config,
        python=python,
        nproc_per_node=nproc_per_node,
        workdir=workdir,
        env=env,
        port=port,
        master_addr=master_addr,
        inject=inject,
        connect_timeout=connect_timeout,
    )
    with corrected_launcher("kgen launch"):
        rec = sdk.launch(request, say=note)
    local = local_n is not None
    where = "this machine" if local else f"{len(rec.nodes)} host(s)"
    click.echo(
        f"launched run {rec.name} on {where}: {len(rec.nodes)} node(s) x {rec.nproc} process(es), "
        f"master {rec.master_addr}:{rec.port}"
    )
    from kgen.runs.views import table

    p = rec.nproc
    ranks = [str(n.rank) if p == 1 else f"{n.rank * p}-{n.rank * p + p - 1}" for n in rec.nodes]
    rows = [[r, n.host, n.hostname or "-", str(n.pid or "-"), n.dir] for r, n in zip(ranks, rec.nodes, strict=True)]
    for line in table(["RANK" if p == 1 else "RANKS", "HOST", "NODE", "PID", "RUN DIRECTORY"], rows):
        click.echo(f"  {line}")
    if not follow:
        click.echo(f"next: kgen status {rec.name} · kgen logs {rec.name} -f · kgen stop {rec.name}")
        return
    sys.exit(follow_run(rec))


def follow_run(rec) -> int:
    """--follow: the merged logs until every node ended, then the verdict; the run's result as exit code."""
    from kgen import sdk

    run = sdk.RunRef(rec.name, on="bare-metal")
    try:
        for line in sdk.logs(sdk.LogsRequest(run, follow=True), note=note):
            click.echo(line)
    except KeyboardInterrupt:
        note(f"stopped following; the run goes on: kgen logs {rec.name} -f, kgen stop {rec.name}")
        return 130
    v = sdk.status(run).verdict
    note(v.headline)
    for d in v.details:
        note(f"  {d}")
    if v.state == "succeeded":
        return 0
    if v.state in ("failed", "stopped"):
        return 1
    note(f"the logs ended before the run did ({v.state}): kgen status {rec.name}")
    return 3


def register(group: click.Group) -> None:
    group.add_command(launch)
