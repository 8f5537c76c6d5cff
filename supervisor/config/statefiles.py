"""The files kept in the state directory, and how they are read without being trusted.

`$XDG_STATE_HOME/mcpx-hooks/` (an absolute `XDG_STATE_HOME`), else
`$HOME/.local/state/mcpx-hooks/` (an absolute `HOME`), else `.local/state/mcpx-hooks/` in the
user's home by the password database (`state_home`); without any there is none. Every state
file finds it this one way. It holds the trust state
(`truststore.py`) and, beside it, code compiled once and kept for the next start: the config
schema's check (`schemacache.py`) and the methods attrs writes for each class
(`codecache.py`).

A file there is read only when it is a regular file of this user's that no one else may
write, of bounded size, in a directory no one else could have put it in (`read_private`,
`exposed`). Kept code is sealed (`read_sealed`, `write_sealed`):

    <magic>
    <key: what the code was compiled for>
    <sha256 of the payload>
    <payload>

so that a file of another version, or one cut short or changed, is ignored, never believed.
Standard library only, and no attrs class: the command line finds the code cache before
anything builds one, and `--version` still loads nothing it does not use.
"""

from __future__ import annotations

import errno
import functools
import grp
import os
import pwd
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from ..core.errors import HooksError
from ..core.places import shown_file

STATE_FILE: Final = Path("mcpx-hooks") / "trust.json"


class StateError(HooksError):
    """The state cannot be read or written; the message names the file and why.
    `bad_input`: the file is there and cannot be believed (not a failure to write)."""

    def __init__(self, message: str, *, bad_input: bool = True) -> None:
        super().__init__(message)
        self.bad_input = bad_input


def said_os_error(exc: OSError) -> str:
    """What went wrong, in words, without `[Errno N]` or the path said again."""
    return "a symlink loop" if exc.errno == errno.ELOOP else exc.strerror or str(exc)


def denied_said(exc: OSError, path: Path) -> str:
    """`said_os_error`, and for a permission refused in the state directory (`path`, or one
    above it named `mcpx-hooks`) that is not this user's, whose it is and what to do: one left
    by `sudo mcpx-hooks ...` (sudo keeps the user's HOME on some systems) is root's, and
    "Permission denied" said neither."""
    said = said_os_error(exc)
    state = next((p for p in (path, *path.parents) if p.name == STATE_FILE.parent.name), None)
    if exc.errno not in (errno.EACCES, errno.EPERM) or state is None:
        return said
    try:
        owner = os.lstat(state).st_uid
        me, whose = pwd.getpwuid(os.getuid()).pw_name, pwd.getpwuid(owner).pw_name
    except FileNotFoundError:
        return f"{said}: {why}" if (why := unmade(state)) else said
    except (OSError, KeyError):
        return said
    if owner == os.getuid():
        return said
    where = shown_file(str(state))
    if owner == 0:
        fix = f"sudo chown -R {me} {where}"
        return f"{said}: the state directory {where} is root's (made with sudo?): {fix}"
    return (
        f"{said}: the state directory {where} is {whose}'s: keep yours elsewhere (XDG_STATE_HOME)"
    )


def unmade(path: Path) -> str:
    """Why `path`, not there, cannot be made (a home that does not exist, as `nobody`'s
    /nonexistent, in a directory this user may not write), and, in the state directory,
    what to do; "" when that is not why. A run's warning and `doctor` say it alike."""
    missing = path
    while not os.path.lexists(missing.parent) and missing.parent != missing:
        missing = missing.parent
    if os.access(missing.parent, os.W_OK | os.X_OK):
        return ""
    why = f"{shown_file(str(missing))} does not exist, and {shown_file(str(missing.parent))}"
    if not any(p.name == STATE_FILE.parent.name for p in (path, *path.parents)):
        return f"{why} may not be written"
    return f"{why} may not be written: set XDG_STATE_HOME to a directory you can write"


def user_home(environ: Mapping[str, str]) -> str | None:
    """The user's home: an absolute `HOME`, else the one the password database gives this
    user (`HOME` unset, empty or relative, as under `env -i`); never a relative path (a
    `HOME` of `.` would make the working directory, a project's, the user's own place).
    None: no home anywhere."""
    home = environ.get("HOME", "")
    if not os.path.isabs(home):
        try:
            home = pwd.getpwuid(os.getuid()).pw_dir
        except KeyError:
            return None
    return home if os.path.isabs(home) else None


