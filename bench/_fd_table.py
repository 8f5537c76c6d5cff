"""What a spawn pays for the fds its parent holds (not a row of the table).

    .venv/bin/python bench/_fd_table.py [--fds 4000] [--spawns 300]

Medians of `posix_spawn` + `waitpid` of /bin/true: from this process holding `--fds`
close-on-exec pipe fds, from a thread of it that has `unshare(CLONE_FILES)` and closed every
fd above 2 in its own table, and from this process once the fds are closed. Each spawn copies
its parent's fd table into the child and the child's exec drops it again: what a spawner
holding fds for many running children pays per child, and what a table of its own saves
(docs/internals/bench.md, "1,000 hooks against the bare wave").
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import threading
import time

CLONE_FILES = 0x400


def spawns(count: int) -> float:
    times = []
    for _ in range(count):
        start = time.perf_counter()
        os.waitpid(os.posix_spawn("/bin/true", ["/bin/true"], {}), 0)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--fds", type=int, default=4000)
    parser.add_argument("--spawns", type=int, default=300)
    args = parser.parse_args()
    held: list[int] = []
    for _ in range(args.fds // 2):
        held.extend(os.pipe())
    print(f"this process, {len(held)} fds open:     {spawns(args.spawns):.3f} ms")
    libc = ctypes.CDLL(None, use_errno=True)

    def own_table() -> None:
        if libc.unshare(CLONE_FILES) != 0:
            print(f"unshare(CLONE_FILES): {os.strerror(ctypes.get_errno())}")
            return
        os.closerange(3, max(held) + 1)  # (in this thread's own table only)
        print(f"a thread with a table of its own:  {spawns(args.spawns):.3f} ms")

    thread = threading.Thread(target=own_table)
    thread.start()
    thread.join()
    for fd in held:
        os.close(fd)
    print(f"this process, no fds open:         {spawns(args.spawns):.3f} ms")


if __name__ == "__main__":
    main()
