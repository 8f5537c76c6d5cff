"""The scratch directories of a process that was killed (SIGKILL: nothing of it cleans up)
are removed by the next process that makes one; those of a process still running never are.
Real `exec` processes, under a scratch root of the test's own (`MCPX_HOOKS_SCRATCH_ROOT`)."""

from __future__ import annotations

import fcntl
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import Marker

CLI = [sys.executable, "-m", "mcpx_hooks.supervisor"]
#: What the killed run leaves in its scratch directory (a stand-in for its 50 MB).
LEFT = "left-behind.bin"


def _env(base: Path) -> dict[str, str]:
    return {**os.environ, "MCPX_HOOKS_NO_DISCOVERY": "1", "MCPX_HOOKS_SCRATCH_ROOT": str(base)}


def _left(root: Path) -> list[Path]:
    return sorted(root.rglob(LEFT))


def _wait_gone(pids: list[int]) -> None:
    """Each of `pids` has ended (their pidfds readable, within 10 s)."""
    fds = []
    try:
        for pid in pids:
            try:
                fds.append(os.pidfd_open(pid))
            except ProcessLookupError:
                continue
        deadline = time.monotonic() + 10
        for fd in fds:
            readable, _, _ = select.select([fd], [], [], max(0, deadline - time.monotonic()))
            assert readable, "a process of the killed run outlived it"
    finally:
        for fd in fds:
            os.close(fd)


def test_a_killed_exec_s_scratch_is_swept_by_the_next(tmp_path: Path, marker: Marker) -> None:
    base = tmp_path / "shm"
    base.mkdir()
    root = base / f"mcpx-hooks-{os.getuid()}"
    script = (  # (the marker in the sleeper's argv: it must die with the killed exec)
        f'head -c 1048576 /dev/zero > "$TMPDIR/{LEFT}"; exec {sys.executable} -c'
        f" \"import time; print('ready', flush=True); time.sleep(60)\" {marker}"
    )
    killed = subprocess.Popen(
        [*CLI, "exec", "--sandbox", "none", "--", "sh", "-c", script],
        cwd=tmp_path,
        env=_env(base),
        stdout=subprocess.PIPE,
        text=True,
    )
    sleeper: list[int] = []
    try:
        assert killed.stdout is not None
        assert killed.stdout.readline().startswith("run ")
        assert killed.stdout.readline() == "| ready\n"
        (left,) = _left(root)
        owner = left.parent.parent  # (the killed process's own: checked below)
        pid = killed.pid
        sleeper += [p.pid for p in marker.alive()]
        assert sleeper
        killed.send_signal(signal.SIGKILL)
        killed.wait()
    finally:
        killed.kill()
        killed.wait()
        if killed.stdout is not None:
            killed.stdout.close()
    _wait_gone(sleeper)
    assert _left(root) == [left]  # nothing of it cleaned up
    # A process that lives: its directory is locked (as every process's is) and kept.
    alive = root / "owner-1-alive"
    alive.mkdir()
    (alive / "run-0").mkdir()
    held = os.open(alive, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(held, fcntl.LOCK_EX)
        (root / "hook-0123").mkdir()  # not an owner's: never swept
        done = subprocess.run(
            [*CLI, "exec", "--sandbox", "none", "--", "true"],
            cwd=tmp_path,
            env=_env(base),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert _left(root) == []
        assert owner.parent == root and owner.name.startswith(f"owner-{pid}-")
        assert not owner.exists()
        assert (alive / "run-0").is_dir() and (root / "hook-0123").is_dir()
    finally:
        os.close(held)


def test_an_exec_that_ends_leaves_no_directory_of_its_own(tmp_path: Path) -> None:
    """Its scratch directories are gone when its runs end, and its own directory with it at
    its end: not left in the RAM root until the next process sweeps it."""
    base = tmp_path / "shm"
    base.mkdir()
    done = subprocess.run(
        [*CLI, "exec", "--sandbox", "none", "--", "sh", "-c", 'test -d "$TMPDIR"'],
        cwd=tmp_path,
        env=_env(base),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert sorted(os.listdir(base / f"mcpx-hooks-{os.getuid()}")) == []
