"""The liveness channel: authenticated newline-delimited JSON over TCP (Conn, Session)."""

from __future__ import annotations

import hmac
import json
import os
import secrets
import selectors
import signal
import socket
import time

from .config import Config
from .header import HANDSHAKE_TIMEOUT, LINE_MAX, MAX_DEPTH, PREAUTH_LINE_MAX, PROTOCOL, shown
from .reform import FIELDS, MSG_REJECT, MSG_WELCOME, REQUIRED

# --------------------------------------------------------------------------------------------
# Liveness channel: newline-delimited JSON over TCP, node 0 is the hub, every connection proves
# that it belongs to the run before anything it says counts (docs/entrypoint.md, "Wire format").
#
#   node 0 -> process, on accept:   {"t":"challenge","v":3,"n":"<ns: 32 hex>"}
#   process -> node 0:              {"t":"auth","v":3,"n":"<nc: 32 hex>","mac":"<HMAC(S, 'kgen/3 auth ns nc')>"}
#   then every line, both ways:     <64 hex: HMAC(K, '<dir> <seq> ' + json)> <json>
#                                   K = HMAC(S, 'kgen/3 session ns nc'), dir c (to node 0) / s (from node 0),
#                                   seq counts the lines of that direction from 0
#   node 0 -> a failed proof:       {"t":"denied","reason":"..."}    (then it closes)
#
# S is the run's secret (KGEN_SECRET_FILE), HMAC is HMAC-SHA256 in hex. The secret never crosses the
# network; both nonces are fresh per connection, so neither a recorded proof nor a recorded line is
# accepted again; a line out of order, dropped, replayed or changed fails its MAC and ends the
# connection. Node 0 proves itself by its first line (only a holder of S can compute K).
# --------------------------------------------------------------------------------------------

MSG_CHALLENGE = "challenge"  # node 0 -> process (not authenticated): its nonce
MSG_AUTH = "auth"  # process -> node 0 (not authenticated): its nonce and the proof
MSG_DENIED = "denied"  # node 0 -> process (not authenticated): the proof was wrong; closes


def _mac(key: bytes, text: str | bytes) -> str:
    return hmac.new(key, text.encode() if isinstance(text, str) else text, "sha256").hexdigest()


def membership_proof(secret: bytes, ns: str, nc: str) -> str:
    """The answer to node 0's challenge `ns`, bound to the prover's own nonce `nc`."""
    return _mac(secret, f"kgen/{PROTOCOL} auth {ns} {nc}")


def new_nonce() -> str:
    return secrets.token_hex(16)


class ProtocolError(Exception):
    """A line that does not belong on this connection: too long, not kgen's protocol, or a MAC that
    does not verify (an injected, replayed, reordered or corrupted message)."""


class Session:
    """An authenticated connection: a key of its own (from the secret and both nonces), a MAC and a
    sequence number on every line, per direction."""

    def __init__(self, secret: bytes, ns: str, nc: str, side: str) -> None:
        self.key = bytes.fromhex(_mac(secret, f"kgen/{PROTOCOL} session {ns} {nc}"))
        self.tx_dir, self.rx_dir = ("c", "s") if side == "client" else ("s", "c")
        self.tx_seq = self.rx_seq = 0

    def seal(self, msg: dict) -> bytes:
        body = _encode(msg)
        tag = _mac(self.key, f"{self.tx_dir} {self.tx_seq} {body}")
        self.tx_seq += 1
        return f"{tag} {body}\n".encode()

    def open(self, line: bytes) -> dict:
        tag, _, body = line.partition(b" ")
        expected = _mac(self.key, f"{self.rx_dir} {self.rx_seq} ".encode() + body).encode()
        if not hmac.compare_digest(tag, expected):
            raise ProtocolError("a message failed verification (injected, replayed, reordered or corrupted)")
        self.rx_seq += 1
        return _decode(body, "an authenticated line is not a message of the protocol")


def _encode(msg: dict) -> str:
    return json.dumps(msg, separators=(",", ":"))


