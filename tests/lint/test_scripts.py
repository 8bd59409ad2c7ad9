"""Scripts where they live: a script from a ConfigMap of the linted set that the
container runs (by path under a mount, a shebang file, ``source``, a subPath or ``items`` mount,
relative to workingDir or a ``cd``), and here-document bodies (``bash <<EOF``, ``cat <<EOF | bash``,
``cat > f <<EOF; bash f``) go through the same launch model as an inline ``bash -c``."""

from __future__ import annotations

import copy

import pytest
from lint_helpers import BASES, lint_docs, rule_ids

from kgen.launch.command import read_container
from kgen.lint.scripts import configmap_lookup, configmaps_by_name, files_of

BAD = "torchrun --standalone --nproc-per-node=8 train.py"  # KG119 in a 4-pod Job
GOOD = "exec torchrun --nnodes=4 --nproc-per-node=8 --node-rank=$(NODE_RANK) --master-addr=llama-0.llama train.py"


class _Doc:
    def __init__(self, name: str, data: dict, namespace: str = "ml") -> None:
        self.kind, self.api_version, self.name, self.namespace = "ConfigMap", "v1", name, namespace
        self.data = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


def _files(volumes: list, mounts: list, cms: list, working_dir: str = "", namespace: str = "ml"):
    container = {"name": "c", "volumeMounts": mounts}
    if working_dir:
        container["workingDir"] = working_dir
    lookup = configmap_lookup(configmaps_by_name(cms), namespace)
    return container, files_of({"volumes": volumes}, container, lookup)


CM = _Doc("scripts", {"run.sh": "#!/bin/bash\nset -e\ntorchrun --nnodes=2 train.py\n", "env.sh": "export A=1\n"})
VOL = [{"name": "s", "configMap": {"name": "scripts"}}]


@pytest.mark.parametrize(
    "command, mounts, working_dir",
    [
        (["bash", "/scripts/run.sh"], [{"name": "s", "mountPath": "/scripts"}], ""),
        (["sh", "-e", "/scripts/run.sh", "arg"], [{"name": "s", "mountPath": "/scripts"}], ""),
        (["/scripts/run.sh"], [{"name": "s", "mountPath": "/scripts"}], ""),  # the shebang runs bash
        (["bash", "run.sh"], [{"name": "s", "mountPath": "/scripts"}], "/scripts"),  # relative to workingDir
        (["bash", "-c", "cd /scripts && ./run.sh"], [{"name": "s", "mountPath": "/scripts"}], ""),
        (
            ["bash", "-c", "exec bash /opt/train.sh"],
            [{"name": "s", "mountPath": "/opt/train.sh", "subPath": "run.sh"}],
            "",
        ),
        (["bash", "-lc", "source /scripts/run.sh"], [{"name": "s", "mountPath": "/scripts"}], ""),
        (["tini", "--", "/scripts/run.sh"], [{"name": "s", "mountPath": "/scripts"}], ""),
    ],
)
def test_a_configmap_script_the_container_runs_is_read(command, mounts, working_dir):
    container, files = _files(VOL, mounts, [CM], working_dir)
    container["command"] = command
    scripted = read_container(container, files)
    [launch] = scripted.launches
    assert (launch.form, launch.flag("nnodes"), launch.script) == ("torchrun", "2", True)
    assert "ConfigMap 'scripts' key 'run.sh'" in launch.origin


def test_items_and_projected_volumes_map_keys_to_their_paths():
    vol = [
        {
            "name": "s",
            "projected": {
                "sources": [{"configMap": {"name": "scripts", "items": [{"key": "run.sh", "path": "bin/go"}]}}]
            },
        }
    ]
    container, files = _files(vol, [{"name": "s", "mountPath": "/etc/train"}], [CM])
    container["command"] = ["bash", "/etc/train/bin/go"]
    assert [la.flag("nnodes") for la in read_container(container, files).launches] == ["2"]
    container["command"] = ["bash", "/etc/train/run.sh"]  # not listed in items: not mounted
    assert read_container(container, files).launches == []


