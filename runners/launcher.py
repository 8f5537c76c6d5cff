"""Runs one Python script with the inline `source` phases spliced around it.

Standard library only; never imports the supervisor. Started as
`python -I -S -B launcher.py PLAN`, with the working directory of the run, a scrubbed
environment and `MCPX_FRAMES_FD` naming the write end of the frames channel. PLAN is a JSON
file::

    {"file": "/abs/script.py" | null, "code": "print(1)" | null,     exactly one of the two
     "sources": {"before": [...], "prefix": [...], "onSuccess": [...],
                 "onError": [...], "suffix": [...]},                   lists of Python lines
     "paths": ["/site-packages/dir", ...]}                             appended to sys.path

The launcher builds one program from the phases and execs it in one namespace, so names bound
by `before` lines are seen by every later phase::

    <before>                      module level
    <prefix>                      module level
    try:
        result = <the script>     see "The body" below
        <onSuccess>               `result` is bound; it may rebind it: the rebound value is sent
        <send the result line>
    except BaseException as error:
        <onError>                 `error` is bound
        raise                     always the original error
    finally:
        <suffix>

The program is compiled as `<mcpx-hooks launcher>`; a traceback through a spliced line shows
that line's text. Every phase sees `mcpx` (the helper, `mcpx_channel.py`) already imported. A
phase's lines are dedented as a block, then indented into the `try`: a triple-quoted string
spanning lines in `onSuccess`, `onError` or `suffix` gets that indentation in its text.

Rules:

* An exception in `onSuccess` lines fails the run like one from the body: `onError` runs and
  no result is sent.
* An exception (`Exception`, not other `BaseException`) raised by `onError` or `suffix` lines
  cannot change the outcome: it is logged (an `error` log line, its traceback on stderr) and the
  original error still propagates, or the run still succeeds.
* A failure in `before` or `prefix` lines happens outside the `try`: neither `onError` nor
  `suffix` runs; the exception line is still written.

The body. A `file` is run as a module named `__mcpx_script__`, compiled with its real path
(tracebacks show its real file and line); `code` is compiled as `<mcpx-hooks -c>`. The name
is not `__main__`, so an `if __name__ == "__main__":` block does NOT run: a script gives the
launcher a `main` instead. The result is the return value of `main()` if the module defines a
callable `main` (a coroutine it returns is run with `asyncio.run`); when there is no `main`, or
it returned None, the value of the last `mcpx.result(...)` call; else None. A failure while
loading the script (a missing file, a `SyntaxError`, a top-level raise) is the body failing.
`sys.exit()`, `sys.exit(0)` inside the body is a success (the run exits 0 and its result is
sent); any other `SystemExit` is a failure and the process exits with its code. `sys.argv` is
`[file]` or `["-c"]`; `sys.path` starts with the script's directory (the working directory for
`code`) and ends with `paths`; stdout is line-buffered.

The frames channel (`mcpx_channel.py` has its lines) takes the exception that ends the process,
which is then re-raised: Python reports it as usual, its traceback on stderr (without the
launcher's frames) and exit 1, `SystemExit(n)` exits n, `KeyboardInterrupt` ends the process by
SIGINT. A value that is not JSON (an unknown type, NaN, a cycle) is sent as its `repr` with a
`warning` log line. Without `MCPX_FRAMES_FD` (run by hand) the lines go to stderr, `mcpx: ` first.

The launcher's own failures (bad arguments, an unreadable or invalid plan, a bad
`MCPX_FRAMES_FD`, a phase that is not valid Python) print `mcpx-hooks launcher: …` on stderr,
write an exception line of type `LauncherError` when the channel is usable, and exit 2; no
phase runs.
"""

from __future__ import annotations

import builtins
import io
import json
import os
import sys
import textwrap
import types

TYPE_CHECKING = False  # typing costs ~7 ms of start-up; annotations are strings at run time
if TYPE_CHECKING:
    from typing import Any, Final

    from . import mcpx_channel
    from .mcpx_channel import Frames


