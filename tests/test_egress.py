"""Egress by name with real parts: a sandboxed hook reaching a loopback HTTP server by name
through the supervisor's proxy, refused another port and another host (an `egress` frame
each, once per host), and failing to connect directly."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import ssl
import subprocess
import sys
import textwrap
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from mcpx_hooks.supervisor.core.convert import to_json
from mcpx_hooks.supervisor.core.frames import HookStatus
from mcpx_hooks.supervisor.core.hooks import Action, Hook, Profile, Provenance, SourceKind
from mcpx_hooks.supervisor.core.points import Phase
from mcpx_hooks.supervisor.process.egressca import RunCA
from mcpx_hooks.supervisor.process.spawner import Spawner
from mcpx_hooks.supervisor.run.hookcontext import HookContext, RunInfo
from mcpx_hooks.supervisor.run.hookrun import run_hook

PY = sys.executable

#: A hook that asks for each URL through the proxy variables (urllib reads them), and
#: connects directly to each address, and says what happened as its advice.
CLIENT = textwrap.dedent(
    """
    import json, os, socket, sys, urllib.request, urllib.error
    urls, direct = json.loads(sys.argv[1]), json.loads(sys.argv[2])
    seen = {"env": dict(os.environ)}
    for url in urls:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                seen[url] = [r.status, r.read().decode()]
        except urllib.error.HTTPError as exc:
            seen[url] = [exc.code, exc.read().decode()]
        except OSError as exc:
            seen[url] = ["error", str(exc)]
    for host, port in direct:
        try:
            socket.create_connection((host, port), timeout=2).close()
            seen[f"{host}:{port}"] = "connected"
        except OSError as exc:
            seen[f"{host}:{port}"] = exc.__class__.__name__
    print(json.dumps({"advise": json.dumps(seen)}))
    """
)


async def _http_server(
    tls: ssl.SSLContext | None = None,
    *,
    task_status: trio.TaskStatus[tuple[int, list[bytes]]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """A loopback HTTP server (HTTPS with `tls`) answering "hello" to every request; it keeps
    each request's head."""
    heads: list[bytes] = []
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]

    async def handle(plain: trio.SocketStream) -> None:
        stream: trio.abc.Stream = plain
        if tls is not None:
            stream = trio.SSLStream(plain, tls, server_side=True)
        with contextlib.suppress(trio.BrokenResourceError):  # (a client that gave up)
            await _answer(stream, heads)

    task_status.started((port, heads))
    await trio.serve_listeners(handle, listeners)


async def _answer(stream: trio.abc.Stream, heads: list[bytes]) -> None:
    """Reads a request's head into `heads` and answers "hello"."""
    async with stream:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = await stream.receive_some(65536)
            if not chunk:
                return
            data += chunk
        heads.append(data)
        await stream.send_all(
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello"
        )


def _hook(tmp_path: Path, urls: list[str], direct: list[Any], **fields: Any) -> Hook:
    script = tmp_path / "client.py"
    script.write_text(CLIENT)
    base: dict[str, Any] = {
        "name": "fetch",
        "on": "script",
        "phase": Phase.BEFORE,
        "action": Action.RUN,
        "target": (PY, str(script), json.dumps(urls), json.dumps(direct)),
        "declaring_dir": str(tmp_path),
        "source": Provenance(SourceKind.COMMAND_LINE),
        "sandbox": Profile.STRICT,
        "timeout_ms": 20000,
    }
    base.update(fields)
    return Hook(**base)


CTX = HookContext(run=RunInfo("r1", ("x",), "/", "2026-01-01T00:00:00Z"))


@pytest.fixture
async def server() -> AsyncIterator[tuple[int, list[bytes]]]:
    async with trio.open_nursery() as nursery:
        yield await nursery.start(_http_server)
        nursery.cancel_scope.cancel()


@contextlib.contextmanager
def hello_server() -> Iterator[int]:
    """A loopback HTTP server answering every GET with "hello"; its port."""

    class Hello(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "5")
            self.end_headers()
            self.wfile.write(b"hello")

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        thread.join()
        server.server_close()


