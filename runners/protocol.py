"""The spawn protocol's messages: taking requests off the request socket, and what is said on
each request's control socket (`spawner.py` has the protocol).

Standard library only. Sending never blocks the spawner's loop: a control socket nobody reads
loses the message (`_send_bytes`).
"""

from __future__ import annotations

import array
import contextlib
import json
import mmap
import os
import resource
import select
import socket
from collections.abc import Iterable, Sequence
from typing import Any

#: The largest request the spawner takes: as much as one Unix datagram can be at most (the
#: kernel builds it in one allocation of at most 4 MiB), more than `execve` takes (ARG_MAX, 2
#: MiB where the stack's limit is 8 MiB). The supervisor raises its socket's send buffer
#: towards it (`SO_SNDBUF`, within `net.core.wmem_max`), and says what it cannot send.
MAX_MESSAGE = 4 * 1024 * 1024
MAX_FDS = 16
#: What the owner reads of one message about a child (`supervisor/process/child.py`): an error
#: message longer than that is cut to fit.
MAX_REPORT = 4096
#: What a report cut short ends with: the supervisor's redaction drops whatever part of a
#: secret comes right before it (`core/redact.py`'s `CUT`, kept in step by a test).
CUT = " [...]"
#: The spawner's stdin: a pipe whose end of file means the supervisor is done with it.
LIFELINE_FD = 0


def recv_request(sock: socket.socket, *, shared: bool = False) -> tuple[bytes, list[int]] | None:
    """One message off the request socket and its fds, close-on-exec (`socket.recv_fds`
    drops its flags in 3.11); None at end of file. A message that does not fit (over
    `MAX_MESSAGE` bytes, more than `MAX_FDS` fds) is refused here, on its control socket,
    and comes back without fds. Raises `BlockingIOError` when none waits."""
    fds = array.array("i")
    anc, cloexec = socket.CMSG_SPACE(MAX_FDS * fds.itemsize), socket.MSG_CMSG_CLOEXEC
    if shared:  # (read by several processes: `keepers.py`)
        # Received into a mapping of its own, unmapped at once: its pages are touched only as
        # far as the message goes, and no request's bytes outlive it there.
        with mmap.mmap(-1, MAX_MESSAGE) as inbox:
            size, ancdata, flags, _ = sock.recvmsg_into([inbox], anc, cloexec)
            msg = inbox[:size]
    else:
        # Its size peeked first (a Unix datagram's whole length, `MSG_TRUNC`), then read into
        # a buffer of that size: a mapping of `MAX_MESSAGE` made and dropped per request cost
        # 25 us of its way. One over `MAX_MESSAGE` is read into one byte, and refused below.
        size = sock.recvmsg_into([bytearray(1)], 0, socket.MSG_PEEK | socket.MSG_TRUNC)[0]
        fits = 0 < size <= MAX_MESSAGE
        msg, ancdata, flags, _ = sock.recvmsg(size if fits else 1, anc, cloexec)
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


#: Keeper mode: sent on a request's control socket just before the spawn (the request checked,
#: the keeper readied), naming the keeper: a keeper that dies before it never started the
#: child; one that dies after it leaves the owner unsure whether the child ran. The owner
#: knows whom to kill should the keeper stop answering before it says "started" (a child
#: that SIGSTOPs its keeper at once). (pidns mode counts requests in shared memory instead:
#: `TakenCounter`.)
ACCEPTED = b'{"event": "accepted", "keeper": %d}'


class TakenCounter:
    """How many requests this spawner has taken off its socket, in 8 bytes of memory shared
    with the supervisor (the memfd `fd` it passed; None: counted here only), counted before
    anything can start the child. When the spawner dies, the supervisor compares a request's
    number with it: taken, the child may have run and is lost; not taken, it can be sent
    again. No message, so no wake-up of the supervisor. Closed in every fork of this process
    (a hook must not write it)."""

    def __init__(self, fd: int | None) -> None:
        self._map = mmap.mmap(fd, TAKEN_BYTES) if fd is not None else None
        self._taken = 0
        if fd is not None:
            os.close(fd)
            os.register_at_fork(after_in_child=self.close)

    def count(self) -> None:
        self._taken += 1
        if self._map is not None:
            self._map[:TAKEN_BYTES] = self._taken.to_bytes(TAKEN_BYTES, "little")

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None