def _sibling(name: str) -> types.ModuleType:
    """The module `name` of this folder. The launcher runs as a script, outside the package,
    and `python -I` puts no folder of ours on `sys.path`: it is there for this import only,
    and `sys.modules` is left as it was, so that a script's own module of that name is never
    found in ours' place, nor ours in its. (`importlib.util` would cost 3 ms of start-up.)"""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    theirs = sys.modules.pop(name, None)
    try:
        __import__(name)
    finally:
        del sys.path[0]
    ours = sys.modules.pop(name)
    sys.modules.update({name: theirs} if theirs is not None else {})
    return ours


if not TYPE_CHECKING:
    mcpx_channel = _sibling("mcpx_channel")
    Frames = mcpx_channel.Frames
FRAMES_FD_VAR: Final = mcpx_channel.FRAMES_FD_VAR
safe_str = mcpx_channel.safe_str

#: The phases that take inline source lines, in the order they are spliced: the script point's
#: phases (`supervisor/core/points.py`, held equal by a test).
PHASES: Final = ("before", "prefix", "onSuccess", "onError", "suffix")
#: The name the script's module runs under; not `__main__` (see the module docstring).
SCRIPT_MODULE: Final = "__mcpx_script__"
PROGRAM_FILENAME: Final = "<mcpx-hooks launcher>"
CODE_FILENAME: Final = "<mcpx-hooks -c>"
#: The program's line that runs the script (`build_program`): ours, left out of tracebacks.
BODY_CALL: Final = "    result = __mcpx__.run_script()"
#: Exit status when the launcher itself cannot start the script.
LAUNCHER_FAILED: Final = 2

_UNSET: Final = object()
#: The mark on an `OSError` of reading the script: said in one line (`print_exception`).
UNREADABLE: Final = "_mcpx_script_unreadable"


class LauncherError(Exception):
    """The launcher cannot start the script; reported in one line, exit 2."""


class Launcher:
    """The launcher's state, reachable from the generated program as `__mcpx__`."""

    def __init__(self, frames: Frames, file: str | None, code: str | None) -> None:
        self.frames = frames
        self.file = file
        self.code = code
        self.result: Any = _UNSET  # the last mcpx.result(...) value
        #: Texts of `<…>` filenames, put in linecache when a traceback is printed.
        self.texts: dict[str, str] = {}

    def run_script(self) -> Any:
        """The body: loads the script as `__mcpx_script__`, calls its `main`, returns the result."""
        module = types.ModuleType(SCRIPT_MODULE)
        if self.file is not None:
            from importlib.util import spec_from_file_location

            module.__file__ = self.file
            module.__spec__ = spec_from_file_location(SCRIPT_MODULE, self.file)
            module.__loader__ = module.__spec__.loader if module.__spec__ else None
        # Registered before it runs, as an import would: dataclasses and pickle look it up.
        sys.modules[SCRIPT_MODULE] = module
        module.__dict__["mcpx_call"] = sys.modules["mcpx"].call
        try:
            if self.file is not None:
                try:
                    with open(self.file, "rb") as f:
                        source: bytes | str = f.read()
                except OSError as exc:  # (said in one line, `print_exception`: not a traceback)
                    setattr(exc, UNREADABLE, True)
                    raise exc.with_traceback(None) from None
                filename = self.file
            else:
                assert self.code is not None
                source, filename = self.code, CODE_FILENAME
            exec(compile(source, filename, "exec", dont_inherit=True), module.__dict__)
            main = module.__dict__.get("main")
            value = main() if callable(main) else None
            if hasattr(value, "__await__"):
                value = _run_awaitable(value)
        except SystemExit as exc:
            if exc.code not in (None, 0):
                raise
            value = None
        if value is None and self.result is not _UNSET:
            value = self.result
        return value

    def send_result(self, value: Any) -> None:
        self.frames.send_value("result", value)

    def phase_failed(self, phase: str, exc: Exception) -> None:
        """An `onError` or `suffix` line raised: report it, leave the outcome as it was."""
        self.frames.log(
            f"script.{phase} lines raised {type(exc).__qualname__}: {safe_str(exc)}; "
            "the outcome is unchanged",
            "error",
            {"phase": phase, "exceptionType": type(exc).__qualname__},
        )
        print(
            f"mcpx-hooks launcher: script.{phase} lines failed (the outcome is unchanged):",
            file=sys.stderr,
        )
        self.print_exception(exc, chain=False)  # the chained original error is reported anyway

    def print_exception(self, exc: BaseException, *, chain: bool = True) -> None:
        """The traceback on stderr, with the text of spliced and `-c` lines, without the
        launcher's frames that lead into the script (`_without_launcher_frames`)."""
        import linecache
        import traceback

        if isinstance(exc, OSError) and getattr(exc, UNREADABLE, False):
            said = f"cannot read the script {exc.filename}: {exc.strerror or exc}"
            return print(f"mcpx-hooks launcher: {said}", file=sys.stderr, flush=True)
        for name, text in self.texts.items():
            linecache.cache[name] = (len(text), None, text.splitlines(True), name)
        program = self.texts.get(PROGRAM_FILENAME, BODY_CALL)
        seen: set[int] = set()
        chained: BaseException | None = exc
        while chained is not None and id(chained) not in seen:
            seen.add(id(chained))
            chained.__traceback__ = _without_launcher_frames(chained, program)
            chained = (chained.__cause__ or chained.__context__) if chain else None
        traceback.print_exception(exc, chain=chain)
        sys.stderr.flush()

    def excepthook(
        self, _type: type[BaseException], exc: BaseException, _tb: types.TracebackType | None
    ) -> None:
        self.print_exception(exc)


