"""A NATS server the cluster cannot use: one without JetStream (a real nats-server started
without it), and one whose JetStream API never answers (a fake server that answers nothing
but its handshake). A worker and a gateway each say why in one line and exit nonzero, no
traceback. And a server that does not do TLS where TLS is asked for: sent nothing."""

from __future__ import annotations

import secrets
import subprocess
from pathlib import Path

import pytest
from clusterparts import Nats, need_nats, tls_files
from fakenats import fake_nats
from service_client import CLI, ENV

from mcpx_hooks.supervisor.cluster.jetstreams import JETSTREAM_OFF, JETSTREAM_SILENT

PASSWORD = "pw-never-in-clear-5c1d"
#: The parts, as started against a server: each its command and how it names itself.
PARTS = {
    "worker": (["worker"], "mcpx-hooks worker"),
    "gateway": (["serve", "--port", "0", "--no-auth"], "mcpx-hooks serve"),
}


def started(cwd: Path, part: str, flags: list[str]) -> tuple[int, list[str], str]:
    """The part started with `flags` until it exits (bounded): its code, its stderr's lines
    and its stdout."""
    command, _ = PARTS[part]
    done = subprocess.run(
        [*CLI, *command, *flags],
        cwd=cwd,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.returncode, done.stderr.splitlines(), done.stdout


@pytest.mark.parametrize("insecure", [False, True], ids=["users", "insecure"])
@pytest.mark.parametrize("part", PARTS)
def test_a_nats_without_jetstream_is_said_in_one_line(
    tmp_path: Path, part: str, insecure: bool
) -> None:
    # (With --nats-insecure too: its warning is for a part that starts, not one refused.)
    need_nats()
    nats = Nats(tmp_path / "jetstream", jetstream=False, open=insecure)
    nats.start()
    try:
        code, lines, out = started(
            tmp_path, part, nats.flags("worker" if part == "worker" else "gateway")
        )
    finally:
        nats.stop()
    assert (code, lines) == (2, [f"{PARTS[part][1]}: {JETSTREAM_OFF}"]), (code, lines)
    assert "listening" not in out and "taking runs" not in out


@pytest.mark.parametrize("part", PARTS)
def test_a_jetstream_that_never_answers_is_said_in_one_line(tmp_path: Path, part: str) -> None:
    auth = tmp_path / "auth.toml"
    auth.write_text('user = "u"\npassword = "p"\n')
    auth.chmod(0o600)
    key = tmp_path / "cluster.key"
    key.write_text(secrets.token_hex(32) + "\n")
    key.chmod(0o600)
    with fake_nats() as fake:
        flags = [
            "--cluster",
            fake.url,
            "--nats-auth-file",
            str(auth),
            "--cluster-key-file",
            str(key),
        ]
        code, lines, out = started(tmp_path, part, flags)
        assert b"$JS.API.STREAM." in fake.sent(), (code, lines)  # asked, never answered
    assert code == 1, (code, lines)
    assert len(lines) == 1 and lines[0].startswith(f"{PARTS[part][1]}: {JETSTREAM_SILENT}"), lines
    assert "listening" not in out and "taking runs" not in out


@pytest.mark.parametrize("asked", ["tls-url", "tls-ca"])
@pytest.mark.parametrize("part", PARTS)
def test_tls_asked_for_a_server_without_it_is_sent_nothing(
    tmp_path: Path, part: str, asked: str
) -> None:
    """A `tls://` URL, or `--nats-tls-ca`, and a server whose INFO does not ask for TLS (a
    server without it, or whoever answers in its place): nats-py would go on in clear, the
    password in its CONNECT. The part refuses it before a CONNECT is sent."""
    auth = tmp_path / "auth.toml"
    auth.write_text(f'user = "u"\npassword = "{PASSWORD}"\n')
    auth.chmod(0o600)
    key = tmp_path / "cluster.key"
    key.write_text(secrets.token_hex(32) + "\n")
    key.chmod(0o600)
    ca = tmp_path / "ca.pem"
    tls_files(tmp_path, ca)
    with fake_nats(tls_required=False) as fake:
        url = fake.url.replace("nats://", "tls://") if asked == "tls-url" else fake.url
        flags = ["--cluster", url, "--nats-auth-file", str(auth), "--cluster-key-file", str(key)]
        flags += ["--nats-tls-ca", str(ca)] if asked == "tls-ca" else []
        code, lines, _ = started(tmp_path, part, flags)
        sent = fake.sent()
    assert fake.received, "the part never connected"
    assert b"CONNECT" not in sent and PASSWORD.encode() not in sent and b"pass" not in sent
    assert code == 2, (code, lines)
    assert len(lines) == 1 and f"NATS at {url} did not start TLS" in lines[0], lines
