"""An ordinary user whose home does not exist (`nobody`'s /nonexistent, a service's user):
its state directory cannot be made, and `trust`, a run's history warning and `serve`'s token
said only "Permission denied" of a path under it (and `doctor`, that / is not writable). Each
now says why (the home is not there, and the directory above it may not be written) and what
to do (XDG_STATE_HOME). As root the commands run as `nobody`; as an ordinary user, as that
user."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from test_rootless import _python

#: A home that does not exist, in a directory no ordinary user may write.
HOME = Path("/mcpx-hooks-test-no-such-home")
WHY = (
    f"Permission denied: {HOME} does not exist, and / may not be written: set XDG_STATE_HOME"
    " to a directory you can write"
)


def test_a_home_that_does_not_exist_is_said_with_what_to_do() -> None:
    python = _python()
    if python is None:
        pytest.skip("as root, this needs a Python that nobody can run (make test-unprivileged)")
    assert not HOME.exists()
    work = Path(tempfile.mkdtemp(prefix="no-home-", dir="/tmp"))  # (`nobody` reaches it)
    try:
        work.chmod(0o755)
        (work / ".mcpx-hooks.toml").write_text("[defaults]\ntimeoutMs = 5000\n")
        switch: list[str] = []
        if os.geteuid() == 0:
            switch = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        env = ["env", "-i", f"HOME={HOME}", "PATH=/usr/bin:/bin", "MCPX_HOOKS_NO_DISCOVERY=1"]
        state = HOME / ".local" / "state" / "mcpx-hooks"
        expected = {
            ("trust", ".mcpx-hooks.toml"): (1, f"cannot open the trust state in {state}: {WHY}"),
            ("exec", "--", "true"): (0, f"opening the run history {state}/history.db: {WHY})"),
            ("serve", "--port", "0"): (2, f"cannot write the token file {state}/token: {WHY}\n"),
            # (doctor said "cannot be made: / is not writable", and no more than that)
            ("doctor",): (
                1,
                f"run history: NOT KEPT: the run history {state}/history.db cannot be made:"
                f" {WHY.removeprefix('Permission denied: ')}; runs go on in memory only\n",
            ),
        }
        for command, (code, said) in expected.items():
            argv = [*switch, *env, python, "-m", "mcpx_hooks.supervisor", *command]
            done = subprocess.run(
                argv, cwd=work, capture_output=True, text=True, check=False, timeout=60
            )
            out = done.stdout + done.stderr
            assert "Traceback" not in out, out
            assert done.returncode == code, out
            assert said in out, out
        assert not HOME.exists()
    finally:
        shutil.rmtree(work)
