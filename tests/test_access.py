"""Who may use the service: the token file, the bearer check, the Origin check."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest

from mcpx_hooks.supervisor.service.access import (
    TOKEN_ENV,
    TokenFileError,
    check_access,
    client_token,
    create_token_file,
    default_token_path,
    kept_token,
    normal_origin,
    own_origins,
    read_token_file,
    remove_token_file,
    server_names,
)


def test_default_token_path() -> None:
    assert default_token_path({"XDG_STATE_HOME": "/s", "HOME": "/h"}) == Path("/s/mcpx-hooks/token")
    assert default_token_path({"XDG_STATE_HOME": "rel", "HOME": "/h"}) == Path(
        "/h/.local/state/mcpx-hooks/token"
    )
    # A HOME that is no absolute path (`.`, empty) is none: never a token in the working
    # directory, or under `/`.
    mine = Path(pwd.getpwuid(os.getuid()).pw_dir) / ".local/state/mcpx-hooks/token"
    assert default_token_path({"HOME": "."}) == mine
    assert default_token_path({"HOME": ""}) == mine


def test_token_file_is_private_fresh_and_removed_only_if_ours(tmp_path: Path) -> None:
    path = tmp_path / "state" / "mcpx-hooks" / "token"
    first = create_token_file(path)
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700
    assert read_token_file(path) == first and len(first) >= 40
    second = create_token_file(path)
    assert second != first and read_token_file(path) == second
    assert list(path.parent.iterdir()) == [path]  # no temporary file left
    remove_token_file(path, first)  # not ours any more: kept
    assert path.exists()
    remove_token_file(path, second)
    assert not path.exists()


def test_a_token_file_open_to_others_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("abc\n")
    path.chmod(0o644)
    with pytest.raises(TokenFileError, match="open to others"):
        read_token_file(path)
    with pytest.raises(TokenFileError, match="cannot read"):
        read_token_file(tmp_path / "none")


def test_a_token_file_that_cannot_be_read_says_why_in_words(tmp_path: Path) -> None:
    """Not Python's words (`[Errno 2] No such file or directory: '…'`, `'ascii' codec can't
    decode byte …`): the path once, and why."""
    with pytest.raises(TokenFileError) as caught:
        read_token_file(tmp_path / "none")
    assert str(caught.value) == (
        f"cannot read the token file {tmp_path / 'none'}: No such file or directory"
    )
    with pytest.raises(TokenFileError) as caught:
        read_token_file(tmp_path)
    assert str(caught.value) == f"cannot read the token file {tmp_path}: Is a directory"
    path = tmp_path / "token"
    path.write_bytes("café".encode())
    path.chmod(0o600)
    for read in (read_token_file, kept_token):
        with pytest.raises(TokenFileError) as caught:
            read(path)
        assert str(caught.value) == (
            f"cannot read the token file {path}: it is not a token (byte 0xc3 is not ASCII)"
        )


def test_client_token_precedence(tmp_path: Path) -> None:
    given = tmp_path / "given"
    create = create_token_file(given)
    state = tmp_path / "state"
    default = create_token_file(state / "mcpx-hooks" / "token")
    env = {"XDG_STATE_HOME": str(state), TOKEN_ENV: "from-env"}
    assert client_token(str(given), env) == create
    assert client_token(None, env) == "from-env"
    assert client_token(None, {"XDG_STATE_HOME": str(state)}) == default
    assert client_token(None, {"XDG_STATE_HOME": str(tmp_path / "nothing")}) is None


ORIGINS = own_origins("127.0.0.1", 8765) | {"https://app.example"}


def access(headers: dict[str, str], query: str | None = None, token: str | None = "t") -> int:
    refusal = check_access(
        [(k.encode(), v.encode()) for k, v in headers.items()],
        () if query is None else (query,),
        token=token,
        origins=ORIGINS,
    )
    return 101 if refusal is None else refusal.status


def test_bearer_or_query_token() -> None:
    assert access({"Authorization": "Bearer t"}) == 101
    assert access({"authorization": "bearer t"}) == 101
    assert access({}, "t") == 101
    assert access({}) == 401
    assert access({"Authorization": "Bearer x"}) == 401
    assert access({"Authorization": "Bearer x"}, "t") == 401  # the header wins
    assert access({}, None, token=None) == 101  # --no-auth


def test_a_token_query_parameter_given_twice_is_refused() -> None:
    headers = [(b"host", b"127.0.0.1:8765")]
    for tokens in (("bad", "t"), ("t", "t"), ("t", "")):
        refusal = check_access(headers, tokens, token="t", origins=ORIGINS)
        assert refusal is not None and refusal.status == 400, tokens
        # Even where no token is asked for (the console's page, --no-auth).
        refusal = check_access(headers, tokens, token=None, origins=ORIGINS)
        assert refusal is not None and refusal.status == 400, tokens


def test_origin_must_be_the_servers_own_or_allowed() -> None:
    auth = {"Authorization": "Bearer t"}
    assert access({**auth, "Origin": "http://127.0.0.1:8765"}) == 101
    assert access({**auth, "Origin": "http://LOCALHOST:8765"}) == 101
    assert access({**auth, "Origin": "http://localhost:8765/"}) == 403  # (not an origin)
    assert access({**auth, "Origin": "http://[::1]:8765"}) == 101
    assert access({**auth, "Origin": "https://app.example"}) == 101
    assert access({**auth, "Origin": "http://127.0.0.1:8766"}) == 403
    assert access({**auth, "Origin": "null"}) == 403
    assert access({"Origin": "http://evil.example"}) == 403  # refused before the token check
    assert "http://0.0.0.0:1" in own_origins("0.0.0.0", 1)


def test_umask_does_not_widen_the_token_file(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        path = tmp_path / "t" / "token"
        create_token_file(path)
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o600


def test_without_a_token_the_host_must_name_the_server() -> None:
    names = server_names(ORIGINS)
    assert names == {"127.0.0.1", "localhost", "::1", "app.example"}

    def host(value: str) -> int:
        refusal = check_access(
            [(b"host", value.encode())], (), token=None, origins=ORIGINS, names=names
        )
        return 101 if refusal is None else refusal.status

    for named in (
        "127.0.0.1:8765",
        "LOCALHOST:8765",
        "[::1]:8765",
        "app.example",
        "a.localhost",
        "192.168.1.5:8765",
        "[fe80::1]",
    ):
        assert host(named) == 101, named
    for other in (
        "attacker.example:8765",
        "127.0.0.1.nip.io:8765",
        "localhost.:8765",
        "",
        "[::1",
        "app.example.attacker.example",
    ):
        assert host(other) == 403, other
    # With a token, or a request without Host (HTTP/1.0), the Host is not looked at.
    assert (
        check_access([(b"host", b"attacker.example")], ("t",), token="t", origins=ORIGINS) is None
    )
    assert check_access([], (), token=None, origins=ORIGINS, names=names) is None


def test_an_origin_on_the_default_port_is_the_same_with_or_without_it() -> None:
    # A browser names an origin on its scheme's default port without the port (`Origin:
    # http://127.0.0.1`), so a server on port 80 refused its own console's requests (403),
    # and `--allow-origin https://app.example:443`, as the flag's help spells it, every
    # request of that page.
    origins = own_origins("127.0.0.1", 80) | {normal_origin("https://app.example:443")}
    for origin in (
        "http://127.0.0.1",
        "http://127.0.0.1:80",
        "http://localhost",
        "https://app.example",
    ):
        assert (
            check_access([(b"origin", origin.encode())], ("t",), token="t", origins=origins) is None
        )
    assert normal_origin("WSS://Example.COM:443/") == "wss://example.com"
    assert normal_origin("http://example.com:8080") == "http://example.com:8080"
    assert "http://127.0.0.1:8765" in own_origins("127.0.0.1", 8765)


def test_an_origin_header_that_is_more_than_an_origin_is_refused() -> None:
    # A browser sends `scheme://host[:port]` and nothing more; `http://127.0.0.1:8765/` (or
    # with a path, a query, a user) was taken for the server's own origin and let through.
    origins = own_origins("127.0.0.1", 8765)
    for sent in (
        "http://127.0.0.1:8765/",
        "http://localhost:8765/mcp",
        "http://localhost:8765?",
        "http://localhost:8765#x",
        "http://me@localhost:8765",
        " http://localhost:8765",
        "http://localhost:notaport",
    ):
        refused = check_access([(b"origin", sent.encode())], ("t",), token="t", origins=origins)
        assert refused is not None and refused.status == 403, sent
    for sent in ("http://127.0.0.1:8765", "http://localhost:8765", "HTTP://LocalHost:8765"):
        allowed = check_access([(b"origin", sent.encode())], ("t",), token="t", origins=origins)
        assert allowed is None, sent
