"""One HTTP/1.1 exchange through the egress proxy, where the proxy reads the request (an
absolute `http://` URL, or a request inside a tunnel whose TLS it terminates).

The proxy judges one request a connection: it sends upstream that request's head and its body
as the head frames it (`Content-Length`, or chunks up to the last), and nothing the child
sends after it (a pipelined request, a request on a kept-alive connection: neither was
judged). It sends the child the upstream's answer, its final head saying `Connection: close`,
and its body as that head frames it, and then ends the connection: the child's next request
comes on a new one and is judged the same way. A head that frames its body two ways (the way
requests are smuggled past a proxy) is refused. An exchange (this, or a tunnel) in which no
bytes are read either way for `IDLE_S` is cancelled (`Wire.watch`): the proxy says so.
"""

from __future__ import annotations

import contextlib
from typing import Final

import trio

from ..core import egress
from ..core.errors import HooksError

#: The most a request's or an answer's head (first line and headers) may hold.
HEAD_BYTES: Final = 64 * 1024
#: The most a chunk's size line (and each trailer line) may hold.
LINE_BYTES: Final = 4096
CHUNK: Final = 64 * 1024
#: How long an exchange with an upstream (a tunnel, a request and its answer) may go with no
#: bytes either way before the proxy ends it: a stalled upstream holds one of the child's
#: connections no longer. Five minutes, as Envoy's idle bound: a model's API answering a
#: long request without streaming, or a long poll, may be silent past a minute.
IDLE_S: Final = 300.0
#: Statuses whose answer has no body (RFC 9112, 6.3); 1xx answers are heads alone too.
_BODILESS: Final = (204, 304)


class Ended(HooksError):
    """The peer ended the stream before the message it was sending was whole."""


class TooLarge(HooksError):
    """A head or a line longer than its bound."""


class BadFraming(HooksError):
    """A head whose body's length cannot be told, or can be told two ways."""


#: What ends a connection, said or not: the child or the upstream gone, or a message cut short
#: or framed so that it cannot be read.
ENDS: Final = (
    trio.BrokenResourceError,
    trio.ClosedResourceError,
    trio.TooSlowError,
    OSError,
    Ended,
    TooLarge,
    BadFraming,
)


class Wire(trio.abc.Stream):
    """A stream with what was read past a head kept, and given first to the next read (so a
    tunnel, or a TLS handshake, loses none of the bytes the child sent early)."""

    def __init__(self, stream: trio.abc.Stream, idle: trio.CancelScope | None = None) -> None:
        self.stream = stream
        self.buf = bytearray()
        #: Put off by `IDLE_S` at each read that brings bytes (`watch`).
        self.idle = idle
        #: Whether the final head of an answer was sent on it (`answer_back`).
        self.answered = False

    def watch(self, idle: trio.CancelScope) -> None:
        """From now on each read that brings bytes puts off `idle`'s deadline by `IDLE_S`."""
        self.idle = idle
        idle.deadline = trio.current_time() + IDLE_S

    async def _read(self, max_bytes: int | None) -> bytes | bytearray:
        data = await self.stream.receive_some(max_bytes)
        if self.idle is not None and data:
            self.idle.deadline = trio.current_time() + IDLE_S
        return data

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.stream.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        if self.buf:
            data, self.buf = bytes(self.buf), bytearray()
            return data
        return await self._read(max_bytes)

    async def aclose(self) -> None:
        await self.stream.aclose()

    async def until(self, mark: bytes, limit: int) -> bytes:
        """The bytes up to and with `mark`; `TooLarge` past `limit` bytes without it."""
        start = 0
        while (at := self.buf.find(mark, start)) < 0:
            if len(self.buf) > limit:
                raise TooLarge
            # (searched from where the last search stopped: a head sent a byte at a time
            # costs its length, not its length squared)
            start = max(0, len(self.buf) - len(mark) + 1)
            chunk = await self._read(CHUNK)
            if not chunk:
                raise Ended
            self.buf += chunk
        end = at + len(mark)
        data = bytes(self.buf[:end])
        del self.buf[:end]
        return data

    async def copy(self, dst: trio.abc.Stream, count: int | None) -> None:
        """Sends `dst` the next `count` bytes (`None`: all, to the end of the stream)."""
        while count is None or count > 0:
            data = await self.receive_some(CHUNK if count is None else min(count, CHUNK))
            if not data:
                if count is None:
                    return
                raise Ended
            if count is not None and len(data) > count:
                self.buf[:0], data = data[count:], data[:count]
            await dst.send_all(data)
            if count is not None:
                count -= len(data)


def _fields(head: bytes, name: bytes) -> list[bytes]:
    """The values of the header `name` (lower case) in `head`."""
    lines = head.split(b"\r\n")[1:]
    return [
        value.strip()
        for key, colon, value in (line.partition(b":") for line in lines)
        if colon and key.strip().lower() == name
    ]


def body_length(head: bytes, *, answer: bool) -> int | None:
    """How many bytes of body follow `head` (-1: chunked; `None`: all, to the end of the
    stream, which only an answer may say). `BadFraming` for a head that frames it two ways,
    or that a request could not be read by."""
    codings = b",".join(_fields(head, b"transfer-encoding")).lower()
    lengths = {v for field in _fields(head, b"content-length") for v in field.split(b",")}
    if codings:  # (an answer's coding overrides its length; a request may say one)
        chunked = codings.replace(b" ", b"").endswith(b"chunked")
        if not answer and (lengths or not chunked):
            raise BadFraming
        return -1 if chunked else None
    if len(lengths) > 1 or not all(v.strip().isdigit() for v in lengths):
        raise BadFraming
    if lengths:
        return int(lengths.pop())
    return None if answer else 0


