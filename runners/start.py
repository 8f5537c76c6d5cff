"""Starting the child's program: finding it, the signals it starts with, and the fork and
exec used where `posix_spawn` cannot do what a request asks.

Standard library only.
"""

from __future__ import annotations

import errno
import os
import signal
import stat
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .spawnreq import Request

#: Past the highest fd a process here can have (`os.closerange` bound).
MAX_FD = 1 << 20


class StartError(Exception):
    """The child could not be started; the message says why, for the owner."""


def quoted(text: str) -> str:
    """`text` as a message names it: as it is, in quotes. Not `repr`, whose escapes (a
    backslash doubled, a quote escaped) would hide a secret's value from the supervisor's
    redactor, which looks for the value as it is (or JSON-escaped); a view that prints the
    message escapes what a terminal would act on."""
    return f"'{text}'"


def resolve(argv0: str, path: str) -> str:
    """The program to exec: a name with a slash as given (relative to cwd), else from PATH."""
    if "/" in argv0:
        return argv0
    for d in path.split(":"):
        cand = os.path.join(d or ".", argv0)
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    raise StartError(f"cannot start {quoted(argv0)}: not found on PATH")


#: Signals the spawned program starts with at their default action (Python ignores some).
DEFAULT_SIGNALS = (
    signal.SIGPIPE,
    signal.SIGXFSZ,
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGCHLD,
)


#: What the standard library may still raise on bad input past `Request` (a string it cannot
#: encode, a number it cannot convert): caught around each start, it fails that request only.
#: `Request` checks what it can see, so this should never be needed.
BAD_INPUT = (ValueError, TypeError, OverflowError)


def start_failed(program: str, exc: OSError, req: Request) -> StartError:
    why = exc.strerror
    if exc.errno == errno.E2BIG:
        why = f"{why}: {too_big(req.argv, req.env)}"
    elif exc.errno == errno.EACCES and "/" in program:  # (a bare name: found on PATH)
        why = f"{why}{_no_program(os.path.join(req.cwd, program))}"
    return StartError(f"cannot start {quoted(program)}: {why}")


def _no_program(path: str) -> str:
    """Why `path`, which `execve` refused (EACCES), is no program, when its mode says so (a
    directory; a file without an execute bit: a script written and not made executable);
    else nothing (a sandbox's refusal, a directory on the way)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return ""
    if stat.S_ISDIR(mode):
        return ": it is a directory"
    if stat.S_ISREG(mode) and not mode & 0o111:
        return (
            ": the file is not executable (chmod +x it, or name its interpreter first:"
            " sh FILE, python3 FILE)"
        )
    return ""


def too_big(argv: list[str], env: dict[str, str]) -> str:
    """What `execve` found too large (E2BIG): one string over MAX_ARG_STRLEN (32 pages), or
    all of them, each with its pointer, over what the stack's limit leaves them (ARG_MAX)."""
    one = 32 * os.sysconf("SC_PAGESIZE")
    sizes = [(f"argv[{i}]", len(os.fsencode(a)) + 1) for i, a in enumerate(argv)]
    sizes += [(f"the variable {k}", len(os.fsencode(f"{k}={v}")) + 1) for k, v in env.items()]
    for name, size in sizes:
        if size > one:
            return f"{name} is {size:,} bytes, over the {one:,} a program takes in one string"
    total = sum(size + 8 for _, size in sizes)
    return (
        f"argv ({len(argv):,} items) and the environment ({len(env):,} variables) take"
        f" {total:,} bytes, over what a program takes in all (about"
        f" {os.sysconf('SC_ARG_MAX'):,} bytes here)"
    )


def fork_exec(req: Request, program: str, confine: Callable[[], None] | None = None) -> int:
    """Starts the child by fork: for limits that cannot be borrowed, set in the fork, then
    `confine` (the sandbox's last steps, in the forked child only), then `execve`.

    The forked child says why it could not exec on a close-on-exec pipe; end of file on it
    means the exec happened.
    """
    err_r, err_w = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:
        why = f"cannot start {quoted(program)}"
        try:
            os.setsid()
            for sig in DEFAULT_SIGNALS:
                signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_SETMASK, ())
            for moved, target in req.pairs:
                os.dup2(moved, target)
            req.setrlimits()
            if confine is not None:  # (it uses fds of the spawner's: its Landlock ruleset)
                confine()
            # Only the child's own fds from here: the spawner's (close-on-exec, but open
            # until the exec) would fill an open-files limit set below their numbers.
            top = max((target for _, target in req.pairs), default=-1) + 1
            os.closerange(top, err_w)
            os.closerange(err_w + 1, MAX_FD)
            os.execve(program, req.argv, req.env)
        except StartError as exc:
            why = str(exc)
        except OSError as exc:
            why = str(start_failed(program, exc, req))
        finally:
            os.write(err_w, why.encode())
            os._exit(127)
    os.close(err_w)
    try:
        failed = read_all(err_r)
    finally:
        os.close(err_r)
    if failed:
        os.waitpid(pid, 0)
        raise StartError(failed.decode(errors="replace"))
    return pid


def read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 4096):
        chunks.append(chunk)
    return b"".join(chunks)