def state_home(environ: Mapping[str, str]) -> Path | None:
    """Where every state file is kept (the run history, the service's token, the trust
    state, the caches): an absolute `XDG_STATE_HOME`, else `.local/state` in the user's home
    (`user_home`). None: no home anywhere."""
    xdg = environ.get("XDG_STATE_HOME", "")
    if os.path.isabs(xdg):
        return Path(xdg)
    home = user_home(environ)
    return None if home is None else Path(home) / ".local" / "state"


def checkout_holding(state: Path, start: str | Path, *more: str | Path) -> str | None:
    """The git work tree of `start` (the nearest directory at or above it holding `.git`, as
    git finds its own) when the state directory `state` lies inside it, else that of the
    first of `more` it lies inside (a `serve`'s run: the request's cwd, then the one the
    process started in); else None. What lies there may have come with the checkout: a
    repository that ships `.state/mcpx-hooks/trust.json` naming its own hooks, or compiled
    code the supervisor would run, where a CI job set `XDG_STATE_HOME=$PWD/.state`. So a
    state directory inside the checkout a command works in trusts none of that checkout's
    files, and no code is read from it (the callers: the trust gate, `trust`, the code,
    schema and prompt caches)."""
    for other in more:
        if (tree := checkout_holding(state, start)) is not None:
            return tree
        start = other
    try:
        here, kept = os.path.realpath(start), os.path.realpath(state)
    except (OSError, ValueError):
        return None
    while not os.path.lexists(os.path.join(here, ".git")):
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent
    return here if kept == here or kept.startswith(here.rstrip("/") + "/") else None


def checkout_said(state: Path, tree: str, *, trusting: bool = False) -> str:
    """Why a state directory in a checkout (`checkout_holding`) is not believed, and what to
    do: for a command that loads the file, or (`trusting`) for `trust` itself."""
    then = (
        "then trust the file again"
        if trusting
        else "or trust this one command with --trust-project"
    )
    return (
        f"the state directory {shown_file(str(state))} lies inside the git checkout"
        f" {shown_file(tree)}, which could have brought its own trust state with it; keep it"
        f" outside the checkout (XDG_STATE_HOME), {then}"
    )


def make_state_dir(directory: Path) -> None:
    """`directory` made (0700, with its parents) unless it is there; `NotADirectoryError`,
    not `FileExistsError`, when a file (or a device) is where it belongs: "File exists" was
    all a person was told."""
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    except FileExistsError:
        raise NotADirectoryError(errno.ENOTDIR, "it is not a directory", str(directory)) from None


def state_path(environ: Mapping[str, str]) -> Path | None:
    """The trust state file in the state directory (its parent), found as `state_home` finds
    it, so that the trust store, the caches, the history and the token never part ways (a
    file trusted by hand and then looked for by a CI job under `env -i`); None without a home
    anywhere."""
    state = state_home(environ)
    return None if state is None else state / STATE_FILE


