"""Node 0's Hub: the group's membership and generations (every other node's side is the Spoke)."""

from __future__ import annotations

import errno
import hmac
import selectors
import socket
import time

from .channel import (
    MSG_AUTH,
    MSG_CHALLENGE,
    MSG_DENIED,
    Conn,
    ProtocolError,
    Session,
    Signals,
    bind_addresses,
    membership_proof,
    new_nonce,
    show_addr,
)
from .config import Config
from .hang import HANG, MSG_PROGRESS, MSG_STACKED, MSG_STACKS
from .header import (
    AUTH_TIMEOUT,
    BACKOFF_FIRST,
    BACKOFF_MAX,
    EXIT_CONFIG,
    EXIT_DROPPED,
    HANDSHAKE_TIMEOUT,
    LINE_MAX,
    LISTEN_BUSY_BOUND,
    MAX_UNPROVEN,
    PROTOCOL,
    fatal,
    internal_error,
    internal_reason,
    log,
    shown,
)
from .proctree import Running
from .reform import (
    MSG_ABORT,
    MSG_DONE,
    MSG_END,
    MSG_FAIL,
    MSG_HB,
    MSG_HELLO,
    MSG_LEAVE,
    MSG_PROBE,
    MSG_REJECT,
    MSG_START,
    MSG_STATUS,
    MSG_STOP,
    MSG_STOPPING,
    MSG_WELCOME,
    StrangerLog,
)


