"""A real Kubernetes control plane on loopback for tests: etcd, kube-apiserver, kube-controller-manager and
kube-scheduler (built from source by controlplane/build.sh into a cache keyed by version), with a private PKI
made by the openssl CLI and one kubeconfig (a system:masters client certificate) that kgen, kubectl and the
kubelet stand-in (kubeletstub.py) all use. Every process is started here, logs to a file of its own and is
killed by PID at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
BUILD = HERE / "controlplane" / "build.sh"
SERVICE_RANGE = "10.96.0.0/16"
CORE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cache_bin() -> Path | None:
    """The newest complete build in the cache (apiserver, controller-manager, scheduler, etcd), else None."""
    root = Path(os.environ.get("KGEN_CONTROLPLANE_CACHE") or Path.home() / ".cache" / "kgen-controlplane")
    found = [d for d in root.glob("k8s-*") if (d / "done.kubernetes").exists() and (d / "done.etcd").exists()]
    return max(found, key=lambda d: (d / "done.kubernetes").stat().st_mtime) / "bin" if found else None


def build(timeout: float = 3600) -> tuple[Path | None, str]:
    """Runs build.sh (warm: nothing to do). Returns (bin folder or None, why not). Without Go, or with
    KGEN_CONTROLPLANE_NO_BUILD set, the newest complete build in the cache is used as it is."""
    if shutil.which("go") is None or os.environ.get("KGEN_CONTROLPLANE_NO_BUILD"):
        have = cache_bin()
        return (have, "") if have else (None, "no Go toolchain on PATH to build the control plane")
    res = subprocess.run(["nice", "-n", "15", "bash", str(BUILD)], capture_output=True, text=True, timeout=timeout)
    lines = res.stdout.strip().splitlines()
    binp = Path(lines[-1]) if lines else None
    if binp and (binp / "kube-apiserver").exists() and (binp / "etcd").exists():
        return binp, ""
    return None, f"controlplane/build.sh failed: {res.stderr.strip().splitlines()[-1:]}"


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_pki(d: Path, kubelet_ips: list[str]) -> None:
    """CA, API server serving cert, clients (admin: system:masters; the API server's kubelet client), the
    kubelet stand-in's serving cert (its node IPs) and the service-account key pair."""
    d.mkdir(parents=True, exist_ok=True)
    openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "7",
        "-subj",
        "/CN=kgen-test-ca",
        cwd=d,
    )

    def cert(name: str, subj: str, sans: str = "", usage: str = "clientAuth") -> None:
        openssl(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            f"{name}.key",
            "-out",
            f"{name}.csr",
            "-subj",
            subj,
            cwd=d,
        )
        ext = d / f"{name}.ext"
        ext.write_text(
            f"basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage={usage}\n"
            + (f"subjectAltName={sans}\n" if sans else "")
        )
        openssl(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            f"{name}.crt",
            "-days",
            "7",
            "-extfile",
            ext.name,
            cwd=d,
        )

    cert(
        "apiserver",
        "/CN=kube-apiserver",
        "IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,"
        "DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local",
        "serverAuth",
    )
    cert("admin", "/O=system:masters/CN=kgen-test-admin")
    cert("kubelet-client", "/O=system:masters/CN=kube-apiserver-kubelet-client")
    cert(
        "kubelet", "/CN=kgen-kubelet-stub", ",".join(f"IP:{ip}" for ip in kubelet_ips) + ",DNS:localhost", "serverAuth"
    )
    openssl("genrsa", "-out", "sa.key", "2048", cwd=d)
    openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=d)


