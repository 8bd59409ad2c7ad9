"""A local HTTP server (127.0.0.1) that answers like the recorded API server, from the recordings.

GETs are answered with the recorded bodies, byte for byte: the pod list, the Job/StatefulSet, the
Service, the ConfigMap, the EventList, pod logs (200 with the recorded body, or the recorded non-200
``Status`` with its code), and the watch streams (``?watch=true``) sent chunked, one recorded event per
chunk. Anything the recordings do not hold is a standard ``404 NotFound`` Status. Lists the recordings
do not hold as lists (jobs, services, ... by label) are made of the recorded objects; PDBs, Secrets and
NetworkPolicies, which the recorded manifests do not have, are an empty list. DELETE and PATCH requests are recorded in
``requests`` for the tests to check what the client sent; they are answered with the recorded object
(or 404), and a DELETE makes later GETs of that object 404 (what a finished deletion looks like).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

from recordings import ROOT, run_name

GROUP_OF = {
    "jobs": ("batch", "Job"),
    "statefulsets": ("apps", "StatefulSet"),
    "services": ("", "Service"),
    "configmaps": ("", "ConfigMap"),
    "secrets": ("", "Secret"),
    "networkpolicies": ("networking.k8s.io", "NetworkPolicy"),
    "poddisruptionbudgets": ("policy", "PodDisruptionBudget"),
    "pods": ("", "Pod"),
    "events": ("", "Event"),
}


# The group versions the recorded API server served that kgen uses (jobset.x-k8s.io was not installed).
SERVED_GROUP_VERSIONS = {"api/v1", "apis/batch/v1", "apis/apps/v1", "apis/policy/v1", "apis/networking.k8s.io/v1"}

# What a Kubernetes API server answers to a path it has no handler for, such as the discovery of a group
# version that is not installed (`kubectl get --raw /apis/jobset.x-k8s.io/v1alpha2` on a cluster without
# JobSet: "Error from server (NotFound): the server could not find the requested resource").
NO_HANDLER = (
    json.dumps(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": "the server could not find the requested resource",
            "reason": "NotFound",
            "details": {},
            "code": 404,
        },
        separators=(",", ":"),
    )
    + "\n"
).encode()


def not_found(resource: str, name: str) -> bytes:
    group = GROUP_OF.get(resource, ("", ""))[0]
    res = f"{resource}.{group}" if group else resource
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f'{res} "{name}" not found',
        "reason": "NotFound",
        "details": {"name": name, **({"group": group} if group else {}), "kind": resource},
        "code": 404,
    }
    return (json.dumps(body, separators=(",", ":")) + "\n").encode()


class QuietServer(ThreadingHTTPServer):
    """Request threads are tracked, and ``close`` ends them: a handler still streaming a watch or a followed log
    to a client that went away would otherwise outlive the test (a thread left behind turns off the forked lint
    workers of every later test in the process: kgen.lint.workers.can_fork)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.open_requests: set = set()
        self.request_threads: list[threading.Thread] = []
        self.closing = threading.Event()  # paced streams end when it is set

    def process_request(self, request, client_address):
        self.open_requests.add(request)
        thread = threading.Thread(target=self.process_request_thread, args=(request, client_address), daemon=True)
        self.request_threads = [t for t in self.request_threads if t.is_alive()]
        self.request_threads.append(thread)
        thread.start()

    def shutdown_request(self, request):
        self.open_requests.discard(request)
        super().shutdown_request(request)

    def close(self, timeout: float = 10.0) -> None:
        """Stop serving, cut every open connection, and wait (bounded) for the request threads to end."""
        import socket

        self.closing.set()
        self.shutdown()
        for request in list(self.open_requests):
            try:
                request.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        deadline = time.monotonic() + timeout
        for thread in self.request_threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self.server_close()

    def handle_error(self, request, client_address):
        import sys

        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):  # a client that hung up
            super().handle_error(request, client_address)