class Hub:
    """Node 0's side: proves every connection's membership, accepts every other node, numbers the
    generations, watches the nodes."""

    def __init__(self, cfg: Config, sel: selectors.BaseSelector) -> None:
        self.cfg, self.sel = cfg, sel
        self.listeners: list[socket.socket] = []
        self.unproven: dict[Conn, None] = {}  # accepted, challenged, no proof yet (oldest first)
        self.members: dict[Conn, None] = {}  # proven, no hello yet (or a probe / a stop request)
        self.peers: dict[int, Conn] = {}
        self.lasts: dict[int, int] = {}
        self.dropped: dict[int, tuple[int, str]] = {}  # rank -> (generation, why)
        self.expected = set(range(1, cfg.nnodes))
        self.gen = -1
        self.state = "joining"  # joining | training | finishing | stopping
        self.form_started = time.monotonic()
        self.why_forming = ""
        self.last_beat = 0.0
        self.lost: str | None = None
        self.script_fail: tuple[int, int, float, str] | None = None  # (rank, rc, when, internal error)
        self.script_fail_peer = False  # the blamed node's own workers failed of a lost peer (node 0 knows its own)
        self.stop_host: str | None = None  # a stop by the user was asked for, on this host
        self.told: set[int] = set()  # stopping: the ranks told to stop
        self.strangers = StrangerLog()
        self.seen_nonces: dict[str, None] = {}  # recent client nonces: a replayed proof is named as such
        Running.link = self

    def listen(self, sigs: Signals | None = None) -> str:
        """Listen where bind_addresses() says; returns where, and why, for the log. A port in use is retried
        for LISTEN_BUSY_BOUND seconds (a node 0 restarted or replaced on the same host: its predecessor's
        tree may still be ending); only a port still taken then is a configuration error."""
        hosts, why = bind_addresses(self.cfg)
        start = time.monotonic()
        delay = BACKOFF_FIRST
        said = False
        while True:
            errors = self._bind(hosts)
            busy = [h for h, exc in errors if getattr(exc, "errno", None) == errno.EADDRINUSE]
            if not busy or time.monotonic() - start >= LISTEN_BUSY_BOUND or (sigs is not None and sigs.pending):
                break
            if not said:
                said = True
                log(
                    f"KGEN_LIVENESS_PORT={self.cfg.liveness_port} is in use on {busy[0]}: trying again for up to "
                    f"{LISTEN_BUSY_BOUND:g}s (a node 0 ending on this host?)"
                )
            self.close_listeners()
            (sigs.sleep if sigs is not None else time.sleep)(min(delay, BACKOFF_MAX))
            delay *= 2
        if said and not errors:
            log(f"KGEN_LIVENESS_PORT={self.cfg.liveness_port} free after {time.monotonic() - start:.1f}s")
        if not self.listeners or any(h != "::" for h, _ in errors):  # IPv6 may be off: its wildcard is optional
            host, exc = errors[0] if errors else ("?", OSError("no socket"))
            held = f", still in use after {LISTEN_BUSY_BOUND:g}s" if busy else ""
            fatal(
                EXIT_CONFIG,
                f"KGEN_LIVENESS_PORT={self.cfg.liveness_port}: cannot listen on {host} ({exc}{held}): pick a free "
                f"port (values livenessPort) that differs from MASTER_PORT"
                + ("" if host in ("0.0.0.0", "::") else ", or set KGEN_LIVENESS_BIND to an address of node 0"),
            )
        return f"{', '.join(hosts)} ({why})"

    def _bind(self, hosts: list[str]) -> list[tuple[str, OSError]]:
        errors: list[tuple[str, OSError]] = []
        for host in hosts:
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            try:
                sock = socket.socket(family, socket.SOCK_STREAM)
            except OSError as exc:
                errors.append((host, exc))
                continue
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind((host, self.cfg.liveness_port))
                sock.listen(max(MAX_UNPROVEN, self.cfg.nnodes))
                sock.setblocking(False)
            except OSError as exc:
                sock.close()
                errors.append((host, exc))
                continue
            self.listeners.append(sock)
            self.sel.register(sock, selectors.EVENT_READ, ("listen", sock))
        return errors

    def close_listeners(self) -> None:
        for sock in self.listeners:
            try:
                self.sel.unregister(sock)
            except (KeyError, ValueError):
                pass
            sock.close()
        self.listeners = []

    # -- connections and the membership proof ---------------------------------------------
    def on_event(self, data) -> None:
        kind, obj = data
        try:
            self._accept(obj) if kind == "listen" else self.read(obj)
        except Exception as exc:  # noqa: BLE001 - a bug of kgen's, never a peer's doing: that connection only
            internal_error(exc, f"handling a connection from {show_addr(getattr(obj, 'addr', None))}")
            if kind == "conn" and not obj.closed:
                self._bad(obj, f"kgen failed handling its line ({type(exc).__name__}: an internal error)")

    def read(self, conn: Conn) -> None:
        """What arrived on one connection. Raises nothing but a bug: whatever the peer sent is at most a
        protocol error, which ends that connection only (a joined node's: that node is lost)."""
        if conn.closed:
            return
        alive = conn.fill()
        while not conn.closed:
            try:
                msg = conn.pop()
            except ProtocolError as exc:
                self._bad(conn, str(exc))
                return
            if msg is None:
                break
            if conn.session is None:
                self._prove(conn, msg)
            else:
                self._message(conn, msg)
        if not alive and not conn.closed:
            if conn.session is None:
                self._stranger(conn, "closed the connection without proving membership")
            else:
                self._gone(conn, "closed its liveness connection (pod died, was deleted or its entrypoint was killed)")

    def _accept(self, listener: socket.socket) -> None:
        for _ in range(64):  # a burst is taken in one turn, but bounded: heartbeats come first
            try:
                sock, addr = listener.accept()
            except OSError:
                return
            conn = Conn(sock, addr)
            conn.nonce = new_nonce()
            self.unproven[conn] = None
            conn.register(self.sel)
            conn.send({"t": MSG_CHALLENGE, "v": PROTOCOL, "n": conn.nonce})
            if conn.closed:  # connected, then reset before its challenge went out
                self._stranger(conn, "reset the connection before its challenge")
                continue
            if len(self.unproven) > MAX_UNPROVEN:
                oldest = next(iter(self.unproven))
                self._stranger(oldest, f"dropped: more than {MAX_UNPROVEN} connections waited to prove membership")

    def _stranger(self, conn: Conn, what: str, deny: str | None = None) -> None:
        """A connection that did not prove membership: logged once, told nothing useful, dropped."""
        self.strangers.note(
            f"refused a connection from {show_addr(conn.addr)}: {what} (not a node of this run; not counted, "
            f"nothing changed)"
        )
        if deny is not None:
            conn.send({"t": MSG_DENIED, "reason": deny})
        self._drop(conn)

    def _prove(self, conn: Conn, msg: dict) -> None:
        """The first line of a connection (a message _decode let through): its membership proof, or it is
        a stranger's."""
        if msg["t"] != MSG_AUTH:
            return self._stranger(conn, f"sent {msg['t']!r} without proving membership")
        if msg["v"] != PROTOCOL:
            v = msg["v"]
            return self._stranger(
                conn,
                f"speaks liveness protocol {v}",
                deny=f"liveness protocol {v} vs node 0's {PROTOCOL}: every node must run the same kgen entrypoint",
            )
        nc, mac = msg["n"], msg["mac"]
        if not hmac.compare_digest(mac, membership_proof(self.cfg.secret or b"", conn.nonce, nc)):
            if nc in self.seen_nonces:
                what = "replayed a recorded exchange (its nonce was used before)"
            else:
                what = "wrong proof of the run secret (a different KGEN_SECRET_FILE?)"
            return self._stranger(conn, what, deny="wrong secret")
        self.seen_nonces[nc] = None
        if len(self.seen_nonces) > 4096:
            del self.seen_nonces[next(iter(self.seen_nonces))]
        conn.session = Session(self.cfg.secret or b"", conn.nonce, nc, "server")
        conn.limit = LINE_MAX
        conn.since = time.monotonic()
        del self.unproven[conn]
        self.members[conn] = None

    def _bad(self, conn: Conn, why: str) -> None:
        if conn.session is None:
            self._stranger(conn, why)
        elif conn.rank is not None:
            self._gone(conn, f"sent a line that is not valid on its connection ({why}): dropped")
        else:
            log(f"dropped a connection from {show_addr(conn.addr)}: {why}")
            self._drop(conn)

    def _gone(self, conn: Conn, what: str) -> None:
        """A joined node's connection ended (closed, reset, silent or broken)."""
        self._drop(conn)
        rank = conn.rank
        if rank is None or self.peers.get(rank) is not conn:
            return
        del self.peers[rank]
        self.lasts.pop(rank, None)
        if conn.done or self.state == "stopping":
            return
        if self.state == "joining":
            log(f"node {rank} {what} while the group was forming: waiting for it again")
        else:
            self.lose(rank, f"node {rank} {what}")

    # -- messages on proven connections --------------------------------------------------------
    def _message(self, conn: Conn, msg: dict) -> None:
        t = msg["t"]
        if conn.rank is None:
            if t == MSG_PROBE:
                conn.send(
                    {
                        "t": MSG_STATUS,
                        "joined": sorted(self.peers),
                        "nnodes": self.cfg.nnodes,
                        "id": self.cfg.rdzv_id,
                        "gen": self.gen,
                        "state": self.state,
                    }
                )
                conn.flush(0.5)
                self._drop(conn)
            elif t == MSG_HELLO:
                self._hello(conn, msg)
            elif t == MSG_STOP:
                self._stop_asked(conn, msg)
                conn.send({"t": MSG_STOPPING, "nodes": sorted(self.peers)})
                conn.flush(0.5)
                self._drop(conn)
            else:
                log(f"dropped a member connection from {show_addr(conn.addr)}: it sent {t!r} before hello")
                self._drop(conn)
            return
        if t == MSG_DONE:
            conn.done = True
            log(f"node {conn.rank} finished successfully")
        elif t == MSG_FAIL and msg["internal"]:
            reason = internal_reason(f"node {conn.rank}", shown(msg["internal"], 400))
            log(f"node {conn.rank} says: {reason}")
            self.script_failed(conn.rank, msg["rc"], reason)
        elif t == MSG_FAIL:
            log(f"node {conn.rank}'s torchrun exited with code {msg['rc']}")
            self.script_failed(conn.rank, msg["rc"])
        elif t == MSG_LEAVE:
            self._gone(conn, f"left: {shown(msg['reason'])}")
        elif t in (MSG_PROGRESS, MSG_STACKS, MSG_STACKED):
            HANG.from_node(conn.rank, msg)  # hang watchdog section
        elif t == MSG_STOP:
            conn.done = True  # its departure is not a loss
            self._stop_asked(conn, msg)
        elif t != MSG_HB:
            self._bad(conn, f"sent {t!r}, which no node sends to node 0 once joined")

    def _stop_asked(self, conn: Conn, msg: dict) -> None:
        host = shown(msg["host"])
        via = f"node {conn.rank}" if conn.rank is not None else f"kgen_entrypoint.py --stop from {show_addr(conn.addr)}"
        log(f"stop requested by user on {host} ({via})")
        if self.stop_host is None:
            self.stop_host = host

    def _reject(self, conn: Conn, msg: dict, reason: str, code: int) -> None:
        log(f"refused node {msg['rank']} (host {shown(msg['host'])}): {reason}")
        conn.send({"t": MSG_REJECT, "reason": reason, "code": code})
        conn.flush(0.5)
        self._drop(conn)

    def _hello(self, conn: Conn, msg: dict) -> None:
        rank, last = msg["rank"], msg["last"]
        cfg = self.cfg
        if msg["id"] != cfg.rdzv_id:
            return self._reject(
                conn,
                msg,
                f"rendezvous id '{shown(msg['id'])}' differs from node 0's {cfg.rdzv_id!r} (pods of two different "
                "runs?)",
                0,
            )
        if self.state == "stopping":  # between generations when the stop came
            conn.send({"t": MSG_STOP, "host": self.stop_host})
            conn.flush(0.5)
            self.told.add(rank)
            self._drop(conn)
            return
        if self.state == "finishing":
            return self._reject(conn, msg, "node 0 has finished this run", 0)
        if msg["nnodes"] != cfg.nnodes or msg["nproc"] != cfg.nproc:
            return self._reject(
                conn,
                msg,
                f"NNODES {msg['nnodes']} vs {cfg.nnodes} / NPROC_PER_NODE {msg['nproc']} vs {cfg.nproc} "
                f"(that node vs node 0): render every pod from the same manifest",
                EXIT_CONFIG,
            )
        if rank not in self.expected:
            return self._reject(conn, msg, f"node rank {rank} is not in 1..{cfg.nnodes - 1}", EXIT_CONFIG)
        if rank in self.dropped and 0 <= last <= self.dropped[rank][0]:
            gen, why = self.dropped[rank]
            return self._reject(
                conn,
                msg,
                f"node {rank} was dropped from generation {gen} ({why}) and the group has moved on: this "
                f"process is stale; exit {EXIT_DROPPED} so that the pod is replaced",
                EXIT_DROPPED,
            )
        if rank in self.peers:
            return self._reject(
                conn,
                msg,
                f"node rank {rank} already joined from {self.peers[rank].host}: two pods derived the same node rank",
                EXIT_CONFIG,
            )
        if self.state != "joining":
            return self._reject(conn, msg, f"node 0 is training generation {self.gen}; try again", 0)
        del self.members[conn]
        conn.rank, conn.host = rank, shown(msg["host"])
        self.peers[rank] = conn
        self.lasts[rank] = last
        if last < 0:
            self.dropped.pop(rank, None)
        conn.send({"t": MSG_WELCOME, "v": PROTOCOL, "hb": cfg.hb_interval})
        log(
            f"node {rank} joined the liveness channel ({len(self.peers)}/{cfg.nnodes - 1} peers, host "
            f"{conn.host}, last generation {last})"
        )

    def _drop(self, conn: Conn) -> None:
        self.unproven.pop(conn, None)
        self.members.pop(conn, None)
        conn.close()

    def lose(self, rank: int | None, reason: str) -> None:
        if self.state == "training" and rank is not None:
            self.dropped[rank] = (self.gen, reason)
        if self.lost is None:
            self.lost = reason

    def script_failed(self, rank: int, rc: int, internal: str = "") -> None:
        """A node's torchrun exited `rc` (or, `internal`, its kgen entrypoint failed): node 0 decides."""
        first = self.script_fail
        if first is None or (internal and not first[3]):
            self.script_fail = (rank, rc, time.monotonic(), internal)
            self.script_fail_peer = False
        elif self.script_fail_peer and not first[3] and rank != first[0]:
            # the first report was a consequence (node 0's own workers failed of a lost peer, and node 0 reports
            # without the network's delay): this node's failure may be the cause; the verdict wait runs on
            self.script_fail = (rank, rc, first[2], internal)
            self.script_fail_peer = False

    def own_failure_was_a_peers(self) -> None:
        """Node 0's failure record says its workers failed of a lost peer: a later report names the cause."""
        if self.script_fail is not None and self.script_fail[0] == 0 and not self.script_fail[3]:
            self.script_fail_peer = True

    # -- forming a generation -------------------------------------------------------------
    @property
    def first_formation(self) -> bool:
        return self.gen < 0 and all(last < 0 for last in self.lasts.values())

    def complete(self) -> bool:
        return set(self.peers) == self.expected

    def form_deadline_passed(self, now: float) -> str | None:
        """The reason the group cannot form, once the bound for (re)forming has passed."""
        cfg = self.cfg
        missing = sorted(self.expected - set(self.peers))
        if self.first_formation:
            if now - self.form_started <= cfg.rdzv_timeout:
                return None
            return (
                f"node rank(s) {missing} did not connect within KGEN_RDZV_TIMEOUT={cfg.rdzv_timeout}s: are "
                f"those pods scheduled and running (kubectl get pods -o wide; kubectl describe pod)?"
            )
        if now - self.form_started <= cfg.replacement_timeout:
            return None
        why = f" after {self.why_forming}" if self.why_forming else ""
        return (
            f"re-forming{why}: node rank(s) {missing} did not come back within KGEN_REPLACEMENT_TIMEOUT="
            f"{cfg.replacement_timeout:g}s (a frozen or partitioned pod keeps its index, so the Job "
            f"controller creates no replacement until it is evicted or exits)"
        )

    def next_generation(self) -> int:
        return max([self.gen, *self.lasts.values()]) + 1

    def start(self, gen: int) -> None:
        self.gen = gen
        self.state = "training"
        self.lost = None
        self.script_fail = None
        self.script_fail_peer = False
        for conn in self.peers.values():
            conn.done = False
            conn.send({"t": MSG_START, "gen": gen})

    def abort(self, reason: str) -> None:
        """A node was lost: tell the others to stop torch and join again; form the next generation."""
        for conn in self.peers.values():
            conn.send({"t": MSG_ABORT, "gen": self.gen, "reason": reason})
        self._close_peers()
        self.state = "joining"
        self.form_started = time.monotonic()
        self.why_forming = f"generation {self.gen}: {reason}"

    def end(self, code: int, reason: str, blame: int | None = None) -> None:
        """The run failed as a whole: every node exits with `code` (the node to blame: its own)."""
        for conn in self.peers.values():
            if not conn.done:
                conn.send({"t": MSG_END, "code": code, "reason": reason, "blame": blame})
        self._close_peers()
        self.close_listeners()

    def stop_all(self, host: str) -> None:
        """Stopped by user: tell every node now; nodes that rejoin meanwhile are told by _hello."""
        self.stop_host = host
        self.state = "stopping"
        for rank, conn in self.peers.items():
            if not conn.done:
                conn.send({"t": MSG_STOP, "host": host})
            self.told.add(rank)
        self._close_peers()

    def all_told(self) -> bool:
        return self.expected <= self.told

    def _close_peers(self) -> None:
        for conn in list(self.peers.values()) + list(self.members):
            conn.flush(0.2)
            self._drop(conn)
        self.peers.clear()
        self.lasts.clear()

    def tick(self, now: float) -> None:
        cfg = self.cfg
        if now - self.last_beat >= cfg.hb_interval:
            self.last_beat = now
            for conn in list(self.peers.values()):
                conn.send({"t": MSG_HB})
        else:
            for conn in self.peers.values():
                conn.flush()
        for conn in list(self.unproven):
            if now - conn.since <= AUTH_TIMEOUT:
                break  # oldest first: the rest are younger
            self._stranger(conn, f"sent no proof of membership within {AUTH_TIMEOUT:g}s")
        for conn in list(self.members):
            if now - conn.since > HANDSHAKE_TIMEOUT:
                self._drop(conn)
        self.strangers.roll(now)
        for _, conn in sorted(self.peers.items()):
            if conn.closed:  # a send to it failed (reset, broken pipe): closed under us
                self._gone(conn, "broke its liveness connection (a send to it failed: reset or broken pipe)")
            elif not conn.done and now - conn.last_rx > cfg.hb_timeout:
                self._gone(
                    conn,
                    f"silent for {now - conn.last_rx:.1f}s (> KGEN_HEARTBEAT_TIMEOUT={cfg.hb_timeout:g}s): "
                    f"frozen or cut off",
                )

    def finish(self) -> None:
        """Own torchrun succeeded: tell the others; keep watching until they are done."""
        self.state = "finishing"
        self.close_listeners()
        self.strangers.roll(time.monotonic(), final=True)
        for conn in list(self.unproven) + list(self.members):
            self._drop(conn)
        for conn in self.peers.values():
            conn.send({"t": MSG_DONE})

    def all_done(self) -> bool:
        return all(conn.done or conn.closed for conn in self.peers.values())

    def close(self) -> None:
        self._close_peers()
        for conn in list(self.unproven):
            self._drop(conn)
        self.close_listeners()
        self.strangers.roll(time.monotonic(), final=True)
