"""Host names as a child asks the proxy for them, written another way than its list writes
them: a fully qualified name (`localhost.`), an IPv4 address not in dotted quads
(`2130706433`, `127.1`), an IPv6 address; and what a refusal suggests for each. The real
proxy (a lease serving a loopback listener) and a strict hook through it."""

from __future__ import annotations

import json
import socket
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import attrs
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st
from test_egress import CTX, PY, _hook, _http_server
from test_egress_bounds import proxy, read_all

from mcpx_hooks.supervisor.core import egress
from mcpx_hooks.supervisor.core.frames import HookStatus
from mcpx_hooks.supervisor.process.spawner import Spawner
from mcpx_hooks.supervisor.run.hookrun import run_hook

WAIT_S = 5.0


@pytest.fixture
async def upstream() -> AsyncIterator[tuple[int, list[bytes]]]:
    async with trio.open_nursery() as nursery:
        yield await nursery.start(_http_server)
        nursery.cancel_scope.cancel()


async def _ask(port: int, sent: bytes) -> bytes:
    with trio.fail_after(WAIT_S):
        async with await trio.open_tcp_stream("127.0.0.1", port) as client:
            await client.send_all(sent)
            return await read_all(client)


async def _status(port: int, target: str) -> bytes:
    """The status line a `CONNECT target` is answered with."""
    with trio.fail_after(WAIT_S):
        async with await trio.open_tcp_stream("127.0.0.1", port) as client:
            await client.send_all(f"CONNECT {target} HTTP/1.1\r\n\r\n".encode())
            got = b""
            while b"\r\n" not in got and (chunk := await client.receive_some(4096)):
                got += chunk
            return got.partition(b"\r\n")[0]


async def test_a_name_with_its_trailing_dot_is_reached_as_the_name(
    upstream: tuple[int, list[bytes]],
) -> None:
    """`CONNECT localhost.:PORT` under `localhost:PORT` was admitted, then answered `502
    cannot reach localhost.:PORT: Name or service not known`: the lookup kept the dot that
    the match had dropped. The name is looked up, and told upstream, without it."""
    port, heads = upstream
    async with proxy((f"localhost:{port}",)) as (lease, at):
        assert await _status(at, f"localhost.:{port}") == b"HTTP/1.1 200 Connection Established"
        got = await _ask(at, f"GET http://LocalHost.:{port}/x HTTP/1.1\r\n\r\n".encode())
        assert got.startswith(b"HTTP/1.1 200 OK") and got.endswith(b"hello"), got
        assert f"\r\nHost: LocalHost:{port}\r\n".encode() in heads[-1], heads
        assert lease.refused == {}


async def test_an_ipv4_address_written_another_way_is_that_address(
    upstream: tuple[int, list[bytes]],
) -> None:
    """`CONNECT 2130706433:PORT` (127.0.0.1 as one number) was refused under
    `127.0.0.1:PORT`, though the resolver reads it as that address, and the refusal
    suggested the item "2130706433:PORT". It is judged, reached and named as the address."""
    port, _ = upstream
    async with proxy((f"127.0.0.1:{port}",)) as (lease, at):
        for written in ("2130706433", "127.1", "0x7f.0.0.1", "0177.0.0.1"):
            assert await _status(at, f"{written}:{port}") == (
                b"HTTP/1.1 200 Connection Established"
            ), written
        assert lease.refused == {}
    async with proxy((f"localhost:{port}",)) as (lease, at):
        assert await _status(at, f"2130706433:{port}") == b"HTTP/1.1 403 Forbidden"
        assert lease.refused == {"127.0.0.1": port}
    why = egress.refusal("127.0.0.1", port, None, "the list")
    assert why.endswith(f'; "127.0.0.1:{port}" in the list would admit it')


def test_a_refusal_suggests_only_an_item_the_config_takes() -> None:
    """`CONNECT [::1]:PORT` was refused with '"::1:PORT" in the network of hook probe (…)
    would admit it', an item the config refuses. No item names an IPv6 address, or a name
    whose label begins or ends with `-`: the refusal says so, and suggests nothing."""
    ipv6 = egress.refusal("::1", 18080, None, "the list")
    assert ipv6 == (
        "blocked: ::1 not in network; no item of a list names an IPv6 address"
        ' (only "*" admits one, and every host with it): list a name that resolves to it'
    )
    odd = egress.refusal("-x.example.org", 443, None, "the list")
    assert odd == (
        "blocked: -x.example.org not in network; no item names it as written"
        " (a label of an item begins and ends with a letter or a digit): a glob such as"
        ' "*.example.org" in the list would admit it'
    )
    for host in ("::1", "-x.example.org", "a_.example.org", "example.org", "127.0.0.1"):
        for said in egress.refusal(host, 8080, None, "the list").split('"')[1::2]:
            assert said == "*" or egress.valid(said), (host, said)


#: A hook that sends the proxy each CONNECT target of argv[1] and reports the status line.
RAW = textwrap.dedent(
    """
    import json, os, socket, sys
    from urllib.parse import urlsplit
    proxy = urlsplit(os.environ["HTTP_PROXY"])
    seen = []
    for target in json.loads(sys.argv[1]):
        with socket.create_connection((proxy.hostname, proxy.port), timeout=10) as s:
            s.sendall(b"CONNECT " + target.encode() + b" HTTP/1.1\\r\\n\\r\\n")
            seen.append(s.recv(200).split(b"\\r\\n")[0].decode() or "closed")
    print(json.dumps({"advise": json.dumps(seen)}))
    """
)


async def test_a_strict_hook_asking_by_other_spellings(
    strict_spawner: Spawner, readable_tmp: Path, upstream: tuple[int, list[bytes]]
) -> None:
    """The same, as a strict hook whose list names the server meets them."""
    port, _ = upstream
    script = readable_tmp / "raw.py"
    script.write_text(RAW)
    targets = [f"localhost.:{port}", f"[::1]:{port}", f"2130706433:{port}"]
    hook = _hook(readable_tmp, [], [], network=(f"localhost:{port}",))
    hook = attrs.evolve(hook, target=(PY, str(script), json.dumps(targets)))
    report = await run_hook(strict_spawner, hook, CTX)
    assert report.frame.status is HookStatus.OK, (report.frame.reason, report.frame.stderr_tail)
    assert json.loads(report.frame.advice[0]) == [
        "HTTP/1.1 200 Connection Established",
        "HTTP/1.1 403 Forbidden",
        "HTTP/1.1 403 Forbidden",
    ]
    assert report.refused == (("::1", port), ("127.0.0.1", port))
    for host, p in report.refused:
        for said in egress.refusal(host, p, None, "the list").split('"')[1::2]:
            assert said == "*" or egress.valid(said), (host, said)


@settings(max_examples=300)
@given(
    host=st.from_regex(
        r"(0[xX][0-9a-fA-F]{0,9}|[0-9]{1,11})(\.(0[xX][0-9a-f]{0,3}|[0-9]{1,9})){0,4}",
        fullmatch=True,
    )
)
def test_an_address_is_read_as_the_resolver_reads_it(host: str) -> None:
    try:
        address = socket.inet_ntoa(socket.inet_aton(host))
    except OSError:
        address = host
    assert egress.canonical(host) == address
