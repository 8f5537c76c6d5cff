"""docs/egress.md's steps, run as the page writes them (no network here: a program that would
reach a host is a stand-in that does what it does to the machine's files)."""

from __future__ import annotations

from pathlib import Path

from docpage import Scratch, block, commands

PAGE = "egress.md"


def test_the_pip_download_example_saves_its_wheels_where_it_runs(tmp_path: Path) -> None:
    """`exec --network pypi.org … -- pip download requests` saves the wheels into the working
    directory: the page's profile must let the script write it (`strict` keeps it read-only,
    and pip ended in `Read-only file system` with exit 2)."""
    scratch = Scratch(tmp_path)
    scratch.stand_in("pip", 'echo wheel > "$PWD/requests-2.34.2-py3-none-any.whl"')
    (command,) = commands(block(PAGE, "pip download requests", "sh").body)
    done = scratch.sh(command)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (scratch.proj / "requests-2.34.2-py3-none-any.whl").read_text() == "wheel\n"
