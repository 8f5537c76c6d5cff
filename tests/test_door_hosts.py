"""The `Host` header as HTTP/1.1 has it (RFC 9112, 3.2; RFC 3986, 3.2.2): one, naming a host
and a port. Two (h11 refuses them), or one with a user name or a path in it, are refused
(400) before anything reads them. A real service in process (`test_hardening.live_service`,
no token) and a raw socket."""

from __future__ import annotations

from pathlib import Path

from test_door_pipelining import UPGRADE, _answers, _heads
from test_hardening import live_service, unconfined


def _request(path: str, *hosts: bytes) -> bytes:
    return b"".join(
        (
            b"GET ",
            path.encode(),
            b" HTTP/1.1\r\n",
            *(b"Host: " + h + b"\r\n" for h in hosts),
            b"\r\n",
        )
    )


async def test_two_host_headers_or_a_host_with_a_user_name_are_refused(tmp_path: Path) -> None:
    # `Host: attacker.example:1@127.0.0.1` was read as 127.0.0.1 by the check of a server
    # without a token (a URL parser drops what comes before `@`) and served, where a proxy
    # in front, or a log, reads attacker.example.
    async with live_service(unconfined(tmp_path), tmp_path) as live:
        for path in ("/v1/runs", "/healthz"):
            got = await _answers(live.url, _request(path, b"127.0.0.1", b"attacker.example"))
            assert _heads(got)[0][:12] == b"HTTP/1.1 400" and b"multiple Host" in got, got
            for host in (b"attacker.example:1@127.0.0.1", b"127.0.0.1/x", b"127.0.0.1\\x"):
                got = await _answers(live.url, _request(path, host))
                assert _heads(got)[0][:12] == b"HTTP/1.1 400" and b"Host header" in got, got
            got = await _answers(live.url, _request(path, b"127.0.0.1"))
            assert _heads(got)[0][:12] == b"HTTP/1.1 200", got
        upgrade = UPGRADE.replace(b"Host: 127.0.0.1\r\n", b"Host: 127.0.0.1\r\nHost: a.example\r\n")
        got = await _answers(live.url, upgrade)
        assert _heads(got)[0][:12] == b"HTTP/1.1 400" and b"multiple Host" in got, got
