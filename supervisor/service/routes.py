"""What a plain HTTP request (no WebSocket upgrade) gets on the service's port. Pure: no
trio, no socket; `server.py` writes the answer.

One table says which paths answer plain HTTP, each with whether it asks for the token:
`/healthz` (`{"ok": true, "version": …}`, no token; the Origin rule still applies),
`/v1/runs` (the retained runs, newest first), `/v1/runs/{runId}/artifacts/{id}` (a kept
artifact: a `FileAnswer` the server streams), `/v1/search?q=…[&run=ID][&limit=N]` (the
stored frames that match, newest first: a `Later` the server makes in a worker thread;
these `/v1` paths refuse, with 400, a query parameter they do not take or one given twice),
`/v1/runs/{runId}/output.txt` and
`/v1/runs/{runId}/frames.ndjson` (a run's downloads, `downloads.py`: a `RunDownload` the
server makes from the run once it has found it), `/metrics` (the hooks' metrics in
Prometheus' text format, `core/telemetry.py`), and the console (`/` and its files under
`/console/`, answered by `pages.py` from the request itself). What the runs hold comes from a
`RouteState` (the service's `Journals`); a path's `{…}` segments are looked up in its tables,
never used as a file name. A WebSocket endpoint asked without an upgrade gets 400 at once;
any other path, 404 once the token and Origin are checked as for an upgrade; a method other
than GET or HEAD, 405. Every answer but the health one and an artifact has the JSON error body of a
refused upgrade.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Final, Protocol
from urllib.parse import parse_qs, unquote, urlsplit

import attrs

from ..core.errors import HooksError
from ..core.records import Record
from ..core.telemetry import PROMETHEUS_TYPE, Meters
from ..run.artifacts import ArtifactGone, Stored
from . import pages
from .access import Refusal, check_access
from .protocolevents import Request, error_body
from .targets import parse_target, query_tokens, unknown_query

if TYPE_CHECKING:
    from ..run.journal import RunJournal
    from ..run.storedrun import StoredRun


@attrs.frozen(repr=False, eq=False)
class Answer(Record):
    """An HTTP answer: status, body, extra headers."""

    status: int
    body: bytes
    headers: tuple[tuple[bytes, bytes], ...] = ()
    content_type: bytes = b"application/json"


class SourceDown(HooksError):
    """Where an `ArtifactSource` keeps its artifacts cannot be reached now (503)."""


class ArtifactSource(Protocol):
    """An artifact kept elsewhere (a cluster's object store): `find` looks it up (what its
    frame said and its size; `ArtifactGone` for 404, `SourceDown` for 503), `pieces` reads
    its bytes as they are sent."""

    async def find(self) -> Stored: ...

    def pieces(self) -> AbstractAsyncContextManager[AsyncIterator[bytes]]: ...


@attrs.frozen(repr=False, eq=False)
class FileAnswer(Record):
    """A 200 whose body is a kept artifact's file (or a source's bytes), streamed by the
    server."""

    artifact: Stored | ArtifactSource
    headers: tuple[tuple[bytes, bytes], ...] = ()


@attrs.frozen(repr=False, eq=False)
class RunDownload(Record):
    """A 200 whose body is one of a run's downloads (`downloads.KINDS`), made by the server
    from the run's journal once `RouteState.find` has it (404 when it has not)."""

    run_id: str
    kind: str


@attrs.frozen(repr=False, eq=False)
class Later(Record):
    """An answer that reads the disk: the server makes it in a worker thread (`settle`: once
    what the runs have sent is in the history, as a search must be)."""

    make: Callable[[], Answer]
    settle: bool = False


#: What a route answers.
Answered = Answer | FileAnswer | RunDownload | Later


class RouteState(Protocol):
    """What the routes read of the service: its retained runs and their artifacts; `find`
    is a run's journal (`run.journals.UnknownRun` when there is none); `search` a search of
    its run history (None: it keeps none; blocking, so called in a worker thread); `download`
    is `find` for a download, which reads a run only the history holds as it goes."""

    def summaries(self) -> list[dict[str, Any]]: ...

    def find_artifact(self, run_id: str, artifact_id: str) -> Stored | ArtifactSource: ...

    def metrics_text(self) -> str: ...

    async def find(self, run_id: str) -> RunJournal | StoredRun: ...

    async def download(self, run_id: str) -> RunJournal | StoredRun: ...

    def search(self, text: str, run_id: str | None, limit: int) -> list[dict[str, Any]] | None: ...

    async def settle(self) -> None: ...


