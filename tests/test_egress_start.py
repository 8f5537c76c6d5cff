"""How a child with `network` reaches the proxy, with real parts: nothing of ours runs beside it
(a hook that waits for all its children does not hang), a network namespace serves one child
at a time and then the next, children at once each get their own, and the same holds where
the chain is hidden (the armed jail thread enters the namespace)."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio
from conftest import require_rootless
from test_egress import hello_server

from mcpx_hooks.runners import loopback
from mcpx_hooks.supervisor.core.frames import HookStatus
from mcpx_hooks.supervisor.core.hooks import Action, Hook, Profile, Provenance, SourceKind
from mcpx_hooks.supervisor.core.points import Phase
from mcpx_hooks.supervisor.process.egress import LOOPBACK_PORT
from mcpx_hooks.supervisor.process.launch import HIDE_ENV
from mcpx_hooks.supervisor.process.spawner import Spawner, open_spawner
from mcpx_hooks.supervisor.run.hookcontext import HookContext
from mcpx_hooks.supervisor.run.hookrun import run_hook

#: A hook that waits for every child of its own (none: at once), fetches URL through the
#: proxy variables, and says its network namespace and what it got.
CLIENT = textwrap.dedent(
    """
    import json, os, sys, urllib.request
    try:
        os.wait()
        waited = "a child"
    except ChildProcessError:
        waited = "no child"
    with urllib.request.urlopen(sys.argv[1], timeout=5) as r:
        got = [r.status, r.read().decode()]
    print(json.dumps({"advise": json.dumps(
        {"waited": waited, "got": got, "net": os.readlink("/proc/self/ns/net")})}))
    """
)


def _hook(where: Path, url: str, port: int, name: str = "fetch") -> Hook:
    script = where / "client.py"
    script.write_text(CLIENT)
    return Hook(
        name, "script", Phase.BEFORE, Action.RUN, (sys.executable, str(script), url), str(where),
        Provenance(SourceKind.COMMAND_LINE), sandbox=Profile.STRICT,
        network=(f"localhost:{port}",), timeout_ms=10_000,
    )  # fmt: skip


async def _seen(spawner: Spawner, hook: Hook) -> dict[str, Any]:
    report = await run_hook(spawner, hook, HookContext(run=None))
    assert report.frame.status is HookStatus.OK, (report.frame.reason, report.frame.stderr_tail)
    seen: dict[str, Any] = json.loads(report.frame.advice[0])
    return seen


async def _one_then_another_then_three_at_once(spawner: Spawner, where: Path) -> None:
    with hello_server() as port:
        hook = _hook(where, f"http://localhost:{port}/", port)
        one_by_one = [await _seen(spawner, hook) for _ in range(4)]
        at_once: list[dict[str, Any]] = []

        async def one() -> None:
            at_once.append(await _seen(spawner, hook))

        async with trio.open_nursery() as nursery:
            for _ in range(3):
                nursery.start_soon(one)
    for seen in (*one_by_one, *at_once):
        assert seen["got"] == [200, "hello"]
        # Nothing of ours is the hook's child (it was: a forwarder, and this hung).
        assert seen["waited"] == "no child"
    # Children one by one reuse namespaces (a child's, once its tree is gone, with a new
    # socket in it; and the one made ahead): four children, two namespaces.
    assert len({seen["net"] for seen in one_by_one}) == 2
    # Children at once: one namespace each.
    assert len({seen["net"] for seen in at_once}) == 3


async def test_no_process_beside_the_child_and_a_namespace_for_one_child_at_a_time(
    strict_spawner: Spawner, readable_tmp: Path
) -> None:
    await _one_then_another_then_three_at_once(strict_spawner, readable_tmp)


@pytest.fixture
async def jail_thread_spawner(
    no_leaks: None, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Spawner]:
    """A spawner that starts sandboxed children from its armed jail thread (chain hidden)."""
    require_rootless()
    monkeypatch.setenv(HIDE_ENV, "chain")
    async with open_spawner() as spawner:
        yield spawner


async def test_the_same_from_the_jail_thread(
    jail_thread_spawner: Spawner, readable_tmp: Path
) -> None:
    await _one_then_another_then_three_at_once(jail_thread_spawner, readable_tmp)


def test_the_spawner_listens_where_the_proxy_variables_point() -> None:
    assert loopback.PROXY_PORT == LOOPBACK_PORT


async def test_a_tool_servers_refusals_during_a_runs_call_are_egress_frames(
    strict_spawner: Spawner, readable_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A strict tool server with `network`, called by a run's script: the host the proxy
    refused it while it served a call is one `egress` frame naming the server, before that
    call's frame, once however often it is asked for."""
    from test_egress import FETCH_SERVER

    from mcpx_hooks.supervisor.config.loading import load_config
    from mcpx_hooks.supervisor.core.order import check_order
    from mcpx_hooks.supervisor.core.scripts import Script
    from mcpx_hooks.supervisor.run.runtime import open_runtime
    from mcpx_hooks.supervisor.run.scriptrun import RunRequest

    monkeypatch.setenv("GITHUB_TOKEN", "t" * 20)
    (readable_tmp / "fetch_server.py").write_text(FETCH_SERVER)
    with hello_server() as port:
        (readable_tmp / "job.py").write_text(
            "import json\ndef main():\n    return [json.loads(mcpx_call('fetch.fetch', {'url':"
            " u}))['got'][0] for u in"
            f" ['http://localhost:{port}/', 'http://example.invalid:{port}/',"
            f" 'http://example.invalid:{port}/again']]\n"
        )
        config = {
            "script": {"sandbox": "none"},
            "servers": {
                "fetch": {
                    "command": [sys.executable, "fetch_server.py"],
                    "cwd": str(readable_tmp),
                    "sandbox": "strict",
                    "secrets": ["GITHUB_TOKEN"],
                    "network": [f"localhost:{port}"],
                }
            },
        }
        (readable_tmp / "c.json").write_text(json.dumps(config))
        loaded = load_config(
            [readable_tmp / "c.json"], cwd=readable_tmp, environ=os.environ, discover=False
        )
        async with open_runtime(loaded) as runtime:
            run = runtime.new_run(RunRequest(Script(python_file="job.py"), str(readable_tmp)))
            await runtime.execute(run)
            frames = list(run.journal.decoded(0))
    check_order(frames)
    results = [f for f in frames if f["type"] == "result"]
    assert len(results) == 1, [f.get("text") or f.get("message") or f["type"] for f in frames]
    (result,) = results
    assert result["value"] == [200, 403, 403]
    kinds = [f["type"] for f in frames if f["type"] in ("call", "egress")]
    assert kinds == ["call", "egress", "call", "call"]
    (egress_frame,) = [f for f in frames if f["type"] == "egress"]
    assert {k: egress_frame[k] for k in ("server", "host", "port", "allowed")} == {
        "server": "fetch",
        "host": "example.invalid",
        "port": port,
        "allowed": False,
    }
    assert "hook" not in egress_frame and "run" not in egress_frame
    from mcpx_hooks.supervisor.cli.view import frame_lines

    assert frame_lines(egress_frame) == [
        f"egress example.invalid:{port} for server fetch: blocked: example.invalid not in"
        f' network; "example.invalid:{port}" in [servers.fetch] network would admit it'
    ]
