"""torchrun: one generation's run, and the node's run loop (the command it runs: entrypoint/parts/command.py)."""

from __future__ import annotations

import os
import selectors
import signal
import socket
import sys
import time

from .channel import Denied, Signals
from .command import torchrun_argv
from .config import Config, load_config
from .hang import HANG, end_hang
from .header import (
    ABORT_GRACE,
    EXIT_CONFIG,
    EXIT_DROPPED,
    EXIT_INTERNAL,
    EXIT_MASTER_UNREACHABLE,
    EXIT_PEER_LOST,
    EXIT_PEERS_MISSING,
    EXIT_RUN_FAILED,
    EXIT_STOPPED,
    FAIL_VERDICT_WAIT,
    SIGNAL_GRACE,
    STOP_BUDGET,
    STOP_GRACE,
    STOP_LINGER,
    Stop,
    fatal,
    internal_error,
    log,
    shown,
)
from .healthgate import HEALTH
from .hub import Hub
from .proctree import Child, Running, set_child_subreaper, signal_tree
from .reform import (
    MSG_DONE,
    MSG_FAIL,
    MSG_LEAVE,
    MSG_STOP,
    REFORM,
    check_torch,
    decide,
    refused_poll,
    stopped_by_user,
    tell_node0_stop,
    wait_for_master,
    wrong_secret,
)
from .spoke import Spoke
from .standby import STANDBY

# --------------------------------------------------------------------------------------------
# torchrun
# --------------------------------------------------------------------------------------------


def start_torchrun(cfg: Config, command: list[str], gen: int) -> Child:
    try:
        import tempfile

        log_dir = tempfile.mkdtemp(prefix=f"kgen-torchrun-g{gen}-")
    except OSError as exc:
        log(f"note: no temporary folder for the workers' output ({exc}): their lines go out unprefixed")
        log_dir = ""
    argv = torchrun_argv(cfg, command, gen, log_dir)
    restarts = str(cfg.restart_base + gen)
    env = dict(os.environ, KGEN_RESTART_COUNT=restarts, KGEN_RDZV_ID=f"{cfg.rdzv_id}-g{gen}")
    env.update(HANG.worker_env(env))  # stacks on a signal, progress files (hang watchdog section)
    log(f"generation {gen}: starting: " + " ".join(argv[1:]))
    wait = None if cfg.is_master else (cfg.master_addr, cfg.master_port, cfg.rdzv_timeout, refused_poll(cfg.nnodes))
    standby = STANDBY.take(argv, env, log_dir, cfg.node_rank * cfg.nproc, wait)  # type: ignore[operator]
    if standby is not None:
        return standby
    try:
        return Child(argv, env, log_dir, cfg.node_rank * cfg.nproc)  # type: ignore[operator]
    except OSError as exc:
        fatal(EXIT_CONFIG, f"cannot start torchrun with {sys.executable}: {exc}")
        raise AssertionError from exc  # unreachable


def poll(sel: selectors.BaseSelector, sigs: Signals, link, timeout: float = 0.1) -> None:
    """One turn of the event loop: wait up to `timeout` for messages or signals and handle them."""
    for key, _ in sel.select(timeout=timeout):
        if key.data[0] == "signal":
            sigs.drain()
        elif link is not None:
            link.on_event(key.data)


def excuse_own_absence(conns, took: float, cfg: Config) -> None:
    """This process was not running for `took` seconds (stopped, starved): that silence is ours,
    not the peers'; do not count it against them. (Whether they dropped us, node 0 tells.)"""
    if took > 2 * cfg.hb_interval:
        for conn in conns:
            conn.last_rx += took


def stop_after_signal(sigs: Signals, child: Child | None, sig: int) -> Stop:
    """Forward `sig` to torchrun, give it SIGNAL_GRACE, then kill what is left."""
    name = signal.Signals(sig).name
    log(f"received {name}: stopping torchrun (SIGKILL after {SIGNAL_GRACE:g}s)")
    if child is not None and child.rc is None:
        try:
            os.killpg(child.pid, sig)
        except OSError:
            pass
        deadline = time.monotonic() + SIGNAL_GRACE
        while child.rc is None and time.monotonic() < deadline:
            if sigs.pending:
                log(f"received {signal.Signals(sigs.pending.pop(0)).name} again: killing the local process tree now")
                break
            sigs.sleep(0.05)
            child.reap()
        finished = child.rc is not None
        child.kill_tree(2.0 if finished else 0.0, signal.SIGTERM if finished else signal.SIGKILL)
        log(f"stopped after {name} (torchrun exit code {child.rc})")
    return Stop(128 + sig, f"signal {name}")


