"""Config files: where they are found, and how one is read into a document.

Layers apply farthest first: `/etc/mcpx-hooks/config.toml`, the user's
`$XDG_CONFIG_HOME/mcpx-hooks/config.toml`, each `.mcpx-hooks.toml` / `.mcpx-hooks.json` from `/`
down to the working directory, then the `--config` files in order (`loading.py` layers them).
The files of the directory chain are project files (`Found.project`): they apply only once
trusted (`trust.py`).

TOML has no `null`: in a TOML file, a list item that is exactly the table `{inherit = true}`
(or a `[[hooks]]` entry holding only `inherit = true`) stands for `null`.

`[sandbox] read` and `write` hold paths: `~` and `~/…` are the supervisor's home (`$HOME`, else
its passwd entry), `~user/…` that user's, and a relative path is resolved against the directory
of the file that declares it, when the file is read.

Nothing wrong with a file raises: a file that is not a regular file (a directory, a dangling
symlink, a symlink loop, a FIFO), one that cannot be read or decoded, one that does not parse,
and one nested deeper than `jsontext.MAX_DEPTH` are each a `Problem` naming the file. So is a
discovered name that exists as anything but a readable regular file: it is reported, never
skipped.
"""

from __future__ import annotations

import errno
import os
import pwd
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import attrs

from ..core import jsontext
from ..core.errors import Problem
from ..core.places import shown_file
from ..core.records import Record
from .problems import pointer, pointer_key, quote, quote_key
from .statefiles import user_home

ETC_DIR: Final = Path("/etc/mcpx-hooks")
USER_FILE: Final = Path("mcpx-hooks") / "config.toml"
LOCAL_NAMES: Final = (".mcpx-hooks.toml", ".mcpx-hooks.json")
#: Set to anything but "" or "0" to skip discovery (tests and the demo do).
NO_DISCOVERY_ENV: Final = "MCPX_HOOKS_NO_DISCOVERY"
#: How a problem begins when whether a config file is there cannot be told: a directory on
#: its way may not be searched (a command run as another user, in a directory it may not list).
CANNOT_TELL: Final = "cannot tell whether there is a file there"
#: TOML's stand-in for a `null` list item.
TOML_NULL: Final[Mapping[str, Any]] = {"inherit": True}


@attrs.frozen(repr=False, eq=False)
class Found(Record):
    """A config name discovery found, and whether it is a project file (one of the directory
    chain's, applied only once trusted) or in a trusted place."""

    path: Path
    project: bool
    #: The directory it is in and the name itself with symlinks resolved, as
    #: `os.path.realpath` says them (`_RealChain`): what trust and "applied once" key by.
    real_dir: str = ""
    real: str = ""


def discover_files(cwd: Path, environ: Mapping[str, str], *, etc_dir: Path = ETC_DIR) -> list[Path]:
    """The paths of `discover`."""
    return [found.path for found in discover(cwd, environ, etc_dir=etc_dir)]


