"""No input from anyone reaches past the liveness channel's gate. A short property-based campaign
over arbitrary byte lines and JSON trees against the decoder, the proof step, node 0's and a node's
message handling and a node's handshake (the targets and invariants: fuzzlive.py). The long campaign
(100,000+ inputs) is `bench/fuzz_liveness`; the two crashes of the issue replayed against a running group
are in test_hostile_lines.py."""

from __future__ import annotations

import fuzzlive as F
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

CI = settings(max_examples=300, deadline=None, database=None, suppress_health_check=list(HealthCheck))


@CI
@given(F.lines())
def test_decode_lets_through_only_valid_messages(line):
    F.decode(line)


@CI
@given(F.lines())
def test_a_strangers_line_never_moves_node0(line):
    F.stranger(line)


@CI
@given(F.lines())
def test_a_members_bad_line_ends_its_own_connection_only(line):
    F.member(line)


@CI
@given(F.lines(), st.booleans())
def test_node0s_lines_never_crash_a_node(line, sealed):
    F.spoke(line, sealed)


@CI
@given(F.challenges(), F.lines())
def test_a_fake_node0_never_completes_a_handshake(challenge, answer):
    F.client(challenge, answer)


@pytest.mark.parametrize(
    "line",
    [
        b"[" * 1023,  # the issue's first crash: RecursionError in json.loads (1 KiB before the proof)
        b'{"t":"auth","v":3,"n":"' + b"0" * 32 + b'","mac":"\\ud800"}',  # the second: UnicodeEncodeError
        b'{"t":"auth","v":"\\u001b[2J","n":"' + b"0" * 32 + b'","mac":"' + b"f" * 64 + b'"}',  # ESC in a field
        b'{"t":"auth","v":3,"n":"' + b"A" * 32 + b'","mac":"' + b"f" * 64 + b'"}',  # upper-case hex
        b'{"t":"auth","v":true,"n":"' + b"0" * 32 + b'","mac":"' + b"f" * 64 + b'"}',  # true is no version
        b'{"t":"hello","rank":1e400}',
        b'{"t":{"t":"auth"}}',
        b"\xff\xfe[\x00",
    ],
)
def test_the_issues_lines_and_their_cousins(line):
    for target in (F.decode, F.stranger, F.member):
        target(line)
    F.spoke(line, sealed=True)
    F.spoke(line, sealed=False)
    assert F._gate(line) is None


def test_the_gate_keeps_what_the_protocol_needs():
    hb = F.ep._decode(b'{"t":"hb","extra":[1,2]}', "x")
    assert hb == {"t": "hb"}  # unknown fields are dropped, not passed on
    end = F.ep._decode(b'{"t":"end","code":5,"reason":"node 1 silent","blame":1}', "x")
    assert end == {"t": "end", "code": 5, "reason": "node 1 silent", "blame": 1}
    assert F.ep._decode(b'{"t":"end","code":5}', "x")["blame"] is None  # optional fields get their default
    for bad in (b'{"t":"end","code":0}', b'{"t":"end","code":true}', b'{"t":"fail","rc":1,"internal":"a\\nb"}'):
        with pytest.raises(F.ep.ProtocolError):
            F.ep._decode(bad, "x")
    in_string = b'{"t":"leave","reason":"' + b"[{" * 2000 + b'"}'  # brackets in a string are no nesting
    assert F.ep._decode(in_string, "x")["reason"] == "[{" * 2000
