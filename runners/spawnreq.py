"""What every way of spawning shares: the request, its fds and limits, the reports.

Standard library only. See `spawner.py` for the protocol.

A request the spawner cannot carry out fails alone: whatever arrives on the request socket
(not JSON, wrong types, unknown keys, text `execve` cannot take, numbers out of range, too
many fds, too long, no control socket) is refused with an "error" on its control socket,
which says what was wrong, or dropped when it has none, its fds closed; the spawner goes on
serving. `Request` checks everything before anything is started; what the standard library
still raises on bad input past it (`BAD_INPUT`) fails the request the same way.
"""

from __future__ import annotations

import array
import contextlib
import ctypes
import fcntl
import json
import mmap
import os
import re
import resource
import select
import signal
import socket
import sys
import termios
from collections.abc import Callable, Iterable
from typing import Any

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
CLONE_NEWPID = 0x20000000
MAX_MESSAGE = 256 * 1024
MAX_FDS = 16
#: What the owner reads of one message about a child (`supervisor/process/child.py`): an error
#: message longer than that is cut to fit.
MAX_REPORT = 4096
#: Past the highest fd a process here can have (`os.closerange` bound).
MAX_FD = 1 << 20
#: The spawner's stdin: a pipe whose end of file means the supervisor is done with it.
LIFELINE_FD = 0

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def prctl(option: int, arg: int) -> None:
    _check(_libc.prctl(option, arg, 0, 0, 0))


def descendants(pid: int) -> list[int]:
    """Every live descendant of `pid` (a host pid), parents before children, from /proc.

    Reads only the subtree (`/proc/P/task/T/children`), never the whole process table.
    """
    found: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        try:
            tids = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{parent}/task/{tid}/children", "rb") as f:
                    kids = [int(x) for x in f.read().split()]
            except OSError:
                continue
            found.extend(kids)
            todo.extend(kids)
    return found


