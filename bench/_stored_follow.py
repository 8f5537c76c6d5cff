"""Followers of a run only the history holds: the peak RSS of a restarted `serve` while N
stock `websockets` clients replay a stored run at once, and how long they take.

    .venv/bin/python bench/_stored_follow.py [--followers 6] [--lines 400000]

A `serve` (its state in a temporary directory) runs a script printing `--lines` lines, is
stopped and started again (the run is then in its history only), and `--followers` clients
follow it from seq 0 to its end, each in a thread, while the server's RSS is sampled every
5 ms (psutil). A measuring aid, not a row of `make bench` (no goal): it prints the figures.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

CLI = [sys.executable, "-m", "mcpx_hooks.supervisor"]


def start(state: Path) -> tuple[subprocess.Popen[str], str, str]:
    """`serve --port 0` with its history under `state`: the process, its URL, its token."""
    token_file = state / "token"
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(state / "home"),
           "XDG_STATE_HOME": str(state / "state"), "MCPX_HOOKS_NO_DISCOVERY": "1"}  # fmt: skip
    proc = subprocess.Popen(
        [*CLI, "serve", "--port", "0", "--token-file", str(token_file)],
        cwd=state / "work", env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    found = re.search(r"listening on (ws://\S+?);", proc.stdout.readline())
    assert found, "serve did not say where it listens"
    return proc, found.group(1), token_file.read_text().strip()


def stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    proc.wait(timeout=30)


def follow(url: str, token: str, counts: list[int]) -> None:
    lines = 0
    headers = {"Authorization": f"Bearer {token}"}
    with (
        connect(url, additional_headers=headers, proxy=None, max_size=None) as ws,
        contextlib.suppress(ConnectionClosed),
    ):
        while True:
            lines += str(ws.recv(timeout=120)).count("\n") + 1
    counts.append(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--followers", type=int, default=6)
    parser.add_argument("--lines", type=int, default=400_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp)
        state.chmod(0o755)  # (the script's sandbox reads its working directory)
        (state / "work").mkdir(mode=0o755)
        proc, url, token = start(state)
        script = (
            f"import sys; sys.stdout.write(''.join(f'line {{i}}\\n' for i in range({args.lines})))"
        )
        try:
            ran = subprocess.run(
                [*CLI, "exec", "--remote", url, "--token-file", str(state / "token"), "--json",
                 "--", sys.executable, "-c", script],
                capture_output=True, text=True, check=False, cwd=state / "work",
            )  # fmt: skip
            if ran.returncode != 0:
                raise SystemExit(f"the run failed: {ran.stderr.strip()}")
        finally:
            stop(proc)
        run_id = ran.stdout.split('"runId":"', 1)[1].split('"', 1)[0]
        proc, url, token = start(state)
        try:
            server = psutil.Process(proc.pid)
            base = peak = server.memory_info().rss
            done = threading.Event()

            def sample() -> None:
                nonlocal peak
                while not done.wait(0.005):
                    peak = max(peak, server.memory_info().rss)

            sampler = threading.Thread(target=sample)
            sampler.start()
            counts: list[int] = []
            began = time.perf_counter()
            target = f"{url}/v1/runs/{run_id}?from=0"
            threads = [
                threading.Thread(target=follow, args=(target, token, counts))
                for _ in range(args.followers)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            took = time.perf_counter() - began
            done.set()
            sampler.join()
        finally:
            stop(proc)
    mib = 1 << 20
    print(f"{args.followers} followers of a stored run of {counts[0]} frames: {took:.2f} s;")
    print(f"serve's RSS {base / mib:.0f} MB before, {peak / mib:.0f} MB at its peak")


if __name__ == "__main__":
    main()
