"""Which hosts a bare-metal run uses, in rank order: `--hosts H1,H2,...` or `--hostfile FILE` (pure).

A host is an ssh destination as the user's ssh sees it: an alias of ~/.ssh/config (or --ssh-config),
`user@host`, or `ssh://[user@]host[:port]`. Node rank = position in the list; node 0 is the master.
A hostfile has one host per line; `#` starts a comment; `host slots=N` (the MPI/DeepSpeed form) is
accepted and means N processes per node (every host must then say the same N).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kgen.errors import UsageError

MAX_HOSTS = 4096
MAX_HOSTFILE_BYTES = 1 << 20
# an ssh destination: no whitespace, no control characters, no leading "-" (it would be an ssh option)
_HOST = re.compile(r"[^\s\x00-\x1f\x7f,#'\"`$\\;&|<>()]+")


@dataclass(frozen=True)
class HostList:
    hosts: tuple[str, ...]
    slots: int | None = None  # processes per node, when the hostfile says slots=N


def check_host(host: str, option: str) -> str:
    if not host:
        raise UsageError("empty host name (two commas, or a trailing comma?)", option=option, hint="e.g. node1,node2")
    if host.startswith("-"):
        raise UsageError(f'host "{host}" starts with "-": ssh would read it as an option', option=option)
    if not _HOST.fullmatch(host) or len(host) > 255:
        raise UsageError(
            f"{host!r} is not an ssh destination (no spaces, quotes, shell or control characters)",
            option=option,
            hint="use a host name, an ~/.ssh/config alias, user@host or ssh://user@host:port",
        )
    return host


def parse_hosts(value: str) -> HostList:
    """--hosts H1,H2,...: comma-separated ssh destinations."""
    parts = [p.strip() for p in value.split(",")]
    if len(parts) > MAX_HOSTS:
        raise UsageError(f"{len(parts)} hosts: at most {MAX_HOSTS}", option="--hosts")
    return HostList(tuple(check_host(p, "--hosts") for p in parts))


def parse_hostfile(text: str, name: str) -> HostList:
    """A hostfile's text: one host per line, `# comments`, optional `slots=N`."""
    hosts: list[str] = []
    slots: set[int] = set()
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        where = f"{name}:{number}"
        words = line.split()
        host, rest = words[0], words[1:]
        check_host(host, where)
        for word in rest:
            m = re.fullmatch(r"slots=([0-9]+)", word)
            if not m or int(m.group(1)) < 1:
                raise UsageError(
                    f'unexpected "{word}" after host {host}', option=where, hint="a line is: HOST [slots=N]"
                )
            slots.add(int(m.group(1)))
        hosts.append(host)
        if len(hosts) > MAX_HOSTS:
            raise UsageError(f"more than {MAX_HOSTS} hosts", option=name)
    if not hosts:
        raise UsageError("no hosts in the file (one host per line; # starts a comment)", option=f"--hostfile {name}")
    if len(slots) > 1:
        raise UsageError(
            f"hosts say different slots= ({', '.join(map(str, sorted(slots)))}): every node runs the same number "
            "of processes",
            option=f"--hostfile {name}",
        )
    return HostList(tuple(hosts), slots.pop() if slots else None)


def read_hostfile(path: str) -> HostList:
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_HOSTFILE_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}", option="--hostfile") from None
    if len(data) > MAX_HOSTFILE_BYTES:
        raise UsageError(f"{path} is larger than {MAX_HOSTFILE_BYTES >> 20} MiB: not a hostfile", option="--hostfile")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{path} is not UTF-8 text: not a hostfile", option="--hostfile") from None
    if "\x00" in text:
        raise UsageError(f"{path} contains NUL bytes: not a hostfile", option="--hostfile")
    return parse_hostfile(text, path)
