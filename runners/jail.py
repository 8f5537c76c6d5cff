"""A sandboxed spawn (profiles strict and net): a disposable, pre-armed thread of the spawner.

Standard library only. The pidns spawner keeps one `Jail` armed: a thread that has already
left the spawner's PID, mount, IPC and UTS namespaces (`unshare` of those acts on the calling
thread only), made its mount tree private, read-only and nosuid, and waits. A request then
costs only what depends on it, on the thread (`confine.py` says why all of it stays there):
1. mounts in its namespace: the scratch directory becomes a size-limited tmpfs (what the
   supervisor put there is copied in, owned by the hook's user); where the hook's user could
   not reach a path it needs (an ancestor such as `/root` or `/tmp/pytest-of-root` is 0700), a
   small tmpfs covers that ancestor and only the needed paths are bound into it, so the rest
   of it (a home, a token file) is not even there;
2. its working directory; for strict, the spawner's empty network namespace (made once at
   start, shared: with no TCP, no UDP and no Unix socket allowed, there is nothing in it to
   reach, and nothing a hook can change);
3. the hook's uid and gid, `no_new_privs`, Landlock, seccomp;
4. `posix_spawn`: the child is PID 1 of a fresh PID namespace with all of the above.
The thread then ends; the spawner arms the next one while the child runs. Resource limits
are per process, so the spawner lends its soft limits for the spawn (`pidns.py`) and sets the
hard ones on the child right after (`seal`); where they cannot be lent, the thread forks
and the fork sets them itself.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import stat
import struct
import threading
from collections.abc import Callable

from . import confine
from .spawnreq import Request, Sandbox, StartError, fork_exec, resolve, start_failed

_libc = ctypes.CDLL(None, use_errno=True)
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
_AT_FDCWD = -100
_AT_RECURSIVE = 0x8000
_MOUNT_ATTR_RDONLY = 0x1
_MOUNT_ATTR_NOSUID = 0x2
#: Inodes and bytes of a tmpfs that only holds the directories leading to bound paths.
_COVER_OPTIONS = "mode=0755,size=1m,nr_inodes=4096"
#: Files and directories a scratch tmpfs may hold, per MiB of its size (min 1024).
_INODES_PER_MB = 64
_COPY_CHUNK = 1 << 20
_ARM_FLAGS = (
    confine.CLONE_NEWPID | confine.CLONE_NEWNS | confine.CLONE_NEWIPC | confine.CLONE_NEWUTS
)


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str) -> None:
    enc = [None if v is None else v.encode() for v in (source, target, fstype, data)]
    if _libc.mount(enc[0], enc[1], enc[2], flags, enc[3] or None) != 0:
        err = ctypes.get_errno()
        raise StartError(f"sandbox: cannot mount {target}: {os.strerror(err)}")


def _read_only_tree() -> None:
    attr = ctypes.create_string_buffer(
        struct.pack("=QQQQ", _MOUNT_ATTR_RDONLY | _MOUNT_ATTR_NOSUID, 0, 0, 0), 32
    )
    nr = confine._COMMON["mount_setattr"]
    if confine._syscall(nr, _AT_FDCWD, b"/", _AT_RECURSIVE, attr, 32) != 0:
        err = ctypes.get_errno()
        raise confine.ConfineError(err, f"read-only mount tree: {os.strerror(err)}")


def make_empty_net() -> int:
    """An fd of a new network namespace with nothing in it (loopback down), made on a
    throwaway thread; raises `ConfineError` where network namespaces cannot be made."""
    found: list[int | BaseException] = []

    def make() -> None:
        try:
            confine.unshare(confine.CLONE_NEWNET, "network namespace")
            found.append(os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC))
        except OSError as exc:
            found.append(exc)

    thread = threading.Thread(target=make, name="mcpx-net")
    thread.start()
    thread.join()
    if isinstance(found[0], BaseException):
        raise found[0]
    return found[0]


class Spawned:
    """What a jailed spawn gives back: the pid, and the scratch tmpfs when it is returned."""

    def __init__(self, pid: int, scratch_fd: int | None) -> None:
        self.pid = pid
        self.scratch_fd = scratch_fd


class Jail:
    """One armed thread; `spawn` uses it up. See the module docstring."""

    def __init__(self, empty_net: int | None, home_pid: int | None) -> None:
        self._empty_net = empty_net
        self._home_pid = home_pid
        self._go = threading.Lock()
        self._go.acquire()
        self._work: Callable[[], Spawned] | None = None
        self._result: Spawned | BaseException | None = None
        self._done = threading.Event()
        #: Why this thread could not arm (namespaces, mounts), or None.
        self.broken: str | None = None
        self._armed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mcpx-jail", daemon=True)
        self._thread.start()

    def wait_armed(self) -> str | None:
        self._armed.wait()
        return self.broken

    def _run(self) -> None:
        try:
            if self._home_pid is not None:  # the creating thread may be armed for a PID 1
                confine.setns(self._home_pid, confine.CLONE_NEWPID, "own PID namespace")
            arm(pid=True)
        except (OSError, StartError) as exc:
            self.broken = str(exc)
        self._armed.set()
        self._go.acquire()
        try:
            if self.broken is not None:
                raise StartError(f"sandbox: {self.broken}")
            assert self._work is not None
            self._result = self._work()
        except BaseException as exc:
            self._result = exc
        self._done.set()

    def release(self) -> None:
        """Lets an unused thread end (the spawner is closing)."""
        self._work = None
        self.broken = self.broken or "closed"
        self._go.release()

    def spawn(self, req: Request, uid: int | None, borrowed: bool) -> Spawned:
        """Starts `req` from the thread, confined by `req.sandbox`; raises `StartError`.

        `borrowed`: this process carries the child's soft limits for the spawn; else the
        thread forks and the fork sets the limits.
        """
        assert req.sandbox is not None
        sandbox = req.sandbox
        self._work = lambda: _jailed(req, sandbox, uid, self._empty_net, borrowed)
        self._go.release()
        self._done.wait()
        self._thread.join()
        result = self._result
        if isinstance(result, BaseException):
            if isinstance(result, StartError):
                raise result
            raise StartError(f"sandbox: {result}") from result
        assert result is not None
        return result


def _jailed(
    req: Request, sandbox: Sandbox, uid: int | None, empty_net: int | None, borrowed: bool
) -> Spawned:
    """Runs on the armed thread: steps 1 to 4 of the module docstring."""
    scratch_fd, seal = prepare(req, sandbox, uid, empty_net)
    try:
        program = resolve(req.argv[0], req.env.get("PATH", os.defpath))
        if not borrowed:
            return Spawned(fork_exec(req, program, seal), scratch_fd)
        seal()
        try:
            return Spawned(req.posix_spawn(program), scratch_fd)
        except OSError as exc:
            raise start_failed(program, exc) from exc
    except BaseException:
        if scratch_fd is not None:
            os.close(scratch_fd)
        raise


def prepare(
    req: Request, sandbox: Sandbox, uid: int | None, empty_net: int | None
) -> tuple[int | None, Callable[[], None]]:
    """Steps 1 and 2 of the module docstring on an armed thread or process (`arm`): the
    view, the working directory, the network. Returns the scratch fd to copy back (or None)
    and step 3, `seal`, to call last, in the thread or process that then runs the child."""
    ids = (uid, uid) if uid is not None else (os.getuid(), os.getgid())
    scratch_fd = _build_view(sandbox, ids)
    try:
        req.chdir()
        if not sandbox.net:
            if empty_net is None:
                raise StartError("sandbox: no network namespace")
            confine.setns(empty_net, confine.CLONE_NEWNET, "network namespace")
    except BaseException:
        if scratch_fd is not None:
            os.close(scratch_fd)
        raise

    def seal() -> None:
        if uid is not None:
            confine.become(uid, uid)
            _check_reachable(req.cwd, "working directory")
        confine.no_new_privs()
        confine.landlock(sandbox.read, [sandbox.scratch], sandbox.devices, no_tcp=not sandbox.net)
        confine.seccomp(no_sockets=not sandbox.net)

    return scratch_fd, seal


def arm(*, pid: bool) -> None:
    """Leaves the mount, IPC and UTS namespaces (and with `pid`, makes the next child PID 1
    of a new PID namespace) and makes the mount tree private, read-only and nosuid: what a
    thread or a single-threaded process does before a request needs it. Raises `OSError` or
    `StartError`."""
    flags = _ARM_FLAGS if pid else _ARM_FLAGS & ~confine.CLONE_NEWPID
    confine.unshare(flags, "namespaces (pid, mount, ipc, uts)" if pid else "namespaces")
    _mount(None, "/", None, MS_REC | MS_PRIVATE, "")
    _read_only_tree()


def _check_reachable(path: str, what: str) -> None:
    if not os.access(path, os.R_OK | os.X_OK):
        raise StartError(
            f"sandbox: the hook's user (uid {os.getuid()}) cannot read its {what} {path}: "
            "make it readable by others (o+rx)"
        )


def _build_view(sandbox: Sandbox, ids: tuple[int, int]) -> int | None:
    """Step 1: the scratch tmpfs and the covers; returns an fd on the new scratch when the
    plan returns it."""
    uid, gid = ids
    try:
        host_scratch = os.open(sandbox.scratch, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise StartError(f"sandbox: scratch {sandbox.scratch}: {exc.strerror}") from exc
    try:
        covers: dict[str, list[str]] = {}
        for path in (*sandbox.read, sandbox.scratch):
            blocked = _blocked_ancestor(path, uid, gid)
            if blocked is not None:
                covers.setdefault(blocked, []).append(path)
        for top in _outermost(list(covers)):
            needed = [p for c, ps in covers.items() if confine.under(c, [top]) for p in ps]
            _cover(top, needed, sandbox, host_scratch, ids)
        if not any(sandbox.scratch in ps for ps in covers.values()):
            size = _scratch_options(sandbox, ids)
            _mount("tmpfs", sandbox.scratch, "tmpfs", MS_NOSUID | MS_NODEV, size)
            _copy_tree(host_scratch, sandbox.scratch, ids)
        if not sandbox.return_scratch:
            return None
        return os.open(sandbox.scratch, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise StartError(f"sandbox: cannot prepare the filesystem view: {exc}") from exc
    finally:
        os.close(host_scratch)


def _blocked_ancestor(path: str, uid: int, gid: int) -> str | None:
    parent = os.path.dirname(os.path.normpath(path))
    return confine.traversable(parent, uid, gid) if parent != path else None


def _outermost(paths: list[str]) -> list[str]:
    paths.sort(key=len)
    kept: list[str] = []
    for p in paths:
        if not confine.under(p, kept):
            kept.append(p)
    return kept


def _scratch_options(sandbox: Sandbox, ids: tuple[int, int]) -> str:
    inodes = max(1024, sandbox.scratch_bytes // (1 << 20) * _INODES_PER_MB)
    return f"mode=0700,uid={ids[0]},gid={ids[1]},size={sandbox.scratch_bytes},nr_inodes={inodes}"


def _cover(
    top: str, needed: list[str], sandbox: Sandbox, host_scratch: int, ids: tuple[int, int]
) -> None:
    """Covers `top` with a tmpfs holding only `needed` (read paths bound from the original,
    the scratch itself as a fresh directory; then this tmpfs is the scratch's size limit)."""
    sources: dict[str, int] = {}
    try:
        for path in needed:
            if path != sandbox.scratch:
                with contextlib.suppress(FileNotFoundError):
                    sources[path] = os.open(path, os.O_PATH | os.O_CLOEXEC)
        has_scratch = sandbox.scratch in needed
        options = _scratch_options(sandbox, (0, 0)) if has_scratch else _COVER_OPTIONS
        _mount("tmpfs", top, "tmpfs", MS_NOSUID | MS_NODEV, options.replace("0700", "0755"))
        for path in _outermost(list(sources)):
            is_dir = stat.S_ISDIR(os.fstat(sources[path]).st_mode)
            _make_path(os.path.dirname(path))
            if is_dir:
                os.mkdir(path, 0o755)
            else:
                os.close(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o644))
            _mount(f"/proc/thread-self/fd/{sources[path]}", path, None, MS_BIND, "")
        if has_scratch:
            _make_path(os.path.dirname(sandbox.scratch))
            os.mkdir(sandbox.scratch, 0o700)
            os.chown(sandbox.scratch, *ids)
            _copy_tree(host_scratch, sandbox.scratch, ids)
    finally:
        for fd in sources.values():
            os.close(fd)


