"""Whether a child's program can be seen in its sandbox, checked before the spawner is asked:
found as the spawner finds it, then followed through links and `#!` lines, each of which
must lie in what the plan reads or writes; else `ProgramHidden`, naming the file and the
`[sandbox] read` line that would admit it.
"""

from __future__ import annotations

import functools
import os
import re
import struct
from collections.abc import Mapping, Sequence
from typing import Final

from ..core.errors import SandboxUnavailable
from ..core.hooks import Profile
from .denied import never_granted
from .sandbox import SYSTEM_DIRS, real_path, under
from .spawnspec import SandboxPlan


class ProgramHidden(SandboxUnavailable):
    """A hook's or script's program is a file its profile cannot see: refused before the
    spawner is asked, naming the file and the `[sandbox] read` line that would admit it."""


#: How many interpreters deep `#!` lines are followed (the kernel's own limit is 4).
_MAX_INTERPRETERS: Final = 4
#: How much of a file is read for its `#!` line (the kernel reads 256 bytes).
_SHEBANG_BYTES: Final = 256
#: An ELF program header's type for the loader's name, and how many headers are read.
_PT_INTERP: Final = 3
_MAX_HEADERS: Final = 64
#: How many programs' `#!` lines and loaders are kept, each by its file's identity.
_KEPT: Final = 256


def check_program(
    argv0: str, *, cwd: str, env: Mapping[str, str], plan: SandboxPlan | None, profile: Profile
) -> None:
    """Returns if the program `argv0` names can be seen under `plan`; else raises
    `ProgramHidden`. The program is found as the spawner finds it (a name with a slash
    relative to `cwd`, else the first executable on the child's `PATH`), then followed
    through symlinks and, for a script, its `#!` interpreter (and the program an
    `env` line names), each of which must be visible. A program not found at all is left to
    the spawner to report. Pure apart from reading the paths."""
    if plan is None:
        return
    where = real_path(cwd)
    ruled = _denied_by(where, plan.denied_by) if plan.denied_by else None
    if ruled is not None:
        raise ProgramHidden(
            f'cannot run "{argv0}" in {cwd}: the working directory lies {ruled}; take it out'
            " of that list, or choose another working directory"
        )
    visible = (*SYSTEM_DIRS, *plan.read, *plan.write)  # (a system directory is always read)
    path = env.get("PATH", os.defpath)
    found = _find(argv0, cwd, path)
    via = ""
    for _ in range(_MAX_INTERPRETERS + 1):
        if found is None:
            break
        real = real_path(found)
        for candidate in dict.fromkeys((found, real)):
            ruled = _denied_by(candidate, plan.denied_by, itself=True)  # (a system dir too)
            if ruled is not None:
                raise ProgramHidden(
                    f'cannot run "{argv0}": it resolves to {via}{candidate}, {ruled};'
                    " take it out of that list to run this program"
                )
            denied = _denied_holding(candidate, plan.deny)  # (a cover in the view)
            if denied is None and not under(candidate, visible):
                # No grant would admit it there: say so rather than name one that would not.
                denied = _denied_holding(candidate, _never_granted_here())
                if denied is None:
                    raise ProgramHidden(
                        f'cannot run "{argv0}": it resolves to {via}{candidate}, which the'
                        f" {profile} sandbox cannot see; add [sandbox] read ="
                        f' ["{admitting(candidate)}"] to admit it'
                    )
            if denied is not None:
                raise ProgramHidden(
                    f'cannot run "{argv0}": it resolves to {via}{candidate}, in {denied},'
                    " which no sandbox but none reaches, whatever [sandbox] read says; keep"
                    " it beside the project or in a directory of its own"
                )
        interpreter = _interpreter(real)
        if interpreter is None:
            loader = _elf_loader(real) if plan.denied_by else None  # (the kernel opens it)
            ruled = (
                None
                if loader is None
                else _denied_by(real_path(loader), plan.denied_by, itself=True)
            )
            if ruled is not None:
                raise ProgramHidden(
                    f'cannot run "{argv0}": it resolves to {via}{real}, a program loaded by'
                    f" {real_path(loader or '')}, {ruled}; take it out of that list to run"
                    " this program"
                )
            break
        via = f"{via}{real}, a script run by "
        program, name = interpreter
        found = _find(name, cwd, path) if name is not None else program
    # The program's place is said first. A cwd that is no grant's (dropped: it lies in a
    # path never granted) would meet "No such file or directory" in the view.
    held = _denied_holding(where, plan.deny)
    if held is None and not under(where, visible):
        held = _denied_holding(where, _never_granted_here())
    if held is not None:
        raise ProgramHidden(
            f'cannot run "{argv0}" in {cwd}: the working directory lies in {held}, which no'
            " sandbox but none reaches; choose another one (a hook's is its cwd, else the"
            " directory of the file that declares it)"
        )


