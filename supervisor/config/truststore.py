"""The trust state file: where it is, read without trusting it, written atomically.

`trust.json` in the state directory (`statefiles.state_path`: `$XDG_STATE_HOME/mcpx-hooks/`,
else `$HOME/.local/state/mcpx-hooks/`, else under the password database's home); without a
home anywhere there is no state, and nothing is trusted. The file is 0600 in a 0700
directory; a write goes to a temporary file in the same directory, synced, then renamed over
the old one, so a reader sees the old state or the new, never part of one. Writers take an
exclusive lock (`trust.json.lock` beside it) around read-modify-write, so two `mcpx-hooks
trust` at once lose neither's file.

A state file that cannot be believed is never a traceback: `load_state` returns an empty
state and the reason (not a regular file, not the user's own, writable by others, too large,
unreadable, not the document `trust.py` describes). No trio: `loading.py` reads it on its way
to a `Config`, and the `trust` command reads and writes it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from ..core.places import shown_file
from .privatefile import write_private
from .statefiles import StateError, denied_said, exposed, make_state_dir, read_private
from .trust import MAX_STATE_BYTES, TrustState, TrustStateError, parse_state, state_text


def trust_key(path: str | Path, real_dir: str = "") -> str:
    """Where a project file is, as the state names it: its directory with symlinks resolved
    (`real_dir`, when it is known already), and its own name (a symlinked file is pinned by
    its content, at its own place, since relative paths in it resolve against the directory
    it is found in)."""
    absolute = os.path.abspath(path)
    directory = real_dir or os.path.realpath(os.path.dirname(absolute))
    return os.path.join(directory, os.path.basename(absolute))


def load_state(path: Path | None) -> tuple[TrustState, str | None]:
    """The state, or an empty one and why the file cannot be believed (None: it is fine, or
    there is none yet)."""
    if path is None:
        return TrustState(), None
    try:
        data = read_private(path, limit=MAX_STATE_BYTES)
    except FileNotFoundError:
        return TrustState(), None
    except StateError as exc:
        return TrustState(), f"{exc}: nothing is trusted until it is fixed or removed"
    try:
        return parse_state(data), None
    except TrustStateError as exc:
        return TrustState(), (
            f"the trust state file {shown_file(str(path))} is not valid ({exc}): nothing is"
            " trusted until it is fixed or removed"
        )


@contextlib.contextmanager
def locked_state(path: Path) -> Iterator[TrustState]:
    """The state under an exclusive lock, for a read-modify-write (`save_state` inside).
    A file that cannot be believed is `StateError`: a command that writes never overwrites
    what it could not read (the person decides what to do with it)."""
    try:
        make_state_dir(path.parent)
    except OSError as exc:
        raise StateError(
            f"cannot open the trust state in {shown_file(str(path.parent))}:"
            f" {denied_said(exc, path.parent)}",
            bad_input=False,
        ) from None
    # Before the lock is opened: there, another user's symlink in its place would have it
    # made (or opened) wherever they chose, as this user. (What it saved would not be read.)
    if (holder := exposed(path.parent)) is not None:
        raise StateError(
            f"the trust state cannot be kept in {holder}: another user could change it"
        )
    flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
    lock = path.with_name(path.name + ".lock")
    try:
        lock_fd = os.open(lock, flags, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise StateError(
                f"the trust state's lock {shown_file(str(lock))} is a symlink, which is never"
                " followed: remove it",
                bad_input=False,
            ) from None
        raise StateError(
            f"cannot open the trust state in {shown_file(str(path.parent))}:"
            f" {denied_said(exc, path.parent)}",
            bad_input=False,
        ) from None
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
        try:
            data = read_private(path, limit=MAX_STATE_BYTES)
        except FileNotFoundError:
            yield TrustState()
            return
        try:
            state = parse_state(data)
        except TrustStateError as exc:
            raise StateError(
                f"the trust state file {shown_file(str(path))} is not valid ({exc}); move it away"
                " to start again"
            ) from None
        yield state
    finally:
        os.close(lock_fd)


def save_state(path: Path, state: TrustState) -> None:
    """Writes `state` to `path` atomically, 0600 (see the module docstring); never one larger
    than `MAX_STATE_BYTES`, nor one that is not JSON, which every reader would refuse
    (everything untrusted, every server's pin unchecked): `StateError`, and the file is left
    as it was."""
    try:
        text = state_text(state).encode()
    except ValueError:  # (a pinned tool list holding NaN or Infinity)
        raise StateError(
            f"the trust state file {shown_file(str(path))} would not be JSON (a value in it is"
            " NaN or Infinity): not written",
            bad_input=False,
        ) from None
    if len(text) > MAX_STATE_BYTES:
        raise StateError(
            f"the trust state file {shown_file(str(path))} would be larger than"
            f" {MAX_STATE_BYTES} bytes: not written",
            bad_input=False,
        )
    try:
        write_private(path, text)
    except OSError as exc:
        raise StateError(
            f"cannot write the trust state file {shown_file(str(path))}: {denied_said(exc, path)}",
            bad_input=False,
        ) from None
