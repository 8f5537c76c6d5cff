"""Tool servers: started on first use through our spawner, the MCP SDK over our child's pipes
under Trio, stopped when idle, failing with a reason (never hanging), backing off, restarted,
and no process left behind."""

from __future__ import annotations

import itertools
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import psutil
import pytest
import trio
from conftest import Marker, cut_once_waiting, kill_supervisor_and_wait
from mcp.client.session import ClientSession
from mcp.types import (
    ListToolsResult,
    PaginatedRequestParams,
    PromptListChangedNotification,
    ResourceListChangedNotification,
)

from mcpx_hooks.supervisor.core.hooks import Config, Profile
from mcpx_hooks.supervisor.core.servers import ServerSpec
from mcpx_hooks.supervisor.process.spawner import Spawner, open_spawner
from mcpx_hooks.supervisor.run.bus import Bus
from mcpx_hooks.supervisor.run.serverhooks import open_servers
from mcpx_hooks.supervisor.tools.mcpclient import ServerBroken, every_page
from mcpx_hooks.supervisor.tools.serverentry import (
    ServerEntry,
    ServerFailing,
    ToolFailed,
    backoff_s,
)
from mcpx_hooks.supervisor.tools.serverlife import RELIST_GAP_S, _relist, _tell_changed
from mcpx_hooks.supervisor.tools.servers import ServerManager

HERE = Path(__file__).parent
HOSTILE = str(HERE / "mcpservers" / "hostile.py")
EXAMPLES = HERE.parent / "supervisor" / "examples" / "tools"


def hostile(mode: str, log: Path, marker: Marker, **fields: Any) -> ServerSpec:
    fields.setdefault("sandbox", Profile.NONE)
    command = (sys.executable, HOSTILE, mode, str(log), marker)
    return ServerSpec("h", command, str(HERE), **fields)


def example(**fields: Any) -> ServerSpec:
    fields.setdefault("sandbox", Profile.NONE)
    return ServerSpec("words", (sys.executable, "wordtools.py"), str(EXAMPLES), **fields)


@pytest.fixture
async def spawner(no_leaks: None) -> AsyncIterator[Spawner]:
    async with open_spawner() as sp:
        yield sp
    assert psutil.Process().children(recursive=True) == []


@pytest.fixture
async def manager(spawner: Spawner) -> AsyncIterator[ServerManager]:
    async with open_servers(spawner, Bus(), Config()) as m:
        yield m


