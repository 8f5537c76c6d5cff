"""The runners' copies of what the supervisor declares, held equal to it.

`runners/` runs in hook and script processes with the standard library only and never imports
the supervisor, so where it must say what the supervisor says (the script point's phases, the
variables a script or hook is given, the spawn request and the reports about a child), it
keeps a copy or speaks it in its own code; each test here fails when the two drift apart.
What both sides share as one declaration (`runners/libc.py`, `isolation.py`, `protocol.py`'s
commands, which the supervisor imports) is checked only where the supervisor adds to it.
"""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from mcpx_hooks.runners import (
    collect,
    isolation,
    launcher,
    mcpx_channel,
    memcg,
    module_runner,
    protocol,
    spawnreq,
    warm,
)
from mcpx_hooks.supervisor.core import hookenv, jsontext
from mcpx_hooks.supervisor.core.errors import SpawnError
from mcpx_hooks.supervisor.core.points import POINTS
from mcpx_hooks.supervisor.process import sandbox
from mcpx_hooks.supervisor.process.child import Child, SpawnerLink
from mcpx_hooks.supervisor.process.spawnspec import (
    NOT_SENT,
    ChildSpec,
    ModuleCall,
    SandboxPlan,
    sandbox_fields,
    spawn_request,
)
from mcpx_hooks.supervisor.run.journal import RunJournal
from mcpx_hooks.supervisor.run.script import ScriptOutcome, _pump_frames

# --------------------------------------------------------------------------- what a script sees


def test_the_launcher_splices_the_phases_of_the_script_point() -> None:
    assert tuple(phase.value for phase in POINTS["script"].phases) == launcher.PHASES


def test_runners_read_the_variables_the_supervisor_sets() -> None:
    assert mcpx_channel.FRAMES_FD_VAR == hookenv.FRAMES_FD_VAR
    assert mcpx_channel.ARTIFACTS_VAR == hookenv.ARTIFACTS_DIR_VAR
    assert mcpx_channel.CALLS_FD_VAR == hookenv.CALLS_FD_VAR
    assert module_runner.TIMEOUT_VAR in hookenv.NAMES
    assert module_runner.MAX_DEPTH == jsontext.MAX_DEPTH
    assert json.loads(warm.REHEARSAL_INPUT)["protocol"] == hookenv.PROTOCOL


async def test_every_line_the_frames_channel_writes_is_a_frame_the_supervisor_takes() -> None:
    read, write = os.pipe()
    try:
        frames = mcpx_channel.Frames(write)
        script = launcher.Launcher(frames, None, "pass")
        mcpx = mcpx_channel.make_mcpx_module(script)  # what a script calls
        mcpx.log("hello", k=1)
        mcpx.emit([2])
        script.send_result({"v": 3})  # what the launcher sends for it
        frames.send_exception(ValueError("bad"))
    finally:
        os.close(write)
    with os.fdopen(read, "rb") as f:
        written = f.read()
    send, receive = trio.testing.memory_stream_one_way_pair()
    await send.send_all(written)
    await send.aclose()
    journal, outcome = RunJournal("r1"), ScriptOutcome()
    await _pump_frames(receive, journal, outcome)
    taken = [{k: f[k] for k in f if k not in ("runId", "seq", "at")} for f in journal.frames]
    assert taken == [
        {"type": "log", "level": "info", "message": "hello", "attrs": {"k": 1}},
        {"type": "emit", "value": [2]},
    ]
    assert outcome.result_line == ({"v": 3},)
    assert outcome.exception == "ValueError: bad"


# --------------------------------------------------------------------------- the mechanisms


def test_the_supervisor_describes_each_mechanism_the_spawner_names() -> None:
    assert [m.name for m in sandbox.MECHANISMS] == list(isolation.NAMES)
    assert set(sandbox._ABOUT) == set(isolation.NAMES)
    assert {name for needs in sandbox.NEEDS.values() for name in needs} <= set(isolation.NAMES)


