"""Observe hooks as declared in the seeds (issue 25, case 7): a hook without `phase` observes;
observing, `on = "*"` follows every kind; an `on` that matches no kind the bus publishes is a
validation error naming the file and the JSON pointer; every kind declared in the table is
really published (a real server, a `*` observer, and a `/v1/events?kinds=*` subscriber see
each one). And JSON given to `hook test` (`--event FILE`, `--event -`, `--hook`) and `exec`
(`--input`, `--hook`) may start with a UTF-8 byte order mark, as config files and hook
output may.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from service_client import (
    ENV,
    Server,
    Stream,
    open_ws,
    read_all,
    read_until,
    run_remote,
    start_server,
)

from mcpx_hooks.supervisor.config.loading import load_config, validate_files
from mcpx_hooks.supervisor.core.errors import ConfigError
from mcpx_hooks.supervisor.core.events import Event, EventKind, kind_matches, kind_prefixes
from mcpx_hooks.supervisor.core.points import Phase
from mcpx_hooks.supervisor.run.observe import observes

CLI = [sys.executable, "-m", "mcpx_hooks.supervisor"]
BOM = "\ufeff"


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.write_text(text)
    return path


def test_a_hook_without_phase_observes(tmp_path: Path) -> None:
    write(tmp_path, "c.toml", '[[hooks]]\non = "run"\nrun = ["true"]\n')
    config = load_config(["c.toml"], cwd=tmp_path, environ={}, discover=False)
    (hook,) = config.hooks
    assert (hook.phase, hook.on, hook.name) == (Phase.OBSERVE, "run", "run.observe.0")
    listed = subprocess.run(
        [*CLI, "hooks", "list", "--json", "--config", "c.toml"],
        cwd=tmp_path,
        env={**ENV, "XDG_CONFIG_HOME": str(tmp_path / "x")},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert listed.returncode == 0, listed.stderr
    (shown,) = json.loads(listed.stdout)
    assert shown["phase"] == "observe"


def test_star_follows_every_kind_and_a_prefix_only_its_own(tmp_path: Path) -> None:
    write(
        tmp_path,
        "c.toml",
        '[[hooks]]\non = "*"\nrun = ["true"]\n[[hooks]]\non = "hook"\nrun = ["true"]\n',
    )
    star, hook = load_config(["c.toml"], cwd=tmp_path, environ={}, discover=False).hooks
    for kind in EventKind:
        event = Event(seq=1, kind=kind.value, at="now", data={})
        assert observes(star, event), kind
        assert observes(hook, event) == kind.value.startswith("hook."), kind
    assert kind_matches("anything.at.all", ("*",))


@pytest.mark.parametrize(
    ("hook", "said"),
    [
        ('on = "call.started"\nphase = "observe"', '"call.started" would never fire'),
        ('on = "call.started"', '"call.started" would never fire'),
        ('on = "hook.fail"', 'did you mean "hook.failed"?'),
        ('on = "hooks"', "would never fire"),
        # A point written without its phase now observes: the message says what to add.
        ('on = "script"', 'a hook on the point "script" names its phase (before, prefix'),
    ],
)
def test_an_observe_on_that_matches_no_published_kind_is_refused(
    tmp_path: Path, hook: str, said: str
) -> None:
    path = write(
        tmp_path,
        "c.toml",
        f'[[hooks]]\nname = "ok"\non = "*"\nrun = ["true"]\n\n[[hooks]]\n{hook}\nrun = ["true"]\n',
    )
    (problem,) = validate_files([path])
    assert (problem.file, problem.pointer) == (str(path), "/hooks/1/on")
    assert said in problem.message, problem.message
    with pytest.raises(ConfigError):
        load_config(["c.toml"], cwd=tmp_path, environ={}, discover=False)


def test_the_prefixes_validation_reads_are_the_tables_kinds_and_their_prefixes() -> None:
    prefixes = kind_prefixes()
    assert prefixes[0] == "*"
    assert {k.value for k in EventKind} <= set(prefixes)
    assert "hook" in prefixes and "run" in prefixes
    # Every prefix matches at least one kind the table declares, and nothing else is one.
    for prefix in prefixes:
        assert any(kind_matches(k.value, (prefix,)) for k in EventKind), prefix
    assert "call" not in prefixes and "call.started" not in prefixes


# ---- every declared kind is published, and a `*` observer sees it ------------------------------

OBSERVER_TOML = """
[[hooks]]
name = "all"
on = "*"
sandbox = "none"
run = {run}
"""

#: A hook that fails (`hook.failed`), and one that answers a key above its effect
#: (`hook.dropped`), as per-call hooks of one request.
REQUEST = {
    "argv": ["true"],
    "hooks": [
        {"on": "script", "phase": "before", "sandbox": "strict", "run": ["false"]},
        {
            "on": "script",
            "phase": "before",
            "effect": "advise",
            "sandbox": "strict",
            "run": ["sh", "-c", 'cat >/dev/null; echo \'{"apply": {"value": 1}}\''],
        },
    ],
}


async def _watch_a_run_and_a_stop(server: Server) -> list[dict[str, Any]]:
    """Every event from the first (`since=0`) while a run runs and the server stops."""
    async with open_ws(server, "/v1/events?kinds=*&since=0") as events:
        seen = Stream()
        await read_until(events, seen, lambda e: e.get("kind") == EventKind.SUPERVISOR_STARTED)
        stream = await run_remote(server, REQUEST)
        assert stream.code == 1000, stream
        # (Each looked for in what came already too: one message may carry several.)
        for kind in (EventKind.RUN_FINISHED, EventKind.HOOK_FINISHED, EventKind.CLIENT_CLOSED):
            if not any(e.get("kind") == kind for e in seen.objects):
                await read_until(events, seen, lambda e, kind=kind: e.get("kind") == kind)
        server.proc.send_signal(signal.SIGTERM)
        await read_all(events, seen)
    return seen.objects


def test_every_declared_kind_is_published_and_a_star_observer_sees_them(tmp_path: Path) -> None:
    seen_file = tmp_path / "seen-kinds"
    record = f'cat >/dev/null; echo "$MCPX_HOOK_EVENT_KIND" >> {seen_file}'
    write(tmp_path, "serve.toml", OBSERVER_TOML.format(run=json.dumps(["sh", "-c", record])))
    server = start_server(tmp_path, "--config", "serve.toml")
    try:
        objects = asyncio.run(asyncio.wait_for(_watch_a_run_and_a_stop(server), 60))
    except BaseException:
        server.stop()
        raise
    assert server.stop(signal=None) == 0, server.log()  # signalled while it was watched
    kinds = {o["kind"] for o in objects if "seq" in o}
    observed = set(seen_file.read_text().split())
    # The `*` observer follows every kind (but for the events its own runs cause),
    # `supervisor.stopping` included: the runtime publishes it once the service has closed
    # its sockets, so only observers can see that one.
    assert kinds | observed == {k.value for k in EventKind}, kinds | observed
    assert {k.value for k in EventKind} - {"supervisor.stopping"} <= kinds, kinds
    assert observed == {k.value for k in EventKind}, observed


# ---- a byte order mark, as every input takes it ------------------------------------------------


def mcpx(*args: str, cwd: Path, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [*CLI, *args],
        cwd=cwd,
        env={**ENV, "XDG_CONFIG_HOME": str(cwd / "x")},
        input=stdin,
        capture_output=True,
        timeout=60,
        check=False,
    )


def test_a_byte_order_mark_is_taken_by_hook_test_and_exec(tmp_path: Path) -> None:
    advise = (
        "import json, sys; print(json.dumps({'advise': json.load(sys.stdin)['error']['message']}))"
    )
    hook = {
        "on": "script",
        "phase": "onError",
        "sandbox": "none",
        "run": [sys.executable, "-c", advise],
    }
    event = {"error": {"message": "with a mark", "exitCode": 7}}
    bom_event = (BOM + json.dumps(event)).encode()
    (tmp_path / "event.json").write_bytes(bom_event)
    bom_hook = BOM + json.dumps(hook)
    for args, stdin in (
        (["--event", "event.json"], b""),
        (["--event", "-"], bom_event),
    ):
        done = mcpx("hook", "test", "--json", "--hook", bom_hook, *args, cwd=tmp_path, stdin=stdin)
        assert done.returncode == 0, done.stderr
        frame = json.loads(done.stdout)
        assert (frame["name"], frame["advice"]) == ("script.onError.0", ["with a mark"]), frame
    before = {**hook, "phase": "before", "run": ["sh", "-c", "cat >/dev/null"]}
    done = mcpx(
        "exec", "--json", "--input", BOM + "[1, 2]", "--hook", BOM + json.dumps(before),
        "--", "true", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    frames = [json.loads(line) for line in done.stdout.splitlines()]
    assert [f["type"] for f in frames] == ["start", "hook", "result", "end"], frames
    # Without a mark, bad JSON is still refused, naming the flag.
    done = mcpx("exec", "--input", BOM + "[1,", "--", "true", cwd=tmp_path)
    assert done.returncode == 2 and b"--input" in done.stderr, done.stderr


def test_the_json_reader_ignores_one_leading_mark_only() -> None:
    from mcpx_hooks.supervisor.core.jsontext import JsonError, loads

    assert loads(BOM + "{}") == {} == loads((BOM + "{}").encode())
    with pytest.raises(JsonError):
        loads(BOM + BOM + "{}")
