"""`kgen render --kind slurm` (kgen.render.slurmkind): the same presets and values as the Kubernetes kinds, read
for Slurm; Kubernetes-only keys a user set are refused with the fix or reported as ignored; the script is pure
(the same bytes under any HOME, user, clock or machine; no Slurm client, torch or kgen.slurm loaded) and the run's
folder and secret never in its text. The script itself: tests/render/test_render_sbatch.py; goldens:
tests/render/test_golden.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from kgen import RenderRequest, render
from kgen.cli import cli as kgen_cli
from kgen.errors import KgenError

CMD = ["train.py", "--lr", "3e-4"]


def script(**fields) -> str:
    return render(RenderRequest(kind="slurm", command=CMD, **fields)).text


def sbatch_lines(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if line.startswith("#SBATCH --"):
            name, _, value = line[len("#SBATCH --") :].partition("=")
            out[name] = value
    return out


def cli(*args: str):
    return CliRunner().invoke(kgen_cli, list(args))


@pytest.mark.parametrize(
    ("cpu", "memory", "want_cpu", "want_mem"),
    [
        ("16", "64Gi", "16", "64G"),
        ("2000m", "1536Mi", "2", "1536M"),
        ("8", "64G", "8", "61036M"),  # Kubernetes' G is 10^9 bytes; Slurm's G is 2^30
        ("1", "500M", "1", "477M"),  # rounded up to whole MiB
        ("4", "1Ti", "4", "1024G"),
    ],
)
def test_cpu_and_memory_in_slurms_units(cpu, memory, want_cpu, want_mem):
    lines = sbatch_lines(script(cpu=cpu, memory=memory))
    assert lines["cpus-per-task"] == want_cpu and lines["mem"] == want_mem


def test_the_shape_and_the_slurm_keys():
    text = script(preset="4x8", sets=["slurm.partition=gpu", "slurm.qos=high", "slurm.account=p7",
                                      "slurm.time=01:00:00", "slurm.stepWait=90"])  # fmt: skip
    lines = sbatch_lines(text)
    assert lines["nodes"] == "4" and lines["ntasks-per-node"] == "1" and lines["gpus-per-node"] == "8"
    assert (lines["partition"], lines["qos"], lines["account"], lines["time"]) == ("gpu", "high", "p7", "01:00:00")
    assert "--wait=90 " in text and "export NPROC_PER_NODE=8\n" in text and "requeue" in lines


def test_auto_requests_and_a_cpu_job():
    lines = sbatch_lines(script(nodes=3, gpus=0, sets=["nprocPerNode=4"]))
    assert "gpus-per-node" not in lines and lines["cpus-per-task"] == "4" and lines["mem"] == "8G"
    assert "gpus-per-node" not in sbatch_lines(script(gpus=0, sets=["cpu=", "memory="]))
    assert {"cpus-per-task", "mem"} & set(sbatch_lines(script(gpus=0, sets=["cpu=", "memory="]))) == set()


def test_resources_requests_override_cpu_and_memory_as_on_kubernetes():
    lines = sbatch_lines(script(sets=["resources.requests.cpu=12", "resources.requests.memory=100Gi"]))
    assert lines["cpus-per-task"] == "12" and lines["mem"] == "100G"


def test_no_requeue_when_reformations_are_off():
    text = script(sets=["reform.maxReformations=0"])
    assert "#SBATCH --no-requeue\n" in text and "export KGEN_MAX_REFORMATIONS=0\n" in text


def test_the_smoke_test_without_a_command():
    text = render(RenderRequest(kind="slurm")).text
    assert '--slurm-node "$KGEN_SLURM_RUN" -- --smoke-test\n' in text
    assert "#SBATCH --job-name=kgen-2node-test" in text and "export NCCL_DEBUG=INFO\n" in text


def test_env_values_reach_the_entrypoint_exactly():
    text = script(env=["NOTE=it's $HOME; `id`", "EMPTY="])
    assert "export NOTE='it'\"'\"'s $HOME; `id`'\n" in text and "export EMPTY=''\n" in text


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (
            ["--queue", "q"],
            "--queue: has no meaning with kind slurm: it is Kueue's LocalQueue (Slurm queues by "
            "partition and QoS: set slurm.partition / slurm.qos instead)",
        ),
        (
            ["--set", "port=29600"],
            "--set port: has no meaning with kind slurm: under Slurm the ports come from the job",
        ),
        (["--set", "livenessPort=29601"], "--set livenessPort: has no meaning with kind slurm"),
        (["--set", "patches=[{target: {kind: Job}, patch: {a: 1}}]"], "--set patches: has no meaning with kind slurm"),
        (["--set", "activeDeadlineSeconds=60"], "slurm.time, e.g. 24:00:00"),
        (["--set", "topology.required=x/y"], "--set topology.required: has no meaning with kind slurm"),
        (["--set", "networkPolicy.extraIngress=[{from: []}]"], "--set networkPolicy.extraIngress: has no meaning"),
        (["--set", "envFrom=[{secretRef: {name: a}}]"], "--set envFrom: has no meaning with kind slurm"),
        (["--set", "env.T={valueFrom: {secretKeyRef: {name: a, key: b}}}"], "--set env.T: T: has no meaning"),
        (["--set", "initContainers=[{name: a, image: b}]"], "--set initContainers: has no meaning with kind slurm"),
        (["--set", "env.A-B=1"], '"A-B" is not a shell variable name'),
        (["--cpu", "1500m"], "--cpu: is 1500m: Slurm allocates whole CPUs (--cpus-per-task) (use 2)"),
        (["--set", "slurm.time=1h"], "--set slurm.time: must be Slurm's time form"),
        (["--set", "slurm.partition=gpu;x"], "--set slurm.partition: must be a Slurm partition name"),
        (["--set", "slurm.directives=[--nodes=3]"], "--nodes is written by kgen from nodes (set nodes instead)"),
        (["--set", "slurm.directives=[--output=x]"], "--output is written by kgen from kgen"),
        (["--set", "slurm.directives=[exclusive]"], "must be long options such as --exclusive"),
        (["--set", "slurm.directives=[--comment=a b]"], "must be long options such as --exclusive"),
        (["--set", "slurm.stepWait=0"], "--set slurm.stepWait: must be an integer between 1 and 3600"),
        (["--set", "python=/opt/my python"], "--set python: must be an interpreter path of plain characters"),
        (["--set", "workingDir=data"], "--set workingDir: must be an absolute path"),
        (["--kubernetes-version", "1.31"], "--kubernetes-version: is for Kubernetes manifests"),
        (["-o", "json"], "-o/--output: --kind slurm prints an sbatch script, not Kubernetes objects"),
    ],
)
def test_what_slurm_cannot_honour_is_one_line_naming_the_option_and_the_fix(args, error):
    res = cli("render", "--kind", "slurm", *args, "--", "train.py")
    assert res.exit_code == 2 and res.stdout == "", res.output
    [line] = res.stderr.splitlines()
    assert line.startswith("kgen: error: ") and error in line, line


@pytest.mark.parametrize(
    ("args", "warning"),
    [
        (["-n", "team"], "kgen: warning: --namespace: has no effect with kind slurm: a Slurm job has no namespace"),
        (["--image", "x:1"], "kgen: warning: --image: has no effect with kind slurm: the nodes' own interpreter"),
        (["--set", "nodeSelector.pool=a100"], "--set nodeSelector.pool (nodeSelector): has no effect with kind slurm"),
        (["--set", "shmSize=32Gi"], "--set shmSize: has no effect with kind slurm: the nodes' own /dev/shm is used"),
        (["--set", "networkPolicy.enabled=true"], "networkPolicy.enabled: has no effect with kind slurm"),
    ],
)
def test_kubernetes_only_keys_a_user_set_render_with_a_warning(args, warning):
    res = cli("render", "--kind", "slurm", *args, "--", "train.py")
    assert res.exit_code == 0 and res.stdout.startswith("#!/bin/bash\n"), res.output
    assert any(line.startswith(warning) or warning in line for line in res.stderr.splitlines()), res.stderr


def test_a_presets_kubernetes_keys_say_nothing():
    res = cli("render", "--kind", "slurm", "--preset", "64x8", "--", "train.py")  # the preset sets shmSize, kind job
    assert res.exit_code == 0 and res.stderr == ""


def test_slurm_keys_with_a_kubernetes_kind_are_cautions():
    res = cli("render", "--set", "slurm.partition=gpu", "--", "train.py")
    assert res.exit_code == 0
    assert "kgen: warning: --set slurm.partition: has no effect with kind job" in res.stderr


def test_the_self_check_refuses_what_lint_would():
    res = cli("render", "--kind", "slurm", "--set", "slurm.directives=[--ntasks-per-gpu=1]", "--", "train.py")
    assert res.exit_code == 0  # not a per-node launcher problem: kgen's entrypoint is one task per node
    with pytest.raises(KgenError):
        render(RenderRequest(kind="slurm", name="Bad_Name"))


def test_the_api_renders_no_documents_for_slurm():
    from kgen.render.pipeline import build, render_documents

    result = render(RenderRequest(kind="slurm", command=CMD))
    assert result.documents == [] and result.text.startswith("#!/bin/bash\n")
    with pytest.raises(KgenError, match="sbatch script"):
        render_documents(build(RenderRequest(kind="slurm", command=CMD)))


def test_pure_and_light(tmp_path):
    """The same bytes under another HOME, clock zone and locale; no torch, Slurm client, run adapter or kgen key."""
    code = (
        "import sys, json\nfrom kgen.cli import main\n"
        "try:\n    main(['render', '--kind', 'slurm', '--preset', '4x8', '--', 'train.py'])\n"
        "except SystemExit:\n    pass\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('torch', 'kgen.slurm', 'kgen.cluster',"
        " 'kgen.baremetal', 'kgen.runs', 'kubernetes')))), file=sys.stderr)\n"
    )
    outs = []
    for i, extra in enumerate(({}, {"TZ": "Asia/Tokyo", "LC_ALL": "C", "USER": "nobody"})):
        home = tmp_path / f"home{i}"
        home.mkdir()
        env = {**os.environ, "HOME": str(home), "XDG_STATE_HOME": "", "XDG_CONFIG_HOME": "", **extra}
        env.pop("KGEN_KEY_FILE", None)
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
        assert res.returncode == 0, res.stderr
        assert json.loads(res.stderr.strip().splitlines()[-1]) == []
        assert list(home.iterdir()) in ([], [home / ".cache"])  # a cache at most
        outs.append(res.stdout)
    assert outs[0] == outs[1] and "secret" not in outs[0].replace("KGEN_SECRET_FILE", "").replace(
        "run's secret", ""
    ).replace('"$KGEN_SLURM_RUN/secret"', "")


def test_help_and_completion_know_the_kind():
    res = cli("render", "--help")
    assert "job|statefulset|jobset|slurm" in res.stdout and "--kind slurm" in res.stdout
    from kgen.cli.render import _kinds

    assert "slurm" in _kinds()
