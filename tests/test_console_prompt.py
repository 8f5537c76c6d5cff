"""A prompt hook's frame in the console, in a real browser (the distribution's Chromium under
Playwright, as `test_console_browser.py`) against a real `mcpx-hooks serve` whose config
names the loopback model (`loopmodel.py`, a real HTTP server): the model and what it cost
read as words, as `exec` prints them, never as `[object Object]`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from console_browser import WAIT_MS, Page, browser, exec_run, expect, origin, page, sign_in
from loopmodel import LoopModel, Reply
from service_client import Server, start_server

#: The fixtures come from `console_browser`; named here so that pytest finds them.
__all__ = ["browser", "page", "served"]

#: The model's answer: a command, which is kept (the next run reuses it, the model not asked).
ANSWER = '{"run": {"argv": ["sh", "-c", "echo check the lockfile first"]}}'
CONFIG = """
[models.default]
provider = "openai"
url = "{url}"
model = "loop-1"

[[hooks]]
name = "explain"
on = "script"
phase = "onError"
effect = "run"
prompt = "The job failed: @error. What should be checked first?"
"""


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A server whose config has a model (the loopback one) and a prompt hook; a home of its
    own, so that no user file applies and the prompt cache is this module's."""
    base: Path = tmp_path_factory.mktemp("console-prompt")
    home, project = base / "home", base / "project"
    for d in (home, project):
        d.mkdir()
    env = {
        "MCPX_HOOKS_NO_DISCOVERY": "1",
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_STATE_HOME": str(home / "state"),
        "XDG_DATA_HOME": str(home / "data"),
        "MCPX_HOOKS_TRUST": "",
    }
    with LoopModel(default=Reply(ANSWER, usage=(412, 31))) as model:
        (project / "serve.toml").write_text(CONFIG.replace("{url}", model.url))
        server: Server = start_server(project, "--config", "serve.toml", env=env)
        try:
            yield {"cwd": project, "env": env, "server": server, "model": model}
        finally:
            if server.proc.poll() is None:
                server.stop()


def test_a_prompt_hook_shows_its_model_and_tokens_as_words(
    page: Page, served: dict[str, Any]
) -> None:
    """The hook's detail said `model [object Object] · tokens [object Object] · cached false`;
    it says the model's name, provider and id, the tokens in and out and the model's time,
    and for the next run, the answer kept from the first, that the model was not asked."""
    sign_in(page, served)
    said = []
    for _ in range(2):
        run_id = exec_run(served, {"argv": ["false"]}, wait=True)
        page.goto(f"{origin(served)}/#/runs/{run_id}")
        hook = page.locator(".frame .hook").filter(has_text="explain")
        expect(hook).to_contain_text("check the lockfile first", timeout=WAIT_MS)
        said.append(hook.inner_text())
    first, again = said
    assert "[object Object]" not in first + again
    assert "model default (openai loop-1): 412 tokens in, 31 out · answered in " in first
    assert "the cached answer, the model not asked" not in first
    assert "model default (openai loop-1): the cached answer, the model not asked" in again
    assert "tokens" not in again and "cached" not in again.replace("cached answer", "")
    assert len(served["model"].requests) == 1
