"""The warm module runner: a `module` hook runs in a fork of the spawner, not a new interpreter.

Standard library only. The spawner is a Python process that is already running, with the
module runner (`module_runner.py`) imported. Starting `python -I -S` and importing the same
costs tens of milliseconds; a fork of the spawner costs under one, and the spawner forks
ahead of need: it keeps one *waiting fork* per kind (`plain` for profile none, `jailed` for
strict and net), made while it is idle, and a `module` request (`spawnreq.ModuleCall`) is
handed to it. The waiting fork has already done everything that does not depend on the
request, off the request's path:

* it is PID 2 of its own PID namespace, after the namespace's reaper (`reapers.py`; forked
  while the spawner is armed for one), in its
  own session, with every inherited fd closed (the spawner's sockets, pidfds, lifeline) but
  its hand-over socket (and, for `jailed`, the empty network namespace);
* `jailed`: it has left the mount, IPC and UTS namespaces and made its mount tree private,
  read-only and nosuid (`jail.arm`), as an armed jail thread has.

On hand-over (the request's bytes, its fds, the per-child uid) it does what a cold child gets
on the same path: fds 0, 1, 2 in place, cwd, resource limits (hard ones too), for `jailed`
the filesystem view, network namespace, uid, no_new_privs, Landlock and seccomp
(`jail.prepare`), and replies "ok" or why not (the spawner then reports "started" or
"error"). Then it makes itself look like a fresh `python -I -S -B module_runner.py MODULE`
and runs the hook:

* the environment is exactly the request's, read from `envFd` by the child itself: the
  spawner never holds a hook's environment or input (stdin is a pipe only the child reads),
  so no fork can find an earlier hook's secrets in the memory it inherits;
* `sys.argv`, `sys.path` (the interpreter's own, plus `path`), `sys.stdin`/`stdout`/`stderr`
  and the signal dispositions are a fresh interpreter's;
* nothing a hook does reaches the spawner or a later hook: each runs in its own copy of the
  process, which exits (`os._exit`) when the hook returns; the spawner never runs hook code.

What a fork shares with its siblings, unlike a cold start: the spawner's imported modules
(the standard library ones the runner uses, and this package's `runners`) and the
interpreter's hash seed (`random` is reseeded at fork). Async hooks import asyncio in the
child, as a cold one does.
"""

from __future__ import annotations

import array
import contextlib
import gc
import json
import os
import select
import signal
import socket
import sys

from . import idmap, jail, memcg, module_runner
from .checks import environment
from .libc import PR_SET_DUMPABLE, libc
from .protocol import MAX_FDS, MAX_MESSAGE
from .reapers import Reaper
from .spawnreq import Request
from .start import BAD_INPUT, DEFAULT_SIGNALS, StartError

#: The kinds of waiting fork: for requests without a sandbox, and for sandboxed ones.
PLAIN = "plain"
JAILED = "jailed"
#: How long a waiting fork may take to set itself up for a request before it is killed.
HAND_OVER_BOUND_S = 10.0
#: `sys.path` as the interpreter made it, without the folder the spawner adds for `runners`.
_HOME = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASE_PATH = tuple(p for p in sys.path if p != _HOME)
_RUNNER_FILE = os.path.abspath(module_runner.__file__ or "module_runner.py")
#: A hook the waiting fork runs once, to touch what a real one will (`_ready_interpreter`).
_REHEARSAL = os.path.join(os.path.dirname(_RUNNER_FILE), "rehearsal.py")
#: The input it gets: a hook's, of the supervisor's protocol version (`hookenv.PROTOCOL`).
REHEARSAL_INPUT = '{"protocol": 1, "hook": {"name": "rehearsal"}}'
_MAX_ENV = 1 << 20


class Lost(Exception):
    """The waiting fork was gone before it took the request (killed from outside)."""


