"""A kubelet stand-in for tests on a real control plane (cplab.py): fake nodes whose pods run as local processes.

What it does, as a kubelet does:
* registers its nodes (capacity and allocatable cpu, memory, pods, nvidia.com/gpu; labels; addresses; a Ready
  condition) and keeps them fresh: node Leases in kube-node-lease renewed every few seconds, the Ready
  condition's heartbeat rewritten now and then;
* watches the pods the real scheduler binds to its nodes and runs each one's (single) container as local
  processes, as tests/entrypoint/podharness.py does: own PID, mount and UTS namespaces; ConfigMap, Secret,
  emptyDir (memory: a tmpfs) and downwardAPI volumes; env from value, fieldRef, secretKeyRef,
  configMapKeyRef with `$(VAR)` expansion; /etc/hosts kept from the EndpointSlices of the pod's subdomain
  Service (a name resolves once the endpoint controller lists the pod, as cluster DNS does);
* writes back pod status: phase, conditions, podIP, container states with exit codes and reasons,
  restart counts (restartPolicy Always/OnFailure restart in place with the kubelet's 10 s doubling back-off),
  termination messages (FallbackToLogsOnError: the log's tail when the message file is empty and it failed);
* on a pod's deletion: SIGTERM to the container, SIGKILL after the grace period, then the final delete;
* serves /containerLogs/<ns>/<pod>/<container> (follow, tailLines, sinceSeconds, timestamps, previous, limitBytes)
  over HTTPS on the nodes' kubelet port, so `kubectl logs` and `kgen logs` go through the API server.

Not simulated: images, probes, cgroups, resources, securityContext, init or sidecar containers, networks (every
pod is 127.0.0.1, as in podharness).
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import http.server
import json
import os
import re
import shlex
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "entrypoint"))

from podharness import _quantity_bytes, ns_pids, shadow_mount_steps, unshare_argv  # noqa: E402

LEASE_EVERY = 5.0
INERT_PREFIX = "inert-"  # namespaces whose pods the stand-in never starts (tests of the objects alone)
BACKOFF_FIRST, BACKOFF_MAX = 10.0, 300.0


def now_iso(t: float | None = None) -> str:
    return dt.datetime.fromtimestamp(time.time() if t is None else t, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def stamp(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z"


def expand(value: str, env: dict[str, str]) -> str:
    """Kubernetes $(VAR) expansion ($$ escapes; unknown references stay as they are)."""

    def sub(m: re.Match) -> str:
        return "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0))

    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)", sub, value)


class NotReady(Exception):
    """A pod cannot start yet (a Secret or ConfigMap it needs is missing): retried, as the kubelet does."""


class Container:
    """One run of a pod's container: a process tree in namespaces of its own, its output timestamped."""

    def __init__(self, pod: RunningPod, attempt: int) -> None:
        self.pod, self.attempt = pod, attempt
        self.log_path = pod.dir / f"log.{attempt}"
        self.log_path.touch()
        self.proc: subprocess.Popen | None = None
        self.init_pid: int | None = None
        self.started = self.finished = 0.0
        self.exit_code: int | None = None
        self.sent = 0  # the last signal the stand-in sent to PID 1
        self.done = threading.Event()

    def start(self, argv: list[str], env: dict[str, str], setup: list[str], cwd: str) -> None:
        self.env, self.cwd = env, cwd  # what an exec into this container runs with
        script = " && ".join([*setup, "exec " + " ".join(shlex.quote(a) for a in argv)])
        self.started = time.time()
        self.proc = subprocess.Popen(
            unshare_argv(script),
            env=env,
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        self.init_pid = self._find_init()
        threading.Thread(target=self._pump, daemon=True).start()

    def _find_init(self) -> int | None:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and self.proc is not None:
            try:
                kids = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
                if kids:
                    return int(kids[0])
            except OSError:
                pass
            if self.proc.poll() is not None:
                return None
            time.sleep(0.01)
        return None

    def _pump(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        with open(self.log_path, "ab") as out:
            for line in iter(self.proc.stdout.readline, b""):
                out.write(stamp(time.time()).encode() + b" " + (line if line.endswith(b"\n") else line + b"\n"))
                out.flush()
        rc = self.proc.wait()
        self.finished = time.time()
        self.exit_code = 128 - rc if rc < 0 else rc
        if rc == 1 and self.sent and self.lines()[-1:] and b"unshare: sigprocmask" in self.lines()[-1]:
            # util-linux unshare --fork could not re-raise the signal that killed the pod's PID 1 and exited 1:
            # the container's status is that signal's (what a runtime reports: 128 + N)
            self.exit_code = 128 + self.sent
        self.done.set()
        self.pod.kubelet.kick(self.pod)

    def signal(self, sig: int) -> None:
        self.sent = sig
        if self.init_pid and not self.done.is_set():
            try:
                os.kill(self.init_pid, sig)
            except OSError:
                pass

    def pids(self) -> list[int]:
        return ns_pids(self.init_pid) if self.init_pid and not self.done.is_set() else []

    def lines(self) -> list[bytes]:
        try:
            return self.log_path.read_bytes().splitlines(keepends=True)
        except OSError:
            return []


class RunningPod:
    def __init__(self, kubelet: KubeletStub, pod: dict) -> None:
        self.kubelet = kubelet
        self.obj = pod
        self.ns, self.name, self.uid = pod["metadata"]["namespace"], pod["metadata"]["name"], pod["metadata"]["uid"]
        self.dir = Path(tempfile.mkdtemp(prefix=f"pod-{self.name}-", dir=kubelet.root))
        self.hosts = self.dir / "hosts"
        self.hosts.write_text("127.0.0.1 localhost\n")
        self.containers: list[Container] = []
        self.restarts = 0
        self.next_start = 0.0
        self.deleting = False
        self.gone = False
        self.final_phase: str | None = None
        self.started_at = time.time()  # when the stand-in first saw it bound to its node
        self.failed_at = 0.0  # when it wrote the final phase
        self.lock = threading.Lock()
        self.message = ""
        kubelet.pod_count += 1  # a pod IP of its own: EndpointSlices refuse loopback addresses (every name
        self.ip = f"10.244.{kubelet.pod_count // 250}.{kubelet.pod_count % 250 + 2}"  # still maps to 127.0.0.1)

    @property
    def spec(self) -> dict:
        return self.obj["spec"]

    @property
    def current(self) -> Container | None:
        return self.containers[-1] if self.containers else None


class KubeletStub:
    def __init__(
        self,
        cp,
        nodes: int = 4,
        gpus: int = 8,
        cpu: str = "64",
        memory: str = "512Gi",
        labels: dict[str, str] | None = None,
        prefix: str = "node",
    ) -> None:
        self.cp = cp
        self.nodes = [f"{prefix}-{i}" for i in range(nodes)]
        self.gpus, self.cpu, self.memory = gpus, cpu, memory
        self.labels = labels or {}
        self.port = cp.kubelet_port
        self.root = Path(tempfile.mkdtemp(prefix="kgen-kubelet-"))
        self.pods: dict[str, RunningPod] = {}  # uid -> pod
        self.pod_count = 0
        self.lock = threading.Lock()
        self.stop_ev = threading.Event()
        self.work = threading.Condition()
        self.dirty: set[str] = set()
        self.threads: list[threading.Thread] = []
        self.httpd: http.server.ThreadingHTTPServer | None = None
        self.errors: list[str] = []

    # -- nodes -------------------------------------------------------------------------------------------
    def node_status(self) -> dict:
        res = {"cpu": self.cpu, "memory": self.memory, "pods": "110", "ephemeral-storage": "1Ti"}
        if self.gpus:
            res["nvidia.com/gpu"] = str(self.gpus)
        t = now_iso()
        return {
            "capacity": res,
            "allocatable": res,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "kubelet stand-in",
                    "lastHeartbeatTime": t,
                    "lastTransitionTime": t,
                },
                *(
                    {
                        "type": c,
                        "status": "False",
                        "reason": "KubeletHasSufficient",
                        "message": "",
                        "lastHeartbeatTime": t,
                        "lastTransitionTime": t,
                    }
                    for c in ("MemoryPressure", "DiskPressure", "PIDPressure")
                ),
            ],
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.port}},
            # what a 1.37 kubelet declares (its ExtendWebSocketsToKubelet gate, beta, on): the API server then passes
            # an exec's WebSocket on to the kubelet instead of translating it to SPDY (serve_exec)
            "declaredFeatures": ["ExtendWebSocketsToKubelet"],
            "nodeInfo": {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "kubeletVersion": "v1.37.2",
                "containerRuntimeVersion": "kgen-stub://1",
                "kernelVersion": os.uname().release,
                "osImage": "kgen test",
                "bootID": "",
                "machineID": "",
                "systemUUID": "",
                "kubeProxyVersion": "",
            },
        }

    def register(self) -> None:
        for n in self.nodes:
            labels = {
                "kubernetes.io/hostname": n,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                **self.labels,
            }
            code, out = self.cp.request(
                "POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": n, "labels": labels}}
            )
            if code not in (201, 409):
                raise RuntimeError(f"node {n}: {code} {out}")
            self._node_status(n)
            self._renew_lease(n)

    def _node_status(self, n: str) -> None:
        code, out = self.cp.request(
            "PATCH",
            f"/api/v1/nodes/{n}/status",
            {"status": self.node_status()},
            content_type="application/strategic-merge-patch+json",
        )
        if code != 200:
            self.errors.append(f"node status {n}: {code} {out}")

    def _renew_lease(self, n: str) -> None:
        path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{n}"
        t = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": n},
            "spec": {"holderIdentity": n, "leaseDurationSeconds": 40, "renewTime": t},
        }
        code, _ = self.cp.request(
            "PATCH", path + "?fieldManager=kubelet&force=true", body, content_type="application/apply-patch+yaml"
        )
        if code not in (200, 201):
            self.errors.append(f"lease {n}: {code}")

    def _heartbeat(self) -> None:
        beats = 0
        while not self.stop_ev.wait(LEASE_EVERY):
            beats += 1
            for n in self.nodes:
                try:
                    self._renew_lease(n)
                    if beats % 6 == 0:
                        self._node_status(n)
                except OSError:
                    pass

    # -- lifecycle ---------------------------------------------------------------------------------------
    def start(self) -> None:
        self.register()
        self._serve()
        for target in (self._heartbeat, self._watch, self._worker, self._dns):
            t = threading.Thread(target=target, daemon=True)
            t.start()
            self.threads.append(t)

    def stop(self) -> None:
        self.stop_ev.set()
        with self.work:
            self.work.notify_all()
        with self.lock:
            pods = list(self.pods.values())
        for p in pods:
            for c in p.containers:
                c.signal(signal.SIGKILL)
        for p in pods:
            for c in p.containers:
                if c.proc is not None:
                    try:
                        c.proc.wait(10)
                    except subprocess.TimeoutExpired:
                        c.proc.kill()
        if self.httpd is not None:
            self.httpd.shutdown()
            self.httpd.server_close()
        shutil.rmtree(self.root, ignore_errors=True)

    def kick(self, pod: RunningPod) -> None:
        with self.work:
            self.dirty.add(pod.uid)
            self.work.notify_all()

    def find(self, ns: str, name: str) -> RunningPod | None:
        with self.lock:
            found = [p for p in self.pods.values() if p.ns == ns and p.name == name and not p.gone]
            return found[-1] if found else None

    # -- the pod watch -----------------------------------------------------------------------------------
    def _watch(self) -> None:
        rv = ""
        while not self.stop_ev.is_set():
            try:
                if not rv:
                    code, lst = self.cp.request("GET", "/api/v1/pods")
                    if code != 200:
                        time.sleep(1)
                        continue
                    rv = lst["metadata"]["resourceVersion"]
                    for item in lst["items"]:
                        self._observe("ADDED", item)
                rv = self._stream(rv)
            except Exception as exc:  # a dropped watch: list again
                self.errors.append(f"watch: {exc!r}")
                rv = ""
                time.sleep(0.5)

    def _stream(self, rv: str) -> str:
        import urllib.request

        url = f"{self.cp.server}/api/v1/pods?watch=1&allowWatchBookmarks=true&resourceVersion={rv}&timeoutSeconds=240"
        req = urllib.request.Request(url, headers={"Accept": "application/json"})
        with urllib.request.urlopen(req, context=self.cp.ssl_context(), timeout=300) as r:
            for line in r:
                if self.stop_ev.is_set():
                    return rv
                ev = json.loads(line)
                if ev["type"] == "ERROR":
                    return ""  # 410 Gone: list again
                obj = ev["object"]
                rv = obj["metadata"].get("resourceVersion", rv)
                if ev["type"] != "BOOKMARK":
                    self._observe(ev["type"], obj)
        return rv

    def _observe(self, kind: str, obj: dict) -> None:
        if obj["spec"].get("nodeName") not in self.nodes:
            return
        meta = obj["metadata"]
        if meta["namespace"].startswith(INERT_PREFIX):  # objects only: pods stay Pending, deleted when asked
            if meta.get("deletionTimestamp") and kind != "DELETED":
                self.cp.request("DELETE", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                                {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0})  # fmt: skip
            return
        uid = obj["metadata"]["uid"]
        with self.lock:
            p = self.pods.get(uid)
            if kind == "DELETED":
                if p is not None:
                    p.deleting = True
                    p.gone = True
            elif p is None:
                if obj.get("status", {}).get("phase") in ("Succeeded", "Failed"):
                    return
                p = self.pods[uid] = RunningPod(self, obj)
            else:
                p.obj = obj
            if obj["metadata"].get("deletionTimestamp") and p is not None:
                p.deleting = True
        if p is not None:
            self.kick(p)

    def _worker(self) -> None:
        while not self.stop_ev.is_set():
            with self.work:
                if not self.dirty:
                    self.work.wait(0.5)
                uids, self.dirty = set(self.dirty), set()
            with self.lock:
                pods = [self.pods[u] for u in uids if u in self.pods]
                pods += [p for p in self.pods.values() if p.next_start and p.next_start <= time.time()]
            for p in set(pods):
                if p.gone and not p.deleting:
                    continue
                try:
                    self._sync(p)
                except Exception as exc:
                    self.errors.append(f"sync {p.name}: {exc!r}")

    # -- one pod -----------------------------------------------------------------------------------------
    def _sync(self, p: RunningPod) -> None:
        with p.lock:
            c = p.current
            if p.deleting:
                self._terminate(p)
                return
            if p.final_phase:
                return
            running = c is not None and not c.done.is_set()
            if running:
                if not p.obj.get("status", {}).get("containerStatuses"):
                    self._write_status(p)
                return
            if c is not None:  # it exited
                policy = p.spec.get("restartPolicy", "Always")
                if policy == "Never" or (policy == "OnFailure" and c.exit_code == 0):
                    p.final_phase = "Succeeded" if c.exit_code == 0 else "Failed"
                    p.next_start = 0.0
                    self._write_status(p)
                    p.failed_at = time.time()
                    return
                if not p.next_start:
                    delay = 0.0 if p.restarts == 0 else min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** (p.restarts - 1))
                    p.next_start = time.time() + delay
                    self._write_status(p)
                if time.time() < p.next_start:
                    return
                p.restarts += 1
            p.next_start = 0.0
            try:
                self._start_container(p)
            except NotReady as exc:
                p.message = str(exc)
                p.next_start = time.time() + 1.0
                self._write_status(p, waiting=("ContainerCreating", str(exc)))
                return
            self._write_status(p)

    def _terminate(self, p: RunningPod) -> None:
        c = p.current
        if c is not None and not c.done.is_set():
            if not getattr(p, "term_sent", 0):
                grace = p.obj["metadata"].get("deletionGracePeriodSeconds")
                grace = p.spec.get("terminationGracePeriodSeconds", 30) if grace is None else grace
                p.term_sent = time.time()  # type: ignore[attr-defined]
                p.term_deadline = time.time() + grace  # type: ignore[attr-defined]
                c.signal(signal.SIGTERM)
            if time.time() >= p.term_deadline:  # type: ignore[attr-defined]
                c.signal(signal.SIGKILL)
            p.next_start = time.time() + 0.2  # look again
            return
        p.next_start = 0.0
        if p.gone:
            return
        if not p.final_phase:
            p.final_phase = "Failed" if c is None or c.exit_code != 0 else "Succeeded"
            if p.spec.get("restartPolicy", "Always") == "Always":
                p.final_phase = "Failed" if c is None or c.exit_code != 0 else "Succeeded"
            self._write_status(p)
        code, _ = self.cp.request(
            "DELETE",
            f"/api/v1/namespaces/{p.ns}/pods/{p.name}",
            {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0, "preconditions": {"uid": p.uid}},
        )
        if code in (200, 404, 409):
            p.gone = True  # kept (logs, timings) until the stand-in stops

    # -- what a container gets ---------------------------------------------------------------------------
    def _get(self, path: str) -> dict | None:
        code, out = self.cp.request("GET", path)
        return out if code == 200 and isinstance(out, dict) else None

    def _field(self, p: RunningPod, path: str) -> str:
        meta = p.obj["metadata"]
        m = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
        if m:
            return (meta.get(m.group(1)) or {}).get(m.group(2), "")
        simple = {
            "metadata.name": meta["name"],
            "metadata.namespace": meta["namespace"],
            "metadata.uid": meta["uid"],
            "spec.nodeName": p.spec.get("nodeName", ""),
            "spec.serviceAccountName": p.spec.get("serviceAccountName", ""),
            "status.podIP": p.ip,
            "status.hostIP": "127.0.0.1",
        }
        if path in simple:
            return simple[path]
        raise ValueError(f"kubelet stand-in does not know the downward-API field {path!r}")

    def _key_ref(self, p: RunningPod, ref: dict, kind: str) -> str | None:
        obj = self._get(f"/api/v1/namespaces/{p.ns}/{kind}/{ref['name']}")
        data = (obj or {}).get("data") or {}
        if ref["key"] not in data:
            if ref.get("optional"):
                return None
            raise NotReady(f"{kind[:-1]} {ref['name']} (key {ref['key']}) not found")
        value = data[ref["key"]]
        return base64.b64decode(value).decode() if kind == "secrets" else value

    def _env(self, p: RunningPod, container: dict) -> dict[str, str]:
        bindir = os.path.dirname(sys.executable)
        env = {
            "PATH": f"{bindir}:/usr/local/bin:/usr/bin:/bin",
            "HOME": "/root",
            "HOSTNAME": p.spec.get("hostname") or p.name,
            "LANG": "C.UTF-8",
            "PYTHONWARNINGS": "ignore",
        }
        idx = (p.obj["metadata"].get("annotations") or {}).get("batch.kubernetes.io/job-completion-index")
        if idx is not None:
            env["JOB_COMPLETION_INDEX"] = idx  # the Job controller's env var is in the spec; kept in case
        for item in container.get("env", []):
            if "value" in item:
                env[item["name"]] = expand(str(item["value"]), env)
                continue
            src = item.get("valueFrom", {})
            if "fieldRef" in src:
                env[item["name"]] = self._field(p, src["fieldRef"]["fieldPath"])
            elif "secretKeyRef" in src:
                v = self._key_ref(p, src["secretKeyRef"], "secrets")
                if v is not None:
                    env[item["name"]] = v
            elif "configMapKeyRef" in src:
                v = self._key_ref(p, src["configMapKeyRef"], "configmaps")
                if v is not None:
                    env[item["name"]] = v
            elif "resourceFieldRef" in src:
                env[item["name"]] = "1"
            elif not item.get("valueFrom"):
                env[item["name"]] = ""
            else:
                raise ValueError(f"kubelet stand-in does not support env item {item!r}")
        return env

    def _volume_dir(self, p: RunningPod, vol: dict) -> str | None:
        d = p.dir / f"vol-{vol['name']}"
        if "configMap" in vol or "secret" in vol:
            is_secret = "secret" in vol
            src = vol["secret"] if is_secret else vol["configMap"]
            name = src["secretName"] if is_secret else src["name"]
            obj = self._get(f"/api/v1/namespaces/{p.ns}/{'secrets' if is_secret else 'configmaps'}/{name}")
            if obj is None and not src.get("optional"):
                raise NotReady(f"{'secret' if is_secret else 'configmap'} {name!r} not found")
            # A secret's data and a ConfigMap's binaryData are base64; a ConfigMap's data is text.
            data = {k: base64.b64decode(v) for k, v in ((obj or {}).get("binaryData") or {}).items()}
            for k, v in ((obj or {}).get("data") or {}).items():
                data[k] = base64.b64decode(v) if is_secret else v.encode()
            d.mkdir(mode=0o755, exist_ok=True)
            mode = src.get("defaultMode", 0o644)
            items = src.get("items") or [{"key": k, "path": k} for k in data]
            for it in items:
                if it["key"] not in data:
                    continue
                f = d / it["path"]
                f.parent.mkdir(parents=True, exist_ok=True)
                f.write_bytes(data[it["key"]])
                f.chmod(it.get("mode", mode))
            return str(d)
        if "emptyDir" in vol:
            d.mkdir(exist_ok=True)
            return str(d)
        if "downwardAPI" in vol:
            d.mkdir(exist_ok=True)
            for it in vol["downwardAPI"].get("items", []):
                if "fieldRef" in it:
                    path = it["fieldRef"]["fieldPath"]
                    if path in ("metadata.labels", "metadata.annotations"):
                        kv = p.obj["metadata"].get(path.split(".")[1]) or {}
                        text = "\n".join(f"{k}={json.dumps(v)}" for k, v in sorted(kv.items()))
                    else:
                        text = self._field(p, path)
                    (d / it["path"]).write_text(text)
            return str(d)
        if "projected" in vol:
            return None  # the service-account token: not mounted (no workload of kgen's reads it)
        raise ValueError(f"kubelet stand-in does not support volume {vol!r}")

    def _start_container(self, p: RunningPod) -> None:
        spec = p.spec
        container = spec["containers"][0]
        env = self._env(p, container)
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        tag = f"s{len(p.containers)}"
        hostname = spec.get("hostname") or p.name
        self._write_hosts(p)
        setup = [f"hostname {shlex.quote(hostname)}", f"mount --bind {shlex.quote(str(p.hosts))} /etc/hosts"]
        for vm in container.get("volumeMounts", []):
            vol = volumes[vm["name"]]
            src = self._volume_dir(p, vol)
            if src is None:
                continue
            path = vm["mountPath"]
            q = shlex.quote(path)
            if not os.path.isdir(path):
                setup += shadow_mount_steps(path, p.dir, tag)
            ed = vol.get("emptyDir") or {}
            if "emptyDir" in vol and ed.get("medium") == "Memory":
                setup.append(f"mount -t tmpfs -o size={_quantity_bytes(ed.get('sizeLimit', '64Mi'))} tmpfs {q}")
                continue
            setup.append(f"mount --bind {shlex.quote(src)} {q}")
            if vm.get("readOnly") or "secret" in vol or "configMap" in vol or "downwardAPI" in vol:
                setup.append(f"mount -o remount,bind,ro {q}")
        argv = [expand(a, env) for a in container.get("command", []) + container.get("args", [])]
        c = Container(p, len(p.containers))
        p.containers.append(c)
        c.start(argv, env, setup, cwd=container.get("workingDir") or str(p.dir))

    # -- /etc/hosts from EndpointSlices ------------------------------------------------------------------
    def _write_hosts(self, p: RunningPod) -> None:
        spec = p.spec
        host = spec.get("hostname") or p.name
        sub = spec.get("subdomain")
        lines = ["127.0.0.1 localhost"]
        if sub:
            code, lst = self.cp.request(
                "GET",
                f"/apis/discovery.k8s.io/v1/namespaces/{p.ns}/endpointslices?labelSelector="
                + urllib.parse.quote(f"kubernetes.io/service-name={sub}"),
            )
            names = set()
            if code == 200:
                for s in lst["items"]:
                    for ep in s.get("endpoints") or []:
                        if ep.get("hostname") and (ep.get("conditions") or {}).get("ready", True):
                            names.add(ep["hostname"])
            for h in sorted(names):
                lines.append(f"127.0.0.1 {h}.{sub} {h}.{sub}.{p.ns}.svc.cluster.local")
            lines.append(f"127.0.0.1 {host}.{sub}.{p.ns}.svc.cluster.local {host}")
        else:
            lines.append(f"127.0.0.1 {host}")
        data = ("\n".join(lines) + "\n").encode()
        if p.hosts.read_bytes() != data:
            with open(p.hosts, "r+b") as fh:  # in place: running pods bind-mounted this inode
                fh.seek(0)
                fh.write(data)
                fh.truncate()

    def _dns(self) -> None:
        while not self.stop_ev.wait(0.3):
            with self.lock:
                pods = [p for p in self.pods.values() if p.current is not None and not p.current.done.is_set()]
            for p in pods:
                try:
                    self._write_hosts(p)
                except (OSError, ValueError, KeyError):
                    pass

    # -- status ------------------------------------------------------------------------------------------
    def _write_status(self, p: RunningPod, waiting: tuple[str, str] | None = None) -> None:
        container = p.spec["containers"][0]
        c = p.current
        cs: dict = {
            "name": container["name"],
            "image": container.get("image", ""),
            "imageID": "",
            "containerID": f"stub://{p.uid}-{len(p.containers)}",
            "restartCount": p.restarts,
            "started": False,
            "ready": False,
        }
        prev = p.containers[-2] if len(p.containers) > 1 else None
        if prev is not None and prev.done.is_set():
            cs["lastState"] = {"terminated": self._terminated(p, prev)}
        phase = "Pending"
        if waiting:
            cs["state"] = {"waiting": {"reason": waiting[0], "message": waiting[1]}}
        elif c is None:
            cs["state"] = {"waiting": {"reason": "ContainerCreating"}}
        elif not c.done.is_set():
            cs["state"] = {"running": {"startedAt": now_iso(c.started)}}
            cs["started"] = cs["ready"] = True
            phase = "Running"
        elif p.final_phase:
            cs["state"] = {"terminated": self._terminated(p, c)}
            phase = p.final_phase
        else:  # waiting to restart
            cs["lastState"] = {"terminated": self._terminated(p, c)}
            cs["state"] = {
                "waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": f"back-off restarting failed container {container['name']}",
                }
            }
            phase = "Running"
        ready = "True" if cs["ready"] else "False"
        t = now_iso()
        conds = [
            {"type": "PodReadyToStartContainers", "status": "True", "lastTransitionTime": t},
            {"type": "Initialized", "status": "True", "lastTransitionTime": t},
            {"type": "Ready", "status": ready, "lastTransitionTime": t},
            {"type": "ContainersReady", "status": ready, "lastTransitionTime": t},
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": t},
        ]
        status = {
            "phase": phase,
            "conditions": conds,
            "hostIP": "127.0.0.1",
            "hostIPs": [{"ip": "127.0.0.1"}],
            "podIP": p.ip,
            "podIPs": [{"ip": p.ip}],
            "startTime": now_iso(p.started_at),
            "containerStatuses": [cs],
            "qosClass": p.obj.get("status", {}).get("qosClass", "Burstable"),
        }
        # keep conditions other writers own (DisruptionTarget, the scheduler's)
        theirs = [
            c for c in p.obj.get("status", {}).get("conditions") or [] if c["type"] not in {x["type"] for x in conds}
        ]
        status["conditions"] += theirs
        code, out = self.cp.request(
            "PATCH",
            f"/api/v1/namespaces/{p.ns}/pods/{p.name}/status",
            {"metadata": {"uid": p.uid}, "status": status},
            content_type="application/strategic-merge-patch+json",
        )
        if code == 200 and isinstance(out, dict):
            p.obj = out
        elif code != 404:
            self.errors.append(f"status {p.name}: {code} {str(out)[:300]}")

    def _terminated(self, p: RunningPod, c: Container) -> dict:
        container = p.spec["containers"][0]
        code = c.exit_code if c.exit_code is not None else 137
        t: dict = {
            "exitCode": code,
            "reason": "Completed" if code == 0 else ("Error" if code < 128 else "Error"),
            "startedAt": now_iso(c.started),
            "finishedAt": now_iso(c.finished),
            "containerID": f"stub://{p.uid}-{c.attempt + 1}",
        }
        if code > 128:
            t["signal"] = code - 128
        msg = self._termination_message(p, c, container)
        if msg:
            t["message"] = msg
        return t

    def _termination_message(self, p: RunningPod, c: Container, container: dict) -> str:
        if container.get("terminationMessagePolicy") == "FallbackToLogsOnError" and c.exit_code:
            lines = [ln.split(b" ", 1)[1] if b" " in ln else ln for ln in c.lines()[-80:]]
            return b"".join(lines)[-2048:].decode(errors="replace")
        return ""

    # -- the kubelet API: container logs -----------------------------------------------------------------
    def _serve(self) -> None:
        kubelet = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                u = urllib.parse.urlsplit(self.path)
                parts = u.path.strip("/").split("/")
                if len(parts) == 4 and parts[0] == "exec":
                    kubelet.serve_exec(self, parts[1], parts[2], parts[3], urllib.parse.parse_qsl(u.query))
                    return
                if len(parts) != 4 or parts[0] != "containerLogs":
                    self._reply(404, b"not found\n")
                    return
                q = dict(urllib.parse.parse_qsl(u.query))
                kubelet.serve_logs(self, parts[1], parts[2], parts[3], q)

            def _reply(self, code: int, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        httpd = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        httpd.daemon_threads = True
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(self.cp.pki / "kubelet.crt"), str(self.cp.pki / "kubelet.key"))
        ctx.load_verify_locations(str(self.cp.pki / "ca.crt"))
        ctx.verify_mode = ssl.CERT_REQUIRED  # only the API server (its kubelet client certificate)
        httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
        self.httpd = httpd
        t = threading.Thread(target=httpd.serve_forever, daemon=True)
        t.start()
        self.threads.append(t)

    def serve_logs(self, h, ns: str, name: str, container: str, q: dict[str, str]) -> None:
        p = self.find(ns, name)
        if p is None or not p.containers:
            body = f'container "{container}" in pod "{name}" is waiting to start\n'.encode()
            h._reply(400 if p is not None else 404, body)
            return
        previous = q.get("previous") in ("true", "1")
        if previous:
            if len(p.containers) < 2:
                h._reply(400, f'previous terminated container "{container}" in pod "{name}" not found\n'.encode())
                return
            c = p.containers[-2]
        else:
            c = p.containers[-1]
        ts = q.get("timestamps") in ("true", "1")
        follow = q.get("follow") in ("true", "1") and not previous
        since = float(q["sinceSeconds"]) if "sinceSeconds" in q else None
        limit = int(q["limitBytes"]) if "limitBytes" in q else None
        tail = int(q["tailLines"]) if "tailLines" in q else None
        h.send_response(200)
        h.send_header("Content-Type", "text/plain")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        sent = 0

        def out(lines: list[bytes]) -> bool:
            nonlocal sent
            chunk = b""
            for ln in lines:
                stamp_, _, text = ln.partition(b" ")
                if since is not None:
                    try:
                        t = dt.datetime.strptime(stamp_[:26].decode(), "%Y-%m-%dT%H:%M:%S.%f").replace(
                            tzinfo=dt.timezone.utc
                        )
                        if t.timestamp() < time.time() - since:
                            continue
                    except ValueError:
                        pass
                chunk += ln if ts else text
            if limit is not None:
                chunk = chunk[: max(0, limit - sent)]
            if chunk:
                h.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                h.wfile.flush()
                sent += len(chunk)
            return limit is None or sent < limit

        try:
            lines = c.lines()
            seen = len(lines)
            if tail is not None:
                lines = lines[-tail:] if tail > 0 else []
            more = out(lines)
            while follow and more and not self.stop_ev.is_set():
                done = c.done.is_set()
                lines = c.lines()
                if len(lines) > seen:
                    more = out(lines[seen:])
                    seen = len(lines)
                elif done:
                    break
                else:
                    time.sleep(0.1)
            h.wfile.write(b"0\r\n\r\n")
            h.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
            pass

    # -- the kubelet API: exec ---------------------------------------------------------------------------
    # Since 1.36 the API server passes an exec's WebSocket upgrade on to the kubelet (ExtendWebSocketsToKubelet):
    # the remote-command protocol of channel.k8s.io, one binary frame per write, its first byte the stream
    # (1 stdout, 2 stderr, 3 the error stream: a metav1.Status when the command has ended). The command runs in
    # the container's namespaces (nsenter into its PID 1's PID, mount and UTS namespaces) with its environment.
    WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
    EXEC_PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")

    @staticmethod
    def ws_frame(payload: bytes, opcode: int = 2) -> bytes:
        n = len(payload)
        head = bytes([0x80 | opcode])
        if n < 126:
            head += bytes([n])
        elif n < 65536:
            head += bytes([126]) + n.to_bytes(2, "big")
        else:
            head += bytes([127]) + n.to_bytes(8, "big")
        return head + payload

    def serve_exec(self, h, ns: str, name: str, container: str, q: list[tuple[str, str]]) -> None:
        command = [v for k, v in q if k == "command"]
        offered = [x.strip() for x in h.headers.get("Sec-WebSocket-Protocol", "").split(",")]
        chosen = next((x for x in self.EXEC_PROTOCOLS if x in offered), None)
        if h.headers.get("Upgrade", "").lower() != "websocket" or chosen is None:
            h._reply(
                400, f"the kubelet stand-in serves exec over WebSocket ({', '.join(self.EXEC_PROTOCOLS)})\n".encode()
            )
            return
        p = self.find(ns, name)
        c = p.containers[-1] if p is not None and p.containers else None
        if c is None or c.done.is_set() or not c.init_pid or not command:
            h._reply(400, f'container "{container}" in pod "{name}" is not running\n'.encode())
            return
        key = h.headers.get("Sec-WebSocket-Key", "")
        accept = base64.b64encode(hashlib.sha1((key + self.WS_GUID).encode()).digest()).decode()
        h.send_response(101)
        h.send_header("Upgrade", "websocket")
        h.send_header("Connection", "Upgrade")
        h.send_header("Sec-WebSocket-Accept", accept)
        h.send_header("Sec-WebSocket-Protocol", chosen)
        h.end_headers()
        h.close_connection = True
        lock = threading.Lock()

        def send(channel: int, data: bytes) -> None:
            with lock:
                h.wfile.write(self.ws_frame(bytes([channel]) + data))
                h.wfile.flush()

        argv = ["nsenter", "-t", str(c.init_pid), "-m", "-p", "-u", f"--wd={c.cwd}", "--", *command]
        try:
            proc = subprocess.Popen(argv, env=c.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE)  # fmt: skip
        except OSError as exc:
            status = {"status": "Failure", "message": str(exc), "reason": "InternalError"}
        else:

            def pump(stream, channel: int) -> None:
                for block in iter(lambda: stream.read1(65536), b""):
                    send(channel, block)

            pumps = [threading.Thread(target=pump, args=(s_, ch), daemon=True)
                     for s_, ch in ((proc.stdout, 1), (proc.stderr, 2))]  # fmt: skip
            for t in pumps:
                t.start()
            try:
                rc = proc.wait(timeout=600)
            except subprocess.TimeoutExpired:
                proc.kill()
                rc = proc.wait()
            for t in pumps:
                t.join(5)
            status = (
                {"status": "Success"}
                if rc == 0
                else {
                    "status": "Failure",
                    "message": f"command terminated with non-zero exit code: exit status {rc}",
                    "reason": "NonZeroExitCode",
                    "details": {"causes": [{"reason": "ExitCode", "message": str(rc)}]},
                }
            )
        try:
            send(3, json.dumps({"metadata": {}, **status}).encode())
            with lock:
                h.wfile.write(self.ws_frame((1000).to_bytes(2, "big"), opcode=8))
                h.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
            pass

    # -- test helpers ------------------------------------------------------------------------------------
    def running(self, ns: str = "default", prefix: str = "") -> list[RunningPod]:
        with self.lock:
            return [
                p
                for p in self.pods.values()
                if p.ns == ns
                and p.name.startswith(prefix)
                and not p.gone
                and p.current is not None
                and not p.current.done.is_set()
            ]

    def history(self, ns: str, prefix: str = "") -> list[RunningPod]:
        """Every pod of `ns` the stand-in ran (deleted ones included), in the order it first saw them."""
        with self.lock:
            pods = [p for p in self.pods.values() if p.ns == ns and p.name.startswith(prefix)]
        return sorted(pods, key=lambda p: p.started_at)

    def logs(self, ns: str, prefix: str = "") -> str:
        """Every container's output of those pods (no timestamps), pods in the order first seen."""
        return "".join(
            b"".join(ln.partition(b" ")[2] for ln in c.lines()).decode(errors="replace")
            for p in self.history(ns, prefix)
            for c in p.containers
        )

    def kill(self, ns: str, name: str, sig: int = signal.SIGKILL) -> None:
        p = self.find(ns, name)
        if p is None or p.current is None:
            raise LookupError(f"no running pod {ns}/{name}")
        p.current.signal(sig)

    def all_logs(self, tail: int = 4000) -> str:
        with self.lock:
            pods = list(self.pods.values())
        return "\n".join(
            f"===== {p.ns}/{p.name} run {c.attempt} (exit {c.exit_code}) =====\n"
            + b"".join(ln.partition(b" ")[2] for ln in c.lines()).decode(errors="replace")[-tail:]
            for p in pods
            for c in p.containers
        )
