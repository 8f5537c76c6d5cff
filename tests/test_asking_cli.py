"""Asking as people and clients meet it: `exec --yes` / `--no`, the prompt on a terminal, an
unanswered ask; a real `serve` answered by a WebSocket client on `/v1/exec` and on
`/v1/runs/{runId}`, and by `exec --remote --yes`. Real processes throughout."""

from __future__ import annotations

import json
import os
import pty
import selectors
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from service_client import CLI, ENV, Server, Stream, arun, open_ws, read_all, read_until
from service_client import start_server as serve

from mcpx_hooks.supervisor.core.order import check_order

PLAIN = (
    '[defaults]\nsandbox = "none"\n[script]\nsandbox = "none"\n[service]\nsandboxes = ["none"]\n'
)


def asking_hook(
    deadline_ms: int = 60_000, default: str = "no", question: str = "ship it?"
) -> dict[str, Any]:
    ask = {"ask": {"question": question, "default": default, "deadlineMs": deadline_ms}}
    return {
        "name": "gate",
        "on": "script",
        "phase": "before",
        "effect": "ask",
        "sandbox": "none",
        # (printf: dash's echo would turn the JSON's escapes into the characters)
        "run": ["sh", "-c", f"cat >/dev/null; printf '%s\\n' '{json.dumps(ask)}'"],
    }


#: A question holding what would clear the screen and a line that reads as the view's own.
HOSTILE = "ship it?\x1b[2J\nend: exit code 0"
#: The same as the terminal is shown it.
SHOWN = "gate asks: ship it?\\x1b[2J\n    end: exit code 0"


def mcpx(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args],
        cwd=cwd,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def frames_of(stdout: str) -> list[dict[str, Any]]:
    frames = [json.loads(line) for line in stdout.splitlines()]
    check_order(frames)
    return frames


def gate_of(frames: list[dict[str, Any]]) -> dict[str, Any]:
    (gate,) = [f for f in frames if f["type"] == "hook"]
    return gate


@pytest.mark.parametrize(("flag", "word"), [("--yes", "yes"), ("--no", "no")])
def test_exec_yes_and_no_answer_every_ask(tmp_path: Path, flag: str, word: str) -> None:
    hook = json.dumps(asking_hook())
    out = mcpx("exec", "--json", flag, "--hook", hook, "--", "echo", "42", cwd=tmp_path)
    frames = frames_of(out.stdout)
    (ask,) = [f for f in frames if f["type"] == "ask"]
    assert (ask["hook"], ask["question"], ask["deadlineMs"]) == ("gate", "ship it?", 60_000)
    assert gate_of(frames)["asked"] == {"question": "ship it?", "answer": word, "by": "flag"}
    assert f"gate asks: ship it? -> {word} ({flag})" in out.stderr
    if word == "yes":
        assert out.returncode == 0 and frames[-2]["value"] == 42
    else:
        assert out.returncode != 0 and frames[-2]["refusedBy"] == "gate"
    both = mcpx("exec", "--yes", "--no", "--", "true", cwd=tmp_path)
    assert both.returncode == 2 and "not allowed with argument" in both.stderr


@pytest.mark.parametrize(("flag", "word"), [("--yes", "yes"), ("--no", "no")])
def test_an_ask_without_a_deadline_waits_for_its_answer(
    tmp_path: Path, flag: str, word: str
) -> None:
    # `deadlineMs` left out counted as 0: the question was settled by its default at once,
    # "waiting for an answer" for 0 s, and `--yes` said "the answer was not taken".
    hook = asking_hook()
    hook["run"][-1] = hook["run"][-1].replace(', "deadlineMs": 60000', "")
    assert "deadlineMs" not in hook["run"][-1]
    out = mcpx("exec", "--json", flag, "--hook", json.dumps(hook), "--", "true", cwd=tmp_path)
    frames = frames_of(out.stdout)
    (ask,) = [f for f in frames if f["type"] == "ask"]
    assert ask["deadlineMs"] == 30_000
    assert gate_of(frames)["asked"] == {"question": "ship it?", "answer": word, "by": "flag"}
    assert (out.returncode == 0) is (word == "yes"), out.stderr
    assert "not taken" not in out.stderr, out.stderr


