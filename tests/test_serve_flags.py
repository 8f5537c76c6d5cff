"""`serve` checks every flag before it touches anything, and a `serve` that cannot listen
leaves the server already on that port as it was (its token file included)."""

from __future__ import annotations

import http.client
import re
import signal
import subprocess
from pathlib import Path

import attrs
import pytest
from service_client import CLI, ENV, start_server

from mcpx_hooks.supervisor.cli import serveflags
from mcpx_hooks.supervisor.cli.main import main
from mcpx_hooks.supervisor.cli.parser import parser
from mcpx_hooks.supervisor.service.server import Limits
from mcpx_hooks.supervisor.service.wire import DEFAULT_PORT

DOCS = Path(__file__).resolve().parent.parent / "docs" / "service.md"


def _out_of_range() -> list[tuple[str, str]]:
    """For every numeric flag of the table: just below its range, just above, not a number."""
    cases = []
    for bound in serveflags.SERVE_NUMBERS:
        below = bound.low if bound.above else bound.low - 1
        cases += [(bound.flag, str(below)), (bound.flag, str(bound.high + 1))]
        cases += [(bound.flag, "x"), (bound.flag, "")]
    return cases


BAD = [
    *_out_of_range(),
    ("--port", "70000"),
    ("--port", "9" * 5000),  # past int()'s digit limit
    ("--port", "1.5"),
    ("--max-runs", "0"),
    ("--max-connections", "0"),
    ("--max-message-bytes", "0"),
    ("--max-idle", "2.5"),
    ("--grace", "-1"),
    ("--grace", "nan"),
    ("--grace", "inf"),
    ("--ping-interval", "1e400"),
    ("--host", "nope.invalid"),
    ("--host", "999.1.1.1"),
    ("--host", "no such host"),
    ("--host", ""),
    ("--host", "[::1]"),
    ("--allow-origin", "example.com"),
    ("--allow-origin", "http://example.com/path"),
    ("--allow-origin", "http://example.com:99999"),
    ("--allow-origin", "http://user@example.com"),
    ("--allow-origin", "http://example.com?q"),
    ("--allow-origin", "http://example.com:"),
    ("--allow-origin", "://example.com"),
    ("--allow-origin", "http://exa mple.com"),
]