def log_lines(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


async def test_a_server_starts_on_first_use_and_lists_its_tools(manager: ServerManager) -> None:
    spec = example()
    assert manager.status() == []
    result, entry = await manager.call(spec, "count", {"text": "a b c\nd"})
    assert result.structured_content == {"words": 4, "lines": 2}
    (shown,) = manager.status()
    assert shown["state"] == "running" and "since" in shown
    assert shown["server"] == {"name": "wordtools", "version": "1.0"}
    tools = {t["name"]: t for t in shown["tools"]}
    assert tools["remove"]["annotations"] == {"destructiveHint": True}
    again, same = await manager.call(spec, "shout", {"text": "hi"})
    assert same is entry and again.content[0].text == "HI"  # type: ignore[union-attr]


async def test_the_example_server_runs_under_strict(strict_spawner: Spawner) -> None:
    async with open_servers(strict_spawner, Bus(), Config()) as manager:
        result, _ = await manager.call(example(sandbox=Profile.STRICT), "count", {"text": "x"})
    assert result.structured_content == {"words": 1, "lines": 1}


async def test_a_call_cut_short_is_cancelled_on_the_server(
    manager: ServerManager, tmp_path: Path, marker: Marker
) -> None:
    log = tmp_path / "log"
    spec = hostile("good", log, marker)
    await cut_once_waiting(log, lambda: manager.call(spec, "wait", {}))
    # The server reads its stdin in order: once this answer is back, it has read the cancel.
    result, _ = await manager.call(spec, "echo", {"after": True})
    assert result.structured_content == {"after": True}
    assert [line.split()[0] for line in log_lines(log)] == ["start", "waiting", "cancelled"]


async def test_a_server_unused_for_idle_ms_is_stopped_and_started_again_at_next_use(
    manager: ServerManager, tmp_path: Path, marker: Marker
) -> None:
    log = tmp_path / "log"
    spec = hostile("good", log, marker, idle_ms=50)
    _, entry = await manager.call(spec, "echo", {})
    with trio.fail_after(10):
        await entry.ended.wait()
    assert entry.state == "idle" and marker.alive() == []
    await manager.call(spec, "echo", {})
    assert log_lines(log) == ["start", "start"]


async def test_a_server_that_never_answers_initialize_fails_by_its_start_timeout(
    manager: ServerManager, tmp_path: Path, marker: Marker
) -> None:
    spec = hostile("mute", tmp_path / "log", marker, start_timeout_ms=300)
    with pytest.raises(ServerFailing, match=r"within startTimeoutMs \(300 ms\)"):
        await manager.call(spec, "echo", {})
    assert marker.alive() == []
    (shown,) = manager.status()
    assert shown["state"] == "failing" and "startTimeoutMs" in shown["reason"]


async def test_a_server_that_dies_at_start_says_why_with_its_stderr(
    manager: ServerManager, tmp_path: Path, marker: Marker
) -> None:
    spec = hostile("die-at-start", tmp_path / "log", marker)
    with pytest.raises(ServerFailing) as caught:
        await manager.call(spec, "echo", {})
    assert "exited with status 3" in str(caught.value)
    assert "cannot start today" in str(caught.value)


async def test_a_server_that_crashes_fails_its_use_then_backs_off_then_restarts(
    manager: ServerManager, tmp_path: Path, marker: Marker
) -> None:
    log = tmp_path / "log"
    spec = hostile("crash-on-call", log, marker)
    with pytest.raises(ServerFailing, match="exited with status 7"):
        await manager.call(spec, "echo", {})
    entry = manager.entries[spec]
    assert entry.state == "failing" and entry.failures == 1
    with pytest.raises(ServerFailing, match=r"exited with status 7 \(next start in"):
        await manager.call(spec, "echo", {})  # within the backoff: at once, no new start
    assert log_lines(log) == ["start"]
    entry.retry_at = trio.current_time()  # the backoff has passed
    with pytest.raises(ServerFailing, match="exited with status 7"):
        await manager.call(spec, "echo", {})
    assert log_lines(log) == ["start", "start"] and entry.failures == 2
    assert marker.alive() == []


def test_the_backoff_doubles_from_one_second_up_to_thirty() -> None:
    assert [backoff_s(n) for n in range(1, 8)] == [1, 2, 4, 8, 16, 30, 30]


async def test_uses_of_a_failing_server_fail_at_once_through_its_backoff(
    autojump_clock: trio.abc.Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MCPX_TEST_UNSET_SECRET", raising=False)
    spec = example(secrets=("MCPX_TEST_UNSET_SECRET",))
    waits = []
    # A server whose secret is unset fails before anything is spawned: no spawner needed.
    async with open_servers(cast(Spawner, None), Bus(), Config()) as manager:
        await _fail_seven_times(manager, spec, waits)
    assert waits == [1, 2, 4, 8, 16, 30, 30]


async def _fail_seven_times(manager: ServerManager, spec: ServerSpec, waits: list[int]) -> None:
    for _ in range(7):
        with pytest.raises(ServerFailing, match="MCPX_TEST_UNSET_SECRET is not set"):
            await manager.call(spec, "count", {})
        entry = manager.entries[spec]
        waits.append(round(entry.retry_at - trio.current_time()))
        with pytest.raises(ServerFailing, match="next start in"):
            await manager.call(spec, "count", {})
        await trio.sleep_until(entry.retry_at)


class _Listings:
    """What `_relist` asks of a server's session: its tools, each listing's time kept."""

    def __init__(self) -> None:
        self.times: list[float] = []

    async def list_tools(self, params: PaginatedRequestParams | None = None) -> ListToolsResult:
        self.times.append(trio.current_time())
        return ListToolsResult(tools=[])


async def test_a_server_that_says_its_tools_changed_on_and_on_is_listed_once_a_second(
    autojump_clock: trio.abc.Clock,
) -> None:
    # Each listing of a server that says its tools changed (`notifications/tools/list_changed`)
    # also tells every MCP client to list them again: a server saying it every 10 ms, or after
    # each listing, made a loop of listings as fast as the round trips went.
    entry, listings = ServerEntry(example()), _Listings()
    told: list[float] = []
    entry.on_relisted = lambda kind: told.append(trio.current_time())
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_relist, entry, cast(ClientSession, listings))
        for _ in range(1000):  # 10 s of it
            entry.relist.set()
            await trio.sleep(0.01)
        await trio.sleep(RELIST_GAP_S * 5)  # then quiet
        quiet_change = trio.current_time()
        entry.relist.set()
        await trio.sleep(0.001)
        nursery.cancel_scope.cancel()
    flood = listings.times[:-1]
    assert 9 <= len(flood) <= 11 and told == listings.times
    assert all(b - a >= RELIST_GAP_S for a, b in itertools.pairwise(flood))
    assert flood[0] == 0 and flood[-1] >= 9.99  # the first at once; the last change listed too
    assert listings.times[-1] == quiet_change  # a change after a quiet while: listed at once


async def test_a_server_that_says_its_prompts_changed_on_and_on_is_told_once_a_second(
    autojump_clock: trio.abc.Clock,
) -> None:
    # A server's prompts and resources were listed anew at each client's listing, and their
    # changes never told: now they are kept until it says they changed, which forgets them
    # at once (the next listing asks it) and tells its clients at most once a second.
    entry = ServerEntry(example())
    told: list[tuple[str, float]] = []
    entry.on_relisted = lambda kind: told.append((kind, trio.current_time()))
    asked: list[float] = []

    async def ask() -> list[str]:
        asked.append(trio.current_time())
        return ["p0"]

    changed = PromptListChangedNotification()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_tell_changed, entry)
        assert await entry.listing("prompts", ask, keep=True) == ["p0"]
        assert await entry.listing("prompts", ask, keep=True) == ["p0"] and len(asked) == 1
        for _ in range(1000):  # 10 s of it
            await entry.notified(changed)
            await entry.listing("prompts", ask, keep=True)  # (asked again: it changed)
            await trio.sleep(0.01)
        await entry.notified(ResourceListChangedNotification())
        await trio.sleep(RELIST_GAP_S * 2)
        nursery.cancel_scope.cancel()
    assert len(asked) == 1001
    prompts = [at for kind, at in told if kind == "prompts"]
    assert 9 <= len(prompts) <= 11 and prompts[0] == 0.0
    assert all(b - a >= RELIST_GAP_S for a, b in itertools.pairwise(prompts))
    assert [kind for kind, _ in told].count("resources") == 1
    # A server that does not declare `listChanged` may change its lists without a word: its
    # listing is never kept.
    for _ in range(3):
        assert await entry.listing("resources", ask, keep=False) == ["p0"]
    assert len(asked) == 1004 and "resources" not in entry.lists


