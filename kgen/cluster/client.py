"""The only module that imports the ``kubernetes`` package.

It uses the package for what it does well (kubeconfig and in-cluster configuration, contexts, auth
plugins, TLS, the connection pool) and sends raw requests through its ``ApiClient``, returning plain
dicts exactly as the API server sent them: no model objects (deserialising 1,000 pods into models
costs seconds), the same shapes the recordings hold. Errors become one-line ``ClusterError``s.
"""

from __future__ import annotations

import json
import os
import re
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from kgen.cluster.errors import ClusterError, NotFound
from kgen.cluster.labels import pod_selector

_List = list  # the class's own `list` method shadows the builtin in its annotations
FIELD_MANAGER = "kgen"
REQUEST_TIMEOUT = (5.0, 60.0)  # connect, read (seconds)
STREAM_TIMEOUT = (5.0, None)  # log follows and watches read for as long as they run
SA_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

# kind -> (API group path, resource): every kind a kgen run is made of
RESOURCES: dict[str, tuple[str, str]] = {
    "Job": ("/apis/batch/v1", "jobs"),
    "JobSet": ("/apis/jobset.x-k8s.io/v1alpha2", "jobsets"),  # a CRD: 404 where JobSet is not installed
    "StatefulSet": ("/apis/apps/v1", "statefulsets"),
    "Service": ("/api/v1", "services"),
    "ConfigMap": ("/api/v1", "configmaps"),
    "Secret": ("/api/v1", "secrets"),  # the run's secret (kgen.render.runsecret)
    "NetworkPolicy": ("/apis/networking.k8s.io/v1", "networkpolicies"),
    "PodDisruptionBudget": ("/apis/policy/v1", "poddisruptionbudgets"),
    "Pod": ("/api/v1", "pods"),
    "Event": ("/api/v1", "events"),
}
WORKLOAD_KINDS = ("Job", "StatefulSet", "JobSet")
CRD_KINDS = ("JobSet",)  # served only where installed: `kgen submit` checks discovery before applying


@dataclass
class Target:
    """Where the commands talk to: what -n/--namespace, --context and --kubeconfig resolved to."""

    namespace: str
    context: str  # "" for in-cluster
    server: str


@dataclass
class Exec:
    """What an exec in a pod returned: its exit code (None: it had not ended in time), stdout and stderr."""

    code: int | None
    out: str
    err: str


class InsecureServer(UserWarning):
    """The kubeconfig turns TLS verification off (``insecure-skip-tls-verify``)."""


KUBECONFIG_MAX = 16 << 20