def _make_path(path: str) -> None:
    if not os.path.isdir(path):
        _make_path(os.path.dirname(path))
        os.mkdir(path, 0o755)
        os.chmod(path, 0o755)


def _copy_tree(src: int, dst_path: str, ids: tuple[int, int] | None) -> None:
    """Copies the regular files and directories under the directory fd `src` to `dst_path`
    (symlinks and the rest are skipped, never followed); `ids`: chown the copies."""
    dst = os.open(dst_path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        _copy_into(src, dst, ids)
    finally:
        os.close(dst)


def _copy_into(src: int, dst: int, ids: tuple[int, int] | None) -> None:
    nofollow = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    for entry in os.scandir(src):
        info = entry.stat(follow_symlinks=False)
        if stat.S_ISDIR(info.st_mode):
            with contextlib.suppress(FileExistsError):
                os.mkdir(entry.name, 0o700, dir_fd=dst)
            sub_src = os.open(entry.name, nofollow | os.O_DIRECTORY, dir_fd=src)
            sub_dst = os.open(entry.name, nofollow | os.O_DIRECTORY, dir_fd=dst)
            try:
                if ids is not None:
                    os.fchown(sub_dst, *ids)
                _copy_into(sub_src, sub_dst, ids)
            finally:
                os.close(sub_src)
                os.close(sub_dst)
        elif stat.S_ISREG(info.st_mode):
            _copy_file(src, dst, entry.name, ids)


def _copy_file(src: int, dst: int, name: str, ids: tuple[int, int] | None) -> None:
    fin = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=src)
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
        fout = os.open(name, flags, 0o600, dir_fd=dst)
        try:
            if ids is not None:
                os.fchown(fout, *ids)
            while chunk := os.read(fin, _COPY_CHUNK):
                os.write(fout, chunk)
        finally:
            os.close(fout)
    finally:
        os.close(fin)


