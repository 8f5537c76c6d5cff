"""Leak checks for process tests: no child process, no open fd, no marked process left behind."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import psutil
import pytest


class Marker(str):
    """A string to put in the argv of a test's processes, to find them from the outside."""

    def alive(self) -> list[psutil.Process]:
        """Every live process on the host whose argv mentions this marker (zombies have none)."""
        return [
            p
            for p in psutil.process_iter(["cmdline"])
            if any(self in arg for arg in p.info["cmdline"] or ())
        ]


def _open_fds() -> dict[int, str]:
    fds = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            fds[int(name)] = os.readlink(f"/proc/self/fd/{name}")
        except OSError:  # the directory fd listdir itself used, closed by now
            continue
    return fds


@pytest.fixture
def marker() -> Iterator[Marker]:
    """A marker unique to this test, for the argv of its grandchildren: none may outlive it."""
    mark = Marker(f"mcpx-test-{uuid.uuid4().hex}")
    yield mark
    assert mark.alive() == []


@pytest.fixture
def no_leaks() -> Iterator[None]:
    """The test (its Trio run included) leaves no child process and no open fd behind."""
    before = _open_fds()
    yield
    assert psutil.Process().children(recursive=True) == []
    after = _open_fds()
    assert after == before, {"leaked": after.keys() - before.keys()}