def check_kubeconfig(path: str, source: str) -> None:
    """The file is a kubeconfig (a YAML mapping), else one line naming where it came from; its content is
    never quoted (it may be any file: KUBECONFIG=/etc/shadow)."""
    import yaml

    try:
        with open(path, "rb") as fh:
            data = fh.read(KUBECONFIG_MAX + 1)
    except OSError as exc:
        raise ClusterError(f"cannot read {path}: {exc.strerror}", option=source) from None
    hint = "a kubeconfig is YAML with clusters, contexts and users (`kubectl config view`)"
    if len(data) > KUBECONFIG_MAX:
        raise ClusterError(f"{path} is larger than 16 MiB: not a kubeconfig", option=source, hint=hint)
    try:
        doc = yaml.safe_load(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise ClusterError(f"{path} is not UTF-8 text: not a kubeconfig", option=source, hint=hint) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        raise ClusterError(f"{path} is not YAML{at}: not a kubeconfig", option=source, hint=hint) from None
    except RecursionError:
        raise ClusterError(f"{path} nests too deeply: not a kubeconfig", option=source, hint=hint) from None
    if doc is not None and not isinstance(doc, dict):
        raise ClusterError(
            f"{path} is YAML but not a mapping ({type(doc).__name__}): not a kubeconfig", option=source, hint=hint
        )
    if isinstance(doc, dict) and not any(k in doc for k in ("clusters", "contexts", "users", "current-context")):
        raise ClusterError(f"{path} has no clusters, contexts or users: not a kubeconfig", option=source, hint=hint)


def _kubeconfig_files(kubeconfig: str | None) -> list[str]:
    if kubeconfig:
        return [kubeconfig]
    env = os.environ.get("KUBECONFIG")
    if env:
        return [p for p in env.split(os.pathsep) if p]
    return [str(Path("~/.kube/config").expanduser())]


class Cluster:
    """Connected API access for one namespace."""

    def __init__(self, api: k8s_client.ApiClient, target: Target, max_connections: int = 16):
        self.api = api
        self.target = target
        self.namespace = target.namespace
        self.max_connections = max_connections

    # ---------------------------------------------------------------------------------- connect
    @classmethod
    def connect(
        cls,
        kubeconfig: str | None = None,
        context: str | None = None,
        namespace: str | None = None,
        max_connections: int = 16,
    ) -> Cluster:
        cfg = k8s_client.Configuration()
        files = _kubeconfig_files(kubeconfig)
        existing = [f for f in files if os.path.isfile(f)]
        ctx_name, ctx_ns = "", None
        source = "--kubeconfig" if kubeconfig else "KUBECONFIG" if os.environ.get("KUBECONFIG") else "~/.kube/config"
        if kubeconfig and not existing:
            raise ClusterError(f"{kubeconfig} does not exist", option="--kubeconfig", hint="give a kubeconfig file")
        for f in existing:
            check_kubeconfig(f, source)
        if existing:
            try:
                k8s_config.load_kube_config(
                    config_file=os.pathsep.join(existing), context=context, client_configuration=cfg
                )
                contexts, active = k8s_config.list_kube_config_contexts(config_file=os.pathsep.join(existing))
                chosen = next((c for c in contexts if c["name"] == context), active) if context else active
                ctx_name = (chosen or {}).get("name", "")
                ctx_ns = ((chosen or {}).get("context") or {}).get("namespace")
            except ConfigException as exc:
                opt = "--context" if context and "context" in str(exc).lower() else "--kubeconfig"
                raise ClusterError(
                    f"cannot use {', '.join(existing)}: {' '.join(str(exc).split())}",
                    option=opt,
                    hint="check `kubectl config get-contexts`",
                ) from None
            except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
                raise ClusterError(
                    f"cannot use {', '.join(existing)} as a kubeconfig ({type(exc).__name__})",
                    option=source,
                    hint="give a valid kubeconfig (`kubectl config view` reads it)",
                ) from None
        elif os.environ.get("KUBERNETES_SERVICE_HOST"):
            try:
                k8s_config.load_incluster_config(client_configuration=cfg)
            except ConfigException as exc:
                raise ClusterError(f"in-cluster configuration failed: {exc}", hint="pass --kubeconfig") from None
            if os.path.isfile(SA_NAMESPACE):
                ctx_ns = Path(SA_NAMESPACE).read_text().strip() or None
        else:
            raise ClusterError(
                f"no kubeconfig found ({', '.join(files)} does not exist) and not running inside a pod",
                hint="pass --kubeconfig FILE, set KUBECONFIG, or run `kubectl config view` to check your setup",
            )
        if not cfg.verify_ssl:  # one line, once, instead of urllib3's multi-line warning on every request
            warnings.filterwarnings("ignore", category=urllib3.exceptions.InsecureRequestWarning)
            warnings.warn(
                f"not verifying the TLS certificate of {cfg.host} (insecure-skip-tls-verify in the kubeconfig)",
                InsecureServer,
                stacklevel=2,
            )
        cfg.retries = False  # an unreachable server is reported at once, not after urllib3's retries
        cfg.connection_pool_maxsize = max(max_connections, 4)
        target = Target(namespace=namespace or ctx_ns or "default", context=ctx_name, server=cfg.host)
        return cls(k8s_client.ApiClient(cfg), target, max_connections)

    def close(self) -> None:
        self.api.close()

    # ---------------------------------------------------------------------------------- requests
    def _path(self, kind: str, name: str | None = None, namespace: str | None = "") -> str:
        group, resource = RESOURCES[kind]
        ns = self.namespace if namespace == "" else namespace
        path = f"{group}/namespaces/{ns}/{resource}" if ns else f"{group}/{resource}"
        return f"{path}/{name}" if name else path

    def _send(self, method: str, path: str, query=(), body=None, content_type=None, timeout=REQUEST_TIMEOUT):
        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        m, url, hdrs, payload, _ = self.api.param_serialize(
            method=method,
            resource_path=path,
            query_params=list(query),
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        try:
            return self.api.call_api(m, url, header_params=hdrs, body=payload, _request_timeout=timeout)
        except ApiException as exc:  # TLS problems arrive as status 0
            raise ClusterError(
                f"cannot talk to {self.target.server}: {' '.join(str(exc.reason).split())}",
                hint="check the cluster's certificate and `kubectl cluster-info`",
            ) from None
        except urllib3.exceptions.HTTPError as exc:
            reason = getattr(exc, "reason", None) or exc
            raise ClusterError(
                f"the API server {self.target.server} is unreachable: {' '.join(str(reason).split())}",
                hint="is the cluster up and the context right? try `kubectl cluster-info`",
            ) from None

    def _json(self, method: str, path: str, what: str, query=(), body=None, content_type=None) -> dict:
        resp = self._send(method, path, query, body, content_type)
        data = resp.read()
        if resp.status >= 400:
            raise status_error(resp.status, data, what, self.namespace)
        return json.loads(data) if data else {}

    # ---------------------------------------------------------------------------------- reads
    def get(self, kind: str, name: str) -> dict | None:
        """The object, or None when the API says 404."""
        try:
            obj = self._json("GET", self._path(kind, name), f"{kind} {name}")
        except NotFound:
            return None
        obj.setdefault("kind", kind)
        return obj

    def list(self, kind: str, selector: str | None = None, all_namespaces: bool = False) -> _List[dict]:
        return self.list_rv(kind, selector, all_namespaces)[0]

    def list_rv(self, kind: str, selector: str | None = None, all_namespaces: bool = False):
        """The items and the list's resourceVersion (where a watch starts)."""
        query = [("labelSelector", selector)] if selector else []
        path = self._path(kind, namespace=None if all_namespaces else "")
        try:
            body = self._json("GET", path, f"{RESOURCES[kind][1]}", query)
        except NotFound:
            if kind not in CRD_KINDS:  # a Kubernetes API lists a built-in kind in any namespace, even an empty one
                raise self.not_kubernetes("GET", path) from None
            return [], None  # the kind itself is unknown (JobSet not installed): nothing of it exists
        items = body.get("items") or []
        for item in items:  # list items carry no kind/apiVersion
            item.setdefault("kind", kind)
        return items, (body.get("metadata") or {}).get("resourceVersion")

    def workload(self, name: str) -> dict | None:
        """The run's Job, else its StatefulSet, else its JobSet (a GET each, by name: kgen names them
        after the run)."""
        for kind in WORKLOAD_KINDS:
            obj = self.get(kind, name)
            if obj is not None:
                return obj
        return None

    def pods(self, name: str) -> _List[dict]:
        return self.list("Pod", pod_selector(name))

    def events(self) -> _List[dict]:
        return self.list("Event")

    def log(
        self,
        pod: str,
        *,
        tail: int | None = None,
        since: int | None = None,
        timestamps: bool = False,
        previous: bool = False,
        container: str = "trainer",
        limit_bytes: int | None = None,
    ) -> str:
        query = log_query(container, tail, since, timestamps, previous)
        if limit_bytes is not None:
            query.append(("limitBytes", str(limit_bytes)))
        resp = self._send("GET", self._path("Pod", pod) + "/log", query)
        data = resp.read()
        if resp.status >= 400:
            raise status_error(resp.status, data, f"log of pod {pod}", self.namespace)
        return data.decode("utf-8", "replace")

    def log_stream(
        self,
        pod: str,
        *,
        follow: bool = True,
        tail: int | None = None,
        since: int | None = None,
        timestamps: bool = False,
        previous: bool = False,
        container: str = "trainer",
    ) -> Iterator[bytes]:
        """The pod's log as the API server sends it (``follow``: until the container ends), in blocks of
        whole lines (one block per read: the merger handles a block at a time, not a line at a time)."""
        query = log_query(container, tail, since, timestamps, previous) + ([("follow", "true")] if follow else [])
        resp = self._send("GET", self._path("Pod", pod) + "/log", query, timeout=STREAM_TIMEOUT)
        if resp.status >= 400:
            raise status_error(resp.status, resp.read(), f"log of pod {pod}", self.namespace)
        return _blocks(resp.response)

    def watch(self, kind: str, selector: str | None = None, field: str | None = None, rv: str | None = None):
        """Watch events (dicts with type and object) until the server ends the stream."""
        query = [("watch", "true")]
        if selector:
            query.append(("labelSelector", selector))
        if field:
            query.append(("fieldSelector", field))
        if rv:
            query.append(("resourceVersion", rv))
        resp = self._send("GET", self._path(kind), query, timeout=STREAM_TIMEOUT)
        if resp.status >= 400:
            raise status_error(resp.status, resp.read(), f"watch of {RESOURCES[kind][1]}", self.namespace)
        for line in _lines(resp.response):
            if line.strip():
                yield json.loads(line)

    def exec(self, pod: str, command: _List[str], container: str = "trainer", timeout: float = 30.0) -> Exec:
        """Run ``command`` in a pod's container through the API's exec (WebSocket, channel.k8s.io v5/v4, the
        ``kubernetes`` package's stream client): its exit code (None when it had not ended within ``timeout``), its
        stdout and stderr. A refused exec (no such pod, not running, no rights) is a ClusterError."""
        from kubernetes.stream import stream

        core = k8s_client.CoreV1Api(self.api)
        try:
            ws = stream(
                core.connect_get_namespaced_pod_exec,
                pod,
                self.namespace,
                command=command,
                container=container,
                stdin=False,
                stdout=True,
                stderr=True,
                tty=False,
                _preload_content=False,
                _request_timeout=timeout,
            )
        except ApiException as exc:  # the stream client reports a refused upgrade as status 0 and the response line
            raise exec_error(exc, pod, self.namespace) from None
        except Exception as exc:  # noqa: BLE001 - websocket and socket errors: one line, never a traceback
            raise ClusterError(f"exec in pod {pod}: {' '.join(str(exc).split())[:300]}") from None
        try:
            ws.run_forever(timeout=timeout)
            out, err = ws.read_stdout(), ws.read_stderr()
            code = None
            if not ws.is_open():
                try:
                    code = ws.returncode
                except (KeyError, IndexError, TypeError, ValueError, AttributeError):
                    code = None  # a closed stream without a status: no exit code to report
            return Exec(code, out if isinstance(out, str) else out.decode("utf-8", "replace"),
                        err if isinstance(err, str) else err.decode("utf-8", "replace"))  # fmt: skip
        finally:
            ws.close()

    def answers_kubernetes(self) -> bool:
        """Whether the server lists pods in the namespace as a Kubernetes API server does (200, or 401/403 without
        the rights): a server that answers 404 to that is no Kubernetes API server."""
        try:
            resp = self._send("GET", self._path("Pod"), [("limit", "1")])
            resp.read()
        except ClusterError:
            return False
        return resp.status in (200, 401, 403)

    def not_kubernetes(self, method: str, path: str) -> ClusterError:
        """The error for a 404 where a Kubernetes API server never answers one (a list of a built-in kind, an
        apply outside a missing namespace)."""
        return ClusterError(
            f"{self.target.server} is not a Kubernetes API server: it answered 404 to {method} {path}, which a "
            "Kubernetes API serves in any namespace",
            hint="check the server URL of the kubeconfig's cluster (`kubectl config view --minify`) and --context",
        )

    # ---------------------------------------------------------------------------------- writes
    def delete(self, kind: str, name: str, propagation: str = "Foreground") -> bool:
        """Delete one object; False when it was already gone (404)."""
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation}
        try:
            self._json("DELETE", self._path(kind, name), f"{kind} {name}", body=body)
        except NotFound:
            return False
        return True

    def apply(self, obj: Mapping, force: bool = False, created: bool = False, dry_run: bool = False):
        """Server-side apply with field manager ``kgen``: the object as the server answered; with
        ``created``, (object, whether this request created it: 201 rather than 200). ``dry_run``: the
        server checks and answers as it would, and stores nothing (``dryRun=All``)."""
        kind, name = obj["kind"], obj["metadata"]["name"]
        if kind not in RESOURCES:
            raise ClusterError(f"kgen cannot apply a {kind} yet", hint="apply the rendered manifest with kubectl")
        query = [("fieldManager", FIELD_MANAGER)] + ([("force", "true")] if force else [])
        if dry_run:
            query.append(("dryRun", "All"))
        path = self._path(kind, name)
        resp = self._send("PATCH", path, query, dict(obj), "application/apply-patch+yaml")
        data = resp.read()
        if resp.status == 404:  # an apply creates what is missing: only a missing namespace is a 404
            if _status_kind(data) == "namespaces":
                raise ClusterError(
                    f"namespace {self.namespace} does not exist",
                    option="--namespace",
                    hint="create it, or choose another",
                )
            raise self.not_kubernetes("PATCH", path)
        if resp.status >= 400:
            raise status_error(resp.status, data, f"{kind} {name}", self.namespace)
        answer = json.loads(data) if data else {}
        return (answer, resp.status == 201) if created else answer

    def serves(self, kind: str) -> bool:
        """Whether the API server serves ``kind`` (discovery of its group version). A CRD that is not
        installed (JobSet) answers 404, the standard answer for an unknown group version."""
        group, resource = RESOURCES[kind]
        try:
            body = self._json("GET", group, f"API {group.split('/', 2)[-1]}")
        except NotFound:
            if not self.answers_kubernetes():
                raise self.not_kubernetes("GET", self._path("Pod")) from None
            return False
        return any(r.get("name") == resource for r in body.get("resources") or [])


def log_query(container: str, tail, since, timestamps: bool, previous: bool) -> list[tuple[str, str]]:
    query = [("container", container)]
    if tail is not None:
        query.append(("tailLines", str(tail)))
    if since is not None:
        query.append(("sinceSeconds", str(since)))
    if timestamps:
        query.append(("timestamps", "true"))
    if previous:
        query.append(("previous", "true"))
    return query


def _blocks(response) -> Iterator[bytes]:
    """Whole lines as they arrive, several per block; a last line without newline comes at the end."""
    rest = b""
    try:
        for chunk in response.stream(64 * 1024, decode_content=True):
            data = rest + chunk
            cut = data.rfind(b"\n") + 1
            if cut:
                yield data[:cut]
            rest = data[cut:]
        if rest:
            yield rest + b"\n"
    except urllib3.exceptions.HTTPError as exc:
        raise ClusterError(f"the stream broke: {exc}", hint="run the command again") from None
    finally:
        response.release_conn()


def _lines(response) -> Iterator[bytes]:
    """Lines of a streamed (chunked) body as they arrive; the connection goes back when done."""
    buf = b""
    try:
        for chunk in response.stream(64 * 1024, decode_content=True):
            buf += chunk
            while True:
                nl = buf.find(b"\n")
                if nl < 0:
                    break
                yield buf[: nl + 1]
                buf = buf[nl + 1 :]
        if buf:
            yield buf
    except urllib3.exceptions.HTTPError as exc:
        raise ClusterError(f"the stream broke: {exc}", hint="run the command again") from None
    finally:
        response.release_conn()


def _status_kind(data: bytes) -> str:
    """``details.kind`` of a Kubernetes Status body ("" when it is not one)."""
    try:
        body = json.loads(data)
    except ValueError:
        return ""
    details = body.get("details") if isinstance(body, dict) else None
    return str(details.get("kind") or "") if isinstance(details, dict) else ""


def exec_error(exc: ApiException, pod: str, namespace: str) -> ClusterError:
    """A refused exec: the stream client puts the HTTP status line and the server's answer in the reason."""
    reason = " ".join(str(exc.reason or exc).split())
    status = exc.status or 0
    if not status:
        found = re.search(r"Handshake status (\d{3})", reason)
        status = int(found.group(1)) if found else 0
    body = reason.split("-+-+-")[-1].strip() if "-+-+-" in reason else reason
    if status >= 400:
        return status_error(status, body.encode(), f"exec in pod {pod}", namespace)
    return ClusterError(f"exec in pod {pod}: {body[:300]}", hint="check `kubectl exec` on that pod")


def status_error(status: int, data: bytes, what: str, namespace: str) -> ClusterError:
    """A one-line error from a non-2xx response (normally a Kubernetes ``Status``)."""
    try:
        body = json.loads(data)
        message = body.get("message") or body.get("reason") or ""
    except ValueError:
        message = data.decode("utf-8", "replace")[:200]
    message = " ".join(str(message).split())
    if status == 404:
        return NotFound(f"{what} not found in namespace {namespace}", hint="check the name and -n/--namespace")
    if status == 401:
        return ClusterError(f"unauthorized: {message}", hint="log in again or refresh the kubeconfig's credentials")
    if status == 403:
        return ClusterError(f"forbidden: {message}", hint="ask for RBAC access to these resources in this namespace")
    if status == 409:
        return ClusterError(f"conflict on {what}: {message}", hint="see `kgen submit --help` for --replace")
    return ClusterError(f"{what}: the API server answered {status}: {message}", hint="check `kubectl get events`")
