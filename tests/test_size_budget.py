"""Every object kgen renders fits client-side `kubectl apply` with headroom, render ships the pod copy of the
entrypoint that makes that possible, and a traceback in it reads like the whole file's (that it is the pod parts,
line for line: tests/test_entrypoint_assembly.py).

Client-side `kubectl apply` stores the whole object once more in its `kubectl.kubernetes.io/last-applied-
configuration` annotation, and the API server caps all annotations of an object at 256 KiB (262,144 bytes).
kubectl writes that annotation as Go's encoding/json does (compact, map keys sorted, `<`, `>` and `&` as
`\\u003c`, `\\u003e`, `\\u0026`, U+2028/U+2029 escaped, a newline at the end): `last_applied` does the same.
The budget is 128 KiB (half the cap) for the largest
configuration (64x8, every kind, a long command and environment, every optional object); the entrypoint ships
zipped in the ConfigMap's binaryData (entrypoint/assemble.py), ~58 KiB of base64 for ~132 KiB of pod parts, so
the largest object is about half the budget. The test fails loudly, with the sizes, when the entrypoint outgrows it.
"""

from __future__ import annotations

import json

import pytest
import yaml
from click.testing import CliRunner

from kgen import RenderRequest
from kgen.cli import cli
from kgen.render.pipeline import manifest_text
from kgen.resources import entrypoint_path, pod_entrypoint_path, pod_entrypoint_zip_path
from tests.conftest import shipped_pod_copy

BUDGET = 128 * 1024  # bytes of last-applied-configuration per object (the annotations' cap is 256 KiB)
ANNOTATIONS_CAP = 262144

LONG_COMMAND = ["train.py", *(f"--option-{i:03d}=value-{i:03d}-{'x' * 24}" for i in range(100))]  # ~5 KiB
LONG_ENV = [f"--env=TRAIN_SETTING_{i:03d}={'v' * 64}" for i in range(64)]  # ~5 KiB