class WaitingFork:
    """A fork of the spawner waiting for one `module` request (see the module docstring).

    Made with `fork_waiting` while the spawner is armed for a new PID namespace.
    """

    def __init__(
        self, pid: int, sock: socket.socket, kind: str, cgroup: memcg.Cgroup | None = None
    ) -> None:
        self.pid = pid
        self.sock = sock
        self.kind = kind
        #: The memory cgroup it joined (`memcg.py`), which its hook's tree then runs in.
        self.cgroup = cgroup
        self.reaper: Reaper | None = None  # (the init of its namespace: `reapers.py`)

    def hand_over(self, raw: bytes, fds: list[int], uid: int | None) -> None:
        """Gives it the request (its bytes and fds, the child's fds first); returns once it
        has set itself up. Raises `StartError` with its reason, or `Lost`."""
        header = b"%d\n" % (-1 if uid is None else uid)
        try:
            self.sock.sendmsg(
                [header + raw],
                [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds).tobytes())],
            )
            self.sock.settimeout(HAND_OVER_BOUND_S)
            reply, made = _receive(self.sock, 4096, socket.MSG_CMSG_CLOEXEC)
        except TimeoutError:
            self.discard()
            raise StartError("the warm runner's fork did not set itself up in time") from None
        except OSError as exc:
            self.discard()
            raise Lost(str(exc)) from exc
        finally:
            self.sock.close()
        if reply == b"ok" or reply.startswith(b"ok\n"):
            _adopt(reply, made)
            return
        for fd in made:
            os.close(fd)
        if not reply:
            self.discard()
            raise Lost("it exited")
        self.discard()  # it exits after saying why
        raise StartError(reply.decode(errors="replace"))

    def discard(self) -> None:
        """Kills and reaps it (the spawner is closing, or it broke)."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)
        if self.reaper is not None:
            self.reaper.discard()
        self.sock.close()


def ready_spawner() -> None:
    """Makes once, in the spawner, what every waiting fork would otherwise make for itself:
    the interpreter's AST node types, which the first `compile` in a process creates (about
    120 classes, 650 objects the collector tracks, ~1 ms). The spawner imports its own
    modules from bytecode and so compiles nothing (unless that bytecode is stale); a fork
    compiles at once (the rehearsal's source, then a hook's), and those 650 allocations
    started collections in it too: back-to-back requests waited for both."""
    compile("", _REHEARSAL, "exec", dont_inherit=True)


def fork_waiting(
    kind: str, empty_net: int | None, cgroup: memcg.Cgroup | None = None
) -> WaitingFork:
    """Forks a waiting fork of `kind`; the caller has armed this thread for a PID namespace.
    `cgroup`: the memory cgroup the fork joins at once (its hook's tree runs there)."""
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the fork, which never returns
        _waiting_child(theirs, kind, empty_net, cgroup)
    theirs.close()
    return WaitingFork(pid, mine, kind, cgroup)


def _waiting_child(
    sock: socket.socket, kind: str, empty_net: int | None, cgroup: memcg.Cgroup | None = None
) -> None:
    """The fork: set up, wait, take one request, run the hook; never returns."""
    code = 127
    # Everything here is the spawner's and lives as long as this fork: out of the collector's
    # reach at once, and its count from zero. A collection walks every young object, writing
    # to each (so copying the pages they share with the spawner), and it comes when the count
    # the fork inherited reaches the threshold, wherever the spawner's own happened to be.
    gc.freeze()
    try:
        os.setsid()
        cgroup_fds = cgroup.fds() if cgroup is not None else []
        if kind != JAILED:
            idmap.forget()
        # (jailed: the user namespaces of idmapped grants the spawner keeps, `idmap.py`)
        keep = {sock.fileno(), *([empty_net] if empty_net is not None else []), *cgroup_fds}
        _close_fds_except(sorted({*keep, *idmap.kept_fds()}))
        for sig in DEFAULT_SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, ())
        broken = None
        if cgroup is not None:
            try:
                cgroup.join()
            except OSError as exc:
                broken = f"sandbox: cannot join the memory cgroup: {exc.strerror}"
        if kind == JAILED and broken is None:
            try:
                jail.arm(pid=False)
            except (OSError, StartError) as exc:
                broken = f"sandbox: {exc}"
        _ready_interpreter(sock)
        taken = _take_request(sock)
        if taken is None:
            code = 0  # the spawner is closing
            return
        raw, fds, uid = taken
        try:
            if broken is not None:
                raise StartError(broken)
            req = Request(raw, fds, attached=True)
            _bound(req, cgroup)
            env, spec, made = _set_up(req, uid, empty_net)
        except (StartError, *BAD_INPUT) as exc:  # the spawner passes it on as the error
            sock.send(str(exc).encode(errors="backslashreplace"))
            return
        _say_ok(sock, made)
        sock.close()
        _fresh_interpreter(env, req)
        code = module_runner.run(spec)
    except BaseException:
        with contextlib.suppress(BaseException):
            import traceback  # here: the spawner's start need not load it (~2 ms)

            traceback.print_exc()
    finally:
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _take_request(sock: socket.socket) -> tuple[bytes, list[int], int | None] | None:
    """The request the spawner hands over (`WaitingFork.hand_over`): its bytes, its fds, the
    uid to run as; None when the spawner closes instead."""
    msg, fds = _receive(sock, _HEADER + MAX_MESSAGE)
    if not msg:
        return None
    header, _, raw = msg.partition(b"\n")
    uid = int(header)
    return raw, fds, (None if uid < 0 else uid)


