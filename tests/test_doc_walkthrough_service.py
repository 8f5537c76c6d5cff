"""docs/service.md and docs/console.md run for real: a real `mcpx-hooks serve` in a scratch
project with a home of its own, the pages' commands as written against it, and the lines the
pages show (serve's two lines, `runs list`'s line, healthz's answer, the roots refusal, the
console's address) compared with what is printed.

Substituted: the pages' server listens on 127.0.0.1:8765 (and :9000); here `serve --port 0`
takes a free port, and the URL it prints is put for the pages' in each command and back when
comparing. `serve &` is the test's own process, stopped with SIGTERM at the end. The page's
`/home/me/.ssh` is the scratch home's `.ssh`. `console --open` opens "this machine's browser":
here `$BROWSER` is a stand-in that writes down the address it was given (no browser runs
headless), so what is checked is the address `--open` hands over, not a browser showing it.
`/srv/ci/token` is the scratch server's token file.

`events` runs "until Ctrl-C": the test reads the run's two events and then sends SIGINT, as
Ctrl-C would. Not run: the `[service] roots` table naming `/srv/builds` (a directory this
machine lacks; tests/test_doc_configs.py validates the table)."""

from __future__ import annotations

import json
import os
import pty
import re
import selectors
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from docpage import Scratch, block, commands, normal

PAGE = "service.md"
PAGE_URL = "ws://127.0.0.1:8765"


class Served:
    def __init__(self, s: Scratch, stdout: int | None = None) -> None:
        self.s = s
        self.master: int | None = None
        if stdout is None:
            self.master, slave = pty.openpty()
            out: int = slave
        else:
            out = stdout
        self.proc = subprocess.Popen(
            ["mcpx-hooks", "serve", "--port", "0"],
            cwd=s.proj,
            env=s.env,
            stdout=out if stdout is None else subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        if stdout is None:
            os.close(out)
        self.lines = self._read(2)
        found = re.search(r"listening on (ws://\S+?);", self.lines[0])
        assert found, self.lines
        self.url = found[1]
        self.http = self.url.replace("ws://", "http://")

    def _read(self, count: int) -> list[str]:
        """serve's first `count` lines (no sleeps: each read waits for the line)."""
        got = ""
        fd = self.master if self.master is not None else self.proc.stdout.fileno()  # type: ignore[union-attr]
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while got.count("\n") < count:
                assert sel.select(30), got
                chunk = os.read(fd, 4096).decode()
                assert chunk, got
                got += chunk
        return got.replace("\r\n", "\n").splitlines()

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        _, err = self.proc.communicate(timeout=30)
        if self.master is not None:
            os.close(self.master)
        assert self.proc.returncode == 0, err
        assert "Traceback" not in err, err


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Scratch, Served]]:
    s = Scratch(tmp_path)
    srv = Served(s, stdout=subprocess.PIPE)
    yield s, srv
    srv.stop()


def test_the_first_block_against_a_real_serve(served: tuple[Scratch, Served]) -> None:
    s, srv = served
    home = {str(s.home): "/home/me", srv.url: PAGE_URL, srv.http: "http://127.0.0.1:8765"}
    # serve's lines as the pages show them (stdout not a terminal).
    assert normal(srv.lines[0], home) == normal(block(PAGE, "listening on ws://", "").body)
    shown = block("console.md", "(mcpx-hooks console --open opens it", "").body
    assert normal(srv.lines[1], home) == normal(shown)

    serve, run, listing, health = commands(block(PAGE, "mcpx-hooks serve &", "sh").body)
    assert serve == "mcpx-hooks serve &"  # the fixture's own, on a free port
    done = s.sh(run.replace(PAGE_URL, srv.url))
    assert done.returncode == 0, done.stderr
    assert normal(done.stdout)[1:] == ["| hi", "RESULT null", "end: exit code 0, N ms"]
    done = s.sh(listing)
    assert done.returncode == 0, done.stderr
    line = block(PAGE, "  result  exit 0  ", "").body
    assert normal(done.stdout) == normal(line)
    done = s.sh(health.replace("http://127.0.0.1:8765", srv.http))
    said = re.search(r"# (\{.*\})", block(PAGE, "/healthz", "sh").body)
    assert said and done.stdout.strip() == said[1]


