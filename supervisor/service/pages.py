"""The console's pages: the files of the browser console, shipped in the package, and the
door that turns `/?token=…` into the console's cookie. Pure: no trio, no socket; the files
are read once, from the package (`importlib.resources`), on first use.

`GET /` is the console's page, to anyone whose request passes the Origin rule: it holds no
data, and what it then asks for (`/v1/runs`, the WebSocket endpoints) asks for the token. With
`?token=` it is the way in: the right token gets a `303` to `/` that sets the cookie (see
`access.console_cookie`), so the token leaves the address bar and the history at once; a
wrong one gets the page with `401`, which then says how to get in. `GET /console/NAME` is one
of the shipped files, looked up by name in the table of files shipped: a path is never used
as a file name, so `..`, `%2F` and the like find nothing (404). One of them is made here, not
shipped: `tables.js`, the server's tables the console's scripts take their words from (the
frame types, the messages beside them), so that the page never spells them itself.

Every answer says what it is (`Content-Type`, `nosniff`) and where it may be cached. The
page carries a `Content-Security-Policy` that lets it load and connect to its own origin only
(scripts and styles from files, no inline script, no other host), and never be framed.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.resources
import json
import re
from collections.abc import Mapping, Sequence
from typing import Final

import attrs

from ..core.effects import AnsweredBy
from ..core.events import EventKind
from ..core.frames import (
    ENVELOPE_KEYS,
    HOOK_NOTES,
    OUTPUT_TYPES,
    Control,
    FrameType,
    HookStatus,
    ServiceMessage,
)
from ..core.kinds import HOOK_KINDS, PROCESS_ANSWER
from ..core.points import Phase
from ..core.records import Record
from ..core.servers import CALL_CANCELLED, CALL_SESSION_ENDED
from .access import console_cookie, header, token_matches
from .protocolevents import Request, error_body
from .targets import query_token
from .wire import Close

#: The folder of the package that holds the console's files.
FOLDER: Final = "console"
#: The page `GET /` answers.
PAGE: Final = "index.html"
#: The module made from the server's tables (`tables_module`), served beside the files.
TABLES: Final = "tables.js"
#: What each shipped file's suffix is served as; a file of another suffix is not served.
TYPES: Final[Mapping[str, bytes]] = {
    ".html": b"text/html; charset=utf-8",
    ".css": b"text/css; charset=utf-8",
    ".js": b"text/javascript; charset=utf-8",
    ".svg": b"image/svg+xml",
}
#: A `Host` header as the policy may repeat it: a host name or address, and a port.
_HOST: Final = re.compile(r"[A-Za-z0-9.\-]+(:[0-9]{1,5})?|\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?")
#: Headers every console answer has.
_ALWAYS: Final = (
    (b"X-Content-Type-Options", b"nosniff"),
    (b"Referrer-Policy", b"no-referrer"),
)


@attrs.frozen(repr=False, eq=False)
class Shipped(Record):
    """One of the console's files: its bytes, its type, and its tag for revalidation."""

    body: bytes
    content_type: bytes
    etag: bytes


@attrs.frozen(repr=False, eq=False)
class Page(Record):
    """A console answer: what `routes.Answer` takes, with its content type."""

    status: int
    body: bytes
    content_type: bytes
    headers: tuple[tuple[bytes, bytes], ...] = ()


def _shipped(body: bytes, suffix: str) -> Shipped:
    tag = hashlib.sha256(body).hexdigest()[:20]
    return Shipped(body, TYPES[suffix], f'"{tag}"'.encode())


@functools.cache
def shipped() -> Mapping[str, Shipped]:
    """The console's files by name (the folder holds no subfolders), read once, and the
    module of the server's tables (`TABLES`), made once."""
    root = importlib.resources.files(__package__ or "").joinpath(FOLDER)
    files: dict[str, Shipped] = {}
    for entry in root.iterdir():
        suffix = "." + entry.name.rpartition(".")[2]
        if not entry.is_file() or suffix not in TYPES or entry.name.startswith("."):
            continue
        files[entry.name] = _shipped(entry.read_bytes(), suffix)
    files[TABLES] = _shipped(tables_module(), ".js")
    return files