#: Room for the uid line before a handed-over request.
_HEADER = 32


def _bound(req: Request, cgroup: memcg.Cgroup | None) -> None:
    """The request's memory bound on this fork's cgroup; then no fd of the cgroup stays open
    (the hook must not reach its limit)."""
    if cgroup is None:
        return
    try:
        if req.sandbox is not None and req.sandbox.memory_bytes:
            cgroup.limit(req.sandbox.memory_bytes)
    except OSError as exc:
        raise StartError(f"sandbox: cannot bound memory: {exc.strerror}") from exc
    finally:
        cgroup.close()


def _receive(sock: socket.socket, size: int, flags: int = 0) -> tuple[bytes, list[int]]:
    """A message and the fds that came with it (`flags`: the spawner's are close-on-exec,
    its children must not inherit them)."""
    fds = array.array("i")
    msg, ancdata, _, _ = sock.recvmsg(size, socket.CMSG_SPACE(MAX_FDS * fds.itemsize), flags)
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    return msg, list(fds)


def _say_ok(sock: socket.socket, made: list[tuple[idmap.Key, int]]) -> None:
    """Tells the spawner it is set up, handing it the user namespaces it made (`idmap.py`):
    "ok", then a line of ids per namespace; then closes them."""
    lines = b"".join(b"\n%d %d %d %d" % key for key, _ in made)
    fds = array.array("i", [fd for _, fd in made]).tobytes()
    try:
        sock.sendmsg([b"ok" + lines], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)] if made else [])
    finally:
        for _, fd in made:
            os.close(fd)


def _adopt(reply: bytes, fds: list[int]) -> None:
    """Keeps the namespaces a fork handed back with its "ok" (`_say_ok`)."""
    keys = [tuple(int(v) for v in line.split()) for line in reply.split(b"\n")[1:]]
    if len(keys) != len(fds) or any(len(key) != 4 for key in keys):
        for fd in fds:
            os.close(fd)
        return
    idmap.adopt([((k[0], k[1], k[2], k[3]), fd) for k, fd in zip(keys, fds, strict=True)])


def _set_up(
    req: Request, uid: int | None, empty_net: int | None
) -> tuple[dict[str, str], str, list[tuple[idmap.Key, int]]]:
    """What depends on the request; returns the hook's environment, MODULE, and the user
    namespaces made for it, to hand back (`_say_ok`)."""
    call = req.module
    if call is None:
        raise StartError("not a module request")
    try:
        req.place_fds()
    except OSError as exc:
        raise StartError(f"cannot place the child's fds: {exc.strerror}") from exc
    env = _read_env(call.env_fd)
    made: list[tuple[idmap.Key, int]] = []
    if req.sandbox is None:
        req.setrlimits()
        req.chdir()
    else:
        try:
            scratch_fd, seal = jail.prepare(req, req.sandbox, uid, empty_net)
        except OSError as exc:  # a namespace or mount step (`libc.ConfineError`)
            raise StartError(f"sandbox: {exc}") from exc
        finally:
            made = idmap.forget()  # (before the hook: none of the spawner's stays open)
        if scratch_fd is not None:
            os.close(scratch_fd)
        if empty_net is not None:
            os.close(empty_net)
        req.setrlimits()  # (after `prepare`, which keeps RLIMIT_NPROC for `seal` rootless)
        seal()
        # As a cold child is after its exec (a uid change made this one undumpable, which
        # would hide its own /proc/self from it).
        _prctl_dumpable()
    return env, call.spec, made


