"""Docs and help that must say what the code does: the JobSet's answer to a script error
(read from the rendered failure policy, then from README and docs/jobset.md), JobSet support in the
cluster docs, the variables `kgen entrypoint --help` names, and the pre-commit warning about --strict."""

import importlib.util
import re

import yaml
from click.testing import CliRunner

from kgen.cli import cli
from tests.conftest import ROOT

README = (ROOT / "README.md").read_text()
JOBSET_MD = (ROOT / "docs" / "jobset.md").read_text()
CLUSTER_MD = (ROOT / "docs" / "cluster.md").read_text()
LINT_MD = (ROOT / "docs" / "lint.md").read_text()


def rendered_jobset() -> dict:
    out = CliRunner().invoke(cli, ["render", "--kind", "jobset", "--nodes", "2", "--gpus", "0"]).stdout
    return next(d for d in yaml.safe_load_all(out) if d and d["kind"] == "JobSet")


def jobset_action(jobset: dict, exit_code: int) -> str:
    """What the rendered JobSet does when a trainer exits with ``exit_code`` first, read from the manifest as
    the controllers read it: the child Job's podFailurePolicy (first matching rule; no match with
    backoffLimit 0 fails the Job with BackoffLimitExceeded), then the JobSet's failurePolicy rules in order
    (reason, and the FailJob message's rule index against the message patterns)."""
    job = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]
    reason, message = "BackoffLimitExceeded", "Job has reached the specified backoff limit"
    for index, rule in enumerate(job.get("podFailurePolicy", {}).get("rules", [])):
        codes = rule.get("onExitCodes")
        if not codes:
            continue
        hit = exit_code in codes["values"] if codes["operator"] == "In" else exit_code not in codes["values"]
        if hit and rule["action"] == "FailJob":
            reason = "PodFailurePolicy"
            message = f"Container trainer for pod ns/p failed with exit code {exit_code} "
            message += f"matching FailJob rule at index {index}"
            break
    assert job["backoffLimit"] == 0
    for rule in jobset["spec"]["failurePolicy"]["rules"]:
        if reason not in rule.get("onJobFailureReasons", [reason]):
            continue
        patterns = rule.get("onJobFailureMessagePatterns")
        if patterns and not any(re.search(p, message) for p in patterns):
            continue
        return rule["action"]
    return "RestartJobSet"  # no rule matched: JobSet's default, counted against maxRestarts


def readme_jobset_cell(row_start: str) -> str:
    """The `jobset` column's cell of the README's kind table row that starts with ``row_start``."""
    header = next(line for line in README.splitlines() if line.startswith("| | `job` (default) |"))
    column = [c.strip() for c in header.strip().strip("|").split("|")].index("`jobset`")
    line = next(line for line in README.splitlines() if line.startswith(f"| {row_start}"))
    return [c.strip() for c in line.strip().strip("|").split("|")][column]


def test_a_script_error_restarts_a_jobset_and_every_doc_says_so():
    jobset = rendered_jobset()
    max_restarts = jobset["spec"]["failurePolicy"]["maxRestarts"]
    assert jobset_action(jobset, 1) == "RestartJobSet"  # the decision: restarted, counted
    assert jobset_action(jobset, 5) == "RestartJobSet"  # the other nodes' "another node's script error"
    assert jobset_action(jobset, 2) == jobset_action(jobset, 4) == "FailJobSet"  # never retried
    script = readme_jobset_cell("a script error")
    assert "restarts" in script and "jobset.maxRestarts" in script and f"default {max_restarts}" in script
    assert "at once" not in script
    config = readme_jobset_cell("config error (exit 2), group never formed (4)")
    assert "fails at once, no restart" in config
    restart_row = next(line for line in JOBSET_MD.splitlines() if "`Restart`: `RestartJobSet`" in line)
    assert "script error" in restart_row and "counted" in restart_row
    not_retriable = next(line for line in JOBSET_MD.splitlines() if "`NotRetriable`: `FailJobSet`" in line)
    assert "exit code 2" in not_retriable and "4" in not_retriable
    assert "A training script's own error restarts the group" in JOBSET_MD


def test_jobset_and_cluster_docs_agree_that_the_cluster_verbs_take_jobsets():
    assert "not available on this branch" not in JOBSET_MD
    assert "`kgen status`, `logs`, `stop`, `list` and `submit --kind jobset` work on JobSets" in JOBSET_MD
    assert "Kinds: Job, StatefulSet, and JobSet" in CLUSTER_MD
    from kgen.cluster.client import WORKLOAD_KINDS
    from kgen.cluster.engine import STOP_KINDS

    assert "JobSet" in STOP_KINDS and "JobSet" in WORKLOAD_KINDS


