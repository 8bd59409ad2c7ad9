"""The cluster verbs never claim what they did not see. A server that is not a Kubernetes API
(one that answers a standard 404 Status to everything, or a plain web server) is named as such by every verb,
and `kgen stop` deletes nothing and does not say "stopped"; a kubeconfig without TLS verification costs one
warning line, not urllib3's blocks; a file that is not a kubeconfig is one line naming where it came from and
never quoting it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler
from pathlib import Path

import pytest
from click.testing import CliRunner
from replay import QuietServer, Replay

from kgen.cli import cli

NOT_FOUND = (
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


class Always404(BaseHTTPRequestHandler):
    """Every request: the standard 404 Status of a path nobody serves (what such a server answered)."""

    protocol_version = "HTTP/1.1"
    seen: list[tuple[str, str]] = []

    def log_message(self, *args):
        pass

    def _answer(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)
        Always404.seen.append((self.command, self.path))
        self.send_response(404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(NOT_FOUND)))
        self.end_headers()
        self.wfile.write(NOT_FOUND)

    do_GET = do_DELETE = do_PATCH = do_POST = do_PUT = _answer


def serve(handler, tmp_path: Path, **handler_kw):
    class Handler(handler):  # type: ignore[misc, valid-type]
        def __init__(self, *a, **kw):
            super().__init__(*a, **handler_kw, **kw)

        def log_message(self, *args):  # quiet: the test reads kgen's stderr
            pass

    server = QuietServer(("127.0.0.1", 0), Handler)  # its close() ends every request thread
    threading.Thread(target=server.serve_forever, daemon=True).start()
    kc = tmp_path / "kubeconfig"
    kc.write_text(kubeconfig(f"http://127.0.0.1:{server.server_address[1]}"))
    return server, str(kc)


def kubeconfig(url: str, insecure: bool = False) -> str:
    cluster = {"server": url, **({"insecure-skip-tls-verify": True} if insecure else {})}
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "c", "cluster": cluster}],
            "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u", "namespace": "rec"}}],
            "current-context": "x",
        }
    )


def run(*args, env=None):
    return CliRunner().invoke(cli, [str(a) for a in args], env=env, catch_exceptions=False)


def one_line_error(res, *words):
    assert res.exit_code == 2, (res.exit_code, res.output)
    assert res.stdout == ""
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("kgen: error: "), res.stderr
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


VERBS = [
    ("stop", "foo", "--on", "cluster"),
    ("status", "foo", "--on", "cluster"),
    ("logs", "foo", "--on", "cluster"),
    ("list",),
    ("submit", "--name", "foo", "--nodes", "2", "--gpus", "0"),
    ("submit", "--name", "foo", "--nodes", "2", "--gpus", "0", "--kind", "jobset"),
]


@pytest.mark.parametrize("verb", VERBS, ids=lambda v: " ".join(v[:1] + v[-2:]))
def test_a_server_that_answers_404_to_everything_is_not_kubernetes(tmp_path, verb):
    server, kc = serve(Always404, tmp_path)
    try:
        Always404.seen.clear()
        res = run(*verb, "--kubeconfig", kc)
        line = one_line_error(res, "is not a Kubernetes API server", "answered 404 to ", "in any namespace")
        assert "stopped" not in line and "not found in namespace" not in line
        assert not [m for m, _ in Always404.seen if m == "DELETE"]  # stop deleted nothing
    finally:
        server.close()


def test_a_plain_web_server_is_not_kubernetes(tmp_path):
    """A kubeconfig pointing at some web server (here Python's file server on an empty folder: 404 pages)."""
    empty = tmp_path / "www"
    empty.mkdir()
    server, kc = serve(SimpleHTTPRequestHandler, tmp_path, directory=str(empty))
    try:
        for verb in VERBS[:4]:
            one_line_error(run(*verb, "--kubeconfig", kc), "is not a Kubernetes API server")
    finally:
        server.close()


def test_a_real_api_server_with_a_missing_run_is_still_a_missing_run(tmp_path):
    """On the recorded API server a missing run is a missing run, and a JobSet without its CRD is the CRD
    missing: the server answers 404 only where a Kubernetes API does (a named object, an uninstalled group)."""
    with Replay("job-running") as r:
        kc = r.kubeconfig(tmp_path)
        one_line_error(run("status", "nope", "--kubeconfig", kc, "--on", "cluster"), "no run nope in namespace rec")
        args = ("submit", "--name", "js", "--kind", "jobset", "--nodes", "2", "--gpus", "0", "--kubeconfig", kc)
        one_line_error(run(*args), "the JobSet CRD is not installed")


def _self_signed(tmp_path: Path) -> tuple[str, str]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed: no certificate for the TLS server")
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-days", "1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return str(cert), str(key)


@pytest.mark.timeout(120)
def test_insecure_tls_is_one_warning_line(tmp_path):
    """`insecure-skip-tls-verify: true`: the verbs work, and say so once, in one line (urllib3 printed a
    multi-line InsecureRequestWarning per request)."""
    import ssl

    cert, key = _self_signed(tmp_path)
    with Replay("job-worker-killed") as r:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        r.server.socket = ctx.wrap_socket(r.server.socket, server_side=True)
        kc = tmp_path / "kc-tls"
        kc.write_text(kubeconfig(f"https://127.0.0.1:{r.server.server_address[1]}", insecure=True))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "PYTHONWARNINGS": ""}
        for args in (["status", r.name], ["logs", r.name, "--tail", "1"]):
            res = subprocess.run(
                [sys.executable, "-m", "kgen", *args, "--kubeconfig", str(kc), "--on", "cluster"],
                capture_output=True, text=True, timeout=90, env=env,
            )  # fmt: skip
            assert res.returncode in (0, 1), res.stderr
            assert res.stdout.strip()
            assert res.stderr.splitlines() == [
                f"kgen: warning: not verifying the TLS certificate of https://127.0.0.1:{r.server.server_address[1]} "
                "(insecure-skip-tls-verify in the kubeconfig)"
            ], res.stderr


SECRET = "root:$6$kgen-test-secret-hash$abcdefghijklmnop:19000:0:99999:7:::"


@pytest.mark.parametrize(
    "content,words",
    [
        (SECRET + "\ndaemon:*:19000:0:99999:7:::\n", ["not a kubeconfig"]),  # /etc/shadow's shape
        ("root:x:0:0:root:/root:/bin/bash\n\tbin:x:1:1\n", ["is not YAML (line 2, column 1)"]),
        ("- a\n- b\n", ["not a mapping (list)"]),
        ("name: value\n", ["no clusters, contexts or users"]),
        (b"\xff\xfe\x00garbage", ["is not UTF-8 text"]),
    ],
)
def test_a_file_that_is_not_a_kubeconfig_is_named_never_quoted(tmp_path, content, words):
    path = tmp_path / "not-a-kubeconfig"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    for where, args, env in (
        ("KUBECONFIG", [], {"KUBECONFIG": str(path)}),
        ("--kubeconfig", ["--kubeconfig", str(path)], {}),
    ):
        res = run("list", *args, env=env)
        line = one_line_error(res, f"kgen: error: {where}: {path}", *words)
        assert "root:" not in line and "kgen-test-secret" not in line and "item assignment" not in line
