"""A spawn request, parsed and checked, with the child's fds placed where no dup2 clobbers
another: what every way of spawning starts from.

Standard library only. See `spawner.py` for the protocol, `checks.py` for the checks.

A request the spawner cannot carry out fails alone: whatever arrives on the request socket
(not JSON, wrong types, unknown keys, text `execve` cannot take, numbers out of range, too
many fds, too long, no control socket) is refused with an "error" on its control socket,
which says what was wrong, or dropped when it has none, its fds closed; the spawner goes on
serving. `Request` checks everything before anything is started; what the standard library
still raises on bad input past it (`start.BAD_INPUT`) fails the request the same way.
"""

from __future__ import annotations

import fcntl
import os
import resource

from .checks import (
    LARGEST,
    abs_path,
    abs_paths,
    bad,
    boolean,
    environment,
    fd_targets,
    fields,
    integer,
    parse_json,
    path_string,
    rlimits,
    show,
    string,
    strings,
)
from .start import DEFAULT_SIGNALS, MAX_FD, StartError, quoted

#: The keys of a request and of each of its parts, by where they are: (required, optional).
#: A key not listed is refused (a misspelt "sandbx" must not run unconfined).
FIELDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "": (("argv", "cwd", "env", "fds"), ("rlimits", "sandbox", "module", "collect")),
    "sandbox": (
        ("net", "read", "scratch", "scratchBytes"),
        (
            "devices",
            "returnScratch",
            "uid",
            "write",
            "mapped",
            "memoryBytes",
            "deny",
            "readOnly",
            "hide",
            "egress",
        ),
    ),
    "module": (("spec", "envFd"), ("path",)),
    "collect": (("stdout", "stderr"), ()),
}


class Collect:
    """A request's `"collect"`: the spawner reads the child's stdout (up to `stdout` bytes;
    past them the tree is killed) and stderr (its last `stderr` bytes kept) itself, and
    sends them with the exit report (`collect.py`), so its owner watches one socket."""

    def __init__(self, caps: object) -> None:
        caps = fields(caps, "collect", *FIELDS["collect"])
        self.stdout = integer(caps["stdout"], "collect.stdout", 0, LARGEST)
        # A tail of 0 would be no ring at all.
        self.stderr = integer(caps["stderr"], "collect.stderr", 1, LARGEST)


class Sandbox:
    """A request's sandbox plan (`"sandbox"` in the request; the supervisor's `sandbox.py`
    makes it): `net` (keep the host network), `egress` (a loopback of its own), `read`
    (read-only paths), `write` (paths readable and writable), `mapped` (those of `read` and
    `write` whose owner the hook's user stands for: `view.py`), `devices`, `scratch` (a
    writable tmpfs of `scratchBytes`), `returnScratch` (copy it back to the host directory
    once the tree is gone), `uid` (run as a per-child unprivileged user). Every field has
    its exact type: a plan that says anything else is refused, never read as a looser one;
    `mapped` names only paths of `read` and `write`."""

    def __init__(self, plan: object) -> None:
        plan = fields(plan, "sandbox", *FIELDS["sandbox"])
        self.net = boolean(plan["net"], "sandbox.net")
        #: A network namespace of its own with only `lo`, up: the child reaches the proxy
        #: through the proxy's socket there (`loopback.py`); IPv4 and IPv6 sockets allowed,
        #: not Unix ones.
        self.egress = boolean(plan.get("egress", False), "sandbox.egress") and not self.net
        #: Whether Landlock lets the child use TCP.
        self.sockets = self.net or self.egress
        #: The socket families seccomp lets it make (`seccomp.SOCKET_FAMILIES`).
        self.families = "net" if self.net else "egress" if self.egress else "none"
        self.read = abs_paths(plan["read"], "sandbox.read")
        self.write = abs_paths(plan.get("write", []), "sandbox.write")
        self.mapped = abs_paths(plan.get("mapped", []), "sandbox.mapped")
        granted = {*self.read, *self.write}
        for i, path in enumerate(self.mapped):
            if path not in granted:
                raise bad(f"sandbox.mapped[{i}]: {show(path)} is neither read nor write")
        self.devices = abs_paths(plan.get("devices", []), "sandbox.devices")
        self.scratch = abs_path(plan["scratch"], "sandbox.scratch")
        self.scratch_bytes = integer(plan["scratchBytes"], "sandbox.scratchBytes", 0, LARGEST)
        self.return_scratch = boolean(plan.get("returnScratch", False), "sandbox.returnScratch")
        self.switch_uid = boolean(plan.get("uid", True), "sandbox.uid")
        #: Paths covered (never granted), and paths bound read-only over themselves (`deny.py`).
        self.deny = abs_paths(plan.get("deny", []), "sandbox.deny")
        self.read_only = abs_paths(plan.get("readOnly", []), "sandbox.readOnly")
        #: Directories covered whenever a grant lies in them (`view.py`): the homes.
        self.hide = abs_paths(plan.get("hide", []), "sandbox.hide")
        #: The bound on the memory the whole tree may pin (0: none; `memcg.py`).
        self.memory_bytes = integer(plan.get("memoryBytes", 0), "sandbox.memoryBytes", 0, LARGEST)


class ModuleCall:
    """A request's `"module"`: run a `module` hook in a fork of this warm process (`warm.py`)
    instead of `argv`. `spec`: the hook (`module_runner.py` MODULE); `path`: directories to add
    to `sys.path`; `envFd`: the child's fd (one of `"fds"`) holding its environment as JSON,
    which only the forked child reads (the request's `"env"` is then empty)."""

    def __init__(self, call: object, targets: list[int]) -> None:
        call = fields(call, "module", *FIELDS["module"])
        self.spec = string(call["spec"], "module.spec")
        self.path = strings(call.get("path", []), "module.path")
        self.env_fd = integer(call["envFd"], "module.envFd", 0, MAX_FD - 1)
        if self.env_fd not in targets:
            raise bad(f"module.envFd: {self.env_fd} is not one of the child's fds")


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
            req = fields(parse_json(raw), "", *FIELDS[""])
            self.argv = strings(req["argv"], "argv")
            if not (self.argv and self.argv[0]):
                raise bad("argv: no program" if not self.argv else "argv[0]: empty")
            self.cwd = path_string(req["cwd"], "cwd")
            self.env = environment(req["env"])
            self.limits, self.limit_names = rlimits(req.get("rlimits"))
            listed = targets = fd_targets(req["fds"])
            self.sandbox = None if req.get("sandbox") is None else Sandbox(req["sandbox"])
            module = req.get("module")
            self.module = None if module is None else ModuleCall(module, targets)
            self.collect = None if req.get("collect") is None else Collect(req["collect"])
            handed_on = 0  # the output pipes, when made by the spawner that hands it on
            if self.collect is not None:
                if 1 in targets or 2 in targets:
                    raise bad("collect: stdout and stderr are the spawner's to make")
                targets = [*targets, 1, 2]
                handed_on = 2 if attached else 0
            if len(listed) + handed_on != len(fds):
                raise bad(f"fds: {len(listed)} listed, {len(fds) - handed_on} attached")
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
            raise StartError(f"cannot use cwd {quoted(self.cwd)}: {exc.strerror}") from exc

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