def end_local(cfg: Config, sigs: Signals, child: Child | None, stop: Stop) -> Stop:
    """Stopped by user: end this node's torch tree (SIGTERM, SIGKILL after STOP_GRACE or at a second
    Ctrl-C), then exit with `stop` (a StatefulSet pod holds idle instead: it would retrain)."""
    if child is not None:
        log(f"{stop.reason}: stopping torch (SIGTERM, SIGKILL after {STOP_GRACE:g}s)")
        child.kill_tree(STOP_GRACE, sigs=sigs)
    hold_if_statefulset(cfg, sigs, "stopped by user")
    return stop


def hold_if_statefulset(cfg: Config, sigs: Signals, what: str = "run succeeded") -> None:
    """StatefulSet pods restart on any exit (restartPolicy Always): after a successful or stopped
    run, idle until the pod is deleted (SIGTERM)."""
    STANDBY.discard()
    if cfg.kind != "statefulset":
        return
    log(f"{what}; holding idle so restartPolicy Always does not retrain; kgen stop NAME to remove")
    while not sigs.pending:
        sigs.sleep(3600)


def run_single(cfg: Config, command: list[str], sigs: Signals) -> Stop:
    child = start_torchrun(cfg, command, 0)
    while child.rc is None:
        if sigs.pending:
            sig = sigs.pending.pop(0)
            if sig == signal.SIGINT:
                return end_local(cfg, sigs, child, stopped_by_user(socket.gethostname()))
            return stop_after_signal(sigs, child, sig)
        sigs.sleep(0.1)
        child.reap()
        if child.rc is None and HANG.due(time.monotonic()):
            return end_hang(cfg, child)
    child.failure()
    child.kill_tree(2.0)
    if child.rc:
        return Stop(child.rc, f"torch failed with code {child.rc}")
    hold_if_statefulset(cfg, sigs)
    return Stop(0, "succeeded")


def stop_group(cfg: Config, hub: Hub, sigs: Signals, child: Child | None, host: str) -> Stop:
    """Node 0: stopped by user on `host` (its own Ctrl-C, a node's, or --stop). Every node is told
    at once; nodes that were between generations are told when they rejoin, for STOP_LINGER."""
    stop = stopped_by_user(host)
    log(f"{stop.reason}: stopping every node")
    hub.stop_all(host)
    if child is not None and child.rc is None:
        signal_tree(signal.SIGTERM, child.pid)  # torch ends while the last nodes are told
        child.termed = True  # once: a second SIGTERM cuts torchrun's own shutdown report short
    deadline = time.monotonic() + STOP_LINGER
    while not hub.all_told() and time.monotonic() < deadline and not sigs.pending:
        poll(hub.sel, sigs, hub)
        hub.tick(time.monotonic())
        if child is not None:
            child.reap()
    if not hub.all_told():
        log(f"node rank(s) {sorted(hub.expected - hub.told)} not connected: not told")
    hub.close()
    return end_local(cfg, sigs, child, stop)


