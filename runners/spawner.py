"""The resident spawner: the one place hook and script processes are started from.

Standard library only; started by the supervisor as `python -I -S spawner.py PARENT_PID FD
MODE TAKEN_FD [WHY]`, FD being its request socket, TAKEN_FD a memfd of 8 bytes shared with the
supervisor (`protocol.TakenCounter`), WHY why the supervisor chose keeper mode, and its stdin
the lifeline (end of file: the supervisor is done). Never imports the supervisor or trio. It
owns each child's whole tree in one of two ways:

`pidns` (chosen by the supervisor). As root, the supervisor starts this process as PID 1 of a
fresh PID namespace. For an ordinary user it starts it with MODE `userns`: this process then
makes a user namespace of its own and forks the spawner proper, PID 1 of a PID namespace in
it, which serves in pidns mode as root's does, without per-child uids; where user namespaces
are refused it serves in keeper mode instead, saying why (`userns.py`, rootless). Per child
it calls `unshare(CLONE_NEWPID)`, starts the namespace's init, a *reaper* (`reapers.py`: a
program of 129 bytes that only pauses, with SIGCHLD ignored: the kernel reaps every orphan of
the namespace as it exits), then
`posix_spawn`s the child, PID 2 of that namespace and this process's own child, and `setns`es
`pid_for_children` back; no Python fork on the way. The kernel then does the containment: when
the child exits this process SIGKILLs the reaper, and with it everything else in the namespace
(`setsid` and double-fork escapes included: nothing can leave a PID namespace), and the reaper
is reaped only once all of it is gone; when this spawner dies, by any means, everything in its
namespace dies, every child namespace included. One epoll loop here keeps all the children at
once (request socket, each child's and reaper's pidfds and control socket); the namespace and
reaper for the next child are made as soon as the last one started, so only `posix_spawn` is on
a request's way. For the child: `getpid()` is 2 and `getppid()` 0; a signal it sends itself
arrives (`kill $$`); its orphans are reaped; /proc is the host's. (A namespace's init would
have none of that: a signal it does not handle, sent from inside, is dropped, and orphans stay
its zombies until it waits for them: a test suite starting daemons ran out of processes. Where
no reaper can start, the child is the init again, and "term" is emulated for it:
`trees.terminate_init`.)
Pids: this process sees its own namespace, /proc shows the host's; pids reported and pids read
from /proc are host pids, and signals to them go through `/proc/PID` directory fds and
`pidfd_send_signal`, which need no translation.
cwd and rlimits, which `posix_spawn` cannot set: this process is single-threaded, so it
`chdir`s itself around the spawn. Limits must be in force before the child runs, so they are
*borrowed*: set on this process for the spawn and restored at once, for limits that cannot
hurt it in that window (file size, open files, locks, ...; CPU only below its own CPU time
plus a margin, address space, data and stack only above its own use plus a margin). A request
with any other limit is started by `fork` (limits set in the forked child, then `execve`):
correct, one Python fork slower.

`keeper` (the fallback; also `MCPX_HOOKS_SPAWN=keeper`). This process is a subreaper with
pre-forked *keepers*, subreapers themselves: one takes a request, sets cwd and limits on
itself, `posix_spawn`s the child in its own session, and kills the whole remaining tree
(reparented to it) when the child exits, on "term"/"kill", or at end of file on its control
socket; with the tree reaped it puts its cwd and limits back and waits for the next request,
while no more than three wait (`keepers.Places`; one that cannot put its limits back exits).
If a keeper dies its orphans come here and are killed; if the supervisor dies this process
gets SIGKILL (`PR_SET_PDEATHSIG`) and every keeper sees end of file.

Protocol. Requests arrive on FD, a SOCK_SEQPACKET socket: one JSON object per message with
file descriptors attached (SCM_RIGHTS). The first attached fd is the request's *control*
socket (SOCK_SEQPACKET), the rest are the child's fds, placed at the numbers listed in
`"fds"`. Everything about the child is then said on its control socket:

  spawner → supervisor {"event": "accepted", "keeper": K}   (keeper mode: taken; the child
                                         may run now; K: the keeper's host pid)
                       {"event": "listening"}   (an `egress` child, first: the socket its
                                         proxy variables name, listening in its network
                                         namespace, attached: `loopback.py`)
                       {"event": "started", "pid": P, "keeper": K|null}   (P: host pid;
                                         pidns: the child's pidfd attached, to SIGKILL it)
                       {"event": "error", "message": "..."}           (could not start)
                       {"event": "exit", "code": C|null, "signal": S|null,
                        "cpuMs": n, "maxRssKb": n, "pid": P}          (tree gone, all reaped;
                                         "pid" in pidns mode)
  supervisor → spawner {"cmd": "term"}   SIGTERM to the tree (see above for pidns)
                       {"cmd": "kill"}   SIGKILL to the tree
                       end of file       the owner is gone: SIGKILL the tree, no report

A request the spawner cannot carry out fails alone: anything wrong with it (not JSON, a
wrong type, an unknown key, text `execve` cannot take, a number out of range, fds that do
not match `"fds"`, over `protocol.MAX_MESSAGE` (4 MiB), too many fds; `spawnreq.Request`
checks it all before anything starts) gets "error" on its control socket, saying what, and
its fds are closed; a message without a control socket (no fds, or a first fd that is no
SOCK_SEQPACKET socket) is dropped the same way. Either counts as taken, and the spawner serves on.

A request the spawner had not taken when it died never ran: the owner may send it again (to a
new spawner); one it had taken may have run, and is lost. Taken is "accepted" in keeper mode
(said just before the spawn: a keeper that died before it never started the child);
in pidns mode the spawner counts the requests it takes in TAKEN_FD's shared memory, before
anything can start the child, and the owner compares the request's number with the count:
no message, so no wake-up of the owner on the way.

`"collect": {"stdout": CAP, "stderr": TAIL}` (pidns mode): the request brings no fds for 1 and
2; the spawner makes those pipes, splices what the child writes into memfds (stdout up to CAP,
past it the tree is killed; the last TAIL bytes of stderr), and sends them with the exit report:
`"stdout"`/`"stderr"` (bytes read), `"stderrRing"`, `"overflow"`, `"memfds"` (which are
attached, in order). The owner then watches one socket per child instead of three fds, and
only waits for the exit: such a child's "started" is held back (`trees.Held`) until it has run
for `trees.ANNOUNCE_AFTER_S`, or its owner sends a command; one that ends before is heard of
once, its exit report saying its pid.

`maxRssKb` includes the spawner's own resident size at exec time (the kernel carries the
high-water mark of the vfork'd or forked memory over exec).

A request with `"sandbox"` (a plan: `spawnreq.Sandbox`) is confined: in pidns mode it is
started from this process's own thread, the child sealing itself (`inline.py`, `chained.py`),
or where the chain cannot run from an armed jail thread (`jail.py`; mechanisms in
`confine.py`); keeper mode refuses it. Before serving, the spawner writes one line on its
stdout, the isolation mechanisms it found (`mechanisms.py`), and closes it; where the system
refuses it threads, the line is `{"refused": why}` (`libc.no_thread_said`) and it exits.

Modules: `spawnreq.py` (the request) and `checks.py` (its checks), `protocol.py` (the
messages above), `collect.py` (`"collect"`), `start.py` (the program, fork and exec),
`trees.py` (a child's tree through /proc), `borrowing.py` (limits lent to a spawn),
`pidns.py`, `keepers.py`, `jail.py`, `grants.py` (what Landlock grants), `view.py` and
`idmap.py` (a jailed child's filesystem), `confine.py`, `landlock.py`, `seccomp.py`, `libc.py`
(the calls into libc), `mechanisms.py` and `isolation.py` (their names), `warm.py` and
`warmpool.py` (module hooks run in waiting forks of this process), `userns.py` (rootless);
this file only starts the chosen mode.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys


def main() -> None:
    from runners import reapers, userns
    from runners.keepers import serve_keepers
    from runners.libc import PR_SET_PDEATHSIG, prctl, thread_refused
    from runners.mechanisms import Mechanisms
    from runners.pidns import PidNsSpawner
    from runners.protocol import TakenCounter

    parent, request_fd = int(sys.argv[1]), int(sys.argv[2])
    mode = sys.argv[3] if len(sys.argv) > 3 else "keeper"
    taken_fd = int(sys.argv[4]) if len(sys.argv) > 4 else None
    #: Why the supervisor chose keeper mode, when it did.
    keeper_why = sys.argv[5] if len(sys.argv) > 5 else ""
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    # The owner died before the line above took hold (as PID 1 of a namespace our parent is
    # invisible, getppid() is 0: the lifeline's end of file tells instead).
    if mode != "pidns" and os.getppid() != parent:
        sys.exit(1)
    in_userns, settings = False, None
    if mode == "userns":  # (an ordinary user's supervisor: see userns.py)
        settings = userns.settings()
        refused = userns.enter(parent, (request_fd, *([taken_fd] if taken_fd is not None else [])))
        in_userns = refused is None
        mode, keeper_why = ("pidns", "") if in_userns else ("keeper", refused or "")
    # Each probe and each jail is a thread: tried only now, since a thread just joined may not
    # have left the kernel yet, and joining a user namespace (`userns.enter`) fails with
    # EINVAL in a process with another thread (the spawner then fell back to keeper mode).
    if (no_thread := thread_refused()) is not None:
        sys.stdout.write(json.dumps({"refused": no_thread}) + "\n")
        sys.exit(1)
    requests = socket.socket(fileno=request_fd)
    requests.set_inheritable(False)
    if mode == "pidns":
        home = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
        mechanisms = Mechanisms(mode, home, userns=in_userns, settings=settings)
        taken = TakenCounter(taken_fd)
        spawner = PidNsSpawner(requests, mechanisms, taken)
        mechanisms.report(reaper=reapers.said())
        spawner.serve()
    else:
        if taken_fd is not None:  # keepers say "accepted" instead
            os.close(taken_fd)
        Mechanisms(mode, None, keeper_why=keeper_why, settings=settings).report()
        serve_keepers(requests)


if __name__ == "__main__":
    # `python -I` puts neither the script's directory nor its parent on sys.path: the runner
    # modules are imported as the package `runners` from the folder that holds them.
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    main()
    # Every tree is reaped and every cgroup removed by now: out without the interpreter's
    # teardown, which the supervisor would wait for (a few ms of every command's close).
    sys.stderr.flush()
    os._exit(0)