async def test_a_lying_server_s_errors_and_unlisted_tools_fail_the_call_clearly(
    manager: ServerManager, tmp_path: Path, marker: Marker
) -> None:
    spec = hostile("lying", tmp_path / "log", marker)
    with pytest.raises(ToolFailed, match="I lied"):
        await manager.call(spec, "echo", {})
    with pytest.raises(ToolFailed, match=r"lists no tool 'hidden' \(its tools: echo, wait"):
        await manager.call(spec, "hidden", {})
    assert manager.entries[spec].state == "running"  # a tool's error is not the server's


#: The hostile server's tools, as it lists them.
HOSTILE_TOOLS = ["echo", "wait", "fail", "rm", "big", "mixed", "progress", "whoami", "meta"]
#: -32000: the code the SDK's client fails requests with when the connection ends, and the
#: usual code of a JSON-RPC server's own generic error.
DOWN = {"code": -32000, "message": "the database is down"}


async def test_a_server_s_own_error_in_the_sdk_s_closing_code_is_its_answer(
    manager: ServerManager, tmp_path: Path, marker: Marker
) -> None:
    # The call fails at once in the server's words, and the server serves on: taken for
    # the connection's end, it waited 5 s for the server's life to end, then said its words
    # as the server's failure.
    spec = hostile("relay", tmp_path / "log", marker)
    with pytest.raises(ToolFailed) as caught:
        await manager.call(spec, "relay", {"error": DOWN})
    assert str(caught.value) == "server h answered relay with an error: the database is down"
    result, entry = await manager.call(spec, "echo", {"n": 1})
    assert result.structured_content == {"n": 1} and entry.failures == 0
    assert manager.entries[spec].state == "running"
    # Nor is its own error in the code mcpx-hooks gives an answer too large to read.
    with pytest.raises(ToolFailed) as caught:
        await manager.call(spec, "relay", {"error": {**DOWN, "code": -32090}})
    assert type(caught.value) is ToolFailed
    assert str(caught.value) == "server h answered relay with an error: the database is down"


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        ('{"jsonrpc": "2.0", "id": @id, "result": {oops}}', "key must be a string"),
        ('{"jsonrpc": "2.0", "id": @id, "result": {"x": "caf\xe9"}}', "invalid unicode"),
    ],
    ids=["not-json", "not-utf-8"],
)
async def test_an_answer_that_is_not_json_fails_its_call_at_once(
    manager: ServerManager, tmp_path: Path, marker: Marker, answer: str, why: str
) -> None:
    # Its `id` can be read at its start: the call it answers fails at once with why, as one
    # that is JSON but not JSON-RPC does. It was dropped as any bad line, and the call waited
    # for callTimeoutMs, then said the server took too long, though it had answered at once.
    spec = hostile("relay", tmp_path / "log", marker)
    with trio.fail_after(30), pytest.raises(ToolFailed) as caught:
        await manager.call(spec, "relay", {"raw": answer})
    said = str(caught.value)
    assert said.startswith("server h answered relay with an error: its answer is not JSON-RPC")
    assert f"(Invalid JSON: {why}" in said
    result, _ = await manager.call(spec, "echo", {"n": 1})  # it serves on
    assert result.structured_content == {"n": 1}


