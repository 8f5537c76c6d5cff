"""Who may use the service: the bearer token, its file, the console's cookie, and the Origin
check.

Pure apart from the token file. The server decides before the WebSocket upgrade, so a refusal
is an HTTP status (401, 403), never a half-open socket.

The token is presented as `Authorization: Bearer …`, as `?token=`, or, from a browser that
opened the console with `/?token=…` once, as the console's cookie (`console_cookie`). A
cookie is sent by the browser whatever page of the same site makes the request, so it admits
a request only where the Origin rule does (a page of another origin is refused, 403, before
its cookie is looked at), and only one that the browser says comes from the server's own
pages or from the person (`Sec-Fetch-Site`), which also covers the requests a browser sends
without `Origin`. Cookies are not kept apart by port, so the cookie's name holds the port of the
server that set it (`cookie_name`): two servers on one host each keep their own.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import secrets
import stat
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

import attrs

from ..config.statefiles import exposed, make_state_dir, state_home
from ..core.errors import HooksError
from ..core.passenv import TOKEN_ENV
from ..core.records import Record

#: The variable remote commands take the token from when `--token-file` is not given.
TOKEN_FILE_NAME: Final = Path("mcpx-hooks") / "token"
_TOKEN_BYTES: Final = 32


def default_token_path(environ: Mapping[str, str]) -> Path:
    """`$XDG_STATE_HOME/mcpx-hooks/token` when that is absolute, else
    `~/.local/state/mcpx-hooks/token`."""
    state = state_home(environ)
    # Without a home anywhere, a name no one has: serve says it cannot write it.
    return (state or Path("/nonexistent/.local/state")) / TOKEN_FILE_NAME


def create_token_file(path: Path) -> str:
    """A fresh token, written to `path` with mode 0600 (its directory made 0700 if new).

    Written to a private temporary file and renamed over `path`, so a reader never sees a
    partial token and the file is never readable by others, even for a moment.
    """
    make_state_dir(path.parent)  # ("it is not a directory" for a file there, not "File exists")
    token = secrets.token_urlsafe(_TOKEN_BYTES)
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(token + "\n")
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return token


def kept_token(path: Path) -> str | None:
    """The token of a token file already at `path`, which `serve` keeps (clients and open
    consoles go on working across a restart); None when there is none. `TokenFileError`
    when it cannot be kept: not a regular file, another user's, open to group or others,
    or holding no token."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise TokenFileError(f"cannot read the token file {path}: {exc.strerror}") from exc
    replace = "or serve --new-token to replace it"
    if not stat.S_ISREG(info.st_mode):
        raise TokenFileError(f"the token file {path} is not a regular file; remove it")
    if info.st_uid != os.geteuid():
        raise TokenFileError(
            f"the token file {path} belongs to another user (uid {info.st_uid}); remove it"
        )
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise TokenFileError(
            f"the token file {path} is open to others (mode {info.st_mode & 0o777:o}):"
            f" chmod 600 {path} to keep it, {replace}"
        )
    try:
        text = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise TokenFileError(f"cannot read the token file {path}: {_why(exc)}") from exc
    if not text or any(c.isspace() for c in text):
        raise TokenFileError(f"the token file {path} holds no token: remove it, {replace}")
    return text


def first_token(pending: Path, path: Path, token: str) -> tuple[str, bool]:
    """What `serve` serves when it found no token file: `pending`'s token (`token`), put at
    `path` now (True), unless another `serve` started at the same moment put its own there
    first: then that one (`kept_token`), so both serve the token on disk and a client reading
    it is let in by either. Never written over one (a hard link fails where a file is).
    `pending` is gone after either; where links cannot be made it stays, to be renamed into
    place once the socket is bound as before, as it does when the file at `path` keeps
    vanishing between a link refused and its reading (`_LINK_TRIES` times)."""
    for _ in range(_LINK_TRIES):
        try:
            os.link(pending, path)
        except FileExistsError:
            kept = kept_token(path)
            if kept is None:  # (gone again since: ours goes there after all)
                continue
            pending.unlink(missing_ok=True)
            return kept, False
        except OSError:
            return token, False
        pending.unlink(missing_ok=True)
        return token, True
    return token, False


_LINK_TRIES: Final = 8  # (links tried again after the file `first_token` lost to vanished)


def remove_token_file(path: Path, token: str) -> None:
    """Removes the file on the way out, if it still holds this server's token (another
    server may have written its own since)."""
    try:
        if path.read_text(encoding="ascii").strip() == token:
            path.unlink()
    except (OSError, UnicodeDecodeError):
        return


def _why(exc: OSError | UnicodeDecodeError) -> str:
    """Why a token file could not be read, in words (not Python's `[Errno 2] …: 'path'`)."""
    if isinstance(exc, UnicodeDecodeError):
        return f"it is not a token (byte 0x{exc.object[exc.start]:02x} is not ASCII)"
    return exc.strerror or str(exc)