def test_the_docs_name_everything_mcpx_hooks_hide_can_hide() -> None:
    """Each name `MCPX_HOOKS_HIDE` may hold (the table `doctor` checks it against) is in the
    sandbox docs' section on it, and the parts named there are those of the table."""
    text = (Path(__file__).parent.parent / "docs" / "sandbox.md").read_text()
    section = text.split("## Hiding a mechanism\n", 1)[1].split("\n## ", 1)[0]
    for name in isolation.HIDEABLE:
        assert re.search(rf"[`,=]{name}[`,]", section), name
    listed = re.findall(r"^- `([a-z]+)`:", section, re.MULTILINE)
    assert listed == list(isolation.OTHER_PARTS)
    assert memcg.HIDE_NAME in isolation.OTHER_PARTS


# --------------------------------------------------------------------------- the spawn request

PLAN = SandboxPlan(
    read=("/usr", "/etc"),
    scratch="/tmp/scratch",
    scratch_bytes=1 << 20,
    net=True,
    devices=("/dev/null",),
    return_scratch=True,
    switch_uid=False,
    write=("/srv/work",),
    mapped=("/etc",),
)
SPEC = ChildSpec(
    argv=("python3", "-c", "pass"),
    cwd="/",
    env={"PATH": "/usr/bin", "LANG": "C.UTF-8"},
    rlimits=(("RLIMIT_NOFILE", 64, 128), ("RLIMIT_CPU", -1, -1)),
    sandbox=PLAN,
    module=ModuleCall("hooks/check.py:hook", ("/site",)),
)


def test_the_supervisor_sends_only_keys_the_spawner_knows() -> None:
    request = spawn_request(SPEC, [0, 3], collect=(10, 20), env_fd=3)
    for where, part in (
        ("", request),
        ("sandbox", request["sandbox"]),
        ("module", request["module"]),
        ("collect", request["collect"]),
    ):
        required, optional = spawnreq.FIELDS[where]
        assert set(required) <= set(part) <= {*required, *optional}, where
    # Every field the spawner knows of a plan and a module call, the supervisor can say.
    assert set(sandbox_fields(PLAN)) == {
        *spawnreq.FIELDS["sandbox"][0],
        *spawnreq.FIELDS["sandbox"][1],
    }
    assert set(request["module"]) == set(
        spawnreq.FIELDS["module"][0] + spawnreq.FIELDS["module"][1]
    )


@pytest.fixture
def child_fds() -> Iterator[list[int]]:
    """Two fds whose copies a request is given (`_parsed`): it owns and closes those."""
    r, w = os.pipe()
    yield [r, w]
    for fd in (r, w):
        os.close(fd)


def _parsed(request: dict[str, Any], fds: list[int]) -> spawnreq.Request:
    return spawnreq.Request(json.dumps(request).encode(), [os.dup(fd) for fd in fds])


def test_the_spawner_reads_a_request_as_the_supervisor_means_it(child_fds: list[int]) -> None:
    req = _parsed(spawn_request(SPEC, [0, 3], collect=(10, 20), env_fd=3), child_fds)
    try:
        assert req.argv == list(SPEC.argv)
        assert req.cwd == SPEC.cwd
        assert req.env == {}  # warm: the environment goes to the child only
        assert [(req.limit_names[n], soft, hard) for n, soft, hard in req.limits] == [
            ("RLIMIT_NOFILE", 64, 128),
            ("RLIMIT_CPU", resource.RLIM_INFINITY, resource.RLIM_INFINITY),
        ]
        assert [target for _, target in req.pairs] == [0, 3, 1, 2]
        assert req.module is not None
        assert (req.module.spec, req.module.path, req.module.env_fd) == (
            "hooks/check.py:hook",
            ["/site"],
            3,
        )
        assert req.collect is not None and (req.collect.stdout, req.collect.stderr) == (10, 20)
        assert req.sandbox is not None
        for field in attrs.fields(SandboxPlan):
            if field.name in NOT_SENT:  # (the supervisor's own: never sent, never read)
                assert not hasattr(req.sandbox, field.name), field.name
                continue
            mine = getattr(PLAN, field.name)
            theirs = getattr(req.sandbox, field.name)
            assert theirs == (list(mine) if isinstance(mine, tuple) else mine), field.name
    finally:
        req.close()
        req.drop_outputs()