class ControlPlane:
    """start() brings up etcd, the API server, the controller manager and the scheduler; stop() kills them."""

    def __init__(self, bindir: Path, node_ips: list[str], extra_crds: list[Path] | None = None) -> None:
        self.bin = bindir
        self.root = Path(tempfile.mkdtemp(prefix="kgen-k8s-"))
        self.pki = self.root / "pki"
        self.node_ips = node_ips
        self.procs: dict[str, subprocess.Popen] = {}
        self.port = free_port()
        self.server = f"https://127.0.0.1:{self.port}"
        self.kubeconfig = self.root / "kubeconfig"
        self.kubelet_port = free_port()

    # -- processes ------------------------------------------------------------------------------------------
    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen:
        log = open(self.root / f"{name}.log", "ab")
        p = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.root, start_new_session=True
        )
        log.close()
        self.procs[name] = p
        return p

    def log(self, name: str, tail: int = 4000) -> str:
        try:
            return (self.root / f"{name}.log").read_text(errors="replace")[-tail:]
        except OSError:
            return ""

    def start(self, timeout: float = 180) -> None:
        make_pki(self.pki, self.node_ips)
        p = self.pki
        self._write_kubeconfig()
        client, peer = free_port(), free_port()
        self._spawn(
            "etcd",
            [
                str(self.bin / "etcd"),
                "--name",
                "default",
                "--data-dir",
                str(self.root / "etcd"),
                "--listen-client-urls",
                f"http://127.0.0.1:{client}",
                "--advertise-client-urls",
                f"http://127.0.0.1:{client}",
                "--listen-peer-urls",
                f"http://127.0.0.1:{peer}",
                "--initial-advertise-peer-urls",
                f"http://127.0.0.1:{peer}",
                "--initial-cluster",
                f"default=http://127.0.0.1:{peer}",
                "--unsafe-no-fsync",
                "--quota-backend-bytes",
                str(4 << 30),
                "--auto-compaction-retention",
                "1",
                "--log-level",
                "warn",
            ],
        )
        self._spawn(
            "kube-apiserver",
            [
                str(self.bin / "kube-apiserver"),
                f"--etcd-servers=http://127.0.0.1:{client}",
                f"--secure-port={self.port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                "--endpoint-reconciler-type=none",
                f"--cert-dir={self.root / 'apiserver-certs'}",
                f"--client-ca-file={p / 'ca.crt'}",
                f"--tls-cert-file={p / 'apiserver.crt'}",
                f"--tls-private-key-file={p / 'apiserver.key'}",
                f"--service-account-key-file={p / 'sa.pub'}",
                f"--service-account-signing-key-file={p / 'sa.key'}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-cluster-ip-range={SERVICE_RANGE}",
                "--authorization-mode=Node,RBAC",
                "--allow-privileged=true",
                "--kubelet-preferred-address-types=InternalIP",
                f"--kubelet-certificate-authority={p / 'ca.crt'}",
                f"--kubelet-client-certificate={p / 'kubelet-client.crt'}",
                f"--kubelet-client-key={p / 'kubelet-client.key'}",
                "--v=1",
            ],
        )
        self.wait_ready(timeout)
        self._spawn(
            "kube-controller-manager",
            [
                str(self.bin / "kube-controller-manager"),
                f"--kubeconfig={self.kubeconfig}",
                "--leader-elect=false",
                "--secure-port=0",
                f"--service-account-private-key-file={p / 'sa.key'}",
                f"--root-ca-file={p / 'ca.crt'}",
                f"--cluster-signing-cert-file={p / 'ca.crt'}",
                f"--cluster-signing-key-file={p / 'ca.key'}",
                f"--service-cluster-ip-range={SERVICE_RANGE}",
                "--node-monitor-grace-period=120s",
                "--use-service-account-credentials=false",
                "--controllers=*",
                "--v=1",
            ],
        )
        self._spawn(
            "kube-scheduler",
            [
                str(self.bin / "kube-scheduler"),
                f"--kubeconfig={self.kubeconfig}",
                f"--authentication-kubeconfig={self.kubeconfig}",
                f"--authorization-kubeconfig={self.kubeconfig}",
                "--leader-elect=false",
                f"--secure-port={free_port()}",
                "--bind-address=127.0.0.1",
                f"--cert-dir={self.root / 'scheduler-certs'}",
                "--v=1",
            ],
        )
        self.wait_for(lambda: self._default_sa(), timeout, "the controller manager made the default ServiceAccount")

    def _write_kubeconfig(self) -> None:
        p = self.pki
        self.kubeconfig.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "kgen-test",
                    "clusters": [
                        {
                            "name": "kgen-test",
                            "cluster": {"server": self.server, "certificate-authority": str(p / "ca.crt")},
                        }
                    ],
                    "users": [
                        {
                            "name": "admin",
                            "user": {"client-certificate": str(p / "admin.crt"), "client-key": str(p / "admin.key")},
                        }
                    ],
                    "contexts": [
                        {
                            "name": "kgen-test",
                            "context": {"cluster": "kgen-test", "user": "admin", "namespace": "default"},
                        }
                    ],
                },
                indent=1,
            )
        )

    # -- plain HTTPS (no client library: the stand-in and the fixture must not depend on kgen's) -------------
    def ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        ctx.load_cert_chain(str(self.pki / "admin.crt"), str(self.pki / "admin.key"))
        return ctx

    def request(
        self, method: str, path: str, body=None, content_type: str = "application/json", timeout: float = 30
    ) -> tuple[int, dict | str]:
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
        req = urllib.request.Request(self.server + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", content_type)
        req.add_header("Accept", "application/json")
        try:
            with urllib.request.urlopen(req, context=self.ssl_context(), timeout=timeout) as r:
                raw, code = r.read(), r.status
        except urllib.error.HTTPError as e:
            raw, code = e.read(), e.code
        try:
            return code, json.loads(raw)
        except ValueError:
            return code, raw.decode(errors="replace")

    def wait_ready(self, timeout: float) -> None:
        def ok() -> bool:
            try:
                return self.request("GET", "/readyz", timeout=5)[0] == 200
            except OSError:
                return False

        self.wait_for(ok, timeout, "the API server answered /readyz")

    def _default_sa(self) -> bool:
        return self.request("GET", "/api/v1/namespaces/default/serviceaccounts/default")[0] == 200

    def wait_for(self, cond, timeout: float, what: str, watch: str = "") -> None:
        """Until cond() is true; fails at once when a core process (or `watch`) has exited."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            dead = [n for n, p in self.procs.items() if p.poll() is not None and (n in CORE or n == watch)]
            if dead:
                raise RuntimeError(f"{dead[0]} exited ({self.procs[dead[0]].returncode}):\n{self.log(dead[0])}")
            try:
                if cond():
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"not within {timeout:.0f} s: {what}\n{self.log('kube-apiserver')}")

    def kubectl(self, *args: str, input: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["kubectl", f"--kubeconfig={self.kubeconfig}", *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def install_crds(self, files: list[Path], timeout: float = 60) -> None:
        """Creates the CRDs (JSON via the API, no kubectl needed) and waits until each is Established."""
        import yaml

        names = []
        for f in files:
            for doc in yaml.safe_load_all(f.read_text()):
                if not doc or doc.get("kind") != "CustomResourceDefinition":
                    continue
                code, out = self.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", doc)
                if code not in (201, 409):
                    raise RuntimeError(f"CRD {doc['metadata']['name']}: {code} {out}")
                names.append(doc["metadata"]["name"])

        def established() -> bool:
            for n in names:
                code, crd = self.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{n}")
                conds = (
                    {c["type"]: c["status"] for c in (crd.get("status", {}).get("conditions") or [])}
                    if code == 200
                    else {}
                )
                if conds.get("Established") != "True":
                    return False
            return True

        self.wait_for(established, timeout, f"CRDs established: {names}")

    # -- JobSet and Kueue: controller-runtime managers with their webhooks served on loopback -----------------
    def start_addon(self, name: str, binary: str, config: dict, webhooks: Path, keep=lambda path: True,
                    timeout: float = 90, mounts: dict[str, Path] | None = None,
                    args: tuple[str, ...] = ()) -> None:  # fmt: skip
        """Starts `binary --config` (webhook server on a loopback port with a certificate of the private CA) and
        registers its webhook configurations (from the module's manifests) pointed at it: the API server then
        calls them as in a cluster."""
        import base64

        import yaml

        certs = self.root / f"{name}-certs"
        certs.mkdir(exist_ok=True)
        shutil.copy(self.pki / "kubelet.crt", certs / "tls.crt")  # its SANs include 127.0.0.1, serverAuth
        shutil.copy(self.pki / "kubelet.key", certs / "tls.key")
        port, probe = free_port(), free_port()
        config = {
            **config,
            "webhook": {"port": port, "host": "127.0.0.1", "certDir": str(certs)},
            "metrics": {"bindAddress": "0"},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{probe}"},
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
        }
        cfg = self.root / f"{name}-config.yaml"
        cfg.write_text(json.dumps(config))
        env = dict(os.environ, KUBECONFIG=str(self.kubeconfig))
        log = open(self.root / f"{name}.log", "ab")
        argv = [str(self.bin / binary), f"--config={cfg}", f"--kubeconfig={self.kubeconfig}", *args]
        if mounts:  # fixed paths the binary insists on, made in a mount namespace of its own (never on the host)
            import shlex
            import sys

            sys.path.insert(0, str(HERE.parent / "entrypoint"))
            from podharness import shadow_mount_steps

            steps = []
            for path, src in mounts.items():
                steps += shadow_mount_steps(path, self.root, f"{name}-stash")
                steps.append(f"mount --bind {shlex.quote(str(src))} {shlex.quote(path)}")
            script = " && ".join([*steps, "exec " + " ".join(shlex.quote(a) for a in argv)])
            argv = ["unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", script]
        self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            cwd=self.root, env=env, start_new_session=True)  # fmt: skip
        log.close()

        def listening() -> bool:
            with socket.socket() as sock:
                sock.settimeout(1)
                return sock.connect_ex(("127.0.0.1", port)) == 0

        self.wait_for(listening, timeout, f"{name}'s webhook server listening", watch=name)
        ca = base64.b64encode((self.pki / "ca.crt").read_bytes()).decode()
        for doc in yaml.safe_load_all(webhooks.read_text()):
            if not doc:
                continue
            hooks = []
            for h in doc.get("webhooks") or []:
                path = h["clientConfig"]["service"]["path"]
                if keep(path):
                    h["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca}
                    hooks.append(h)
            doc["webhooks"] = hooks
            doc["metadata"] = {"name": f"{name}-{doc['metadata']['name']}"}
            plural = (
                "mutatingwebhookconfigurations"
                if doc["kind"].startswith("Mutating")
                else "validatingwebhookconfigurations"
            )
            code, out = self.request("POST", f"/apis/admissionregistration.k8s.io/v1/{plural}", doc)
            if code not in (201, 409):
                raise RuntimeError(f"{name} webhooks: {code} {out}")

    def start_jobset(self) -> None:
        self.start_addon("jobset", "jobset-controller",
                         {"apiVersion": "config.jobset.x-k8s.io/v1alpha1", "kind": "Configuration"},
                         self.bin.parent / "crds" / "jobset-webhooks.yaml")  # fmt: skip

    def start_kueue(self) -> None:
        self.request("POST", "/api/v1/namespaces", {"metadata": {"name": "kueue-system"}})
        self.start_addon(
            "kueue", "kueue",
            {"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration", "namespace": "kueue-system",
             "integrations": {"frameworks": ["batch/job", "jobset.x-k8s.io/jobset"]}},
            self.bin.parent / "crds" / "kueue-webhooks.yaml",
            keep=lambda path: any(k in path for k in ("-batch-v1-job", "jobset", "kueue-x-k8s-io")),
            mounts={"/etc/kueue/metrics/certs": self.root / "kueue-certs"},  # its metrics server's fixed path
            args=("--feature-gates=VisibilityOnDemand=false",),  # an aggregated API server with certs at /visibility
        )  # fmt: skip

    def stop(self) -> None:
        """SIGTERM to every process group (newest first), SIGKILL to what is left after 3 s; the folder goes."""
        for name in reversed(list(self.procs)):
            p = self.procs[name]
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except OSError:
                    pass
        deadline = time.monotonic() + 3
        for p in self.procs.values():
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except OSError:
                    pass
                p.wait(5)
        shutil.rmtree(self.root, ignore_errors=True)