def test_entrypoint_help_names_every_variable_the_entrypoint_requires():
    spec = importlib.util.spec_from_file_location("kgen_entrypoint_docs", ROOT / "entrypoint" / "kgen_entrypoint.py")
    ep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ep)
    # what a single node and a multi-node run (NNODES=2: the run's secret) need set by hand
    problems = [p for env in ({}, {"NNODES": "2"}) for p in ep.load_config(env).problems]
    required = sorted({m.group(1) for p in problems for m in [re.match(r"([A-Z][A-Z0-9_]+) is not set", p)] if m})
    assert {"NNODES", "NPROC_PER_NODE", "MASTER_ADDR", "MASTER_PORT", "KGEN_SECRET_FILE"} <= set(required)
    help_text = " ".join(CliRunner().invoke(cli, ["entrypoint", "--help"]).stdout.split())
    for var in [*required, "NODE_RANK"]:
        assert var in help_text, var


def test_the_readme_pre_commit_snippet_warns_about_strict_as_docs_lint_does():
    assert "pass_filenames: false" in LINT_MD
    section = README[README.index("# .pre-commit-config.yaml") : README.index("## The entrypoint")]
    assert "--strict" in section and "pass_filenames: false" in section and "only the changed files" in section


# ---- the exit codes the docs show after `kgen status` -------------------------------------------------
HEADLINE_STATE = {
    "Running": "running",
    "Completing": "running",
    "Degraded": "degraded",
    "Re-forming": "restarting",
    "Restarting": "restarting",
    "Starting": "starting",
    "Pending": "pending",
    "Succeeded": "succeeded",
    "Failed": "failed",
    "Stopped": "stopped",
}


def status_examples(text: str):
    """(command line, headline state, exit codes the text claims) for every `$ kgen status ...` shown with
    its output in a fenced block: `[exit N]` after the output, or `# exit N` in the command's comment."""
    blocks, inside = [], None
    for line in text.splitlines():
        if line.startswith("```"):
            blocks, inside = (blocks + ["\n".join(inside)], None) if inside is not None else (blocks, [])
        elif inside is not None:
            inside.append(line)
    for block in blocks:
        for part in re.split(r"\n(?=\$ )", "\n" + block):
            lines = part.strip("\n").splitlines()
            if not lines or not lines[0].startswith("$ kgen status "):
                continue
            heads = [line.split(":")[0] for line in lines[1:] if line.split(":")[0] in HEADLINE_STATE]
            claimed = [int(a or b) for a, b in re.findall(r"\[exit (\d+)\]|# exit (\d+)", part)]
            if heads and claimed:
                yield lines[0], HEADLINE_STATE[heads[0]], claimed


def test_every_status_example_shows_the_exit_code_kgen_status_gives():
    """The README's bare-metal block showed `[exit 3]` after a running run's status (the codes before
    the one exit-code table); `kgen status` exits 0 unless the run failed or was stopped, `--exit-code` gives 3."""
    from kgen.runs.verdict import status_exit

    seen = 0
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for command, state, claimed in status_examples(path.read_text()):
            seen += 1
            expected = status_exit(state, "--exit-code" in command.split("#")[0])
            assert claimed[0] == expected, f"{path.name}: {command}: shows exit {claimed[0]} for a {state} run"
    assert seen >= 5


def test_kgens_own_failure_is_named_in_the_policies_and_the_docs():
    """Exit 70 (kgen's internal error) restarts a JobSet group (counted), fails a Job by a rule of
    its own, and every exit-code table says so."""
    assert jobset_action(rendered_jobset(), 70) == "RestartJobSet"
    restart_row = next(line for line in JOBSET_MD.splitlines() if "another node's script error 5" in line)
    assert "internal error 70" in restart_row
    entrypoint_md = (ROOT / "docs" / "entrypoint.md").read_text()
    design_md = (ROOT / "docs" / "design.md").read_text()
    assert "| 70 | kgen's own entrypoint failed on this node" in entrypoint_md
    assert "70 kgen's own entrypoint failed on this node" in design_md
    assert "70 kgen's own entrypoint failed" in CLUSTER_MD and "exit 70" in README
