"""A prompt hook's model behind HTTPS, as a user meets it at the command line (a real
`python -m mcpx_hooks.supervisor` process, the loopback model speaking TLS with a certificate
for 127.0.0.1 signed by a CA of the test's own): a certificate the supervisor does not trust,
a URL whose scheme is not what the server speaks, each said as what it is (not as a server
that cannot be reached), with what to do, as is a host name not known; and the CA given in
`SSL_CERT_FILE`, as the page says, makes the same model answer."""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from clusterparts import tls_files
from loopmodel import LoopModel, Reply

CLI = [sys.executable, "-m", "mcpx_hooks.supervisor"]
ADVICE = '{"advise": "check the lockfile"}'


@pytest.fixture
def ca(tmp_path: Path) -> tuple[Path, ssl.SSLContext]:
    """The CA's certificate file and a server context whose certificate it signed."""
    ca_file = tmp_path / "ca.pem"
    cert, key = tls_files(tmp_path, ca_file)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return ca_file, context


@pytest.fixture
def tls_model(ca: tuple[Path, ssl.SSLContext]) -> Iterator[LoopModel]:
    with LoopModel(default=Reply(ADVICE), tls=ca[1]) as server:
        yield server


def failing_run(tmp_path: Path, url: str, **env: str) -> dict[str, object]:
    """`exec --json -- false` under a prompt hook on `onError` asking the model at `url`; its
    hook frame."""
    (tmp_path / "c.toml").write_text(
        f"""
[defaults]
sandbox = "none"
[script]
sandbox = "none"
[models.default]
provider = "openai"
url = "{url}"
model = "loop-1"
[[hooks]]
name = "explain"
on = "script"
phase = "onError"
prompt = "The job failed: @error"
"""
    )
    environ = {k: v for k, v in os.environ.items() if not k.startswith("SSL_CERT_")}
    environ |= {"MCPX_HOOKS_NO_DISCOVERY": "1", "XDG_STATE_HOME": str(tmp_path / "state"), **env}
    done = subprocess.run(
        [*CLI, "exec", "--json", "--config", "c.toml", "--", "false"],
        check=False,
        cwd=tmp_path,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stderr
    frames = [json.loads(line) for line in done.stdout.splitlines()]
    (hook,) = [f for f in frames if f["type"] == "hook"]
    return hook


def test_a_certificate_not_trusted_is_said_with_how_to_trust_it(
    tmp_path: Path, tls_model: LoopModel
) -> None:
    hook = failing_run(tmp_path, tls_model.url)
    assert hook["status"] == "failed"
    reason = str(hook["reason"])
    assert "unreachable" not in reason, reason
    assert "TLS certificate is not trusted" in reason and "SSL_CERT_FILE" in reason, reason
    assert tls_model.requests == []


def test_the_ca_given_in_ssl_cert_file_is_trusted(
    tmp_path: Path, ca: tuple[Path, ssl.SSLContext], tls_model: LoopModel
) -> None:
    hook = failing_run(tmp_path, tls_model.url, SSL_CERT_FILE=str(ca[0]))
    assert hook["status"] == "ok" and hook["advice"] == ["check the lockfile"], hook


def test_https_to_a_plain_http_server_says_the_handshake_failed(tmp_path: Path) -> None:
    with LoopModel(default=Reply(ADVICE)) as plain:
        hook = failing_run(tmp_path, plain.url.replace("http://", "https://"))
    reason = str(hook["reason"])
    assert hook["status"] == "failed" and "unreachable" not in reason, reason
    assert "TLS handshake failed" in reason and "http://" in reason, reason


def test_http_to_an_https_server_says_the_reply_never_came_whole(
    tmp_path: Path, tls_model: LoopModel
) -> None:
    hook = failing_run(tmp_path, tls_model.url.replace("https://", "http://"))
    reason = str(hook["reason"])
    assert hook["status"] == "failed" and "Error)" not in reason, reason
    assert "before a whole reply" in reason and "https://" in reason, reason


def test_a_host_name_not_known_is_said_as_such(tmp_path: Path) -> None:
    # (`.invalid` is never a name: RFC 2606) a misspelt host is not a server down
    hook = failing_run(tmp_path, "http://model.invalid:8080/v1")
    reason = str(hook["reason"])
    assert hook["status"] == "failed" and "unreachable" not in reason, reason
    assert "its host name model.invalid is not known (" in reason, reason
