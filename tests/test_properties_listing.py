"""Properties (Hypothesis) of two pure checks on what a request or a run holds: a run's argv
as a listing of runs carries it (`core/scripts.py` `listed_argv`), and a request's `Origin`
as the server takes it (`service/access.py` `check_access`).

- Any argv (any text, empty arguments, huge ones): the listed argv is the argv's arguments
  whole, in order, then at most one cut short (a prefix of the next), within
  `LISTED_ARGV_CHARS` in all; `argvCut` counts exactly the arguments not listed whole.
- Any `Origin` value (bytes, read as latin-1 as every header is): `check_access` never
  raises, and lets the request through only when the value is an allowed origin exactly as
  a browser sends it (scheme, host, and a port only where it is not the scheme's default;
  in any case, as a scheme and a host name are).
"""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from mcpx_hooks.supervisor.core.scripts import LISTED_ARGV_CHARS, listed_argv
from mcpx_hooks.supervisor.service.access import check_access, own_origins

#: Pure Python: eight times the profile's examples.
FAST = settings(max_examples=8 * settings.default.max_examples)

argument = (
    st.text(max_size=40)
    | st.sampled_from(["", "x" * LISTED_ARGV_CHARS])
    | st.builds(lambda c, n: c * n, st.characters(), st.integers(0, 3 * LISTED_ARGV_CHARS))
)


@FAST
@example([])
@example(["a" * LISTED_ARGV_CHARS, ""])
@example(["", "a" * (LISTED_ARGV_CHARS + 1)])
@given(st.lists(argument, max_size=12))
def test_a_listed_argv_is_the_argv_cut_once_within_the_bound(argv: list[str]) -> None:
    listed = listed_argv(argv)
    shown, cut = listed["argv"], listed["argvCut"]
    assert set(listed) == {"argv", "argvCut"}
    assert sum(map(len, shown)) <= LISTED_ARGV_CHARS
    assert len(shown) <= len(argv)
    whole = 0
    for i, arg in enumerate(shown):
        if arg == argv[i]:
            whole += 1
            continue
        assert argv[i].startswith(arg) and i == len(shown) - 1, (i, shown)
    assert cut == len(argv) - whole
    if cut:  # (cut only when the whole would not fit)
        assert sum(map(len, argv)) > LISTED_ARGV_CHARS


PORT = 8765
ORIGINS = own_origins("127.0.0.1", PORT) | own_origins("example.org", 443)
#: Exactly what browsers send for the origins allowed.
AS_SENT = {
    f"{scheme}://{host}:{PORT}"
    for scheme in ("http", "https")
    for host in ("127.0.0.1", "localhost", "[::1]")
} | {"https://example.org", "http://example.org:443"}

junk = st.sampled_from(
    ["/", "?", "#", "@", ":", " ", "\t", "\n", "\r", "\x00", "\xe9", "."]
) | st.text(max_size=2)


@st.composite
def origin_ish(draw: st.DrawFn) -> bytes:
    """An origin, or near one: a scheme, a user, a host, a port and what may follow, each
    as a browser sends it or not, in any case, with anything between."""
    parts = [
        draw(st.sampled_from(["http", "https", "ws", "", "HTTP"])),
        draw(st.sampled_from(["://", "://", ":/", ":"])),
        draw(st.sampled_from(["", "", "", "me@", "@", "me:pw@"])),
        draw(st.sampled_from(["localhost", "127.0.0.1", "[::1]", "example.org", "LocalHost", ""])),
        draw(st.sampled_from(["", f":{PORT}", f":{PORT}", ":443", ":80", ":", f":0{PORT}"])),
        draw(st.sampled_from(["", "", "", "/", "/mcp", "?", "?a", "#", "#x"])),
    ]
    for _ in range(draw(st.integers(0, 2))):  # (something where it does not belong)
        at = draw(st.integers(0, len(parts)))
        parts.insert(at, draw(junk))
    return "".join(parts).encode("latin-1", "replace")


def refusal(origin: bytes) -> int | None:
    refused = check_access([(b"origin", origin)], [], token=None, origins=ORIGINS)
    return None if refused is None else refused.status


@FAST
@example(b"http://127.0.0.1:8765")
# `urlsplit` drops a tab or a newline anywhere in a URL: this was taken for the origin
# `http://localhost:8765`, which no browser sends so.
@example(b"http://local\thost:8765")
@example(b"http://localhost:8765\n")
@given(st.binary(max_size=40) | origin_ish() | st.sampled_from(sorted(AS_SENT)).map(str.encode))
def test_an_origin_is_let_through_only_as_a_browser_sends_an_allowed_one(origin: bytes) -> None:
    status = refusal(origin)
    assert status in (None, 403)
    if status is None:
        assert origin.decode("latin-1").lower() in AS_SENT, origin
