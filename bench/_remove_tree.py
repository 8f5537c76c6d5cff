"""Removing a hook's scratch directory: `remove_tree` (by file descriptor, this checkout's)
against the removal before it (`shutil.rmtree`, then, only when that left something, an
opening-up by path and a second `rmtree`), on what a hook typically leaves: nothing, a few
files, a small tree. Both on the same file system (the scratch root), alternating, many times.

    .venv/bin/python bench/_remove_tree.py [--rounds 2000]

A measuring aid, not a row of `make bench` (no goal): it prints microseconds per removal
and the ratio. (An empty directory never reaches either: `scratch_dir` tries `rmdir` first.)
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import stat
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from mcpx_hooks.supervisor.process import remove_tree
from mcpx_hooks.supervisor.process.scratch import owner_dir


def before(path: str) -> None:
    """The removal this one replaced, as it was."""
    shutil.rmtree(path, ignore_errors=True)
    with contextlib.suppress(OSError):
        if stat.S_ISDIR(os.lstat(path).st_mode):
            todo = [path]
            while todo:
                directory = todo.pop()
                with contextlib.suppress(OSError):
                    os.chmod(directory, 0o700)
                    with os.scandir(directory) as entries:
                        todo.extend(e.path for e in entries if e.is_dir(follow_symlinks=False))
            shutil.rmtree(path, ignore_errors=True)


def empty(p: Path) -> None:
    p.mkdir()


def few_files(p: Path) -> None:
    p.mkdir()
    for n in range(3):
        (p / f"f{n}").write_bytes(b"x")


def small_tree(p: Path) -> None:
    p.mkdir()
    for d in ("a", "b", "a/c"):
        (p / d).mkdir()
        for n in range(3):
            (p / d / f"f{n}").write_bytes(b"x")


def read_only(p: Path) -> None:
    small_tree(p)
    for d in ("a/c", "a", "b"):
        (p / d).chmod(0o500)


def timed(remove: Callable[[str], None], make: Callable[[Path], None], root: Path) -> float:
    path = root / "t"
    make(path)
    start = time.perf_counter()
    remove(str(path))
    took = time.perf_counter() - start
    assert not path.exists()
    return took


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2000)
    rounds = parser.parse_args().rounds
    root = Path(owner_dir())
    shapes = {"empty": empty, "3 files": few_files, "small tree": small_tree}
    if os.geteuid() != 0:  # (as root, rmtree needs no opening up)
        shapes["read-only tree"] = read_only
    for name, make in shapes.items():
        old: list[float] = []
        new: list[float] = []
        for _ in range(rounds):
            old.append(timed(before, make, root))
            new.append(timed(remove_tree, make, root))
        o, n = statistics.median(old) * 1e6, statistics.median(new) * 1e6
        print(f"{name:15} before {o:7.1f} us  now {n:7.1f} us  ratio {n / o:.2f}")


if __name__ == "__main__":
    main()
