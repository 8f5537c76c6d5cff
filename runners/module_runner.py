"""Runs one `module` hook: `python -I -S -B module_runner.py [--path DIR]… MODULE`, input on stdin.

Standard library only; never imports the supervisor. MODULE is a Python file (`hooks/check.py`,
relative to the working directory, which is the hook's declaring directory) or a dotted
`package.module`, either followed by `:function` (default `hook`). The function gets the
input as a dict and returns a dict (printed as the hook's JSON answer) or None (no opinion).
An `async def` hook is run with asyncio. What the module itself prints, and what the programs
it runs print, goes to stderr (fd 1 is stderr while it runs; the answer goes to a copy of
stdout, fd 3, close-on-exec).

The interpreter starts without `site` (it costs more than the rest of the start-up); the
supervisor passes its interpreter's site-packages directories as `--path`, so installed
packages import (`.pth` files are not processed).

stdin is read with an idle bound and a total bound, so a writer that stalls can never hang
this process beyond them. Any failure — a bad spec, an import error, an exception in the hook,
a return value that is not a dict — exits 1 with the reason (and the traceback) on stderr.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import os
import select
import sys
import time
import types
from collections.abc import Callable
from typing import Any

#: Longest wait for the next byte of stdin before giving up.
IDLE_BOUND_S = 5.0
#: Longest the whole of stdin may take, unless the hook's own timeout is shorter.
TOTAL_BOUND_S = 30.0
MAX_INPUT = 64 * 1024 * 1024
#: The hook's timeout in milliseconds, which bounds the whole of stdin when it is shorter (a
#: copy of the supervisor's name: `supervisor/core/hookenv.py`, held equal by a test).
TIMEOUT_VAR = "MCPX_HOOK_TIMEOUT_MS"
#: Containers inside containers that the supervisor reads in an answer, at most (a copy of
#: `supervisor/core/jsontext.py`'s `MAX_DEPTH`, held equal by a test).
MAX_DEPTH = 128
#: Why a return value holding `float("nan")` or an infinity is no answer.
NOT_JSON_NUMBERS = "it holds NaN or Infinity, not JSON numbers"


class RunnerError(Exception):
    """A failure the runner reports in one line, without a traceback."""


def read_stdin(idle: float, total: float) -> bytes:
    """All of stdin, waiting at most `idle` for each chunk and `total` for all of it."""
    fd = sys.stdin.fileno()
    deadline = time.monotonic() + total
    chunks: list[bytes] = []
    size = 0
    while True:
        left = deadline - time.monotonic()
        ready = select.select([fd], [], [], max(0.0, min(idle, left)))[0]
        if not ready:
            if left <= idle:
                raise RunnerError(f"stdin not finished within {total:g} s")
            raise RunnerError(f"stdin idle for {idle:g} s before its end")
        chunk = os.read(fd, 65536)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > MAX_INPUT:
            raise RunnerError(f"stdin over {MAX_INPUT} bytes")
        chunks.append(chunk)


def load(spec: str) -> Callable[[dict[str, Any]], Any]:
    """The hook function named by MODULE."""
    target, _, func = spec.partition(":")
    func = func or "hook"
    if target.endswith(".py") or "/" in target:
        path = os.path.abspath(target)
        # A file the sandbox hides (not there, or not readable, from inside it) failed with
        # the runner's and importlib's frames: said in one line, with where a hook may read.
        grant = "a hook reads its declaring and working directories; grant more with [sandbox] read"
        inside = path.startswith(os.getcwd().rstrip("/") + "/")
        try:
            with open(path, "rb"):
                pass
        except FileNotFoundError:
            where = os.getcwd() if inside else f"{os.getcwd()}; {grant}"
            raise RunnerError(f"module file not found: {target} (in {where})") from None
        except OSError as exc:
            hint = f" ({grant})" if isinstance(exc, PermissionError) else ""
            raise RunnerError(
                f"module file cannot be read: {target}: {exc.strerror}{hint}"
            ) from None
        name = "_mcpx_hook_" + os.path.splitext(os.path.basename(path))[0]
        module_spec = importlib.util.spec_from_file_location(name, path)
        if module_spec is None or module_spec.loader is None:
            raise RunnerError(f"cannot load {target}")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module
        sys.path.insert(0, os.path.dirname(path))
        module_spec.loader.exec_module(module)
    else:
        sys.path.insert(0, os.getcwd())
        try:
            module = importlib.import_module(target)
        except ModuleNotFoundError as exc:
            if exc.name is None or not (target + ".").startswith(exc.name + "."):
                raise  # a module the hook's own code imports: its traceback says where
            raise RunnerError(
                f"module not found: {target} "
                f"(no such module in {os.getcwd()} or the installed packages)"
            ) from None
    fn = getattr(module, func, None)
    if fn is None:
        raise RunnerError(f"{target} has no function {func!r}")
    if not callable(fn):
        raise RunnerError(f"{target}:{func} is {type(fn).__name__}, not a function")
    return fn  # type: ignore[no-any-return]


def main(argv: list[str]) -> int:
    args = argv[1:]
    while len(args) > 2 and args[0] == "--path":
        sys.path.append(args[1])
        del args[:2]
    if len(args) != 1:
        print(
            "usage: module_runner.py [--path DIR]... PATH.py[:function] | "
            "package.module[:function]",
            file=sys.stderr,
        )
        return 1
    return run(args[0])


def run(spec: str) -> int:
    """Runs the hook named by `spec` on the JSON object on stdin; returns the exit code.

    Shared by a cold start (`main`) and the warm runner's forked child (`warm.py`), which
    has set up the same process state first.
    """
    timeout_ms = os.environ.get(TIMEOUT_VAR, "")
    total = (
        min(TOTAL_BOUND_S, int(timeout_ms) / 1000)
        if timeout_ms.isascii() and timeout_ms.isdigit()
        else TOTAL_BOUND_S
    )
    out = sys.stdout
    # What the module prints (a progress line, a debug print) goes to stderr, kept on the
    # hook's frame: stdout holds the answer alone, which a line printed before it would
    # turn into plain text (advice), and a refusal into none. So does what reaches fd 1
    # otherwise (a subprocess the hook runs, `os.write(1, …)`, a C library): fd 1 is made
    # stderr, and the answer goes to a copy of stdout that no child inherits.
    sys.stdout.flush()
    answer_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        raw = read_stdin(IDLE_BOUND_S, total)
        payload = json.loads(raw) if raw.strip() else {}
        if not isinstance(payload, dict):
            raise RunnerError("stdin is not a JSON object")
        fn = load(spec)
        answer = fn(payload)
        if hasattr(answer, "__await__"):
            import asyncio  # only for async hooks: importing it costs ~half the start-up

            answer = asyncio.run(answer)
    except RunnerError as exc:
        print(f"mcpx-hooks module runner: {exc}", file=sys.stderr)
        return 1
    except SystemExit as exc:  # the hook ended itself: an end, said in a sentence, not a crash
        if exc.code is not None and exc.code != 0:
            return _exited(spec, exc.code)
        answer = None  # `sys.exit()`, `sys.exit(0)`: as `return None`, ok with no answer
    except BaseException as exc:  # the hook's own failure: its traceback, from its own frames
        import traceback  # here: the spawner, which imports this module, need not load it

        exc.__traceback__ = _without_runner_frames(exc)
        traceback.print_exception(exc)
        return 1
    finally:
        sys.stdout = out
    if answer is None:
        return 0
    if not isinstance(answer, dict):
        print(
            f"mcpx-hooks module runner: {spec} returned {type(answer).__name__}, "
            "expected a dict or None",
            file=sys.stderr,
        )
        return 1
    try:
        text = answer_json(answer).encode()
    except RunnerError as exc:
        print(
            f"mcpx-hooks module runner: {spec} returned a dict that is not JSON: {exc}",
            file=sys.stderr,
        )
        return 1
    with open(answer_fd, "wb") as answer_out:
        answer_out.write(text)
    return 0


def answer_json(answer: dict[str, Any]) -> str:
    """The hook's return value as its JSON answer, or `RunnerError` saying why it is none.

    Python's `json` writes NaN and Infinity, which are not JSON: the supervisor refused the
    text and blamed stdout, which the hook never wrote. Nesting past `MAX_DEPTH` it refuses
    too; past Python's recursion limit, `json` failed in the runner's own frames."""
    deep = f"nested deeper than {MAX_DEPTH} levels"
    try:
        text = json.dumps(answer, allow_nan=False)
    except RecursionError:
        raise RunnerError(deep) from None
    except ValueError as exc:
        nan = str(exc).startswith("Out of range float values")
        raise RunnerError(NOT_JSON_NUMBERS if nan else str(exc)) from None
    except TypeError as exc:
        raise RunnerError(str(exc)) from None
    if _deeper_than(answer, MAX_DEPTH):
        raise RunnerError(deep)
    return text


def _deeper_than(value: object, limit: int) -> bool:
    """`value` (which `json` could write: no cycle) has containers nested more than `limit`
    deep; walked without recursion."""
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        elif not isinstance(item, (list, tuple)):
            continue
        if depth + 1 > limit:
            return True
        stack.extend((inner, depth + 1) for inner in item)
    return False


def _exited(spec: str, code: object) -> int:
    """Says that the hook called `sys.exit(code)`, a failure (not a refusal), and the exit
    status it ends with: an integer's own (as a process's: 1 past 255), else 1."""
    print(f"mcpx-hooks module runner: {spec} called sys.exit({code!r})", file=sys.stderr)
    return code if isinstance(code, int) and not isinstance(code, bool) and 0 < code < 256 else 1


def _without_runner_frames(exc: BaseException) -> types.TracebackType | None:
    """`exc`'s traceback without the frames that lead into the hook's code (this runner's,
    and the import system's on its way to load the hook's file): a hook's author reads their
    own frames and error, and the stderr tail on the hook's frame holds them, not ours."""
    return without_frames(exc, lambda entry: _ours(entry.tb_frame.f_code.co_filename))


