"""The Python API's request types check every field when they are made, with the CLI's messages; a ``str``
where a sequence goes is read as the CLI reads one word (a command string split as a values file splits it;
one path; one --set), never character by character."""

from __future__ import annotations

import pathlib

import pytest
from click.testing import CliRunner

from kgen import sdk
from kgen.cli import cli
from kgen.errors import UsageError


def run_kgen(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_a_command_string_is_split_like_the_values_files_command_and_renders_the_same():
    as_string = sdk.RenderRequest(command="train.py --lr 3e-4")
    assert as_string.command == ("train.py", "--lr", "3e-4")
    as_list = sdk.RenderRequest(command=["train.py", "--lr", "3e-4"])
    assert sdk.render(as_string).text == sdk.render(as_list).text


def test_one_string_is_one_set_one_env_and_one_values_file(tmp_path):
    values = tmp_path / "prod.yaml"
    values.write_text("nodes: 3\n")
    request = sdk.RenderRequest(sets="gpus=0", env="A=b", values_files=str(values))
    assert (request.sets, request.env, request.values_files) == (("gpus=0",), ("A=b",), (str(values),))
    text = sdk.render(request).text
    assert "completions: 3" in text and "value: b" in text
    assert sdk.RenderRequest(values_files=values).values_files == (str(values),)  # a pathlib.Path too


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"command": "train.py | tee log"}, "RenderRequest.command: '|' in 'train.py | tee log' is a shell operator"),
        ({"command": ["train.py", "--lr", 3e-4]}, "RenderRequest.command: item 2 must be a string, got float 0.0003"),
        ({"sets": 4}, "RenderRequest.sets: must be a list of strings, got int 4"),
        ({"env": {"A": "b"}}, "RenderRequest.env: must be a list of strings"),
        ({"nodes": True}, "RenderRequest.nodes: must be an int, a string or None, got bool True"),
        ({"nodes": 2.5}, "RenderRequest.nodes: must be an int, a string or None, got float 2.5"),
        ({"lint": "no"}, "RenderRequest.lint: must be True or False"),
        ({"name": 7}, "RenderRequest.name: must be a string or None, got int 7"),
        ({"flags": {"replicas": "2"}}, "RenderRequest.flags: unknown flag key 'replicas'"),
    ],
)
def test_a_wrong_python_type_is_one_line_naming_the_field(fields, message):
    with pytest.raises(UsageError) as err:
        sdk.RenderRequest(**fields)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


# (request fields, the same on the command line): the message must be the CLI's, word for word
SAME_AS_CLI = [
    ({"nodes": "x"}, ["--nodes", "x"]),
    ({"gpus": "-"}, ["--gpus", "-"]),
    ({"kind": "pod"}, ["--kind", "pod"]),
    ({"sets": "nodes"}, ["--set", "nodes"]),
    ({"sets": ["nodse=4"]}, ["--set", "nodse=4"]),
    ({"sets": ["nodes=four"]}, ["--set", "nodes=four"]),
    ({"env": ["NOEQUALS"]}, ["--env", "NOEQUALS"]),
    ({"preset": "4x9"}, ["--preset", "4x9"]),
    ({"preset": " "}, ["--preset", " "]),
    ({"kubernetes_version": "2.0"}, ["--kubernetes-version", "2.0"]),
    ({"kubernetes_version": "1.99"}, ["--kubernetes-version", "1.99"]),
    ({"output_format": "xml"}, ["-o", "xml"]),
    ({"values_files": ""}, ["-f", ""]),
]


@pytest.mark.parametrize("fields, argv", SAME_AS_CLI, ids=[" ".join(a) for _, a in SAME_AS_CLI])
def test_construction_refuses_with_the_clis_message(fields, argv):
    with pytest.raises(UsageError) as err:
        sdk.RenderRequest(**fields)
    result = run_kgen("render", *argv)
    assert result.exit_code == 2 and result.stdout == ""
    said = result.stderr.strip().removeprefix("kgen: error: ")
    assert str(err.value) == said.split(" (to write a file")[0]  # -o xml: the CLI adds where files go


def test_stdin_named_without_its_text_is_refused_at_construction():
    with pytest.raises(UsageError, match="-f -: this command does not read values from stdin"):
        sdk.RenderRequest(values_files=["-"])
    with pytest.raises(UsageError, match="-f -: stdin can be read once"):
        sdk.RenderRequest(values_files=["-", "-"], stdin="nodes: 2\n")


def test_a_lint_path_string_is_one_path(tmp_path):
    manifest = tmp_path / "mod.yaml"
    manifest.write_text(sdk.render(sdk.RenderRequest()).text)
    request = sdk.LintRequest(str(manifest), skip="kg137", exclude="*.tmpl.yaml")
    assert (request.paths, request.skip, request.exclude) == ((str(manifest),), ("kg137",), ("*.tmpl.yaml",))
    assert sdk.lint(request).exit_code == 0
    assert sdk.LintRequest(pathlib.Path(manifest)).paths == (str(manifest),)


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"paths": ["a.yaml"], "skip": "KG9999"}, "--skip: unknown rule id KG9999"),
        ({"paths": ["a.yaml"], "unit": "folder"}, "--unit: must be one of dir, file, tree, got 'folder'"),
        ({"paths": ["a.yaml"], "engine": "kubeval"}, "--engine: unknown engine 'kubeval'"),
        ({"paths": ["a.yaml"], "kubernetes_version": "1.2"}, "--kubernetes-version: unsupported version '1.2'"),
        ({"paths": [3]}, "LintRequest.paths: item 0 must be a string, got int 3"),
        ({"paths": ["a.yaml"], "strict": 1}, "LintRequest.strict: must be True or False, got 1"),
        ({"paths": []}, "no input given"),
    ],
)
def test_lint_request_fields_are_checked_at_construction(fields, message):
    with pytest.raises(UsageError) as err:
        sdk.LintRequest(**fields)
    assert str(err.value).startswith(message)


def test_a_launch_command_string_is_split_and_wrong_types_name_the_field():
    request = sdk.LaunchRequest("run", "train.py --lr 3e-4", env="A=b", inject="kill:1@12")
    assert (request.command, request.env, request.inject) == (("train.py", "--lr", "3e-4"), ("A=b",), ("kill:1@12",))
    with pytest.raises(UsageError, match="LaunchRequest.command: '\\|' in 'a | b' is a shell operator"):
        sdk.LaunchRequest("run", "a | b")
    with pytest.raises(UsageError, match="LaunchRequest.port: must be an int, got str '29500'"):
        sdk.LaunchRequest("run", ["train.py"], port="29500")
    with pytest.raises(UsageError, match="LaunchRequest.command: must hold strings, got int 3"):
        sdk.LaunchRequest("run", ["train.py", 3])
