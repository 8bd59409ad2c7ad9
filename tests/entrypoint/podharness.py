"""Run real `kgen render` output as N local "pods" (root, Linux, util-linux `unshare`).

One pod = `unshare --pid --fork --mount --mount-proc`: its own PID namespace (SIGKILL to its PID 1
kills every process in it, as a container runtime does) and mount namespace, in which

* the ConfigMap's files are bind-mounted read-only at the volumeMount's mountPath (/opt/kgen),
  and a Secret's files (the run's secret) likewise at theirs (/var/run/secrets/kgen): a Secret the
  manifest does not hold (a StatefulSet's <name>-auth) is made as `kgen submit` makes it, a fresh
  random value, unless the test says it is missing (an optional one then mounts as an empty folder),
* a memory emptyDir is a tmpfs of the rendered sizeLimit (/dev/shm),
* /etc/hosts is a private bind mount of the pod's own hosts file: `<name>-<i>.<service>` (and
  the FQDN) resolve to 127.0.0.1 once pod i has been started, as a headless Service with
  publishNotReadyAddresses does (a pod never started does not resolve), and the pod's own
  hostname resolves as in the hosts file the kubelet writes.

The container's command/args/env are used as the kubelet would: `$(VAR)` expansion, downward-API
fieldRefs (the Job controller's controller-uid label, a random version-4 UUID per Job as the API
server makes it, controller-revision-hash, pod-index label, completion index, name, namespace),
JOB_COMPLETION_INDEX for Indexed Jobs, HOSTNAME=<name>-<i>, and PATH starting with this
interpreter's directory so the rendered `python3` is the test venv's. Network: loopback only.
"""

from __future__ import annotations

import base64
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
TRAINLOOP = Path(__file__).resolve().parent / "trainloop.py"
CKPTLOOP = Path(__file__).resolve().parent / "ckptloop.py"
NAMESPACE = "default"
# The health gate (warn by default) costs every multi-node start ~1.5-2 s of torch start-up on these shared
# cores; a pod whose manifest does not set health.gate runs with this (KGEN_TEST_HEALTH_GATE=warn: with it).
HEALTH_GATE = os.environ.get("KGEN_TEST_HEALTH_GATE", "off")