class _NoRuns:
    def summaries(self) -> list[dict[str, Any]]:
        return []

    def find_artifact(self, run_id: str, artifact_id: str) -> Stored:
        raise ArtifactGone(f"no run {run_id!r} is retained")

    def metrics_text(self) -> str:
        return Meters().prometheus_text()

    async def find(self, run_id: str) -> RunJournal:
        from ..run.journals import UnknownRun

        raise UnknownRun(run_id)

    async def download(self, run_id: str) -> RunJournal:
        return await self.find(run_id)

    def search(self, text: str, run_id: str | None, limit: int) -> list[dict[str, Any]] | None:
        return None

    async def settle(self) -> None:
        pass


NO_RUNS: Final[RouteState] = _NoRuns()
#: An artifact is the script's bytes on the service's own origin: never sniffed as another
#: type, never run as a page of this origin (an HTML artifact cannot use the token), never
#: framed, never cached.
ARTIFACT_HEADERS: Final = (
    (b"X-Content-Type-Options", b"nosniff"),
    (b"Content-Security-Policy", b"sandbox; frame-ancestors 'none'"),
    (b"Cache-Control", b"no-store"),
)


def _health(state: RouteState, params: Mapping[str, str]) -> Answered:
    # The package root's version, as `--version` reads it (imported already: it is our root).
    version = str(importlib.import_module("mcpx_hooks").__version__)
    return Answer(200, json.dumps({"ok": True, "version": version}).encode())


def _runs(state: RouteState, params: Mapping[str, str]) -> Answered:
    return Answer(200, json.dumps(state.summaries()).encode())


def _artifact(state: RouteState, params: Mapping[str, str]) -> Answered:
    try:
        stored = state.find_artifact(params["runId"], params["id"])
    except ArtifactGone as exc:
        return _error(404, str(exc))
    return FileAnswer(stored, ARTIFACT_HEADERS)


def _metrics(state: RouteState, params: Mapping[str, str]) -> Answered:
    return Answer(200, state.metrics_text().encode(), content_type=PROMETHEUS_TYPE.encode())


def _output(state: RouteState, params: Mapping[str, str]) -> Answered:
    return RunDownload(params["runId"], "output.txt")


def _frames(state: RouteState, params: Mapping[str, str]) -> Answered:
    return RunDownload(params["runId"], "frames.ndjson")


def _search(state: RouteState, params: Mapping[str, str]) -> Answered:
    # `limit` past the most is the most; the history's own bounds (`history/search.py`).
    from ..history.search import MATCHES, MAX_MATCHES

    limit = params.get("limit", str(MATCHES))
    if not (limit.isascii() and limit.isdecimal() and int(limit[:12]) > 0):
        return _error(400, f"limit must be a whole number from 1 (at most {MAX_MATCHES} are given)")
    # No `q` is the empty query: nothing asked, nothing found (what a query may hold, never
    # an error). A limit of many digits is past the most whatever its digits after 12.
    text, run_id, most = params.get("q", ""), params.get("run"), min(int(limit[:12]), MAX_MATCHES)

    def make() -> Answer:
        try:
            found = state.search(text, run_id, most)
        except HooksError as exc:
            return _error(503, str(exc))
        if found is None:
            return _error(404, "this server keeps no run history to search")
        return Answer(200, json.dumps(found).encode())

    return Later(make, settle=True)


def _no_state(state: RouteState, params: Mapping[str, str]) -> Answered:
    raise AssertionError("a console page is answered by its `page`")


@attrs.frozen(repr=False, eq=False)
class Route(Record):
    """A plain HTTP path: its answer, and whether it asks for the token. A console path is
    answered by `page` instead, from the request and the server's token (`pages.py`)."""

    answer: Callable[[RouteState, Mapping[str, str]], Answered]
    token: bool
    page: Callable[[Request, Mapping[str, str], str | None], pages.Page] | None = None
    #: The query parameters it takes besides `token`: another one, or one of them given
    #: twice, is 400. None: not looked at (the health check, the metrics and the console's
    #: pages, which probes, scrapers and browsers ask with their own).
    query: frozenset[str] | None = None