#: The count's size in the shared memory: 8 bytes, little-endian.
TAKEN_BYTES = 8


def accept(ctrl: socket.socket) -> None:
    _send_bytes(ctrl, ACCEPTED % os.getpid())


def send(ctrl: socket.socket, obj: dict[str, Any]) -> None:
    _send_bytes(ctrl, json.dumps(obj).encode())


def send_started(
    ctrl: socket.socket, pid: int, *, pidfds: Sequence[int] = (), keeper: int | None = None
) -> None:
    """Says the child started: `pid`, its host pid; in pidns mode with `pidfds` attached, the
    child's and its reaper's (`reapers.py`), for its owner to SIGKILL the tree, in that order,
    without a word to the spawner's loop; in keeper mode naming its `keeper`."""
    if not pidfds:
        send(ctrl, {"event": "started", "pid": pid, "keeper": keeper})
        return
    rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", pidfds).tobytes())]
    with contextlib.suppress(OSError):
        started = b'{"event": "started", "pid": %d, "keeper": null}' % pid
        ctrl.sendmsg([started], rights, socket.MSG_DONTWAIT)


def send_listener(ctrl: socket.socket, listener: int) -> None:
    """Hands an `egress` child's proxy socket (`loopback.py`), listening in its network
    namespace, to its owner, before any other word of the child: the owner's proxy accepts
    on it while the child runs (its "started" may be held back till its exit)."""
    rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [listener]).tobytes())]
    with contextlib.suppress(OSError):  # (an owner gone: the tree is killed as it would be)
        ctrl.sendmsg([b'{"event": "listening"}'], rights, socket.MSG_DONTWAIT)


def fail(ctrl: socket.socket, message: str) -> None:
    """Says on `ctrl` that the child could not start, and why: `message`, cut to what the
    owner reads of one message (`MAX_REPORT`; escaped, a character takes up to 12 bytes)."""
    data = json.dumps({"event": "error", "message": message}).encode()
    if len(data) > MAX_REPORT:
        cut = message[: (MAX_REPORT - 64) // 12] + CUT
        data = json.dumps({"event": "error", "message": cut}).encode()
    _send_bytes(ctrl, data)


def _send_bytes(ctrl: socket.socket, data: bytes) -> None:
    """Never blocks: a control socket nobody reads loses the message, not the loop's time
    (its owner reads a handful of messages; a full socket is one held by someone else)."""
    with contextlib.suppress(OSError):
        ctrl.send(data, socket.MSG_DONTWAIT)


def exit_report(
    status: int, usage: resource.struct_rusage, pid: int | None = None
) -> dict[str, Any]:
    """The "exit" report; with the child's host `pid` where its "started" may have been held
    (`trees.Held`)."""
    code = os.waitstatus_to_exitcode(status)
    report = {
        "event": "exit",
        "code": code if code >= 0 else None,
        "signal": -code if code < 0 else None,
        "cpuMs": round((usage.ru_utime + usage.ru_stime) * 1000),
        "maxRssKb": usage.ru_maxrss,
    }
    if pid is not None:
        report["pid"] = pid
    return report


#: What the owner may say on a control socket (`command`): SIGTERM the tree (pidns mode: as
#: `trees.terminate_init` has it), SIGKILL the tree.
TERM = "term"
KILL = "kill"


def command(msg: bytes) -> str | None:
    """The `"cmd"` of a message on a control socket; None for anything else."""
    try:
        cmd = json.loads(msg).get("cmd")
    except (ValueError, AttributeError, RecursionError):
        return None
    return cmd if isinstance(cmd, str) else None
