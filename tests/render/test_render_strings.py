"""Every user string lands exactly in its field and nowhere else, as kubectl (YAML 1.1) reads it."""

import re

import pytest
import yaml
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from kgen import RenderRequest
from kgen.errors import RenderError
from kgen.lint.rules_scripts import _SHELL_VARIABLE
from kgen.render.pipeline import manifest_text

HOSTILE = [
    "on",
    "off",
    "yes",
    "no",
    "y",
    "n",
    "Y",
    "N",
    "ON",
    "Off",
    "true",
    "False",
    "null",
    "~",
    "",
    "010",
    "0x1F",
    "0o17",
    "1e3",
    "1_000",
    "1:20",
    "-.inf",
    ".NaN",
    "2001-12-14",
    "=",
    "<<",
    "a: b",
    "key: value\nother: x",
    "#not a comment",
    "value # trailing",
    "{{ spec.name }}",
    "{% raw %}",
    "---",
    "...",
    "- item",
    "  leading spaces",
    "trailing spaces  ",
    "tab\there",
    'say "hi"',
    "it's",
    "back\\slash",
    "line1\nline2\n",
    "\ttab-first",
    "@at",
    "`tick`",
    "*alias",
    "&anchor",
    "!tag",
    "%percent",
    "|",
    ">",
    "? q",
    "[a, b]",
    "{a: b}",
    "ünïcødé ✓",
    "\u2028sep",
    "a\r\nb",
    "\x07bell",
    # Kubernetes expands $(VAR) in env values, command and args, and turns $$ into $:
    "$(HOME)",
    "$(MASTER_ADDR)",
    "$(NNODES)-nodes",
    "$$",
    "$$(MASTER_ADDR)",
    "a$",
    "$HOME/bin",
    "${HOME}/bin",
]


def parsed(text):
    kubectl_like = [d for d in yaml.safe_load_all(text) if d]  # YAML 1.1, like kubectl's decoder
    yaml12 = [d for d in YAML(typ="safe", pure=True).load_all(text) if d]
    assert kubectl_like == yaml12
    return {d["kind"]: d for d in kubectl_like}


def container(docs):
    return docs["Job"]["spec"]["template"]["spec"]["containers"][0]


def as_seen(value, container):
    """What the process sees: Kubernetes' $(VAR) expansion over every variable of the container
    ($$ -> $, $(NAME) -> NAME's value when defined, anything else as is)."""
    defined = {e["name"]: f"<{e['name']}>" for e in container["env"]}

    def sub(m):
        return "$" if m.group(0) == "$$" else defined.get(m.group(1), m.group(0))

    return re.sub(r"\$\$|\$\(([^)]*)\)", sub, value)


def render_with(values_text=None, tmp_path=None, **kw):
    files = []
    if values_text is not None:
        p = tmp_path / "v.yaml"
        p.write_text(values_text)
        files = [str(p)]
    return manifest_text(RenderRequest(preset="4x8", values_files=files, **kw))


@pytest.mark.parametrize("value", ["$HOME", "${HOME}"])
def test_an_env_value_that_is_only_a_shell_variable_is_refused_naming_the_field(value):
    """Kubernetes never expands $HOME (only $(HOME)): the program would get the text, so render's self-check
    refuses it (KG130) and names the field, rather than printing a manifest that passes the placeholder on."""
    with pytest.raises(RenderError, match=r"KG130: MY_VAR is the text .*use \$\(VAR\).*env\[\d+\]\.value"):
        manifest_text(RenderRequest(preset="4x8", env=[f"MY_VAR={value}"]))


@pytest.mark.parametrize("value", HOSTILE)
def test_env_value_round_trips_exactly(value):
    text = manifest_text(RenderRequest(preset="4x8", env=[f"MY_VAR={value}"]))
    env = {e["name"]: e["value"] for e in container(parsed(text))["env"] if "value" in e}
    assert isinstance(env["MY_VAR"], str)
    assert as_seen(env["MY_VAR"], container(parsed(text))) == value


@pytest.mark.parametrize("value", HOSTILE)
def test_command_argument_round_trips_exactly(value):
    text = manifest_text(RenderRequest(preset="4x8", command=["train.py", value, "--after"]))
    c = container(parsed(text))
    assert [as_seen(a, c) for a in c["args"]] == ["--", "train.py", value, "--after"]


def test_values_file_strings_stay_strings(tmp_path):
    values = 'env:\n  A: on\n  B: 010\n  C: 1e3\n  D: "yes"\n  E: null\n  F: y\nlabels:\n  flag: "true"\n'
    docs = parsed(render_with(values, tmp_path))
    env = {e["name"]: e.get("value") for e in container(docs)["env"]}
    assert (env["A"], env["B"], env["C"], env["D"], env["E"], env["F"]) == ("on", "010", "1e3", "yes", "null", "y")
    assert docs["Job"]["metadata"]["labels"]["flag"] == "true"


@pytest.mark.parametrize("image", ["registry:5000/team/img:1.0", "img@sha256:" + "a" * 64, "on"])
def test_image_lands_in_image_only(image):
    text = manifest_text(RenderRequest(preset="4x8", flags={"image": image}))
    docs = parsed(text)
    assert container(docs)["image"] == image


def test_hostile_label_value_is_rejected_or_exact(tmp_path):
    docs = parsed(render_with("labels:\n  team: 'no'\n", tmp_path))
    assert docs["Service"]["metadata"]["labels"]["team"] == "no"


def test_newline_in_a_value_cannot_add_a_key():
    text = manifest_text(RenderRequest(preset="4x8", env=["X=a\nprivileged: true\nkind: Pod"]))
    docs = parsed(text)
    assert set(docs) == {"ConfigMap", "Service", "NetworkPolicy", "Job"}
    assert container(docs)["securityContext"]["privileged"] is False
    assert "privileged: true\nkind: Pod" in [e.get("value", "") for e in container(docs)["env"]][-1]


@settings(max_examples=60, deadline=None)
@given(
    value=st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40)
    | st.text(alphabet="$()NODES_", max_size=12),
    arg=st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40)
    | st.text(alphabet="$()NODES_", max_size=12),
)
def test_property_any_string_round_trips(value, arg):
    # an env value that is only a shell variable ($NODES) is refused by the self-check (KG130), tested above
    assume(not _SHELL_VARIABLE.match(value))
    text = manifest_text(
        RenderRequest(preset="4x8", env=[f"P={value}"], command=["train.py", arg]),
    )
    docs = parsed(text)
    c = container(docs)
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert as_seen(env["P"], c) == value
    assert [as_seen(a, c) for a in c["args"]] == ["--", "train.py", arg]
