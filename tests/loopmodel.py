"""A loopback model: a small, real OpenAI-compatible HTTP server on 127.0.0.1, for the prompt
hook tests, the bench and the docs' examples.

It speaks `POST /v1/chat/completions` (HTTP/1.1, JSON in, JSON out with `choices` and
`usage`), records every request body it is sent, and answers from a script: each `Reply`
says the status, the content (or the raw body), the usage and a delay. It runs in threads of
its own (`http.server`), so a test's Trio loop talks to it over a real socket.

    with LoopModel() as model:
        model.replies.append(Reply('{"advise": "look at the lockfile"}'))
        ... [models.default] url = model.url ...
        model.requests[0]["messages"]

By hand: `python tests/loopmodel.py [--answer JSON]` serves until Ctrl-C and prints its URL,
for `[models.default] url`.
"""

from __future__ import annotations

import collections
import contextlib
import http.server
import json
import ssl
import threading
from typing import Any

import attrs


@attrs.define
class Reply:
    """One scripted answer. `content`: the answer text (`choices[0].message.content`);
    `raw`: a whole body instead (sent as is); `status`: the HTTP status; `delay`: seconds to
    wait before answering (cut short when the server closes); `usage`: (prompt, completion)
    tokens, or None to leave `usage` out; `cut`: send only that many bytes of the body, its
    whole length announced, then close the connection (a server that stops mid-reply)."""

    content: str = "{}"
    status: int = 200
    delay: float = 0.0
    usage: tuple[int, int] | None = (10, 5)
    raw: bytes | None = None
    headers: dict[str, str] = attrs.field(factory=dict)
    cut: int | None = None


class _Server(http.server.ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away mid-request (a timeout, a reply read no further than its
        cap) is the client's business; anything else is a bug of this server's."""
        import sys

        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


@attrs.define(repr=False)
class LoopModel:
    """The server; a context manager that starts and stops it."""

    replies: collections.deque[Reply] = attrs.field(factory=collections.deque)
    #: The reply when the script is empty.
    default: Reply = attrs.field(factory=Reply)
    #: Every request body, parsed, in order; `headers`, each request's headers.
    requests: list[Any] = attrs.field(factory=list)
    headers: list[dict[str, str]] = attrs.field(factory=list)
    in_flight: int = 0
    most_in_flight: int = 0
    _lock: threading.Lock = attrs.field(factory=threading.Lock)
    _closing: threading.Event = attrs.field(factory=threading.Event)
    #: Speak HTTPS with this server context (a certificate for 127.0.0.1), else plain HTTP.
    tls: ssl.SSLContext | None = None
    _server: _Server | None = None
    _thread: threading.Thread | None = None

    def __repr__(self) -> str:
        return f"LoopModel({len(self.requests)} requests)"

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"{'https' if self.tls else 'http'}://{host}:{port}/v1"

    def __enter__(self) -> LoopModel:
        model = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = self.rfile.read(length)
                model._answer(self, body)

        self._server = _Server(("127.0.0.1", 0), Handler)
        if self.tls is not None:  # (a handshake that fails ends that connection alone)
            self._server.socket = self.tls.wrap_socket(self._server.socket, server_side=True)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closing.set()
        assert self._server is not None and self._thread is not None
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def _answer(self, handler: http.server.BaseHTTPRequestHandler, body: bytes) -> None:
        with self._lock:
            try:
                self.requests.append(json.loads(body))
            except ValueError:
                self.requests.append(body)
            self.headers.append({k.lower(): v for k, v in handler.headers.items()})
            reply = self.replies.popleft() if self.replies else self.default
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if reply.delay:
                self._closing.wait(reply.delay)
        finally:
            # Out of flight before the answer is written: once it has read it, the client may
            # send its next request at once, and this thread may not have run on by then.
            with self._lock:
                self.in_flight -= 1
        try:
            if handler.path != "/v1/chat/completions":
                reply = Reply(status=404, raw=b'{"error": {"message": "no such path"}}')
            data = reply.raw if reply.raw is not None else self._body(reply)
            handler.send_response(reply.status)
            handler.send_header("content-type", "application/json")
            handler.send_header("content-length", str(len(data)))
            for name, value in reply.headers.items():
                handler.send_header(name, value)
            handler.end_headers()
            if reply.cut is not None:
                data = data[: reply.cut]
                handler.close_connection = True
            handler.wfile.write(data)
        except OSError:
            pass  # the client went away (a timeout, a cancellation)

    def _body(self, reply: Reply) -> bytes:
        if reply.status >= 400:
            return json.dumps({"error": {"message": reply.content, "type": "scripted"}}).encode()
        out: dict[str, Any] = {
            "id": f"chatcmpl-{len(self.requests)}",
            "object": "chat.completion",
            "model": "loopback",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": reply.content},
                    "finish_reason": "stop",
                }
            ],
        }
        if reply.usage is not None:
            out["usage"] = {
                "prompt_tokens": reply.usage[0],
                "completion_tokens": reply.usage[1],
                "total_tokens": sum(reply.usage),
            }
        return json.dumps(out).encode()


def main(argv: list[str]) -> int:
    """`python tests/loopmodel.py [--answer JSON]`: serves until Ctrl-C or SIGTERM, answering
    every request with the same content, and prints its URL (for trying prompt hooks by hand).

    Both signals are handled here whatever this process inherited: a shell's background job
    starts with SIGINT ignored, and a model that cannot be stopped outlives its bench."""
    import argparse
    import signal

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)

    parser = argparse.ArgumentParser(description="a loopback OpenAI-compatible model")
    parser.add_argument("--answer", default='{"advise": "check the lockfile first"}')
    args = parser.parse_args(argv)
    with LoopModel(default=Reply(args.answer)) as model:
        print(f"serving on {model.url} (Ctrl-C ends it)", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