#: Interpreters whose first argument, unless an option, is the file they run.
_INTERPRETERS: Final = re.compile(r"(python|pypy)[0-9.]*|sh|bash|dash|zsh|node|ruby|perl")


def run_file(python_file: str | None, argv: Sequence[str] | None, cwd: str) -> str | None:
    """The file a run is to run, as `check_script_file` checks it: `exec --python FILE`'s, or
    the one an interpreter's command names (`python /elsewhere/job.py`, `sh build.sh`: an
    interpreter in the sandbox meets only "Permission denied" for one it cannot see), joined
    to `cwd`; None for any other command."""
    if python_file is not None:
        return os.path.join(cwd, python_file)
    if not argv or len(argv) < 2 or argv[1].startswith("-"):  # (`python -c`, `sh -c`, ...)
        return None
    return (
        os.path.join(cwd, argv[1]) if _INTERPRETERS.fullmatch(os.path.basename(argv[0])) else None
    )


#: What a run's sandbox sees, as `check_script_file` says it.
RUN_SEES: Final = "the run's working directory, the system and the grants"


def check_command(
    argv: Sequence[str],
    *,
    cwd: str,
    env: Mapping[str, str],
    plan: SandboxPlan | None,
    profile: Profile,
    sees: str,
) -> None:
    """`check_program` for a hook's, a command model's or a tool server's argv, then
    `check_script_file` for the file its interpreter is given (`python3 /elsewhere/x.py`),
    which would otherwise meet only "Permission denied" inside the sandbox."""
    check_program(argv[0], cwd=cwd, env=env, plan=plan, profile=profile)
    check_script_file(run_file(None, argv, cwd), plan=plan, profile=profile, sees=sees)


def check_script_file(
    path: str | None, *, plan: SandboxPlan | None, profile: Profile, sees: str = RUN_SEES
) -> None:
    """Returns if the file a run or a command names (`exec --python FILE`, a request's
    `file`, an interpreter's first argument) can be seen under `plan` (which sees `sees`), or
    is not there (the interpreter says so); else raises `ProgramHidden`, as for a program:
    the interpreter would only meet "Permission denied"."""
    if plan is None or path is None or not os.path.exists(path):
        return
    path, real = os.path.normpath(path), real_path(path)
    visible = (*SYSTEM_DIRS, *plan.read, *plan.write)
    for candidate in dict.fromkeys((path, real)):
        ruled = _denied_by(candidate, plan.denied_by, itself=True)
        if ruled is not None:
            lies = ": it lies " if ruled.startswith("in ") else ", "  # (denied by its own path)
            raise ProgramHidden(f"cannot run the script {path}{lies}{ruled}")
        denied = _denied_holding(candidate, plan.deny)
        if denied is None and not under(candidate, visible):
            denied = _denied_holding(candidate, _never_granted_here())
            if denied is None:
                raise ProgramHidden(
                    f"cannot run the script {path}: the {profile} sandbox cannot see it (it"
                    f' sees {sees}); add [sandbox] read = ["{admitting(real)}"] to admit it'
                )
        if denied is not None:
            raise ProgramHidden(
                f"cannot run the script {path}: it lies in {denied}, which no sandbox but none"
                " reaches, whatever [sandbox] read says; keep it beside the project"
            )


def _denied_by(
    path: str, denied_by: Sequence[tuple[str, str, str]], *, itself: bool = False
) -> str | None:
    """Where `path` lies when an operator's `[sandbox] deny` path is or holds it: the path
    and the line that denies it, in words; else None. With `itself`, a deny of `path` itself
    (one program, one script) starts at "which": a file is not said to lie in itself."""
    for real, named, at in denied_by:
        if under(path, (real,)):
            where = (
                ""
                if itself and path == real
                else f"in {real}" + (f" ({named}), " if named != real else ", ")
            )
            line = f" at {at}" if at else ""
            return f"{where}which no sandbox but none reaches: [sandbox] deny names it{line}"
    return None