def signal_host(pid: int, sig: int) -> None:
    """Signals host pid `pid` from any PID namespace, through its /proc directory."""
    try:
        fd = os.open(f"/proc/{pid}", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            signal.pidfd_send_signal(fd, sig)
    finally:
        os.close(fd)


def sigterm_disposition(pid: int) -> str:
    """`caught`, `ignored` or `default`: what SIGTERM does to host pid `pid`."""
    bit = 1 << (signal.SIGTERM - 1)
    masks: dict[bytes, int] = {}
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith((b"SigCgt:", b"SigIgn:")):
                    masks[line[:6]] = int(line.split()[1], 16)
    except OSError:
        return "default"
    if masks.get(b"SigCgt", 0) & bit:
        return "caught"
    return "ignored" if masks.get(b"SigIgn", 0) & bit else "default"


def terminate_init(host: int, pidfd: int) -> None:
    """SIGTERM to a tree whose root `host` (a host pid, `pidfd` its pidfd) is PID 1 of its
    own namespace, as if it were an ordinary process: an init gets, from outside its
    namespace, only the signals it handles (and SIGKILL). SIGTERM to every other process of
    the tree; to the root if it catches SIGTERM, SIGKILL if it keeps the default action
    (which would have killed it), nothing if it ignores it."""
    for pid in descendants(host):
        signal_host(pid, signal.SIGTERM)
    how = sigterm_disposition(host)
    if how != "ignored":
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(pidfd, signal.SIGTERM if how == "caught" else signal.SIGKILL)


def recv_request(sock: socket.socket) -> tuple[bytes, list[int]] | None:
    """One message off the request socket and its fds, close-on-exec (`socket.recv_fds`
    drops its flags in 3.11); None at end of file. A message that does not fit (over
    `MAX_MESSAGE` bytes, more than `MAX_FDS` fds) is refused here, on its control socket,
    and comes back without fds. Raises `BlockingIOError` when none waits."""
    fds = array.array("i")
    msg, ancdata, flags, _ = sock.recvmsg(
        MAX_MESSAGE, socket.CMSG_SPACE(MAX_FDS * fds.itemsize), socket.MSG_CMSG_CLOEXEC
    )
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    if not msg and not fds and _at_end(sock):  # else an empty message, dropped as fd-less
        return None
    if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
        too_much = f"over {MAX_MESSAGE} bytes" if flags & socket.MSG_TRUNC else None
        refuse(list(fds), too_much or f"more than {MAX_FDS} fds attached")
        return msg, []
    return msg, list(fds)


def _at_end(sock: socket.socket) -> bool:
    """Whether the peer of `sock` has gone (an empty read is also an empty message)."""
    poll = select.poll()
    poll.register(sock, select.POLLRDHUP | select.POLLHUP)
    return bool(poll.poll(0))


def control(fds: list[int]) -> socket.socket | None:
    """The control socket of a request that brought `fds`: the first. None when it cannot be
    one: the request is dropped and its fds closed (the first last); when the first is a
    socket of another kind, it is told why (an fd that is no socket leaves nowhere to say it).
    """
    try:
        ctrl = socket.socket(fileno=fds[0])
    except OSError:  # ENOTSOCK
        close_all([*fds[1:], fds[0]])
        return None
    if ctrl.family == socket.AF_UNIX and ctrl.type == socket.SOCK_SEQPACKET:
        return ctrl
    close_all(fds[1:])
    fail(ctrl, "bad spawn request: its control socket is not a Unix SOCK_SEQPACKET socket")
    ctrl.close()
    return None


def refuse(fds: list[int], why: str) -> None:
    """Fails a request that cannot even be read: every fd closed, `why` said on its control
    socket (if it has one), which is closed last."""
    if fds and (ctrl := control(fds)) is not None:
        close_all(fds[1:])
        fail(ctrl, f"bad spawn request: {why}")
        ctrl.close()


def close_all(fds: Iterable[int]) -> None:
    for fd in fds:
        os.close(fd)


#: Keeper mode: sent on a request's control socket as soon as it is taken, before anything can
#: start the child: a keeper that dies after it leaves the owner unsure whether the child ran.
#: (pidns mode counts requests in shared memory instead: `TakenCounter`.)
ACCEPTED = b'{"event": "accepted"}'


class TakenCounter:
    """How many requests this spawner has taken off its socket, in 8 bytes of memory shared
    with the supervisor (the memfd `fd` it passed; None: counted here only), counted before
    anything can start the child. When the spawner dies, the supervisor compares a request's
    number with it: taken, the child may have run and is lost; not taken, it can be sent
    again. No message, so no wake-up of the supervisor. Closed in every fork of this process
    (a hook must not write it)."""

    def __init__(self, fd: int | None) -> None:
        self._map = mmap.mmap(fd, _COUNTER_BYTES) if fd is not None else None
        self._taken = 0
        if fd is not None:
            os.close(fd)
            os.register_at_fork(after_in_child=self.close)

    def count(self) -> None:
        self._taken += 1
        if self._map is not None:
            self._map[:_COUNTER_BYTES] = self._taken.to_bytes(_COUNTER_BYTES, "little")

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None


_COUNTER_BYTES = 8


def accept(ctrl: socket.socket) -> None:
    _send_bytes(ctrl, ACCEPTED)


def send(ctrl: socket.socket, obj: dict[str, Any]) -> None:
    _send_bytes(ctrl, json.dumps(obj).encode())


def fail(ctrl: socket.socket, message: str) -> None:
    """Says on `ctrl` that the child could not start, and why: `message`, cut to what the
    owner reads of one message (`MAX_REPORT`; escaped, a character takes up to 12 bytes)."""
    data = json.dumps({"event": "error", "message": message}).encode()
    if len(data) > MAX_REPORT:
        cut = message[: (MAX_REPORT - 64) // 12] + " [...]"
        data = json.dumps({"event": "error", "message": cut}).encode()
    _send_bytes(ctrl, data)


def _send_bytes(ctrl: socket.socket, data: bytes) -> None:
    """Never blocks: a control socket nobody reads loses the message, not the loop's time
    (its owner reads a handful of messages; a full socket is one held by someone else)."""
    with contextlib.suppress(OSError):
        ctrl.send(data, socket.MSG_DONTWAIT)


def exit_report(status: int, usage: resource.struct_rusage) -> dict[str, Any]:
    code = os.waitstatus_to_exitcode(status)
    return {
        "event": "exit",
        "code": code if code >= 0 else None,
        "signal": -code if code < 0 else None,
        "cpuMs": round((usage.ru_utime + usage.ru_stime) * 1000),
        "maxRssKb": usage.ru_maxrss,
    }


class Output:
    """One collected output of a `"collect"` request: the read end of the child's pipe,
    spliced into a memfd, kernel to kernel (the bytes never enter this process, whose memory
    a warm fork copies for a later hook). `ring`: keep only the last `ring` bytes, the memfd
    written round; 0: keep all (the caller caps it). The memfd is made at the first byte."""

    __slots__ = ("count", "memfd", "pipe", "ring")

    def __init__(self, pipe: int, ring: int) -> None:
        self.pipe = pipe
        self.ring = ring
        self.memfd = -1
        #: Bytes read from the pipe so far.
        self.count = 0

    def splice(self) -> int:
        """Moves what the pipe holds now; 0 at end of file. Raises `BlockingIOError` when
        it holds nothing yet. Called when the pipe is readable or its writers are gone: an
        empty pipe is then at its end."""
        if self.memfd < 0:
            if not _pending(self.pipe):
                return 0
            self.memfd = os.memfd_create("mcpx-hook-output", os.MFD_CLOEXEC)
        at = self.count % self.ring if self.ring else self.count
        size = min(_SPLICE_CHUNK, self.ring - at) if self.ring else _SPLICE_CHUNK
        moved = os.splice(self.pipe, self.memfd, size, offset_dst=at)
        self.count += moved
        return moved

    def close(self) -> None:
        for fd in (self.pipe, self.memfd):
            if fd >= 0:
                os.close(fd)
        self.pipe = self.memfd = -1


_SPLICE_CHUNK = 1 << 16


def _pending(fd: int) -> int:
    """Bytes waiting in pipe `fd`."""
    return int.from_bytes(fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"), sys.byteorder)


def send_collected(
    ctrl: socket.socket, report: dict[str, Any], outputs: list[Output], overflow: bool
) -> None:
    """Sends the exit report of a `"collect"` request: `"stdout"` and `"stderr"` (bytes
    read), `"stderrRing"` (the stderr memfd's round size), `"overflow"`, and `"memfds"`, the
    names of the outputs whose memfds are attached, in that order."""
    out, err = outputs
    sent = [(name, o.memfd) for name, o in (("stdout", out), ("stderr", err)) if o.memfd >= 0]
    report = {
        **report,
        "stdout": out.count,
        "stderr": err.count,
        "stderrRing": err.ring,
        "overflow": overflow,
        "memfds": [name for name, _ in sent],
    }
    rights = []
    if sent:
        fds = array.array("i", [fd for _, fd in sent]).tobytes()
        rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)]
    with contextlib.suppress(OSError):
        ctrl.sendmsg([json.dumps(report).encode()], rights, socket.MSG_DONTWAIT)


class StartError(Exception):
    """The child could not be started; the message says why, for the owner."""


def resolve(argv0: str, path: str) -> str:
    """The program to exec: a name with a slash as given (relative to cwd), else from PATH."""
    if "/" in argv0:
        return argv0
    for d in path.split(":"):
        cand = os.path.join(d or ".", argv0)
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    raise StartError(f"cannot start {argv0!r}: not found on PATH")


#: Signals the spawned program starts with at their default action (Python ignores some).
DEFAULT_SIGNALS = (
    signal.SIGPIPE,
    signal.SIGXFSZ,
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGCHLD,
)


#: What the standard library may still raise on bad input past `Request` (a string it cannot
#: encode, a number it cannot convert): caught around each start, it fails that request only.
#: `Request` checks what it can see, so this should never be needed.
BAD_INPUT = (ValueError, TypeError, OverflowError)


class Collect:
    """A request's `"collect"`: the spawner reads the child's stdout (up to `stdout` bytes;
    past them the tree is killed) and stderr (its last `stderr` bytes kept) itself, and
    sends them with the exit report (`output_report`), so its owner watches one socket."""

    def __init__(self, caps: object) -> None:
        caps = _fields(caps, "collect", ("stdout", "stderr"), ())
        self.stdout = _int(caps["stdout"], "collect.stdout", 0, _LARGEST)
        # A tail of 0 would be no ring at all.
        self.stderr = _int(caps["stderr"], "collect.stderr", 1, _LARGEST)


class Sandbox:
    """A request's sandbox plan (`"sandbox"` in the request; the supervisor's `sandbox.py`
    makes it): `net` (keep the host network), `read` (read-only paths), `write` (paths
    readable and writable), `mapped` (those of `read` and `write` whose owner the hook's
    user stands for: `view.py`), `devices`, `scratch` (a writable tmpfs of `scratchBytes`),
    `returnScratch` (copy it back to the host directory once the tree is gone), `uid` (run
    as a per-child unprivileged user). Every field has its exact type: a plan that says
    anything else is refused, never read as a looser one; `mapped` names only paths of
    `read` and `write`."""

    def __init__(self, plan: object) -> None:
        plan = _fields(
            plan,
            "sandbox",
            ("net", "read", "scratch", "scratchBytes"),
            ("devices", "returnScratch", "uid", "write", "mapped"),
        )
        self.net = _bool(plan["net"], "sandbox.net")
        self.read = _paths(plan["read"], "sandbox.read")
        self.write = _paths(plan.get("write", []), "sandbox.write")
        self.mapped = _paths(plan.get("mapped", []), "sandbox.mapped")
        granted = {*self.read, *self.write}
        for i, path in enumerate(self.mapped):
            if path not in granted:
                raise _bad(f"sandbox.mapped[{i}]: {_show(path)} is neither read nor write")
        self.devices = _paths(plan.get("devices", []), "sandbox.devices")
        self.scratch = _path(plan["scratch"], "sandbox.scratch")
        self.scratch_bytes = _int(plan["scratchBytes"], "sandbox.scratchBytes", 0, _LARGEST)
        self.return_scratch = _bool(plan.get("returnScratch", False), "sandbox.returnScratch")
        self.switch_uid = _bool(plan.get("uid", True), "sandbox.uid")


class ModuleCall:
    """A request's `"module"`: run a `module` hook in a fork of this warm process (`warm.py`)
    instead of `argv`. `spec`: the hook (`module_runner.py` MODULE); `path`: directories to add
    to `sys.path`; `envFd`: the child's fd (one of `"fds"`) holding its environment as JSON,
    which only the forked child reads (the request's `"env"` is then empty)."""

    def __init__(self, call: object, targets: list[int]) -> None:
        call = _fields(call, "module", ("spec", "envFd"), ("path",))
        self.spec = _text(call["spec"], "module.spec")
        self.path = _texts(call.get("path", []), "module.path")
        self.env_fd = _int(call["envFd"], "module.envFd", 0, MAX_FD - 1)
        if self.env_fd not in targets:
            raise _bad(f"module.envFd: {self.env_fd} is not one of the child's fds")


class Request:
    """A parsed spawn request, with the child's fds where no dup2 clobbers another source.

    With `"collect"`, the child's stdout and stderr are pipes made here (`outputs`: their
    read ends), or, `attached`, already the last two of `fds` (a request handed on).
    Raises `StartError` saying what is wrong with it, having closed `fds`.
    """

    def __init__(self, raw: bytes, fds: list[int], *, attached: bool = False) -> None:
        self.fds = fds
        self.moved: list[int] = []
        #: The read ends of the stdout and stderr pipes made for a `"collect"` request.
        self.outputs: tuple[int, int] | None = None
        try:
            req = _fields(_json(raw), "", _REQUIRED, _OPTIONAL)
            self.argv = _texts(req["argv"], "argv")
            if not (self.argv and self.argv[0]):
                raise _bad("argv: no program" if not self.argv else "argv[0]: empty")
            self.cwd = _text(req["cwd"], "cwd")
            self.env = environment(req["env"])
            self.limits, self.limit_names = _limits(req.get("rlimits"))
            listed = targets = _targets(req["fds"])
            self.sandbox = None if req.get("sandbox") is None else Sandbox(req["sandbox"])
            module = req.get("module")
            self.module = None if module is None else ModuleCall(module, targets)
            self.collect = None if req.get("collect") is None else Collect(req["collect"])
            handed_on = 0  # the output pipes, when made by the spawner that hands it on
            if self.collect is not None:
                if 1 in targets or 2 in targets:
                    raise _bad("collect: stdout and stderr are the spawner's to make")
                targets = [*targets, 1, 2]
                handed_on = 2 if attached else 0
            if len(listed) + handed_on != len(fds):
                raise _bad(f"fds: {len(listed)} listed, {len(fds) - handed_on} attached")
            if self.collect is not None and not attached:
                self._make_outputs()
            floor = max(targets, default=-1) + 1
            self.pairs = list(zip(self._sources(floor), targets, strict=True))
        except StartError:
            self.close()
            self.drop_outputs()
            raise
        #: For a sandboxed child: the uid it runs as (None: the spawner's).
        self.uid: int | None = None

    def _sources(self, floor: int) -> list[int]:
        """The child's fds as sources for its targets: moved above `floor` (past every
        target) when one is below it, so that no dup2 clobbers a source still needed."""
        if not self.fds or min(self.fds) >= floor:
            return self.fds
        try:
            for fd in self.fds:
                self.moved.append(fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, floor))
        except OSError as exc:
            raise StartError(f"cannot place the child's fds below {floor}: {exc.strerror}") from exc
        return self.moved

    def _make_outputs(self) -> None:
        try:
            out_r, out_w = os.pipe2(os.O_CLOEXEC)
        except OSError as exc:
            raise StartError(f"cannot make the output pipes: {exc.strerror}") from exc
        try:
            err_r, err_w = os.pipe2(os.O_CLOEXEC)
        except OSError as exc:
            os.close(out_r)
            os.close(out_w)
            raise StartError(f"cannot make the output pipes: {exc.strerror}") from exc
        self.fds = [*self.fds, out_w, err_w]
        self.outputs = (out_r, err_r)

    def close(self) -> None:
        """Closes the child's fds here (not `outputs`, which the caller keeps or drops)."""
        for fd in (*self.fds, *self.moved):
            os.close(fd)
        self.fds = self.moved = []

    def drop_outputs(self) -> None:
        if self.outputs is not None:
            for fd in self.outputs:
                os.close(fd)
            self.outputs = None

    def place_fds(self) -> None:
        """Puts each fd at its number in this process and closes every other copy: for a
        fork that runs without an exec (`warm.py`), where close-on-exec does not help."""
        targets = {t for _, t in self.pairs}
        sources = {m for m, _ in self.pairs}
        for fd in self.fds:
            if fd not in sources and fd not in targets:
                os.close(fd)
        for moved, target in self.pairs:
            os.dup2(moved, target, inheritable=True)
        for fd in sources - targets:
            os.close(fd)
        self.fds = self.moved = []

    def chdir(self) -> None:
        try:
            os.chdir(self.cwd)
        except OSError as exc:
            raise StartError(f"cannot use cwd {self.cwd!r}: {exc.strerror}") from exc

    def setrlimits(self) -> None:
        for number, soft, hard in self.limits:
            try:
                resource.setrlimit(number, (soft, hard))
            except (OSError, ValueError) as exc:
                raise StartError(f"cannot set {self.limit_names[number]}: {exc}") from exc

    def posix_spawn(self, program: str) -> int:
        return os.posix_spawn(
            program,
            self.argv,
            self.env,
            file_actions=[(os.POSIX_SPAWN_DUP2, m, t) for m, t in self.pairs],
            setsid=True,
            setsigmask=(),
            setsigdef=DEFAULT_SIGNALS,
        )


