"""A real service for property tests: `Service.serve` in a thread of its own with its own
`trio.run`, so it outlives every Hypothesis example (and every test) of a module, and a
synchronous WebSocket client (`websockets`, not the server's own library) to talk to it.

Why a thread: pytest-trio runs each Hypothesis example of an async test in a fresh
`trio.run`, so a service started inside the test could not outlive one example, and a
module-scoped Trio fixture is not something pytest-trio offers. In a thread, one service (and
one spawner) serves every example; an example costs a few sockets and tiny processes.

What is read from the service while it runs (its journals, for the memory budget) is read in
its own Trio thread (`LiveService.call`), never concurrently with the loop that changes it.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import attrs
import orjson
import trio
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from mcpx_hooks.supervisor.config.loading import load_config
from mcpx_hooks.supervisor.run import journal as journal_module
from mcpx_hooks.supervisor.run.runtime import Runtime, open_runtime
from mcpx_hooks.supervisor.service.server import Service, ServiceOptions

_T = TypeVar("_T")

READY_S = 60.0
#: One message from the server must come within this (else the stream is hung: a finding).
RECV_S = 60.0
#: Frame types a run may lose to its budget (its output); what the budget is checked on.
OUTPUT_TYPES = frozenset({"stdout", "stderr", "log", "emit"})
#: Where a child's own words sit in a frame: a script's or a hook's own traceback may be
#: there legitimately (it is the child's output, shown as such), so they are not scanned.
CHILD_TEXT_KEYS = frozenset({"text", "stderrTail", "stdoutTail", "stdoutHead"})


class StrictUnavailable(Exception):
    """The spawner cannot enforce every isolation mechanism here."""


class LiveService:
    """`Service.serve` over `open_runtime`, in a thread; `start()`, `call()`, `stop()`."""

    def __init__(self, cwd: Path, config_text: str) -> None:
        self.cwd = cwd
        self.config_text = config_text
        self.url = ""
        self.generation = 0
        #: The test process's RSS once the service first listened (set by the fixture).
        self.rss_start = 0
        self.runtime: Runtime | None = None
        self.service: Service | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._cancel: trio.CancelScope | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._failure: BaseException | None = None

    def start(self) -> None:
        """Starts the service; returns once it listens (or raises what stopped it)."""
        self.generation += 1
        self._ready = threading.Event()
        self._failure = None
        self._thread = threading.Thread(
            target=self._thread_main, name=f"live-service-{self.generation}", daemon=True
        )
        self._thread.start()
        if not self._ready.wait(READY_S):
            raise AssertionError(f"the service did not listen within {READY_S} s")
        if self._failure is not None:
            raise self._failure

    def _thread_main(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as exc:  # handed to the test thread, which raises it
            self._failure = exc
        finally:
            self._ready.set()

    async def _main(self) -> None:
        (self.cwd / "serve.toml").write_text(self.config_text)
        config = load_config(["serve.toml"], cwd=self.cwd, environ={}, discover=False)
        async with open_runtime(config) as runtime:
            # As an ordinary user every mechanism but the per-child uid (only root has one).
            missing = {
                k: v
                for k, v in runtime.spawner.mechanisms.items()
                if v is not True and (os.geteuid() == 0 or k != "uid")
            }
            if missing:
                raise StrictUnavailable(missing)
            self.runtime = runtime
            self.service = Service(runtime, ServiceOptions(port=0, cwd=str(self.cwd), environ={}))
            async with trio.open_nursery() as nursery:
                self._cancel = nursery.cancel_scope
                listening = await nursery.start(self.service.serve)
                self.url = listening.url
                self._token = trio.lowlevel.current_trio_token()
                self._ready.set()

    def call(self, fn: Callable[..., _T], *args: Any) -> _T:
        """`fn(*args)` in the service's Trio thread, while its loop waits."""
        assert self._token is not None
        return trio.from_thread.run_sync(fn, *args, trio_token=self._token)

    def stop(self, timeout: float = 60) -> None:
        """Shuts the service down (its runs get their grace); cancels it if that hangs.
        Raises what the service's thread ended with, if anything."""
        thread = self._thread
        if thread is None:
            return
        service = self.service
        if service is not None:
            with contextlib.suppress(trio.RunFinishedError):
                self.call(service.stop)
        thread.join(timeout)
        if thread.is_alive() and self._cancel is not None:
            with contextlib.suppress(trio.RunFinishedError):
                self.call(self._cancel.cancel)
            thread.join(30)
        self._thread = None
        assert not thread.is_alive(), "the service's thread did not end"
        if self._failure is not None:
            raise self._failure

    def restart(self) -> None:
        """A fresh service in place of one that stopped serving (so that each example of a
        property starts on a service that serves, and shrinking stays meaningful)."""
        with contextlib.suppress(BaseException):
            self.stop(timeout=15)
        self.start()


