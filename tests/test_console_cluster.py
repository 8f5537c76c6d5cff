"""The console against the cluster, in a real browser: the distribution's Chromium under
Playwright against two real `serve --cluster` gateways (each with its token), two workers and
nats-server with JetStream on loopback. A run started through one gateway shows its frames
in order and its status in the list of that gateway's console, and live in the other's.

Skips saying why when chromium, Playwright or nats-server is missing; fails instead under
`CI=true`. Nothing sleeps: Playwright's `expect` waits for what the page shows.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import pytest
from clusterparts import Cluster, Nats, need_nats, start_worker
from console_browser import (
    GATE,
    PY,
    WAIT_MS,
    Browser,
    Page,
    browser,
    exec_run,
    expect,
    replay,
    require_browser,
)
from service_client import Server, start_server

#: The fixture comes from `console_browser`; named here so that pytest finds it.
__all__ = ["browser"]

#: Prints a line, waits for the test (a FIFO), prints another.
WAITING = """import sys
print('before', flush=True)
with open(sys.argv[1]) as fifo:
    fifo.read()
print('after', flush=True)
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    require_browser()
    need_nats()
    cwd = tmp_path_factory.mktemp("console-cluster")
    parts = Cluster(cwd, Nats(cwd / "jetstream"))
    parts.nats.start()
    try:
        for _ in range(2):
            parts.gateways.append(start_server(cwd, *parts.nats.flags("gateway")))
        for _ in range(2):
            parts.workers.append(start_worker(cwd, parts.nats))
        yield parts
    finally:
        parts.stop()
    for gateway in parts.gateways:
        assert "Traceback" not in gateway.log()


def console(browser: Browser, server: Server) -> tuple[Page, list[str]]:
    """A page of the gateway's console, let in with its token; the errors it logs."""
    page = browser.new_context(viewport={"width": 1280, "height": 800}).new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(f"http://127.0.0.1:{server.port}/?token={server.token}")
    expect(page.locator("#link")).to_have_text("live", timeout=WAIT_MS)
    return page, errors


class Fifo:
    """The FIFO a `WAITING` script reads: `release` lets it go on."""

    def __init__(self, path: Path) -> None:
        os.mkfifo(path)
        self.path = path
        self._writer: list[BinaryIO] = []
        self._opening = threading.Thread(
            target=lambda: self._writer.append(path.open("wb")), daemon=True
        )
        self._opening.start()

    def opened(self) -> None:
        self._opening.join(30)
        assert self._writer, "the script did not open its FIFO"

    def release(self) -> None:
        self.opened()
        self._writer.pop().close()

    def close(self) -> None:
        """Ends the opening thread even if no script opened the FIFO, and closes it."""
        reader = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)  # lets a waiting open through
        try:
            self._opening.join(10)
            while self._writer:
                self._writer.pop().close()
        finally:
            os.close(reader)
        assert not self._opening.is_alive()


def check_shown(page: Page, gateway: Server, run_id: str) -> None:
    """The run's structural frames drawn in their order, as the gateway serves them."""
    frames = replay({"server": gateway}, run_id)
    structural = [f for f in frames if f["type"] not in ("stdout", "stderr", "log", "emit")]
    shown = page.locator(".timeline > li[data-seq]").evaluate_all(
        "rows => rows.map(r => [Number(r.dataset.seq), r.dataset.type])"
    )
    assert shown == [[f["seq"], f["type"]] for f in structural]
    assert structural[0]["type"] == "start" and structural[-1]["type"] == "end"


def live_run(page: Page, started: Server, fifo: Fifo) -> str:
    """Starts a `WAITING` run through `started`; sees it listed live as running in `page`,
    its first line drawn, then its end and both lines in order, its status in the list."""
    request = {"argv": [PY, "-c", WAITING, str(fifo.path)]}
    run_id = exec_run({"server": started}, request, wait=False)
    fifo.opened()
    item = page.locator(f'li[data-run="{run_id}"] a')
    expect(item.locator(".badge")).to_have_text("running", timeout=WAIT_MS)  # from the events
    item.click()
    expect(page.get_by_role("heading", name=f"Run {run_id}")).to_be_visible(timeout=WAIT_MS)
    expect(page.locator(".output .line")).to_have_text([re.compile("before")], timeout=WAIT_MS)
    fifo.release()
    expect(page.locator(".frame.end")).to_be_visible(timeout=WAIT_MS)
    expect(page.locator(".output .line")).to_have_text([re.compile("before"), re.compile("after")])
    expect(item.locator(".badge")).to_have_text("result", timeout=WAIT_MS)
    return run_id


def test_a_run_on_a_worker_shows_live_in_its_gateway_s_console(
    browser: Browser, cluster: Cluster, tmp_path: Path
) -> None:
    a = cluster.gateways[0]
    page, errors = console(browser, a)
    with contextlib.closing(Fifo(cluster.cwd / f"go-{tmp_path.name}")) as fifo:
        run_id = live_run(page, a, fifo)
    check_shown(page, a, run_id)
    # A fresh page lists the run from `GET /v1/runs`, with its status.
    page.reload()
    listed = page.locator(f'li[data-run="{run_id}"] a')
    expect(listed.locator(".badge")).to_have_text("result", timeout=WAIT_MS)
    # The gateway's own hooks (none here), from `/v1/hooks`.
    page.get_by_role("link", name="Hooks").click()
    expect(page.get_by_text("No hook is in force.")).to_be_visible(timeout=WAIT_MS)
    page.context.close()
    assert [e for e in errors if "status of 401" not in e] == []


def test_a_run_through_one_gateway_shows_live_in_the_other_s_console(
    browser: Browser, cluster: Cluster, tmp_path: Path
) -> None:
    a, b = cluster.gateways
    page, errors = console(browser, b)
    with contextlib.closing(Fifo(cluster.cwd / f"go-{tmp_path.name}")) as fifo:
        run_id = live_run(page, a, fifo)
    check_shown(page, b, run_id)
    # The events of every part, from the one events stream.
    page.get_by_role("link", name="Events").click()
    expect(page.locator(".event.run", has_text=run_id).first).to_be_visible(timeout=WAIT_MS)
    page.context.close()
    assert [e for e in errors if "status of 401" not in e] == []


#: A run whose `before` hook asks; the answer decides whether the script runs.
ASK_RUN = {
    "argv": ["sh", "-c", "echo deployed"],
    "hooks": [GATE],
}


def test_a_question_of_a_run_through_one_gateway_is_answered_from_the_other_s_page(
    browser: Browser, cluster: Cluster
) -> None:
    a, b = cluster.gateways
    page, errors = console(browser, b)
    run_id = exec_run({"server": a}, ASK_RUN, wait=False)
    page.locator(f'li[data-run="{run_id}"] a').click()
    expect(page.locator(".frame.ask")).to_contain_text("Deploy now?", timeout=WAIT_MS)
    page.get_by_role("button", name="Yes").click()
    expect(page.locator(".frame.end")).to_be_visible(timeout=WAIT_MS)
    expect(page.locator(".frame.hook .asked")).to_contain_text("yes (by client)")
    expect(page.locator(".output .line")).to_have_text([re.compile("deployed")])
    check_shown(page, b, run_id)
    page.context.close()
    assert [e for e in errors if "status of 401" not in e] == []
