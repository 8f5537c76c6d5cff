"""`str.isdigit()` is true of digits `int()` refuses (`"²"`, a superscript two): wherever text
from outside (a `Host` header, a child's proxy request, a model server's `Content-Length`, a
server's request ids, a placeholder's path, a config's pointers, a runner's environment) is
taken as a number, such a "digit" is text like any other, never a `ValueError`."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from mcpx_hooks.supervisor.config.hookrewrite import _pointer_index
from mcpx_hooks.supervisor.config.problems import pointer_key
from mcpx_hooks.supervisor.core.placeholders import PlaceholderError, resolve
from mcpx_hooks.supervisor.process.egresshttp import target as _target
from mcpx_hooks.supervisor.service.access import COOKIE_PREFIX, cookie_name

SUPERSCRIPT_TWO = "\u00b2"


def test_a_host_port_of_other_digits_is_no_port() -> None:
    # (headers are read as latin-1: the byte 0xB2 is the superscript two)
    assert cookie_name([(b"host", b"127.0.0.1:\xb2")]) == f"{COOKIE_PREFIX}-80"


def test_a_proxy_request_naming_such_a_port_is_not_carried_or_is_port_80() -> None:
    assert _target(b"CONNECT h:\xb2 HTTP/1.1\r\n\r\n") is None
    carried = _target(b"GET http://h:\xb2/x HTTP/1.1\r\n\r\n")
    assert carried is not None and carried[2] == 80


def test_a_placeholder_path_of_such_a_digit_names_nothing() -> None:
    with pytest.raises(PlaceholderError, match="has no"):
        resolve({"a": f"@input.tags.{SUPERSCRIPT_TWO}"}, {"input": {"tags": [1, 2, 3]}})


def test_config_pointers_of_such_a_digit_sort_and_name_no_hook() -> None:
    assert _pointer_index(f"/hooks/{SUPERSCRIPT_TWO}") is None
    pointers = ["/hooks/10", f"/hooks/{SUPERSCRIPT_TWO}", "/hooks/2"]
    assert sorted(pointers, key=pointer_key) == [
        "/hooks/2",
        "/hooks/10",
        f"/hooks/{SUPERSCRIPT_TWO}",
    ]


def test_a_server_s_request_id_of_such_a_digit_stays_a_string() -> None:
    from mcpx_hooks.supervisor.tools.mcpclient import _key  # it loads the MCP SDK

    assert _key(SUPERSCRIPT_TWO) == SUPERSCRIPT_TWO and _key("12") == 12


@pytest.mark.parametrize(
    ("code", "variable"),
    [
        ("from mcpx_hooks.runners.launcher import open_frames; open_frames()", "MCPX_FRAMES_FD"),
        (
            "from mcpx_hooks.runners.mcpx_channel import CallError, Calls, Frames\n"
            "try:\n    Calls(Frames(None)).call('t')\nexcept CallError as e:\n    print(e)",
            "MCPX_CALLS_FD",
        ),
    ],
)
def test_a_runner_given_such_a_descriptor_says_so_without_a_traceback(
    code: str, variable: str
) -> None:
    env = {**os.environ, variable: SUPERSCRIPT_TWO}
    done = subprocess.run(
        [sys.executable, "-c", code], check=False, env=env, capture_output=True, text=True
    )
    assert "ValueError" not in done.stderr, done.stderr
    assert variable in done.stdout + done.stderr