class TokenFileError(HooksError):
    """The token file cannot be used: missing, unreadable, or readable by others."""


def read_token_file(path: Path) -> str:
    """The token in `path`; refuses a file that group or others may read."""
    try:
        mode = path.stat().st_mode
        text = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise TokenFileError(f"cannot read the token file {path}: {_why(exc)}") from exc
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise TokenFileError(f"the token file {path} is open to others (mode {mode & 0o777:o})")
    if not text:
        raise TokenFileError(f"the token file {path} is empty")
    return text


def client_token(token_file: str | None, environ: Mapping[str, str]) -> str | None:
    """A remote command's token: `--token-file`, else `MCPX_HOOKS_TOKEN`, else the file
    `serve` writes by default (None when that does not exist: a `--no-auth` server). The
    default one is refused in a state directory another user could have put it in, as
    `serve` refuses it: sent, it would go to whatever server the command names (a
    `--token-file` is where its owner chose)."""
    if token_file:
        return read_token_file(Path(token_file))
    if environ.get(TOKEN_ENV):
        return environ[TOKEN_ENV]
    default = default_token_path(environ)
    if not default.exists():
        return None
    if (holder := exposed(default.parent)) is not None:
        raise TokenFileError(
            f"the token file {default} is in {holder}, so another user could have put it"
            " there: it is not sent; keep the state directory yours alone, or give"
            f" --token-file or {TOKEN_ENV}"
        )
    return read_token_file(default)


# ---- the handshake -------------------------------------------------------------------------


@attrs.frozen(repr=False, eq=False)
class Refusal(Record):
    """An HTTP refusal before the upgrade: status, a line of text, extra headers."""

    status: int
    message: str
    headers: tuple[tuple[bytes, bytes], ...] = ()


#: The port an origin of each scheme names by leaving it out.
_DEFAULT_PORTS: Final = {"http": 80, "https": 443, "ws": 80, "wss": 443}


def own_origins(host: str, port: int) -> frozenset[str]:
    """The origins that are the server's own: its address, and the loopback names for it."""
    names = {host}
    if host in ("127.0.0.1", "localhost", "::1"):
        names |= {"127.0.0.1", "localhost", "[::1]"}
    names = {f"[{n}]" if ":" in n and not n.startswith("[") else n for n in names}
    return frozenset(
        normal_origin(f"{scheme}://{n}:{port}") for n in names for scheme in ("http", "https")
    )


def normal_origin(origin: str) -> str:
    """`scheme://host:port`, lower case, without a trailing slash, and without the port
    when it is the scheme's default: a browser names `http://127.0.0.1:80` so."""
    parts = urlsplit(origin.strip().lower())
    if not parts.scheme or not parts.netloc:
        return origin.strip().lower()
    netloc = parts.netloc
    if netloc.endswith(f":{_DEFAULT_PORTS.get(parts.scheme)}"):
        netloc = netloc.rpartition(":")[0]
    return f"{parts.scheme}://{netloc}"


def _an_origin(value: str) -> bool:
    """Whether a request's `Origin` is an origin as a browser sends it, `scheme://host[:port]`
    and nothing more: no path (not even `/`), query, fragment, user, white space or control
    character (`urlsplit` drops a tab or newline anywhere: `http://local<TAB>host:8765` read
    as `http://localhost:8765`), and ASCII only (a browser sends a name in punycode). One
    that is more was taken for the origin it starts with."""
    if not (value.isascii() and value.isprintable()) or " " in value:
        return False
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 (a port that is not a number raises)
    except ValueError:
        return False
    return (
        bool(parts.scheme and parts.hostname)
        and not (parts.path or parts.query or parts.fragment or "@" in parts.netloc)
        and "?" not in value
        and "#" not in value
    )


def header_values(headers: Iterable[tuple[bytes, bytes]], name: bytes) -> list[str]:
    """Every value of a header, in order (names compared case-insensitively)."""
    return [value.decode("latin-1") for key, value in headers if key.lower() == name]


def header(headers: Iterable[tuple[bytes, bytes]], name: bytes) -> str | None:
    """The first value of a header (names compared case-insensitively)."""
    values = header_values(headers, name)
    return values[0] if values else None


def server_names(origins: Iterable[str]) -> frozenset[str]:
    """The host names of `origins` (the server's own and the allowed ones), which a request
    to a server without a token may name in its `Host` (`check_access`'s `names`)."""
    return frozenset(name for origin in origins if (name := urlsplit(origin).hostname))


