"""Request targets (the service's paths and query strings): which endpoint, which run, and
the `from` / `since` / `kinds` a client asked for. Pure: no trio, no sockets; a bad one is a
`WireError` saying what was wrong.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import Final
from urllib.parse import parse_qs, unquote, urlsplit

import attrs

from ..core.events import ANY_KIND, EventKind, kind_prefixes
from ..core.records import Record
from .wire import Close, WireError


class Endpoint(enum.StrEnum):
    EXEC = "/v1/exec"
    RUNS = "/v1/runs/{runId}"
    EVENTS = "/v1/events"
    HOOKS = "/v1/hooks"


#: The endpoints a client sends messages to: its request, answers to asks, `cancel`. Any
#: other one is refused at its first frame (4400), none of it kept.
TAKES_MESSAGES: Final = frozenset({Endpoint.EXEC, Endpoint.RUNS})

#: The query parameters each endpoint takes (`token` is taken by every one).
QUERY: Final[dict[Endpoint, frozenset[str]]] = {
    Endpoint.EXEC: frozenset(),
    Endpoint.RUNS: frozenset({"from"}),
    Endpoint.EVENTS: frozenset({"kinds", "since"}),
    Endpoint.HOOKS: frozenset(),
}


@attrs.frozen(repr=False, eq=False)
class Target(Record):
    """A request target taken apart: which endpoint, the run id, the query (less `token`)."""

    endpoint: Endpoint
    path: str
    run_id: str | None = None
    query: Mapping[str, tuple[str, ...]] = attrs.field(factory=dict)


def parse_target(target: str) -> Target | None:
    """The endpoint a request target names, or None (HTTP 404 before the upgrade)."""
    parts = urlsplit(target)
    path = parts.path.rstrip("/") or "/"
    query = {k: tuple(v) for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
    query.pop("token", None)
    for endpoint in (Endpoint.EXEC, Endpoint.EVENTS, Endpoint.HOOKS):
        if path == endpoint.value:
            return Target(endpoint, path, None, query)
    prefix = "/v1/runs/"
    if path.startswith(prefix) and "/" not in path[len(prefix) :]:
        run_id = unquote(path[len(prefix) :])
        if run_id:
            return Target(Endpoint.RUNS, prefix + "{runId}", run_id, query)
    return None


def query_tokens(target: str) -> list[str]:
    """Every `?token=` of any request target, in order, known endpoint or not (the access
    check refuses more than one)."""
    return parse_qs(urlsplit(target).query, keep_blank_values=True).get("token", [])


def query_token(target: str) -> str | None:
    """The `?token=` of any request target (the last one given), known endpoint or not."""
    values = query_tokens(target)
    return values[-1] if values else None


def _one(target: Target, name: str) -> str | None:
    values = target.query.get(name)
    if values is None:
        return None
    if len(values) != 1:
        raise WireError(Close.BAD_REQUEST, f"query parameter {name!r} given {len(values)} times")
    return values[0]


def check_query(target: Target) -> None:
    """Unknown query parameters are refused (4400), like unknown request fields."""
    said = unknown_query(target.endpoint.value, target.query, QUERY[target.endpoint])
    if said is not None:
        raise WireError(Close.BAD_REQUEST, said)


def unknown_query(path: str, names: Iterable[str], takes: frozenset[str]) -> str | None:
    """Why a query naming `names` is refused on `path`, which takes `takes` (and `token`):
    the names it does not take (a typo would otherwise change the answer without a word);
    None when it takes them all."""
    unknown = sorted(name for name in names if name not in takes and name != "token")
    if not unknown:
        return None
    said = ", ".join(sorted(takes | {"token"}))
    return f"unknown query parameter {', '.join(map(repr, unknown))} ({path} takes {said})"


def _seq(target: Target, name: str, default: int | None) -> int | None:
    text = _one(target, name)
    if text is None:
        return default
    if not (text.isascii() and text.isdigit()):
        raise WireError(Close.BAD_REQUEST, f"{name}: expected a non-negative integer, got {text!r}")
    # No run or bus gets that far, and int() of it could even fail; it is refused as out
    # of range where the range is known, after what it names is found (an unknown run is
    # unknown whatever `from` says).
    return min(int(text[: _SEQ_DIGITS + 1]), PAST_ANY)


#: Digits of the largest `from` or `since` read as a number (past 2**63).
_SEQ_DIGITS: Final = 19
#: A `from` or `since` of more digits reads as this: past every seq there is.
PAST_ANY: Final = 1 << 63


def shown_seq(name: str, seq: int) -> str:
    """`from=N` as a refusal says it (a number past every seq is not said in full)."""
    return f"{name} (a number past 2**63)" if seq >= PAST_ANY else f"{name}={seq}"


def parse_from(target: Target) -> int:
    """`/v1/runs/{id}?from=N`: N, 0 when absent."""
    check_query(target)
    start = _seq(target, "from", 0)
    assert start is not None
    return start


def check_from(start: int, length: int) -> None:
    """`from` must name a frame that exists, or the next one (a caught-up reader)."""
    if start > length:
        raise WireError(
            Close.OUT_OF_RANGE,
            f"{shown_seq('from', start)} is past the run's frames (it has {length};"
            f" from may be 0..{length})",
        )


def parse_events(target: Target) -> tuple[tuple[str, ...], int | None]:
    """`/v1/events?kinds=hook,run&since=N`: the kind prefixes and the seq to resume from.

    A prefix that matches no declared kind is refused (4400): it would never see anything.
    """
    check_query(target)
    kinds_text = _one(target, "kinds")
    kinds = tuple(k for k in (kinds_text or "").split(",") if k)
    declared = [k.value for k in EventKind]
    for prefix in kinds:
        if prefix not in kind_prefixes():
            raise WireError(
                Close.BAD_REQUEST,
                f"kinds: {prefix!r} matches no event kind (kinds: {', '.join(declared)};"
                f" {ANY_KIND} for every kind)",
            )
    return kinds, _seq(target, "since", None)
