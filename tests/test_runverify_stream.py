"""`runs verify FILE` checks a file as it reads it: `/dev/zero`, or a run with a line of
hundreds of MiB, is never held whole (the check read up to `[history] retainBytes`, 1 GiB,
into memory first). The chain's rules themselves (`core/chain.py`), given in any pieces."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from service_client import CLI, ENV

from mcpx_hooks.supervisor.core.chain import GENESIS, LINE_HELD, ChainCheck, check

#: Runs the command line (argv after the first two) with stdin fed `size` bytes of a run whose
#: second frame is one line of `size` bytes (stdout, or "-": none, the command reads a file),
#: and prints its exit code, what it printed and its peak memory (KiB).
MEASURE = """
import hashlib, json, resource, subprocess, sys
size, argv = int(sys.argv[1]), sys.argv[2:]
child = subprocess.Popen(argv, stdin=subprocess.PIPE if size else subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
if size:
    chain = bytes(32)
    def send(line):
        global chain
        chain = hashlib.sha256(chain + line).digest()
        child.stdin.write(line + b"\\n")
    send(b'{"runId":"r1","seq":0,"at":"2026-12-06T00:00:00.000Z","argv":["x"],"type":"start"}')
    head = b'{"runId":"r1","seq":1,"at":"2026-12-06T00:00:00.000Z","text":"'
    piece = b"x" * (1 << 20)
    body = hashlib.sha256(chain)
    body.update(head)
    child.stdin.write(head)
    for _ in range(size >> 20):
        body.update(piece)
        child.stdin.write(piece)
    body.update(b'","type":"stdout"}')
    child.stdin.write(b'","type":"stdout"}\\n')
    chain = body.digest()
    end = {"runId": "r1", "seq": 2, "at": "2026-12-06T00:00:00.000Z", "exitCode": 0,
           "durationMs": 1, "type": "end", "chain": chain.hex()}
    child.stdin.write(json.dumps(end, separators=(",", ":")).encode() + b"\\n")
    child.stdin.close()
said = child.stdout.read().decode()
code = child.wait()
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps({"code": code, "said": said, "peak": peak}))
"""

#: Far above what the command needs (some 40 MiB here), far below what it read.
PEAK_KIB = 128 * 1024


def measured(tmp_path: Path, size: int, target: str) -> dict[str, object]:
    env = {**ENV, "XDG_STATE_HOME": str(tmp_path / "state")}
    argv = [sys.executable, "-c", MEASURE, str(size), *CLI, "runs", "verify", target]
    done = subprocess.run(
        argv, check=False, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_dev_zero_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    result = measured(tmp_path, 0, "/dev/zero")
    assert result["code"] == 1
    assert "/dev/zero: over 1073741824 bytes" in str(result["said"])
    assert isinstance(result["peak"], int) and result["peak"] < PEAK_KIB, result


def test_a_run_with_a_line_of_256_mib_is_checked_in_bounded_memory(tmp_path: Path) -> None:
    result = measured(tmp_path, 256 << 20, "/dev/stdin")
    assert result["code"] == 0, result
    assert (
        result["said"] == "/dev/stdin: intact (3 frames; their chain matches their end frame's)\n"
    )
    assert isinstance(result["peak"], int) and result["peak"] < PEAK_KIB, result


# --- the chain's rules, in pieces ----------------------------------------------------------


def run_lines(*texts: str) -> list[bytes]:
    """A run's frame lines: `texts` as stdout frames, then an end frame with their chain."""
    lines, chain = [], GENESIS
    frames: list[dict[str, object]] = [{"type": "start"}] + [
        {"text": t, "type": "stdout"} for t in texts
    ]
    for seq, frame in enumerate(frames):
        line = json.dumps({"runId": "r1", "seq": seq, **frame}, separators=(",", ":")).encode()
        lines.append(line)
        chain = hashlib.sha256(chain + line).digest()
    end = {"runId": "r1", "seq": len(frames), "type": "end", "chain": chain.hex()}
    return [*lines, json.dumps(end, separators=(",", ":")).encode()]


def in_pieces(text: bytes, size: int, stored: list[bytes] | None = None) -> tuple[int, str | None]:
    checking = ChainCheck(None if stored is None else lambda _, seq: stored[seq])
    *ended, rest = text.split(b"\n")
    for line in ended:
        for at in range(0, max(len(line), 1), size):
            checking.piece(line[at : at + size])
        if (problem := checking.end_line()) is not None:
            return checking.count, problem
    checking.piece(rest)
    problem = checking.end_line()
    return checking.count, problem if problem is not None else checking.finish()


LONG = "y" * (LINE_HELD + 10)


@pytest.mark.parametrize("size", [1, 7, 4096, LINE_HELD + 5])
def test_pieces_of_any_size_give_what_whole_lines_give(size: int) -> None:
    lines = run_lines("a", LONG, "b")
    assert check(lines) is None
    text = b"\r\n".join(lines) + b"\r\n\n  \n"  # (CRLF, and blank lines after: no frames)
    assert in_pieces(text, size) == (5, None)
    changed = [*lines]
    changed[2] = changed[2].replace(b"yyy", b"yzy", 1)  # a byte in the long line
    assert check(changed) is not None
    assert in_pieces(b"\n".join(changed), size) == (5, check(changed))
    assert in_pieces(b"\n".join(changed), size, lines)[1] == (
        "frame seq 2 (line 3) differs from the stored run"
    )
    moved = [lines[0], lines[2], lines[1], *lines[3:]]
    assert in_pieces(b"\n".join(moved), size)[1] == (
        "line 2 holds seq 2, where seq 1 belongs: a frame was removed, added or moved there"
    )


def test_a_long_line_that_is_no_frame_is_said_so() -> None:
    text = b"\n".join([run_lines()[0], b"[" * (LINE_HELD + 1)])
    assert in_pieces(text, 4096) == (2, "line 2 is not a JSON frame")
    assert in_pieces(b"\x00" * (LINE_HELD * 3), 65536) == (1, "line 1 is not a JSON frame")
