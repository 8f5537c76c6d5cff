"""Contract pinning: `mcpx-hooks mcp` pins a tool server's tool list at its first use,
quarantines a server whose tools changed since (its tools hidden, its calls refused), and
`servers diff` / `trust --servers` say what changed and pin it again; `pin = "require"` and
`"off"`. Real servers behind the SDK's own stdio client, a trust state of the test's own."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import trio
from conftest import Marker
from mcpface_parts import MCPX, stdio_session, texts, through_mcpx, write_config


def cli(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MCPX_HOOKS_NO_DISCOVERY": "1"}
    env["XDG_STATE_HOME"] = str(config.parent / "state")
    argv = [MCPX, *args, "--config", str(config)]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)


def pins(config: Path) -> list[str]:
    state = json.loads((config.parent / "state" / "mcpx-hooks" / "trust.json").read_text())
    return [json.loads(key)[0] for key in state.get("servers", {})]


async def names(config: Path, err: Path) -> list[str]:
    async with stdio_session(through_mcpx(config), err) as session:
        return [t.name for t in (await session.list_tools()).tools]


async def test_a_server_whose_tools_changed_since_their_pin_is_quarantined(
    tmp_path: Path, marker: Marker
) -> None:
    where = tmp_path / marker
    config = write_config(where, marker)
    first = await names(config, tmp_path / "err1")
    assert "words__count" in first and "h__echo" in first
    assert sorted(pins(config)) == ["h", "words"]
    assert (
        "server words: its 4 tools were pinned at their first use"
        in (tmp_path / "err1").read_text()
    )
    assert cli(config, "servers", "diff", "words").returncode == 0
    # The same server, by name and command, now lists another description.
    server = where / "wordtools.py"
    server.write_text(server.read_text().replace("Counts the words", "Counts all the words"))
    async with stdio_session(through_mcpx(config), tmp_path / "err2") as session:
        listed = [t.name for t in (await session.list_tools()).tools]
        refused = await session.call_tool("words__count", {"text": "a"})
        allowed = await session.call_tool("h__echo", {})
    assert not any(n.startswith("words__") for n in listed) and "h__echo" in listed
    assert refused.is_error is True and allowed.is_error is False
    (why,) = texts(refused)
    assert why.startswith("server words is quarantined: its tools changed since they were pinned")
    assert "mcpx-hooks servers diff words" in why and "mcpx-hooks trust --servers words" in why
    # (this session's config came with --config: the commands find the server only so)
    assert why.endswith("(give each the --config files this command was given)")
    diff = cli(config, "servers", "diff", "words")
    assert (diff.returncode, diff.stdout) == (1, "tool changed: count (description)\n")
    as_json = json.loads(cli(config, "servers", "diff", "words", "--json").stdout)
    assert as_json["changes"] == [{"change": "changed", "tool": "count", "keys": ["description"]}]
    assert as_json["whileRunning"] is None
    pinned = cli(config, "trust", "--servers", "words")
    assert (pinned.returncode, pinned.stdout) == (0, "pinned words: 4 tools\n")
    assert "words__count" in await names(config, tmp_path / "err3")
    assert marker.alive() == []


async def test_a_server_whose_tools_change_while_it_runs_is_quarantined_at_once(
    tmp_path: Path, marker: Marker
) -> None:
    # The hostile server in `drift` mode adds a tool when `grow` is called and says so
    # (`notifications/tools/list_changed`): listed again, its tools no longer match their
    # pin of a moment ago, and it is quarantined in the same session.
    where = tmp_path / marker
    config = write_config(where, marker, h_mode="drift", expose=("echo", "grow", "extra"))
    told = trio.Event()

    async def heard(message: object) -> None:  # the client is told the tools changed
        if getattr(message, "method", None) == "notifications/tools/list_changed":
            told.set()

    async with stdio_session(
        through_mcpx(config), tmp_path / "err", message_handler=heard
    ) as session:
        before = [t.name for t in (await session.list_tools()).tools]
        grew = await session.call_tool("h__grow", {})
        with trio.fail_after(30):
            await told.wait()
        after = [t.name for t in (await session.list_tools()).tools]
        refused = await session.call_tool("h__echo", {})
    assert "h__grow" in before and "h__extra" not in before and grew.is_error is False
    assert not any(n.startswith("h__") for n in after) and "words__count" in after
    assert refused.is_error is True
    assert texts(refused)[0].startswith("server h is quarantined: its tools changed")
    # Started afresh, it lists its pinned tools again: `servers diff` says what it listed
    # while it ran too (before, it said "its tools are as pinned", and exited 0).
    diff = cli(config, "servers", "diff", "h")
    said = diff.stdout.splitlines()
    assert diff.returncode == 1 and said[0] == "h: its tools are as pinned", diff.stdout
    assert said[1].startswith("while it ran, at 20") and said[1].endswith("it listed other tools:")
    assert said[2:] == ["  tool added: extra"]
    as_json = cli(config, "servers", "diff", "h", "--json")  # (--json was taken, and ignored)
    assert as_json.returncode == 1, as_json.stderr
    doc = json.loads(as_json.stdout)
    assert doc["server"] == "h" and doc["changes"] == []
    assert doc["whileRunning"]["changes"] == [{"change": "added", "tool": "extra"}]
    assert doc["whileRunning"]["seenAt"] == said[1].split("at ")[1].split(",")[0]
    pinned = cli(config, "trust", "--servers", "h")  # what a fresh start lists: said so
    assert pinned.returncode == 0 and "while it ran, at 20" in pinned.stderr
    assert marker.alive() == []


async def test_pin_require_refuses_a_server_never_pinned_and_off_pins_nothing(
    tmp_path: Path, marker: Marker
) -> None:
    config = write_config(tmp_path / marker, marker)
    doc = json.loads(config.read_text())
    doc["servers"]["words"]["pin"] = "require"
    doc["servers"]["h"]["pin"] = "off"
    config.write_text(json.dumps(doc))
    async with stdio_session(through_mcpx(config), tmp_path / "err") as session:
        listed = [t.name for t in (await session.list_tools()).tools]
        refused = await session.call_tool("words__shout", {"text": "a"})
    assert not any(n.startswith("words__") for n in listed) and "h__echo" in listed
    assert texts(refused)[0].startswith('server words has no pinned tool list and pin = "require"')
    review = texts(refused)[0].split("`")[1]  # the command it says to review the tools with
    assert review.startswith("mcpx-hooks servers list")
    reviewed = cli(config, *review.split()[1:])  # (it named the server, which list does not take)
    assert reviewed.returncode == 0, reviewed.stderr
    assert "words (wordtools 1.0)" in reviewed.stdout
    assert not (tmp_path / marker / "state" / "mcpx-hooks" / "trust.json").exists()
    assert cli(config, "trust", "--servers", "words").returncode == 0
    assert pins(config) == ["words"]
    assert "words__shout" in await names(config, tmp_path / "err2")
    assert marker.alive() == []


def test_what_is_kept_of_listings_seen_while_running_is_bounded(tmp_path: Path) -> None:
    # A server can change its listing once a second: what it makes us write is bounded.
    from mcpx_hooks.supervisor.config.trust import tools_sha256
    from mcpx_hooks.supervisor.tools import pins

    state = tmp_path / "mcpx-hooks" / "trust.json"
    seen = state.with_name(pins.SEEN_FILE)

    def keep(key: str, tools: list[Any]) -> None:
        pins._keep_seen(state, key, tools_sha256(tools), tools)

    keep("huge", [{"name": "x", "description": "y" * pins.SEEN_LISTING_BYTES}])
    assert not seen.exists()  # one listing past the bound: not kept
    big = [{"name": "x", "description": "y" * (pins.SEEN_LISTING_BYTES - 1000)}]
    for n in range(12):  # 12 listings of nearly the bound: the oldest let go
        keep(f"s{n}", big)
    kept = json.loads(seen.read_text())
    assert len(seen.read_bytes()) <= 4 * 1024 * 1024 and list(kept)[-1] == "s11"
    assert "s0" not in kept
    for n in range(100):  # many small ones: the newest 64
        keep(f"t{n}", [{"name": f"t{n}"}])
    kept = json.loads(seen.read_text())
    assert len(kept) == pins.SEEN_SERVERS and list(kept)[-1] == "t99"


async def test_a_when_tool_that_matches_no_pinned_tool_is_said(
    tmp_path: Path, marker: Marker
) -> None:
    # A gate on "words.cuont" fires for no call a server answers: no tool has that name. Once
    # the servers' tools are pinned, `validate` and `hooks list` can say so without starting
    # them.
    where = tmp_path / marker
    gate = {"on": "call", "phase": "before", "run": ["true"]}
    hooks = [
        {**gate, "name": "typo", "when": {"tool": ["words.cuont"]}},
        {**gate, "name": "fine", "when": {"tool": ["count", "words.sh*"]}},
        {**gate, "name": "h-only", "when": {"server": ["h"], "tool": ["count"]}},
    ]
    config = write_config(where, marker, hooks)
    assert [r.stderr for r in (cli(config, "hooks", "list"),)] == [""]  # (nothing pinned yet)
    await names(config, tmp_path / "err")  # (pinned at their first use)
    fails = "it fires only for a call to a tool they do not have, which fails"
    said = [
        f'mcpx-hooks: warning: hook "typo" ({config}:/hooks/0): when.tool "words.cuont" matches'
        f" no tool of the servers as pinned (words: 4, h: {len(pins_of(config, 'h'))} tools):"
        f' {fails}; did you mean "words.count"?',
        f'mcpx-hooks: warning: hook "h-only" ({config}:/hooks/2): when.tool "count" matches no'
        f" tool of the servers as pinned (h: {len(pins_of(config, 'h'))} tools): {fails}",
    ]
    for args in (["hooks", "list"], ["validate", str(config)]):
        done = cli(config, *args) if args[0] == "hooks" else cli_bare(config, *args)
        assert done.returncode == 0, done.stderr
        assert done.stderr.splitlines() == said, args
    assert marker.alive() == []


def pins_of(config: Path, server: str) -> list[Any]:
    state = json.loads((config.parent / "state" / "mcpx-hooks" / "trust.json").read_text())
    [tools] = [
        pin["tools"] for key, pin in state["servers"].items() if json.loads(key)[0] == server
    ]
    return list(tools)


def cli_bare(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MCPX_HOOKS_NO_DISCOVERY": "1"}
    env["XDG_STATE_HOME"] = str(config.parent / "state")
    return subprocess.run(
        [MCPX, *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )


async def test_the_pin_is_of_each_tool_as_the_server_wrote_it(
    tmp_path: Path, marker: Marker
) -> None:
    # A client is listed each tool as its server wrote it, keys no model knows included: a
    # change in one of them is a change of the tool, which its pin must notice.
    where = tmp_path / marker
    config = write_config(where, marker, h_mode="odd", expose=("echo",))
    assert "h__echo" in await names(config, tmp_path / "err1")
    (echo,) = [t for t in pins_of(config, "h") if t["name"] == "echo"]
    assert list(echo) == ["inputSchema", "name", "example.org/rank", "_meta"]
    assert echo["example.org/rank"] == 1 and echo["_meta"]["example.org/origin"]["n"] == 2
    settings = json.loads(config.read_text())
    settings["servers"]["h"]["env"] = {"HOSTILE_RANK": "2"}
    config.write_text(json.dumps(settings))
    assert "h__echo" not in await names(config, tmp_path / "err2")
    assert "server h is quarantined" in (tmp_path / "err2").read_text()
    diff = cli(config, "servers", "diff", "h")
    assert (diff.returncode, diff.stdout) == (1, "tool changed: echo (example.org/rank)\n")
    assert cli(config, "trust", "--servers", "h").returncode == 0
    assert "h__echo" in await names(config, tmp_path / "err3")
    assert marker.alive() == []


def test_a_listing_too_large_or_not_json_to_pin_leaves_the_trust_state_as_it_was(
    tmp_path: Path, marker: Marker
) -> None:
    # A server listing 5 MB of tools was pinned into a trust state past what it may be; from
    # then on every reader refused the file: every other server quarantined ("its tools
    # cannot be checked against their pin"), every trusted file untrusted, until the file
    # was removed by hand.
    from mcpx_hooks.supervisor.config.loading import load_config
    from mcpx_hooks.supervisor.tools import pins

    where = tmp_path / marker
    config = load_config([str(write_config(where, marker))], cwd=where, environ={}, discover=False)
    words, h = config.servers["words"], config.servers["h"]
    environ = {"XDG_STATE_HOME": str(tmp_path / "state")}
    assert pins.verdict(words, [{"name": "count"}], environ).quarantined is None
    huge = [{"name": f"t{n}", "description": "d" * 1000} for n in range(5000)]
    said = pins.verdict(h, huge, environ)
    assert said.quarantined is None and said.warning is not None
    assert said.warning.startswith("server h: its tools could not be pinned: the trust state")
    assert said.warning.endswith("would be larger than 4194304 bytes: not written")
    assert pins.verdict(words, [{"name": "count"}], environ) == pins.PinVerdict()
    assert pins.verdict(words, [{"name": "other"}], environ).quarantined is not None
    # So was a list holding NaN (which a server may write, and the SDK's parser reads): the
    # file was no longer JSON, and every reader refused it.
    nan = [{"name": "n", "inputSchema": {"type": "object", "maximum": float("nan")}}]
    said = pins.verdict(h, nan, environ)
    assert said.quarantined is None and said.warning is not None
    assert said.warning.endswith(
        "would not be JSON (a value in it is NaN or Infinity): not written"
    )
    assert pins.verdict(words, [{"name": "count"}], environ) == pins.PinVerdict()
