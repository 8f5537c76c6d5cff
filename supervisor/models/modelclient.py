"""Sending a prompt hook's request to its model and reading the reply, for each provider.

`openai`: `POST {url}/chat/completions` through httpx (its `AsyncClient` runs on anyio, so
under Trio), with `model`, `messages`, `max_tokens`, `temperature` and `response_format`
(a `json_schema`, the answer schema restricted to the effect, `strict: false`: OpenAI's
strict mode refuses a schema with optional keys, and every key of an answer is optional; the
reply is validated here either way); the answer is
`choices[0].message.content`, the tokens `usage.prompt_tokens` and `completion_tokens`.
`command`: the model's argv through the spawner, in its sandbox (`net` unless declared),
the same request body on stdin, the answer on stdout; its tokens are estimated (4 bytes
each), as are an `openai` reply's without `usage`.

Every way a model can fail (unreachable, a TLS certificate not trusted or a handshake that
fails, a connection that ends before its reply, HTTP >= 400, a redirect, which is not
followed, a reply that is not the protocol's, a reply over the cap, a compressed reply,
refused unread) raises `ModelFailed` with a reason of our own words: never the API key,
never the request or the reply body (nor the server's own reason phrase). The caller bounds the time
(`trio.move_on_after`); cancellation closes the connection or kills the command's tree
before it propagates.
"""

from __future__ import annotations

import datetime
import email.utils
import functools
import http
import http.cookiejar
import json
import math
import os
import re
import socket
import ssl
import threading
import time
from collections.abc import Mapping
from typing import Any, Final

import attrs
import httpx

from ..core.errors import HooksError, SandboxUnavailable, SpawnError
from ..core.hookenv import base_environment
from ..core.hooks import STDERR_TAIL_BYTES, Hook, Profile
from ..core.jsontext import JsonError, loads
from ..core.models import Model, Provider
from ..core.passenv import MIN_SECRET_CHARS, secret_too_short, shown_name
from ..core.promptbuild import PromptRequest
from ..core.records import Record
from ..process import programs, sandbox
from ..process.scratch import scratch_dir
from ..process.spawner import Spawner
from ..process.spawnspec import ChildSpec

#: The reply body past the answer's own cap (`maxOutputBytes`): the protocol's wrapping.
ENVELOPE_BYTES: Final = 64 * 1024
#: Bytes per token where a provider does not count them.
BYTES_PER_TOKEN: Final = 4
#: Credentials in a URL (`https://user:key@host`): never said in a reason.
_USERINFO: Final = re.compile(r"//[^/@]*@")
#: The command provider's profile when the model names none.
COMMAND_PROFILE: Final = Profile.NET


class ModelFailed(HooksError):
    """The model could not give an answer; `reason` says why, in our words. A `command`
    model that exited or was killed otherwise than asked also gives what it wrote last on
    stderr (`stderr_tail`, unredacted: the hook frame redacts it, as a process hook's)."""

    def __init__(self, reason: str, stderr_tail: bytes = b"") -> None:
        super().__init__(reason)
        self.reason = reason
        self.stderr_tail = stderr_tail


@attrs.frozen(repr=False, eq=False)
class Reply(Record):
    """A model's answer text and what it cost."""

    content: str
    prompt_tokens: int
    completion_tokens: int
    #: The model stopped at `max_tokens` (`finish_reason` "length"): its answer may be cut.
    cut: bool = False


def shown_url(url: str) -> str:
    """`url` as it may be said: without credentials written into it."""
    return _USERINFO.sub("//[credentials]@", url, count=1)


def request_body(
    model: Model, request: PromptRequest, max_tokens: int | None = None
) -> dict[str, Any]:
    """The chat-completions body: what `openai` POSTs and `command` reads on stdin.
    `max_tokens`: fewer than the model's `maxTokens`, where the run's budget has less left."""
    return {
        "model": model.model_id,
        "messages": request.messages(),
        "max_tokens": min(model.max_tokens, max_tokens or model.max_tokens),
        "temperature": model.temperature,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "hook_answer", "schema": request.schema, "strict": False},
        },
    }