def free_port_pair() -> int:
    """A port P such that P and P+1 are both free on every address (rendezvous + liveness); the
    bare-metal tests' sshd hosts (tests/baremetal/sshlab.py) use it too."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port >= 65000:
            continue
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("0.0.0.0", port))
                b.bind(("0.0.0.0", port + 1))
            return port
        except OSError:
            continue
    raise RuntimeError("no free port pair")


def ns_pids(init_pid: int) -> list[int]:
    """Every process in the PID namespace whose PID 1 is ``init_pid`` (host PIDs)."""
    try:
        ns = os.readlink(f"/proc/{init_pid}/ns/pid")
    except OSError:
        return []
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.readlink(f"/proc/{name}/ns/pid") == ns:
                    out.append(int(name))
            except OSError:
                pass
    return out


def write_secret(folder: Path, name: str = "kgen-secret") -> str:
    """A run secret as a bare-metal user creates it: 64 hex characters in a 0600 file."""
    import secrets

    path = Path(folder) / name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(secrets.token_hex(32) + "\n")
    return str(path)


def kgen_render(*args: str) -> str:
    """Run the real `kgen render` CLI and return its YAML output.

    KGEN_HARNESS_SRC=<dir> renders with the kgen sources in <dir> (e.g. `git archive HEAD`
    unpacked), so a benchmark is not disturbed by uncommitted work in the checkout."""
    src = os.environ.get("KGEN_HARNESS_SRC") or str(REPO)
    cmd = [sys.executable, "-c", "import sys; from kgen.cli import main; sys.exit(main())", "render", *args]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=src, timeout=120)
    if res.returncode != 0:
        raise RuntimeError(f"kgen render failed ({res.returncode}): {res.stderr}")
    return res.stdout


def render_cpu_job(
    name: str,
    nodes: int,
    kind: str,
    port: int,
    command: list[str] | None = None,
    nproc: int = 2,
    master_wait: int = 60,
    sets: tuple[str, ...] = (),
) -> str:
    args = [
        "--gpus",
        "0",
        "--nodes",
        str(nodes),
        "--kind",
        kind,
        "--name",
        name,
        "--set",
        f"nprocPerNode={nproc}",
        "--set",
        f"port={port}",
        "--set",
        f"livenessPort={port + 1}",
        "--set",
        "gloo.socketIfname=lo",
        "--set",
        f"timeouts.masterWait={master_wait}",
    ]
    for s in sets:
        args += ["--set", s]
    if command:
        args += ["--", *command]
    return kgen_render(*args)


def _quantity_bytes(q: str) -> int:
    m = re.fullmatch(r"(\d+)([KMGT]i?)?", str(q))
    if not m:
        raise ValueError(f"unsupported quantity {q!r}")
    mult = {
        None: 1,
        "Ki": 1 << 10,
        "Mi": 1 << 20,
        "Gi": 1 << 30,
        "Ti": 1 << 40,
        "K": 10**3,
        "M": 10**6,
        "G": 10**9,
        "T": 10**12,
    }[m.group(2)]
    return int(m.group(1)) * mult


def unshare_argv(script: str) -> list[str]:
    """One pod: `script` run by /bin/sh as PID 1's child in new PID, mount and UTS namespaces (private mount
    propagation, its own /proc). Also used by the kubelet stand-in of tests/k8s."""
    return ["unshare", "--pid", "--fork", "--mount", "--uts", "--mount-proc", "--propagation", "private",
            "/bin/sh", "-c", script]  # fmt: skip


def shadow_mount_steps(path: str, stash_root: Path, tag: str) -> list[str]:
    """Shell steps that make a missing mount point (e.g. /opt/kgen) exist inside the pod's own mount
    namespace only: the host's filesystem is never written (no test may touch a system path).

    The nearest existing ancestor is covered by a tmpfs into which its entries are bound back from a
    private stash (`stash_root`/`tag`-..., so the pod still sees everything that was there), then the path
    is created."""
    ancestor = os.path.dirname(path.rstrip("/"))
    while not os.path.isdir(ancestor):
        ancestor = os.path.dirname(ancestor)
    ancestor = os.path.realpath(ancestor)  # /var/run -> /run
    if ancestor == "/":
        raise ValueError(f"harness cannot create mount point {path}: its only existing ancestor is /")
    stash = Path(stash_root) / f"{tag}-{ancestor.strip('/').replace('/', '_')}"
    stash.mkdir(exist_ok=True)
    qa, qs = shlex.quote(ancestor), shlex.quote(str(stash))
    steps = [f"mount --rbind {qa} {qs}", f"mount -t tmpfs -o mode=755 tmpfs {qa}"]
    for entry in sorted(os.listdir(ancestor)):
        src, dst = os.path.join(ancestor, entry), os.path.join(ancestor, entry)
        qsrc, qdst = shlex.quote(os.path.join(str(stash), entry)), shlex.quote(dst)
        if os.path.islink(src):
            steps.append(f"ln -s {shlex.quote(os.readlink(src))} {qdst}")
        elif os.path.isdir(src):
            steps += [f"mkdir -p {qdst}", f"mount --rbind {qsrc} {qdst}"]  # -p: mount itself makes /run/mount
        else:
            steps += [f"touch {qdst}", f"mount --bind {qsrc} {qdst}"]
    steps.append(f"mkdir -p {shlex.quote(path)}")
    return steps


class Pod:
    def __init__(self, cluster: Cluster, index: int, incarnation: int = 0) -> None:
        self.cluster, self.index, self.incarnation = cluster, index, incarnation
        self.name = f"{cluster.name}-{index}"
        self.proc: subprocess.Popen | None = None
        self.init_pid: int | None = None
        self.started_at: float | None = None
        self.exited_at: float | None = None
        self.returncode: int | None = None
        suffix = f".{incarnation}" if incarnation else ""
        self.log_path = cluster.root / f"{self.name}{suffix}.log"
        self._watch: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        c = self.cluster
        c.publish_dns(self.index)
        env = c.pod_env(self.index)
        setup = [
            f"hostname {shlex.quote(self.name)}",
            f"mount --bind {shlex.quote(str(c.hosts_file(self.index)))} /etc/hosts",
        ]
        for mount_path, (kind, source) in c.pod_mounts(self.index).items():
            q = shlex.quote(mount_path)
            if not os.path.isdir(mount_path):
                setup += c.shadow_mount_point(mount_path, self.index)
            if kind == "tmpfs":
                setup.append(f"mount -t tmpfs -o size={source} tmpfs {q}")
            else:
                setup.append(f"mount --bind {shlex.quote(source)} {q}")
                if kind == "ro":
                    setup.append(f"mount -o remount,bind,ro {q}")
        argv = c.container.get("command", []) + c.container.get("args", [])
        argv = [c.expand(a, env) for a in argv]
        script = " && ".join(setup) + " && exec " + " ".join(shlex.quote(a) for a in argv)
        log = open(self.log_path, "ab")
        self.started_at = time.time()
        self.proc = subprocess.Popen(
            unshare_argv(script),
            env=env,
            cwd=c.workdir,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        log.close()
        self.init_pid = self._find_init()
        self._watch = threading.Thread(target=self._wait, daemon=True)
        self._watch.start()

    def _find_init(self) -> int | None:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                for tid in os.listdir(f"/proc/{self.proc.pid}/task"):
                    kids = Path(f"/proc/{self.proc.pid}/task/{tid}/children").read_text().split()
                    if kids:
                        return int(kids[0])
            except OSError:
                pass
            if self.proc.poll() is not None:
                return None
            time.sleep(0.01)
        return None

    def _wait(self) -> None:
        rc = self.proc.wait()
        self.exited_at = time.time()
        self.returncode = 128 - rc if rc < 0 else rc

    def pids(self) -> list[int]:
        """Every process in this pod's PID namespace (host PIDs)."""
        return ns_pids(self.init_pid) if self.init_pid is not None else []

    def kill(self) -> None:
        """SIGKILL the pod's PID 1: the kernel kills every process of the pod."""
        if self.init_pid:
            try:
                os.kill(self.init_pid, signal.SIGKILL)
            except OSError:
                pass

    def freeze(self) -> int:
        """SIGSTOP every process of the pod (a frozen node / partition: no FIN, no RST)."""
        stopped: set[int] = set()
        for _ in range(3):
            for pid in self.pids():
                if pid not in stopped:
                    try:
                        os.kill(pid, signal.SIGSTOP)
                        stopped.add(pid)
                    except OSError:
                        pass
        return len(stopped)

    def thaw(self) -> None:
        """SIGCONT every process of the pod (the frozen node comes back)."""
        for pid in self.pids():
            try:
                os.kill(pid, signal.SIGCONT)
            except OSError:
                pass

    def term(self) -> None:
        """What the kubelet does on pod deletion: SIGTERM to the container's PID 1."""
        if self.init_pid:
            os.kill(self.init_pid, signal.SIGTERM)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.returncode is None

    def wait(self, timeout: float) -> int | None:
        if self._watch is not None:
            self._watch.join(timeout)
        return self.returncode

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""


