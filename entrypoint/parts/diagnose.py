"""--diagnose: one PASS/FAIL line per check of the environment and the network."""

from __future__ import annotations

import os
import socket
import sys
import time

from .channel import (
    MSG_CHALLENGE,
    Denied,
    ProtocolError,
    _read_line,
    bind_addresses,
    open_session,
    parse_plain,
    resolve,
)
from .config import Config, load_config
from .header import PREAUTH_LINE_MAX, shown
from .reform import MSG_PROBE, MSG_STATUS

# --------------------------------------------------------------------------------------------
# --diagnose
# --------------------------------------------------------------------------------------------


def _iface_check(var: str, value: str | None) -> tuple[bool, str]:
    if not value:
        return True, f"{var} not set: the library picks an interface itself"
    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError as exc:
        return False, f"{var}={value}: cannot list interfaces ({exc})"
    spec = value
    exclude = spec.startswith("^")
    exact = spec.lstrip("^").startswith("=")
    wanted = [w for w in spec.lstrip("^").lstrip("=").split(",") if w]
    if exclude:
        left = [n for n in names if not any((n == w) if exact else n.startswith(w) for w in wanted)]
        if left:
            return True, f"{var}={value}: usable {', '.join(left)}"
        return False, f"{var}={value} excludes every interface ({', '.join(names)})"
    missing = [w for w in wanted if not any((n == w) if exact else n.startswith(w) for n in names)]
    if missing:
        return False, (
            f"{var}={value}: no interface matches {', '.join(missing)} (have "
            f"{', '.join(names)}); set it to the pod network interface, e.g. eth0"
        )
    return True, f"{var}={value}: present"


def probe_node0(cfg: Config, host: str) -> tuple[bool, str]:
    """Ask node 0's entrypoint which nodes have joined (an authenticated probe: node 0 tells only a
    holder of the run's secret). Returns (ok, detail after "<host>:<port> ")."""
    if cfg.secret is None:
        try:
            sock = socket.create_connection((host, cfg.liveness_port), timeout=3)
        except OSError as exc:
            return False, f"does not accept ({exc.strerror or exc})"
        try:
            line, _ = _read_line(sock, b"", time.monotonic() + 3, PREAUTH_LINE_MAX)
            hello = parse_plain(line)
        except (OSError, ProtocolError):
            hello = {"t": None}
        finally:
            sock.close()
        if hello["t"] != MSG_CHALLENGE:
            return False, "accepts, but what answers is not a kgen entrypoint (no challenge)"
        return True, (
            f"accepts (kgen liveness protocol {hello['v']}); without the run's secret node 0 tells nothing "
            f"more: set KGEN_SECRET_FILE to see which nodes joined"
        )
    try:
        sock, _, answer, _ = open_session(cfg, {"t": MSG_PROBE}, timeout=3, host=host)
    except Denied as exc:
        return False, (
            f"accepts, but node 0 refused this host's proof of the run secret ({exc}): {cfg.secret_source} "
            f"gives another secret than node 0's"
        )
    except ProtocolError as exc:
        return False, f"accepts, but did not prove it is this run's node 0 ({exc})"
    except OSError as exc:
        return False, f"does not accept ({getattr(exc, 'strerror', None) or exc})"
    sock.close()
    if answer["t"] != MSG_STATUS:
        return False, f"accepts, but node 0 answered {answer['t']!r}"
    joined, nnodes = set(answer["joined"]), answer["nnodes"]
    missing = [r for r in range(1, min(nnodes, 1 << 16)) if r not in joined]
    return True, (
        f"accepts; node 0's entrypoint (run {shown(answer['id'])}) has {len(joined)} of {nnodes - 1} peers"
        + (f", missing {missing[:64]}" if missing else "")
    )


def running_job_status(cfg: Config) -> str:
    """Inside a running job: node 0's own entrypoint answers an authenticated probe on the liveness port."""
    if cfg.secret is None:
        return ""
    for host in dict.fromkeys({"0.0.0.0": "127.0.0.1", "::": "::1"}.get(h, h) for h in bind_addresses(cfg)[0]):
        try:
            sock, _, answer, _ = open_session(cfg, {"t": MSG_PROBE}, timeout=2, host=host)
        except (OSError, ProtocolError, Denied):
            continue
        sock.close()
        if answer["t"] == MSG_STATUS and answer["id"] == cfg.rdzv_id:
            return f"node 0's entrypoint (run {cfg.rdzv_id}) is running with {len(answer['joined'])} peer(s)"
    return ""