def discover(cwd: Path, environ: Mapping[str, str], *, etc_dir: Path = ETC_DIR) -> list[Found]:
    """The config names that exist, farthest first; none when `MCPX_HOOKS_NO_DISCOVERY` is set.

    The user file is `$XDG_CONFIG_HOME/mcpx-hooks/config.toml` when that variable is an
    absolute path, else `.config/mcpx-hooks/config.toml` in the user's home (`user_home`:
    an absolute `HOME`, else the password database's, as under `env -i`; never a relative
    `HOME`, which named a trusted file under the working directory, a project's).
    A name counts when anything is there, or when that cannot be told (a directory on the
    way that may not be searched, a loop): a directory, a dangling symlink or a symlink loop
    is returned too, and loading it is a `Problem`, so a config that was meant to apply never
    vanishes without a word. A project file that lies under
    `etc_dir` or the user's config directory is in a trusted place, not a project file.
    """
    if environ.get(NO_DISCOVERY_ENV, "") not in ("", "0"):
        return []
    candidates = [etc_dir / "config.toml"]
    xdg, home = environ.get("XDG_CONFIG_HOME", ""), user_home(environ)
    if os.path.isabs(xdg):
        candidates.append(Path(xdg) / USER_FILE)
    elif home is not None:
        candidates.append(Path(home) / ".config" / USER_FILE)
    trusted_dirs = [os.path.realpath(p.parent) for p in candidates]
    places = len(candidates)
    here = Path(os.path.abspath(cwd))
    for directory in (*reversed(here.parents), here):
        candidates.extend(directory / name for name in LOCAL_NAMES)
    found: list[Found] = []
    seen: set[Path] = set()
    chain = _RealChain()
    for number, path in enumerate(candidates):
        if _anything_at(path) and path not in seen:
            seen.add(path)
            real_dir = chain.real(path.parent)
            project = number >= places and not any(
                real_dir == d or real_dir.startswith(d.rstrip("/") + "/") for d in trusted_dirs
            )
            joined = os.path.join(real_dir, path.name)
            real = os.path.realpath(joined) if _is_link(joined) else joined
            found.append(Found(path, project, real_dir, real))
    return found


class _RealChain:
    """`os.path.realpath` of a directory and its parents, each from its parent's: one lstat a
    directory, where `os.path.realpath` of each lstats every directory above it again (600
    nested project files took 16 s there). Kept for one discovery only: a symlink may change
    between two loads."""

    def __init__(self) -> None:
        self._real: dict[Path, str] = {}

    def real(self, directory: Path) -> str:
        if (known := self._real.get(directory)) is not None:
            return known
        parent = directory.parent
        if parent == directory:  # the root
            real = os.path.realpath(directory)
        else:
            joined = os.path.join(self.real(parent), directory.name)
            real = os.path.realpath(joined) if _is_link(joined) else joined
        self._real[directory] = real
        return real


def _is_link(path: str) -> bool:
    """Whether `path` is a symlink, as `os.path.realpath` tells (what it cannot lstat, it
    takes as it is)."""
    try:
        return stat.S_ISLNK(os.lstat(path).st_mode)
    except OSError:
        return False


def _anything_at(path: Path) -> bool:
    """Whether `path` names something, or might: only "no such file" (there, or a part of
    the path that is a file) says there is nothing (`os.path.lexists` says so for any error)."""
    try:
        os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError:
        return True
    return True


def read_file(path: Path, file: str, *, origin: str = "") -> tuple[Any, list[Problem]]:
    """The parsed document, or `None` and the problem that stopped it."""
    data, problems = read_bytes(path, file, origin=origin)
    if data is None:
        return None, problems
    return parse_bytes(data, path, file)


def read_bytes(path: Path, file: str, *, origin: str = "") -> tuple[bytes | None, list[Problem]]:
    """The bytes of a config file (to hash, then parse the same bytes), or `None` and the
    problem that stopped it: not a regular file (none there, first), a name that is not
    `.toml` or `.json`, more than `MAX_CONFIG_BYTES`."""
    if (why := _not_a_regular_file(path, origin)) is not None:
        return None, [Problem(file, "", why)]
    suffix = path.suffix.lower()
    if suffix not in (".toml", ".json"):
        found = f'"{suffix}"' if suffix else "no extension"
        return None, [Problem(file, "", f"expected a .toml or .json config file, found {found}")]
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        return None, [Problem(file, "", f"cannot read the file: {_why(exc)}")]
    if len(data) > MAX_CONFIG_BYTES:
        return None, [Problem(file, "", f"the file is over {MAX_CONFIG_BYTES} bytes: not read")]
    return data, []