def _too_deep(body: bytes) -> bool:
    """Does the JSON in `body` nest deeper than MAX_DEPTH? (Brackets inside strings do not count.)"""
    if body.count(b"[") + body.count(b"{") <= MAX_DEPTH:
        return False
    depth, in_str, esc = 0, False, False
    for c in body:
        if in_str:
            esc, in_str = (False, True) if esc else (c == 0x5C, c != 0x22)
        elif c == 0x22:
            in_str = True
        elif c in b"[{":
            depth += 1
            if depth > MAX_DEPTH:
                return True
        elif c in b"]}":
            depth -= 1
    return False


def _decode(body: bytes, problem: str) -> dict:
    """The one gate every line passes before anything reads it, on both sides and before and after the
    proof: bounded nesting, then JSON, then an object whose `t` is a message of the protocol and whose
    fields have that message's types and alphabets (FIELDS). Returns only those fields, absent optional
    ones filled in; anything else raises ProtocolError(problem), which ends that connection only."""
    try:
        msg = None if _too_deep(body) else json.loads(body)
    except (ValueError, RecursionError):
        msg = None
    t = msg.get("t") if isinstance(msg, dict) else None
    fields = FIELDS.get(t) if isinstance(t, str) else None
    if fields is None or msg is None:
        raise ProtocolError(problem)
    out = {"t": t}
    for name, (check, default) in fields.items():
        if name not in msg and default is not REQUIRED:
            out[name] = default
        elif not check(msg.get(name, REQUIRED)):
            raise ProtocolError(f"{problem} (field {name!r} of {t!r})")
        else:
            out[name] = msg[name]
    return out


def plain_line(msg: dict) -> bytes:
    return (_encode(msg) + "\n").encode()


def parse_plain(line: bytes) -> dict:
    return _decode(line, "sent something that is not kgen's protocol")


def show_addr(addr) -> str:
    if isinstance(addr, tuple) and len(addr) >= 2:
        host, port = addr[0], addr[1]
        return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
    return str(addr or "?")


class Conn:
    def __init__(self, sock: socket.socket, addr=None) -> None:
        sock.setblocking(False)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
        self.sock, self.addr = sock, addr
        self.inbuf = b""
        self.outbuf = b""
        self.last_rx = self.last_tx = time.monotonic()
        self.closed = False
        self.session: Session | None = None  # set once membership is proven
        self.nonce = ""  # node 0: the challenge sent on this connection
        self.limit = PREAUTH_LINE_MAX
        self.rank: int | None = None
        self.host = ""
        self.done = False
        self.since = time.monotonic()
        self.sel: selectors.BaseSelector | None = None  # where it is registered: close() takes it out

    def register(self, sel: selectors.BaseSelector) -> None:
        sel.register(self.sock, selectors.EVENT_READ, ("conn", self))
        self.sel = sel

    def send(self, msg: dict) -> None:
        if self.closed:
            return
        self.outbuf += self.session.seal(msg) if self.session is not None else plain_line(msg)
        self.last_tx = time.monotonic()
        self.flush()

    def flush(self, block_for: float = 0.0) -> None:
        deadline = time.monotonic() + block_for
        while self.outbuf and not self.closed:
            try:
                n = self.sock.send(self.outbuf)
                self.outbuf = self.outbuf[n:]
            except (BlockingIOError, InterruptedError):
                if time.monotonic() >= deadline:
                    return
                time.sleep(0.01)
            except OSError:
                self.close()
                return

    def fill(self) -> bool:
        """Read what has arrived; False when the peer closed the connection or reset it."""
        try:
            data = self.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return True
        except OSError:
            return False
        if not data:
            return False
        self.last_rx = time.monotonic()
        self.inbuf += data
        return True

    def pop(self) -> dict | None:
        """The next complete message (verified once the connection is authenticated), None when no
        full line has arrived. Raises ProtocolError; the caller drops the connection."""
        end = self.inbuf.find(b"\n")
        if end < 0 or end > self.limit:
            if len(self.inbuf) > self.limit:
                raise ProtocolError(f"sent more than {self.limit} bytes without a line break")
            return None
        line, self.inbuf = self.inbuf[:end], self.inbuf[end + 1 :]
        return self.session.open(line) if self.session is not None else parse_plain(line)

    def close(self) -> None:
        """Every close, also one inside flush() after a send failed: out of its selector first, so no fd of a
        closed connection stays registered (the next accept or connect reuses the number)."""
        if self.sel is not None:
            try:
                self.sel.unregister(self.sock)
            except (KeyError, ValueError, OSError):
                pass
            self.sel = None
        if not self.closed:
            self.closed = True
            try:
                self.sock.close()
            except OSError:
                pass


