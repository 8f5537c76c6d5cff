"""The live service of the property suite, and what must hold after each of its examples.

What must hold after each example (a batch of inputs, for the service's ways in):
(a) the service still serves: `{"argv": ["true"]}` completes with `result` and `end`;
(b) a run started before the hostile inputs (a script printing a line every few ms) finishes
    with every line, its frames in order (`check_order`);
(c) every stream that got a `start` ends with exactly one `result`/`error`, then `end`, and a
    replay of the run gives the same frames; a refused request gets an error message
    (`{"type": "error", "code": …}`) and a close code 4400-4499, 1003 or 1009, never an
    abrupt close (1006);
(d) memory: what each retained run's output frames cost in its journal (counted as they
    really cost, `live_service.output_cost`) stays within the run's budget, and the
    process's RSS stays within `RSS_GROWTH` of where the service started;
(e) no traceback reaches a person: none in an error message, a close reason, a frame, or the
    CLI's stdout/stderr, and no ERROR record from the `mcpx_hooks` loggers (the service logs
    one when a connection handler or a run crashes: exactly what must never happen);
(f) the service's default sandbox is `strict`: no run and no hook of any request runs
    under `none`.

How: one service per module (`live = pytest.fixture(scope="module")(service_for_module)`), in
a thread with its own `trio.run` (`live_service.py`). That is the simplest robust way to keep a
service across examples: pytest-trio runs each example of an async test in a fresh
`trio.run`, which would start the service (and its spawner) again for every example, and a
module-scoped Trio fixture is not something it offers. Each property is a synchronous
`@given` test whose example is a batch of inputs, sent from this thread with a synchronous
client; before each example the service is checked and, if the last one left it not serving,
started again, so that each example (and each shrinking step) starts from a service that
serves, and a failure shrinks to the input that broke it.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator

import psutil
import pytest
from hypothesis import HealthCheck, note, settings
from live_service import (
    Follower,
    LiveService,
    Seen,
    StrictUnavailable,
    exchange,
    output_cost,
    retained_journals,
    run,
    run_budget,
    tracebacks,
)
from props import PY

from mcpx_hooks.supervisor.core.order import check_order

#: so that outputs of a few MB reach it.
RUN_BYTES = 1024 * 1024
#: How much the test process may grow past where the service started.
RSS_GROWTH = 400 * 1024 * 1024
#: The service's config: hooks and runs default to `strict`; few runs retained.
SERVE_TOML = f"""
[defaults]
sandbox = "strict"
timeoutMs = 5000

