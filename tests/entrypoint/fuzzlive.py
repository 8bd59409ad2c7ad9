"""The liveness channel against arbitrary input: one harness, two campaigns.

`tests/entrypoint/test_fuzz.py` runs a short campaign in CI; `bench/fuzz_liveness` a long one (100,000+
inputs). Each target drives the entrypoint's real code over real sockets (socket.socketpair): nothing is
stood in for. A target raises AssertionError when an invariant breaks; any other exception escaping it is a
finding too (the code under test let something through).

  decode    _decode(line): a message that passed the gate (only its fields, each of its type) or
            ProtocolError, nothing else
  stranger  Hub.read of a connection that has not proven membership, the proof step included: nothing
            escapes, the connection ends (or waits for the rest of its line), the hub's state does not move
  member    Hub.read of a joined node's authenticated connection (a member that misbehaves: lines sealed
            with its session key): nothing escapes; a line the gate refuses ends that connection, and only it
  spoke     a node's Spoke reading node 0's connection, lines sealed with node 0's key or not: nothing
            escapes; a refused line ends the link ("lost"), nothing starts
  client    handshake() of a node against a fake node 0 (arbitrary challenge and answer lines): only
            ProtocolError, Denied or OSError (never a traceback, never a session)

Inputs (`lines()`): arbitrary bytes, arbitrary JSON trees, deep nesting, and protocol messages with
arbitrary values in their fields.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import secrets
import select
import selectors
import socket
import sys
import tempfile
from pathlib import Path

from hypothesis import strategies as st

ENTRYPOINT = Path(__file__).resolve().parents[2] / "entrypoint" / "kgen_entrypoint.py"
_spec = importlib.util.spec_from_file_location("kgen_entrypoint_fuzz", ENTRYPOINT)
ep = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ep)
ep.log = lambda msg: None  # millions of refusals: the log's own escaping is tested on real processes

_DIR = tempfile.mkdtemp(prefix="kgen-fuzz-")
SECRET_FILE = os.path.join(_DIR, "secret")
with open(os.open(SECRET_FILE, os.O_WRONLY | os.O_CREAT, 0o600), "w") as _fh:
    _fh.write(secrets.token_hex(32) + "\n")
ENV = {
    "NNODES": "3",
    "NPROC_PER_NODE": "1",
    "MASTER_ADDR": "127.0.0.1",
    "MASTER_PORT": "29500",
    "KGEN_SECRET_FILE": SECRET_FILE,
    "KGEN_JOB_NAME": "fuzz",
    "KGEN_RUN_ID": "r",
}
CFG0 = ep.load_config({**ENV, "NODE_RANK": "0"})
CFG1 = ep.load_config({**ENV, "NODE_RANK": "1"})
assert not CFG0.problems and not CFG1.problems, CFG0.problems + CFG1.problems
SECRET = CFG0.secret

# ---- inputs -------------------------------------------------------------------------------------------
_hostile = st.sampled_from(
    ["\ud800", "\udfff\ud800", "\x1b[2J\x1b]0;x\x07", "[kgen node 0] FAIL-STOP: x", "a\u2028b", "\u202e", "a\nb", ""]
)
_leaf = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(1 << 70), max_value=1 << 70)
    | st.floats()
    | st.text(max_size=40)
    | _hostile
)
trees = st.recursive(
    _leaf,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=25,
)
_nonce = st.text("0123456789abcdef", min_size=32, max_size=32)
_fieldish = (
    _hostile | trees | _nonce | st.text("0123456789abcdefABCDEF", min_size=60, max_size=68) | st.integers(-2, 300)
)
_small = st.integers(-1, 8)
_text = st.text(max_size=30)
VALID = {  # a right value for every field name of the protocol, so that one wrong field is reached
    "v": st.just(ep.PROTOCOL) | st.integers(0, 5),
    "n": _nonce,
    "mac": st.text("0123456789abcdef", min_size=64, max_size=64),
    "reason": _text,
    "rank": _small,
    "id": st.just("fuzz-r") | _text,
    "nnodes": st.just(3) | _small,
    "nproc": st.just(1) | _small,
    "host": _text,
    "last": _small,
    "hb": st.floats(0.05, 60),
    "code": st.sampled_from([0, 2, 5, 76]) | st.integers(0, 300),
    "joined": st.lists(_small, max_size=4),
    "gen": _small,
    "state": _text,
    "blame": st.none() | _small,
    "rc": st.integers(0, 256),
    "internal": _text,
    "nodes": st.lists(_small, max_size=4),
    "pid": st.integers(0, 1 << 22),  # the hang watchdog's `stacks`
    "frames": st.lists(st.tuples(_text, st.integers(0, 9999), _text).map(list), max_size=4),
    "what": _text,
    "where": _text,
    "why": _text,
    "step": _text,
}
assert set(VALID) == {name for fields in ep.FIELDS.values() for name in fields}, "a field without a right value"


@st.composite
def messages(draw) -> dict:
    """A protocol message of a random type (or an unknown one): most fields right, some missing or wrong
    (arbitrary JSON, hostile strings), and maybe fields no message has."""
    t = draw(st.sampled_from(sorted(ep.FIELDS)) | st.sampled_from(sorted(ep.FIELDS)) | st.text(max_size=10) | trees)
    msg = {"t": t}
    for name in sorted(ep.FIELDS.get(t, {}) if isinstance(t, str) else {}):
        how = draw(st.sampled_from(["right", "right", "right", "wrong", "missing"]))
        if how != "missing":
            msg[name] = draw(VALID[name] if how == "right" else _fieldish)
    msg.update(draw(st.dictionaries(st.text(max_size=6), trees, max_size=2)))
    return msg


def _dumps(value, ascii_only: bool) -> bytes:
    return json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")


LONGEST = 66000  # bytes of a line: just over the longest line a node reads (LINE_MAX)


@st.composite
def lines(draw) -> bytes:
    """One line's bytes (a newline inside makes it several lines, which is input too)."""
    kind = draw(st.sampled_from(["bytes", "tree", "message", "deep", "long"]))
    if kind == "bytes":
        return draw(st.binary(max_size=1200))
    if kind == "deep":
        n = draw(st.integers(1, 5000) | st.integers(900, 1100) | st.sampled_from([999, 1000, 1023, 1024, 65000]))
        opener = draw(st.sampled_from([b"[", b"{", b'{"t":', b'{"t":"auth","v":']))
        return (opener * n + draw(st.sampled_from([b"", b"]" * n, b"}" * n])))[:LONGEST]
    if kind == "long":
        return draw(st.sampled_from([b"x", b"[", b'"', b"\\"])) * draw(st.integers(900, LONGEST))
    value = draw(trees if kind == "tree" else messages())
    return _dumps(value, draw(st.booleans()))