def run_hub(cfg: Config, command: list[str], sigs: Signals, sel: selectors.BaseSelector) -> Stop:
    hub = Hub(cfg, sel)
    where = hub.listen(sigs)
    log(
        f"liveness channel listening on port {cfg.liveness_port} at {where}; connections prove membership with "
        f"the run secret; waiting for {cfg.nnodes - 1} node(s), bound KGEN_RDZV_TIMEOUT={cfg.rdzv_timeout}s"
    )
    while True:
        # joining / re-forming: every node must (re)join with a hello
        while not hub.complete():
            poll(sel, sigs, hub)
            if sigs.pending and sigs.pending[0] == signal.SIGINT:
                sigs.pending.pop(0)
                return stop_group(cfg, hub, sigs, None, socket.gethostname())
            if sigs.pending:
                hub.close()
                return stop_after_signal(sigs, None, sigs.pending.pop(0))
            if hub.stop_host is not None:
                return stop_group(cfg, hub, sigs, None, hub.stop_host)
            now = time.monotonic()
            hub.tick(now)
            reason = hub.form_deadline_passed(now)
            if hub.script_fail is not None and hub.script_fail[3]:  # a node's entrypoint failed meanwhile
                blame, _, _, reason = hub.script_fail
                log(f"FAIL-STOP: {reason}")
                hub.end(EXIT_RUN_FAILED, reason, blame)
                return Stop(EXIT_RUN_FAILED, f"the run failed ({reason})")
            if reason is not None:
                log(f"FAIL-STOP: {reason}")
                hub.end(EXIT_PEERS_MISSING if cfg.max_reformations else EXIT_PEER_LOST, reason)
                return Stop(EXIT_PEERS_MISSING, f"group could not form: {reason}")
        gen = hub.next_generation()
        if gen > 0 and gen > cfg.max_reformations:
            reason = f"re-formation limit reached (KGEN_MAX_REFORMATIONS={cfg.max_reformations}): {hub.why_forming}"
            hub.end(EXIT_RUN_FAILED, reason)
            return Stop(EXIT_RUN_FAILED, reason)
        formed = time.monotonic() - hub.form_started
        log(f"all {cfg.nnodes} nodes connected after {formed:.1f}s: generation {gen}")
        hub.start(gen)
        stop = HEALTH.run(cfg, sigs, hub, gen)  # the health gate (generation 0): a Stop ends the run here
        if stop is not None:
            return stop
        child = start_torchrun(cfg, command, gen)
        own_rc: int | None = None
        now = time.monotonic()
        while True:
            before = now
            poll(sel, sigs, hub)
            child.reap()
            now = time.monotonic()
            took = now - before  # one turn of this loop (normally <= 0.1 s)
            finished = hub.state == "finishing"  # own torchrun succeeded: the others no longer watch node 0
            if took > cfg.hb_timeout - cfg.hb_interval and finished:
                log(f"this node was frozen for {took:.1f}s after it finished: the others finish by themselves")
                hub.close()
                hold_if_statefulset(cfg, sigs)
                return Stop(0, "succeeded")
            if took > cfg.hb_timeout - cfg.hb_interval:  # the others have (almost surely) dropped us
                reason = (
                    f"this node was frozen for {took:.1f}s (about KGEN_HEARTBEAT_TIMEOUT={cfg.hb_timeout:g}s): the "
                    f"others have dropped it"
                )
                log(f"FAIL-STOP: {reason}")
                hub.close()
                child.kill_tree(ABORT_GRACE)
                return Stop(EXIT_DROPPED, f"dropped from the group ({reason})")
            excuse_own_absence(hub.peers.values(), took, cfg)
            if sigs.pending and sigs.pending[0] == signal.SIGINT:
                sigs.pending.pop(0)
                return stop_group(cfg, hub, sigs, child, socket.gethostname())
            if hub.stop_host is not None:
                return stop_group(cfg, hub, sigs, child, hub.stop_host)
            if sigs.pending and finished:  # its training is done: a signal now ends no training
                name = signal.Signals(sigs.pending.pop(0)).name
                log(f"received {name} after this node finished: the others finish by themselves")
                hub.close()
                return Stop(0, "succeeded")
            if sigs.pending:
                sig = sigs.pending[0]
                reason = f"node 0 received {signal.Signals(sig).name} (pod deleted or stopped)"
                verdict, code, _ = decide(cfg, "lost", hub.gen)
                if hub.state == "training":
                    hub.abort(reason) if verdict == REFORM else hub.end(code, reason)
                hub.close()
                return stop_after_signal(sigs, child, sigs.pending.pop(0))
            if child.rc is not None and own_rc is None:
                own_rc = child.rc
                if own_rc == 0:
                    child.kill_tree(2.0)
                    log("torchrun finished successfully; waiting for the other nodes to finish")
                    hub.finish()
                else:
                    log(f"torchrun exited with code {own_rc}")
                    hub.script_failed(0, own_rc)  # first: who reported first is who node 0 blames,
                    said = child.failure()
                    if said and said.get("peer"):  # unless node 0's own workers only lost a peer
                        hub.own_failure_was_a_peers()
            hub.tick(now)
            if own_rc is None and hub.state == "training" and HANG.due(now):
                return end_hang(cfg, child, hub, sigs)
            if hub.state == "finishing":
                if hub.lost is not None:
                    log(f"{hub.lost}; this node had already finished successfully")
                    hub.close()
                    hold_if_statefulset(cfg, sigs)
                    return Stop(0, "succeeded")
                if hub.all_done():
                    hub.close()
                    log("all nodes finished")
                    hold_if_statefulset(cfg, sigs)
                    return Stop(0, "succeeded")
                continue
            fault, blame = None, None  # type: ignore[assignment]
            if hub.script_fail is not None and hub.script_fail[3]:  # a lost connection follows it: not the cause
                blame, _, _, reason = hub.script_fail
                fault, what = "internal", "the run failed"
            elif hub.lost is not None:
                fault, reason, what = "lost", hub.lost, "peer lost"
            elif hub.script_fail is not None and now - hub.script_fail[2] >= FAIL_VERDICT_WAIT:
                blame, rc, _, _ = hub.script_fail
                fault, reason, what = "script", f"node {blame}'s torchrun exited with code {rc}", "script failed"
            if fault is None:
                continue
            verdict, code, why = decide(cfg, fault, hub.gen)
            if verdict == REFORM:
                log(f"{what}: {reason}; stopping torch and re-forming (generation {hub.gen + 1})")
                hub.abort(reason)  # type: ignore[arg-type]
                child.kill_tree(ABORT_GRACE)
                STANDBY.ready()  # the next generation's agent imports torch while the group waits
                break
            if code == EXIT_RUN_FAILED and fault == "lost":
                reason = f"{why}: {reason}"
            log(f"FAIL-STOP: {reason}")
            hub.end(code, reason, blame)  # type: ignore[arg-type]
            child.kill_tree(ABORT_GRACE)
            if own_rc and blame == 0:
                return Stop(own_rc, f"torch failed with code {own_rc}")
            return Stop(code, f"{what} ({reason})")


