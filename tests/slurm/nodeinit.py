"""PID 1 of one simulated Slurm host (run by `unshare --pid --uts --mount --fork --mount-proc`).

Sets the host name, makes /etc/hosts private to this host (a bind mount inside this mount namespace
only), starts the host's daemon (`slurmd -D ...` or `slurmctld -D ...`) as a child and reaps every
orphan, as an init does: a job step's processes whose slurmstepd died end up here. SIGKILL to this
process kills every process of the host at once (a crash).

argv: HOSTNAME HOSTS_FILE LOG -- DAEMON ARGS...
"""

import os
import signal
import socket
import subprocess
import sys


def main() -> None:
    name, hosts, log = sys.argv[1:4]
    daemon = sys.argv[5:]
    socket.sethostname(name)
    subprocess.run(["mount", "--bind", hosts, "/etc/hosts"], check=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGCHLD, lambda *_: None)  # so that pause() returns when an orphan ends
    with open(log, "ab") as out:
        subprocess.Popen(daemon, stdout=out, stderr=out, stdin=subprocess.DEVNULL)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while True:
        try:
            os.wait()
        except ChildProcessError:
            signal.pause()
        except InterruptedError:
            pass


if __name__ == "__main__":
    main()
