"""A run history whose directory may not be written: said so, naming the directory and what
to do, not SQLite's "attempt to write a readonly database"."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from test_rootless import _python

from mcpx_hooks.supervisor.history.store import History

#: The user the commands run as, under root.
NOBODY = pwd.getpwuid(65534).pw_name if os.geteuid() == 0 else ""

#: Opens the history named by its argument to write, and prints what is wrong.
OPEN = """
import sys
from pathlib import Path
from mcpx_hooks.supervisor.history.faults import HistoryFault
from mcpx_hooks.supervisor.history.store import History
try:
    History.open(Path(sys.argv[1])).close()
except HistoryFault as exc:
    print(exc)
"""


def test_a_history_whose_directory_may_not_be_written_says_so() -> None:
    # The last writer to close the history removes its write-ahead log (`-wal`); the next one
    # must make it again, beside the file. In a directory its owner may not write to (root
    # writes any: as root, the history is opened as `nobody`) SQLite said only "attempt to
    # write a readonly database", of a file its owner may write.
    world = Path(tempfile.mkdtemp(prefix="ro-history-", dir="/tmp"))  # (`nobody` reaches it)
    try:
        state = world / "state"
        state.mkdir(mode=0o700)
        history = state / "history.db"
        History.open(history).close()
        assert history.exists() and not Path(f"{history}-wal").exists()
        python = _python()
        if python is None:
            pytest.skip("as root, this needs a Python that nobody can run (make test-unprivileged)")
        argv = [python, "-c", OPEN, str(history)]
        if os.geteuid() == 0:
            for path in (world, state, history):
                os.chown(path, 65534, 65534)
            world.chmod(0o755)
            argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "env", *argv]
        state.chmod(0o500)
        done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
        assert (done.returncode, done.stderr) == (0, ""), done.stderr
        assert done.stdout == (
            f"opening the run history {history}: its directory {state} may not be written"
            f" (mode 0500), and the history makes its write-ahead log (history.db-wal) there:"
            f" chmod u+w {state}\n"
        )
    finally:
        state.chmod(0o700)
        shutil.rmtree(world)


def test_a_state_directory_that_may_not_be_searched_is_said_not_a_traceback() -> None:
    # `sudo mcpx-hooks ...` with the user's HOME (as sudo keeps it on some systems) leaves
    # `~/.local/state/mcpx-hooks` root's, 0700: `runs list` and `doctor` ended in a
    # PermissionError traceback (looking for the history before saying why it cannot open
    # it). As root the commands run as nobody; as another user the directory is made 0000.
    python = _python()
    if python is None:
        pytest.skip("as root, this needs a Python that nobody can run (make test-unprivileged)")
    world = Path(tempfile.mkdtemp(prefix="sudo-state-", dir="/tmp"))
    state = world / "state" / "mcpx-hooks"
    try:
        state.mkdir(parents=True, mode=0o700)
        History.open(state / "history.db").close()
        env = [f"HOME={world}", f"XDG_STATE_HOME={world / 'state'}", "PATH=/usr/bin:/bin",
               "MCPX_HOOKS_NO_DISCOVERY=1"]  # fmt: skip
        switch: list[str] = []
        if os.geteuid() == 0:
            for path in (world, world / "state"):
                os.chown(path, 65534, 65534)
            world.chmod(0o755)
            switch = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        else:
            state.chmod(0o000)
        said = f"{state / 'history.db'}"
        for command in (["runs", "list"], ["runs", "search", "x"], ["doctor"]):
            argv = [*switch, "env", "-i", *env, python, "-m", "mcpx_hooks.supervisor", *command]
            done = subprocess.run(
                argv, cwd=world, capture_output=True, text=True, check=False, timeout=60
            )
            assert "Traceback" not in done.stderr, done.stderr
            assert done.returncode == 1, done.stderr
            out = done.stdout + done.stderr
            assert f"{said} cannot be read: Permission denied" in out or (
                f"opening the run history {said}: Permission denied" in out
            ), out
            if switch and command != ["doctor"]:  # (root's, as sudo leaves it: and what to do)
                fix = f"is root's (made with sudo?): sudo chown -R {NOBODY} {state}"
                assert f"Permission denied: the state directory {state} {fix}" in out, out
    finally:
        state.chmod(0o700)
        shutil.rmtree(world)