def without_frames(
    exc: BaseException, ours: Callable[[types.TracebackType], bool]
) -> types.TracebackType | None:
    """`exc`'s traceback without the entries that are `ours` up to the last one that is not
    (the code they lead into); one of ours after that (ours failing) is kept. A file that
    does not compile has no frame of its own (its `SyntaxError` says where): a `SyntaxError`
    whose entries are all ours keeps none. The launcher's too."""
    entries: list[types.TracebackType] = []
    tb = exc.__traceback__
    while tb is not None:
        entries.append(tb)
        tb = tb.tb_next
    mine = [ours(entry) for entry in entries]
    if isinstance(exc, SyntaxError) and all(mine):
        return None
    last_theirs = max((i for i, own in enumerate(mine) if not own), default=-1)
    kept = [e for i, e in enumerate(entries) if not mine[i] or i > last_theirs]
    trimmed: types.TracebackType | None = None
    for entry in reversed(kept):
        trimmed = types.TracebackType(trimmed, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return trimmed


def _ours(filename: str) -> bool:
    return filename in (__file__, importlib.__file__) or filename.startswith("<frozen importlib")


if __name__ == "__main__":
    # Ends as the warm runner's fork does (`warm.py`): at once, the answer written, without
    # waiting for threads the hook left running (a library's worker, a `threading.Timer`),
    # which would hold the answer back until the hook's timeout killed it.
    exit_code = main(sys.argv)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # closed by the hook: nothing to flush
            stream.flush()
    os._exit(exit_code)