def _named_here(host: str, names: frozenset[str]) -> bool:
    """Whether a `Host` header names this server: an IP address, `localhost` (and names
    under it, which browsers resolve to loopback themselves), or one of `names`. No other
    site's page can have any of these as its own name."""
    try:
        name = urlsplit(f"//{host.strip()}").hostname
    except ValueError:
        return False
    if not name:
        return False
    if name in names or name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def check_access(
    headers: Sequence[tuple[bytes, bytes]],
    query_tokens: Sequence[str],
    *,
    token: str | None,
    origins: frozenset[str],
    names: frozenset[str] | None = None,
) -> Refusal | None:
    """None when the request may be upgraded; else why not.

    `query_tokens` are the request target's `?token=` values. A request with two `Origin` or
    two `Authorization` headers, or two `token` query parameters, is refused (400). A request
    without `Origin` is a program, not a page in a browser, and is let through to the token
    check; one with an `Origin` must name one of `origins` (403). With `names` (a server
    that asks no token), the `Host` must name the server (`_named_here`, 403): a page whose
    own name was pointed at this address (DNS rebinding) reads its "own" origin without an
    `Origin`, and would otherwise need nothing more. The token is compared in constant time;
    missing or wrong is 401.
    """
    for name in (b"origin", b"authorization"):
        if len(header_values(headers, name)) > 1:
            # Which one counts would depend on who reads the request: none does.
            return Refusal(400, f"more than one {name.decode().title()} header")
    if len(query_tokens) > 1:
        return Refusal(400, "more than one token query parameter")
    origin = header(headers, b"origin")
    if origin is not None and (not _an_origin(origin) or normal_origin(origin) not in origins):
        return Refusal(
            403,
            f"origin {origin!r} is not allowed (serve --allow-origin ORIGIN adds one)",
        )
    host = header(headers, b"host")
    if names is not None and host is not None and not _named_here(host, names):
        return Refusal(
            403,
            f"Host {host[:60]!r} is not this server's: a server without a token answers"
            " requests to its address or localhost only (serve --allow-origin ORIGIN adds"
            " a name)",
        )
    if token is None:
        return None
    presented = query_tokens[0] if query_tokens else None
    if presented is None and header(headers, b"authorization") is None:
        presented = cookie_token(headers)
        site = header(headers, b"sec-fetch-site")
        if presented is not None and site is not None and site.lower() not in _OWN_SITES:
            # A page of another port of this host is the same *site*: its browser sends the
            # cookie even with `SameSite=Strict`, on requests without `Origin` (an <img>).
            return Refusal(
                403, f"the console's cookie admits its own pages only (Sec-Fetch-Site: {site[:40]})"
            )
    authorization = header(headers, b"authorization")
    if authorization is not None:
        scheme, _, value = authorization.partition(" ")
        if scheme.lower() == "bearer":
            presented = value.strip()
    challenge = ((b"WWW-Authenticate", b'Bearer realm="mcpx-hooks"'),)
    if not presented:
        return Refusal(
            401,
            "a token is required: Authorization: Bearer TOKEN, or ?token= (a browser: open the"
            " console once at /?token=TOKEN)",
            challenge,
        )
    if not hmac.compare_digest(presented.encode(), token.encode()):
        return Refusal(401, "the token is not this server's", challenge)
    return None


# ---- the console's cookie --------------------------------------------------------------------

#: The console's cookie is named this, then `-PORT` (the port of the server that set it).
COOKIE_PREFIX: Final = "mcpx-hooks-token"
#: Cookies looked at in a request at most (a request's headers are bounded by h11 already).
_MAX_COOKIES: Final = 64


def cookie_name(headers: Iterable[tuple[bytes, bytes]]) -> str:
    """The console cookie's name for this request: the prefix and the port of its `Host`
    (80 when the `Host` names none)."""
    host = header(headers, b"host") or ""
    _, colon, port = host.rpartition(":")
    if not colon or not (port.isascii() and port.isdigit()) or "]" in port:
        port = "80"
    return f"{COOKIE_PREFIX}-{int(port)}"


#: `Sec-Fetch-Site` values of a request the console's cookie may admit: its own pages, or
#: the person (an address typed, a bookmark).
_OWN_SITES: Final = frozenset({"same-origin", "none"})


def cookie_token(headers: Sequence[tuple[bytes, bytes]]) -> str | None:
    """The token in the console's cookie, if the request carries it (the first one named so).

    `Cookie` is `name=value; name=value`, possibly split over several headers; anything
    else in it is ignored."""
    name = cookie_name(headers)
    seen = 0
    for value in header_values(headers, b"cookie"):
        for part in value.split(";"):
            seen += 1
            if seen > _MAX_COOKIES:
                return None
            key, equals, text = part.strip().partition("=")
            if equals and key == name:
                return text.strip().strip('"')
    return None


def console_cookie(headers: Sequence[tuple[bytes, bytes]], token: str) -> bytes:
    """The `Set-Cookie` value that lets this browser present `token`: `HttpOnly` (no script
    reads it), `SameSite=Strict` (no other site's page makes the browser send it), on the
    whole origin (`Path=/`), for the browser's session."""
    return f"{cookie_name(headers)}={token}; HttpOnly; SameSite=Strict; Path=/".encode()


def token_matches(presented: str, token: str) -> bool:
    """Whether `presented` is the token, compared in constant time."""
    return hmac.compare_digest(presented.encode(), token.encode())