def _read_env(fd: int) -> dict[str, str]:
    """The environment the supervisor wrote to a memfd (read from offset 0), then closed."""
    try:
        try:
            raw = os.pread(fd, _MAX_ENV + 1, 0)
        finally:
            os.close(fd)
        if len(raw) > _MAX_ENV:
            raise ValueError(f"over {_MAX_ENV} bytes")
        env = json.loads(raw)
    except (OSError, ValueError, RecursionError) as exc:
        raise StartError(f"cannot read the hook's environment: {exc}") from exc
    return environment(env, "the environment in module.envFd")


def _prctl_dumpable() -> None:
    libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)


def _close_fds_except(keep: list[int]) -> None:
    low = 3
    for fd in keep:
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, os.sysconf("SC_OPEN_MAX"))


def _ready_interpreter(sock: socket.socket) -> None:
    """What a fresh interpreter has that does not depend on the request, done while waiting:
    streams on fds 0, 1, 2 (they stay on those numbers when the request's fds are put
    there), signal dispositions, no bytecode written; then, unless a request (or the
    spawner's end) is there already, a rehearsal of a hook's run, so the pages it writes are
    copied from the spawner now rather than while a hook runs. (Back to back, the request
    often comes while this fork readies itself: a rehearsal then costs it more than it
    saves, ~0.7 ms of CPU against ~0.15 ms of its hook's run.)"""
    sys.dont_write_bytecode = True  # as -B has it: a hook's imports leave no __pycache__
    # The spawner started with the same scrubbed locale a cold hook gets: same UTF-8 mode.
    errors = "surrogateescape" if sys.flags.utf8_mode else "strict"
    streams = {
        "stdin": open(0, encoding="utf-8", errors=errors, closefd=False),  # noqa: SIM115
        "stdout": open(1, "w", encoding="utf-8", errors=errors, closefd=False),  # noqa: SIM115
        "stderr": open(  # noqa: SIM115
            2, "w", encoding="utf-8", errors="backslashreplace", closefd=False, buffering=1
        ),
    }
    for name, stream in streams.items():
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)  # typeshed calls these final; they are not
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    if not select.select([sock], [], [], 0)[0]:
        _rehearse()
    # And what this fork made since, for the hook's run likewise (see `_waiting_child`).
    gc.freeze()


def _rehearse() -> None:
    path = list(sys.path)
    try:
        fn = module_runner.load(f"{_REHEARSAL}:hook")
        json.dumps(fn(json.loads(REHEARSAL_INPUT)))
    finally:
        sys.path[:] = path
        for name in [n for n in sys.modules if n.startswith("_mcpx_hook_")]:
            del sys.modules[name]


def _fresh_interpreter(env: dict[str, str], req: Request) -> None:
    """The rest of a fresh interpreter's state, from the request."""
    assert req.module is not None
    # Item by item: `clear` and `update` are `MutableMapping`'s, a `popitem` (a new iterator)
    # per variable and an abstract-class check that a fork makes afresh (~0.1 ms in all).
    for name in list(os.environ):
        del os.environ[name]
    for name, value in env.items():
        os.environ[name] = value
    paths = [arg for p in req.module.path for arg in ("--path", p)]
    sys.argv[:] = [_RUNNER_FILE, *paths, req.module.spec]  # as the cold command line has it
    sys.path[:] = [*BASE_PATH, *req.module.path]
