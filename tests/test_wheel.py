"""The wheel carries templates, presets, the entrypoint and works from a fresh venv outside the repo."""

import os
import subprocess
import sys
import venv
import zipfile

import pytest
import yaml

from tests.conftest import ROOT, shipped_pod_copy

pytestmark = pytest.mark.slow


def sh(cmd, cwd, timeout=600):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the installed kgen, not a checkout
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    assert done.returncode == 0, f"{cmd} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    sh([sys.executable, "-m", "build", "--wheel", "--outdir", str(out), str(ROOT)], cwd=out)
    (whl,) = out.glob("kgen_k8s-*.whl")  # the distribution is kgen-k8s; the package kgen
    return whl


def test_wheel_contains_bundled_data(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for tpl in ("configmap", "service", "networkpolicy", "job", "statefulset", "jobset", "pdb"):
        assert f"kgen/_bundled/templates/{tpl}.yaml.j2" in names
    for preset in ("2node-test", "4x8", "64x8", "4x1"):
        assert f"kgen/_bundled/presets/{preset}.yaml" in names
    assert "kgen/_bundled/entrypoint/kgen_entrypoint.py" in names
    assert "kgen/_bundled/entrypoint/pod/kgen_entrypoint.py" in names  # what render puts in the ConfigMap


def test_wheel_metadata_names_the_pypi_distribution(wheel):
    """`kgen` on PyPI is an unrelated project: the distribution is kgen-k8s, the command kgen."""
    with zipfile.ZipFile(wheel) as zf:
        [meta] = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        [entry_points] = [n for n in zf.namelist() if n.endswith(".dist-info/entry_points.txt")]
        metadata = zf.read(meta).decode()
        scripts = zf.read(entry_points).decode()
    assert "\nName: kgen-k8s\n" in metadata
    assert "Provides-Extra: cluster" in metadata and "extra == 'cluster'" in metadata
    assert "kgen = kgen.__main__:main" in scripts


def test_fresh_venv_outside_the_repo_renders_and_lints(wheel, tmp_path):
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    bindir = env_dir / "bin"
    sh([str(bindir / "pip"), "install", "--quiet", str(wheel)], cwd=tmp_path)
    work = tmp_path / "elsewhere"
    work.mkdir()
    out = sh([str(bindir / "kgen"), "render", "--preset", "4x8"], cwd=work)
    docs = [d for d in yaml.safe_load_all(out) if d]
    assert [d["kind"] for d in docs] == ["ConfigMap", "Service", "NetworkPolicy", "Job"]
    pod_copy = (ROOT / "entrypoint" / "pod" / "kgen_entrypoint.py").read_text()
    assert shipped_pod_copy(docs[0]) == pod_copy  # the pod copy, from the wheel's own file
    assert "kgen_entrypoint" not in str(work)  # nothing was read from the repository
    listing = sh([str(bindir / "kgen"), "presets", "list"], cwd=work)
    assert "64x8" in listing
    manifest = work / "m.yaml"
    manifest.write_text(out)
    sh([str(bindir / "kgen"), "lint", str(manifest)], cwd=work)  # the bundled schemas are found
    script = sh([str(bindir / "kgen"), "entrypoint"], cwd=work)
    assert script == (ROOT / "entrypoint" / "kgen_entrypoint.py").read_text()
    installed = sh([str(bindir / "kgen"), "entrypoint", "--path"], cwd=work).strip()
    assert installed.startswith(str(env_dir)) and installed.endswith("kgen/_bundled/entrypoint/kgen_entrypoint.py")
    site = sh([str(bindir / "python"), "-c", "import kgen, sys; print(kgen.__file__)"], cwd=work)
    assert str(env_dir) in site and str(ROOT) not in site