def build_program(sources: dict[str, list[str]]) -> str:
    """The program text: the phases spliced around the body (see the module docstring)."""

    def block(phase: str, indent: str) -> str:
        text = textwrap.dedent("\n".join(sources.get(phase, []))).strip("\n")
        if indent:  # a block needs a statement, whatever the phase holds (even only comments)
            text += "\npass"
        return textwrap.indent(f"# script.{phase}\n{text}", indent, lambda _line: True)

    return "\n".join(
        [
            block("before", ""),
            block("prefix", ""),
            "try:",
            BODY_CALL,
            block("onSuccess", "    "),
            "    __mcpx__.send_result(result)",
            "except BaseException as error:",
            "    try:",
            block("onError", "        "),
            "    except Exception as __mcpx_phase_error__:",
            "        __mcpx__.phase_failed('onError', __mcpx_phase_error__)",
            "    raise",
            "finally:",
            "    try:",
            block("suffix", "        "),
            "    except Exception as __mcpx_phase_error__:",
            "        __mcpx__.phase_failed('suffix', __mcpx_phase_error__)",
            "",
        ]
    )


def read_plan(path: str) -> tuple[str | None, str | None, dict[str, list[str]], list[str]]:
    """(file, code, sources, paths) from the plan file, checked."""
    try:
        with open(path, "rb") as f:
            plan = json.load(f)
    except (OSError, ValueError) as exc:
        raise LauncherError(f"cannot read the plan {path}: {exc}") from exc
    if not isinstance(plan, dict):
        raise LauncherError("the plan is not a JSON object")
    unknown = set(plan) - {"file", "code", "sources", "paths"}
    if unknown:
        raise LauncherError(f"unknown plan keys: {', '.join(sorted(unknown))}")
    file, code = plan.get("file"), plan.get("code")
    if (file is None) == (code is None):
        raise LauncherError("the plan needs exactly one of `file` and `code`")
    if not isinstance(file, str | None) or not isinstance(code, str | None):
        raise LauncherError("`file` and `code` must be strings")
    sources = plan.get("sources") or {}
    if not isinstance(sources, dict):
        raise LauncherError("`sources` must be an object")
    for phase, lines in sources.items():
        if phase not in PHASES:
            raise LauncherError(
                f"`sources` has no phase {phase!r} (source phases: {', '.join(PHASES)})"
            )
        if not _is_str_list(lines):
            raise LauncherError(f"`sources.{phase}` must be a list of strings")
    paths = plan.get("paths") or []
    if not _is_str_list(paths):
        raise LauncherError("`paths` must be a list of strings")
    return (os.path.abspath(file) if file is not None else None), code, sources, paths