def estimate(text: str | bytes) -> int:
    """Tokens at `BYTES_PER_TOKEN` bytes each, where no count is given (or none yet)."""
    data = text.encode(errors="replace") if isinstance(text, str) else text
    return math.ceil(len(data) / BYTES_PER_TOKEN)


async def ask_model(
    spawner: Spawner,
    hook: Hook,
    model: Model,
    body: Mapping[str, Any],
    environ: Mapping[str, str],
    *,
    granted: tuple[str, ...] = (),
) -> Reply:
    """Sends `body` to `model`; the reply's answer at most `hook.max_output_bytes`.
    `granted`: the hook's directories that are the operator's grants (a `command` model's).
    Raises `ModelFailed`."""
    key = environ.get(model.api_key_env) if model.api_key_env else None
    if model.api_key_env and not key:
        named = shown_name(model.api_key_env)
        raise ModelFailed(f"{named} (apiKeyEnv of model {model.name}) is not set")
    if model.api_key_env and key is not None and len(key) < MIN_SECRET_CHARS:
        # A key too short to redact is never sent: it could not be kept out of what we write.
        raise ModelFailed(f"{secret_too_short(model.api_key_env, len(key))} (apiKeyEnv)")
    encoded = json.dumps(body).encode()
    if model.provider is Provider.COMMAND:
        return await _ask_command(spawner, hook, model, encoded, key=key, granted=granted)
    return await _ask_openai(model, encoded, key, hook.max_output_bytes)


class _NoCookies(http.cookiejar.CookieJar):
    """A jar that keeps nothing: a cookie one model's reply sets is never sent with another
    request (and reading a reply's cookies is work no request needs)."""

    def extract_cookies(self, response: Any, request: Any) -> None:
        """Nothing kept."""

    def add_cookie_header(self, request: Any) -> None:
        """Nothing sent."""


@functools.cache
def _client(thread: int) -> httpx.AsyncClient:
    """One client for every request of a thread (making one, with its TLS context, costs a
    quarter of a millisecond; a client is not for two threads' loops at once). It keeps no
    connection between requests: each opens its own and closes it when its reply is read,
    and no cookie, so nothing it holds outlives a request or passes from one Trio run to
    another. No proxy or netrc from the environment: a request goes where the config says."""
    return httpx.AsyncClient(
        verify=ssl.create_default_context(),
        timeout=None,
        trust_env=False,
        limits=httpx.Limits(max_keepalive_connections=0),
        cookies=_NoCookies(),
    )


@functools.lru_cache(maxsize=64)
def _endpoint(url: str) -> httpx.URL:
    """A model's chat-completions URL, parsed once (httpx parses a string on every request)."""
    return httpx.URL(f"{url}/chat/completions")


async def _ask_openai(model: Model, body: bytes, key: str | None, cap: int) -> Reply:
    url = _endpoint(model.url)
    # Asked uncompressed, and a compressed reply refused unread: a few kilobytes of gzip
    # hold gigabytes, which httpx would inflate in this thread, however few are kept.
    headers = {
        "content-type": "application/json",
        "accept": "application/json",
        "accept-encoding": "identity",
    }
    if key:
        headers["authorization"] = f"Bearer {key}"
    where = f"model {model.name} at {shown_url(model.url)}"
    client = _client(threading.get_ident())
    got: int | None = None  # the reply's bytes read, once its status line came
    declared = ""
    try:
        async with client.stream("POST", url, content=body, headers=headers) as resp:
            got = 0
            if resp.status_code >= 300:  # a redirect is not followed: the config says where
                raise ModelFailed(
                    f"{where} answered HTTP {_status(resp.status_code)}{_later(resp)}"
                    f"{_check(resp.status_code, model)}"
                )
            encoding = resp.headers.get("content-encoding", "identity").strip().lower()
            if encoding not in ("", "identity"):
                raise ModelFailed(f"{where}: the reply is compressed, which was not asked for")
            limit = cap + ENVELOPE_BYTES
            over = f"{where}: the reply is over {limit} bytes (maxOutputBytes and the"
            declared = resp.headers.get("content-length", "")
            if declared.isascii() and declared.isdigit() and int(declared) > limit:
                raise ModelFailed(f"{over} protocol's wrapping); not read")
            data = bytearray()
            # Read to its end, keeping at most `limit` bytes: leaving httpx's stream
            # early would leave its generators to the garbage collector.
            async for chunk in resp.aiter_raw():
                got += len(chunk)
                if len(data) <= limit:
                    data += chunk
            if len(data) > limit:
                raise ModelFailed(f"{over} protocol's wrapping); the rest not kept")
    except httpx.HTTPError as exc:
        if got is not None:  # it answered HTTP, then stopped: no scheme to blame
            raise ModelFailed(f"{where}{_cut(got, declared)}") from None
        raise ModelFailed(f"{where}{_no_reply(exc, model.url)}") from None
    return _reply(bytes(data), body, where, cap)


