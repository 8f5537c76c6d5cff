"""Test helpers for the docs' walkthroughs: a page's fenced blocks (taken from the page's text,
never copied into a test), a scratch project to run its shell blocks in (this checkout's
`mcpx-hooks` first on PATH, a home of its own, discovery on, no MCPX_HOOKS_* of the caller's),
and a normaliser that sets aside what differs from run to run (ids, durations, paths, hashes)
so printed output can be compared with the page's."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import attrs

DOCS = Path(__file__).resolve().parent.parent / "docs"


@attrs.frozen
class Block:
    lang: str
    body: str
    line: int


def blocks(page: str) -> list[Block]:
    """The page's fenced blocks, in order, each with its language and first line number."""
    text = (DOCS / page).read_text()
    found = re.finditer(r"^```(\w*)\n(.*?)^```$", text, flags=re.DOTALL | re.MULTILINE)
    return [Block(m[1], m[2], text[: m.start()].count("\n") + 2) for m in found]


def block(page: str, holding: str, lang: str | None = None) -> Block:
    """The page's first block holding `holding` (and tagged `lang`, when given)."""
    return next(b for b in blocks(page) if holding in b.body and (lang is None or b.lang == lang))


def after(page: str, holding: str) -> Block:
    """The block right after the first one holding `holding`."""
    found = blocks(page)
    at = next(i for i, b in enumerate(found) if holding in b.body)
    return found[at + 1]


def commands(body: str) -> list[str]:
    """A shell block's commands: one a line, a trailing `# comment` and `\\` continuations
    handled; comment-only and blank lines left out."""
    joined = re.sub(r"\\\n\s*", " ", body)
    out = []
    for raw in joined.splitlines():
        line = re.sub(r"\s+#\s.*$", "", raw).strip()
        if line and not line.startswith("#"):
            out.append(line)
    return out


def normal(text: str, subst: Mapping[str, str] = {}) -> list[str]:
    """`text`'s lines with what changes from run to run set aside: `subst` first (a path of
    the scratch project → the page's), then run ids, durations, SHA-256s, times."""
    for real, shown in sorted(subst.items(), key=lambda kv: -len(kv[0])):
        text = text.replace(real, shown)
    text = re.sub(r"\b[0-9a-f]{64}\b", "SHA", text)
    text = re.sub(r"\b[0-9a-f]{16}\b", "RUNID", text)
    text = re.sub(r"\b\d+ ms\b", "N ms", text)
    text = re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z", "TIME", text)
    return [line.rstrip() for line in text.strip("\n").splitlines()]


@attrs.define(repr=False)
class Scratch:
    """A scratch project `proj` under `root`, with a home of its own."""

    root: Path
    env: dict[str, str] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.root.chmod(0o755)
        self.proj.mkdir(exist_ok=True)
        home = self.home
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("MCPX_HOOKS_")}
        path = f"{Path(sys.executable).parent}:{self.env.get('PATH', '/usr/bin:/bin')}"
        self.env.update(
            HOME=str(home),
            XDG_CONFIG_HOME=str(home / ".config"),
            XDG_STATE_HOME=str(home / ".local" / "state"),
            PATH=path,
        )

    @property
    def proj(self) -> Path:
        return self.root / "proj"

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def user_config(self) -> Path:
        return self.home / ".config" / "mcpx-hooks" / "config.toml"

    def write(self, name: str, text: str, mode: int | None = None) -> Path:
        path = self.proj / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        if mode is not None:
            path.chmod(mode)
        return path

    def sh(
        self, command: str, stdin: str = "", cwd: Path | None = None, **env: str
    ) -> subprocess.CompletedProcess[str]:
        """`command` run by `sh -c` as the page writes it; no traceback of ours to a person
        (on stderr: a script's own traceback is part of its run's view, on stdout)."""
        done = subprocess.run(
            ["sh", "-c", command],
            cwd=cwd or self.proj,
            env={**self.env, **env},
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert "Traceback" not in done.stderr, (command, done.stderr)
        return done

    def stand_in(self, name: str, script: str) -> Path:
        """A program `name` first on PATH (in the project's `.bin`), for one the page names
        that is missing here or too slow for a test."""
        path = self.proj / ".bin" / name  # in the project: the sandbox sees it
        path.parent.mkdir(exist_ok=True)
        path.write_text(f"#!/bin/sh\n{script}\n")
        path.chmod(0o755)
        if not self.env["PATH"].startswith(f"{path.parent}:"):
            self.env["PATH"] = f"{path.parent}:{self.env['PATH']}"
        return path