def test_a_question_s_control_characters_never_reach_the_terminal(tmp_path: Path) -> None:
    # `--yes` said the hook's question as it came: ESC went to the terminal, and its line
    # break started a line "end: exit code 0" that read as the view's own.
    hook = json.dumps(asking_hook(question=HOSTILE))
    out = mcpx("exec", "--json", "--yes", "--hook", hook, "--", "true", cwd=tmp_path)
    assert "\x1b" not in out.stderr, out.stderr
    assert f"{SHOWN} -> yes (--yes)" in out.stderr, out.stderr
    master, slave = pty.openpty()
    with subprocess.Popen(
        [*CLI, "exec", "--json", "--hook", hook, "--", "true"],
        cwd=tmp_path, env=ENV, stdin=slave, stderr=slave, stdout=subprocess.PIPE, text=True,
    ) as proc:  # fmt: skip
        os.close(slave)
        seen = bytearray()
        _read_until(master, b"[y/n; Enter or 60 s answers no] ", seen)
        os.write(master, b"y\n")
        proc.communicate(timeout=60)
    os.close(master)
    assert b"\x1b" not in seen, bytes(seen)
    assert SHOWN.replace("\n", "\r\n").encode() in seen, bytes(seen)  # (the terminal's line ends)


def test_an_unanswered_ask_takes_its_default_at_the_deadline(tmp_path: Path) -> None:
    # Not a terminal (stdin is /dev/null) and no flag: nobody answers.
    for default, refused in (("no", True), ("yes", False)):
        hook = json.dumps(asking_hook(deadline_ms=100, default=default))
        out = mcpx("exec", "--json", "--hook", hook, "--", "true", cwd=tmp_path)
        gate = gate_of(frames_of(out.stdout))
        assert gate["asked"] == {"question": "ship it?", "answer": default, "by": "deadline"}
        assert (gate["refused"] is not None) is refused


def _read_until(fd: int, want: bytes, seen: bytearray) -> None:
    """Reads the terminal's output until `want` shows (bounded, no sleeps)."""
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while want not in seen:
            assert sel.select(60), bytes(seen)
            try:
                seen += os.read(fd, 4096)
            except OSError:  # EIO: the other side closed
                raise AssertionError(bytes(seen)) from None


