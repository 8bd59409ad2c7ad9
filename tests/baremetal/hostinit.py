"""PID 1 of one simulated ssh host (run by `unshare --pid --uts --mount --fork --mount-proc`).

Sets the host name, makes /etc/hosts and /run private to this host (mounts inside this mount
namespace only; the remote user's HOME is the host's own temp folder through the sshd_config's
SetEnv, so nothing is written into the real home), starts `sshd -D -e -f CONFIG` as a child and reaps every orphan,
as an init does. sshd is not PID 1, so it can die (a fault the tests inject) while the host's other
processes live on; SIGKILL to this process kills every process of the host at once (a crash).

argv: HOSTNAME HOSTS_FILE SSHD_CONFIG SSHD_LOG
"""

import os
import signal
import socket
import subprocess
import sys


def main() -> None:
    name, hosts, config, log = sys.argv[1:5]
    socket.sethostname(name)
    subprocess.run(["mount", "--bind", hosts, "/etc/hosts"], check=True)
    # sshd's privilege separation directory, on a tmpfs of this mount namespace only
    subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755,size=1m", "kgen-test-run", "/run"], check=True)
    os.mkdir("/run/sshd", 0o755)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGCHLD, lambda *_: None)  # so that pause() returns when an orphan ends
    with open(log, "ab") as out:
        sshd = subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", config], stdout=out, stderr=out)
    with open(os.path.join(os.path.dirname(config), "sshd.pid"), "w") as fh:
        fh.write(str(sshd.pid))  # its PID inside this namespace
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while True:  # reap everything (detached run supervisors end up here)
        try:
            os.wait()
        except ChildProcessError:
            signal.pause()
        except InterruptedError:
            pass


if __name__ == "__main__":
    main()
