"""Every other node's Spoke: its one authenticated connection to node 0 (node 0's side is the Hub)."""

from __future__ import annotations

import selectors

from .channel import Conn, ProtocolError
from .config import Config
from .hang import HANG, MSG_DUMP
from .header import internal_error, log, shown
from .proctree import Running
from .reform import MSG_ABORT, MSG_DONE, MSG_END, MSG_HB, MSG_START, MSG_STOP


class Spoke:
    """Every other node's side: one authenticated connection to node 0 per generation."""

    def __init__(self, cfg: Config, sel: selectors.BaseSelector, conn: Conn) -> None:
        self.cfg, self.sel, self.conn = cfg, sel, conn
        self.master_done = False
        self.start_gen: int | None = None
        # what node 0 (or its loss) decided: ("abort", reason) | ("end", code, blame, reason) |
        # ("stop", host) | ("lost", reason)
        self.verdict: tuple | None = None
        conn.register(sel)
        Running.link = self
        self._drain(True)

    def on_event(self, data) -> None:
        self._drain(self.conn.fill())

    def _drain(self, alive: bool) -> None:
        while not self.conn.closed:
            try:
                msg = self.conn.pop()
                if msg is None:
                    break
                self._handle(msg)
            except Exception as exc:  # noqa: BLE001 - a ProtocolError, or a bug: either way the link is broken
                if not isinstance(exc, ProtocolError):
                    internal_error(exc, "handling a line from node 0")
                self.close()
                self._set(("lost", f"the liveness connection to node 0 broke: {shown(str(exc))}"))
                return
        if not alive and not self.conn.closed:
            self.close()
            if not self.master_done:
                self._set(
                    (
                        "lost",
                        "the liveness connection to node 0 closed (node 0 died, was deleted or its entrypoint "
                        "was killed)",
                    )
                )

    def _handle(self, msg: dict) -> None:
        """One message node 0 sent (already through _decode's gate). Raises ProtocolError for a message node
        0 never sends to a joined node."""
        t = msg["t"]
        if t == MSG_START:
            self.start_gen = msg["gen"]
        elif t == MSG_ABORT:
            self._set(("abort", shown(msg["reason"], 1000)))
        elif t == MSG_END:
            self._set(("end", msg["code"], msg["blame"], shown(msg["reason"], 1000)))
        elif t == MSG_STOP:
            self._set(("stop", shown(msg["host"])))
        elif t == MSG_DONE:
            self.master_done = True
            log("node 0 finished successfully")
        elif t == MSG_DUMP:
            HANG.dump_for(self)  # hang watchdog section
        elif t != MSG_HB:
            raise ProtocolError(f"node 0 sent {t!r} to a joined node")

    def _set(self, verdict: tuple) -> None:
        if self.verdict is None:
            self.verdict = verdict

    def close(self) -> None:
        self.conn.close()

    def tick(self, now: float) -> None:
        conn = self.conn
        if conn.closed:  # closed under us (a send failed): node 0 is lost unless it said it is done
            if not self.master_done:
                self._set(("lost", "the liveness connection to node 0 broke (a send to it failed)"))
            return
        if now - conn.last_tx >= self.cfg.hb_interval:
            conn.send({"t": MSG_HB})
        else:
            conn.flush()
        if not self.master_done and now - conn.last_rx > self.cfg.hb_timeout:
            self.close()
            self._set(
                (
                    "lost",
                    f"node 0 silent for {now - conn.last_rx:.1f}s (> KGEN_HEARTBEAT_TIMEOUT="
                    f"{self.cfg.hb_timeout:g}s): frozen or cut off",
                )
            )

    def send(self, msg: dict, then_close: bool = False) -> None:
        self.conn.send(msg)
        self.conn.flush(1.0)
        if then_close:
            self.close()
