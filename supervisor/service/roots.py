"""Where a service request's run may work: the server's roots, and the `cwd` each run gets.

A client's `cwd` is a grant (the run reads it, and under `workspace` writes it), so it is
the operator's to give, not the client's to take: it must lie inside one of `[service]
roots`. When no layer sets them, the root is the directory `serve` (or a cluster worker)
started in, unless that is `/`, the operator's home or one of its ancestors, where a
default would grant the whole home or the whole machine: then there is none. A request
without `cwd` runs in the first root, or with none, in an empty directory made for it alone
and removed when the run ends (`RunRequest.cwd_made`, `release_cwd`), or, when the server
was killed first, by the next server (or worker) to make one. `admit_cwd` blocks
(it reads the filesystem): call it from a thread.
"""

from __future__ import annotations

import contextlib
import os
import pwd
from typing import Final

import attrs
import trio

from ..core.hooks import Config, SourceKind
from ..core.records import Record
from ..process import held_dir, release_held
from ..run.scriptrun import RunRequest
from .wire import Close, WireError


@attrs.frozen(repr=False, eq=False)
class Admitter(Record):
    """Who admits a served request, as its refusals name it: the server the client talks
    to, or the cluster worker that took it (the client talks to a gateway, and the cwd and
    the roots are the worker's, on its machine)."""

    #: Who refuses, in a refusal's words.
    name: str
    #: Whose config its keys are (`[service] roots`, `[script] sandbox`): "the server's".
    whose: str
    #: One of several that take the same requests (a cluster's workers), each with its roots.
    one_of_many: bool = False

    def how_to_add(self) -> str:
        """What a refusal says about adding a root."""
        return (
            f'add its directory to {self.whose} config, e.g. [service] roots = ["/srv/project"],'
            " and restart it"
        )

    def refused(self, given: str, roots: tuple[str, ...], by_default: bool) -> str:
        """A refusal of `given` (with where it leads), outside `roots`. Roots that are the
        directory one of many workers started in (`by_default`) are said to be: the same
        request is admitted by a worker started elsewhere, so each is to be given the same."""
        outside = f"{given} is not inside a root of {self.name} ({', '.join(roots)}"
        if not (by_default and self.one_of_many):
            return f"{outside}); to allow it, {self.how_to_add()}"
        return (
            f"{outside}: the directory it was started in, as its config sets no [service] roots,"
            " so a worker started elsewhere has other roots); to allow it, give every worker the"
            " same roots: add its directory to each worker's config, e.g. [service] roots ="
            ' ["/srv/project"], and restart them'
        )


#: How a working directory made for a request is named in the temporary directory.
MADE_PREFIX: Final = "mcpx-hooks-run-"
#: A client's own server (`serve`, `mcp`).
THIS_SERVER: Final = Admitter("this server", "the server's")
#: What a refusal of this server says about adding a root.
HOW_TO_ADD: Final = THIS_SERVER.how_to_add()


def worker_admitter(host: str) -> Admitter:
    """A cluster worker on the machine `host` (its host name), as its refusals name it."""
    return Admitter(f"the worker on {host}", "the worker's", one_of_many=True)


def homes() -> list[str]:
    """The supervisor's home directories, real: `$HOME` and the password file's."""
    found = {os.path.expanduser("~")}
    with contextlib.suppress(KeyError):
        found.add(pwd.getpwuid(os.getuid()).pw_dir)
    return [os.path.realpath(h) for h in found if os.path.isabs(h)]


def default_roots(served_from: str) -> tuple[str, ...]:
    """The roots when no layer sets them: `served_from`, unless it is `/`, a home or an
    ancestor of one."""
    real = os.path.realpath(served_from)
    if real == "/" or any(_within(home, real) for home in homes()):
        return ()
    return (real,)


def roots_in_force(config: Config, served_from: str) -> tuple[str, ...]:
    """The server's roots, real and absolute: `[service] roots`, else the default."""
    if config.service_roots is None:
        return default_roots(served_from)
    return tuple(dict.fromkeys(os.path.realpath(r) for r in config.service_roots))


def admit_cwd(
    given: str | None,
    roots: tuple[str, ...],
    who: Admitter = THIS_SERVER,
    *,
    by_default: bool = False,
) -> tuple[str, bool]:
    """The run's working directory, and whether it was made for the run (the caller's to
    remove: `RunRequest.cwd_made`). Raises `WireError` (4400) for a `cwd` that is not a
    directory or lies outside every root, naming `who` refuses, the roots (`by_default`: the
    directory it started in, no config setting them) and how to add one."""
    if given is None:
        if roots:
            return roots[0], False
        # In the temporary directory, not the scratch root: that is on /dev/shm, whose
        # owner a grant never stands for (`sandbox.mappable`), and a workspace writes here.
        # Locked while this process lives: one a killed server left is removed by the next.
        return held_dir(MADE_PREFIX), True
    real = os.path.realpath(given)
    if not os.path.isdir(real):
        raise WireError(Close.BAD_REQUEST, f"cwd: no such directory on {who.name}: {given}")
    if any(_within(real, root) for root in roots):
        return real, False
    shown = f" ({real})" if real != given else ""
    if not roots:
        raise WireError(
            Close.BAD_REQUEST,
            f"cwd: {given}{shown} is not inside a root of {who.name}: it has none ([service]"
            " roots is not set, and it was started in /, the home or an ancestor of the home,"
            " which are never a root by default), so a request may not name a cwd; to allow"
            f" one, {who.how_to_add()}",
        )
    raise WireError(Close.BAD_REQUEST, f"cwd: {who.refused(given + shown, roots, by_default)}")


def check_hook_dirs(
    config: Config, roots: tuple[str, ...], cwd: str, who: Admitter = THIS_SERVER
) -> None:
    """Refuses (`WireError`, 4400) a request whose per-call hook names a `cwd` outside the
    roots and the run's own `cwd`: its working directory is read (and under `workspace`
    written) like the run's, so it is the operator's to give too."""
    allowed = (*roots, os.path.realpath(cwd))
    problems = [
        f"hooks[{hook.source.index}] ({hook.name}): cwd {hook.cwd} is not inside the run's"
        f" cwd or a root of {who.name} ({', '.join(roots) or 'it has none'})"
        for hook in config.hooks
        if hook.source.kind is SourceKind.PER_CALL
        and hook.cwd is not None
        and not any(_within(os.path.realpath(hook.cwd), root) for root in allowed)
    ]
    if problems:
        message = "; ".join(problems)
        raise WireError(Close.BAD_REQUEST, f"{message}; to allow one, {who.how_to_add()}", problems)


async def release_cwd(request: RunRequest) -> None:
    """Removes the run's working directory if it was made for it (`remove_made`)."""
    if request.cwd_made:
        await remove_made(request.cwd)


async def remove_made(cwd: str) -> None:
    """Removes a working directory `admit_cwd` made, with what a run left there (directories
    it made read-only too: `remove_tree`); shielded: it runs where a run ends or a request is
    refused, cancelled or not."""
    with trio.CancelScope(shield=True):
        await trio.to_thread.run_sync(release_held, cwd)


def _within(path: str, root: str) -> bool:
    """Whether `path` is `root` or lies beneath it (both real)."""
    return path == root or path.startswith(root.rstrip("/") + "/")