async def test_allowed_host_by_name_refused_others_no_direct_connect(
    strict_spawner: Spawner, readable_tmp: Path, server: tuple[int, list[bytes]]
) -> None:
    port, heads = server
    urls = [
        f"http://localhost:{port}/ok",
        f"http://localhost:{port + 1}/other-port",
        f"http://127.0.0.1:{port}/by-address",
        f"http://example.invalid:{port}/other-host",
    ]
    hook = _hook(
        readable_tmp, urls, [["127.0.0.1", port], ["10.0.0.1", 80]], network=(f"localhost:{port}",)
    )
    report = await run_hook(strict_spawner, hook, CTX)
    frame = report.frame
    assert frame.status is HookStatus.OK, (frame.reason, frame.stderr_tail)
    seen = json.loads(frame.advice[0])
    assert seen[urls[0]] == [200, "hello"]
    assert seen[urls[1]][0] == 403
    assert seen[urls[1]][1].strip() == "blocked: localhost not in network"
    assert seen[urls[2]][0] == 403
    assert seen[urls[3]][0] == 403
    # Direct connections fail: the child's own loopback has nothing there, and no route out.
    assert seen[f"127.0.0.1:{port}"] == "ConnectionRefusedError"
    assert seen["10.0.0.1:80"] in ("OSError", "TimeoutError")
    assert seen["env"]["HTTP_PROXY"] == seen["env"]["https_proxy"] == "http://127.0.0.1:3128"
    # The server saw the one allowed request, in origin form.
    assert len(heads) == 1 and heads[0].startswith(b"GET /ok HTTP/1.1\r\n")
    # Once per host (the first port asked), in order; the frame says each in words.
    assert report.refused == (
        ("localhost", port + 1),
        ("127.0.0.1", port),
        ("example.invalid", port),
    )
    assert frame.egress == (
        "blocked: localhost not in network",
        "blocked: 127.0.0.1 not in network",
        "blocked: example.invalid not in network",
    )


#: A hook that sends the proxy each CONNECT target of argv[1] as raw bytes and reports the
#: status line it got (or that the connection ended without one).
RAW = textwrap.dedent(
    """
    import json, os, socket, sys
    from urllib.parse import urlsplit
    proxy = urlsplit(os.environ["HTTP_PROXY"])
    seen = []
    for target in json.loads(sys.argv[1]):
        with socket.create_connection((proxy.hostname, proxy.port), timeout=10) as s:
            s.sendall(b"CONNECT " + target.encode("latin-1") + b" HTTP/1.1\\r\\n\\r\\n")
            seen.append(s.recv(200).split(b"\\r\\n")[0].decode() or "closed")
    print(json.dumps({"advise": json.dumps(seen)}))
    """
)


async def test_a_target_that_is_no_host_name_is_refused_and_the_proxy_goes_on(
    strict_spawner: Spawner, readable_tmp: Path
) -> None:
    """A child that asked for `ex\u00e4mple.example.invalid` (bytes no host name has) raised
    the resolver's UnicodeError through the proxy's nursery: the supervisor ended with a
    traceback. A NUL or a tab after an allowed address (`127.0.0.1\\t.example.invalid`)
    reached the resolver too. Each is now a 400, before matching, and the next one is
    answered."""
    script = readable_tmp / "raw.py"
    script.write_text(RAW)
    targets = [
        "ex\u00c3\u00a4mple.example.invalid:443",  # UTF-8 bytes, as a child sends them
        "evil.test\x00.example.invalid:443",
        "127.0.0.1\t.example.invalid:80",
        ".example.invalid:443",
        "[::1]:80",
    ]
    hook = _hook(readable_tmp, [], [], network=("*.example.invalid",))
    hook = attrs.evolve(hook, target=(PY, str(script), json.dumps(targets)))
    report = await run_hook(strict_spawner, hook, CTX)
    assert report.frame.status is HookStatus.OK, (report.frame.reason, report.frame.stderr_tail)
    assert json.loads(report.frame.advice[0]) == [
        *["HTTP/1.1 400 Bad Request"] * 4,
        "HTTP/1.1 403 Forbidden",
    ]


async def test_strict_hook_without_network_has_no_proxy(
    strict_spawner: Spawner, readable_tmp: Path, server: tuple[int, list[bytes]]
) -> None:
    port, heads = server
    urls = [f"http://localhost:{port}/ok"]
    hook = _hook(readable_tmp, urls, [])
    report = await run_hook(strict_spawner, hook, CTX)
    seen = json.loads(report.frame.advice[0])
    assert seen[urls[0]][0] == "error"
    assert "HTTP_PROXY" not in seen["env"]
    assert heads == []
    assert report.refused == ()


def _test_ca(tmp_path: Path) -> tuple[Path, ssl.SSLContext]:
    """A CA made for the test (its certificate in a file: the proxy's "system store") and a
    TLS server context for `localhost` whose certificate it signed: the per-run CA's own
    class, standing here for a CA the system trusts."""
    ca = RunCA()
    ca_file = tmp_path / "test-ca.pem"
    ca_file.write_bytes(ca.pem)
    return ca_file, ca.server_context("localhost")