def _proc_net_addr(text: str, v6: bool) -> str:
    raw = bytes.fromhex(text)
    if not v6:
        return socket.inet_ntop(socket.AF_INET, raw[::-1])
    return socket.inet_ntop(socket.AF_INET6, b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4)))


def listening_addresses(port: int) -> list[str] | None:
    """The addresses this host's listening TCP sockets on `port` are bound to (/proc/net/tcp, tcp6);
    None when neither can be read."""
    found: set[str] = set()
    readable = False
    for path, v6 in (("/proc/net/tcp", False), ("/proc/net/tcp6", True)):
        try:
            with open(path) as fh:
                rows = fh.read().splitlines()[1:]
        except OSError:
            continue
        readable = True
        for row in rows:
            fields = row.split()
            if len(fields) < 4 or fields[3] != "0A":  # 0A = LISTEN
                continue
            addr, _, port_hex = fields[1].rpartition(":")
            try:
                if int(port_hex, 16) == port:
                    found.add(_proc_net_addr(addr, v6))
            except ValueError:
                continue
    return sorted(found) if readable else None


def interface_addresses() -> list[tuple[str, str]]:
    """(interface, IPv4 address) of this host's interfaces (Linux SIOCGIFADDR); [] when unknown."""
    try:
        import fcntl
        import struct

        names = [name for _, name in socket.if_nameindex()]
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    except (ImportError, OSError):
        return []
    out = []
    try:
        for name in names:
            try:
                res = fcntl.ioctl(sock.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))  # SIOCGIFADDR
            except OSError:
                continue
            out.append((name, socket.inet_ntoa(res[20:24])))
    finally:
        sock.close()
    return out


def exposure(port: int, authenticated: bool, env: dict) -> str:
    """Node 0: who can reach `port`, from the addresses its listeners are bound to (where it can tell)."""
    bound = listening_addresses(port)
    if bound is None:
        return f"{port}: cannot tell (/proc/net/tcp is not readable)"
    guard = (
        "kgen's liveness channel authenticates every connection"
        if authenticated
        else "torch's store does not authenticate, and torch 2.13 cannot bind it to one address (torchrun's static "
        "rendezvous gives its TCPStore no address or socket: it listens on every interface): fence this port (a "
        "NetworkPolicy on Kubernetes, a host firewall on bare metal; README, Security)"
    )
    if not bound:
        later = "" if authenticated else f"; once it runs: {guard}"
        return f"{port}: nothing listens on it yet (the run is not running on this node): cannot tell{later}"
    if any(a in ("0.0.0.0", "::") for a in bound):
        addrs = [(name, ip) for name, ip in interface_addresses() if not ip.startswith("127.")]
        fabric = [v for v in (env.get("GLOO_SOCKET_IFNAME"), env.get("NCCL_SOCKET_IFNAME")) if v]
        where = ", ".join(f"{ip} ({name})" for name, ip in addrs) or "every address of this host"
        text = f"{port} listens on all interfaces ({', '.join(bound)}): reachable at {where} by any host routed there"
        if fabric:
            wanted = [w for spec in fabric for w in spec.lstrip("^=").split(",") if w]
            outside = [f"{ip} ({name})" for name, ip in addrs if not any(name.startswith(w) for w in wanted)]
            if outside:
                text += f"; outside the training fabric ({', '.join(fabric)}) too: {', '.join(outside)}"
        return f"{text}; {guard}"
    if all(a.startswith("127.") or a == "::1" for a in bound):
        return f"{port} is bound to loopback only ({', '.join(bound)}): not reachable from other hosts"
    return f"{port} is bound to {', '.join(bound)} only: reachable only through that address; {guard}"