def spoke_signal(cfg: Config, sigs: Signals, spoke: Spoke, child: Child | None) -> Stop:
    """A signal on a connected node: Ctrl-C (SIGINT) stops the whole group through node 0; any
    other signal (SIGTERM: pod deleted) makes this node leave, and the group re-forms without it."""
    sig = sigs.pending.pop(0)
    if sig == signal.SIGINT:
        host = socket.gethostname()
        spoke.send({"t": MSG_STOP, "host": host}, True)
        log("received SIGINT: stopped by user; node 0 told to stop every node")
        return end_local(cfg, sigs, child, stopped_by_user(host))
    spoke.send({"t": MSG_LEAVE, "reason": f"received {signal.Signals(sig).name} (pod deleted or stopped)"}, True)
    return stop_after_signal(sigs, child, sig)


def run_spoke(cfg: Config, command: list[str], sigs: Signals, sel: selectors.BaseSelector) -> Stop:
    last = -1
    while True:
        spoke = Spoke(cfg, sel, wait_for_master(cfg, sigs, last))
        while spoke.start_gen is None and spoke.verdict is None:
            poll(sel, sigs, spoke)
            if sigs.pending:
                return spoke_signal(cfg, sigs, spoke, None)
            spoke.tick(time.monotonic())
        if spoke.start_gen is None:
            verdict = spoke.verdict
            spoke.close()
            if verdict[0] == "stop":  # type: ignore[index]
                log(f"node 0 says: stopped by user on {verdict[1]}")  # type: ignore[index]
                return end_local(cfg, sigs, None, stopped_by_user(verdict[1]))  # type: ignore[index]
            if verdict[0] == "end":  # type: ignore[index]
                log(f"FAIL-STOP: node 0 ended the run: {verdict[-1]}")  # type: ignore[index]
                return Stop(verdict[1], f"node 0 ended the run ({verdict[-1]})")  # type: ignore[index]
            log(f"node 0 lost while waiting to start ({verdict[-1]}): joining again")  # type: ignore[index]
            continue
        gen = spoke.start_gen
        stop = HEALTH.run(cfg, sigs, spoke, gen)  # the health gate (generation 0): a Stop ends the run here
        if stop is not None:
            return stop
        child = start_torchrun(cfg, command, gen)
        own_rc: int | None = None
        now = time.monotonic()
        while True:
            before = now
            poll(sel, sigs, spoke)
            child.reap()
            now = time.monotonic()
            excuse_own_absence([spoke.conn], now - before, cfg)
            if sigs.pending:
                return spoke_signal(cfg, sigs, spoke, child)
            if child.rc is not None and own_rc is None:
                own_rc = child.rc
                if own_rc == 0:
                    child.kill_tree(2.0)
                    log("torchrun finished successfully")
                    spoke.send({"t": MSG_DONE}, True)
                    hold_if_statefulset(cfg, sigs)
                    return Stop(0, "succeeded")
                log(f"torchrun exited with code {own_rc}; node 0 decides: a lost node (re-form) or a script error")
                spoke.send({"t": MSG_FAIL, "rc": own_rc})  # first: node 0 blames whoever reports first
                child.failure()
            spoke.tick(time.monotonic())
            HANG.report(spoke, time.monotonic())
            if spoke.verdict is None:
                continue
            kind = spoke.verdict[0]
            reason = spoke.verdict[-1]
            spoke.close()
            if kind == "stop":
                log(f"node 0 says: stopped by user on {reason}")
                return end_local(cfg, sigs, child, stopped_by_user(reason))
            if kind == "end":
                log(f"FAIL-STOP: node 0 ended the run: {reason}")
                child.kill_tree(ABORT_GRACE)
                if own_rc and spoke.verdict[2] == cfg.node_rank:
                    return Stop(own_rc, f"torch failed with code {own_rc}")
                return Stop(spoke.verdict[1], f"node 0 ended the run ({reason})")
            if kind == "lost":
                verdict, code, why = decide(cfg, "lost", gen)  # type: ignore[assignment]
                if verdict != REFORM:  # type: ignore[comparison-overlap]
                    log(f"FAIL-STOP: {reason}")
                    child.kill_tree(ABORT_GRACE)
                    what = "peer lost" if code == EXIT_PEER_LOST else why
                    return Stop(code, f"{what} (node 0: {reason})")
                reason = f"node 0 lost: {reason}"
            log(f"re-forming: {reason}; stopping torch (generation {gen})")
            child.kill_tree(ABORT_GRACE)
            STANDBY.ready()  # the next generation's agent imports torch while the group waits
            last = gen
            break