async def test_a_server_refusing_initialize_fails_its_start_with_its_words(
    manager: ServerManager, tmp_path: Path, marker: Marker
) -> None:
    # Not left to wait out startTimeoutMs as a connection that ended would be.
    spec = hostile("refuse", tmp_path / "log", marker, start_timeout_ms=60_000)
    with pytest.raises(ServerFailing, match="failed: MCPError: not ready: the database is down"):
        await manager.call(spec, "echo", {})
    assert marker.alive() == []


async def test_a_server_that_lists_its_tools_in_pages_is_read_to_the_last_page(
    manager: ServerManager, tmp_path: Path, marker: Marker
) -> None:
    spec = hostile("paged", tmp_path / "log", marker)  # one tool a page, `nextCursor` on
    result, entry = await manager.call(spec, "mixed", {"n": 3})  # its outputSchema checked
    assert [t.name for t in entry.tools] == HOSTILE_TOOLS
    assert result.structured_content == {"n": 3}


async def test_a_listing_that_never_ends_fails_the_start(
    manager: ServerManager, tmp_path: Path, marker: Marker
) -> None:
    spec = hostile("endless", tmp_path / "log", marker)
    with pytest.raises(ServerFailing, match="its tools listing went on past 16 pages"):
        await manager.call(spec, "echo", {})
    assert marker.alive() == []


async def test_an_empty_cursor_ends_a_listing() -> None:
    # As a server that always writes `nextCursor` means it when there is no next page.
    pages = [ListToolsResult(tools=[], next_cursor=c) for c in ("a", "b", "")]
    asked: list[str | None] = []
    assert await every_page("tools", _asker(pages, asked)) == pages
    assert asked == [None, "a", "b"]


async def test_a_listing_that_gives_a_cursor_twice_is_read_no_further() -> None:
    pages = [ListToolsResult(tools=[], next_cursor=c) for c in ("a", "b", "a", None)]
    asked: list[str | None] = []
    with pytest.raises(ServerBroken, match="its tools listing gave the cursor 'a' twice"):
        await every_page("tools", _asker(pages, asked))
    assert asked == [None, "a", "b"]


