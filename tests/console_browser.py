"""The console's browser tests' parts: the distribution's Chromium under Playwright's
synchronous API (no browser is ever downloaded), a real `mcpx-hooks serve` in a project
directory, the page, and a real WebSocket client that starts runs. The tests are in
`test_console_browser.py`; `bench/console.py` takes the same measurement (`MEASURE`).

Where the browser is missing (no `playwright` package, no `/usr/bin/chromium`) the tests skip
saying so, except under `CI=true`, where they fail: CI installs both.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from service_client import Server, start_server
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

try:
    from playwright.sync_api import Browser, Page, expect, sync_playwright
except ImportError:  # pragma: no cover - the dev dependencies bring it; the tests then skip
    Browser = Page = Any  # type: ignore[misc,assignment]
    expect = sync_playwright = None  # type: ignore[assignment]

#: What the tests take from here (`expect` is Playwright's, re-exported).
__all__ = ["Browser", "Page", "expect"]

CHROMIUM = Path("/usr/bin/chromium")
#: The network is closed here: nothing of Chromium's own may try to reach it.
ARGS = [
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
    "--disable-dev-shm-usage",
    "--disable-default-apps",
    "--disable-extensions",
    *(["--no-sandbox"] if os.geteuid() == 0 else []),
]
ROOT = Path(__file__).resolve().parent.parent
SHOTS = Path(os.environ.get("MCPX_CONSOLE_SHOTS") or ROOT / "build" / "console")
METRICS = ROOT / "build" / "console" / "metrics.json"
WAIT_MS = 20_000
PY = sys.executable
BIG_LINES = 50_000
#: A `before` hook that asks "Deploy now?" (default no, a minute to answer).
GATE = {
    "name": "gate",
    "on": "script",
    "phase": "before",
    "effect": "ask",
    "run": [
        "sh",
        "-c",
        'echo \'{"ask": {"question": "Deploy now?", "default": "no", "deadlineMs": 60000}}\'',
    ],
}


def require_browser() -> None:
    missing = []
    if sync_playwright is None:
        missing.append("the playwright package (pip install -e '.[dev]')")
    if not CHROMIUM.exists():
        missing.append(f"{CHROMIUM} (the distribution's chromium package)")
    if missing:
        reason = "the console's browser tests need " + " and ".join(missing)
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    require_browser()
    with sync_playwright() as playwright:  # type: ignore[misc]
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        # Playwright's driver and the browser's processes: none may outlive the module.
        started = psutil.Process().children(recursive=True)
        try:
            yield launched
        finally:
            launched.close()
    _, alive = psutil.wait_procs(started, timeout=10)
    assert alive == [], alive


SERVER_HOOKS = """
[[hooks]]
name = "tidy"
on = "script"
phase = "suffix"
effect = "apply"
run = ["sh", "-c", "echo '{\\"advise\\": \\"all tidy\\", \\"apply\\": {\\"value\\": 1}}'"]
"""
UNTRUSTED = """
[[hooks]]
name = "from-the-repo"
on = "script"
phase = "before"
run = ["sh", "-c", "echo hello"]
"""


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A server in a project directory whose own (untrusted) config it skips; a home of its
    own so that no user file applies."""
    base = tmp_path_factory.mktemp("console")
    home = base / "home"
    project = base / "project"
    for d in (home, project):
        d.mkdir()
    base.chmod(0o755)
    project.chmod(0o755)
    (project / "serve.toml").write_text(SERVER_HOOKS)
    (project / ".mcpx-hooks.toml").write_text(UNTRUSTED)
    env = {
        "MCPX_HOOKS_NO_DISCOVERY": "0",
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_STATE_HOME": str(home / "state"),
        "XDG_DATA_HOME": str(home / "data"),
        "MCPX_HOOKS_TRUST": "",
    }
    state: dict[str, Any] = {"cwd": project, "env": env}
    state["server"] = start_server(project, "--config", "serve.toml", env=env)
    yield state
    server: Server = state["server"]
    if server.proc.poll() is None:
        server.stop()


@pytest.fixture(scope="module")
def page(browser: Browser, served: dict[str, Any]) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    opened = context.new_page()
    state: dict[str, list[str]] = {"errors": [], "foreign": []}
    origin = f"http://127.0.0.1:{served['server'].port}"
    opened.on("pageerror", lambda exc: state["errors"].append(str(exc)))
    opened.on(
        "console",
        lambda m: state["errors"].append(m.text) if m.type == "error" else None,
    )
    own = (origin, origin.replace("http:", "ws:"))
    opened.on(
        "request",
        lambda r: None if r.url.startswith(own) else state["foreign"].append(r.url),
    )
    served["page_state"] = state
    yield opened
    context.close()
    assert state["foreign"] == [], "the console asked another host"


