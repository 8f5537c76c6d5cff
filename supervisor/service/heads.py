"""A request head as it comes in, beside h11 (`protocol.py`): the bound on its size, and what a
client is told of a request h11 could not parse; and the headers every answer has.

h11 bounds a head only while it is incomplete (`max_incomplete_event_size`): a complete one
that came in a single read is parsed whatever its size. `HeadBound` measures the head on the
bytes as they come, so a head over `MAX_HEAD_BYTES` is refused however it arrives.

h11's own messages name the bytes it refused by their Python repr (`illegal request line:
bytearray(b'\\x16\\x03...')`); `in_words` says what was wrong instead, and names the likely
cause of the commonest one: a TLS client (its ClientHello begins with byte 0x16) on this
plain HTTP port.

`asks_websocket` tells an upgrade from a plain request; `handshake_refusal` holds an upgrade
to what RFC 6455 asks of its key and version where wsproto does not: it takes the last of
repeated headers, any key at all, and calls a version other than 13 missing.

`origin_form` reads a request target sent in absolute-form (`GET http://host/path`, as to a
proxy): HTTP (RFC 9112, 3.2.2) has its authority stand for the host, whatever the `Host`
header says, so the request is read as one to that authority's `Host`, at the target's path.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable
from typing import Final
from urllib.parse import urlsplit

import wsproto.utilities

#: The longest request head (its request line, headers and the empty line that ends it) taken;
#: a longer one is answered 431.
MAX_HEAD_BYTES: Final = 16 * 1024
#: The most header lines a request head may have (Apache's LimitRequestFields is 100): h11
#: parses each at some 2 µs, and a 16 KiB head of 4,000 empty ones cost the event loop 10 ms.
MAX_HEAD_LINES: Final = 128
#: The most query parameters a request target may have (no route takes more than a few):
#: the query is parsed for the token, then for the route, at some 1 µs a parameter, and a
#: 16 KiB target holds 8,000.
MAX_QUERY_FIELDS: Final = 64
#: The end of a head: an empty line (h11 takes a bare LF as a line's end too).
_HEAD_END: Final = re.compile(rb"\n\r?\n")
#: The first byte of a TLS record that opens a handshake (a ClientHello).
_TLS_HANDSHAKE: Final = 0x16
#: h11's messages that name bytes, and what they mean.
_SAID: Final = (
    ("illegal request line", "the request line is not HTTP/1.1 (METHOD TARGET HTTP/1.1)"),
    ("no request line received", "the request begins with an empty line"),
    ("illegal header line", "a header line is not NAME: VALUE"),
    ("illegal chunk header", "a chunk of the body does not begin with its size"),
)
#: Headers of every HTTP answer but one with a request pipelined behind it (`requestcycle.py`).
CLOSE: Final = ((b"Connection", b"close"),)
#: Headers every HTTP answer has unless it gives its own of the name: no answer of this port
#: may be framed by another page (a framed console could be clicked through), none is read as
#: another type than it says (`nosniff`: an error's JSON is never taken for a page), and none
#: is kept by a cache (run data, artifacts, errors); the console's files say `no-cache`
#: themselves (revalidated by their tag) and its page gives a fuller policy, which forbids
#: framing too (`tests/test_headers.py` holds every route to it).
DEFAULT_HEADERS: Final = (
    (b"X-Frame-Options", b"DENY"),
    (b"X-Content-Type-Options", b"nosniff"),
    (b"Content-Security-Policy", b"frame-ancestors 'none'"),
    (b"Cache-Control", b"no-store"),
)


#: The WebSocket version this server speaks (RFC 6455), the only one it takes.
WEBSOCKET_VERSION: Final = b"13"
#: A refusal before the upgrade: status, what was wrong, headers to answer with.
Refused = tuple[int, str, tuple[tuple[bytes, bytes], ...]]
#: The schemes of an absolute-form request target taken (`origin_form`).
_TARGET_SCHEMES: Final = frozenset({"http", "https", "ws", "wss"})
#: What a target whose path begins `//` is told: no path here does, and a URL parser (the
#: routes') would read what follows as a host, not as the path.
_DOUBLE_SLASH: Final = "the request target's path begins with //: no path here does"
#: What no `Host` (host and port, RFC 3986 3.2.2) holds: a user name's `@`, a path, a query,
#: a fragment, white space. A URL parser (the `Host` check's) reads the host after an `@`,
#: where a proxy in front or a log may read what comes before it.
_NOT_HOST: Final = re.compile(rb"[@/\\?#\s]")
_BAD_HOST: Final = "the Host header is not a host and port (it has a user name, a path or spaces)"
#: A repr of bytes at the end of a message (the fallback for a message not in `_SAID`).
_REPR: Final = re.compile(r":? *(?:bytearray\()?b['\"].*$", re.DOTALL)


class HeadBound:
    """The size of one request's head, measured on its bytes as they come."""

    def __init__(self) -> None:
        #: The head's first bytes, up to one past `MAX_HEAD_BYTES`, until its end is seen.
        self._head: bytearray | None = bytearray()
        #: Whether the first byte was a TLS handshake's.
        self.tls = False
        #: The line ends counted in the head so far, and up to where.
        self._lines = self._counted = 0

    @property
    def begun(self) -> bool:
        """Whether any of the head has come (a socket opened ahead and left unused has none)."""
        return self._head is None or bool(self._head)

    def refusal(self, data: bytes) -> str | None:
        """Why the head, with `data`, is refused (431), or None: over `MAX_HEAD_BYTES` (its
        end past it, or not within it), or over `MAX_HEAD_LINES` header lines. Checked
        before h11 parses a complete head."""
        head = self._head
        if head is None:
            return None  # its end was seen within the bounds
        if not head and data:
            self.tls = data[0] == _TLS_HANDSHAKE
        start = max(0, len(head) - 2)
        head += data[: MAX_HEAD_BYTES + 1 - len(head)]
        end = _HEAD_END.search(head, start)
        stop = len(head) if end is None else end.start() + 1
        self._lines += head.count(b"\n", self._counted, stop)
        self._counted = stop
        if self._lines > MAX_HEAD_LINES + 1:  # (and the request line)
            return f"the request head has over {MAX_HEAD_LINES} header lines"
        if end is not None and end.end() <= MAX_HEAD_BYTES:
            self._head = None
            return None
        if len(head) > MAX_HEAD_BYTES:
            return f"the request head is over {MAX_HEAD_BYTES} bytes"
        return None