def _no_reply(exc: httpx.HTTPError, url: str) -> str:
    """Why a request got no reply, after the model's name: a host name not known, a
    certificate not trusted and a scheme the server does not speak are not a server down, and
    each says what to do."""
    tls: BaseException | None = exc
    while tls is not None and not isinstance(tls, ssl.SSLError | socket.gaierror):
        tls = tls.__cause__ or tls.__context__
    if isinstance(tls, socket.gaierror):  # (a name misspelt, or no DNS here)
        return f": its host name {httpx.URL(url).host} is not known ({tls.strerror})"
    if isinstance(tls, ssl.SSLCertVerificationError):
        return (
            f": its TLS certificate is not trusted ({tls.verify_message}); to trust a CA of your"
            " own, give its certificate in SSL_CERT_FILE (the supervisor's environment)"
        )
    if isinstance(tls, ssl.SSLError):
        why = f": the TLS handshake failed ({tls.reason})"
        return f"{why}; if it speaks plain HTTP, its URL is http://…"
    if isinstance(exc, httpx.ConnectError):
        return " is unreachable (the connection failed)"
    if isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError | httpx.WriteError):
        hint = "; if it speaks HTTPS, its URL is https://…" if url.startswith("http://") else ""
        return f": the connection ended before a whole reply{hint}"
    return f": the request failed ({type(exc).__name__})"


def _cut(got: int, declared: str) -> str:
    """A reply whose status line came and whose body did not all come, after the model's
    name: the server speaks HTTP at that URL, so only the server can say why it stopped."""
    whole = f" of the {declared} it announced" if declared.isascii() and declared.isdigit() else ""
    return (
        f": the reply was cut off (the connection closed after {got} bytes{whole});"
        " the server stopped mid-reply: its log may say why"
    )


def _later(resp: httpx.Response) -> str:
    """When the server asks to be tried again (`Retry-After`: a 429, a 503), said after its
    status in seconds; nothing is tried again here. The header is seconds, or an HTTP date
    (any of RFC 9110's three forms), counted from the reply's own `Date` where it has one
    (the server's clock: never off from its own), else from this machine's clock."""
    after = resp.headers.get("retry-after", "").strip()
    if after.isascii() and after.isdigit():
        return f" (it asks to be tried again after {int(after)} s)"
    when, now = _http_date(after), _http_date(resp.headers.get("date", ""))
    if when is None:
        return ""
    wait = when - (now if now is not None else time.time())
    return f" (it asks to be tried again after {max(0, math.ceil(wait))} s)"