def return_scratch(scratch_fd: int, host_path: str) -> None:
    """Copies a finished child's scratch tmpfs back to the host's scratch directory (bounded
    by the tmpfs size), then closes it. Errors are the supervisor's to see (missing files)."""
    try:
        with contextlib.suppress(OSError):
            _copy_tree(scratch_fd, host_path, None)
    finally:
        os.close(scratch_fd)


def seal_limits(pid: int, uid: int | None, limits: list[tuple[int, int, int]]) -> None:
    """Sets the child's limits, hard ones included, right after its spawn (the spawner lent
    only soft ones). A child of another uid is reached as that uid (`prlimit` needs it without
    CAP_SYS_RESOURCE): this thread's real and effective ids switch for the call and back."""
    if not limits:
        return
    if uid is None:
        for number, soft, hard in limits:
            resource.prlimit(pid, number, (soft, hard))
        return
    nr = confine._nr
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall(nr("setresgid"), uid, uid, 0)
    libc.syscall(nr("setresuid"), uid, uid, 0)
    try:
        for number, soft, hard in limits:
            resource.prlimit(pid, number, (soft, hard))
    finally:
        if (
            libc.syscall(nr("setresuid"), 0, 0, 0) != 0
            or libc.syscall(nr("setresgid"), 0, 0, 0) != 0
        ):  # pragma: no cover - the saved uid is 0
            raise RuntimeError("cannot return to uid 0")