def resolve(host: str, port: int) -> list[tuple]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [info[4] for info in infos]


def is_ip(text: str) -> bool:
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, text)
            return True
        except (OSError, ValueError):
            pass
    return False


def is_local(addr: str) -> bool:
    """Is `addr` an address of this host (can a socket be bound to it)?"""
    try:
        with socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((addr, 0))
        return True
    except OSError:
        return False


EVERY_INTERFACE = ["0.0.0.0", "::"]


def bind_addresses(cfg: Config) -> tuple[list[str], str]:
    """Where node 0's liveness channel listens, and why. KGEN_LIVENESS_BIND when set (`*`: every
    interface); a pod: every interface of the pod (its network namespace; the NetworkPolicy fences it);
    elsewhere the addresses of this host that MASTER_ADDR names, where the other nodes reach node 0
    (loopback for `kgen launch --local`); every interface, said in the log, when it names none of them or a
    host name that resolves to loopback here only (as Debian's 127.0.1.1 entry does: the others reach it
    elsewhere)."""
    if cfg.liveness_bind:
        every = cfg.liveness_bind == EVERY_INTERFACE
        return cfg.liveness_bind, "every interface: KGEN_LIVENESS_BIND=*" if every else "KGEN_LIVENESS_BIND"
    if cfg.kind:
        return EVERY_INTERFACE, "every interface of the pod; the run's NetworkPolicy admits only its own pods"
    try:
        named = sorted({a[0] for a in resolve(cfg.master_addr, 0)})
    except (OSError, UnicodeError):
        named = []
    local = [a for a in named if is_local(a)]
    loopback = all(a.startswith("127.") or a == "::1" for a in local)
    if local and (not loopback or is_ip(cfg.master_addr) or cfg.master_addr == "localhost"):
        return local, f"where MASTER_ADDR={cfg.master_addr} reaches this host; KGEN_LIVENESS_BIND=* widens it"
    said = f"names {', '.join(local)} here only" if local else f"is {', '.join(named) or 'unresolved'} here"
    return EVERY_INTERFACE, (
        f"every interface: MASTER_ADDR={cfg.master_addr} {said}, not an address the other nodes reach this host "
        f"at; set KGEN_LIVENESS_BIND to that address"
    )


class Rejected(Exception):
    def __init__(self, reason: str, code: int) -> None:
        super().__init__(reason)
        self.code = code


class Denied(Exception):
    """Node 0 (or whatever answers at its address) refused this process's membership proof."""


def _read_line(sock: socket.socket, buf: bytes, deadline: float, limit: int) -> tuple[bytes, bytes]:
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("no answer")
        if len(buf) > limit:
            raise ProtocolError(f"the answer exceeds {limit} bytes without a line break")
        sock.settimeout(left)
        data = sock.recv(4096)
        if not data:
            raise ConnectionResetError("closed during the handshake")
        buf += data
    line, rest = buf.split(b"\n", 1)
    return line, rest