@pytest.mark.parametrize(
    ("typed", "word", "default"),
    [(b"y\n", "yes", "no"), (b"n\n", "no", "no"), (b"\n", "no", "no"), (b"\n", "yes", "yes")],
)
def test_on_a_terminal_the_person_is_asked(
    tmp_path: Path, typed: bytes, word: str, default: str
) -> None:
    """An empty line answers the ask's default, and the prompt says so (it said only the
    deadline's default: `[y/n, default no in 60 s]`)."""
    master, slave = pty.openpty()
    hook = json.dumps(asking_hook(default=default))
    with subprocess.Popen(
        [*CLI, "exec", "--json", "--hook", hook, "--", "true"],
        cwd=tmp_path,
        env=ENV,
        stdin=slave,
        stderr=slave,
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:
        os.close(slave)
        seen = bytearray()
        prompt = f"gate asks: ship it? [y/n; Enter or 60 s answers {default}] "
        _read_until(master, prompt.encode(), seen)
        os.write(master, b"maybe\n")
        _read_until(master, b"please type y or n: ", seen)
        os.write(master, typed)
        stdout, _ = proc.communicate(timeout=60)
    os.close(master)
    frames = frames_of(stdout)
    assert gate_of(frames)["asked"] == {"question": "ship it?", "answer": word, "by": "terminal"}
    assert (proc.returncode == 0) is (word == "yes")


def test_a_prompt_nobody_answers_goes_away_at_the_deadline(tmp_path: Path) -> None:
    master, slave = pty.openpty()
    hook = json.dumps(asking_hook(deadline_ms=300, default="yes"))
    with subprocess.Popen(
        [*CLI, "exec", "--hook", hook, "--", "echo", "1"],
        cwd=tmp_path,
        env=ENV,
        stdin=slave,
        stderr=slave,
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:
        os.close(slave)
        seen = bytearray()
        _read_until(master, b"(settled without this answer; see the hook's line)", seen)
        stdout, _ = proc.communicate(timeout=60)
    os.close(master)
    assert proc.returncode == 0
    # The readable view: the question as it is put, then what settled it.
    assert "ask from gate: ship it? (default yes in 0.3 s; waiting for an answer)" in stdout
    assert "  asked: ship it? -> yes (by deadline)" in stdout


#: A prompt its deadline settled, as the terminal shows it: its line ended, then the hook's.
SETTLED = (
    "gate asks: ship it? [y/n; Enter or 0.3 s answers no] \n"
    "(settled without this answer; see the hook's line)\n"
    "hook gate (script.before, run, sandbox none): ok in "
)


def on_a_terminal(argv: list[str], cwd: Path) -> tuple[str, int]:
    """`argv` with its stdin, stdout and stderr all on one terminal, as a person runs it:
    what the terminal showed, to `end`'s line, and the exit code."""
    master, slave = pty.openpty()
    with subprocess.Popen(argv, cwd=cwd, env=ENV, stdin=slave, stdout=slave, stderr=slave) as proc:
        os.close(slave)
        seen = bytearray()
        _read_until(master, b"end: ", seen)
        returncode = proc.wait(timeout=60)
    os.close(master)
    return seen.decode().replace("\r\n", "\n"), returncode


def test_a_settled_prompt_ends_its_line_before_the_hook_s_line(tmp_path: Path) -> None:
    """The prompt's line is closed with its note before the view shows what settled it: the
    hook's line never runs on after `[y/n, …] `, nor the note after the run's `end`."""
    hook = json.dumps(asking_hook(deadline_ms=300))
    shown, returncode = on_a_terminal([*CLI, "exec", "--hook", hook, "--", "true"], tmp_path)
    assert returncode == 3
    assert SETTLED in shown, shown
    # The frames as JSON on the same terminal: the gate's frame on a line of its own too.
    argv = [*CLI, "exec", "--json", "--hook", hook, "--", "true"]
    master, slave = pty.openpty()
    with subprocess.Popen(argv, cwd=tmp_path, env=ENV, stdin=slave, stdout=slave, stderr=slave):
        os.close(slave)
        seen = bytearray()
        _read_until(master, b'"type":"end"', seen)
    os.close(master)
    assert (
        b"[y/n; Enter or 0.3 s answers no] \r\n"
        b"(settled without this answer; see the hook's line)\r\n{" in seen
    )


# ---- the service ---------------------------------------------------------------------------------
# ---- the service ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    cwd = tmp_path_factory.mktemp("serve")
    (cwd / "c.toml").write_text(PLAIN)
    srv = serve(cwd, "--config", "c.toml")
    yield srv
    assert srv.stop() == 0
    assert "Traceback" not in srv.log(), srv.log()


def test_a_client_of_exec_answers_and_only_its_first_answer_counts(server: Server) -> None:
    # A second asking hook ("hold") keeps the run from its end until the late answer to the
    # first has been refused: the refusal cannot race the run's end and the socket's close.
    hooks = [asking_hook(), {**asking_hook(), "name": "hold"}]

    async def main() -> Stream:
        async with open_ws(server, "/v1/exec") as ws:
            await ws.send(json.dumps({"argv": ["echo", "7"], "hooks": hooks}))
            stream = Stream()
            ask = await read_until(ws, stream, lambda o: o.get("type") == "ask")
            answer = {"type": "answer", "askId": ask["askId"], "answer": "yes"}
            await ws.send(json.dumps(answer))
            await read_until(ws, stream, lambda o: o.get("type") == "hook")
            await ws.send(json.dumps({**answer, "answer": "no"}))  # too late: told, not closed
            await read_until(ws, stream, lambda o: "askId" in o and "seq" not in o)
            held = [o for o in stream.frames if o["type"] == "ask" and o["askId"] != ask["askId"]]
            hold = held[0] if held else await read_until(ws, stream, lambda o: "question" in o)
            await ws.send(json.dumps({**answer, "askId": hold["askId"]}))
            return await read_all(ws, stream)

    stream = arun(main())
    assert stream.code == 1000
    check_order(stream.frames)
    gate, hold = [f for f in stream.frames if f["type"] == "hook"]
    assert gate["name"] == "gate" and hold["name"] == "hold"
    assert gate["asked"] == {"question": "ship it?", "answer": "yes", "by": "client"}
    assert stream.frames[-2]["type"] == "result" and stream.frames[-2]["value"] == 7
    (late,) = stream.errors
    assert late["message"] == (
        "answer refused: ask-1 was already answered yes (by client); the first counts"
    )


def test_a_follower_of_the_run_may_answer_too(server: Server) -> None:
    async def main() -> tuple[Stream, Stream]:
        async with open_ws(server, "/v1/exec") as ws:
            await ws.send(json.dumps({"argv": ["true"], "hooks": [asking_hook()]}))
            started = Stream()
            ask = await read_until(ws, started, lambda o: o.get("type") == "ask")
            async with open_ws(server, f"/v1/runs/{ask['runId']}?from=0") as follower:
                followed = Stream()
                await read_until(follower, followed, lambda o: o.get("type") == "ask")
                answer = {"type": "answer", "askId": ask["askId"], "answer": "no"}
                await follower.send(json.dumps(answer))
                await read_all(follower, followed)
            return await read_all(ws, started), followed

    started, followed = arun(main())
    assert started.code == followed.code == 1000
    assert started.frames == followed.frames
    gate = gate_of(started.frames)
    assert gate["asked"] == {"question": "ship it?", "answer": "no", "by": "client"}
    assert started.frames[-2]["refusedBy"] == "gate"


def test_exec_remote_yes_answers_over_the_socket(server: Server) -> None:
    hook = json.dumps(asking_hook())
    remote = ["--remote", server.url, "--token-file", str(server.cwd / "token")]
    out = subprocess.run(
        [*CLI, "exec", *remote, "--json", "--yes", "--hook", hook, "--", "echo", "5"],
        cwd=server.cwd,  # (a request's cwd lies in the server's root)
        env=ENV,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert out.returncode == 0, out.stderr
    frames = frames_of(out.stdout)
    # Over the wire, the server knows the answer came from its client.
    assert gate_of(frames)["asked"] == {"question": "ship it?", "answer": "yes", "by": "client"}
    assert frames[-2]["value"] == 5
    assert "gate asks: ship it? -> yes (--yes)" in out.stderr


def test_exec_remote_s_settled_prompt_ends_its_line_before_the_hook_s_line(
    server: Server,
) -> None:
    hook = json.dumps(asking_hook(deadline_ms=300))
    remote = ["--remote", server.url, "--token-file", str(server.cwd / "token")]
    argv = [*CLI, "exec", *remote, "--hook", hook, "--", "true"]
    shown, returncode = on_a_terminal(argv, server.cwd)
    assert returncode == 3
    assert SETTLED in shown, shown


def test_exec_remote_hands_on_every_frame_and_keeps_none_of_the_output(server: Server) -> None:
    """A client holds no more of a run than its frames but the output (which it hands on as
    it comes, and which is most of a run), and is told once each message has been handed on:
    what `exec --remote` flushes stdout on."""
    from mcpx_hooks.supervisor.service.remote import Remote, exec_remote

    seen: list[dict[str, Any]] = []
    messages: list[int] = []
    script = "import sys\nfor n in range(3000): print(n)\nprint('bye', file=sys.stderr)"
    request = {"argv": ["python3", "-c", script], "cwd": str(server.cwd), "sandbox": "none"}
    remote = Remote(server.url, token=server.token)
    import trio

    async def main() -> list[dict[str, Any]]:
        with trio.fail_after(60):
            told = lambda: messages.append(len(seen))  # noqa: E731
            return await exec_remote(remote, request, seen.append, None, told)

    kept = trio.run(main)
    check_order(seen)
    assert [f["text"] for f in seen if f["type"] == "stdout"] == list(map(str, range(3000)))
    assert [f["text"] for f in seen if f["type"] == "stderr"] == ["bye"]
    assert kept == [f for f in seen if f["type"] not in ("stdout", "stderr")]
    assert [f["type"] for f in kept][-2:] == ["result", "end"]
    # Told after each message, never in the middle of one's frames; the last after `end`.
    assert messages == sorted(messages) and messages[-1] == len(seen)
    assert 1 < len(messages) < len(seen)
