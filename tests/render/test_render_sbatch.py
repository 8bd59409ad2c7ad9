"""The sbatch script (kgen.render.sbatch): its lines, one gate per kind of value, and real bash reading it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from kgen.errors import UsageError
from kgen.render.sbatch import SbatchSpec, sbatch_text

BASE = SbatchSpec(name="llama-8n", nodes=8, command=["train.py", "--lr", "3e-4"])
RUN = "/shared/kgen/llama-8n"  # the run folder: the script's first argument


def test_the_full_script():
    more = {"gpus_per_node": 8, "cpus_per_task": 96, "mem": "0", "time": "2-00:00:00", "partition": "gpu"}
    more.update(account="proj-7", qos="high", env=(("NPROC_PER_NODE", "8"),))
    spec = SbatchSpec(**{**BASE.__dict__, **more})
    text = sbatch_text(spec)
    sbatch = [ln for ln in text.splitlines() if ln.startswith("#SBATCH")]
    assert sbatch == [
        "#SBATCH --job-name=llama-8n",
        "#SBATCH --nodes=8",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --gpus-per-node=8",
        "#SBATCH --cpus-per-task=96",
        "#SBATCH --mem=0",
        "#SBATCH --time=2-00:00:00",
        "#SBATCH --partition=gpu",
        "#SBATCH --account=proj-7",
        "#SBATCH --qos=high",
        "#SBATCH --requeue",
        "#SBATCH --open-mode=append",
        "#SBATCH --output=%x-%j.out",
    ]
    assert 'export KGEN_SLURM_RUN="${1:?' in text  # the run folder is the first argument, never in the text
    assert 'export KGEN_SECRET_FILE="$KGEN_SLURM_RUN/secret"' in text
    assert "export NPROC_PER_NODE=8\n" in text
    srun = text[text.index("\nsrun ") + 1 :].split("\n# ")[0]
    assert '--ntasks="$SLURM_NNODES" --ntasks-per-node=1' in srun  # one task per node, not the allocation's
    assert '--slurm-node "$KGEN_SLURM_RUN" -- train.py --lr 3e-4' in srun
    end = 'exec python3 "$KGEN_SLURM_RUN/kgen_entrypoint.py" --slurm-end "$KGEN_SLURM_RUN" "$?"'
    assert text.rstrip().endswith(end)
    assert sbatch_text(spec) == text  # the same fields, the same bytes


def test_optional_lines_are_left_out():
    text = sbatch_text(SbatchSpec(**{**BASE.__dict__, "requeue": False}))
    for option in ("--gpus-per-node", "--cpus-per-task", "--mem", "--time", "--partition", "--account", "--qos"):
        assert option not in text
    assert "#SBATCH --no-requeue" in text


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("name", "a\nb"),
        ("name", "-x"),
        ("nodes", 0),
        ("nodes", True),
        ("gpus_per_node", -1),
        ("mem", "16 G"),
        ("time", "1h"),
        ("partition", "gpu --qos=x"),
        ("account", "a;b"),
        ("qos", "$(id)"),
        ("output", "/tmp/x y"),
        ("chdir", "relative/dir"),
        ("chdir", "/shared/100%"),
        ("chdir", "/shared/a b"),
        ("chdir", "/shared/a,b"),
        ("python", "python3 -c x"),
        ("command", []),
        ("command", ["train.py", ""]),
        ("env", (("A-B", "1"),)),
        ("extra_sbatch", ("--x=1 --y=2",)),
        ("extra_sbatch", ("x",)),
    ],
)
def test_a_bad_field_is_one_usage_error_naming_it(field, value):
    with pytest.raises(UsageError) as err:
        sbatch_text(SbatchSpec(**{**BASE.__dict__, field: value}))
    assert err.value.option == field
    assert "\n" not in str(err.value)


HOSTILE = ["train.py", "--msg", 'it\'s a "test"', "$(touch /tmp/pwned)", "`id`", "a\nb", "*", "ünï", "--x=$HOME", ";"]


def test_bash_passes_every_word_through_as_written(tmp_path):
    """The script run by real bash with stand-ins for srun and python: the entrypoint gets the command exactly."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "argv"
    (bin_dir / "srun").write_text(f'#!/bin/bash\nprintf "%s\\0" "$@" > {record}\nexit 75\n')
    (bin_dir / "py").write_text(f'#!/bin/bash\nprintf "%s\\0" "$@" > {record}.end\nexit 0\n')
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    spec = SbatchSpec(**{**BASE.__dict__, "command": HOSTILE, "python": str(bin_dir / "py"),
                         "env": (("KGEN_NOTE", "x'y $z"),)})  # fmt: skip
    script = tmp_path / "job.sbatch"
    script.write_text(sbatch_text(spec))
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURM_NNODES": "3", "HOME": "/nonexistent"}
    res = subprocess.run(["bash", str(script), RUN], env=env, capture_output=True, text=True, timeout=30, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    argv = record.read_bytes().split(b"\0")[:-1]
    words = [a.decode() for a in argv]
    assert words[:5] == ["--nodes=3", "--ntasks=3", "--ntasks-per-node=1", "--kill-on-bad-exit=0", "--wait=30"]
    assert words[words.index("--") + 1 :] == HOSTILE
    assert words[words.index("--") - 3 :][:3] == ["/shared/kgen/llama-8n/kgen_entrypoint.py", "--slurm-node",
                                                  "/shared/kgen/llama-8n"]  # fmt: skip
    end = [a.decode() for a in (tmp_path / "argv.end").read_bytes().split(b"\0")[:-1]]
    assert end == ["/shared/kgen/llama-8n/kgen_entrypoint.py", "--slurm-end", "/shared/kgen/llama-8n", "75"]
    assert not os.path.exists("/tmp/pwned")


def test_the_template_is_in_the_templates_folder():
    from kgen.resources import templates_dir

    assert (templates_dir() / "slurm.sbatch.j2").is_file()
    assert Path(templates_dir() / "slurm.sbatch.j2").read_text().startswith("#!/bin/bash\n")


def test_without_the_run_folder_the_script_ends_at_once_saying_why(tmp_path):
    """sbatch of the rendered script by hand, without the run folder kgen submit passes: the job fails at once with
    one line in its output file, and no srun starts."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(f"#!/bin/bash\ntouch {tmp_path}/srun-ran\n")
    (bin_dir / "srun").chmod(0o755)
    script = tmp_path / "job.sbatch"
    script.write_text(sbatch_text(BASE))
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURM_NNODES": "3", "HOME": "/nonexistent"}
    res = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=30, cwd=tmp_path)
    assert res.returncode != 0
    assert "the run folder: kgen submit --kind slurm makes it and passes it" in res.stderr
    assert not (tmp_path / "srun-ran").exists()