def handshake(cfg: Config, sock: socket.socket, first: dict) -> tuple[Session, dict, bytes]:
    """Prove membership to node 0 and send `first` (hello, probe or stop) in the same packet.

    Returns the session, node 0's first (verified) answer and any bytes after it. Raises Denied
    (node 0 refused the proof), ProtocolError (the answer is not an authenticated node 0), OSError."""
    if cfg.secret is None:
        raise Denied("no run secret on this host (KGEN_SECRET_FILE)")
    deadline = time.monotonic() + HANDSHAKE_TIMEOUT
    line, rest = _read_line(sock, b"", deadline, PREAUTH_LINE_MAX)
    challenge = parse_plain(line)
    if challenge["t"] != MSG_CHALLENGE:
        raise ProtocolError("the process on that port is not a kgen node 0 (no challenge)")
    if challenge["v"] != PROTOCOL:
        raise ProtocolError(f"node 0 speaks liveness protocol {challenge['v']}, this node {PROTOCOL}")
    ns, nc = challenge["n"], new_nonce()
    session = Session(cfg.secret, ns, nc, "client")
    auth = {"t": MSG_AUTH, "v": PROTOCOL, "n": nc, "mac": membership_proof(cfg.secret, ns, nc)}
    sock.settimeout(max(0.1, deadline - time.monotonic()))
    sock.sendall(plain_line(auth) + session.seal(first))
    line, rest = _read_line(sock, rest, deadline, LINE_MAX)
    if line.startswith(b"{"):
        plain = parse_plain(line)
        if plain["t"] == MSG_DENIED:
            raise Denied(shown(plain["reason"]))
        raise ProtocolError("node 0's answer is not authenticated")
    return session, session.open(line), rest


def open_session(cfg: Config, first: dict, timeout: float, host: str | None = None, addrs: list | None = None):
    """One attempt: resolve node 0 (or `host`; `addrs`: resolved already), connect, prove membership, send `first`.

    Returns (socket, session, answer, rest). Raises socket.gaierror, OSError, ProtocolError, Denied."""
    addrs = addrs or resolve(host or cfg.master_addr, cfg.liveness_port)
    last: Exception = OSError("no address")
    for addr in addrs:
        family = socket.AF_INET6 if len(addr) == 4 else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            sock.connect(addr)
            session, answer, rest = handshake(cfg, sock, first)
        except Denied:
            sock.close()
            raise
        except (OSError, ProtocolError) as exc:
            sock.close()
            last = exc
            continue
        return sock, session, answer, rest
    raise last


def connect_once(
    cfg: Config, hello: dict, timeout: float, addrs: list | None = None
) -> tuple[socket.socket, Session, bytes]:
    """One attempt to join: open a session with a hello (`addrs`: node 0's, resolved already). Raises
    socket.gaierror / OSError / ProtocolError / Denied / Rejected."""
    sock, session, answer, rest = open_session(cfg, hello, timeout, addrs=addrs)
    if answer["t"] == MSG_WELCOME:
        return sock, session, rest
    sock.close()
    if answer["t"] != MSG_REJECT:
        raise ProtocolError(f"node 0 answered a hello with {answer['t']!r}")
    raise Rejected(shown(answer["reason"], 1000), answer["code"])


class Signals:
    """Signal handlers that only record the signal and wake the event loop."""

    def __init__(self) -> None:
        self.rfd, self.wfd = os.pipe()
        os.set_blocking(self.rfd, False)
        os.set_blocking(self.wfd, False)
        self.pending: list[int] = []
        signal.set_wakeup_fd(self.wfd, warn_on_full_buffer=False)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
            signal.signal(sig, self._on)
        signal.signal(signal.SIGCHLD, lambda *_: None)

    def _on(self, signum, _frame) -> None:
        self.pending.append(signum)

    def drain(self) -> None:
        try:
            while os.read(self.rfd, 512):
                pass
        except OSError:
            pass

    def sleep(self, seconds: float) -> None:
        """Sleep, but wake up at once when a signal arrives."""
        if seconds > 0 and not self.pending:
            try:
                sel = selectors.DefaultSelector()
                sel.register(self.rfd, selectors.EVENT_READ)
                sel.select(seconds)
                sel.close()
            except (OSError, ValueError):
                time.sleep(min(seconds, 0.1))
        self.drain()