_REQUIRED = ("argv", "cwd", "env", "fds")
_OPTIONAL = ("rlimits", "sandbox", "module", "collect")
#: The largest number a size or a resource limit can be (`setrlimit` takes a signed 64 bits;
#: `RLIM_INFINITY` is -1 here).
_LARGEST = (1 << 63) - 1
#: What `execve` cannot take in an argv item, an environment name or value, or a path: NUL,
#: and lone surrogates, which have no UTF-8 (`posix_spawn` raises `ValueError` and
#: `UnicodeEncodeError`). The rule of the supervisor's `spawntext.py`, where input enters;
#: this is the spawner's own check, which never trusts its caller.
_NOT_TEXT = re.compile("[\0\ud800-\udfff]")
_JSON_TYPES = {
    dict: "an object",
    list: "an array",
    str: "a string",
    bool: "a boolean",
    int: "an integer",
    float: "a number",
    type(None): "null",
}


def _bad(why: str) -> StartError:
    return StartError(f"bad spawn request: {why}")


def _show(value: object) -> str:
    """`value` for a message: its repr, cut short."""
    text = repr(value)
    return text if len(text) <= 60 else text[:56] + "..."


def _a(value: object) -> str:
    return _JSON_TYPES.get(type(value), type(value).__name__)


def _json(raw: bytes) -> object:
    try:
        return json.loads(raw)
    except RecursionError as exc:
        raise _bad("JSON nested too deeply") from exc
    except ValueError as exc:  # UnicodeDecodeError too; a number over 4300 digits
        raise _bad(f"not JSON: {exc}") from exc