def test_the_command_line_block(served: tuple[Scratch, Served], tmp_path: Path) -> None:
    s, srv = served
    s.write(
        "job.sh",
        '#!/bin/sh\necho report > "$MCPX_ARTIFACTS_DIR/report.txt"\necho job\n',
        mode=0o755,
    )
    forms = commands(block(PAGE, "--remote URL --artifacts DIR", "sh").body)
    assert len(forms) == 6
    exec_, events, hooks, runs, show, artifacts = (
        re.sub(r" \[--\w+[^\]]*\]", "", f.replace("[--remote URL]", "--remote URL"))
        .replace(PAGE_URL, srv.url)
        .replace("URL", srv.url)
        for f in forms
    )
    done = s.sh(exec_)
    assert done.returncode == 0 and "| job" in done.stdout, done.stdout
    done = s.sh(exec_.replace(" -- ", " --json -- "))
    assert done.returncode == 0 and done.stdout.startswith('{"runId"'), done.stdout
    assert events == f"mcpx-hooks events --remote {srv.url}"
    watch = subprocess.Popen(
        [*events.split(), "--kinds", "hook,run", "--since", "0", "--json"],
        cwd=s.proj, env=s.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert watch.stdout is not None
    kinds = [json.loads(watch.stdout.readline())["kind"] for _ in range(4)]
    watch.send_signal(signal.SIGINT)  # Ctrl-C
    _, err = watch.communicate(timeout=30)
    assert kinds == ["run.started", "run.finished"] * 2, kinds
    assert watch.returncode == 0 and "Traceback" not in err, (watch.returncode, err)
    done = s.sh(hooks)
    assert done.returncode == 0 and done.stdout.strip() == "no hooks in force", done.stdout
    done = s.sh(runs)
    assert done.returncode == 0 and len(done.stdout.splitlines()) == 2, done.stdout
    run_id = done.stdout.split()[0]
    done = s.sh(show.replace("RUN_ID", run_id))
    assert done.returncode == 0 and normal(done.stdout)[1] == "| job", done.stdout
    done = s.sh(artifacts.replace("DIR", "out"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert (s.proj / "out" / "report.txt").read_text() == "report\n"
    # history.md's `runs list --remote`: the server's runs.
    (remote,) = [
        c for c in commands(block("history.md", "runs list --remote", "sh").body) if "--remote" in c
    ]
    done = s.sh(remote.replace(PAGE_URL, srv.url))
    assert done.returncode == 0 and len(done.stdout.splitlines()) == 3, done.stdout


def test_a_cwd_outside_the_roots_is_refused_as_shown(served: tuple[Scratch, Served]) -> None:
    s, srv = served
    ssh = s.home / ".ssh"
    ssh.mkdir(parents=True)
    done = s.sh(f"mcpx-hooks exec --remote {srv.url} -- true", cwd=ssh)
    assert done.returncode == 2, done.stdout
    shown = block(PAGE, "is not inside a root of this server", "").body
    said = done.stderr.removeprefix("mcpx-hooks exec: the server said: ")
    assert normal(said, {str(s.proj): "/home/me/project", str(s.home): "/home/me"}) == normal(shown)


def test_console_lines_and_commands(tmp_path: Path) -> None:
    """serve's console line on a terminal (a pty), then `console` as written."""
    s = Scratch(tmp_path)
    srv = Served(s)  # stdout a terminal
    try:
        token = (s.home / ".local" / "state" / "mcpx-hooks" / "token").read_text().strip()
        shown = block("console.md", "?token=3q", "").body.splitlines()[1]
        page_token = re.search(r"token=(\S+)", shown)
        assert page_token
        assert srv.lines[1] == shown.replace("http://127.0.0.1:8765", srv.http).replace(
            page_token[1], token
        )
        opened = s.proj / "opened"
        browser = s.stand_in("browser", f'echo "$1" > {opened}')
        open_, remote = commands(block("console.md", "mcpx-hooks console --open", "sh").body)
        done = s.sh(open_ + f" --remote {srv.url}", BROWSER=str(browser))
        assert done.returncode == 0, done.stderr
        assert opened.read_text().strip() == f"{srv.http}/?token={token}"
        token_file = s.home / ".local" / "state" / "mcpx-hooks" / "token"
        done = s.sh(
            remote.replace("ws://127.0.0.1:9000", srv.url).replace("/srv/ci/token", str(token_file))
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == f"{srv.http}/?token={token}"
    finally:
        srv.stop()
