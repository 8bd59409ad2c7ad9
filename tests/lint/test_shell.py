"""kgen.launch.shell against real bash: for every script of the table, bash itself prints the words
each simple command receives (NUL-separated, through command_not_found_handle and functions that
shadow the builtins), and the parser's words, expanded with the same parameters, must be equal.

One bash process runs the whole table (each script in a subshell), so the test costs ~50 ms."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from kgen.launch.shell import parse
from kgen.launch.shellexpand import expand
from kgen.launch.shelltree import Compound, ShellSyntaxError, Simple

PARAMS = {"HOME": "/home/u", "NNODES": "4", "HOST": "h-0.svc", "SPACED": "a  b", "EMPTY": "", "LEAD": " x y "}
ARGS = ["arg0", "torchrun", "--nnodes=2", "two words", ""]
# Names bash runs as builtins we do not shadow: left out on both sides.
UNRECORDED = {"set", "exit", ":", "shift", "return", "local", "unset", "trap", "test", "[", "wait", "true", "false",
              "declare"}  # fmt: skip

SCRIPTS = [
    "torchrun --nnodes=4 train.py",
    'torchrun --nnodes=$NNODES --master-addr="$HOST" train.py',
    "echo 'single $NNODES' \"double $NNODES\" mixed'a'\"b\"c",
    'echo a\\ b \\$NNODES \\\\ "\\$x \\" \\\\ \\a"',
    'echo $SPACED "$SPACED" x$LEAD"y" $EMPTY "$EMPTY" \'\'',
    'echo ${NNODES} ${UNSET:-default value} ${NNODES:+set} "${UNSET-x y}" ${EMPTY:-e}',
    "echo $'a\\tb\\n' $'it\\'s' $'\\x41\\101'",
    "cd /app && exec torchrun \\\n  --nnodes=4 \\\n  --nproc_per_node=8 train.py",
    "echo one; echo two # a comment\necho three #another\n# only a comment\necho 'not # a comment' a#b",
    "torchrun --rdzv-id=$(date +%s) --node-rank=`hostname` t.py",
    'echo "$(echo inner "quoted arg")" $(echo a; echo b)',
    "export A=1 B=2; NCCL_DEBUG=INFO torchrun t.py",
    'echo "$@"; echo $@; echo "$*"; echo $1 "$2" $0; echo "x$@y"',
    'exec "$@"',
    "( cd /w && echo in subshell ); { echo in group; }",
    "if test -n x; then echo yes; fi\nfor i in a; do echo loop; done\nwhile false; do :; done",
    "case $NNODES in 4) echo four;; esac",
    "cat <<EOF\nbody $NNODES\nEOF\necho after heredoc\ncat <<-'END'\n\tquoted $x\n\tEND\necho done",
    "echo redirect >/dev/null 2>&1 <<< here; echo in 2>/dev/null",
    "bash -c 'echo nested \"$0\" $1' zero one",
    "echo *.py ~/x ~ '~' x~ \"~\"",
    "[[ -n $NNODES && $HOST == h* ]] && echo tested",
    "x=$(echo assigned) y=(1 2 3); echo after",
    "echo \"a\nb\" 'c\nd'",
    'echo $"locale" "\\`" \'\\n\'',
    # brace expansion (bash's order; quoted braces, {}, {a} and ${ stay)
    "echo {a,b}c x{,y} {1..3} {3..1} {01..03} {-1..1} {a..e..2} a{b,c{d,e}}f {x,y}{1..2} a{b}c{d,e}",
    "echo '{a,b}' \"{a,b}\" {a} {} ${NNODES}{x,y} {a','b} --gpus={0,1}",
    "mkdir -p /out/{ckpt,logs}/{a,b} && echo {{a,b},c}",
    # arrays given to a declaration (sbatch scripts: `declare -a TORCHRUN_ARGS=(...)`), comments inside ( )
    "declare -a A=(\n  --x=1 # a comment )\n  --y=2\n) B=3; echo after $NNODES",
    "echo $(echo in # a comment )\n) after",
]


def _bash_words(scripts: list[str]) -> list[list[list[str]]]:
    prelude = "set -f\nexec 3>&1 1>/dev/null\n" + "".join(f"{k}={_q(v)}\n" for k, v in PARAMS.items())
    prelude += "__rec() { builtin printf '%s\\0' \"$@\" >&3; builtin printf '\\1' >&3; }\n"
    prelude += 'command_not_found_handle() { __rec "$@"; return 0; }\n'
    for name in ("echo", "printf", "cd", "exec", "export", "cat", "tee"):
        prelude += f'{name}() {{ __rec {name} "$@"; }}\n'
    body = "".join(f"( {s}\n) 3>&3\nbuiltin printf '\\2' >&3\n" for s in scripts)
    out = subprocess.run(
        ["bash", "-c", prelude + body, *ARGS],
        capture_output=True,
        env={"PATH": "/nonexistent", "HOME": PARAMS["HOME"]},
        timeout=30,
        executable=shutil.which("bash"),
    ).stdout.decode()
    result = []
    for chunk in out.split("\2")[: len(scripts)]:
        cmds = []
        for rec in chunk.split("\1")[:-1]:
            words = rec.split("\0")[:-1]
            if words and words[0] not in UNRECORDED:
                cmds.append(words)
        result.append(cmds)
    return result


def _q(value: str) -> str:
    return "'" + value.replace("'", "'\\''") + "'"


def _parser_words(script: str) -> list[list[str]]:
    out = []
    for cmd in parse(script).simple_commands():
        fields: list[str] = []
        for w in cmd.words:
            got = expand(w, PARAMS, ARGS, cmdsub=lambda p: "/dev/fd/63" if p.kind == "procsub" else "")
            assert got is not None, w.raw
            fields.extend(got)
        if fields and fields[0] not in UNRECORDED:
            out.append(fields)
    return out


@pytest.fixture(scope="module")
def bash_table():
    if shutil.which("bash") is None:
        pytest.fail("bash is required for the shell parser tests")
    return dict(zip(SCRIPTS, _bash_words(SCRIPTS), strict=True))


@pytest.mark.parametrize("script", SCRIPTS)
def test_words_match_bash(script, bash_table):
    want = bash_table[script]
    assert sorted(map(tuple, _parser_words(script))) == sorted(map(tuple, want))


def test_structure_of_and_or_lists_and_pipelines():
    script = parse("torchrun t.py || echo failed; a && b | c; ! d")
    seq = script.body
    first, second, third = seq.items
    assert [op for op, _ in first.items] == ["", "||"]
    assert [op for op, _ in second.items] == ["", "&&"] and len(second.items[1][1].commands) == 2
    assert third.items[0][1].negated


def test_compound_commands_are_kept():
    script = parse("if a; then b; elif c; then d; else e; fi\nwhile f; do g; done\nh() { i; }")
    kinds = [ao.items[0][1].commands[0].kind for ao in script.body.items]
    assert kinds == ["if", "while", "function"]
    node = script.body.items[0].items[0][1].commands[0]
    assert isinstance(node, Compound) and len(node.bodies) == 5
    assert [c.argv[0] for c in script.simple_commands()] == list("abcdefgi")  # h is defined, not run


def test_lines_and_raw_text():
    script = parse('echo a\n\ntorchrun \\\n --x=1 "$Y"')
    cmds = list(script.simple_commands())
    assert [c.line for c in cmds] == [1, 3]
    assert isinstance(cmds[1], Simple) and [w.raw for w in cmds[1].words] == ["torchrun", "--x=1", '"$Y"']
    assert [w.text for w in cmds[1].words] == ["torchrun", "--x=1", "$Y"]


@pytest.mark.parametrize(
    "script",
    [
        "echo 'open",
        'echo "open',
        "echo $(open",
        "echo `open",
        "if a; then b",
        "for x in 1; do y",
        "a &&",
        "a |",
        "( a",
        "{ a; ",
    ],
)
def test_syntax_errors_are_refused_like_bash(script):
    with pytest.raises(ShellSyntaxError):
        parse(script)
    rc = subprocess.run(["bash", "-n", "-c", script], capture_output=True, timeout=10).returncode
    assert rc != 0


def test_deep_nesting_is_refused_not_a_crash():
    with pytest.raises(ShellSyntaxError):
        parse("echo " + "$(" * 200 + ")" * 200)


def test_process_substitution_is_one_word_with_a_parsed_script():
    [inner, outer] = list(parse("diff <(sort a) >(tee b) c").simple_commands())[1:]
    assert inner.argv == ["tee", "b"] and outer.argv == ["diff", "<(sort a)", ">(tee b)", "c"]


def test_hostile_scripts_are_refused_or_read_quickly_never_a_crash():
    import time

    for script in ("( " * 5000 + "a" + " )" * 5000, "{ " * 3000 + "a; " + "}; " * 3000, "if a; then " * 2000):
        with pytest.raises(ShellSyntaxError):
            parse(script)
    big = "".join(f"echo {i} && torchrun --x={i} || true\n" for i in range(20000))  # ~0.8 MB
    start = time.perf_counter()
    assert sum(1 for _ in parse(big).simple_commands()) == 60000
    assert time.perf_counter() - start < 20  # linear: ~1 s on a busy 2-core machine


@pytest.mark.parametrize(
    "words,program",
    [
        (["-np", "2", "python", "t.py"], "python"),
        (["--allow-run-as-root", "--oversubscribe", "python", "t.py"], "python"),  # options without a value
        (["-mca", "btl", "^openib", "-x", "NCCL_DEBUG=INFO", "--bind-to", "none", "python", "t.py"], "python"),
        (["-genv", "OMP_NUM_THREADS", "4", "-n=8", "./a.out"], "./a.out"),
        (["-np", "2", "--", "-weird-name"], "-weird-name"),
        (["-np", "2"], None),
    ],
)
def test_mpirun_options_are_skipped_to_the_program_it_starts(words, program):
    from kgen.launch.launchers import mpi_program

    i = mpi_program(words)
    assert (words[i] if i < len(words) else None) == program