class Cluster:
    """The objects of one `kgen render` output, runnable as local pods."""

    def __init__(
        self,
        manifest: str,
        workdir: str | None = None,
        old_cluster: bool = False,
        env_overrides: dict[str, str | None] | None = None,
        missing_secrets: tuple[str, ...] = (),
    ) -> None:
        docs = [d for d in yaml.safe_load_all(manifest) if d]
        self.configmaps = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ConfigMap"}
        self.secrets = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Secret"}
        services = [d for d in docs if d["kind"] == "Service"]
        workloads = [d for d in docs if d["kind"] in ("Job", "StatefulSet")]
        if len(workloads) != 1 or len(services) != 1:
            raise ValueError("expected one Service and one Job/StatefulSet in the manifest")
        self.workload = workloads[0]
        self.kind = self.workload["kind"]
        self.name = self.workload["metadata"]["name"]
        spec = self.workload["spec"]
        self.nodes = spec["completions"] if self.kind == "Job" else spec["replicas"]
        self.template = spec["template"]
        pod_spec = self.template["spec"]
        self.service = pod_spec.get("subdomain") if self.kind == "Job" else spec["serviceName"]
        if self.service != services[0]["metadata"]["name"]:
            raise ValueError(f"pods' subdomain/serviceName {self.service!r} is not the Service")
        self.container = pod_spec["containers"][0]
        self.volumes = {v["name"]: v for v in pod_spec.get("volumes", [])}
        self.old_cluster = old_cluster  # StatefulSet pod-index label absent (Kubernetes < 1.28)
        self.env_overrides = env_overrides or {}  # None removes a variable (bad-env tests)
        self.missing_secrets = missing_secrets  # Secrets nobody created (the pods' optional mount is empty)
        self.run_uid = str(uuid.uuid4())
        self.revision = f"{self.name}-{uuid.uuid4().hex[:10]}"
        self.root = Path(tempfile.mkdtemp(prefix=f"kgen-pods-{self.name}-"))
        self.dns: set[int] = set()
        self._dns_lock = threading.Lock()
        self.workdir = workdir or str(self.root)
        self.pods = [Pod(self, i) for i in range(self.nodes)]
        self.retired: list[Pod] = []  # pods that were replaced (their logs stay readable)
        self._volume_dirs: dict[str, str] = {}

    # -- what the kubelet and cluster DNS provide ------------------------------------------
    def hosts_file(self, index: int) -> Path:
        """Pod `index`'s /etc/hosts: the cluster's DNS names plus its own hostname, as the kubelet
        writes it."""
        return self.root / f"hosts-{index}"

    def publish_dns(self, index: int) -> None:
        with self._dns_lock:
            self.dns.add(index)
            self.hosts_file(index).touch()
            lines = ["127.0.0.1 localhost"]
            for i in sorted(self.dns):
                short = f"{self.name}-{i}.{self.service}"
                lines.append(f"127.0.0.1 {short} {short}.{NAMESPACE}.svc.cluster.local")
            for i in sorted(self.dns):
                own = f"127.0.0.1 {self.name}-{i}\n"
                data = ("\n".join(lines) + "\n" + own).encode()
                # Rewrite in place: the running pods bind-mounted these inodes.
                with open(self.hosts_file(i), "r+b") as fh:
                    fh.seek(0)
                    fh.write(data)
                    fh.truncate()

    def labels(self, index: int) -> dict[str, str]:
        labels = dict(self.template["metadata"].get("labels", {}))
        if self.kind == "Job":
            labels.update(
                {
                    "batch.kubernetes.io/controller-uid": self.run_uid,
                    "controller-uid": self.run_uid,
                    "batch.kubernetes.io/job-name": self.name,
                    "job-name": self.name,
                    "batch.kubernetes.io/job-completion-index": str(index),
                }
            )
        else:
            labels.update(
                {
                    "controller-revision-hash": self.revision,
                    "statefulset.kubernetes.io/pod-name": f"{self.name}-{index}",
                }
            )
            if not self.old_cluster:
                labels["apps.kubernetes.io/pod-index"] = str(index)
        return labels

    def field_ref(self, path: str, index: int) -> str:
        m = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
        if m:
            if m.group(1) == "annotations":
                ann = {"batch.kubernetes.io/job-completion-index": str(index)} if self.kind == "Job" else {}
                return ann.get(m.group(2), "")
            return self.labels(index).get(m.group(2), "")
        simple = {
            "metadata.name": f"{self.name}-{index}",
            "metadata.namespace": NAMESPACE,
            "status.podIP": "127.0.0.1",
            "spec.nodeName": "localnode",
        }
        if path in simple:
            return simple[path]
        raise ValueError(f"harness does not know the downward-API field {path!r}")

    @staticmethod
    def expand(value: str, env: dict[str, str]) -> str:
        """Kubernetes $(VAR) expansion ($$ escapes; unknown references stay as they are)."""

        def sub(m: re.Match) -> str:
            if m.group(0) == "$$":
                return "$"
            return env.get(m.group(1), m.group(0))

        return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)", sub, value)

    def pod_env(self, index: int) -> dict[str, str]:
        bindir = os.path.dirname(sys.executable)
        env = {
            "PATH": f"{bindir}:/usr/local/bin:/usr/bin:/bin",
            "HOME": "/root",
            "HOSTNAME": f"{self.name}-{index}",
            "LANG": "C.UTF-8",
            # torch warns about numpy at import; keep the logs readable
            "PYTHONWARNINGS": "ignore",
        }
        if self.kind == "Job" and self.workload["spec"].get("completionMode") == "Indexed":
            env["JOB_COMPLETION_INDEX"] = str(index)
        for item in self.container.get("env", []):
            if "value" in item:
                env[item["name"]] = self.expand(str(item["value"]), env)
            elif "valueFrom" in item and "fieldRef" in item["valueFrom"]:
                env[item["name"]] = self.field_ref(item["valueFrom"]["fieldRef"]["fieldPath"], index)
            else:
                raise ValueError(f"harness does not support env item {item!r}")
        if "KGEN_HEALTH_GATE" not in env:  # the gate's own tests set it; the others run without (HEALTH_GATE)
            env["KGEN_HEALTH_GATE"] = HEALTH_GATE
        for key, value in self.env_overrides.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        return env

    def pod_mounts(self, index: int) -> dict[str, tuple[str, str]]:
        mounts = {}
        for vm in self.container.get("volumeMounts", []):
            vol = self.volumes[vm["name"]]
            path = vm["mountPath"]
            if "configMap" in vol:
                src = self._configmap_dir(vol)
                mounts[path] = ("ro" if vm.get("readOnly") else "rw", src)
            elif "secret" in vol:
                mounts[path] = ("ro", self._secret_dir(vol))  # Secret volumes are always read-only
            elif "emptyDir" in vol:
                ed = vol["emptyDir"] or {}
                if ed.get("medium") == "Memory":
                    mounts[path] = ("tmpfs", str(_quantity_bytes(ed.get("sizeLimit", "64Mi"))))
                else:
                    d = self.root / f"pod{index}-{vm['name']}"
                    d.mkdir(exist_ok=True)
                    mounts[path] = ("rw", str(d))
            else:
                raise ValueError(f"harness does not support volume {vol!r}")
        return mounts

    def shadow_mount_point(self, path: str, index: int) -> list[str]:
        return shadow_mount_steps(path, self.root, f"stash{index}")

    def _configmap_dir(self, vol: dict) -> str:
        cm_name = vol["configMap"]["name"]
        if cm_name in self._volume_dirs:
            return self._volume_dirs[cm_name]
        cm = self.configmaps[cm_name]
        d = self.root / f"cm-{cm_name}"
        d.mkdir()
        mode = vol["configMap"].get("defaultMode", 0o644)
        data = {k: base64.b64decode(v) for k, v in (cm.get("binaryData") or {}).items()}  # as the kubelet writes them
        data.update((k, v.encode()) for k, v in (cm.get("data") or {}).items())
        items = vol["configMap"].get("items") or [{"key": k, "path": k} for k in data]
        for item in items:
            f = d / item["path"]
            f.write_bytes(data[item["key"]])
            f.chmod(item.get("mode", mode))
        self._volume_dirs[cm_name] = str(d)
        return str(d)

    def _secret_dir(self, vol: dict) -> str:
        name = vol["secret"]["secretName"]
        if name in self._volume_dirs:
            return self._volume_dirs[name]
        if name not in self.secrets and name in self.missing_secrets and not vol["secret"].get("optional"):
            raise ValueError(f"harness: Secret {name!r} is missing and not optional: the pod would not start")
        if name not in self.secrets and name not in self.missing_secrets:  # made as `kgen submit` makes it
            import secrets as random_secrets

            value = base64.b64encode(random_secrets.token_hex(32).encode()).decode()
            self.secrets[name] = {"kind": "Secret", "metadata": {"name": name}, "data": {"secret": value}}
        d = self.root / f"secret-{name}"
        d.mkdir(mode=0o700)
        mode = vol["secret"].get("defaultMode", 0o644)
        for key, value in self.secrets.get(name, {}).get("data", {}).items():
            f = d / key
            f.write_bytes(base64.b64decode(value))
            f.chmod(mode)
        self._volume_dirs[name] = str(d)
        return str(d)

    def secret_file(self) -> str:
        """The run's secret as a file on the host (for a process outside the pods: --diagnose, --stop)."""
        vol = next(v for v in self.volumes.values() if "secret" in v)
        return os.path.join(self._secret_dir(vol), "secret")

    def host_env(self, index: int) -> dict[str, str]:
        """Pod `index`'s environment for a process run on the host, outside the pods ("a third shell")."""
        env = self.pod_env(index)
        env["MASTER_ADDR"] = "127.0.0.1"  # the pods' DNS names live in their own /etc/hosts
        if "KGEN_SECRET_FILE" in env:
            env["KGEN_SECRET_FILE"] = self.secret_file()
        return env

    # -- driving -----------------------------------------------------------------------------
    def start(self, *indexes: int) -> None:
        for i in indexes or range(self.nodes):
            while i >= len(self.pods):  # a pod beyond the rendered count (misconfiguration tests)
                self.pods.append(Pod(self, len(self.pods)))
            self.pods[i].start()

    def replace(self, index: int, delay: float = 0.0) -> Pod:
        """What the Job controller / kubelet does for a failed pod: a new pod with the same index
        (same DNS name), after `delay` seconds. The old pod must have exited."""
        old = self.pods[index]
        if old.running:
            raise RuntimeError(f"pod {old.name} is still running")
        if delay:
            time.sleep(delay)
        new = Pod(self, index, old.incarnation + 1)
        self.retired.append(old)
        self.pods[index] = new
        new.start()
        return new

    def wait_all(self, timeout: float, pods=None) -> list[int | None]:
        deadline = time.monotonic() + timeout
        pods = self.pods if pods is None else pods
        for pod in pods:
            if pod.proc is not None:
                pod.wait(max(0.0, deadline - time.monotonic()))
        return [p.returncode for p in pods]

    def wait_for_log(self, pattern: str, count: int, timeout: float, pods=None) -> bool:
        """Until `pattern` (regex) matched at least `count` times over the pods' logs."""
        rx = re.compile(pattern, re.MULTILINE)
        deadline = time.monotonic() + timeout
        pods = self.pods if pods is None else pods
        while time.monotonic() < deadline:
            if sum(len(rx.findall(p.log())) for p in pods) >= count:
                return True
            if all(p.returncode is not None for p in pods if p.proc is not None):
                return False
            time.sleep(0.1)
        return False

    def logs(self) -> str:
        return "\n".join(
            f"===== {p.name}.{p.incarnation} (exit {p.returncode}) =====\n{p.log()[-6000:]}"
            for p in self.retired + self.pods
            if p.proc is not None
        )

    def cleanup(self) -> None:
        for pod in self.retired + self.pods:
            pod.thaw()
            pod.kill()
        for pod in self.retired + self.pods:
            if pod.proc is not None:
                try:
                    pod.proc.wait(10)
                except subprocess.TimeoutExpired:
                    pod.proc.kill()
                    pod.proc.wait(5)
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc) -> None:
        self.cleanup()
