"""A client of `mcpx-hooks mcp` that sends calls and does not read their answers is not read
either past a bound: the gateway held every call it read (each a task, its request, its
answer waiting to be written) for as long as the client went on sending, its memory growing
without end (past 500 MB within 20 s of such a client). Once the client reads again, every
call it sent is answered."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import threading
import time
from pathlib import Path

from conftest import Marker
from mcpface_parts import MCPX, through_mcpx, write_config

from mcpx_hooks.supervisor.service.mcpwriter import MAX_UNANSWERED

#: The calls the client tries to send before it reads any answer.
TRIED = 6000


def test_a_client_that_does_not_read_its_answers_is_not_read_past_a_bound(
    tmp_path: Path, marker: Marker
) -> None:
    where = tmp_path / marker
    config = write_config(where, marker)
    env = {**os.environ, **(through_mcpx(config).env or {})}
    argv = [MCPX, "mcp", "--config", str(config)]
    with subprocess.Popen(
        argv, cwd=where, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    ) as proc:
        timer = threading.Timer(120, proc.kill)
        timer.start()
        assert proc.stdin is not None and proc.stdout is not None
        stdin, stdout = proc.stdin, proc.stdout
        agent = {"name": "n", "version": "1"}
        hello = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": agent}
        first = [
            {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        ]
        stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in first))
        stdin.flush()
        stdout.readline(), stdout.readline()  # (the servers started)
        fd = stdin.fileno()
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)
        sent, pending, still = 0, b"", time.monotonic()
        while sent < TRIED and time.monotonic() - still < 3:  # (3 s without room: not read)
            if not pending:
                call = {"name": "words__count", "arguments": {"text": "a b c " * 40}}
                message = {"jsonrpc": "2.0", "id": sent + 2, "method": "tools/call", "params": call}
                pending = json.dumps(message).encode() + b"\n"
            try:
                written = os.write(fd, pending)
            except BlockingIOError:
                time.sleep(0.05)
                continue
            pending, still = pending[written:], time.monotonic()
            sent += not pending
        assert sent < TRIED  # the gateway stopped reading: its pipe filled
        # Now it reads: every call sent whole is answered.
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        answered = set()
        if pending:  # (the rest of a line the pipe took a part of)
            threading.Thread(target=lambda: (stdin.write(pending), stdin.flush())).start()
            sent += 1
        while len(answered) < sent:
            said = json.loads(stdout.readline())
            if "id" in said:
                answered.add(said["id"])
        stdin.close()
        assert proc.wait() == 0
        timer.cancel()
    assert answered == set(range(2, sent + 2))
    assert sent > MAX_UNANSWERED  # (the pipes hold more besides)
    assert marker.alive() == []