def _identity(path: str) -> tuple[int, int, int, int] | None:
    """What tells a file's content apart without reading it (device, inode, size, mtime):
    the key of what was read of it, so a file changed since is read again."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def _elf_loader(path: str) -> str | None:
    """The program loader (`PT_INTERP`, e.g. /lib64/ld-linux-x86-64.so.2) an ELF binary
    names, which `execve` opens as well; None for anything else. Read once per version of
    the file: every hook running `python3` would otherwise read the same header."""
    key = _identity(path)
    return None if key is None else _elf_loader_of(path, key)


@functools.lru_cache(maxsize=_KEPT)
def _elf_loader_of(path: str, _: tuple[int, int, int, int]) -> str | None:
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if head[:4] != b"\x7fELF" or len(head) < 64:
                return None
            wide, order = head[4] == 2, "<" if head[5] == 1 else ">"
            (phoff,) = struct.unpack_from(order + ("Q" if wide else "I"), head, 32 if wide else 28)
            size, count = struct.unpack_from(order + "HH", head, 54 if wide else 42)
            f.seek(phoff)
            table = f.read(size * min(count, _MAX_HEADERS))
            for at in range(0, len(table) - size + 1, size):
                if struct.unpack_from(order + "I", table, at)[0] != _PT_INTERP:
                    continue
                offset, length = (
                    struct.unpack_from(order + "QQ", table, at + 8)[:1]
                    + struct.unpack_from(order + "Q", table, at + 32)
                    if wide
                    else struct.unpack_from(order + "I", table, at + 4)
                    + struct.unpack_from(order + "I", table, at + 16)
                )
                f.seek(offset)
                name = f.read(min(length, _SHEBANG_BYTES)).split(b"\0")[0]
                return os.fsdecode(name) if name.startswith(b"/") else None
    except (OSError, struct.error):
        return None
    return None


def _denied_holding(path: str, denied: Sequence[str]) -> str | None:
    """The denied path that is or holds `path`, or None (one pass on a hook's way)."""
    if not under(path, denied):
        return None
    return next(d for d in denied if under(path, (d,)))


def _never_granted_here() -> list[str]:
    """The paths no profile but none reaches that exist here, real (`denied.py`)."""
    return [real_path(p) for p in never_granted() if os.path.lexists(p)]


def _find(argv0: str, cwd: str, path: str) -> str | None:
    if "/" in argv0:
        found = os.path.normpath(os.path.join(cwd, argv0))
        return found if os.path.exists(found) else None
    for d in path.split(":"):
        candidate = os.path.normpath(os.path.join(cwd, d or ".", argv0))
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def _interpreter(real: str) -> tuple[str, str | None] | None:
    """A script's `#!` interpreter, and for `#!/usr/bin/env [-S] NAME …`, NAME (looked up on
    PATH); None for anything else (a binary, an unreadable file). Read once per version."""
    key = _identity(real)
    return None if key is None else _interpreter_of(real, key)


@functools.lru_cache(maxsize=_KEPT)
def _interpreter_of(real: str, _: tuple[int, int, int, int]) -> tuple[str, str | None] | None:
    try:
        with open(real, "rb") as f:
            head = f.read(_SHEBANG_BYTES)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    words = head[2:].split(b"\n", 1)[0].decode(errors="replace").split()
    if not words:
        return None
    program, rest = words[0], words[1:]
    if os.path.basename(program) == "env":
        names = [w for w in rest if not w.startswith("-") and "=" not in w]
        return (program, names[0]) if names else (program, None)
    return program, None


def admitting(path: str) -> str:
    """The directory a `[sandbox] read` line would name to admit `path`: the folder of the
    supervisor's home it lies in (`~/.pyenv`, `~/.cargo`), else its first two levels
    (`/opt/tools`), else its own directory."""
    home = os.path.realpath(os.path.expanduser("~"))
    if under(path, [home]) and path != home:
        return os.path.join(home, os.path.relpath(path, home).split("/")[0])
    parts = path.strip("/").split("/")
    if len(parts) > 2:
        return "/" + "/".join(parts[:2])
    parent = os.path.dirname(path)
    return parent if parent != "/" else path