SECRET = "ghp_" + "S3cr3tV4lu3" * 3

#: A hook that sends its token to each URL (in an Authorization header) and prints its env.
SENDER = textwrap.dedent(
    """
    import json, os, sys, urllib.request, urllib.error
    token = os.environ["GITHUB_TOKEN"]
    seen = {"env": dict(os.environ)}
    for url in json.loads(sys.argv[1]):
        req = urllib.request.Request(url, headers={"Authorization": "Bearer " + token})
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                seen[url] = [r.status, r.read().decode()]
        except urllib.error.HTTPError as exc:
            seen[url] = [exc.code, exc.read().decode()]
        except OSError as exc:
            seen[url] = ["error", str(exc)]
    print(json.dumps({"advise": json.dumps(seen)}))
    """
)


async def test_secret_swapped_for_its_hosts_only_https_through_the_run_ca(
    strict_spawner: Spawner, readable_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ca_file, server_tls = _test_ca(readable_tmp)
    monkeypatch.setenv("MCPX_HOOKS_EGRESS_TRUST", str(ca_file))
    monkeypatch.setenv("GITHUB_TOKEN", SECRET)
    script = readable_tmp / "sender.py"
    script.write_text(SENDER)
    async with trio.open_nursery() as nursery:
        tls_port, tls_heads = await nursery.start(_http_server, server_tls)
        http_port, http_heads = await nursery.start(_http_server)
        other_port, other_heads = await nursery.start(_http_server)
        urls = [
            f"https://localhost:{tls_port}/user",
            f"http://localhost:{http_port}/plain",
            f"http://127.0.0.1:{other_port}/elsewhere",
        ]
        hook = _hook(
            readable_tmp,
            [],
            [],
            target=(PY, str(script), json.dumps(urls)),
            network=(f"localhost:{tls_port}", f"localhost:{http_port}", f"127.0.0.1:{other_port}"),
            secrets=("GITHUB_TOKEN",),
            secret_hosts={"GITHUB_TOKEN": (f"localhost:{tls_port}", f"localhost:{http_port}")},
        )
        report = await run_hook(strict_spawner, hook, CTX)
        nursery.cancel_scope.cancel()
    frame = report.frame
    assert frame.status is HookStatus.OK, (frame.reason, frame.stderr_tail)
    seen = json.loads(frame.advice[0])
    env = seen["env"]
    # The hook holds a placeholder, never the value; it trusts the run's CA alone.
    assert env["GITHUB_TOKEN"].startswith("mcpx-secret-GITHUB_TOKEN-")
    assert SECRET not in json.dumps(seen)
    ca_path = env["SSL_CERT_FILE"]
    assert env["REQUESTS_CA_BUNDLE"] == env["NODE_EXTRA_CA_CERTS"] == ca_path
    assert ca_path.startswith(str(Path(ca_path).parent)) and "egress" in ca_path
    # HTTPS through the run's CA, verified upstream against the test's "system store".
    assert seen[urls[0]] == [200, "hello"], seen
    assert seen[urls[1]] == [200, "hello"], seen
    assert f"Authorization: Bearer {SECRET}".encode() in tls_heads[0]
    assert f"Authorization: Bearer {SECRET}".encode() in http_heads[0]
    # Sent anywhere else, refused and reported; that server saw nothing.
    assert seen[urls[2]][0] == 403
    refused = f"blocked: secret GITHUB_TOKEN sent to 127.0.0.1:{other_port}"
    assert seen[urls[2]][1].strip() == refused
    assert other_heads == []
    assert report.refused == (("127.0.0.1", other_port),)
    assert frame.egress == (refused,)
    assert SECRET not in json.dumps(to_json(frame))


def test_exec_run_frames_egress_once_per_host_and_doctor(readable_tmp: Path) -> None:
    """A whole run through `exec`, its hooks' `network` from a config file: the refused
    host is one `egress` frame (two hooks asked for it), before the first hook frame that
    says "blocked: HOST not in network"; the allowed server answered by name."""
    with hello_server() as port:
        client = readable_tmp / "client.py"
        client.write_text(CLIENT)
        urls = [f"http://localhost:{port}/ok", f"http://example.invalid:{port}/no"]
        hook = (
            '[[hooks]]\non = "script"\nphase = "before"\nname = "{name}"\n'
            f'network = ["localhost:{port}"]\n'
            f"run = {json.dumps([PY, str(client), json.dumps(urls), '[]'])}\n"
        )
        config = readable_tmp / "c.toml"
        config.write_text(hook.format(name="one") + hook.format(name="two"))
        done = subprocess.run(
            [
                PY,
                "-m",
                "mcpx_hooks.supervisor",
                "exec",
                "--json",
                "--config",
                str(config),
                "--",
                "true",
            ],
            check=False,
            cwd=readable_tmp,
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "MCPX_HOOKS_NO_DISCOVERY": "1"},
        )
    assert done.returncode == 0, done.stderr
    frames = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    kinds = [f["type"] for f in frames]
    egress_frames = [f for f in frames if f["type"] == "egress"]
    assert egress_frames == [
        {
            **egress_frames[0],
            "hook": "one",
            "host": "example.invalid",
            "port": port,
            "allowed": False,
        }
    ]
    assert kinds.index("egress") == kinds.index("hook") - 1
    hooks = [f for f in frames if f["type"] == "hook"]
    assert egress_frames[0]["why"] == (
        f'blocked: example.invalid not in network; "example.invalid:{port}" in the network of'
        f" hook one ({config}:/hooks/0) would admit it"
    )
    for frame in hooks:
        assert frame["egress"] == ["blocked: example.invalid not in network"]
        seen = json.loads(frame["advice"][0])
        assert seen[urls[0]] == [200, "hello"]
        assert seen[urls[1]][0] == 403