class Replay:
    """One capture served on 127.0.0.1:<port>; ``kubeconfig(tmp_path)`` writes a kubeconfig for it."""

    def __init__(
        self,
        capture: str,
        *,
        log_repeat: int = 1,
        deny: bool = False,
        pods_limit: int | None = None,
        log_source: Path | None = None,
        log_pace: float = 0.0,
        deny_writes: tuple[str, ...] = (),
    ):
        self.capture = capture
        self.dir = ROOT / capture
        self.scenario = ROOT / capture.split("/")[0]
        self.name = run_name(capture)
        self.log_repeat = log_repeat  # bench only: a recorded log sent N times in one body
        self.deny = deny  # answer 403 Forbidden to everything (RBAC missing)
        self.deny_writes = deny_writes  # resources (e.g. "jobs") RBAC does not let the user create or patch
        # bench only: serve the first N recorded pods, give every pod the same recorded log, and
        # send a followed log in 16 KiB chunks with this many seconds between them (a live log)
        self.pods_limit = pods_limit
        self.log_source = log_source
        self.log_pace = log_pace
        self.requests: list[tuple[str, str, bytes, str]] = []  # method, path, body, Content-Type
        self.deleted: set[str] = set()
        self.lock = threading.Lock()
        workload = json.loads((self.dir / "workload.json").read_text())
        self.workload_kind = workload["kind"]
        self.files = {
            ("jobs" if self.workload_kind == "Job" else "statefulsets", self.name): self.dir / "workload.json",
            ("services", self.name): self.dir / "service.json",
            ("configmaps", f"{self.name}-entrypoint"): self.dir / "configmap.json",
        }
        self._log_cache: dict[Path, bytes] = {}
        self._body_cache: dict[str, bytes] = {}
        handler = self._handler()
        self.server = QuietServer(("127.0.0.1", 0), handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> Replay:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.close()

    def kubeconfig(self, folder: Path, namespace: str | None = "rec") -> str:
        ctx = {"cluster": "replay", "user": "replay"}
        if namespace:
            ctx["namespace"] = namespace
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "replay", "cluster": {"server": self.url}}],
            "users": [{"name": "replay", "user": {"token": "replay-token"}}],
            "contexts": [{"name": "replay", "context": ctx}],
            "current-context": "replay",
        }
        path = folder / "kubeconfig"
        path.write_text(json.dumps(cfg))
        return str(path)

    # ------------------------------------------------------------------------------------------
    def _handler(self):
        replay = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def _send(self, code: int, body: bytes, ctype: str = "application/json") -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _chunked(self, chunks, ctype: str = "application/json") -> None:
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for chunk in chunks:
                    if chunk:
                        self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                        self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

            def do_GET(self):
                replay.route(self, "GET", b"")

            def do_DELETE(self):
                replay.route(self, "DELETE", self._body())

            def do_PATCH(self):
                replay.route(self, "PATCH", self._body())

            def _body(self) -> bytes:
                n = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(n) if n else b""

        return Handler

    def _log_body(self, path: Path) -> bytes:
        if path not in self._log_cache:
            self._log_cache[path] = path.read_bytes() * self.log_repeat
        return self._log_cache[path]

    def route(self, h, method: str, body: bytes) -> None:
        url = urlparse(h.path)
        q = {k: v[-1] for k, v in parse_qs(url.query).items()}
        parts = [unquote(p) for p in url.path.strip("/").split("/")]
        with self.lock:
            self.requests.append((method, h.path, body, h.headers.get("Content-Type") or ""))
        if len(parts) == 2 + (parts[0] == "apis") and method == "GET":  # discovery: /api/v1, /apis/G/V
            if "/".join(parts) not in SERVED_GROUP_VERSIONS:
                return h._send(404, NO_HANDLER)
            return h._send(501, b'{"kind":"Status","code":501,"message":"discovery is not recorded"}')
        denied = method == "PATCH" and len(parts) > 2 and parts[-2] in self.deny_writes
        if self.deny or denied:
            status = {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": f'{parts[-1]} is forbidden: User "replay" cannot {method.lower()} resource',
                "reason": "Forbidden",
                "code": 403,
            }
            return h._send(403, json.dumps(status).encode())
        # /api/v1/namespaces/NS/RES[/NAME[/SUB]] or /apis/G/V/namespaces/NS/RES[/NAME]
        if "namespaces" not in parts:
            # cluster-wide lists (kgen list -A): the same objects as the namespace holds
            ns_parts = parts
            resource = parts[-1]
            name, sub = None, None
        else:
            i = parts.index("namespaces")
            ns_parts = parts[i + 2 :]
            resource = ns_parts[0]
            name = ns_parts[1] if len(ns_parts) > 1 else None
            sub = ns_parts[2] if len(ns_parts) > 2 else None
        if resource not in GROUP_OF:  # a kind this server does not serve (the JobSet CRD is not installed)
            return h._send(404, not_found(resource, name or ""))
        namespace = parts[parts.index("namespaces") + 1] if "namespaces" in parts else None
        selector = dict(kv.split("=", 1) for kv in q.get("labelSelector", "").split(",") if "=" in kv)
        other_run = selector.get("app.kubernetes.io/instance", self.name) != self.name
        if namespace not in (None, "rec") or other_run:  # one run, recorded in namespace rec
            if name is None and method == "GET" and q.get("watch") not in ("true", "1"):
                kind = GROUP_OF.get(resource, ("", "Unknown"))[1]
                return h._send(
                    200, json.dumps({"kind": f"{kind}List", "apiVersion": "v1", "metadata": {}, "items": []}).encode()
                )
            return h._send(404, not_found(resource, name or ""))
        if method != "GET":
            return self._write(h, method, resource, name)
        if q.get("watch") in ("true", "1"):
            stream = "pods" if resource == "pods" else "workload"
            path = self.scenario / "watch" / f"{stream}.jsonl"
            lines = path.read_bytes().splitlines(keepends=True) if path.exists() else []
            pace = float(q.get("_pace", 0))
            return h._chunked(_paced(lines, pace, self.server.closing))
        if resource == "pods" and sub == "log":
            return self._log(h, name, q)
        if name is None:
            return self._list(h, resource)
        key = (resource, name)
        if key in self.files and key not in self.deleted:
            return h._send(200, self.files[key].read_bytes())
        if resource == "pods":
            for item in json.loads((self.dir / "pods.json").read_text())["items"]:
                if item["metadata"]["name"] == name and name not in self.deleted:
                    return h._send(200, json.dumps(item).encode())
        return h._send(404, not_found(resource, name))

    def _list(self, h, resource: str) -> None:
        if resource == "pods":
            raw = self._pods_body()
            if not self.deleted:
                return h._send(200, raw)
            doc = json.loads(raw)
            doc["items"] = [i for i in doc["items"] if i["metadata"]["name"] not in self.deleted]
            return h._send(200, json.dumps(doc).encode())
        if resource == "events":
            return h._send(200, (self.dir / "events.json").read_bytes())
        items = [
            json.loads(path.read_text())
            for (res, name), path in self.files.items()
            if res == resource and (res, name) not in self.deleted
        ]
        kind = GROUP_OF.get(resource, ("", "Unknown"))[1]
        body = {"kind": f"{kind}List", "apiVersion": "v1", "metadata": {}, "items": items}
        return h._send(200, json.dumps(body).encode())

    def _log(self, h, pod: str, q: dict) -> None:
        logs = self.dir / "logs"
        prev = q.get("previous") == "true"
        status = logs / f"{pod}.log.status.json"
        path = logs / (f"{pod}.previous.log" if prev else f"{pod}.log")
        if self.log_source is not None:
            status, path = logs / "-", self.log_source
        if status.exists() and not prev:
            body = status.read_bytes()
            return h._send(int(json.loads(body).get("code", 500)), body)
        if not path.exists():
            return h._send(404, not_found("pods", pod))
        data = self._log_body(path)
        if "tailLines" in q:
            lines = data.splitlines(keepends=True)
            data = b"".join(lines[-int(q["tailLines"]) :]) if int(q["tailLines"]) else b""
        if "limitBytes" in q:
            data = data[: int(q["limitBytes"])]
        if q.get("follow") == "true":
            return h._chunked(_paced(_line_chunks(data), self.log_pace, self.server.closing), "text/plain")
        return h._send(200, data, "text/plain")

    def _pods_body(self) -> bytes:
        if "pods" not in self._body_cache:
            raw = (self.dir / "pods.json").read_bytes()
            if self.pods_limit is not None:
                doc = json.loads(raw)
                doc["items"] = doc["items"][: self.pods_limit]
                raw = json.dumps(doc, separators=(",", ":")).encode() + b"\n"
            self._body_cache["pods"] = raw
        return self._body_cache["pods"]

    def _pods(self, name: str):
        return (i for i in json.loads((self.dir / "pods.json").read_text())["items"] if i["metadata"]["name"] == name)

    def _write(self, h, method: str, resource: str, name: str | None) -> None:
        if name is None:
            return h._send(405, b'{"kind":"Status","code":405}')
        key = (resource, name)
        if resource == "pods":
            pods = {i["metadata"]["name"] for i in json.loads((self.dir / "pods.json").read_text())["items"]}
            known = name in pods and name not in self.deleted
            if method == "DELETE" and known:
                self.deleted.add(name)
                return h._send(200, json.dumps(next(self._pods(name))).encode())
            return h._send(404, not_found(resource, name))
        if key in self.files and method == "PATCH":  # apply (re)creates it: the recorded object again
            self.deleted.discard(key)
            return h._send(200, self.files[key].read_bytes())
        if key in self.files and key not in self.deleted:
            body = self.files[key].read_bytes()
            if method == "DELETE":
                self.deleted.add(key)
            return h._send(200, body)
        if method == "PATCH":  # a created object: the server answers with it; here, what was applied
            return h._send(201, self.requests[-1][2] or b"{}")
        return h._send(404, not_found(resource, name))


def _paced(lines, pace: float, closing: threading.Event):
    for i, line in enumerate(lines):
        if pace and i and closing.wait(pace):
            return  # the server is closing: end the stream now
        yield line


def _line_chunks(data: bytes, size: int = 16 * 1024):
    for i in range(0, len(data), size):
        yield data[i : i + size]


def main() -> None:
    """Serve one capture from its own process (benchmarks: the server must not share the client's GIL).

    Prints the kubeconfig path and the run name, then serves until stdin closes.
    """
    import argparse
    import sys

    ap = argparse.ArgumentParser()
    ap.add_argument("capture")
    ap.add_argument("--dir", required=True, help="where to write the kubeconfig")
    ap.add_argument("--pods-limit", type=int)
    ap.add_argument("--log-source", type=Path)
    ap.add_argument("--log-repeat", type=int, default=1)
    ap.add_argument("--log-pace", type=float, default=0.0)
    a = ap.parse_args()
    with Replay(
        a.capture, pods_limit=a.pods_limit, log_source=a.log_source, log_repeat=a.log_repeat, log_pace=a.log_pace
    ) as r:
        print(r.kubeconfig(Path(a.dir)), r.name, flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    main()
