"""`prompts list|show KEY|promote KEY [--to FILE]|clear`: the cache of prompt hooks' answers.

A prompt hook's `run` or `propose` answer is kept (`models/promptcache.py`), so the same
instruction over the same data gives the same command on every run. `list` shows each entry
(its key, hook, age, and the argv or value), `show` one, `clear` removes them all, and
`promote` turns a cached command into a `run` hook in the file that declared the prompt hook
(`config/hookrewrite.py`), so the generated script becomes a reviewed, deterministic hook.

A KEY may be shortened to any unique prefix of four or more characters. Exit codes: 0 done;
1 a file or the cache could not be written; 2 bad input (no state directory, an unknown or
ambiguous key, an answer with no command to promote, a file that changed since, a file that
would not validate). Everything printed from the cache is shown with control characters
escaped: an entry is the model's text.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from pathlib import Path

from ..core.places import shown_file
from .common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, say, usage

TYPE_CHECKING = False  # as typing.TYPE_CHECKING (True to type checkers), without importing typing
if TYPE_CHECKING:
    import argparse
    from typing import Any, Final

    from ..models.promptcache import CachedAnswer, PromptCache

#: The shortest key prefix accepted for KEY.
MIN_PREFIX: Final = 4
#: How much of a key `list` shows.
SHOWN_KEY: Final = 12
#: How much of a proposed value `list` shows.
SHOWN_VALUE: Final = 60


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = sub.add_parser("list", help="the cached answers: key, hook, age, argv or value")
    listing.add_argument("--json", action="store_true", help="a JSON array of the entries")
    show = sub.add_parser("show", help="one cached answer")
    show.add_argument("key", metavar="KEY", help="its key (or a unique prefix)")
    show.add_argument("--json", action="store_true", help="the entry as JSON")
    promote = sub.add_parser(
        "promote", help="write a cached command as a run hook in place of its prompt hook"
    )
    promote.add_argument("key", metavar="KEY", help="its key (or a unique prefix)")
    promote.add_argument(
        "--to",
        metavar="FILE",
        help="append the run hook to FILE instead (the prompt hook is left as it is)",
    )
    sub.add_parser("clear", help="remove every cached answer")


def run(args: argparse.Namespace) -> int:
    from ..models.promptcache import PromptCache

    cache = PromptCache.open(os.environ)
    command = f"prompts {args.action}"
    if cache is None:
        return usage(command, _no_cache())
    why = cache.unusable()
    if why is not None:  # (else its entries would be said to be none, and clear to remove 0)
        say(f"mcpx-hooks {command}: the cache of prompt answers {why}")
        return EXIT_FAILED
    if args.action == "list":
        return _list(cache, as_json=args.json)
    if args.action == "clear":
        return _clear(cache)
    found = _lookup(cache, args.key, command)
    if isinstance(found, int):
        return found
    key, entry = found
    if args.action == "show":
        return _show(key, entry, as_json=args.json)
    return _promote(key, entry, args.to)


def _no_cache() -> str:
    from ..models.promptcache import PromptCache

    return PromptCache.refused(os.environ)


def _lookup(cache: PromptCache, given: str, command: str) -> tuple[str, CachedAnswer] | int:
    """The entry KEY names (the whole key or a unique prefix), or the exit code of saying
    why there is none."""
    from ..models.promptcache import is_key

    wanted = given.strip().lower()
    if is_key(wanted):
        entry = cache.get(wanted)
        if entry is not None:
            return wanted, entry
        if wanted in cache.unreadable():
            why = f"the cache file {cache.path(wanted)} cannot be read (prompts clear removes it)"
            return usage(command, why)
        return usage(command, f"no cached answer {_safe(given)} (prompts list shows them)")
    if len(wanted) < MIN_PREFIX or not all(c in "0123456789abcdef" for c in wanted):
        return usage(
            command,
            f"expected a key (or {MIN_PREFIX}+ of its hex digits), found {given!r}",
        )
    matches = [(k, e) for k, e in cache.entries() if k.startswith(wanted)]
    if len(matches) == 1:
        return matches[0]
    if matches:
        keys = ", ".join(k[:SHOWN_KEY] for k, _ in matches)
        return usage(command, f"{wanted} is the start of {len(matches)} keys: {keys}")
    return usage(command, f"no cached answer starts with {wanted} (prompts list shows them)")


def _list(cache: PromptCache, *, as_json: bool) -> int:
    from ..models.promptcache import entry_document

    entries = cache.entries()
    if as_json:
        print(json.dumps([entry_document(k, e) for k, e in entries], indent=2))
    elif not entries:
        print(f"no cached prompt answers ({shown_file(cache.directory)})")
    else:
        now = time.time()
        width = max(len(_safe(entry.hook)) for _, entry in entries)
        for key, entry in entries:
            age = _age(now - entry.created)
            hook = _safe(entry.hook)
            print(f"{key[:SHOWN_KEY]}  {hook:<{width}}  {age:>4}  {_what(entry)}")
    _say_unreadable(cache)
    return EXIT_OK


def _show(key: str, entry: CachedAnswer, *, as_json: bool) -> int:
    from ..models.promptcache import entry_document

    if as_json:
        print(json.dumps(entry_document(key, entry), indent=2))
        return EXIT_OK
    model = entry.model
    where = f"{entry.file}:{entry.pointer or '/'}" if entry.file else "not in a file"
    lines = [
        f"key       {key}",
        f"hook      {_safe(entry.hook)}",
        f"declared  {_safe(where)}",
        f"effect    {_safe(entry.effect)}",
        _safe(
            f"model     {model.get('name', '?')} ({model.get('provider', '?')}:"
            f" {model.get('model', '?')})"
        ),
        f"cached    {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(entry.created))}"
        f" ({_age(time.time() - entry.created)} ago)",
        f"answer    {_what(entry, full=True)}",
        "prompt",
        *(f"  {_safe(line)}" for line in entry.prompt.splitlines()),
    ]
    for line in lines:
        print(line)
    if entry.argv is not None and entry.file:
        print(f"promote it: mcpx-hooks prompts promote {key[:SHOWN_KEY]}")
    return EXIT_OK


def _promote(key: str, entry: CachedAnswer, to: str | None) -> int:
    from ..config.files import LOCAL_NAMES
    from ..config.hookrewrite import PromoteError, promote_answer

    command = "prompts promote"
    if entry.argv is None:
        return usage(
            command,
            f"the answer of {_safe(entry.hook)} is a proposed value, not a command: there is"
            " no argv to promote to a run hook (prompts show shows the value)",
        )
    if entry.file is None:
        return usage(
            command,
            f"{_safe(entry.hook)} was not declared in a file (a hook given on the command line"
            " or per call): write its run hook yourself, with the argv prompts show prints",
        )
    source = Path(entry.file)
    target = Path(to) if to is not None else None
    try:
        done = promote_answer(
            source,
            hook=entry.hook,
            pointer=entry.pointer,
            prompt=entry.prompt,
            argv=entry.argv,
            to=target,
        )
    except PromoteError as exc:
        print(f"mcpx-hooks {command}: {_safe(str(exc))}", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {_safe(str(problem))}", file=sys.stderr)
        return EXIT_USAGE if exc.bad_input else EXIT_FAILED
    argv = _safe(shlex.join(entry.argv))
    if done.appended:
        where = f"{shown_file(done.file)} at {done.pointer}"
        print(f"appended run hook {_safe(done.hook)} to {where}: {argv}")
        print(f"the prompt hook in {shown_file(source)} is left as it was: remove it there")
        if Path(os.path.abspath(done.file)).parent != Path(os.path.abspath(source)).parent:
            print(
                "note: a relative cwd, or a relative path in the argv, now resolves in"
                f" {shown_file(str(Path(os.path.abspath(done.file)).parent))}"
            )
    else:
        print(
            f"promoted {_safe(done.hook)} in {shown_file(done.file)} ({done.pointer}):"
            f" a run hook now: {argv}"
        )
    print("review the command: it is what the model wrote, and it now runs on every run")
    if done.file.name in LOCAL_NAMES:
        name = str(done.file)  # (as a shell takes it back: quoted, or in `$'…'`)
        again = shlex.quote(name) if name.isprintable() else shown_file(name)
        print(f"the file's SHA-256 changed; trust it again: mcpx-hooks trust {again}")
    return EXIT_OK


def _clear(cache: PromptCache) -> int:
    from ..models.promptcache import PromptCacheError

    try:
        removed = cache.clear()
    except PromptCacheError as exc:
        say(f"mcpx-hooks prompts clear: {exc}")
        return EXIT_FAILED
    where = shown_file(cache.directory)
    print(f"removed {removed} cached prompt answer{'s' * (removed != 1)} ({where})")
    return EXIT_OK


def _say_unreadable(cache: PromptCache) -> None:
    bad = cache.unreadable()
    if bad:
        print(
            f"mcpx-hooks prompts list: {len(bad)} cache file{'s' * (len(bad) != 1)} in"
            f" {shown_file(cache.directory)} cannot be read and"
            f" {'are' if len(bad) != 1 else 'is'} left"
            " out (prompts clear removes them)",
            file=sys.stderr,
        )


def _what(entry: CachedAnswer, *, full: bool = False) -> str:
    """The argv (as a shell would read it) or the proposed value, on one line."""
    if entry.argv is not None:
        return _safe(f"run: {shlex.join(entry.argv)}")
    propose: Any = entry.answer.get("propose", {})
    value = json.dumps(propose.get("value"), ensure_ascii=False)
    if not full and len(value) > SHOWN_VALUE:
        value = value[: SHOWN_VALUE - 1] + "…"
    return _safe(f"propose: {value}")


def _age(seconds: float) -> str:
    seconds = max(0, int(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _safe(text: str) -> str:
    """`text` with control characters (an escape sequence, a carriage return, a newline)
    and lone surrogates escaped, so an entry cannot rewrite the terminal it is shown on."""
    from .printable import printable

    return printable(text)