# ---- the memory budget ----------------------------------------------------------------------


def retained_journals(runtime: Runtime) -> list[Any]:
    """Every run journal the service retains (call in the service's thread)."""
    journals: Any = runtime.journals
    try:
        return list(journals)
    except TypeError:  # a `Journals` without `__iter__`
        return list(journals._runs.values())


def run_budget(journal: Any, asked: int) -> int:
    """The journal's per-run budget in bytes; `asked` where it has none (yet)."""
    budget = getattr(journal, "run_bytes", None)
    return asked if budget is None else int(budget)


def output_cost(journal: Any) -> int:
    """What a run's output frames (`OUTPUT_TYPES`) held in its journal cost, counted as they
    really cost: each frame's encoded line plus the journal's per-frame overhead, measured
    here from the lines themselves, not from the journal's own count."""
    overhead = int(getattr(journal_module, "FRAME_OVERHEAD", 56))
    lines: Sequence[bytes] | None = getattr(journal, "lines", None)
    if lines is None:  # a journal that keeps wire dicts: what they cost once encoded
        lines = [_encode(f) for f in journal.frames]
    cost = 0
    for line in lines:
        if _frame_type(line) in OUTPUT_TYPES:
            cost += len(line) + overhead
    return cost


def _frame_type(line: bytes) -> Any:
    try:
        frame = orjson.loads(line)
    except orjson.JSONDecodeError:  # integers past what a double holds: still JSON
        frame = json.loads(line)
    return frame.get("type")


def _encode(frame: dict[str, Any]) -> bytes:
    try:
        return orjson.dumps(frame)
    except orjson.JSONEncodeError:
        return json.dumps(frame, ensure_ascii=False).encode("utf-8", "surrogatepass")


# ---- the client -----------------------------------------------------------------------------


@attrs.define
class Seen:
    """What one client saw on one socket: every object (one per line), the close code
    (1006: the socket ended without a close frame) and reason; `status` for an upgrade the
    server refused (HTTP), with its body."""

    path: str
    objects: list[dict[str, Any]] = attrs.field(factory=list)
    code: int | None = None
    reason: str = ""
    status: int | None = None
    body: bytes = b""

    @property
    def frames(self) -> list[dict[str, Any]]:
        return [o for o in self.objects if "seq" in o]

    @property
    def errors(self) -> list[dict[str, Any]]:
        """The server's error messages (no `seq`: not a run's `error` frame)."""
        return [o for o in self.objects if o.get("type") == "error" and "seq" not in o]

    @property
    def run_id(self) -> str | None:
        frames = self.frames
        return frames[0].get("runId") if frames else None

    def __str__(self) -> str:
        """For assertion messages: short, whatever the stream held."""
        path = self.path if len(self.path) <= 100 else self.path[:100] + "…"
        shown = [json.dumps(o)[:300] for o in self.objects[:3]]
        if len(self.objects) > 3:
            shown += [f"… {len(self.objects) - 4} more …", json.dumps(self.objects[-1])[:300]]
        how = f"HTTP {self.status}" if self.status is not None else f"close {self.code}"
        return f"{path}: {how} {self.reason[:80]!r}; {len(self.objects)} objects: {shown}"


def _no_constants(name: str) -> Any:
    raise AssertionError(f"the server sent {name}, which is not JSON")


def _decode(line: str) -> Any:
    return json.loads(line, parse_constant=_no_constants)


def _sendable(message: str | bytes) -> str | bytes:
    """A text message with no UTF-8 form (a lone surrogate) cannot be sent as text by any
    client (the client library fails on it, not the server): it goes as the bytes it would
    be, in a binary message, which the server must refuse cleanly."""
    if isinstance(message, str):
        try:
            message.encode()
        except UnicodeEncodeError:
            return message.encode("utf-8", "surrogatepass")
    return message