def origin(served: dict[str, Any]) -> str:
    return f"http://127.0.0.1:{served['server'].port}"


def sign_in(page: Page, served: dict[str, Any]) -> None:
    """Opens the console with the server's token (the cookie kept), and waits for it to be live."""
    page.goto(f"{origin(served)}/?token={served['server'].token}")
    expect(page.locator("#link")).to_have_text("live", timeout=WAIT_MS)


def tab_to(page: Page, target: Any, most: int = 40) -> int:
    """Presses Tab until `target` has the focus (at most `most` times); how many times."""
    for pressed in range(most):
        if target.evaluate("e => e === document.activeElement"):
            return pressed
        page.keyboard.press("Tab")
    expect(target).to_be_focused()
    return most


def held_from(tab: Page, marker: str) -> dict[str, Any]:
    """Holds back what the server sends `tab` on a run's socket from its first message that
    holds `marker` on, until `release()` (the rest passes through, both ways): frames that
    come late, as on a slow link (Playwright's `route_web_socket`, in the browser's own
    network layer, in front of the real server)."""
    state: dict[str, Any] = {"held": [], "hold": True}

    def route(ws: Any) -> None:
        server = ws.connect_to_server()

        def from_server(message: str | bytes) -> None:
            if state["hold"] and (state["held"] or marker in str(message)):
                state["held"].append(message)
            else:
                ws.send(message)

        server.on_message(from_server)
        ws.on_message(server.send)
        state["ws"] = ws

    def release() -> None:
        state["hold"] = False
        for message in state["held"]:
            state["ws"].send(message)

    state["release"] = release
    tab.route_web_socket(re.compile(r"/v1/runs/"), route)
    return state


def shot(page: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"))


def exec_run(served: dict[str, Any], request: dict[str, Any], *, wait: bool) -> str:
    """Starts a run through `/v1/exec` (a real client); its id. `wait`: reads it to its end."""
    server: Server = served["server"]
    ws_url = server.url + "/v1/exec"
    with connect(ws_url, additional_headers=server.headers(), max_size=None, proxy=None) as ws:
        ws.send(json.dumps(request))
        run_id = None
        with contextlib.suppress(ConnectionClosed):
            while True:
                message = ws.recv(timeout=60)
                for line in str(message).split("\n"):
                    obj = json.loads(line)
                    if obj.get("type") == "start":
                        run_id = obj["runId"]
                if run_id is not None and not wait:
                    break
        assert run_id is not None
        return run_id


def replay(served: dict[str, Any], run_id: str) -> list[dict[str, Any]]:
    server: Server = served["server"]
    frames: list[dict[str, Any]] = []
    url = f"{server.url}/v1/runs/{run_id}?from=0"
    ws = connect(url, additional_headers=server.headers(), max_size=None, proxy=None)
    with ws, contextlib.suppress(ConnectionClosed):
        while True:
            frames.extend(json.loads(x) for x in str(ws.recv(timeout=60)).split("\n"))
    return frames


#: Measured in the page: from the address naming the run to its first frame drawn, and to
#: all of its output drawn; then 120 frames of scrolling the output, a big step per frame.
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
  const rows = out.querySelectorAll('.line').length;
  return {firstPaintMs: first, wholeRunMs: whole,
          scrollFrameMedianMs: deltas[60], scrollFrameP95Ms: deltas[113],
          scrollFrameMaxMs: deltas[119], rowsInPage: rows};
}"""


class CuttableProxy:
    """A TCP relay on loopback in front of a server, whose connections the test can cut all
    at once (`cut`): a lost network for the page, with the server still up. Threads, one per
    direction of each connection; `close` ends them all."""

    def __init__(self, upstream: int = 0) -> None:
        #: The server's port (set once it listens, before the first connection).
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.lock = threading.Lock()
        self.open: list[socket.socket] = []
        self.threads: list[threading.Thread] = []
        self.closed = False
        self._start(self._accept)

    def _start(self, target: Any, *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self.threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.upstream))
            with self.lock:
                self.open += [client, server]
            self._start(self._relay, client, server)
            self._start(self._relay, server, client)

    @staticmethod
    def _relay(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        for end in (source, sink):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        """Ends every connection through the proxy (new ones are still let through)."""
        with self.lock:
            cut, self.open = self.open, []
        for sock in cut:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def close(self) -> None:
        self.closed = True
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
        self.listener.close()
        self.cut()
        for thread in self.threads:
            thread.join(10)
        assert not any(t.is_alive() for t in self.threads)