def test_a_script_the_manifest_does_not_hold_stays_unknown():
    no_shebang = _Doc("scripts", {"run.sh": "torchrun --nnodes=2 train.py\n"})
    for cms, command, namespace in [
        ([CM], ["bash", "/other/run.sh"], "ml"),  # another path
        ([CM], ["bash", "/scripts/run.sh"], "prod"),  # the ConfigMap of another namespace
        ([no_shebang], ["/scripts/run.sh"], "ml"),  # exec of a file without a shebang: not a shell script
    ]:
        container, files = _files(VOL, [{"name": "s", "mountPath": "/scripts"}], cms, namespace=namespace)
        container["command"] = command
        assert read_container(container, files).launches == []


@pytest.mark.parametrize(
    "script",
    [
        "bash <<EOF\ntorchrun --nnodes=2 train.py\nEOF",
        "bash -e <<'EOF'\n  torchrun --nnodes=2 train.py\nEOF",
        "cat <<EOF | bash\ntorchrun --nnodes=2 train.py\nEOF",
        "bash <<< 'torchrun --nnodes=2 train.py'",
        "cat > /tmp/go.sh <<'EOF'\ntorchrun --nnodes=2 train.py\nEOF\nbash /tmp/go.sh",
        "cat <<EOF > go.sh\ntorchrun --nnodes=2 \\\\\n  train.py\nEOF\nchmod +x go.sh && bash ./go.sh",
        "tee /w/go.sh <<-EOF >/dev/null\n\ttorchrun --nnodes=2 train.py\n\tEOF\nsh /w/go.sh",
    ],
)
def test_here_document_bodies_are_read(script):
    container = {"command": ["bash", "-c", script], "workingDir": "/w"}
    [launch] = [la for la in read_container(container).launches if la.training]
    assert (launch.form, launch.flag("nnodes"), launch.child) == ("torchrun", "2", ["python3", "train.py"])


def test_a_here_document_for_another_program_is_not_a_script():
    for script in ("python3 - <<EOF\nimport torch\nEOF", "cat <<EOF > /tmp/notes\ntorchrun x\nEOF"):
        assert read_container({"command": ["bash", "-c", script]}).launches == []


# --- through lint: the rules see the followed script ------------------------------------------------


def _job_running(script: str, command: list, **mount: str) -> list:
    docs = BASES["job"]()
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "llama-scripts", "namespace": "ml"},
        "data": {"train.sh": "#!/bin/bash\nset -euo pipefail\n" + script + "\n"},
    }
    pod = docs[1]["spec"]["template"]["spec"]
    c = pod["containers"][0]
    c["command"], c["args"] = command, []
    c["volumeMounts"].append({"name": "scripts", "mountPath": "/opt/scripts", **mount})
    pod["volumes"].append({"name": "scripts", "configMap": {"name": "llama-scripts", "defaultMode": 0o755}})
    return [cm, *docs]


def test_rules_read_a_configmap_script_and_its_near_miss_is_clean():
    bad = lint_docs(_job_running(BAD, ["bash", "/opt/scripts/train.sh"]))
    assert rule_ids(bad) == {"KG119"}, [f.text() for f in bad.findings]
    [finding] = bad.findings
    assert finding.path == "spec.template.spec.containers[0].command[1]"  # the item that runs the script
    good = lint_docs(_job_running(GOOD, ["bash", "/opt/scripts/train.sh"]), fail_on_warnings=True)
    assert good.findings == []


def test_a_broken_configmap_script_is_kg125_naming_the_configmap():
    got = lint_docs(_job_running("torchrun --nnodes=4 'train.py", ["/opt/scripts/train.sh"]))
    [finding] = [f for f in got.findings if f.rule_id == "KG125"]
    assert "ConfigMap 'llama-scripts' key 'train.sh'" in finding.message and "unterminated" in finding.message


def test_without_the_configmap_in_the_linted_set_the_script_is_unknown():
    docs = _job_running(BAD, ["bash", "/opt/scripts/train.sh"])[1:]
    assert "KG119" not in rule_ids(lint_docs(copy.deepcopy(docs)))