def exchange(
    url: str,
    path: str,
    messages: Iterable[str | bytes] = (),
    *,
    after_start: Iterable[str | bytes] = (),
    recv_s: float = RECV_S,
) -> Seen:
    """Opens `path`, sends `messages`, and reads everything to the close. `after_start` is
    sent once a `start` frame has come. Every `ask` frame is answered "no" at once (so a
    hook's question never holds a run for its deadline). A message from the server that is
    not text, or a line that is not a JSON object, fails the test."""
    seen = Seen(path)
    later = list(after_start)
    try:
        ws = connect(
            url + path,
            proxy=None,
            max_size=None,
            open_timeout=10,
            close_timeout=10,
            compression=None,
        )
    except InvalidStatus as exc:
        seen.status = exc.response.status_code
        seen.body = bytes(exc.response.body or b"")
        return seen
    with ws:
        for message in messages:
            with contextlib.suppress(ConnectionClosed):
                ws.send(_sendable(message))
        try:
            while True:
                message = ws.recv(timeout=recv_s)
                assert isinstance(message, str), f"{path}: the server sent a binary message"
                for line in message.split("\n"):
                    obj = _decode(line)
                    assert isinstance(obj, dict), (path, line[:200])
                    seen.objects.append(obj)
                    if obj.get("type") == "ask" and "seq" in obj:
                        answer = {"type": "answer", "askId": obj.get("askId"), "answer": "no"}
                        with contextlib.suppress(ConnectionClosed):
                            ws.send(json.dumps(answer))
                    if obj.get("type") == "start" and later:
                        for extra in later:
                            with contextlib.suppress(ConnectionClosed):
                                ws.send(_sendable(extra))
                        later = []
        except ConnectionClosed as exc:
            seen.code = exc.rcvd.code if exc.rcvd else 1006
            seen.reason = exc.rcvd.reason if exc.rcvd else ""
        except TimeoutError:
            raise AssertionError(
                f"{path}: no message within {recv_s} s; seen so far: {_tail(seen)}"
            ) from None
    return seen


def _tail(seen: Seen) -> str:
    return json.dumps(seen.objects[-3:])[:1000]


def run(url: str, request: dict[str, Any] | str, **kw: Any) -> Seen:
    """One `/v1/exec` request (an object, or its text as is)."""
    text = request if isinstance(request, str) else json.dumps(request)
    return exchange(url, "/v1/exec", [text], **kw)


class Follower:
    """A run started on its own socket and read later: `start()` reads up to a line of its
    stdout, `finish()` reads the rest (the client library buffers meanwhile)."""

    def __init__(self, url: str, request: dict[str, Any]) -> None:
        self.seen = Seen("/v1/exec")
        self._stack = contextlib.ExitStack()
        self._ws = self._stack.enter_context(
            connect(url + "/v1/exec", proxy=None, max_size=None, open_timeout=10)
        )
        self._ws.send(json.dumps(request))

    def read_until(self, want: Callable[[dict[str, Any]], bool]) -> None:
        """Reads whole messages until one held an object for which `want(obj)` holds."""
        found = False
        while not found:
            message = self._ws.recv(timeout=RECV_S)
            assert isinstance(message, str)
            for line in message.split("\n"):
                obj = _decode(line)
                self.seen.objects.append(obj)
                found = found or want(obj)

    def finish(self) -> Seen:
        try:
            while True:
                message = self._ws.recv(timeout=RECV_S)
                assert isinstance(message, str)
                self.seen.objects.extend(_decode(line) for line in message.split("\n"))
        except ConnectionClosed as exc:
            self.seen.code = exc.rcvd.code if exc.rcvd else 1006
            self.seen.reason = exc.rcvd.reason if exc.rcvd else ""
        except TimeoutError:
            raise AssertionError(f"no message within {RECV_S} s: {_tail(self.seen)}") from None
        finally:
            self.close()
        return self.seen

    def close(self) -> None:
        self._stack.close()


# ---- no traceback reaches a person ------------------------------------------------------------


def texts(value: Any, skip: frozenset[str] = CHILD_TEXT_KEYS) -> Iterator[str]:
    """Every string in a JSON value (keys included), but those under `skip` keys."""
    todo = [value]
    while todo:
        item = todo.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            for k, v in item.items():
                yield str(k)
                if k not in skip:
                    todo.append(v)
        elif isinstance(item, list):
            todo.extend(item)


def tracebacks(*values: Any) -> list[str]:
    """The strings among `values` (walked as JSON) that show a Python traceback."""
    marks = ("Traceback (most recent call last)", "Exception Group Traceback")
    found = []
    for value in values:
        for text in texts(value):
            if any(m in text for m in marks):
                found.append(text[:2000])
    return found