def last_applied(obj: dict) -> bytes:
    """The object as kubectl's last-applied-configuration annotation holds it (Go's encoding/json)."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    for raw, go in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(raw, go)
    text = text.replace("\\b", "\\u0008").replace("\\f", "\\u000c")  # Go spells these two as \u00XX
    return (text + "\n").encode()


def test_last_applied_is_what_go_writes():
    assert last_applied({"b": 1, "a": "<x & y>\n\u2028"}) == b'{"a":"\\u003cx \\u0026 y\\u003e\\n\\u2028","b":1}\n'


def largest(kind: str) -> list[dict]:
    """The largest configuration, through the CLI (its own parsing of --env and the command)."""
    sets = ["podDisruptionBudget=true", "queue=team-a", "topology.required=cloud.google.com/gce-topology-block"]
    args = ["render", "--preset", "64x8", "--kind", kind, "--name", "llama-70b-pretraining-run-0042", "-n", "ml-team"]
    for s in sets:
        args += ["--set", s]
    res = CliRunner().invoke(cli, [*args, *LONG_ENV, "--", *LONG_COMMAND], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return [d for d in yaml.safe_load_all(res.stdout) if d]


@pytest.mark.parametrize("kind", ["job", "statefulset", "jobset"])
def test_every_object_of_the_largest_configuration_is_within_budget(kind):
    docs = largest(kind)
    sizes = {f"{d['kind']}/{d['metadata']['name']}": len(last_applied(d)) for d in docs}
    biggest = max(sizes, key=sizes.__getitem__)
    print(f"\n{kind}: " + ", ".join(f"{k} {v:,} B" for k, v in sizes.items()))
    assert sizes[biggest] <= BUDGET, (
        f"{biggest} is {sizes[biggest]:,} bytes as kubectl's last-applied-configuration, over the budget of "
        f"{BUDGET:,} (the API server refuses more than {ANNOTATIONS_CAP:,} for all annotations of an object): "
        f"keep the entrypoint lean, or move code the pods never run to a part after the pod parts "
        f"(PARTS in entrypoint/assemble.py); sizes: {sizes}"
    )
    assert {d["kind"] for d in docs} >= {"ConfigMap", "NetworkPolicy", "PodDisruptionBudget"}


# ---- the pod copy: what render ships, and tracebacks that read like the whole file's ---------------------
# (tests/test_entrypoint_assembly.py checks that it is the pod parts, line for line, as entrypoint/assemble.py makes it)
def test_render_ships_the_pod_copy():
    docs = [d for d in yaml.safe_load_all(manifest_text(RenderRequest())) if d]
    assert shipped_pod_copy(docs[0]) == pod_entrypoint_path().read_text()
    assert "data" not in docs[0]  # one key, in binaryData


def test_a_traceback_in_the_pod_copy_shows_the_lines_of_the_whole_file(tmp_path):
    """Readable tracebacks: Python reads the lines from the pod copy itself, and line N is line N of
    `kgen entrypoint`'s file (here an internal call given a wrong argument)."""
    import subprocess
    import sys

    source = entrypoint_path().read_text()
    pod = tmp_path / "kgen_entrypoint.py"
    pod.write_text(pod_entrypoint_path().read_text())
    code = (
        "import importlib.util, sys; s = importlib.util.spec_from_file_location('ep', sys.argv[1]); "
        "m = importlib.util.module_from_spec(s); s.loader.exec_module(m); m.secret_from_job_uid(None, 'ns', 'x')"
    )
    res = subprocess.run([sys.executable, "-c", code, str(pod)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 1 and "AttributeError" in res.stderr, res.stderr
    lines = res.stderr.splitlines()
    [at] = [i for i, ln in enumerate(lines) if f'File "{pod}"' in ln and "in secret_from_job_uid" in ln]
    number = int(lines[at].split(", line ")[1].split(",")[0])
    shown = lines[at + 1].strip()
    whole = source.split("\n")[number - 1]  # the same line, but for its spaces and quotes (the pod copy's are fewer)
    assert shown and "".join(shown.split()) == "".join(whole.split()).replace('"', "'"), (shown, number, whole)


def test_every_name_the_pod_copy_uses_is_defined_in_it(tmp_path):
    """A helper defined only inside a left-out section (a bare-metal or Slurm part) and used by the pod's own
    code is a NameError in every pod, at the worst moment (found once: a failure record's time stamp). ruff's
    undefined-name check on the pod copy, as pods run it. The verbs of the left-out sections (`--launch-node`,
    `--run-dir`, `--slurm-node`, `--slurm-end`: bare-metal hosts and Slurm nodes run the whole file) are the
    only names main() may reach that a pod lacks."""
    import subprocess
    import sys

    copy = tmp_path / "kgen_entrypoint.py"
    copy.write_text(pod_entrypoint_path().read_text())
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--isolated", "--select", "F821,F822,F823",
         "--output-format", "concise", str(copy)],
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    verbs = {"launch_node", "run_dir_verb", "slurm_node", "slurm_end"}
    found = [line for line in done.stdout.splitlines() if ": F8" in line]
    assert done.returncode in (0, 1) and not done.stderr, done.stderr
    assert [line for line in found if line.split("`")[-2:-1] and line.split("`")[-2] not in verbs] == [], found


def test_a_traceback_in_the_zipped_pod_copy_names_the_lines_of_the_whole_file(tmp_path):
    """What pods run: the zip, under the script's name. Its frames read `kgen_entrypoint.py/__main__.py", line N`
    and line N is the whole file's."""
    import subprocess
    import sys

    whole = entrypoint_path().read_text().split("\n")
    pod_lines = pod_entrypoint_path().read_text().split("\n")
    script = tmp_path / "kgen_entrypoint.py"
    script.write_bytes(pod_entrypoint_zip_path().read_bytes())
    code = "import runpy, sys; runpy.run_path(sys.argv[1], run_name='ep')['secret_from_job_uid'](None, 'ns', 'x')"
    res = subprocess.run([sys.executable, "-c", code, str(script)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 1 and "AttributeError" in res.stderr, res.stderr
    frames = [ln for ln in res.stderr.splitlines() if f'File "{script}/__main__.py"' in ln]
    [frame] = [ln for ln in frames if "secret_from_job_uid" in ln]
    number = int(frame.split(", line ")[1].split(",")[0])
    assert pod_lines[number - 1].strip() and "".join(pod_lines[number - 1].split()) == "".join(
        whole[number - 1].split()
    ).replace('"', "'"), (number, pod_lines[number - 1], whole[number - 1])


def test_the_zipped_pod_copy_runs_as_the_script_and_knows_its_own_path(tmp_path):
    """`python3 /opt/kgen/kgen_entrypoint.py` runs the zip (what the pod's command and `kubectl exec ... --stacks`
    do); a usage error names the script as the user typed it, not the archive's member."""
    import subprocess
    import sys

    script = tmp_path / "kgen_entrypoint.py"
    script.write_bytes(pod_entrypoint_zip_path().read_bytes())
    res = subprocess.run([sys.executable, str(script), "--", "torchrun", "train.py"], capture_output=True,
                         text=True, timeout=60, env={"PATH": "/usr/bin:/bin", "NNODES": "1"})  # fmt: skip
    assert res.returncode == 2 and "__main__" not in res.stderr, res.stderr
    assert "use: " in res.stderr and str(script) in res.stderr, res.stderr
