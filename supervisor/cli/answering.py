"""How `exec` answers a hook's `ask`: `--yes` / `--no` answer every one; on a terminal (stdin
and stderr both a TTY) the person is asked on stderr and types y or n (an empty line is the
ask's default, as its deadline is, and the prompt says so); otherwise nobody answers and the
ask's deadline brings its default.

The prompt reads the terminal only when it is readable (a whole line, in the terminal's
line mode), so a prompt whose ask was settled meanwhile (the deadline passed, a client of
the service answered) is simply cancelled and leaves nothing half-read behind.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Final

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any, TextIO

    from ..core.effects import AnsweredBy
    from ..run.scriptrun import Run
    from ..service.answering import Deliver, Responder

#: What a person may type, and the answer it is. An empty line takes the ask's default.
TYPED: Final = {"y": "yes", "yes": "yes", "n": "no", "no": "no"}


def add_arguments(x: argparse.ArgumentParser) -> None:
    answers = x.add_mutually_exclusive_group()
    answers.add_argument(
        "--yes", action="store_true", help="answer yes to every question a hook asks"
    )
    answers.add_argument(
        "--no", action="store_true", help="answer no to every question a hook asks"
    )


def responder(args: argparse.Namespace) -> Responder | None:
    """Who answers this `exec`'s asks: its flag, the person at the terminal, or nobody."""
    from ..core.effects import NO, YES, AnsweredBy

    if args.yes or args.no:
        word = YES if args.yes else NO

        async def flag(frame: Mapping[str, Any]) -> tuple[str, AnsweredBy]:
            print(f"{_asks(frame)} -> {word} (--{word})", file=sys.stderr, flush=True)
            return word, AnsweredBy.FLAG

        return flag
    # `--stdin -` gave the terminal's input to the script.
    if args.stdin != "-" and sys.stdin.isatty() and sys.stderr.isatty():
        return TerminalPrompt(sys.stdin.fileno(), sys.stderr)
    return None


def local(run: Run) -> Deliver:
    """Where an in-process `exec`'s answers go: the run's own asks."""

    async def deliver(ask_id: str, word: str, by: AnsweredBy) -> None:
        refused = run.asks.answer(ask_id, word, by)
        if refused is not None:
            from .common import say

            say(f"mcpx-hooks exec: the answer was not taken: {refused}")

    return deliver


def _asks(frame: Mapping[str, Any]) -> str:
    """The question as the terminal is shown it: the hook's words are its data (no control
    character reaches the terminal, a line break goes on as an indented line)."""
    from .printable import bounded, continued

    return continued(f"{frame.get('hook')} asks: {bounded(str(frame.get('question')))}")


def prompt_hint(default: str, seconds: float) -> str:
    """What the terminal's question says it takes, the default's two ways included: an empty
    line (Enter alone) and the deadline both answer it, `[y/n; Enter or 30 s answers no]`."""
    return f"[y/n; Enter or {seconds:g} s answers {default}]"


class TerminalPrompt:
    """Asks one question at a time on `out` and reads the answer from the terminal `fd`.
    A question settled otherwise (its deadline, another's answer, the run cancelled) ends
    its prompt's line with a note when the watcher says so (`settled`), before the frame
    that settled it is shown, or else when its task is cancelled."""

    def __init__(self, fd: int, out: TextIO) -> None:
        import trio

        self._fd = fd
        self._out = out
        self._lock = trio.Lock()
        self._open: str | None = None  # the askId whose prompt holds the line

    def settled(self, ask_id: str) -> None:
        if self._open is not None and self._open == ask_id:
            self._open = None
            self._say("\n(settled without this answer; see the hook's line)\n")

    async def __call__(self, frame: Mapping[str, Any]) -> tuple[str, AnsweredBy] | None:
        import trio

        from ..core.effects import AnsweredBy

        default = str(frame.get("default"))
        seconds = int(frame.get("deadlineMs") or 0) / 1000
        async with self._lock:
            self._say(f"{_asks(frame)} {prompt_hint(default, seconds)} ")
            self._open = ask_id = str(frame.get("askId"))
            try:
                while True:
                    await trio.lowlevel.wait_readable(self._fd)
                    try:
                        data = os.read(self._fd, 4096)
                    except OSError:  # the terminal went away (EIO): nobody can answer
                        data = b""
                    if not data:  # the terminal is closed: nobody is there to answer
                        self._open = None
                        self._say("\n")
                        return None
                    typed = data.decode(errors="replace").strip().lower()
                    word = TYPED.get(typed, default if typed == "" else None)
                    if word is not None:
                        self._open = None
                        return word, AnsweredBy.TERMINAL
                    self._say("please type y or n: ")
            except trio.Cancelled:
                self.settled(ask_id)
                raise

    def _say(self, text: str) -> None:
        self._out.write(text)
        self._out.flush()