def run(cfg: Config, command: list[str]) -> int:
    """Wait for node 0 (non-masters), start torchrun, supervise it and the liveness channel.
    Ends by raising Stop (exit code and reason), which main() turns into the last log line."""
    sigs = Signals()
    sel = selectors.DefaultSelector()
    sel.register(sigs.rfd, selectors.EVENT_READ, ("signal", None))
    set_child_subreaper()
    check_torch()
    try:
        if cfg.nnodes == 1:
            stop = run_single(cfg, command, sigs)
        elif cfg.is_master:
            stop = run_hub(cfg, command, sigs, sel)
        else:
            stop = run_spoke(cfg, command, sigs, sel)
    except Stop:
        raise
    except Exception as exc:  # noqa: BLE001 - kgen's own fault: said so, never "the script failed"
        stop = internal_stop(exc)
    finally:
        STANDBY.discard()  # not taken: the run ended between generations
    HANG.cleanup()  # hang watchdog section
    raise stop


def internal_stop(exc: BaseException) -> Stop:
    """kgen's own code failed on this node (a bug): the traceback and the reason into the log, the group
    told (node 0 ends the run, every other node exits 5; a node tells node 0, which does the same), this
    node's torch processes ended, exit EXIT_INTERNAL."""
    reason = internal_error(exc)
    link, child = Running.link, Running.child
    try:
        if isinstance(link, Hub):
            link.end(EXIT_RUN_FAILED, reason, 0)
            link.close()
        elif isinstance(link, Spoke) and not link.conn.closed:
            what = f"{type(exc).__name__}: {shown(str(exc), 300)}"
            link.send({"t": MSG_FAIL, "rc": EXIT_INTERNAL, "internal": what}, then_close=True)
    except Exception:  # noqa: BLE001 - best effort: the others notice the closed connection anyway
        pass
    try:
        if child is not None:
            child.kill_tree(ABORT_GRACE)
        else:
            signal_tree(signal.SIGKILL)
    except Exception:  # noqa: BLE001
        signal_tree(signal.SIGKILL, child.pid if child is not None else None)
    return Stop(EXIT_INTERNAL, reason)


def request_stop(env: dict) -> int:
    """--stop: ask node 0 over the liveness channel to stop the whole group (run's environment,
    any host). 0: node 0 is stopping it; 3: node 0 not reachable; 2: configuration, wrong secret."""
    cfg = load_config(env, with_rank=False)
    if cfg.problems:
        fatal(EXIT_CONFIG, cfg.problems)
    if cfg.nnodes == 1:
        fatal(EXIT_CONFIG, "--stop: NNODES=1 has no liveness channel: stop that node with Ctrl-C (SIGINT)")
    target = f"{cfg.master_addr}:{cfg.liveness_port}"
    host = socket.gethostname()
    try:
        told, detail = tell_node0_stop(cfg, host, STOP_BUDGET)
    except Denied as exc:
        wrong_secret(cfg, target, str(exc))
        raise AssertionError from exc  # unreachable
    if not told:  # one line: this command is no node, so no "stopped:" line follows (fatal would add one)
        sys.stderr.write(
            f"kgen-entrypoint: error: --stop: node 0 at {target} not reachable within {STOP_BUDGET:g}s ({detail}): "
            "nothing was stopped; the run may have ended, or node 0 is down (then Ctrl-C each node)\n"
        )
        return EXIT_MASTER_UNREACHABLE
    print(f"kgen-entrypoint: stop: {detail}; every node exits {EXIT_STOPPED} (stopped by user on {host})", flush=True)
    return 0