def test_a_cold_request_keeps_its_environment(child_fds: list[int]) -> None:
    spec = ChildSpec(("true",), "/tmp", {"A": "1"})
    req = _parsed(spawn_request(spec, [0, 1, 2][: len(child_fds)]), child_fds)
    try:
        assert (req.env, req.module, req.sandbox, req.collect) == ({"A": "1"}, None, None, None)
    finally:
        req.close()


# --------------------------------------------------------------------------- the reports


@pytest.fixture
async def link() -> Any:
    """The supervisor's end of a control socket (`SpawnerLink`) and the spawner's."""
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    link = SpawnerLink(mine, lambda: False)
    try:
        yield link, theirs
    finally:
        link.close()
        theirs.close()


async def test_the_supervisor_hears_every_report_the_spawner_sends(link: Any) -> None:
    link, theirs = link
    child = Child(link, None, None, [])
    protocol.accept(theirs)
    child._note(await link.recv())
    assert child._taken()
    pidfd = os.pidfd_open(os.getpid())
    try:
        protocol.send_started(theirs, 4321, pidfds=(pidfd, pidfd))
    finally:
        os.close(pidfd)
    child._note(await link.recv())
    assert child.outcome.pid == 4321 and len(child._pidfds) == 2
    usage = resource.getrusage(resource.RUSAGE_SELF)
    protocol.send(theirs, protocol.exit_report(3 << 8, usage))
    child._note(await link.recv())
    outcome = child.outcome
    assert (outcome.exited, outcome.exit_code, outcome.signal) == (True, 3, None)
    assert outcome.cpu_ms == round((usage.ru_utime + usage.ru_stime) * 1000)
    assert outcome.max_rss_kb == usage.ru_maxrss
    await child.aclose()


async def test_a_keeper_and_a_signal_are_reported_alike(link: Any) -> None:
    link, theirs = link
    child = Child(link, None, None, [])
    protocol.send_started(theirs, 11, keeper=12)
    child._note(await link.recv())
    assert (child.outcome.pid, child.keeper) == (11, 12)
    protocol.send(theirs, protocol.exit_report(signal.SIGKILL, resource.getrusage(0)))
    child._note(await link.recv())
    assert (child.outcome.exit_code, child.outcome.signal) == (None, signal.SIGKILL)


async def test_a_start_that_failed_is_the_spawners_reason(link: Any) -> None:
    link, theirs = link
    protocol.fail(theirs, "cannot start 'nope': not found on PATH")
    with pytest.raises(SpawnError) as raised:
        await Child(link, None, None, [])._wait_started()
    assert str(raised.value) == "cannot start 'nope': not found on PATH"


def _output(data: bytes, ring: int) -> collect.Output:
    """A collected output that has read `data` to its end."""
    r, w = os.pipe()
    os.write(w, data)
    os.close(w)
    output = collect.Output(r, ring)
    while output.splice():
        pass
    return output


async def test_collected_output_arrives_as_the_spawner_kept_it(link: Any) -> None:
    link, theirs = link
    outputs = [_output(b"out", 0), _output(b"abcdef", 4)]  # stderr went round its ring
    try:
        report = protocol.exit_report(0, resource.getrusage(0))
        collect.send_collected(theirs, report, outputs, overflow=True)
    finally:
        for output in outputs:
            output.close()
    child = Child(link, None, None, [])
    child._note(await link.recv())
    assert (child.outcome.stdout, child.outcome.stderr_tail) == (b"out", b"cdef")
    assert child.outcome.stdout_overflow and child.outcome.exit_code == 0


async def test_the_spawner_obeys_every_command_the_supervisor_sends(link: Any) -> None:
    link, theirs = link
    for cmd in (protocol.TERM, protocol.KILL):
        await link.send(cmd)
        assert protocol.command(theirs.recv(4096)) == cmd