def parse_bytes(data: bytes, path: Path, file: str) -> tuple[Any, list[Problem]]:
    """The document in `data` (the bytes of `path`, named `file` in problems)."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        return None, [Problem(file, "", f"cannot read the file: {not_utf8(exc)}")]
    if path.suffix.lower() == ".json":
        return parse_json(text, file)
    import tomllib  # ~4 ms, for a run that reads a TOML file (a run without a config does not)

    try:
        doc = tomllib.loads(text)
    except RecursionError:  # tomllib parses nested arrays and inline tables recursively
        return None, [Problem(file, "", _TOO_DEEP)]
    except ValueError as exc:  # TOMLDecodeError, or an integer past the digit limit
        from .tomltwice import twice_at

        if (twice := twice_at(text, str(exc))) is not None:
            said = f"the key {quote_key(str(twice[0][-1]))} is given more than once"
            return None, [Problem(file, pointer(twice[0]), f"{said} (line {twice[1]})")]
        return None, [Problem(file, "", f"invalid TOML: {str(exc).split(';')[0]}")]
    # Dotted keys and table headers nest without recursing: the depth is checked after, so
    # nothing downstream (the schema, layering, the views) ever walks a deeper document.
    if jsontext.depth(doc) > jsontext.MAX_DEPTH:
        return None, [Problem(file, "", _TOO_DEEP)]
    return _toml_nulls(doc), []


def parse_json(text: str, file: str) -> tuple[Any, list[Problem]]:
    """The document of a JSON config text (a file's, a `--hook`'s), or None and its problems:
    it does not parse, or an object gives a key twice (each such key, at its pointer: JSON
    would keep the last one silently, where TOML refuses)."""
    try:
        doc = jsontext.loads(text)
    except jsontext.JsonError as exc:
        return None, [Problem(file, "", f"invalid JSON: {exc}")]
    if doc is None:  # (None is what says "nothing read" here: a valid, empty config it is not)
        return None, [Problem(file, "", "expected an object, found null")]
    if twice := jsontext.duplicate_keys(text):
        keys = {pointer(path): str(path[-1]) for path in twice}
        return None, [
            Problem(
                file,
                at,
                f"the key {quote_key(keys[at])} is given more than once",
            )
            for at in sorted(keys, key=pointer_key)
        ]
    return doc, []


_TOO_DEEP: Final = f"invalid TOML: nested deeper than {jsontext.MAX_DEPTH} levels"
#: The largest config file read (hundreds of hooks take a few KiB; checking 20 MB took a
#: minute and 400 MB of memory).
MAX_CONFIG_BYTES: Final = 4 * 1024 * 1024


def _not_a_regular_file(path: Path, origin: str) -> str | None:
    """Why `path` is not a config file to read (it follows symlinks), or None when it is a
    regular file. A FIFO or a device is refused before it is opened: reading one could
    block or never end."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        if os.path.islink(path):
            return f"expected a config file, found a dangling symlink (to {_link(path)}){origin}"
        return f"no such file: {shown_file(os.path.abspath(path))}{origin}"
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return f"expected a config file, found a symlink loop{origin}"
        if exc.errno == errno.EACCES:  # (stat needs no more than the directories' search)
            return f"{CANNOT_TELL}: {_unsearchable(path)} may not be searched ({_why(exc)})"
        return f"cannot read the file: {_why(exc)}"
    if stat.S_ISDIR(mode):
        return f"expected a config file, found a directory{origin}"
    if not stat.S_ISREG(mode):
        return f"expected a config file, found {_kind(mode)}{origin}"
    return None


def _unsearchable(path: Path) -> str:
    """The first directory on the way to `path` this process may not search."""
    for directory in reversed(Path(os.path.abspath(path)).parents):
        if not os.access(directory, os.X_OK):
            return shown_file(str(directory))
    return "a directory on its way"


def unread_advice(reason: str) -> str:
    """What to do about a config file skipped because it could not be read (`reason`)."""
    if reason.startswith(CANNOT_TELL):
        return "if there is one, run from a directory you may search for it to be applied"
    return "remove it, or make it a regular file you can read"


def not_utf8(exc: UnicodeDecodeError) -> str:
    """Where the first byte that is not UTF-8 is, as an editor counts (line, and column in
    bytes), rather than the decoder's offset into the bytes after a BOM."""
    text = bytes(exc.object)
    line = text.count(b"\n", 0, exc.start) + 1
    column = exc.start - (text.rfind(b"\n", 0, exc.start) + 1) + 1
    return f"not UTF-8: byte 0x{text[exc.start]:02x} at line {line}, column {column}"


