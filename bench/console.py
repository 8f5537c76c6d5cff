"""The console with a 50,000-line run, in headless Chromium, against a 500-line run measured
the same way in the same run.

    .venv/bin/python bench/console.py [--lines 50000] [--baseline-lines 500] [--rounds 3]

Starts `mcpx-hooks serve --no-auth --port 0` in a temporary directory, runs a script that
prints `--lines` lines and one that prints `--baseline-lines`, then opens each run in the
console (the distribution's Chromium, `/usr/bin/chromium`, driven by Playwright; no browser
is downloaded), in rounds that alternate the two. Measured in the page (`performance.now`
and `requestAnimationFrame`):
* first paint: from the address naming the run to the first animation frame that has its
  first timeline row drawn;
* whole run: to the frame that has all of its output lines counted and drawn;
* scroll frame: 120 animation frames of scrolling the output box by 1/130 of its height each;
  the 95th percentile of the frame times (about 16.7 ms at 60 frames a second).
Medians over the rounds. RESULT rows (le): `console_first_paint` and `console_scroll_p95`
against the short run (goals 3x and 1.5x: a long run must paint its first frame and scroll
about as well as a short one, which the output box's virtualisation is for), and
`console_scroll_p95_abs` (abs, <= 50 ms: never below 20 frames a second). Whole-run times
are printed for context. Takes about 30 s.

Quick mode (`MCPX_BENCH_QUICK=1`, `run_all.py --quick`): `--lines 1000 --baseline-lines 100
--rounds 1`: Chromium started, each run opened once. Without Chromium it prints `SKIP`
(bench/_quick.py).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from typing import Any

from _quick import missing, parse_args
from playwright.sync_api import sync_playwright
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
    "--disable-dev-shm-usage",
    *(["--no-sandbox"] if os.geteuid() == 0 else []),
]
GOAL_FIRST_PAINT = 3.0
GOAL_SCROLL = 1.5
GOAL_SCROLL_ABS = 50.0

#: The same measurement as tests/test_console_browser.py's.
MEASURE = """async ([runId, lines]) => {
  const frame = () => new Promise((r) => requestAnimationFrame(() => r(performance.now())));
  const t0 = performance.now();
  location.hash = `#/runs/${runId}`;
  let first = null;
  for (;;) {
    const now = await frame();
    if (first === null && document.querySelector('.timeline li')) first = now - t0;
    const count = document.getElementById('output-count');
    if (count && count.textContent === `(${lines.toLocaleString()} lines)`) break;
  }
  await frame();
  const whole = performance.now() - t0;
  const out = document.querySelector('.output');
  out.scrollTop = 0;
  await frame();
  const deltas = [];
  let last = await frame();
  for (let i = 0; i < 120; i++) {
    out.scrollTop += out.scrollHeight / 130;
    const now = await frame();
    deltas.push(now - last);
    last = now;
  }
  deltas.sort((a, b) => a - b);
  return {first, whole, p95: deltas[113]};
}"""


def _run(url: str, lines: int) -> str:
    code = f"for i in range({lines}):\n    print('line', i, 'of the run')\n"
    run_id = ""
    with connect(url + "/v1/exec", max_size=None, proxy=None) as ws:
        ws.send(json.dumps({"argv": [sys.executable, "-c", code]}))
        try:
            while True:
                for line in str(ws.recv(timeout=120)).split("\n"):
                    frame = json.loads(line)
                    if frame.get("type") == "start":
                        run_id = frame["runId"]
        except ConnectionClosed:  # the close after `end`
            pass
    assert run_id, "no run started"
    return run_id


def main() -> int:
    if not os.path.exists(CHROMIUM):
        missing(f"bench/console.py: needs {CHROMIUM} (the distribution's chromium package)")
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, default=50_000)
    parser.add_argument("--baseline-lines", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    args = parse_args(parser, lines=1000, baseline_lines=100, rounds=1)
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "MCPX_HOOKS_NO_DISCOVERY": "1"}
        serve = [sys.executable, "-m", "mcpx_hooks.supervisor", "serve", "--port", "0", "--no-auth"]
        proc = subprocess.Popen(
            serve, cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        try:
            assert proc.stdout is not None
            found = re.search(r"listening on (ws://\S+?);", proc.stdout.readline())
            assert found, "serve did not start"
            url = found.group(1)
            runs = {"long": (_run(url, args.lines), args.lines)}
            runs["short"] = (_run(url, args.baseline_lines), args.baseline_lines)
            samples: dict[str, list[dict[str, Any]]] = {"long": [], "short": []}
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
                try:
                    for round_ in range(args.rounds):
                        order = ["long", "short"] if round_ % 2 == 0 else ["short", "long"]
                        for name in order:
                            page = browser.new_page(viewport={"width": 1280, "height": 800})
                            page.goto("http" + url.removeprefix("ws") + "/#/runs")
                            page.wait_for_selector("#runs li")
                            samples[name].append(page.evaluate(MEASURE, list(runs[name])))
                            page.close()
                finally:
                    browser.close()
        finally:
            proc.terminate()
            proc.wait(30)
    med = {
        name: {k: statistics.median(s[k] for s in got) for k in ("first", "whole", "p95")}
        for name, got in samples.items()
    }
    for name, (_, lines) in runs.items():
        m = med[name]
        print(
            f"{name:5} run, {lines:>7,} lines: first paint {m['first']:7.1f} ms, whole run"
            f" {m['whole']:8.1f} ms, scroll frame p95 {m['p95']:5.1f} ms"
        )
    long, short = med["long"], med["short"]
    for figure, value, base, goal in (
        ("console_first_paint", long["first"], short["first"], GOAL_FIRST_PAINT),
        ("console_scroll_p95", long["p95"], short["p95"], GOAL_SCROLL),
    ):
        print(f"RESULT {figure} {value:.1f} {base:.1f} {value / base:.2f} {goal} le ms")
    print(
        f"RESULT console_scroll_p95_abs {long['p95']:.1f} {short['p95']:.1f}"
        f" {long['p95'] / short['p95']:.2f} {GOAL_SCROLL_ABS} abs ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