def _asker(
    pages: list[ListToolsResult], asked: list[str | None]
) -> Callable[[PaginatedRequestParams | None], Awaitable[ListToolsResult]]:
    """A listing's pages, asked for in turn; each cursor asked with in `asked`."""

    async def ask(params: PaginatedRequestParams | None) -> ListToolsResult:
        asked.append(params.cursor if params is not None else None)
        return pages[len(asked) - 1]

    return ask


async def test_a_server_that_says_its_tools_changed_is_listed_again(
    manager: ServerManager, tmp_path: Path, marker: Marker
) -> None:
    spec = hostile("drift", tmp_path / "log", marker)  # `grow` adds `extra`, and says so
    _, entry = await manager.call(spec, "grow", {})  # (answered once listed again)
    with trio.fail_after(10):  # (the new list is taken in by a task of its own)
        while "extra" not in [t.name for t in entry.tools]:
            await entry.changed.wait()
    assert [t.name for t in entry.tools] == [*HOSTILE_TOOLS, "grow", "extra"]
    extra, _ = await manager.call(spec, "extra", {"n": 1})
    assert extra.structured_content == {"n": 1}


async def test_a_server_flooding_stdout_is_stopped_with_the_reason(
    manager: ServerManager, tmp_path: Path, marker: Marker
) -> None:
    spec = hostile("flood", tmp_path / "log", marker)
    with trio.fail_after(30), pytest.raises(ServerFailing, match="not MCP messages"):
        await manager.call(spec, "echo", {})
        await manager.call(spec, "echo", {})
    assert marker.alive() == []


async def test_leaving_the_manager_kills_every_server(
    spawner: Spawner, tmp_path: Path, marker: Marker
) -> None:
    async with open_servers(spawner, Bus(), Config()) as manager:
        for name in ("one", "two"):
            await manager.call(hostile("good", tmp_path / name, marker), "echo", {})
        assert len(marker.alive()) == 2
    assert marker.alive() == []


SUPERVISOR = """
import sys, trio
from mcpx_hooks.supervisor.core.hooks import Config, Profile
from mcpx_hooks.supervisor.core.servers import ServerSpec
from mcpx_hooks.supervisor.process.spawner import open_spawner
from mcpx_hooks.supervisor.run.bus import Bus
from mcpx_hooks.supervisor.run.serverhooks import open_servers

async def main():
    async with open_spawner() as spawner, open_servers(spawner, Bus(), Config()) as manager:
        spec = ServerSpec("h", tuple(sys.argv[1:]), "/", sandbox=Profile.NONE)
        await manager.call(spec, "echo", {})  # running now
        print(spawner.pid, flush=True)
        await trio.sleep_forever()

trio.run(main)
"""


async def test_a_sigkilled_supervisor_leaves_no_server_behind(
    no_leaks: None, tmp_path: Path, marker: Marker
) -> None:
    argv = [sys.executable, "-c", SUPERVISOR, sys.executable, HOSTILE, "good", str(tmp_path / "l")]
    # the spawner and the server
    await kill_supervisor_and_wait([*argv, marker], marker, at_least=2)
    assert marker.alive() == []


def start_hook(name: str, phase: str, out: Path, answer: str = "", **fields: Any) -> Any:
    """A `server.start` hook that keeps its stdin in `out` and prints `answer`."""
    from mcpx_hooks.supervisor.core.effects import Effect
    from mcpx_hooks.supervisor.core.hooks import Action, Hook, Provenance, SourceKind
    from mcpx_hooks.supervisor.core.points import Phase

    code = f"import sys; open({str(out)!r}, 'w').write(sys.stdin.read()); print({answer!r})"
    return Hook(
        name=name,
        on="server.start",
        phase=Phase(phase),
        action=Action.RUN,
        target=(sys.executable, "-c", code),
        declaring_dir=str(HERE),
        source=Provenance(SourceKind.COMMAND_LINE),
        sandbox=Profile.NONE,
        effect=fields.pop("effect", Effect.ADVISE),
        **fields,
    )


