"""`network` on a run: `exec --network HOST` (repeatable) and the `network` field of an exec
request give one run's script its hosts, narrowing `[script] network` as a ceiling, never
widening it; a served request gets no network its server did not give."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from test_admission import callers, refusal, request
from test_egress import CLIENT, SECRET, SENDER, _http_server, hello_server

from mcpx_hooks.supervisor.core.hooks import Config, Profile
from mcpx_hooks.supervisor.service.admission import Way, admit
from mcpx_hooks.supervisor.service.execrequest import parse_exec
from mcpx_hooks.supervisor.service.wire import WireError

PY = sys.executable


def _exec(where: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PY, "-m", "mcpx_hooks.supervisor", "exec", "--json", "--config", str(where / "c.toml"),
         *flags],
        check=False, cwd=where, capture_output=True, text=True, timeout=60,
        env={**os.environ, "MCPX_HOOKS_NO_DISCOVERY": "1"},
    )  # fmt: skip


def test_exec_network_flags_give_the_script_its_hosts(readable_tmp: Path) -> None:
    (readable_tmp / "client.py").write_text(CLIENT)
    (readable_tmp / "c.toml").write_text('[script]\nsandbox = "strict"\n')
    with hello_server() as port:
        urls = [f"http://localhost:{port}/ok", f"http://example.invalid:{port}/no"]
        done = _exec(
            readable_tmp, "--network", "example.org", "--network", f"localhost:{port}",
            "--", PY, str(readable_tmp / "client.py"), json.dumps(urls), "[]",
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    frames = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    (result,) = [f for f in frames if f["type"] == "result"]
    seen = json.loads(result["value"]["advise"])
    assert seen[urls[0]] == [200, "hello"]
    assert seen[urls[1]][0] == 403
    (egress_frame,) = [f for f in frames if f["type"] == "egress"]
    assert (egress_frame["host"], egress_frame["run"]) == ("example.invalid", frames[0]["runId"])


def test_exec_network_narrows_script_network_never_widens(readable_tmp: Path) -> None:
    (readable_tmp / "c.toml").write_text('[script]\nnetwork = ["*.example.org"]\n')
    wider = _exec(readable_tmp, "--network", "example.com", "--", "true")
    assert wider.returncode == 2, wider.stderr
    assert "--network example.com: not within [script] network (*.example.org)" in wider.stderr
    bad = _exec(readable_tmp, "--network", "https://example.org/", "--", "true")
    assert bad.returncode == 2
    assert "--network https://example.org/: expected a host glob" in bad.stderr
    assert "Traceback" not in wider.stderr + bad.stderr


def test_request_network_narrows_the_servers_and_a_served_one_needs_one(tmp_path: Path) -> None:
    ceiling = Config(script_sandbox=Profile.STRICT, script_network=("*.example.org",))
    for way, caller in callers(ceiling, tmp_path).items():
        # No `network`: the server's list; a narrower one: its own.
        assert admit(request(cwd=str(tmp_path)), caller).request.network == ("*.example.org",)
        narrow = request(cwd=str(tmp_path), network=["api.example.org:443"])
        assert admit(narrow, caller).request.network == ("api.example.org:443",), way
        wider = refusal(
            request(cwd=str(tmp_path), network=["example.com", "a.example.org"]), caller
        )
        assert "network: example.com not within the server's [script] network" in str(wider)
    none = Config(script_sandbox=Profile.STRICT)
    for way, caller in callers(none, tmp_path).items():
        asked = request(cwd=str(tmp_path), network=["pypi.org"])
        if way is Way.LOCAL:  # the operator's own `exec`
            assert admit(asked, caller).request.network == ("pypi.org",)
        else:
            assert "(none)" in str(refusal(asked, caller)), way
        assert admit(request(cwd=str(tmp_path)), caller).request.network is None


def test_a_request_network_item_that_is_no_host_glob_is_refused() -> None:
    with pytest.raises(WireError) as caught:
        parse_exec(json.dumps({"argv": ["true"], "network": ["pypi.org", "http://x/"]}))
    assert "network" in str(caught.value.problems)


async def test_a_run_secret_with_hosts_is_a_placeholder_swapped_for_those_hosts(
    readable_tmp: Path,
) -> None:
    """`[script] secrets = [{ name, hosts }]`: the run's script holds the placeholder; the
    proxy sends the value to those hosts only, refuses it elsewhere (an `egress` frame)."""
    (readable_tmp / "sender.py").write_text(SENDER)
    async with trio.open_nursery() as nursery:
        port, heads = await nursery.start(_http_server)
        other, other_heads = await nursery.start(_http_server)
        urls = [f"http://localhost:{port}/user", f"http://localhost:{other}/elsewhere"]
        (readable_tmp / "c.toml").write_text(
            f'[script]\nsandbox = "strict"\nnetwork = ["localhost:{port}", "localhost:{other}"]\n'
            f'secrets = [{{ name = "GITHUB_TOKEN", hosts = ["localhost:{port}"] }}]\n'
        )
        done = await trio.run_process(
            [PY, "-m", "mcpx_hooks.supervisor", "exec", "--json", "--config",
             str(readable_tmp / "c.toml"), "--", PY, str(readable_tmp / "sender.py"),
             json.dumps(urls)],
            check=False, cwd=readable_tmp, capture_stdout=True, capture_stderr=True,
            env={**os.environ, "MCPX_HOOKS_NO_DISCOVERY": "1", "GITHUB_TOKEN": SECRET},
        )  # fmt: skip
        nursery.cancel_scope.cancel()
    assert done.returncode == 0, done.stderr
    assert SECRET.encode() not in done.stdout + done.stderr
    frames = [json.loads(line) for line in done.stdout.splitlines() if line.startswith(b"{")]
    (result,) = [f for f in frames if f["type"] == "result"]
    seen = json.loads(result["value"]["advise"])
    assert seen["env"]["GITHUB_TOKEN"].startswith("mcpx-secret-GITHUB_TOKEN-")
    assert seen[urls[0]] == [200, "hello"]
    assert f"Authorization: Bearer {SECRET}".encode() in heads[0]
    assert seen[urls[1]][0] == 403
    # (its port said: localhost is among the secret's hosts, on another port)
    assert seen[urls[1]][1].strip() == f"blocked: secret GITHUB_TOKEN sent to localhost:{other}"
    assert other_heads == []
    (egress_frame,) = [f for f in frames if f["type"] == "egress"]
    assert (egress_frame["host"], egress_frame["port"]) == ("localhost", other)


def test_a_run_network_under_net_or_none_is_refused(readable_tmp: Path, tmp_path: Path) -> None:
    (readable_tmp / "c.toml").write_text("")
    done = _exec(readable_tmp, "--sandbox", "none", "--network", "pypi.org", "--", "true")
    assert done.returncode == 2
    assert '--network: network needs sandbox "strict" or "workspace", found sandbox "none"' in (
        done.stderr
    )
    config = Config(script_sandbox=Profile.NET, script_network=("pypi.org",))
    for way, caller in callers(config, tmp_path).items():
        if way is Way.LOCAL:
            asked = request(cwd=str(tmp_path), network=["pypi.org"])
            assert 'found sandbox "net"' in str(refusal(asked, caller))


MANY_HOSTS = """
import sys, urllib.error, urllib.request
for n in range(int(sys.argv[1])):
    try:
        urllib.request.urlopen(f"http://h{n}.invalid/", timeout=10)
    except urllib.error.HTTPError as exc:
        assert exc.code == 403, exc.code
