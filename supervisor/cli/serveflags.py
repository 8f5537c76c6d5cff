"""`serve`'s flags, checked before anything is touched: one table row per numeric flag
(`SERVE_NUMBERS`), the host and the origins each checked as far as can be told before
listening. Each problem names its flag and what was expected."""

from __future__ import annotations

TYPE_CHECKING = False  # as typing.TYPE_CHECKING (True to type checkers), without importing typing
if TYPE_CHECKING:
    import argparse
    from typing import Final


def add_arguments(srv: argparse.ArgumentParser) -> None:
    from ..service.options import Limits
    from ..service.wire import DEFAULT_HOST, DEFAULT_PORT
    from .parser import add_config_file_arguments

    add_config_file_arguments(srv)
    srv.add_argument(
        "--host",
        default=DEFAULT_HOST,
        metavar="H",
        help=f"the address to listen on: an IP address or a host name; default {DEFAULT_HOST}",
    )
    limits = Limits()
    for bound in SERVE_NUMBERS:
        default = DEFAULT_PORT if bound is PORT else getattr(limits, bound.field)
        srv.add_argument(
            bound.flag,
            dest=bound.field,
            metavar=bound.metavar,
            help=f"{bound.help} ({bound.range}; default {number(default)})",
        )
    srv.add_argument(
        "--token-file",
        metavar="F",
        help="the token's file (default $XDG_STATE_HOME/mcpx-hooks/token); one already"
        " there is kept",
    )
    srv.add_argument(
        "--new-token",
        action="store_true",
        help="replace the token file's token with a fresh one (clients need the new one)",
    )
    srv.add_argument("--no-auth", action="store_true", help="ask no token (loopback use only)")
    srv.add_argument(
        "--cluster",
        metavar="URL",
        help="be a gateway of a cluster: runs go to workers over NATS JetStream at URL"
        " (nats://HOST:PORT; docs/cluster.md)",
    )
    from .clusterflags import add_access_arguments

    add_access_arguments(srv)
    srv.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="an Origin besides the server's own that may connect: scheme://host[:port]"
        " (repeatable)",
    )


class Bound:
    """A numeric `serve` flag: the field it sets (of `Limits`; `port` of `ServiceOptions`),
    its type, and its range, inclusive (`low` excluded when `above`)."""

    def __init__(
        self,
        flag: str,
        field: str,
        kind: type[int] | type[float],
        low: int,
        high: int,
        *,
        help: str,
        above: bool = False,
        metavar: str | None = None,
    ) -> None:
        self.flag, self.field, self.kind = flag, field, kind
        self.low, self.high, self.above = low, high, above
        self.help = help
        self.metavar = metavar or ("N" if kind is int else "S")

    @property
    def range(self) -> str:
        if self.above:
            return f"over {self.low} and at most {self.high}"
        return f"from {self.low} to {self.high}"

    @property
    def expected(self) -> str:
        what = "an integer" if self.kind is int else "a number of seconds"
        return f"{what} {self.range}"

    def parse(self, text: str) -> int | float:
        """The value `text` gives; ValueError saying what was expected when it is not one."""
        import math

        try:
            value = self.kind(text)
        except ValueError:
            raise ValueError(f"expected {self.expected}, got {_shown(text)}") from None
        low_ok = value > self.low if self.above else value >= self.low
        if not (math.isfinite(value) and low_ok and value <= self.high):
            raise ValueError(f"expected {self.expected}, got {_shown(text.strip(), quote=False)}")
        return value


#: The largest count and time a flag takes: past these nothing is a limit any more, and
#: below them nothing overflows a C integer or a deadline.
_COUNT: Final = 2**31 - 1
_DAY: Final = 86_400

PORT: Final = Bound("--port", "port", int, 0, 65_535, metavar="P", help="the TCP port, 0: any")

#: The flags that set a `Limits` field, one row each: a new budget is one more row.
LIMIT_FLAGS: Final = (
    Bound("--max-connections", "max_connections", int, 1, _COUNT, help="admitted connections"),
    Bound("--max-pending", "max_pending", int, 1, _COUNT, help="sockets in their handshake"),
    Bound("--max-idle", "max_idle", int, 1, _COUNT, help="admitted sockets with no run"),
    Bound("--max-runs", "max_runs", int, 1, _COUNT, help="runs in progress"),
    Bound("--max-message-bytes", "max_message_bytes", int, 1, _COUNT, help="bytes per message"),
    Bound(
        "--max-unfinished-bytes",
        "max_unfinished_bytes",
        int,
        1,
        _COUNT,
        help="bytes of messages still coming in, all clients",
    ),
    Bound("--ping-interval", "ping_s", float, 0, _DAY, above=True, help="seconds between pings"),
    Bound("--grace", "grace_s", float, 0, _DAY, help="runs' time to end at SIGTERM"),
)
SERVE_NUMBERS: Final = (PORT, *LIMIT_FLAGS)