async def copy_body(wire: Wire, dst: trio.abc.Stream, length: int | None) -> None:
    """Sends `dst` the body `body_length` said follows, chunk by chunk when chunked."""
    if length != -1:
        await wire.copy(dst, length)
        return
    while True:
        line = await wire.until(b"\r\n", LINE_BYTES)
        size = line.split(b";")[0].strip()
        if not size or not all(c in b"0123456789abcdefABCDEF" for c in size):
            raise BadFraming
        await dst.send_all(line)
        if int(size, 16) == 0:
            while (trailer := await wire.until(b"\r\n", LINE_BYTES)) != b"\r\n":
                await dst.send_all(trailer)
            await dst.send_all(trailer)
            return
        await wire.copy(dst, int(size, 16) + 2)


def status(head: bytes) -> int | None:
    """An answer's status (`None`: no HTTP/1 status line)."""
    parts = head.split(b"\r\n", 1)[0].split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        return None
    return int(parts[1])


def closing(first: bytes, head: bytes, host: bytes | None = None) -> bytes:
    """`first` and the headers of `head` without the hop-by-hop ones, with `Connection: close`
    (and with `host`, the `Host` the proxy judged in place of the one `head` names)."""
    drop = (b"proxy-", b"connection:", b"keep-alive:") + ((b"host:",) if host else ())
    kept = [h for h in head.split(b"\r\n")[1:] if h and not h.lower().startswith(drop)]
    said = [b"Host: " + host] if host else []
    return b"\r\n".join([first, *said, *kept, b"Connection: close", b"", b""])


async def answer_back(upstream: Wire, client: Wire, method: bytes) -> None:
    """Sends `client` the upstream's answer to one request: any 1xx heads as they come, then
    the final head, saying `Connection: close`, and the body it frames."""
    while True:
        head = await upstream.until(b"\r\n\r\n", HEAD_BYTES)
        code = status(head)
        if code is None or code >= 200:
            break
        await client.send_all(head)
    client.answered = True
    if code is None:  # (not HTTP/1: passed on as it is, to the end)
        await client.send_all(head)
        await upstream.copy(client, None)
        return
    await client.send_all(closing(head.split(b"\r\n", 1)[0], head))
    if method != b"HEAD" and code not in _BODILESS:
        await copy_body(upstream, client, body_length(head, answer=True))


def target(head: bytes) -> tuple[str, str, int, bytes] | None:
    """The method, host and port a head asks for, and the head to send upstream (None: not
    a request this proxy carries)."""
    line = head.partition(b"\r\n")[0]
    parts = line.split(b" ")
    if len(parts) != 3:
        return None
    method, uri, version = (p.decode("latin-1") for p in parts)
    if method == "CONNECT":
        host, _, port = uri.rpartition(":")
        if not (port.isascii() and port.isdigit()):
            return None
        return method, _judged(host.strip("[]")), int(port), b""
    if not uri.startswith("http://"):
        return None
    authority, _, path = uri[len("http://") :].partition("/")
    host, colon, port = authority.rpartition(":")
    if not colon or not (port.isascii() and port.isdigit()):
        host, port = authority, "80"
    first = f"{method} /{path} {version}".encode("latin-1")
    host = _judged(host.strip("[]"))
    # (the host judged is the one the upstream is told: a `Host` naming another is replaced)
    said = (f"[{host}]" if ":" in host else host) + ("" if port == "80" else f":{int(port)}")
    return method, host, int(port), closing(first, head, said.encode())


def _judged(host: str) -> str:
    """The host a request names as the proxy judges it (`egress.canonical`), where it is a
    host name at all (else as written, for `egress.host_name` to refuse)."""
    return egress.canonical(host) if egress.host_name(host) else host


def origin_head(head: bytes, host: str, port: int) -> bytes | None:
    """A request head read inside a terminated tunnel to `host:port`, to send upstream (None:
    not one request to that host in origin form)."""
    line = head.partition(b"\r\n")[0]
    if len(parts := line.split(b" ")) != 3 or not parts[1].startswith(b"/"):
        return None
    return closing(line, head, egress.host_item(host, port).encode())


async def exchange(
    client: Wire, upstream: Wire, upstream_head: bytes, head: bytes, length: int | None
) -> None:
    """One exchange with the upstream: a tunnel (no `upstream_head`), or the request read
    from the child (its head `head`, sent as `upstream_head`, its body's `length`)."""
    if not upstream_head:  # a tunnel: both ways, each to its end
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_pump, client, upstream)
            nursery.start_soon(_pump, upstream, client)
        return
    await upstream.send_all(upstream_head)
    async with trio.open_nursery() as nursery:
        # One request up (its body as its head frames it, nothing after it), its answer
        # down; then the connection ends, whatever the child sent past its request.
        nursery.start_soon(_request_body, client, upstream, length, nursery.cancel_scope)
        with contextlib.suppress(*ENDS):
            await answer_back(upstream, client, head.split(b" ", 1)[0])
        nursery.cancel_scope.cancel()


async def _request_body(
    client: Wire, upstream: trio.abc.Stream, length: int | None, scope: trio.CancelScope
) -> None:
    """Sends upstream the body of the request; the exchange ends if the child ends first."""
    try:
        await copy_body(client, upstream, length)
    except ENDS:
        scope.cancel()


async def _pump(src: trio.abc.Stream, dst: trio.abc.Stream) -> None:
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        while data := await src.receive_some(CHUNK):
            await dst.send_all(data)
        if isinstance(end := dst.stream if isinstance(dst, Wire) else dst, trio.SocketStream):
            await end.send_eof()