def in_words(said: str, *, tls: bool = False) -> str:
    """What h11 `said` of a request it refused, without the repr of the bytes; `tls`: the
    request began as a TLS handshake does."""
    if tls:
        return "the request is not HTTP (is this a TLS client on a plain port? it speaks HTTP)"
    for start, words in _SAID:
        if said.startswith(start):
            return words
    return _REPR.sub("", said)


def handshake_refusal(
    headers: Iterable[tuple[bytes, bytes]], http_version: bytes = b"1.1"
) -> Refused | None:
    """Why an upgrade is refused, if it is: asked over HTTP/1.0 (400), a
    `Sec-WebSocket-Version` other than 13 (426, saying which was sent, with
    `Sec-WebSocket-Version: 13`), a `Sec-WebSocket-Key` that is not the base64 of 16 bytes,
    or more than one of either (400). Either one missing is left to wsproto, which says so."""
    if http_version == b"1.0":  # (h11 reads no other below 1.1)
        return 400, "an upgrade is asked over HTTP/1.1 (this one: 1.0)", ()
    versions = [v for n, v in headers if n.lower() == b"sec-websocket-version"]
    keys = [v for n, v in headers if n.lower() == b"sec-websocket-key"]
    for name, values in (("Version", versions), ("Key", keys)):
        if len(values) > 1:
            return 400, f"{len(values)} Sec-WebSocket-{name} headers (one is sent)", ()
    if versions and versions[0] != WEBSOCKET_VERSION:
        said = f"Sec-WebSocket-Version {_shown(versions[0])} is not spoken here (only 13)"
        return 426, said, ((b"Sec-WebSocket-Version", WEBSOCKET_VERSION),)
    if keys and not _a_key(keys[0]):
        return 400, f"Sec-WebSocket-Key {_shown(keys[0])} is not the base64 of 16 bytes", ()
    return None


def _a_key(key: bytes) -> bool:
    try:
        return len(key) == 24 and len(base64.b64decode(key, validate=True)) == 16
    except binascii.Error:
        return False


def _shown(value: bytes) -> str:
    """A header's value as a client is told it: quoted, cut at 40 characters."""
    text = value.decode("latin-1")
    return f'"{text[:40]}…"' if len(text) > 40 else f'"{text}"'


def asks_websocket(headers: Iterable[tuple[bytes, bytes]]) -> bool:
    """Whether an `Upgrade` header names websocket (the rest of the handshake is wsproto's
    to check)."""
    for name, value in headers:
        if name.lower() == b"upgrade":
            tokens = wsproto.utilities.split_comma_header(value)
            if any(token.lower() == "websocket" for token in tokens):
                return True
    return False


def origin_form(
    raw: bytes, received: Iterable[tuple[bytes, bytes]]
) -> tuple[str, tuple[tuple[bytes, bytes], ...]] | str:
    """The request's target as a path, and its headers, with any `Host` header replaced by
    the authority of an absolute-form target (`http://host:port/path?query`); else what is
    wrong with the target (400): not ASCII, neither a path nor an http(s) or ws(s) URL with
    a host, a URL with a user name in it, a path that begins `//`, over `MAX_QUERY_FIELDS`
    query parameters, or a `Host` header that is not a host and port. Every check after (the
    `Host` of a server without a token, the console's cookie, the routes) then reads the
    host the request names."""
    try:
        target = raw.decode("ascii")
    except UnicodeDecodeError:
        return "the request target is not ASCII"
    if target.partition("?")[2].count("&") >= MAX_QUERY_FIELDS:
        return f"the request target has over {MAX_QUERY_FIELDS} query parameters"
    headers = tuple((bytes(name), bytes(value)) for name, value in received)
    if any(name == b"host" and _NOT_HOST.search(value) for name, value in headers):
        return _BAD_HOST
    if target.startswith("//"):
        return _DOUBLE_SLASH
    if target.startswith("/"):
        return target, headers
    try:
        parts = urlsplit(target)
        port = parts.port or 1  # (read for its check: a port that is no number raises)
        named = parts.scheme.lower() in _TARGET_SCHEMES and bool(parts.hostname) and port > 0
    except ValueError:  # a port that is no number, an unclosed [
        named = False
    if not named:
        return "the request target is neither a path (/...) nor an http:// URL with a host"
    if "@" in parts.netloc:
        return "the request target's URL has a user name in it"
    if parts.path.startswith("//"):
        return _DOUBLE_SLASH
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    kept = tuple((name, value) for name, value in headers if name.lower() != b"host")
    return path, ((b"host", parts.netloc.encode("ascii")), *kept)