def _why(exc: OSError) -> str:
    """What went wrong, without the path the problem names already (`[Errno 13] Permission
    denied: '/the/path'` is "Permission denied")."""
    return exc.strerror or str(exc)


def _link(path: Path) -> str:
    try:
        target = os.readlink(path)
        return repr(target) if target.isprintable() else shown_file(target)
    except OSError:  # gone or replaced since the stat
        return "a path that does not exist"


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "something that is not a regular file"


def _toml_nulls(doc: dict[str, Any]) -> dict[str, Any]:
    """Turns TOML's `{inherit = true}` list items into `None`, where lists may splice."""

    def nulls(items: Any) -> Any:
        if not isinstance(items, list):
            return items
        return [None if item == TOML_NULL else item for item in items]

    if "hooks" in doc:
        doc["hooks"] = nulls(doc["hooks"])
    script = doc.get("script")
    if isinstance(script, dict):
        doc["script"] = {phase: nulls(lines) for phase, lines in script.items()}
    return doc


#: The keys holding lists of paths, by table: made absolute where a file is read.
PATH_KEYS: Final[Mapping[str, tuple[str, ...]]] = {
    "sandbox": ("read", "write", "deny"),
    "service": ("roots",),
}


def resolve_sandbox_paths(
    doc: dict[str, Any],
    file: str,
    directory: str,
    environ: Mapping[str, str],
    name: str = "sandbox",
) -> tuple[dict[str, Any], list[Problem]]:
    """`doc` with the paths of its table `name` (`PATH_KEYS`) made absolute (see the module
    docstring), and the problems of those that cannot be. `[service] roots` must each be a
    directory."""
    table = dict(doc[name])
    problems: list[Problem] = []
    for key in PATH_KEYS[name]:
        resolved = []
        for index, given in enumerate(table.get(key, [])):
            path, why = sandbox_path(given, directory, environ)
            if why is None and name == "service" and not os.path.isdir(path):
                why = (
                    f"expected a directory, found {quote(given)}:"
                    f" no directory at {shown_file(path)}"
                )
            if why is not None:
                problems.append(Problem(file, f"/{name}/{key}/{index}", why))
            resolved.append(path)
        if key in table:
            table[key] = resolved
    return {**doc, name: table}, problems


def sandbox_path(given: str, directory: str, environ: Mapping[str, str]) -> tuple[str, str | None]:
    """A `[sandbox]` path made absolute and normal: `~` expanded, a relative path joined to
    `directory`. The second item says why it cannot be, or is None: a pattern (`*`) or a
    variable (`$HOME`) that names no path is a mistake (neither is expanded), not skipped."""
    path = given
    if given == "~" or given.startswith("~/"):
        home = environ.get("HOME", "")
        if not os.path.isabs(home):
            try:
                home = pwd.getpwuid(os.getuid()).pw_dir
            except KeyError:
                return given, f'expected a path, found {quote(given)}: no home directory for "~"'
        path = home + given[1:]
    elif given.startswith("~"):
        user, _, rest = given[1:].partition("/")
        try:
            path = os.path.join(pwd.getpwnam(user).pw_dir, rest)
        except KeyError:
            return given, f"expected a path, found {quote(given)}: there is no user {quote(user)}"
    path = os.path.normpath(os.path.join(directory, path))
    # A path that does not exist is skipped, unless it is a mistake that names none (asked of
    # the file system only then).
    glob = "*" in given or "?" in given or re.search(r"\[[^]]+\]", given) is not None
    if (glob or "$" in given) and not os.path.lexists(path):
        if glob:
            return path, (
                f"expected a path, found {quote(given)}: patterns are not expanded, and no path"
                " is named that; name each path"
            )
        return path, (
            f"expected a path, found {quote(given)}: variables are not expanded, and no path"
            ' is named that; write the path itself ("~/…" for the home)'
        )
    return path, None