async def test_doctor_shows_the_proxy(strict_spawner: Spawner) -> None:
    from mcpx_hooks.supervisor.cli.doctor import report

    text, _ = report(strict_spawner)
    assert "egress (`network` lists" in text
    assert "127.0.0.1:3128" in text


def test_doctor_says_no_child_reaches_the_proxy_without_network_namespaces() -> None:
    # It said "`network` fails", then that children reach the proxy on a loopback of their own.
    from mcpx_hooks.supervisor.process.egress import doctor_lines

    said = "\n".join(doctor_lines("hidden by MCPX_HOOKS_HIDE"))
    assert "missing netns: `network` fails" in said and "127.0.0.1:3128" not in said
    assert "no child reaches it: each would need a network namespace of its own" in said
    assert "on a loopback of their own" in "\n".join(doctor_lines(True))


def test_exec_script_run_with_script_network(readable_tmp: Path) -> None:
    """`[script] network`: the run's own script reaches the allowed server by name; the
    refused host is an `egress` frame naming the run."""
    with hello_server() as port:
        client = readable_tmp / "client.py"
        client.write_text(CLIENT)
        urls = [f"http://localhost:{port}/ok", f"http://example.invalid:{port}/no"]
        config = readable_tmp / "c.toml"
        config.write_text(f'[script]\nsandbox = "strict"\nnetwork = ["localhost:{port}"]\n')
        done = subprocess.run(
            [PY, "-m", "mcpx_hooks.supervisor", "exec", "--json", "--config", str(config),
             "--", PY, str(client), json.dumps(urls), "[]"],
            check=False, cwd=readable_tmp, capture_output=True, text=True, timeout=60,
            env={**os.environ, "MCPX_HOOKS_NO_DISCOVERY": "1"},
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    frames = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    (egress_frame,) = [f for f in frames if f["type"] == "egress"]
    assert egress_frame["run"] == frames[0]["runId"]
    assert (egress_frame["host"], egress_frame["port"]) == ("example.invalid", port)
    # What a person reads: the host and port, and the item that, listed, would admit it.
    from mcpx_hooks.supervisor.cli.view import frame_lines

    assert frame_lines(egress_frame) == [
        f"egress example.invalid:{port} for the run's script: blocked: example.invalid not in"
        f' network; "example.invalid:{port}" in [script] network (or exec --network, a'
        " request's network) would admit it"
    ]
    (result,) = [f for f in frames if f["type"] == "result"]
    seen = json.loads(result["value"]["advise"])
    assert seen[urls[0]] == [200, "hello"]
    assert seen[urls[1]][0] == 403


async def test_upstream_verified_against_the_system_store(
    strict_spawner: Spawner, readable_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the test's CA as the proxy's trust, its server's certificate is not trusted:
    the proxy answers 502 and sends nothing (the secret above all) to it."""
    _, server_tls = _test_ca(readable_tmp)
    monkeypatch.delenv("MCPX_HOOKS_EGRESS_TRUST", raising=False)
    monkeypatch.setenv("GITHUB_TOKEN", SECRET)
    script = readable_tmp / "sender.py"
    script.write_text(SENDER)
    async with trio.open_nursery() as nursery:
        tls_port, tls_heads = await nursery.start(_http_server, server_tls)
        url = f"https://localhost:{tls_port}/user"
        hook = _hook(
            readable_tmp,
            [],
            [],
            target=(PY, str(script), json.dumps([url])),
            network=(f"localhost:{tls_port}",),
            secrets=("GITHUB_TOKEN",),
            secret_hosts={"GITHUB_TOKEN": (f"localhost:{tls_port}",)},
        )
        report = await run_hook(strict_spawner, hook, CTX)
        nursery.cancel_scope.cancel()
    seen = json.loads(report.frame.advice[0])
    assert seen[url][0] == 502, seen[url]
    assert "CERTIFICATE_VERIFY_FAILED" in seen[url][1]
    assert tls_heads == []


#: A tool server (MCP over stdio, standard library only) with one tool, `fetch`, which sends
#: its `GITHUB_TOKEN` to a URL through its proxy variables and answers what came back and
#: the token as it sees it.
FETCH_SERVER = textwrap.dedent(
    """
    import json, os, sys, urllib.request, urllib.error
    def send(msg):
        sys.stdout.write(json.dumps(msg) + "\\n"); sys.stdout.flush()
    for line in sys.stdin:
        msg = json.loads(line)
        rid, method = msg.get("id"), msg.get("method")
        if method == "initialize":
            send({"jsonrpc": "2.0", "id": rid, "result": {
                "protocolVersion": msg["params"]["protocolVersion"],
                "capabilities": {"tools": {}}, "serverInfo": {"name": "fetch", "version": "1"}}})
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": rid, "result": {"tools": [
                {"name": "fetch", "inputSchema": {"type": "object"}}]}})
        elif method == "tools/call":
            url = msg["params"]["arguments"]["url"]
            token = os.environ["GITHUB_TOKEN"]
            req = urllib.request.Request(url, headers={"Authorization": "Bearer " + token})
            try:
                with urllib.request.urlopen(req, timeout=5) as r:
                    got = [r.status, r.read().decode()]
            except urllib.error.HTTPError as exc:
                got = [exc.code, exc.read().decode()]
            text = json.dumps({"got": got, "token": token})
            send({"jsonrpc": "2.0", "id": rid, "result": {
                "content": [{"type": "text", "text": text}], "isError": False}})
        elif rid is not None:
            send({"jsonrpc": "2.0", "id": rid, "result": {}})
    """
)


async def test_a_tool_server_with_network_and_a_secret_with_hosts(
    strict_spawner: Spawner, readable_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mcpx_hooks.supervisor.core.hooks import Config
    from mcpx_hooks.supervisor.core.servers import ServerSpec
    from mcpx_hooks.supervisor.run.bus import Bus
    from mcpx_hooks.supervisor.run.serverhooks import open_servers

    ca_file, server_tls = _test_ca(readable_tmp)
    monkeypatch.setenv("MCPX_HOOKS_EGRESS_TRUST", str(ca_file))
    monkeypatch.setenv("GITHUB_TOKEN", SECRET)
    (readable_tmp / "fetch_server.py").write_text(FETCH_SERVER)
    async with trio.open_nursery() as nursery:
        tls_port, tls_heads = await nursery.start(_http_server, server_tls)
        other_port, other_heads = await nursery.start(_http_server)
        spec = ServerSpec(
            "fetch",
            (PY, "fetch_server.py"),
            str(readable_tmp),
            sandbox=Profile.STRICT,
            secrets=("GITHUB_TOKEN",),
            network=(f"localhost:{tls_port}", f"localhost:{other_port}"),
            secret_hosts={"GITHUB_TOKEN": (f"localhost:{tls_port}",)},
        )
        async with open_servers(strict_spawner, Bus(), Config()) as manager:
            answers = []
            for url in (f"https://localhost:{tls_port}/api", f"http://localhost:{other_port}/x"):
                result, _ = await manager.call(spec, "fetch", {"url": url})
                answers.append(json.loads(result.content[0].text))  # type: ignore[union-attr]
        nursery.cancel_scope.cancel()
    assert answers[0]["got"] == [200, "hello"]
    assert answers[0]["token"].startswith("mcpx-secret-GITHUB_TOKEN-")
    assert f"Authorization: Bearer {SECRET}".encode() in tls_heads[0]
    assert answers[1]["got"][0] == 403
    assert f"blocked: secret GITHUB_TOKEN sent to localhost:{other_port}" in answers[1]["got"][1]
    assert other_heads == []