[runs]
retain = 32
runBytes = {RUN_BYTES}
"""
#: Close codes a refused request may get (besides 1000 for a complete stream).
REFUSED = frozenset(range(4400, 4500)) | {1003, 1009}
#: The service's properties share function-scoped fixtures across examples on purpose
#: (`caplog`, cleared at each example's start; `live` is module-scoped) and their examples
#: are processes and sockets (slow) with inputs up to a few MB (large): no health check for
#: either.
SERVER_SETTINGS = settings(
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
    ],
)


#: the text of each message as it is sent.
CWD = "/@service-cwd@"


def at_cwd(live: LiveService, message: str | bytes) -> str | bytes:
    return message.replace(CWD, str(live.cwd)) if isinstance(message, str) else message


def text_at_cwd(live: LiveService, text: str) -> str:
    return text.replace(CWD, str(live.cwd))


# ---- the service and the invariants ---------------------------------------------------------

#: The run in flight during each example: "ready", then 40 numbered lines, 3 ms apart.
LONG_LINES = 40
LONG_RUN = {
    "argv": [
        PY,
        "-c",
        "import time\nprint('ready', flush=True)\n"
        f"for i in range({LONG_LINES}):\n    time.sleep(0.003)\n    print(i, flush=True)\n",
    ],
    "timeoutMs": 60_000,
}


def service_for_module(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveService]:
    """A fixture: one service for the module's properties, `strict` by default (which needs every
    isolation mechanism; the properties are skipped where the spawner lacks one)."""
    cwd = tmp_path_factory.mktemp("live")
    cwd.chmod(0o755)  # a declaring directory: readable by a sandboxed hook's own user
    (cwd / "hook.py").write_text("def hook(payload):\n    return {'advise': 'module hook'}\n")
    (cwd / "job.py").write_text("def main():\n    return 'job'\n")
    service = LiveService(cwd, SERVE_TOML)
    try:
        service.start()
    except StrictUnavailable as exc:
        pytest.skip(f"the strict sandbox cannot be enforced here: {exc}")
    service.rss_start = psutil.Process().memory_info().rss
    yield service
    service.stop()
    _, alive = psutil.wait_procs(psutil.Process().children(recursive=True), timeout=10)
    assert alive == [], alive


def serves(live: LiveService) -> Seen:
    """(a) A plain run completes."""
    seen = run(live.url, {"argv": ["true"]})
    assert seen.code == 1000, str(seen)
    check_order(seen.frames)
    assert [f["type"] for f in seen.frames] == ["start", "result", "end"], seen.frames
    return seen


def ensure_serving(live: LiveService) -> None:
    """Starts a fresh service if the last example left this one not serving."""
    try:
        serves(live)
    except Exception as exc:  # whatever it was, the last example has failed on it already
        note(f"the service had stopped serving ({exc!r}); started again")
        live.restart()
        serves(live)


def check_seen(live: LiveService, seen: Seen) -> None:
    """(c), (e), (f) for one socket; a stream that started is replayed and compared."""
    found = tracebacks(seen.objects, seen.reason, seen.body.decode("utf-8", "replace"))
    assert not found, f"{seen}: a traceback reaches the client: {found}"
    if seen.status is not None:  # refused at the upgrade, with an HTTP status
        assert 400 <= seen.status < 600, str(seen)
        if seen.body:
            try:
                error = json.loads(seen.body)
            except ValueError:
                raise AssertionError(f"a refusal that is no error message: {seen}") from None
            assert error.get("type") == "error" and error.get("code") == seen.status, error
        return
    assert seen.code not in (None, 1006), f"closed without a close frame: {seen}"
    for frame in seen.frames:
        if frame.get("type") in ("start", "hook"):
            assert frame.get("sandbox") != "none", f"a request lowered the sandbox: {frame}"
    # An answer refused (its ask unknown, settled, or past) is told with its `askId`, and
    # the socket stays open; every other error message ends its socket.
    refused_answers = [e for e in seen.errors if "askId" in e]
    closing = [e for e in seen.errors if "askId" not in e]
    for error in refused_answers:
        assert error.get("code") == 4400 and error["message"].startswith("answer refused: "), error
    if seen.code == 1000:
        assert closing == [], seen.errors
        if seen.path.startswith("/v1/exec") or seen.path.startswith("/v1/runs/"):
            check_order(seen.frames)
    else:
        assert seen.code in REFUSED, f"not a close code for a refusal: {seen}"
        assert len(closing) == 1, f"expected one error message: {seen}"
        (error,) = closing
        assert error.get("code") == seen.code, error
        assert isinstance(error.get("message"), str) and error["message"], error
    if seen.run_id is not None and seen.path.startswith("/v1/exec"):
        replay = exchange(live.url, f"/v1/runs/{seen.run_id}")
        assert replay.code == 1000, f"the replay of run {seen.run_id}: {replay}"
        check_order(replay.frames)
        assert replay.frames[: len(seen.frames)] == seen.frames, "the replay differs"


def check_memory(live: LiveService) -> None:
    """(d) Every retained run's output is within its budget; the process within bounds."""

    def measure() -> list[tuple[str, int, int]]:
        assert live.runtime is not None
        return [
            (j.run_id, output_cost(j), run_budget(j, RUN_BYTES))
            for j in retained_journals(live.runtime)
        ]

    over = [(run_id, cost, budget) for run_id, cost, budget in live.call(measure) if cost > budget]
    assert not over, f"runs whose output frames cost more than their budget: {over}"
    grown = psutil.Process().memory_info().rss - live.rss_start
    assert grown < RSS_GROWTH, f"the process grew by {grown / 2**20:.0f} MiB"


#: Issue 11, case 1: a per-call hook that asks for no sandbox on a server whose default is
#: strict, and would read what only root may.
SANDBOX_ESCAPE = {
    "on": "script",
    "phase": "before",
    "sandbox": "none",
    "run": ["sh", "-c", "id -u"],
}


def server_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        f"{r.name}: {r.getMessage()}\n{r.exc_text or ''}"[:3000]
        for r in caplog.records
        if r.name.startswith("mcpx_hooks") and r.levelno >= logging.ERROR
    ]


@contextlib.contextmanager
def serving(live: LiveService, caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """One example's frame: a serving service, a long run in flight; after the body, every
    invariant."""
    ensure_serving(live)
    caplog.clear()
    long_run = Follower(live.url, LONG_RUN)
    try:
        long_run.read_until(lambda o: o.get("text") == "ready")
        yield
        seen = long_run.finish()
    finally:
        long_run.close()
    assert seen.code == 1000, f"the run in flight: {seen}"
    check_order(seen.frames)
    lines = [f["text"] for f in seen.frames if f["type"] == "stdout"]
    assert lines == ["ready", *map(str, range(LONG_LINES))], lines
    assert seen.frames[-2]["type"] == "result", seen.frames[-2:]
    serves(live)
    check_memory(live)
    logged = server_errors(caplog)
    assert not logged, "the service logged errors:\n" + "\n".join(logged)