def read_private(path: Path, *, limit: int) -> bytes:
    """The bytes of the state file (or another kept beside it: `read_sealed`);
    `FileNotFoundError` when there is none, `StateError` when it is not a regular file of this
    user's that only this user may write, or is larger than `limit`. A FIFO or a device is
    refused before a read could block."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except FileNotFoundError:
        if os.path.islink(path):
            raise StateError(
                f"the trust state file {shown_file(str(path))} is a dangling symlink"
            ) from None
        raise
    except OSError as exc:
        said = denied_said(exc, path.parent)
        raise StateError(
            f"the trust state file {shown_file(str(path))} cannot be read: {said}"
        ) from None
    st = os.fstat(fd)
    why: str | None = None
    if (holder := exposed(path.parent)) is not None:
        why = f"is in {holder}, so another user could have put it there"
    elif not stat.S_ISREG(st.st_mode):
        why = "is not a regular file"
    elif st.st_uid != os.getuid():
        why = f"belongs to uid {st.st_uid}, not to you"
    elif st.st_mode & 0o022:
        why = f"is writable by others (mode {stat.S_IMODE(st.st_mode):04o})"
    if why is not None:
        os.close(fd)
        raise StateError(f"the trust state file {shown_file(str(path))} {why}")
    with os.fdopen(fd, "rb") as f:
        try:
            data = f.read(limit + 1)
        except OSError as exc:
            raise StateError(
                f"the trust state file {shown_file(str(path))} cannot be read: {exc}"
            ) from None
    if len(data) > limit:
        raise StateError(
            f"the trust state file {shown_file(str(path))} is larger than {limit} bytes"
        )
    return data


def exposed(directory: Path) -> str | None:
    """Why another user could have put a file in `directory`, or None. The path is followed
    as the kernel follows it, one name at a time: every directory a name is looked up in,
    and the directory it ends at, must belong to this user or root and be writable by no one
    else (a directory on the way with the sticky bit excepted, as /tmp: there nothing of this
    user's can be renamed or removed by another), and a symlink on the way must be this
    user's or root's (another user's, even in /tmp, points where that user wants). A file
    there could be another user's symlink to a file of this user's that says what that user
    wants (a cloned repository's); so could a symlink `mcpx-hooks` that another user left in
    a directory they may write to, pointing at such a directory of this user's."""
    me = os.getuid()
    try:
        names = os.path.abspath(directory).split("/")[1:]
        here, links = "/", 0
        while True:
            st = os.lstat(here)
            if st.st_uid not in (me, 0):
                return f"{shown_file(here)}, which belongs to uid {st.st_uid}"
            if (who := _writers(st)) and (not names or not st.st_mode & stat.S_ISVTX):
                mode = f"{stat.S_IMODE(st.st_mode):04o}"
                return (
                    f"{shown_file(here)}, which {who} may write to (mode {mode}; chmod {_fix(who)})"
                )
            while names and names[0] in ("", "."):
                names.pop(0)
            if not names:
                return None
            name = names.pop(0)
            if name == "..":
                here = os.path.dirname(here)
                continue
            step = os.path.join(here, name)
            link = os.lstat(step)
            if not stat.S_ISLNK(link.st_mode):
                here = step
                continue
            if link.st_uid not in (me, 0):
                return f"{shown_file(step)}, a symlink of uid {link.st_uid}"
            links += 1
            if links > 40:
                return None  # (a loop: the file's own open says so)
            target = os.readlink(step)
            names[:0] = target.split("/")
            if target.startswith("/"):
                here = "/"
    except (OSError, ValueError):
        return None  # (the file's own open says what is wrong)


def _writers(st: os.stat_result) -> str | None:
    """Who besides its owner may write to what `st` describes: "others", "the group NAME",
    or None. A group of which this user is the only member (a user-private group, as
    `useradd` makes one for each user: a home or a `~/.local` made 0775 under `umask 002`)
    is no one else."""
    if st.st_mode & 0o002:
        return "others"
    if not st.st_mode & 0o020 or _private_group(st.st_gid, os.getuid()):
        return None
    try:
        return f"the group {grp.getgrgid(st.st_gid).gr_name}"
    except KeyError:
        return f"the group {st.st_gid}"


def _fix(who: str) -> str:
    return "go-w" if who == "others" else "g-w"


@functools.cache
def _private_group(gid: int, me: int) -> bool:
    """Whether `me` is the one member of the group `gid`: its primary group and no one
    else's, or its only listed member (the password and group databases are read once)."""
    try:
        group, name = grp.getgrgid(gid), pwd.getpwuid(me).pw_name
    except KeyError:
        return False
    primary = {entry.pw_uid for entry in pwd.getpwall() if entry.pw_gid == gid}
    listed = set(group.gr_mem)
    return primary <= {me} and listed <= {name} and bool(primary or listed)


def read_sealed(path: Path, magic: bytes, key: str, *, limit: int) -> bytes | None:
    """The payload `write_sealed` kept at `path` for `key`, or None when there is none to
    believe (no file, not a private file of this user's, another magic or key, a digest that
    does not match)."""
    import hashlib  # here: the command line reads the state directory's path before it

    try:
        data = read_private(path, limit=limit)
    except (OSError, StateError):
        return None
    stored_magic, _, rest = data.partition(b"\n")
    stored_key, _, rest = rest.partition(b"\n")
    digest, _, payload = rest.partition(b"\n")
    if stored_magic != magic or stored_key != key.encode() or not payload:
        return None
    if hashlib.sha256(payload).hexdigest().encode() != digest:
        return None
    return payload


def write_sealed(path: Path, magic: bytes, key: str, payload: bytes) -> None:
    """Keeps `payload` at `path` for `key`, privately (0600 in a 0700 directory); a state
    directory that cannot be written is left as it is (the code is compiled again next
    time), and so is one that `read_sealed` would not believe (`exposed`): written at every
    start to be read never, into a directory whose names another user decides."""
    import hashlib

    from .privatefile import write_private  # its `tempfile`, only when something is written

    digest = hashlib.sha256(payload).hexdigest()
    try:
        make_state_dir(path.parent)
        if exposed(path.parent) is not None:
            return
        write_private(path, b"\n".join([magic, key.encode(), digest.encode(), payload]))
    except OSError:
        return
