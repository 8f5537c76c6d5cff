"""`runners/chain.py`: a child that makes a chain of system calls, then execs, without a fork
of this process. Real children: what they print, how they end, what is left behind."""

from __future__ import annotations

import errno
import os
import signal

import pytest
from conftest import require_rootless

from mcpx_hooks.runners import chain
from mcpx_hooks.runners.chain import ARG0_SAVED, MAY_FAIL, SAVE, Chain, ChainError
from mcpx_hooks.runners.libc import AT_FDCWD, CLONE_NEWUSER, nr

pytestmark = pytest.mark.skipif(not chain.available(), reason="no chain routine on this machine")


def _exec(c: Chain, *argv: str) -> None:
    c.call(
        nr("execve"),
        c.pointer(argv[0].encode()),
        c.strings([a.encode() for a in argv]),
        c.strings([b"PATH=/usr/bin:/bin"]),
        what="exec",
    )


class Piped(Chain):
    """A chain whose first step makes a pipe of this process's its stdout."""

    def __init__(self) -> None:
        super().__init__()
        self.read, self.write = os.pipe2(os.O_CLOEXEC)
        self.call(nr("dup3"), self.write, 1, 0, what="stdout")


def _ran(c: Piped, flags: int = 0) -> tuple[int, bytes]:
    """Spawns `c`; its exit code and what it printed."""
    try:
        pid = c.spawn(flags)
    finally:
        os.close(c.write)
        with os.fdopen(c.read, "rb") as out:
            printed = out.read()
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), printed


def _no_child_left() -> bool:
    try:
        os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def test_the_calls_run_in_order_then_the_program() -> None:
    c = Piped()
    c.call(nr("write"), 1, b"first ", 6, what="write")
    c.call(nr("write"), 1, b"second ", 7, what="write")
    _exec(c, "/bin/echo", "then echo")
    assert _ran(c) == (0, b"first second then echo\n")
    assert _no_child_left()


def test_a_saved_result_is_the_next_calls_argument(tmp_path: os.PathLike[str]) -> None:
    target = os.path.join(tmp_path, "made")
    c = Piped()
    flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC
    c.call(nr("openat"), AT_FDCWD, target.encode(), flags, 0o600, what="open", flags=SAVE)
    c.call(nr("write"), None, b"through the saved fd", 20, what="write", flags=ARG0_SAVED)
    _exec(c, "/bin/true")
    assert _ran(c) == (0, b"")
    with open(target, encoding="ascii") as f:
        assert f.read() == "through the saved fd"


def test_a_failed_step_is_named_and_its_child_reaped() -> None:
    c = Piped()
    c.call(nr("write"), 1, b"x", 1, what="write")
    c.call(nr("close"), -1, what="closing fd -1")
    _exec(c, "/bin/echo", "never")
    with pytest.raises(ChainError) as caught:
        _ran(c)
    assert caught.value.what == "closing fd -1" and caught.value.errno == errno.EBADF
    assert _no_child_left()


def test_a_step_that_may_fail_does_not_stop_the_chain() -> None:
    c = Piped()
    c.call(nr("close"), -1, what="closing fd -1", flags=MAY_FAIL)
    _exec(c, "/bin/echo", "went on")
    assert _ran(c) == (0, b"went on\n")


def test_an_exec_that_fails_says_why() -> None:
    c = Piped()
    _exec(c, "/nonexistent/program")
    with pytest.raises(ChainError) as caught:
        _ran(c)
    assert caught.value.what == "exec" and caught.value.errno == errno.ENOENT
    assert _no_child_left()


def test_the_signal_mask_is_the_callers_again_and_the_childs_is_what_the_chain_sets() -> None:
    """Every signal is blocked around the clone: the caller's own mask comes back, and the
    child keeps them blocked until the chain says otherwise."""
    before = signal.pthread_sigmask(signal.SIG_BLOCK, ())
    grep = ("/bin/grep", "SigBlk", "/proc/self/status")
    blocked = Piped()
    _exec(blocked, *grep)
    code, printed = _ran(blocked)
    assert code == 0 and printed.split()[1].strip(b"0") != b""
    cleared = Piped()
    cleared.call(nr("rt_sigprocmask"), 2, bytes(8), None, 8, what="mask")
    _exec(cleared, *grep)
    assert _ran(cleared) == (0, b"SigBlk:\t0000000000000000\n")
    assert signal.pthread_sigmask(signal.SIG_BLOCK, ()) == before


def test_a_user_namespace_of_its_own() -> None:
    require_rootless()  # (an ordinary user where user namespaces are refused cannot)
    c = Piped()
    _exec(c, "/bin/readlink", "/proc/self/ns/user")
    code, printed = _ran(c, CLONE_NEWUSER)
    assert code == 0 and printed.strip() != os.readlink("/proc/self/ns/user").encode()