def diagnose(env: dict) -> int:
    results: list[tuple[bool, str, str]] = []

    def check(ok: bool, name: str, detail: str) -> None:
        results.append((ok, name, detail))
        print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}", flush=True)

    cfg = load_config(env)
    rank_problems = [p for p in cfg.problems if "rank" in p and "NNODES is not" not in p and p != cfg.secret_problem]
    env_problems = [p for p in cfg.problems if p not in rank_problems and p != cfg.secret_problem]
    if env_problems:
        for p in env_problems:
            check(False, "environment", p)
    else:
        check(
            True,
            "environment",
            f"NNODES={cfg.nnodes} NPROC_PER_NODE={cfg.nproc} MASTER_ADDR="
            f"{cfg.master_addr} MASTER_PORT={cfg.master_port} liveness port "
            f"{cfg.liveness_port}",
        )
    if cfg.secret_problem:
        check(False, "run secret", cfg.secret_problem)
    elif cfg.secret is not None:
        check(True, "run secret", f"{cfg.secret_source} ({len(cfg.secret)} characters)")
    if rank_problems:
        for p in rank_problems:
            check(False, "node rank", p)
    elif cfg.node_rank is not None:
        check(
            True,
            "node rank",
            f"{cfg.node_rank} (from {cfg.rank_source}; looked at {', '.join(cfg.rank_looked_at) or 'nothing else'})",
        )
    if cfg.master_addr:
        try:
            addrs = sorted({a[0] for a in resolve(cfg.master_addr, cfg.master_port or 0)})
            check(True, "master DNS", f"{cfg.master_addr} -> {', '.join(addrs)}")
        except socket.gaierror as exc:
            addrs = []
            check(
                False,
                "master DNS",
                f"{cfg.master_addr} does not resolve ({exc.strerror}): pod "
                f"0 must exist and the headless Service must publish "
                f"not-ready addresses; check subdomain/serviceName",
            )
        if addrs and cfg.master_port and cfg.liveness_port:
            if cfg.node_rank == 0:
                running = running_job_status(cfg)
                for label, port in (("rendezvous", cfg.master_port), ("liveness", cfg.liveness_port)):
                    s = socket.socket()
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    try:
                        s.bind(("0.0.0.0", port))
                        check(True, f"master {label} port", f"{port} is free on node 0")
                    except OSError as exc:
                        if running:
                            check(True, f"master {label} port", f"{port} is in use by this job: {running}")
                        else:
                            check(
                                False,
                                f"master {label} port",
                                f"{port} cannot be bound on node 0 ({exc.strerror}) and no kgen entrypoint of "
                                f"this run answers on the liveness port: another process holds it; pick another "
                                f"port",
                            )
                    finally:
                        s.close()
                for label, port in (("rendezvous", cfg.master_port), ("liveness", cfg.liveness_port)):
                    check(True, f"exposure of the {label} port", exposure(port, label == "liveness", env))
            else:
                ok, detail = probe_node0(cfg, cfg.master_addr)
                if not ok and detail.startswith("does not accept"):
                    detail += (
                        ": node 0's entrypoint must be running; check its logs, the container ports and NetworkPolicies"
                    )
                check(ok, "master liveness port", f"{cfg.master_addr}:{cfg.liveness_port} {detail}")
                port = cfg.master_port
                try:
                    socket.create_connection((cfg.master_addr, port), timeout=3).close()
                    check(True, "master rendezvous port", f"{cfg.master_addr}:{port} accepts")
                except OSError as exc:
                    check(
                        False,
                        "master rendezvous port",
                        f"{cfg.master_addr}:{port} does not accept ({exc.strerror or exc}): "
                        f"node 0's entrypoint/torchrun must be running; check its logs, the "
                        f"container ports and NetworkPolicies",
                    )
    try:
        st = os.statvfs("/dev/shm")
        size = st.f_frsize * st.f_blocks
        mib = size >> 20
        if mib < 1024:
            check(
                False,
                "/dev/shm",
                f"{mib} MiB: NCCL and DataLoader workers need more; mount a "
                f"memory-backed emptyDir at /dev/shm (values shmSize, >= 1Gi)",
            )
        else:
            check(True, "/dev/shm", f"{mib} MiB")
    except OSError as exc:
        check(False, "/dev/shm", f"not available ({exc}): mount a memory-backed emptyDir there")
    try:
        import torch

        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if gpus == 0:
            check(True, "GPUs", f"none visible: CPU job, gloo backend, NPROC_PER_NODE={cfg.nproc}")
        elif cfg.nproc and cfg.nproc > gpus:
            check(
                False,
                "GPUs",
                f"{gpus} visible but NPROC_PER_NODE={cfg.nproc}: request "
                f"{cfg.nproc} GPUs per pod or lower NPROC_PER_NODE",
            )
        else:
            extra = f" ({gpus - cfg.nproc} idle)" if cfg.nproc and gpus > cfg.nproc else ""
            check(True, "GPUs", f"{gpus} visible, NPROC_PER_NODE={cfg.nproc}{extra}")
    except Exception as exc:  # noqa: BLE001 - any import failure is the finding
        check(False, "GPUs", f"cannot import torch with {sys.executable} ({exc}): use an image with torch installed")
    for var in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
        ok, detail = _iface_check(var, env.get(var))
        check(ok, "interface", detail)
    failed = sum(1 for ok, _, _ in results if not ok)
    print(f"{'PASS' if not failed else 'FAIL'} summary: {len(results) - failed} passed, {failed} failed", flush=True)
    return 1 if failed else 0
