"""Golden files: every preset x kind (and --kind slurm's sbatch scripts), byte for byte.

Regenerate after an intended template change, then review the diff:
    pytest tests/render/test_golden.py --update-goldens
The entrypoint script is replaced by a fixed line so that goldens do not churn with every change
of entrypoint/ (test_render_invariants checks the real script lands in the ConfigMap).
"""

import pytest

from kgen import RenderRequest
from kgen.render.pipeline import build, render_documents
from kgen.yamlio import dump_yaml
from tests.conftest import KINDS, PRESETS, ROOT

GOLDEN = ROOT / "tests" / "golden"
STUB = b"entrypoint/pod/kgen_entrypoint.pyz is embedded here\n"  # binaryData: base64 in the golden
CASES = [(p, k, None) for p in PRESETS for k in KINDS] + [("4x8", "job", "1.27"), ("4x8", "job", "1.34")]


def golden_name(preset, kind, version):
    return f"{preset}-{kind}" + (f"-k8s{version}" if version else "") + ".yaml"


@pytest.mark.parametrize("preset,kind,version", CASES)
def test_golden(preset, kind, version, update_goldens):
    spec = build(RenderRequest(preset=preset, flags={"kind": kind}, kubernetes_version=version))
    text = dump_yaml(render_documents(spec, entrypoint_source=STUB))
    path = GOLDEN / golden_name(preset, kind, version)
    if update_goldens:
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"missing golden {path.name}: run pytest tests/render/test_golden.py --update-goldens"
    assert text == path.read_text(), f"{path.name} differs: review, then --update-goldens"


SLURM_CASES = [(p, []) for p in PRESETS] + [("4x8", ["slurm.partition=gpu", "slurm.account=proj-7", "slurm.qos=high",
    "slurm.time=2-00:00:00", "slurm.directives=[--exclusive, --constraint=h100]", "workingDir=/data/code",
    "env.HF_HOME=/data/hf cache", "reform.maxReformations=3"])]  # fmt: skip


def slurm_golden_name(preset: str, sets: list[str]) -> str:
    return f"{preset}-slurm{'-values' if sets else ''}.sbatch"


@pytest.mark.parametrize("preset,sets", SLURM_CASES)
def test_golden_slurm(preset, sets, update_goldens):
    """--kind slurm: the sbatch script of every preset (and one with the Slurm values set), byte for byte."""
    from kgen import RenderRequest, render

    text = render(RenderRequest(preset=preset, kind="slurm", sets=sets, command=["train.py", "--lr", "3e-4"])).text
    path = GOLDEN / slurm_golden_name(preset, sets)
    if update_goldens:
        path.write_text(text)
    assert path.exists(), f"missing golden {path.name}: run pytest tests/render/test_golden.py --update-goldens"
    assert text == path.read_text(), f"{path.name} differs: review, then --update-goldens"


def test_no_stale_goldens():
    from tests.test_jobset import GOLDEN_CASES as JOBSET_CASES
    from tests.test_jobset import golden_name as jobset_golden_name

    expected = {golden_name(*c) for c in CASES} | {jobset_golden_name(*c) for c in JOBSET_CASES}
    assert {p.name for p in GOLDEN.glob("*.yaml")} == expected
    assert {p.name for p in GOLDEN.glob("*.sbatch")} == {slurm_golden_name(*c) for c in SLURM_CASES}