def open_frames() -> Frames:
    """The channel named by MCPX_FRAMES_FD, or stderr when it is unset or empty."""
    value = os.environ.get(FRAMES_FD_VAR, "")
    if not value:
        return Frames(None)
    if not (value.isascii() and value.isdigit()):
        raise LauncherError(f"{FRAMES_FD_VAR}={value!r} is not a file descriptor number")
    fd = int(value)
    try:
        os.fstat(fd)
    except OSError as exc:
        raise LauncherError(f"{FRAMES_FD_VAR}={fd} is not an open file descriptor") from exc
    return Frames(fd)


def check_phases(sources: dict[str, list[str]]) -> None:
    """Each phase compiles on its own, so a typo is reported with its phase and line."""
    for phase, lines in sources.items():
        text = textwrap.dedent("\n".join(lines))
        try:
            compile(text, f"<script.{phase}>", "exec", dont_inherit=True)
        except SyntaxError as exc:
            raise LauncherError(
                f"script.{phase} line {exc.lineno}: {exc.msg}: {(exc.text or '').strip()!r}"
            ) from exc


def main(argv: list[str]) -> int:
    frames: Frames | None = None
    try:
        if len(argv) != 2:
            raise LauncherError("usage: launcher.py PLAN_JSON_PATH")
        frames = open_frames()
        file, code, sources, paths = read_plan(argv[1])
        check_phases(sources)
        program = build_program(sources)
        try:
            compiled = compile(program, PROGRAM_FILENAME, "exec", dont_inherit=True)
        except SyntaxError as exc:  # phases valid alone, not spliced (a misplaced __future__)
            raise LauncherError(f"the spliced program does not compile: {exc}") from exc
    except LauncherError as exc:
        print(f"mcpx-hooks launcher: {exc}", file=sys.stderr)
        if frames is not None:
            frames.send_exception(exc)
        return LAUNCHER_FAILED

    launcher = Launcher(frames, file, code)
    launcher.texts[PROGRAM_FILENAME] = program
    if code is not None:
        launcher.texts[CODE_FILENAME] = code
    sys.excepthook = launcher.excepthook
    sys.argv = [file if file is not None else "-c"]
    sys.path[:0] = [os.path.dirname(file) if file is not None else os.getcwd()]
    sys.path.extend(paths)
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=True)
    mcpx = mcpx_channel.make_mcpx_module(launcher)
    sys.modules["mcpx"] = mcpx
    namespace: dict[str, Any] = {
        "__name__": "__mcpx_launcher__",
        "__builtins__": builtins,
        "__mcpx__": launcher,
        "mcpx": mcpx,
        "mcpx_call": mcpx.call,
    }
    try:
        exec(compiled, namespace)
    except SystemExit as exc:
        if exc.code not in (None, 0):
            frames.send_exception(exc)
        raise
    except BaseException as exc:
        frames.send_exception(exc)
        # sys.excepthook prints it; an import inside the hook makes Python 3.11 forget an
        # unhandled KeyboardInterrupt (exit 1 instead of dying by SIGINT), so import now.
        for name in ("linecache", "traceback"):
            __import__(name)
        raise
    return 0


def _run_awaitable(value: Any) -> Any:
    import asyncio  # only for async scripts: importing it costs about half the start-up

    async def wait() -> Any:
        return await value

    coroutine = value if isinstance(value, types.CoroutineType) else wait()
    return asyncio.run(coroutine)


#: The launcher's files, whose frames lead into the script.
_OURS: Final = frozenset((__file__, mcpx_channel.__file__))


def _without_launcher_frames(exc: BaseException, program: str) -> types.TracebackType | None:
    """`exc`'s traceback without our frames leading into the script (a script that does not
    compile: none, `module_runner.without_frames`): the launcher's files' and the program's
    call of the body (a spliced line's frame stays)."""
    body = program.splitlines().index(BODY_CALL) + 1

    def ours(entry: types.TracebackType) -> bool:
        name = entry.tb_frame.f_code.co_filename
        return name in _OURS or (name == PROGRAM_FILENAME and entry.tb_lineno == body)

    return _sibling("module_runner").without_frames(exc, ours)  # type: ignore[no-any-return]


def _is_str_list(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