@pytest.mark.parametrize(("flag", "value"), BAD)
def test_a_bad_flag_exits_2_naming_it_and_touches_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str
) -> None:
    token = tmp_path / "state" / "token"
    code = main(["serve", "--token-file", str(token), f"{flag}={value}"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(f"mcpx-hooks serve: {flag}: ") and err.count("\n") == 1, err
    assert "Traceback" not in err and "Exceptions from Trio" not in err
    assert not token.parent.exists()


def test_the_message_says_what_was_expected_and_what_was_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--port", "70000", "--max-runs", "0", "--grace", "-1", "--ping-interval", "0"]
    assert main(["serve", "--no-auth", *argv]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "mcpx-hooks serve: --port: expected an integer from 0 to 65535, got 70000",
        "mcpx-hooks serve: --max-runs: expected an integer from 1 to 2147483647, got 0",
        "mcpx-hooks serve: --ping-interval: expected a number of seconds over 0 and at most"
        " 86400, got 0",
        "mcpx-hooks serve: --grace: expected a number of seconds from 0 to 86400, got -1",
    ]


@pytest.mark.parametrize("argv", [["--port"], ["--max-runs", "--grace", "1"]])
def test_argparse_errors_name_the_flag_too(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["serve", *argv])
    assert exit_.value.code == 2
    assert f"argument {argv[0]}: expected one argument" in capsys.readouterr().err


def test_good_flags_reach_the_limits() -> None:
    args = parser().parse_args(
        [
            "serve",
            "--host=localhost",
            "--port=65535",
            "--max-runs=1",
            "--max-pending=2",
            "--max-idle=3",
            "--ping-interval=0.5",
            "--grace=0",
            "--allow-origin=https://Example.com:8443",
            "--allow-origin=http://[::1]:3000",
            "--allow-origin=http://127.0.0.1",
        ]
    )
    assert serveflags.serve_problems(args) == []
    assert args.port == 65535
    given = {b.field: getattr(args, b.field) for b in serveflags.LIMIT_FLAGS}
    assert given == {
        "max_connections": None,
        "max_pending": 2,
        "max_idle": 3,
        "max_runs": 1,
        "max_message_bytes": None,
        "max_unfinished_bytes": None,
        "ping_s": 0.5,
        "grace_s": 0.0,
    }


def test_every_row_sets_a_limits_field_of_its_type() -> None:
    fields = attrs.fields_dict(Limits)
    defaults = Limits()
    assert len({b.flag for b in serveflags.SERVE_NUMBERS}) == len(serveflags.SERVE_NUMBERS)
    for bound in serveflags.LIMIT_FLAGS:
        assert bound.field in fields, bound.flag
        assert type(getattr(defaults, bound.field)) is bound.kind, bound.flag
        assert bound.parse(serveflags.number(getattr(defaults, bound.field))) == getattr(
            defaults, bound.field
        )
    assert serveflags.PORT.parse(str(DEFAULT_PORT)) == DEFAULT_PORT


def test_docs_list_every_numeric_flag_with_its_default_and_range() -> None:
    rows = {
        line.split("`")[1].split()[0]: line
        for line in DOCS.read_text().splitlines()
        if line.startswith("| `--")
    }
    defaults = Limits()
    for bound in serveflags.SERVE_NUMBERS:
        default = DEFAULT_PORT if bound is serveflags.PORT else getattr(defaults, bound.field)
        row = rows[bound.flag]
        assert row.startswith(f"| `{bound.flag} {bound.metavar}` | {serveflags.number(default)} |")
        assert f"| {bound.range} |" in row, row
    for flag in ("--config", "--host", "--token-file", "--no-auth", "--allow-origin"):
        assert flag in rows


def test_a_huge_port_or_an_unknown_host_in_a_real_process(tmp_path: Path) -> None:
    out = subprocess.run(
        [*CLI, "serve", "--no-auth", "--port", "9" * 30, "--host", "nope.invalid"],
        check=False,
        cwd=tmp_path,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    lines = out.stderr.splitlines()
    assert [line.split(":")[1] for line in lines] == [" --port", " --host"], out.stderr
    assert "Traceback" not in out.stderr and "Exceptions from Trio" not in out.stderr


def test_a_second_serve_on_a_port_in_use_exits_2_and_leaves_the_first_alone(
    tmp_path: Path,
) -> None:
    first = start_server(tmp_path)
    try:
        token_file = tmp_path / "token"
        before = token_file.read_bytes(), token_file.stat().st_ino
        second = subprocess.run(
            [*CLI, "serve", "--port", str(first.port), "--token-file", str(token_file)],
            check=False,
            cwd=tmp_path,
            env=ENV,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 2
        assert second.stdout == ""
        assert second.stderr == (
            f"mcpx-hooks serve: cannot listen on 127.0.0.1:{first.port}: Address already in use\n"
        )
        assert (token_file.read_bytes(), token_file.stat().st_ino) == before
        assert sorted(p.name for p in tmp_path.iterdir() if "token" in p.name) == ["token"]
        assert first.proc.poll() is None
    finally:
        assert first.stop() == 0
    # The first one's, kept for the next start.
    assert (token_file.read_bytes(), token_file.stat().st_ino) == before


def test_two_serves_started_together_serve_the_one_token_on_disk(tmp_path: Path) -> None:
    # Two servers started at once on one token file (two ports, one state directory) each
    # found none, made their own and put it there once bound: the one put there first was
    # replaced, and its server answered 401 to a client holding the file's token. Now the
    # first put there is the one both serve. (A race: several starts, each a fresh file.)
    token_file = tmp_path / "token"
    argv = [*CLI, "serve", "--port", "0", "--token-file", str(token_file)]
    for _ in range(4):
        token_file.unlink(missing_ok=True)
        servers = [
            subprocess.Popen(argv, cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, text=True)
            for _ in range(2)
        ]
        try:
            lines = [server.stdout.readline() if server.stdout else "" for server in servers]
            token = token_file.read_text().strip()
            for line in lines:
                found = re.search(r"listening on ws://(\S+?);", line)
                assert found, lines
                host, port = found.group(1).rsplit(":", 1)
                asked = http.client.HTTPConnection(host, int(port), timeout=30)
                asked.request("GET", "/v1/runs", headers={"Authorization": f"Bearer {token}"})
                assert asked.getresponse().status == 200, lines
                asked.close()
        finally:
            for server in servers:
                server.send_signal(signal.SIGINT)
                server.communicate(timeout=30)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["token"]
        assert token_file.read_text().strip() == token


def test_a_host_that_is_not_this_machines_exits_2_before_the_token_file(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    out = subprocess.run(
        [*CLI, "serve", "--host", "192.0.2.1", "--port", "0", "--token-file", str(token_file)],
        check=False,
        cwd=tmp_path,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert out.stderr.startswith("mcpx-hooks serve: cannot listen on 192.0.2.1:0: "), out.stderr
    assert out.stderr.count("\n") == 1
    assert list(tmp_path.iterdir()) == []