def number(value: float) -> str:
    return str(value) if isinstance(value, int) else f"{value:g}"


def _shown(text: str, *, quote: bool = True) -> str:
    """A value as given, for a message: cut short when long, quoted unless a number."""
    short = text if len(text) <= 40 else text[:40] + "…"
    return repr(short) if quote else short


def _host_problem(host: str) -> str | None:
    """Why `--host` cannot be listened on, as far as can be told before trying; None if it
    can be tried: an IP address, or a host name that resolves."""
    import socket

    if _is_ip(host):
        return None
    if host.startswith("[") and host.endswith("]") and _is_ip(host[1:-1]):
        return f"expected an IP address without brackets, got {_shown(host)}"
    if not _is_host_name(host):
        return f"expected an IP address or a host name, got {_shown(host)}"
    try:
        socket.getaddrinfo(host, None, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        return f"cannot resolve {host!r}: {exc.strerror or exc}"
    return None


def _is_ip(text: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _is_host_name(name: str) -> bool:
    """Letters, digits, hyphens (and underscores, which resolvers take) in dot-separated
    labels; a last label that is all digits is a mistyped IPv4 address, not a name."""
    import re

    labels = (name[:-1] if name.endswith(".") else name).split(".")
    label = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?")
    return (
        0 < len(name) <= 253
        and all(label.fullmatch(part) for part in labels)
        and not labels[-1].isdigit()
    )


def _origin_problem(origin: str) -> str | None:
    """Why `--allow-origin` is not an origin (`scheme://host[:port]`, as a browser sends
    it); None if it is one."""
    import re
    from urllib.parse import urlsplit

    wrong = f"expected scheme://host[:port], got {_shown(origin)}"
    try:
        parts = urlsplit(origin)
        port = parts.port
    except ValueError:  # a port that is not one, or a bracket left open
        return wrong
    host = parts.hostname or ""
    if not (_is_ip(host) or _is_host_name(host)):
        return wrong
    host = f"[{host}]" if ":" in host else host
    netloc = host if port is None else f"{host}:{port}"
    if (
        not re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*", parts.scheme)
        or parts.netloc.lower() != netloc
        or parts.path not in ("", "/")
        or parts.query
        or parts.fragment
        or "?" in origin
        or "#" in origin
    ):
        return wrong
    return None


def serve_problems(args: argparse.Namespace) -> list[str]:
    """Every flag of `serve` that is wrong, one line each naming it. The numeric ones are
    parsed in place (None: not given)."""
    problems = []
    for bound in SERVE_NUMBERS:
        text = getattr(args, bound.field)
        if text is not None:
            try:
                setattr(args, bound.field, bound.parse(text))
            except ValueError as exc:
                problems.append(f"{bound.flag}: {exc}")
    if (problem := _host_problem(args.host)) is not None:
        problems.append(f"--host: {problem}")
    for origin in args.allow_origin:
        if (problem := _origin_problem(origin)) is not None:
            problems.append(f"--allow-origin: {problem}")
    if args.cluster is not None and (problem := cluster_problem(args.cluster)) is not None:
        problems.append(f"--cluster: {problem}")
    args.cluster_settings = None
    if args.cluster is None:
        from .clusterflags import stray_access_flags

        problems += stray_access_flags(args)
    else:
        from .clusterflags import cluster_settings

        args.cluster_settings, found = cluster_settings(args)
        problems += found
    return problems


def cluster_problem(url: str) -> str | None:
    """Why a `--cluster` URL is not a NATS server's (`nats://HOST:PORT`, or `tls://`); None
    if it may be one. Credentials in it are refused: every process listing would show them
    (`--nats-auth-file` holds them)."""
    from urllib.parse import urlsplit

    wrong = f"expected nats://HOST:PORT, got {_shown(url)}"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return wrong
    host = parts.hostname or ""
    if parts.scheme not in ("nats", "tls") or not (_is_ip(host) or _is_host_name(host)):
        return wrong
    if port is None or parts.path not in ("", "/") or parts.query or parts.fragment:
        return wrong
    if parts.username is not None or parts.password is not None:
        return (
            "expected no credentials in the URL (any process listing shows it):"
            " put them in --nats-auth-file"
        )
    return None