def _http_date(text: str) -> float | None:
    """An HTTP date's POSIX time (one without a zone is GMT, as all are); None: not one."""
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (ValueError, TypeError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    try:
        return when.timestamp()
    except (OverflowError, OSError, ValueError):
        return None


def _check(code: int, model: Model) -> str:
    """What to check for a status a config can cause, from the config alone (never the
    server's words): a 404 (a model id it does not serve, as OpenAI, Ollama and vLLM answer
    one; or a URL that is not the base), a 401 or 403 (the key)."""
    if code == http.HTTPStatus.NOT_FOUND:
        return (
            f"; check that it serves the model {json.dumps(model.model_id)} (model of"
            f" [models.{model.name}]) and that url is its base, up to /v1"
        )
    if code in (http.HTTPStatus.UNAUTHORIZED, http.HTTPStatus.FORBIDDEN):
        if model.api_key_env is None:
            return f"; if it wants an API key, name its variable in apiKeyEnv of model {model.name}"
        return (
            f"; check the key in {shown_name(model.api_key_env)} (apiKeyEnv of model {model.name})"
        )
    return ""


def _status(code: int) -> str:
    """A status and its standard phrase (never the server's own words)."""
    try:
        return f"{code} {http.HTTPStatus(code).phrase}"
    except ValueError:
        return str(code)


def _reply(data: bytes, body: bytes, where: str, cap: int) -> Reply:
    """A chat-completions reply's answer and usage, or `ModelFailed` saying what is wrong
    (never what the reply holds)."""
    try:
        obj = loads(data.decode())
    except (JsonError, UnicodeDecodeError):
        raise ModelFailed(f"{where}: the reply is not JSON") from None
    message = _at(obj, "choices", 0, "message")
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, str):
        raise ModelFailed(f"{where}: the reply has no choices[0].message.content string")
    if len(content.encode(errors="replace")) > cap:
        raise ModelFailed(f"{where}: the answer is over maxOutputBytes ({cap} bytes)")
    usage = _at(obj, "usage")
    counts = [
        usage.get(k) if isinstance(usage, dict) else None
        for k in ("prompt_tokens", "completion_tokens")
    ]
    cut = _at(obj, "choices", 0, "finish_reason") == "length"
    if all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in counts):
        return Reply(content, int(counts[0] or 0), int(counts[1] or 0), cut)
    return Reply(content, estimate(body), estimate(content), cut)


def _at(obj: Any, *path: str | int) -> Any:
    for key in path:
        if isinstance(key, int):
            obj = obj[key] if isinstance(obj, list) and len(obj) > key else None
        else:
            obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


#: What a command model's sandbox sees (it runs as its prompt hook would).
SEES: Final = "the prompt hook's directory and working directory, the system and the grants"


async def _ask_command(
    spawner: Spawner,
    hook: Hook,
    model: Model,
    body: bytes,
    *,
    key: str | None,
    granted: tuple[str, ...],
) -> Reply:
    """Runs the model's argv once: `body` on stdin, the answer on stdout (at most
    `hook.max_output_bytes`). Its tree is killed and reaped on any way out."""
    profile = Profile(model.sandbox) if model.sandbox else COMMAND_PROFILE
    where = f"model {model.name} ({model.command[0]})"
    with scratch_dir("model-") as scratch:
        env = base_environment(os.environ, scratch)
        if key and model.api_key_env:
            env[model.api_key_env] = key
        try:
            rlimits, plan = sandbox.plan(
                profile,
                spawner,
                scratch=scratch,
                dirs=(hook.declaring_dir, hook.workdir),
                workdir=hook.workdir,
                granted=granted,
                paths=hook.paths,
                limits=hook.limits,
            )
            programs.check_command(
                model.command, cwd=hook.workdir, env=env, plan=plan, profile=profile, sees=SEES
            )
        except SandboxUnavailable as exc:
            raise ModelFailed(f"{where} could not start: {exc}") from None
        spec = ChildSpec(model.command, hook.workdir, env, rlimits, plan, None)
        caps = (hook.max_output_bytes, STDERR_TAIL_BYTES)
        try:
            async with spawner.open_child(
                spec, kill_grace=hook.kill_grace_ms / 1000, stdin_data=body, collect=caps
            ) as child:
                outcome = child.outcome
                await child.communicate(b"", *caps)
        except SpawnError as exc:
            raise ModelFailed(f"{where} could not start: {exc}") from None
    if outcome.stdout_overflow:
        raise ModelFailed(f"{where}: the answer is over maxOutputBytes; killed")
    said = bytes(outcome.stderr_tail)
    if outcome.signal is not None:
        raise ModelFailed(f"{where} was killed by signal {outcome.signal}", said)
    if outcome.exit_code != 0:
        raise ModelFailed(f"{where} exited with status {outcome.exit_code}", said)
    stdout = bytes(outcome.stdout)
    content = stdout.decode(errors="replace")
    return Reply(content, estimate(body), estimate(stdout))
