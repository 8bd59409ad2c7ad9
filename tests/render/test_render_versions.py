"""What `kgen render --kubernetes-version V` prints is accepted by every Kubernetes from V to 1.37
(schemas and rules of each version), and the default (1.33) therefore by all of 1.33 ... 1.37."""

import pytest

from kgen import RenderRequest
from kgen.lint.api import LintOptions, lint_text
from kgen.render.pipeline import manifest_text
from kgen.versions import DEFAULT_KUBERNETES_VERSION, MAX_K8S
from tests.conftest import KINDS, PRESETS

TARGETS = [None, "1.27", "1.31", "1.34", "1.37"]  # None = the default (1.33); the gates change at 31 and 34


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t or "default")
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("preset", PRESETS)
def test_output_is_clean_on_every_newer_kubernetes(preset, kind, target):
    text = manifest_text(RenderRequest(preset=preset, flags={"kind": kind}, kubernetes_version=target))
    first = int((target or DEFAULT_KUBERNETES_VERSION).split(".")[1])
    for minor in range(first, MAX_K8S + 1):
        result = lint_text(text, f"{preset}-{kind}", LintOptions(kubernetes_version=f"1.{minor}"))
        assert result.findings == [], f"1.{minor}: {[f.text() for f in result.findings]}"


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t or "default")
@pytest.mark.parametrize("kind", KINDS)
def test_optional_objects_are_clean_too(kind, target):
    sets = ["podDisruptionBudget=true", "rdma=true", "nccl.ibDisable=true", "ttlSecondsAfterFinished=3600"]
    text = manifest_text(RenderRequest(preset="4x8", flags={"kind": kind}, sets=sets, kubernetes_version=target))
    first = int((target or DEFAULT_KUBERNETES_VERSION).split(".")[1])
    for minor in range(first, MAX_K8S + 1):
        result = lint_text(text, f"optional-{kind}", LintOptions(kubernetes_version=f"1.{minor}"))
        assert result.findings == [], f"1.{minor}: {[f.text() for f in result.findings]}"


def test_a_broken_manifest_is_not_clean():
    """The check above can fail: the same lint on a damaged render reports it."""
    text = manifest_text(RenderRequest(preset="4x8")).replace("completionMode: Indexed", "completionMode: indexed")
    result = lint_text(text, "damaged", LintOptions(kubernetes_version="1.27"))
    assert result.findings


def test_render_and_lint_default_to_the_same_kubernetes_version():
    """One constant: `kgen render`'s default target is what `kgen lint` checks by default, and it
    turns the Job failure policy on."""
    from click.testing import CliRunner

    from kgen.cli import cli

    assert cli.commands["lint"].params[
        [p.name for p in cli.commands["lint"].params].index("kubernetes_version")
    ].default == (DEFAULT_KUBERNETES_VERSION)
    assert int(DEFAULT_KUBERNETES_VERSION.split(".")[1]) >= 31  # podFailurePolicy is GA from 1.31
    res = CliRunner().invoke(cli, ["render", "--preset", "4x8"])
    assert "podFailurePolicy:" in res.stdout
