"""`remove_tree`, the removal of a hook's scratch directory (and a run's), by file
descriptor: a tree with symlinks to the outside, directories its owner may not read or
write, and more nesting than descriptors it may hold, is removed with nothing outside it
touched; a directory swapped for a symlink between the scan and the removal (by a process
of the hook's user still about) is removed as the symlink, and what it pointed to is left."""

from __future__ import annotations

import ctypes
import os
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mcpx_hooks.supervisor.process import remove_tree

NOBODY = 65534
PR_SET_DUMPABLE = 4


@pytest.fixture
def base(tmp_path: Path) -> Iterator[Path]:
    """Where the tree and the outside are: one any user may reach (tmp_path's parents are
    private to its user), removed after."""
    made = Path(tempfile.mkdtemp(prefix="mcpx-remove-", dir="/tmp"))
    made.chmod(0o755)
    yield made
    # (not shutil.rmtree: a tree deeper than the recursion limit, left by a failure, stops it)
    subprocess.run(["rm", "-rf", "--", made], check=True)


@pytest.fixture
def outside(base: Path) -> Iterator[Path]:
    """A directory beside the tree, with a file, whose mode and contents must not change."""
    out = base / "outside"
    out.mkdir(mode=0o750)
    out.chmod(0o750)
    (out / "keep").write_text("kept")
    (out / "keep").chmod(0o640)
    yield out
    assert stat.S_IMODE(out.stat().st_mode) == 0o750
    assert stat.S_IMODE((out / "keep").stat().st_mode) == 0o640
    assert [p.name for p in out.iterdir()] == ["keep"]
    assert (out / "keep").read_text() == "kept"


def build(tree: Path, outside: Path) -> None:
    tree.mkdir()
    (tree / "f").write_text("x")
    (tree / "to-dir").symlink_to(outside)
    (tree / "to-file").symlink_to(outside / "keep")
    sealed = tree / "sealed"
    (sealed / "in").mkdir(parents=True)
    (sealed / "in" / "f").write_text("x")
    (sealed / "to-dir").symlink_to(outside)
    read_only = tree / "read-only"
    read_only.mkdir()
    (read_only / "f").write_text("x")
    deep = tree / "deep"
    for _ in range(200):  # deeper than the descriptors it holds at once
        deep = deep / "d"
    deep.mkdir(parents=True)
    (deep / "f").write_text("x")
    read_only.chmod(0o500)
    (sealed / "in").chmod(0)
    sealed.chmod(0)


def as_user(uid: int | None, action: Any) -> None:
    """`action()` in a child process that is `uid` (None: as this one is)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            if uid is not None:
                os.setgroups([])
                os.setresgid(uid, uid, uid)
                os.setresuid(uid, uid, uid)
                # As a process started as that user is: a change of uid makes it
                # undumpable, which takes its own /proc/self/fd from it.
                libc = ctypes.CDLL(None, use_errno=True)
                assert libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) == 0
            action()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def users() -> list[int | None]:
    """As this user; as root, as an ordinary user too (who needs to open up what it removes)."""
    return [None, NOBODY] if os.geteuid() == 0 else [None]


def chown_tree(top: Path, uid: int) -> None:
    """`top` (and what is in it, and the directory holding it) given to `uid`."""
    for path in [top.parent, top, *top.rglob("*")]:
        os.lchown(path, uid, uid)


@pytest.mark.parametrize("uid", users())
def test_a_tree_with_symlinks_out_and_sealed_directories_is_removed(
    base: Path, outside: Path, uid: int | None
) -> None:
    tree = base / "scratch"
    build(tree, outside)
    if uid is not None:
        chown_tree(tree, uid)
        chown_tree(outside, uid)
    as_user(uid, lambda: remove_tree(str(tree)))
    assert not tree.exists() and not tree.is_symlink()


def test_a_symlink_given_as_the_tree_is_left(base: Path, outside: Path) -> None:
    link = base / "link"
    link.symlink_to(outside)
    remove_tree(str(link))
    assert link.is_symlink()


@pytest.mark.parametrize("uid", users())
@pytest.mark.parametrize("at_listing", [1, 2])
def test_a_directory_swapped_for_a_symlink_after_the_scan_is_not_followed(
    base: Path, outside: Path, uid: int | None, at_listing: int
) -> None:
    """`a/sub` (mode 000) becomes a symlink to `outside` right after `a` is listed (the
    first or the second time: the removal before lists it twice). It was chmodded by path,
    which followed the symlink: `outside` became 0700."""
    tree = base / "scratch"
    (tree / "a" / "sub").mkdir(parents=True)
    (tree / "a" / "sub" / "f").write_text("x")
    (tree / "a" / "sub").chmod(0)
    if uid is not None:
        chown_tree(tree, uid)
        chown_tree(outside, uid)
    a = str(tree / "a")

    def swapping() -> None:
        scandir, listed = os.scandir, []

        def listing(where: Any = ".") -> Any:
            entries = list(scandir(where))
            named = os.readlink(f"/proc/self/fd/{where}") if isinstance(where, int) else where
            if os.fspath(named) == a:
                listed.append(1)
                if len(listed) == at_listing:
                    os.chmod(f"{a}/sub", 0o700)  # (a directory moves only if writable)
                    os.rename(f"{a}/sub", f"{tree}/moved")
                    os.chmod(f"{tree}/moved", 0)
                    os.symlink(outside, f"{a}/sub")
            return _Listing(entries)

        os.scandir = listing  # (in this child only)
        remove_tree(str(tree))

    as_user(uid, swapping)
    assert not tree.exists()


class _Listing(list[Any]):
    def __enter__(self) -> _Listing:
        return self

    def __exit__(self, *_: object) -> None:
        pass


def test_a_tree_deeper_than_the_recursion_limit_is_removed(base: Path) -> None:
    """A hook that left 3,000 nested directories (`mkdir d; cd d` in a loop) made the
    removal raise RecursionError: a traceback at the end of `exec`, and the tree left."""
    tree = base / "scratch"
    tree.mkdir()
    fd = os.open(tree, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(3000):  # (deeper than a path may be long: made by descriptor)
        os.mkdir("d", dir_fd=fd)
        inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = inner
    os.close(fd)
    remove_tree(str(tree))
    assert not tree.exists()