async def test_server_start_hooks_see_the_start_and_may_refuse_it(
    spawner: Spawner, tmp_path: Path, marker: Marker
) -> None:
    import json

    from mcpx_hooks.supervisor.core.effects import Effect

    hooks = (
        start_hook(
            "gate",
            "before",
            tmp_path / "before.json",
            '{"refuse": "not this one"}',
            effect=Effect.ASK,
            when={"server": ["h-*"]},
        ),
        start_hook("seen", "onSuccess", tmp_path / "success.json"),
        start_hook("why", "onError", tmp_path / "error.json"),
    )
    bus = Bus()
    async with open_servers(spawner, bus, Config(hooks=hooks)) as manager:
        refused = ServerSpec("h-no", (sys.executable, HOSTILE, "good", str(tmp_path / "n")), "/")
        with pytest.raises(ServerFailing, match="was refused by gate: not this one"):
            await manager.call(refused, "echo", {})
        assert not (tmp_path / "n").exists()  # never started
        seen = json.loads((tmp_path / "before.json").read_text())
        assert seen["input"] == {"server": "h-no", "command": list(refused.command)}
        await manager.call(hostile("good", tmp_path / "log", marker), "echo", {})
        result = json.loads((tmp_path / "success.json").read_text())["result"]["value"]
        assert (result["server"], result["name"], result["version"]) == ("h", "hostile", "good")
        assert [t["name"] for t in result["tools"]] == HOSTILE_TOOLS
        with pytest.raises(ServerFailing):
            await manager.call(hostile("die-at-start", tmp_path / "d", marker), "echo", {})
        error = json.loads((tmp_path / "error.json").read_text())["error"]
        assert "exited with status 3" in error["message"]
    async with bus.subscribe(kinds=("hook.finished",), since=0) as sub:
        finished = [(await sub.__anext__()).data for _ in range(sub.pending)]  # type: ignore[union-attr]
    assert [(d["name"], d["server"]) for d in finished] == [
        ("gate", "h-no"),
        ("seen", "h"),
        ("why", "h"),
    ]
    assert finished[0]["refused"]["reason"] == "not this one"


def test_the_mcp_sdk_is_loaded_only_when_a_server_starts() -> None:
    # It costs more to import than trio and attrs together: a run that calls no tool, and
    # every command, must not pay for it.
    import subprocess

    code = (
        "import sys\n"
        "import mcpx_hooks.supervisor.run.runtime, mcpx_hooks.supervisor.service.server\n"
        "import mcpx_hooks.supervisor.run.calls, mcpx_hooks.supervisor.run.pluginhook\n"
        "print(sorted(m for m in sys.modules if m == 'mcp' or m.startswith('mcp.')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


async def test_a_server_answering_what_is_not_a_tool_result_fails_the_call_only(
    manager: ServerManager, tmp_path: Path, marker: Marker
) -> None:
    spec = hostile("garbled", tmp_path / "log", marker)
    with pytest.raises(ToolFailed, match="answered echo with what is not a tool result: 2 valid"):
        await manager.call(spec, "echo", {})
    assert manager.entries[spec].state == "running"


async def test_a_tool_answering_nan_fails_the_call_with_why(
    manager: ServerManager, tmp_path: Path, marker: Marker
) -> None:
    with pytest.raises(ToolFailed, match="answered echo with NaN or Infinity"):
        await manager.call(hostile("nan", tmp_path / "log", marker), "echo", {})


async def test_concurrent_first_uses_share_one_start(
    manager: ServerManager, tmp_path: Path, marker: Marker
) -> None:
    log = tmp_path / "log"
    spec = hostile("good", log, marker)
    answers: list[Any] = []

    async def use(n: int) -> None:
        result, _ = await manager.call(spec, "echo", {"n": n})
        answers.append(result.structured_content)

    async with trio.open_nursery() as nursery:
        for n in range(5):
            nursery.start_soon(use, n)
    assert sorted(a["n"] for a in answers) == [0, 1, 2, 3, 4]
    assert log_lines(log) == ["start"] and len(marker.alive()) == 1