"""


def test_a_script_that_tries_endless_hosts_gets_a_bounded_number_of_egress_frames(
    readable_tmp: Path,
) -> None:
    # One frame per refused host, and nothing bounded them: 20,000 hosts held 6.3 MB of
    # frames in a run whose runBytes was 1 MiB, and grew the run (and its history) without end.
    from mcpx_hooks.supervisor.core.egress import HOSTS_SAID_MAX

    (readable_tmp / "many.py").write_text(MANY_HOSTS)
    (readable_tmp / "c.toml").write_text('[script]\nsandbox = "strict"\n')
    tried = HOSTS_SAID_MAX + 10
    done = _exec(
        readable_tmp, "--network", "example.org", "--", PY, str(readable_tmp / "many.py"),
        str(tried),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    frames = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    hosts = [f["host"] for f in frames if f["type"] == "egress"]
    assert hosts == [f"h{n}.invalid" for n in range(HOSTS_SAID_MAX)]
    (warning,) = [f["message"] for f in frames if f["type"] == "warning"]
    assert warning.startswith(f"10 more refusal(s) of hosts past the first {HOSTS_SAID_MAX}")
    assert [f["type"] for f in frames][-2:] == ["warning", "end"]


def test_a_secret_named_as_a_refused_host_is_redacted_in_its_egress_frame(
    readable_tmp: Path,
) -> None:
    """A script that asks for a host spelled with its secret (`http://<TOKEN>.example/`, a
    name sent out as a lookup would send it) is refused, and its egress frame says the host
    as the request wrote it, where the run's redaction finds the secret: the proxy once wrote
    it in lower case, which no redaction recognises."""
    token = "Mixed" + "CaseT0ken" * 3
    (readable_tmp / "client.py").write_text(CLIENT)
    (readable_tmp / "c.toml").write_text('[script]\nsandbox = "strict"\n')
    urls = [f"http://{token}.example.invalid/", f"http://{token}.example.invalid/again"]
    done = subprocess.run(
        [PY, "-m", "mcpx_hooks.supervisor", "exec", "--json", "--config", "c.toml",
         "--secret", "TOK", "--network", "localhost:9", "--",
         PY, str(readable_tmp / "client.py"), json.dumps(urls), "[]"],
        check=False, cwd=readable_tmp, capture_output=True, text=True, timeout=60,
        env={**os.environ, "MCPX_HOOKS_NO_DISCOVERY": "1", "TOK": token},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    frames = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    (egress_frame,) = [f for f in frames if f["type"] == "egress"]
    assert egress_frame["host"] == "[secret TOK].example.invalid"
    said = (done.stdout + done.stderr).lower()
    assert token.lower() not in said