def tables_module() -> bytes:
    """`/console/tables.js`: the tables the console's scripts need, as this server has them
    (`core/frames.py`), each an exported frozen object: the frame types by member name, the
    output types in the order of the frame types, the envelope's fields, the messages a page
    sends a run (`Control`), the service's own messages (`ServiceMessage`), a hook's statuses
    and phases (`HookStatus`, `Phase`), the event bus's kinds (`EventKind`), who settles an
    ask (`AnsweredBy`), the codes a socket is closed with (`Close`), and the `error` of a call
    its client cancelled or its session's end cut short (`CALL_CANCELLED`,
    `CALL_SESSION_ENDED`), and what each kind of hook answers with, by its action
    (`ANSWER_WORDS`, `Kind.answer`; `PROCESS_ANSWER` for a kind it does not know), and the
    fields of a hook frame that hold a note (`HOOK_NOTES`)."""
    tables: dict[str, object] = {
        "FrameType": {t.name: t.value for t in FrameType},
        "OUTPUT_TYPES": [t.value for t in FrameType if t in OUTPUT_TYPES],
        "ENVELOPE_KEYS": list(ENVELOPE_KEYS),
        "Control": {c.name: c.value for c in Control},
        "ServiceMessage": {m.name: m.value for m in ServiceMessage},
        "HookStatus": {s.name: s.value for s in HookStatus},
        "Phase": {p.name: p.value for p in Phase},
        "EventKind": {k.name: k.value for k in EventKind},
        "AnsweredBy": {a.name: a.value for a in AnsweredBy},
        "Close": {c.name: c.value for c in Close},
        "CALL_CANCELLED": CALL_CANCELLED,
        "CALL_SESSION_ENDED": CALL_SESSION_ENDED,
        "ANSWER_WORDS": {w: k.answer for w, k in HOOK_KINDS.items()},
        "PROCESS_ANSWER": PROCESS_ANSWER,
        "HOOK_NOTES": list(HOOK_NOTES),
    }
    lines = ["// Made by the server from its tables (service/pages.py, tables_module)."]
    lines += [f"export const {k} = Object.freeze({json.dumps(v)});" for k, v in tables.items()]
    return ("\n".join(lines) + "\n").encode()


def policy(headers: Sequence[tuple[bytes, bytes]]) -> bytes:
    """The page's `Content-Security-Policy`: its own origin only. `connect-src` names the
    page's own `ws://` origin too (from `Host`, when it is a plain host and port): `'self'`
    covers it in current browsers, not in every one."""
    host = header(headers, b"host") or ""
    socket = f" ws://{host}" if _HOST.fullmatch(host) else ""
    return (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self';"
        f" connect-src 'self'{socket}; base-uri 'none'; form-action 'none';"
        " frame-ancestors 'none'; object-src 'none'"
    ).encode()


def page(request: Request, params: Mapping[str, str], token: str | None) -> Page:
    """`GET /`: the page; with `?token=`, the way in (see the module docstring)."""
    presented = query_token(request.target)
    if presented is not None and (token is None or token_matches(presented, token)):
        headers = [(b"Location", b"/"), (b"Cache-Control", b"no-store"), *_ALWAYS]
        if token is not None:
            headers.append((b"Set-Cookie", console_cookie(request.headers, token)))
        return Page(303, b"", b"text/plain; charset=utf-8", tuple(headers))
    status = 200 if presented is None else 401
    found = shipped()[PAGE]
    headers = [
        (b"Content-Security-Policy", policy(request.headers)),
        (b"Cache-Control", b"no-store"),
        (b"X-Frame-Options", b"DENY"),
        *_ALWAYS,
    ]
    return Page(status, found.body, found.content_type, tuple(headers))


def asset(request: Request, params: Mapping[str, str], token: str | None) -> Page:
    """`GET /console/NAME`: a shipped file, revalidated by its tag (`304` when unchanged)."""
    found = shipped().get(params["file"])
    if found is None:
        message = f"no such file in the console: {params['file'][:200]!r}"
        return Page(404, error_body(404, message), b"application/json", _ALWAYS)
    # (The page's own policy on each file: `/console/index.html` opened by its name is the
    # page too, and must load and connect to nothing else.)
    headers = (
        (b"Cache-Control", b"no-cache"),
        (b"ETag", found.etag),
        (b"Content-Security-Policy", policy(request.headers)),
        *_ALWAYS,
    )
    tags = [t.strip() for t in (header(request.headers, b"if-none-match") or "").split(",")]
    if found.etag.decode() in tags:
        return Page(304, b"", found.content_type, headers)
    return Page(200, found.body, found.content_type, headers)