# ---- helpers ------------------------------------------------------------------------------------------
def raw_seal(session, body: bytes) -> bytes:
    """Any bytes as an authenticated line of `session` (what a member with the key can send)."""
    tag = ep._mac(session.key, f"{session.tx_dir} {session.tx_seq} ".encode() + body)
    session.tx_seq += 1
    return tag.encode() + b" " + body + b"\n"


def _gate(body: bytes) -> dict | None:
    try:
        return ep._decode(body, "fuzz")
    except ep.ProtocolError:
        return None


@contextlib.contextmanager
def real_stack():
    """Python's default recursion limit around a target: hypothesis raises it while it runs a test, and
    the issue's first crash (json.loads of 1,023 nested brackets) only happens at the real one."""
    saved = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    try:
        yield
    finally:
        sys.setrecursionlimit(saved)


def pump(handle, conn) -> None:
    """Call `handle` as the event loop would: while the connection is open and has bytes to read."""
    while not conn.closed and select.select([conn.sock], [], [], 0)[0]:
        handle()


def feed(sock, data: bytes, handle, conn) -> None:
    """Send `data` from the peer's end, handling what arrives as it arrives (a reader that stops early,
    as node 0 does with a stranger after 1 KiB, never blocks the sender)."""
    sock.setblocking(False)
    view = memoryview(data)
    while view and not conn.closed:
        try:
            view = view[sock.send(view[:65536]) :]
        except BlockingIOError:
            pass
        except OSError:
            break  # the reader closed its end: the rest cannot matter
        pump(handle, conn)
    pump(handle, conn)


def _hub_state(hub) -> tuple:
    return (
        hub.state,
        hub.gen,
        hub.lost,
        hub.script_fail,
        hub.stop_host,
        sorted(hub.peers),
        dict(hub.lasts),
        dict(hub.dropped),
        sorted(hub.told),
        len(hub.members),
    )


# ---- targets ------------------------------------------------------------------------------------------
def decode(line: bytes) -> None:
    with real_stack():
        msg = _gate(line.split(b"\n", 1)[0])
    if msg is not None:
        fields = ep.FIELDS[msg["t"]]
        assert set(msg) == {"t", *fields}, msg
        for name, (check, default) in fields.items():
            assert check(msg[name]) or msg[name] == default, (name, msg)


