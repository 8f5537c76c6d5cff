"""`mcpx-hooks demo`: the main job in miniature, on a built-in example, ending by itself.

Runs of `examples/job.py` with the hooks of `examples/demo.toml` around them: one that passes
the check (a hook times out and fails open, one's answer is dropped, one transforms the result,
a prompt hook asks a model to say what the result means, an observer sees the run finish);
one that the check refuses, so the script never starts; then
the service on a free loopback port and the same run streamed to a WebSocket client. Every
frame is shown as it happens. `run_demo()` returns 0 when each run went as the example means
it to (`problems`), else 1, having said what did not (a sandbox that cannot be had here
fails every hook, and the demo with them). The prompt hook has no model unless
`MCPX_HOOKS_DEMO_MODEL_URL` names an OpenAI-compatible server (`model_layer`; a server that
wants a key gets the value of the variable `MCPX_HOOKS_DEMO_MODEL_KEY_ENV` names, as the
model's `apiKeyEnv`, a secret never printed): then it is expected to answer, else to be
skipped, and the demo ends by saying how to give it one. Each run's lines come under its own
header: its observers' lines too (the next run waits for them), and its end says how `exec`
would exit (`runview.py`).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, Final

import attrs
import trio

from ..config.loading import load_config
from ..core.events import Event, EventKind
from ..core.frames import FrameType, HookStatus
from ..core.hooks import Config
from ..run.bus import Subscription
from ..run.runtime import Runtime, open_runtime
from ..service.admission import Caller, admit
from ..service.execrequest import ExecRequest
from ..service.options import Listening, ServiceOptions
from ..service.remote import Remote, exec_remote
from ..service.server import Service
from .common import run_async
from .runview import RunView

#: The hooks of the example that fail on purpose, and how.
EXPECTED_FAILURES: dict[str, HookStatus] = {"slow-lint": HookStatus.TIMEOUT}
#: The example's prompt hook: skipped ("no model configured") unless the demo is pointed at a
#: model with `MODEL_URL_ENV` (an OpenAI-compatible server; `MODEL_ENV` names its model).
PROMPT_HOOK: Final = "summarise"
MODEL_URL_ENV: Final = "MCPX_HOOKS_DEMO_MODEL_URL"
MODEL_ENV: Final = "MCPX_HOOKS_DEMO_MODEL"
#: The name of the variable that holds the model server's API key (its `apiKeyEnv`).
MODEL_KEY_ENV: Final = "MCPX_HOOKS_DEMO_MODEL_KEY_ENV"
DEFAULT_MODEL: Final = "qwen2.5-coder:7b"
MODEL_HINT: Final = f"""\
the prompt hook {PROMPT_HOOK} was skipped: no model configured. To see it answer, point the
demo at a local OpenAI-compatible model server:
  llama.cpp:  llama-server -m MODEL.gguf --port 8080
              {MODEL_URL_ENV}=http://127.0.0.1:8080/v1 mcpx-hooks demo
  Ollama:     ollama pull {DEFAULT_MODEL}
              {MODEL_URL_ENV}=http://127.0.0.1:11434/v1 \\
              {MODEL_ENV}={DEFAULT_MODEL} mcpx-hooks demo
  A server that wants an API key (a LiteLLM proxy, a hosted API): put the key in a variable
  and name it, e.g. {MODEL_KEY_ENV}=OPENAI_API_KEY (the key is a secret: never printed)."""


def model_layer(environ: Mapping[str, str]) -> str | None:
    """The config layer that gives the example a `[models.default]` (TOML), when
    `MODEL_URL_ENV` names a server; None when it does not."""
    url = environ.get(MODEL_URL_ENV, "").strip()
    if not url:
        return None
    model = environ.get(MODEL_ENV, "").strip() or DEFAULT_MODEL
    import tomlkit

    table = {"provider": "openai", "url": url, "model": model}
    if key_env := environ.get(MODEL_KEY_ENV, "").strip():
        table["apiKeyEnv"] = key_env  # the variable's name; its value is read as a secret
    return tomlkit.dumps({"models": {"default": table}})


def problems(
    frames: Sequence[Mapping[str, Any]], *, refused: bool, model: bool = False
) -> list[str]:
    """What went otherwise than the example means: a run let through ends with exit code 0,
    and a refused one is refused by check-input's answer (check-input itself ran); a hook
    fails only as `EXPECTED_FAILURES` says, and the prompt hook is skipped unless `model`."""
    expected = {**EXPECTED_FAILURES, PROMPT_HOOK: HookStatus.OK if model else HookStatus.SKIPPED}
    found = []
    for frame in frames:
        if frame.get("type") == FrameType.HOOK:
            name, status = frame.get("name"), frame.get("status")
            if status != expected.get(str(name), HookStatus.OK):
                found.append(f"hook {name}: {status}: {frame.get('reason') or ''}".rstrip(": "))
    calls = [f for f in frames if f.get("type") == FrameType.CALL]
    if not refused and [c.get("refusedBy") for c in calls] != [None, "no-removing"]:
        found.append("the script's count call failed, or its remove call was not refused")
    end = [f for f in frames if f.get("type") == FrameType.END]
    refusal = [f for f in frames if f.get("type") == FrameType.ERROR and f.get("refusedBy")]
    if not end:
        found.append("the run did not end")
    elif refused and [f.get("refusedBy") for f in refusal] != ["check-input"]:
        found.append("the run was not refused by check-input")
    elif not refused and end[-1].get("exitCode") != 0:
        found.append(f"the run ended with exit code {end[-1].get('exitCode')}")
    return found


def example_dir() -> Path:
    return Path(str(resources.files("mcpx_hooks.supervisor").joinpath("examples")))


def example_config() -> Config:
    path = example_dir() / "demo.toml"
    layers = [path]
    with tempfile.TemporaryDirectory() as temp:  # named so a problem in it says where from
        layer = model_layer(os.environ)
        if layer is not None:
            given = Path(temp) / f"{MODEL_URL_ENV}.toml"
            given.write_text(layer)
            layers.append(given)
        config = load_config(layers, cwd=path.parent, environ=os.environ, discover=False)
    # Its tool server is declared as `python3 …`: the demo runs it with the Python in use.
    python = {
        n: attrs.evolve(s, command=(sys.executable, *s.command[1:]))
        for n, s in config.servers.items()
    }
    return attrs.evolve(config, servers=python)


async def _show_run(
    runtime: Runtime, title: str, run_input: Any, observed: Observed
) -> list[dict[str, Any]]:
    print(f"--- {title}")
    cwd = str(example_dir())
    request = ExecRequest(file="job.py", cwd=cwd, input=(run_input,))
    caller = Caller.local(runtime.config, cwd, os.environ)
    admitted = await trio.to_thread.run_sync(admit, request, caller)
    run = runtime.new_run(admitted.request)
    frames: list[dict[str, Any]] = []
    view = RunView()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(runtime.execute, run)
        async for batch in run.journal.follow(0):
            for frame in batch:
                frames.append(frame)
                print("\n".join(view.lines(frame)))
    await observed.say(runtime)  # under this run's header, before the next one's
    print()
    return frames


async def _show_remote_run(runtime: Runtime, observed: Observed) -> list[dict[str, Any]]:
    """The service on a free loopback port, and the same run streamed to a WebSocket client."""
    # Served from the examples' directory: the request's cwd lies in its one root.
    options = ServiceOptions(host="127.0.0.1", port=0, token=None, cwd=str(example_dir()))
    service = Service(runtime, options)
    async with trio.open_nursery() as nursery:
        listening: Listening = await nursery.start(service.serve)
        print(f"--- the same run over WebSocket: {listening.url}/v1/exec (serving on loopback)")
        request = {"file": "job.py", "cwd": str(example_dir()), "input": {"name": "websocket"}}
        view = RunView()
        frames = await exec_remote(
            Remote(listening.url),
            request,
            lambda frame: print("ws> " + "\nws> ".join(view.lines(frame))),
        )
        service.stop()
    await observed.say(runtime)
    print()
    return frames


class Observed:
    """The observe hooks' ends, said under the run they observed: `say` waits for the
    observers (at most `[observe] drainMs`), then prints what they did since last said."""

    def __init__(self, sub: Subscription) -> None:
        self.sub = sub
        self.failed: list[str] = []

    async def say(self, runtime: Runtime) -> None:
        await runtime.wait_observers()
        while self.sub.pending:
            item = await self.sub.__anext__()
            if isinstance(item, Event) and item.caused_by_observer:
                data = item.data
                print(
                    f"observer {data['name']} saw {data['on']} (event of run "
                    f"{item.run_id or '-'}): {data['status']}, effect {data['effect']}"
                )
                if data["status"] != HookStatus.OK:
                    self.failed.append(f"observer {data['name']}: {data['status']}")


def run(args: argparse.Namespace) -> int:
    """`demo`: `run_demo` in its own trio run."""
    return run_async(run_demo)


async def run_demo() -> int:
    config = example_config()
    model = model_layer(os.environ) is not None
    print(f"mcpx-hooks demo: {example_dir() / 'job.py'} with the hooks of demo.toml\n")
    found: list[str] = []
    async with (
        open_runtime(config) as runtime,
        runtime.bus.subscribe(kinds=(EventKind.HOOK_FINISHED,), since=0) as sub,
    ):
        observed = Observed(sub)
        through = await _show_run(
            runtime, "a run the check lets through", {"name": "world"}, observed
        )
        found += problems(through, refused=False, model=model)
        refused = await _show_run(
            runtime, "a run the check refuses: the script never starts", {}, observed
        )
        found += problems(refused, refused=True, model=model)
        found += problems(await _show_remote_run(runtime, observed), refused=False, model=model)
        found += observed.failed
    if found:
        print("\nthe demo FAILED: its runs did not go as the example means:", file=sys.stderr)
        for line in dict.fromkeys(found):
            print(f"  {line}", file=sys.stderr)
        # The prompt hook asks its model over HTTP, outside any sandbox: its failure is the
        # model server's, which the doctor knows nothing of.
        asked = [line for line in found if line.startswith(f"hook {PROMPT_HOOK}: ")]
        if asked:
            print(
                f"the prompt hook {PROMPT_HOOK} asks the model server that {MODEL_URL_ENV}"
                " names: check that it runs there and answers chat completions",
                file=sys.stderr,
            )
        if len(asked) < len(found):
            print("`mcpx-hooks doctor` says what the sandbox here lacks", file=sys.stderr)
        return 1
    print("\nevery hook and script above ran as a real process, its tree reaped; none is left")
    if not model:
        print("\n" + MODEL_HINT)
    return 0
