"""`kgen debug stacks RUN`: where every rank of a run is, the odd ones out first (kgen.sdk.debug ->
kgen.runs.stacks -> stdout)."""

from __future__ import annotations

import json

import click

from kgen.cli.options import KgenCommand, KgenGroup, check_format, cluster_options, on_option, output_format_option

SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
STACKS_FORMATS = ("text", "json")

STACKS_EPILOG = """\b
Examples:
  kgen debug stacks llama               # one line per group of identical stacks, odd ones out first
  kgen debug stacks llama -o json | jq '.groups[0]'

\b
Every training process of every node dumps its Python stack (faulthandler, on a signal, through the
sitecustomize the entrypoint gives the workers); ranks with the same stack are grouped: "rank 7:
queue.get at data.py:88 (the one that differs)", then "ranks 0-6: distributed_c10d.all_reduce at
train.py:42". Cluster runs (kgen submit: each running pod asked through the API's exec, as
kubectl exec POD -- python3 /opt/kgen/kgen_entrypoint.py --stacks does by hand), bare-metal runs (kgen
launch, --local or over ssh) and Slurm runs (one srun --overlap step in the running job).
"""


@click.group("debug", cls=KgenGroup, context_settings=SETTINGS)
def debug() -> None:
    """Look inside a running run: kgen debug stacks RUN."""


@debug.command("stacks", cls=KgenCommand, epilog=STACKS_EPILOG, context_settings=SETTINGS)
@click.argument("name")
@cluster_options
@output_format_option(STACKS_FORMATS, "text")
@on_option
def stacks(name, namespace, context, kubeconfig, output_format, on):
    """Every rank's Python stack, identical ones grouped, the odd ones out first."""
    from kgen.runs.stacks import report_lines
    from kgen.sdk.debug import StacksRequest, stacks
    from kgen.sdk.runs import RunRef

    check_format(output_format, STACKS_FORMATS, files=False)
    report = stacks(StacksRequest(RunRef(name, namespace=namespace, context=context, kubeconfig=kubeconfig, on=on)))
    if output_format == "json":
        click.echo(json.dumps(report.to_dict(), indent=2))
        return
    for line in report_lines(report):
        click.echo(line)