def stranger(line: bytes) -> None:
    hub = ep.Hub(CFG0, selectors.DefaultSelector())
    a, b = socket.socketpair()
    try:
        conn = ep.Conn(a, ("fuzz", 1))
        conn.nonce = ep.new_nonce()
        hub.unproven[conn] = None
        hub.sel.register(a, selectors.EVENT_READ, ("conn", conn))
        before = _hub_state(hub)
        with real_stack():
            feed(b, line + b"\n", lambda: hub.read(conn), conn)
        assert _hub_state(hub) == before, (_hub_state(hub), before)
        assert conn.closed or (conn in hub.unproven and conn.session is None), "a stranger got past the proof"
        assert not hub.members and not hub.peers
    finally:
        b.close()
        hub.close()
        hub.sel.close()


def _joined(hub, rank: int = 1):
    """A node that proved membership and said hello on a real connection: (its Conn, its client session)."""
    a, b = socket.socketpair()
    conn = ep.Conn(a, ("member", rank))
    conn.nonce = ep.new_nonce()
    hub.unproven[conn] = None
    hub.sel.register(a, selectors.EVENT_READ, ("conn", conn))
    nc = ep.new_nonce()
    client = ep.Session(SECRET, conn.nonce, nc, "client")
    auth = {"t": "auth", "v": ep.PROTOCOL, "n": nc, "mac": ep.membership_proof(SECRET, conn.nonce, nc)}
    hello = {"t": "hello", "v": 3, "rank": rank, "id": CFG0.rdzv_id, "nnodes": 3, "nproc": 1, "host": "h", "last": -1}
    b.sendall(ep.plain_line(auth) + client.seal(hello))
    hub.read(conn)
    assert hub.peers.get(rank) is conn, "the member's own handshake failed"
    return conn, client, b


def member(line: bytes) -> None:
    hub = ep.Hub(CFG0, selectors.DefaultSelector())
    socks = []
    try:
        conn, client, b = _joined(hub, 1)
        other, _, b2 = _joined(hub, 2)
        socks += [b, b2]
        hub.start(0)  # training: a refused line is then a lost node, the strictest case
        before = _hub_state(hub)
        bodies = line.split(b"\n")
        with real_stack():
            feed(b, b"".join(raw_seal(client, body) for body in bodies), lambda: hub.read(conn), conn)
        if any(_gate(body) is None for body in bodies):  # a line the gate refuses ends this connection
            assert conn.closed and 1 not in hub.peers, "a refused line did not end its connection"
            assert hub.peers.get(2) is other and not other.closed, "another node's connection was touched"
        if _gate(bodies[0]) is None:  # refused first: nothing it said was acted on, only its loss counts
            assert (hub.state, hub.gen, hub.script_fail, hub.stop_host) == (before[0], before[1], *before[3:5])
            assert hub.lost is not None and "not valid on its connection" in hub.lost, hub.lost
    finally:
        for s in socks:
            s.close()
        hub.close()
        hub.sel.close()


def spoke(line: bytes, sealed: bool) -> None:
    a, b = socket.socketpair()
    sel = selectors.DefaultSelector()
    try:
        ns, nc = ep.new_nonce(), ep.new_nonce()
        node0 = ep.Session(SECRET, ns, nc, "server")
        conn = ep.Conn(a)
        conn.session, conn.limit = ep.Session(SECRET, ns, nc, "client"), ep.LINE_MAX
        link = ep.Spoke(CFG1, sel, conn)
        bodies = line.split(b"\n")
        data = b"".join(raw_seal(node0, body) for body in bodies) if sealed else line + b"\n"
        with real_stack():
            feed(b, data, lambda: link.on_event(("conn", conn)), conn)
        if not sealed or any(_gate(body) is None for body in bodies):  # a refused line ends the link
            assert conn.closed and link.verdict is not None, link.verdict
        if not sealed or _gate(bodies[0]) is None:  # refused first: nothing acted on
            assert link.verdict[0] == "lost" and link.start_gen is None and not link.master_done, link.verdict
    finally:
        b.close()
        a.close()
        sel.close()


def client(challenge: bytes, answer: bytes) -> None:
    a, b = socket.socketpair()
    try:
        a.settimeout(5)
        b.sendall(challenge + b"\n" + answer + b"\n")
        b.shutdown(socket.SHUT_WR)  # then EOF: a line without its end costs no wait
        try:
            with real_stack():
                ep.handshake(CFG1, a, {"t": "hello", "v": 3, "rank": 1})
        except (ep.ProtocolError, ep.Denied, OSError):
            return
        raise AssertionError("a fake node 0 without the secret completed the handshake")
    finally:
        a.close()
        b.close()


def challenges() -> st.SearchStrategy[bytes]:
    """Mostly well-formed challenges (so the answer is read), some arbitrary lines."""
    good = _nonce.map(lambda n: ep.plain_line({"t": "challenge", "v": ep.PROTOCOL, "n": n}).rstrip(b"\n"))
    return st.one_of(good, good, lines())
