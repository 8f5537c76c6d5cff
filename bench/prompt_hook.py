"""A prompt hook's own overhead, against the loopback model's latency in the same run.

    .venv/bin/python bench/prompt_hook.py [--rounds 20] [--per-round 30]

The model: `tests/loopmodel.py`, a real OpenAI-compatible server on 127.0.0.1, in a process
of its own (as a real model server is), answering `{"advise": "…"}` with usage at once.
Each sample is one `run_hook` of a prompt hook at `onError` (`@error` and a var), the whole
path a run takes: clamp, placeholder values, the request built (system message, data
blocks, a fresh nonce), the cache looked up, the model's cap taken, the POST through httpx,
the reply read, bounded, parsed and checked against the answer schema, the hook frame. The
answer is checked every time.

Baseline, in the same rounds (each round times both, in a rotating order; round 0 warms up
and is dropped): `bare`, the same request body POSTed with `http.client` over a new
connection in this thread (no trio, no httpx), the reply read and parsed as JSON: what the
model costs on its own.

Goal (issue 16): the hook's p50 at most 2 ms above the bare request's p50. RESULT row
`prompt_hook_overhead_p50` (abs, ms: the median over the rounds of each round's difference
of the two p50s, so load that comes and goes falls on both; baseline column: the bare p50),
and `prompt_hook_p50` (le: hook p50 / bare p50, for context, goal 10x). Takes a few
seconds.

Quick mode (`MCPX_BENCH_QUICK=1`, `run_all.py --quick`): `--rounds 1 --per-round 2`.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import trio
from _quick import parse_args
from _timing import percentile, result

from mcpx_hooks.supervisor.config.loading import load_config
from mcpx_hooks.supervisor.core.frames import HookStatus
from mcpx_hooks.supervisor.core.hooks import Hook
from mcpx_hooks.supervisor.process.spawner import Spawner
from mcpx_hooks.supervisor.run.hookcontext import HookContext, RunInfo
from mcpx_hooks.supervisor.run.hookrun import run_hook

GOAL_OVERHEAD_MS = 2.0
GOAL_RATIO = 10.0
ANSWER = "check the lockfile first"
CTX = HookContext(
    RunInfo("bench", ("make", "test"), "/", "2026-01-01T00:00:00Z"),
    error={"message": "the script exited with status 2", "exitCode": 2, "stderrTail": "E" * 400},
)


class Broken(Exception):
    """A measurement could not be made (a wrong answer, a failed hook)."""


def prompt_hook(directory: str, url: str) -> Hook:
    doc = {
        "models": {"default": {"provider": "openai", "url": url, "model": "loop-1"}},
        "hooks": [
            {
                "name": "explain",
                "on": "script",
                "phase": "onError",
                "prompt": "The job failed:\n@error\nSay what @team should check first.",
                "vars": {"team": "the platform team"},
            }
        ],
    }
    Path(directory, "c.json").write_text(json.dumps(doc))
    (hook,) = load_config(["c.json"], cwd=Path(directory), environ={}, discover=False).hooks
    return hook


async def hook_sample(hook: Hook) -> float:
    spawner = cast(Spawner, object())  # an advise answer runs no process
    start = time.perf_counter()
    frame = (await run_hook(spawner, hook, CTX)).frame
    took = time.perf_counter() - start
    if frame.status is not HookStatus.OK or frame.advice != (ANSWER,):
        raise Broken(f"the hook gave {frame.status}: {frame.reason or frame.advice}")
    return took


def bare_sample(host: str, port: int, body: bytes) -> float:
    start = time.perf_counter()
    conn = http.client.HTTPConnection(host, port)
    try:
        conn.request("POST", "/v1/chat/completions", body, {"content-type": "application/json"})
        reply = json.loads(conn.getresponse().read())
    finally:
        conn.close()
    took = time.perf_counter() - start
    if reply["choices"][0]["message"]["content"] != json.dumps({"advise": ANSWER}):
        raise Broken("the bare request got another answer")
    return took


@contextlib.contextmanager
def model_process() -> Iterator[str]:
    """The loopback model in a process of its own (as a real model server is: no share of
    this interpreter's lock), answering at once; yields its URL."""
    script = Path(__file__).resolve().parent.parent / "tests" / "loopmodel.py"
    answer = json.dumps({"advise": ANSWER})
    proc = subprocess.Popen(
        [sys.executable, str(script), "--answer", answer], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("serving on "):
            raise Broken(f"the loopback model did not start: {line!r}")
        yield line.split()[2]
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def measure(rounds: int, per_round: int) -> dict[str, list[float]]:
    with model_process() as url, tempfile.TemporaryDirectory() as directory:
        os.environ["XDG_STATE_HOME"] = os.path.join(directory, "state")  # a cache of its own
        hook = prompt_hook(directory, url)
        body = json.dumps(request_body(hook, url)).encode()
        host, port = url.removeprefix("http://").removesuffix("/v1").split(":")
        samples: dict[str, list[float]] = {"hook": [], "bare": [], "diff": []}
        for r in range(rounds + 1):
            order = ["hook", "bare"] if r % 2 else ["bare", "hook"]
            for name in order:
                got = []
                for _ in range(per_round):
                    if name == "hook":
                        got.append(await hook_sample(hook))
                    else:
                        got.append(bare_sample(host, int(port), body))
                if r:
                    samples[name].extend(got)
            if r:  # this round's difference of the medians: the machine's noise falls on both
                hook50 = statistics.median(samples["hook"][-per_round:])
                bare50 = statistics.median(samples["bare"][-per_round:])
                samples["diff"].append(hook50 - bare50)
        return samples


def request_body(hook: Hook, url: str) -> dict[str, Any]:
    """The body the hook sends (the baseline POSTs the same bytes' worth)."""
    from mcpx_hooks.supervisor.core.effects import Effect
    from mcpx_hooks.supervisor.models.modelclient import request_body as body_of
    from mcpx_hooks.supervisor.run.prompthook import prompt_request

    assert hook.prompt is not None and hook.prompt.model is not None
    return body_of(hook.prompt.model, prompt_request(hook, Effect.ADVISE, CTX))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--per-round", type=int, default=30)
    args = parse_args(parser, argv, rounds=1, per_round=2)
    try:
        samples: dict[str, Any] = trio.run(measure, args.rounds, args.per_round)
    except Broken as exc:
        print(f"prompt_hook: {exc}", file=sys.stderr)
        return 1
    ms = {name: [s * 1000 for s in got] for name, got in samples.items()}
    diffs = ms.pop("diff")
    for name, got in ms.items():
        print(
            f"{name:5} n={len(got)} p50 {percentile(got, 50):.3f} ms"
            f"  p95 {percentile(got, 95):.3f} ms  mean {statistics.fmean(got):.3f} ms"
        )
    hook50, bare50 = percentile(ms["hook"], 50), percentile(ms["bare"], 50)
    overhead = statistics.median(diffs)
    print(
        f"overhead: {overhead:.3f} ms above the bare request, the median over {len(diffs)}"
        f" rounds of (the hook's p50 - the bare p50) in the round (of the p50s over all"
        f" rounds: {hook50 - bare50:.3f} ms); goal <= {GOAL_OVERHEAD_MS} ms"
    )
    figure = "prompt_hook_overhead_p50"
    ratio = overhead / bare50
    print(result(figure, overhead, bare50, ratio, GOAL_OVERHEAD_MS, direction="abs", unit="ms"))
    print(result("prompt_hook_p50", hook50, bare50, hook50 / bare50, GOAL_RATIO))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
