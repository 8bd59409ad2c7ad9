"""The standby agent: a survivor's next torchrun, its torch imported while the group waits for a replacement."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from .header import log
from .proctree import Child, _prctl, _torchrun_dies_with_us

# --------------------------------------------------------------------------------------------
# The standby agent (docs/entrypoint.md, "Re-formation")
#
# A node that stopped its torch to re-form waits (seconds: the replacement pod's back-off, scheduling and
# start) and then starts a new torchrun, whose first seconds are the agent importing torch. So, between
# generations, the node starts that interpreter ahead: it imports torchrun's module and blocks on a pipe. On
# `start` the entrypoint writes the generation's torchrun arguments and environment to a private file and its
# path to the pipe; the standby takes them as its own (sys.argv, os.environ) and runs torchrun's main, the
# same code `python -m torch.distributed.run` runs. Nothing of torch.distributed happens before `start`: no
# store, no rendezvous, no worker. An empty line or the pipe's end (discarded, or the entrypoint is gone) ends
# it; when it is not there or has exited by `start`, torchrun starts as before.
# On every node but 0, the standby first waits until node 0's rendezvous port accepts a connection (a TCP
# connect, closed at once: node 0's torchrun may still be importing torch when node 0 was the one replaced):
# torch's store client retries with a growing back-off, which, started seconds early, would join seconds late.
# --------------------------------------------------------------------------------------------

STANDBY_PROGRAM = """import json, os, sys
import torch.distributed.run as run
path = os.fdopen(int(sys.argv[1])).readline().strip()
if not path:
    sys.exit(0)
with open(path) as fh:
    spec = json.load(fh)
os.unlink(path)
if spec["wait"]:
    import socket, time
    host, port, bound, every = spec["wait"]
    end = time.monotonic() + bound
    try:
        addrs = [a[4] for a in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]
    except OSError:
        addrs = []
    while addrs and time.monotonic() < end:
        try:
            socket.create_connection(addrs[0][:2], 1).close()
            break
        except OSError:
            addrs = addrs[1:] + addrs[:1]
            time.sleep(every)
os.environ.clear()
os.environ.update(spec["env"])
sys.argv = [run.__file__, *spec["argv"]]
run.main()
"""


class Standby:
    """At most one standby agent on this node: started between generations, taken by the next one's `start`."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.fd = -1  # the pipe's writing end
        self.since = 0.0

    def ready(self) -> None:
        """Start the standby unless one is there (this node stopped its torch and waits to re-form)."""
        if self.proc is not None and self.proc.poll() is None:
            return
        self.discard()
        rfd, wfd = os.pipe()
        try:
            _prctl()  # looked up here: the child only calls it
            self.proc = subprocess.Popen(
                [sys.executable, "-c", STANDBY_PROGRAM, str(rfd)],
                start_new_session=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(rfd,),
                preexec_fn=_torchrun_dies_with_us,
            )
        except OSError as exc:
            log(f"note: no standby agent ({exc}): the next torchrun starts when the group has formed")
            os.close(wfd)
            self.proc = None
            return
        finally:
            os.close(rfd)
        self.fd, self.since = wfd, time.monotonic()

    def take(self, argv: list[str], env: dict, log_dir: str, base_rank: int, wait: tuple | None) -> Child | None:
        """The generation's torchrun as the standby (None: there is none, or it has exited: start one). `wait`:
        (node 0's address, its rendezvous port, for how long at most, how often) to try before torchrun starts
        (every node but 0)."""
        proc = self.proc
        if proc is None or proc.poll() is not None or not log_dir:
            self.discard()
            return None
        path = ""
        try:
            fd, path = tempfile.mkstemp(prefix="kgen-agent-", suffix=".json")  # this user's alone (0600)
            with os.fdopen(fd, "w") as fh:
                json.dump({"argv": argv[3:], "env": env, "wait": wait}, fh)  # argv[:3]: python -m torch.distributed.run
            os.write(self.fd, path.encode() + b"\n")  # far below PIPE_BUF: never blocks
        except OSError as exc:
            log(f"note: the standby agent not used ({exc}): torchrun starts anew")
            if path:
                with contextlib.suppress(OSError):
                    os.unlink(path)
            self.discard()
            return None
        os.close(self.fd)
        self.proc, self.fd = None, -1
        log(f"torchrun is the standby agent started {time.monotonic() - self.since:.1f}s ago (torch imported since)")
        return Child(argv, env, log_dir, base_rank, proc)

    def discard(self) -> None:
        """End the standby (the run ends, or the node holds idle)."""
        proc, self.proc = self.proc, None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            proc.wait()
        if proc is not None:
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()


STANDBY = Standby()