#: The paths that answer plain HTTP; a `{name}` segment matches any one segment.
ROUTES: Final[dict[str, Route]] = {
    "/healthz": Route(_health, token=False),
    "/v1/runs": Route(_runs, token=True, query=frozenset()),
    "/v1/runs/{runId}/artifacts/{id}": Route(_artifact, token=True, query=frozenset()),
    "/v1/runs/{runId}/output.txt": Route(_output, token=True, query=frozenset()),
    "/v1/runs/{runId}/frames.ndjson": Route(_frames, token=True, query=frozenset()),
    "/v1/search": Route(_search, token=True, query=frozenset({"q", "run", "limit"})),
    "/metrics": Route(_metrics, token=True),
    "/": Route(_no_state, token=False, page=pages.page),
    "/console/{file}": Route(_no_state, token=False, page=pages.asset),
}


def match(path: str) -> tuple[Route, dict[str, str]] | None:
    """The route for `path` and its `{…}` segments (percent-decoded, each one segment:
    an encoded `/` stays inside it), or None."""
    segments = path.split("/")
    for pattern, route in ROUTES.items():
        parts = pattern.split("/")
        if len(parts) != len(segments):
            continue
        params: dict[str, str] = {}
        for part, segment in zip(parts, segments, strict=True):
            if part.startswith("{") and segment:
                params[part[1:-1]] = unquote(segment)
            elif part != segment:
                break
        else:
            return route, params
    return None


#: The methods a plain request may use.
METHODS: Final = ("GET", "HEAD")


def answer(
    request: Request,
    *,
    token: str | None,
    origins: frozenset[str],
    stopping: bool,
    state: RouteState = NO_RUNS,
    names: frozenset[str] | None = None,
) -> Answered:
    """The answer to a plain request; the checks in the module docstring's order."""
    path = urlsplit(request.target).path
    if request.method not in METHODS:
        allow = ((b"Allow", ", ".join(METHODS).encode()),)
        return _error(405, f"method {request.method} is not allowed here (GET or HEAD)", allow)
    if parse_target(request.target) is not None:
        return _error(400, f"{path} is a WebSocket endpoint: it answers an upgrade only")
    if stopping:
        return _error(503, "the server is shutting down")
    found = match(path)
    route = found[0] if found is not None else None
    refusal = check_access(
        request.headers,
        query_tokens(request.target),
        token=token if route is None or route.token else None,
        origins=origins,
        names=names,
    )
    if refusal is not None:
        return refused(refusal)
    if found is None:
        # (the path is not said back: the client has it, and an answer echoing what a request
        # holds is one more way for a page to put its own text on this origin)
        return _error(404, "no such endpoint")
    if found[0].page is not None:
        shown = found[0].page(request, found[1], token)
        return Answer(shown.status, shown.body, shown.headers, shown.content_type)
    # The query's parameters (`token` aside) below the path's segments.
    query = parse_qs(urlsplit(request.target).query, keep_blank_values=True)
    query.pop("token", None)
    takes = found[0].query
    said = None if takes is None else _query_refusal(path, query, takes)
    if said is not None:
        return _error(400, said)
    params = {k: v[0] for k, v in query.items()} | found[1]
    return found[0].answer(state, params)


def _query_refusal(path: str, query: Mapping[str, list[str]], takes: frozenset[str]) -> str | None:
    """Why a route that takes `takes` refuses `query` (`token` aside), as the WebSocket
    endpoints do: a parameter it does not take, or one given twice; None if neither."""
    said = unknown_query(path, query, takes)
    twice = [(name, len(values)) for name, values in query.items() if len(values) > 1]
    if said is None and twice:
        said = f"query parameter {twice[0][0]!r} given {twice[0][1]} times"
    return said


def refused(refusal: Refusal) -> Answer:
    """A refusal as an HTTP answer (the same for a refused upgrade)."""
    return _error(refusal.status, refusal.message, refusal.headers)


def _error(status: int, message: str, headers: tuple[tuple[bytes, bytes], ...] = ()) -> Answer:
    return Answer(status, error_body(status, message), headers)