def _fields(
    value: object, where: str, required: tuple[str, ...], optional: tuple[str, ...]
) -> dict[str, Any]:
    """`value`, a JSON object with every key of `required` and none but those and `optional`
    (a misspelt key is refused rather than left out: "sandbx" must not run unconfined)."""
    at = f"{where}: " if where else ""
    if not isinstance(value, dict):
        raise _bad(f"{at}not an object but {_a(value)}")
    unknown = [key for key in value if key not in required and key not in optional]
    if unknown:
        more = f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else ""
        raise _bad(f"{at}unknown key {_show(unknown[0])}{more}")
    for key in required:
        if key not in value:
            raise _bad(f"{at}{key!r} is missing")
    return value


def _text(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise _bad(f"{where}: not a string but {_a(value)}")
    if (found := _NOT_TEXT.search(value)) is not None:
        raise _bad(f"{where}: {_not_text(found.group())}")
    return value


def _not_text(char: str) -> str:
    if char == "\0":
        return "holds a NUL character"
    return "holds a lone surrogate (not valid Unicode)"


def _texts(value: object, where: str) -> list[str]:
    if not isinstance(value, list):
        raise _bad(f"{where}: not an array but {_a(value)}")
    if not _clean(value):  # then say which item and why
        for i, item in enumerate(value):
            _text(item, f"{where}[{i}]")
    return value


def _clean(texts: Iterable[object]) -> bool:
    """Whether every one of `texts` is a string `execve` takes: one scan of them all (this
    is on every request's way; an item at a time costs several microseconds more)."""
    try:
        joined = "".join(texts)  # type: ignore[arg-type]
    except TypeError:  # not all strings
        return False
    if joined.isascii():  # known without a scan
        return "\0" not in joined
    return _NOT_TEXT.search(joined) is None


def _path(value: object, where: str) -> str:
    return _absolute(_text(value, where), where)


def _paths(value: object, where: str) -> list[str]:
    paths = _texts(value, where)
    for i, path in enumerate(paths):
        _absolute(path, f"{where}[{i}]")
    return paths


def _absolute(path: str, where: str) -> str:
    if not path.startswith("/"):
        raise _bad(f"{where}: {_show(path)} is not an absolute path")
    return path


def environment(value: object, where: str = "env") -> dict[str, str]:
    """`value`, an environment `execve` takes (names not empty, without "=", NUL or a lone
    surrogate; values without NUL or a lone surrogate); else `StartError` saying which."""
    if not isinstance(value, dict):
        raise _bad(f"{where}: not an object but {_a(value)}")
    if "" not in value and "=" not in "".join(value) and _clean(value) and _clean(value.values()):
        return value
    for name, item in value.items():  # say which and why
        if not name:
            raise _bad(f"{where}: a name is empty")
        if "=" in name:
            raise _bad(f"{where}: the name {_show(name)} holds '='")
        if (found := _NOT_TEXT.search(name)) is not None:
            raise _bad(f"{where}: the name {_show(name)} {_not_text(found.group())}")
        _text(item, f"{where}[{_show(name)}]")
    return value


def _int(value: object, where: str, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise _bad(f"{where}: not an integer but {_a(value)}")
    if not low <= value <= high:
        raise _bad(f"{where}: {_show(value)} is out of range ({low} to {high})")
    return value


def _bool(value: object, where: str) -> bool:
    if not isinstance(value, bool):
        raise _bad(f"{where}: not a boolean but {_a(value)}")
    return value


def _targets(value: object) -> list[int]:
    """`"fds"`: the numbers the child's fds get, each once."""
    if not isinstance(value, list):
        raise _bad(f"fds: not an array but {_a(value)}")
    targets = [_int(t, f"fds[{i}]", 0, MAX_FD - 1) for i, t in enumerate(value)]
    if len(set(targets)) != len(targets):
        raise _bad("fds: a number is listed twice")
    return targets


#: Every resource limit this platform has, by name (looked up per limit per request).
_LIMIT_NUMBERS = {
    name: int(getattr(resource, name)) for name in dir(resource) if name.startswith("RLIMIT_")
}


def _limits(value: object) -> tuple[list[tuple[int, int, int]], dict[int, str]]:
    """`"rlimits"`: `[name, soft, hard]` each; `-1` is `RLIM_INFINITY`. Returns them by
    number, and each number's name."""
    if value is None:
        return [], {}
    if not isinstance(value, list):
        raise _bad(f"rlimits: not an array but {_a(value)}")
    limits: list[tuple[int, int, int]] = []
    names: dict[int, str] = {}
    for i, item in enumerate(value):
        where = f"rlimits[{i}]"
        if not (isinstance(item, list) and len(item) == 3):
            raise _bad(f"{where}: not [name, soft, hard]")
        name, soft, hard = item
        number = _LIMIT_NUMBERS.get(name) if isinstance(name, str) else None
        if number is None:
            raise _bad(f"{where}: unknown resource limit {_show(name)}")
        soft = _int(soft, f"{where}[1]", -1, _LARGEST)
        hard = _int(hard, f"{where}[2]", -1, _LARGEST)
        limits.append((number, soft, hard))
        names[number] = name
    return limits, names


def start_failed(program: str, exc: OSError) -> StartError:
    return StartError(f"cannot start {program!r}: {exc.strerror}")


def command(msg: bytes) -> str | None:
    """The `"cmd"` of a message on a control socket; None for anything else."""
    try:
        cmd = json.loads(msg).get("cmd")
    except (ValueError, AttributeError, RecursionError):
        return None
    return cmd if isinstance(cmd, str) else None


def fork_exec(req: Request, program: str, confine: Callable[[], None] | None = None) -> int:
    """Starts the child by fork: for limits that cannot be borrowed, set in the fork, then
    `confine` (the sandbox's last steps, in the forked child only), then `execve`.

    The forked child says why it could not exec on a close-on-exec pipe; end of file on it
    means the exec happened.
    """
    err_r, err_w = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:
        why = f"cannot start {program!r}"
        try:
            os.setsid()
            for sig in DEFAULT_SIGNALS:
                signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_SETMASK, ())
            for moved, target in req.pairs:
                os.dup2(moved, target)
            req.setrlimits()
            if confine is not None:  # (it uses fds of the spawner's: its Landlock ruleset)
                confine()
            # Only the child's own fds from here: the spawner's (close-on-exec, but open
            # until the exec) would fill an open-files limit set below their numbers.
            top = max((target for _, target in req.pairs), default=-1) + 1
            os.closerange(top, err_w)
            os.closerange(err_w + 1, MAX_FD)
            os.execve(program, req.argv, req.env)
        except StartError as exc:
            why = str(exc)
        except OSError as exc:
            why = str(start_failed(program, exc))
        finally:
            os.write(err_w, why.encode())
            os._exit(127)
    os.close(err_w)
    try:
        failed = read_all(err_r)
    finally:
        os.close(err_r)
    if failed:
        os.waitpid(pid, 0)
        raise StartError(failed.decode(errors="replace"))
    return pid


def read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 4096):
        chunks.append(chunk)
    return b"".join(chunks)
