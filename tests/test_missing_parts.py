"""A machine that lacks a part, as the operator sees it: `doctor` names what is missing and
what it means for each profile, and a run under a profile that needs it refuses with the
reason (never a traceback, never a weaker sandbox); `none` still runs.

Each part is taken away for real, not hidden (`MCPX_HOOKS_HIDE` has its tests elsewhere): the
supervisor runs under a seccomp filter of the test's own (`REFUSE`) that makes chosen system
calls fail, as a kernel without them or a container's filter would. As root and as an
ordinary user alike.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import require_rootless

pytestmark = pytest.mark.skipif(
    platform.machine() != "x86_64", reason="REFUSE knows x86_64's system call numbers"
)

#: `REFUSE NR@ARG0=ERRNO ... -- ARGV`: runs ARGV with system call NR failing with ERRNO
#: (where its first argument is ARG0), inherited by everything ARGV starts.
REFUSE = """
import ctypes, errno, os, struct, sys
cut = sys.argv.index("--")
code = [(0x20, 4, 0, 0), (0x15, 0xC000003E, 1, 0), (0x06, 0x7FFF0000, 0, 0)]
for rule in filter(None, sys.argv[1:cut]):
    call, err = rule.split("=")
    nr, _, arg0 = call.partition("@")
    code.append((0x20, 0, 0, 0))
    if arg0:
        code += [(0x15, int(nr), 0, 3), (0x20, 16, 0, 0), (0x15, int(arg0), 0, 1)]
    else:
        code.append((0x15, int(nr), 0, 1))
    code.append((0x06, 0x00050000 | getattr(errno, err), 0, 0))
code.append((0x06, 0x7FFF0000, 0, 0))
prog = b"".join(struct.pack("=HBBI", op, jt, jf, k) for op, k, jt, jf in code)
class Fprog(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_char_p))
libc = ctypes.CDLL(None, use_errno=True)
assert libc.prctl(38, 1, 0, 0, 0) == 0  # no_new_privs
assert libc.prctl(22, 2, ctypes.byref(Fprog(len(prog) // 8, prog)), 0, 0) == 0
os.execv(sys.argv[cut + 1], sys.argv[cut + 1 :])
"""
#: prctl(PR_SET_SECCOMP, ...) failing: a kernel without CONFIG_SECCOMP_FILTER, or a filter
#: around the supervisor that refuses new ones (its /proc still shows `Seccomp:`).
NO_SECCOMP_FILTERS = "157@22=EINVAL"


def _supervisor(work: Path, refuse: str, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-c", REFUSE, refuse, "--", sys.executable, "-m",
            "mcpx_hooks.supervisor", *args]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=work, check=False)


def test_seccomp_filters_refused_are_said_by_doctor_and_refused_by_runs(
    readable_tmp: Path,
) -> None:
    """Where seccomp filters cannot be installed, `doctor` said `ok seccomp` and every profile
    enforceable (exit 0): it looked for `Seccomp:` in /proc only. Each sandboxed hook and run
    then failed with "cannot start '/usr/bin/sh': seccomp: Invalid argument", which says
    neither what is missing nor what to do."""
    require_rootless()
    doctor = _supervisor(readable_tmp, NO_SECCOMP_FILTERS, "doctor")
    text = doctor.stdout
    assert doctor.returncode == 1, text + doctor.stderr
    assert "Traceback" not in doctor.stderr, doctor.stderr
    assert "MISSING  seccomp   installing a filter fails (seccomp: Invalid argument)" in text, text
    assert "to get it: a kernel with CONFIG_SECCOMP_FILTER" in text
    assert "strict    CANNOT be enforced: missing seccomp" in text
    assert "none      enforceable" in text

    hook = {"name": "h", "on": "script", "phase": "before", "run": ["sh", "-c", "echo hook"]}
    for profile in ("strict", "workspace"):
        hooked = json.dumps({**hook, "sandbox": profile})
        done = _supervisor(
            readable_tmp, NO_SECCOMP_FILTERS, "exec", "--sandbox", profile, "--hook", hooked,
            "--", "echo", "ran",
        )  # fmt: skip
        assert done.returncode == 1, done.stdout + done.stderr
        assert "| ran" not in done.stdout and "advice: hook" not in done.stdout
        assert "Traceback" not in done.stderr, done.stderr
        assert (
            f'warning: sandbox "{profile}" cannot be enforced on this machine: missing seccomp:'
            " installing a filter fails (seccomp: Invalid argument)"
        ) in done.stdout, done.stdout
    hooked = json.dumps({**hook, "sandbox": "none"})
    done = _supervisor(
        readable_tmp, NO_SECCOMP_FILTERS, "exec", "--sandbox", "none", "--hook", hooked,
        "--", "echo", "ran",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "| ran" in done.stdout and "advice: hook" in done.stdout


def test_doctor_with_nothing_refused_still_says_seccomp_ok(readable_tmp: Path) -> None:
    """The probe itself (a filter on a throwaway thread) leaves the spawner able to sandbox."""
    require_rootless()
    doctor = _supervisor(readable_tmp, "", "doctor")
    assert "ok       seccomp" in doctor.stdout, doctor.stdout + doctor.stderr
    done = _supervisor(readable_tmp, "", "exec", "--sandbox", "strict", "--", "echo", "ran")
    assert done.returncode == 0 and "| ran" in done.stdout, done.stdout + done.stderr


#: memfd_create failing with EPERM: a seccomp filter around the supervisor (a container's, a
#: service manager's system-call filter) that leaves it out.
NO_MEMFD = "319=EPERM"


@pytest.mark.parametrize("command", [("doctor",), ("exec", "--sandbox", "none", "--", "true")])
def test_memfd_create_refused_is_one_line_not_a_traceback(
    readable_tmp: Path, command: tuple[str, ...]
) -> None:
    """The supervisor needs memfds to start its spawner; where they were refused every
    command that runs anything (doctor, exec, serve) died with a Python traceback ending in
    `PermissionError: [Errno 1] Operation not permitted`."""
    done = _supervisor(readable_tmp, NO_MEMFD, *command)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr == (
        "mcpx-hooks: cannot start the spawner: memfd_create: Operation not permitted (a "
        "system-call filter around this process, a container's or a service manager's, may "
        "refuse it: allow memfd_create)\n"
    )


@pytest.mark.parametrize(
    ("refuse", "why"),
    [
        # A container's filter that leaves out landlock_restrict_self: said ok before.
        ("446=EPERM", "enforcing a ruleset fails (landlock restrict: Operation not permitted)"),
        # One that leaves out every Landlock call: said "the kernel has no Landlock" before.
        (
            "444=EPERM",
            "landlock_create_ruleset: Operation not permitted (a system-call filter around"
            " this process, a container's, may refuse it)",
        ),
        ("444=ENOSYS", "the kernel has no Landlock (CONFIG_SECURITY_LANDLOCK)"),
        ("444=EOPNOTSUPP", "the kernel has Landlock, but it is off (`landlock` is not in the"),
    ],
)
def test_landlock_refused_is_said_with_its_cause(readable_tmp: Path, refuse: str, why: str) -> None:
    """Where landlock_restrict_self was refused, doctor said `ok landlock` (it asked only the
    ABI version) and each sandboxed hook failed with "cannot start '/usr/bin/sh': landlock
    restrict: Operation not permitted"; where every Landlock call was refused, it blamed the
    kernel's configuration whatever the kernel answered."""
    require_rootless()
    doctor = _supervisor(readable_tmp, refuse, "doctor")
    assert doctor.returncode == 1, doctor.stdout + doctor.stderr
    assert f"MISSING  landlock  {why}" in doctor.stdout, doctor.stdout
    assert "strict    CANNOT be enforced: missing landlock" in doctor.stdout
    done = _supervisor(readable_tmp, refuse, "exec", "--sandbox", "strict", "--", "echo", "ran")
    assert done.returncode == 1 and "| ran" not in done.stdout, done.stdout + done.stderr
    assert f"missing landlock: {why}" in done.stdout, done.stdout


@pytest.mark.parametrize(
    ("refuse", "line"),
    [
        # unshare(CLONE_NEWNET) refused: a container that withholds network namespaces.
        ("272@1073741824=EPERM", "MISSING  netns     network namespace: Operation not permitted"),
        # mount_setattr missing: a kernel older than 5.12.
        ("442=ENOSYS", "MISSING  mountns   read-only mount tree: Function not implemented"),
    ],
)
def test_a_namespace_refused_is_said_in_words(readable_tmp: Path, refuse: str, line: str) -> None:
    """doctor and the run's warning said "[Errno 1] network namespace: Operation not
    permitted" and "[Errno 38] read-only mount tree: …": Python's spelling of an error."""
    require_rootless()
    doctor = _supervisor(readable_tmp, refuse, "doctor")
    assert doctor.returncode == 1, doctor.stdout + doctor.stderr
    assert line in doctor.stdout, doctor.stdout
    assert "[Errno" not in doctor.stdout
    done = _supervisor(readable_tmp, refuse, "exec", "--sandbox", "strict", "--", "echo", "ran")
    assert done.returncode == 1 and "| ran" not in done.stdout, done.stdout + done.stderr
    assert "[Errno" not in done.stdout and line.split(maxsplit=2)[2] in done.stdout, done.stdout


#: clone3 refused with EPERM: a seccomp profile older than clone3 (Docker's before 20.10.10,
#: some hardened CI runners'). glibc falls back on clone only on ENOSYS: no thread starts.
NO_CLONE3 = "435=EPERM"
NO_THREADS_SAID = (
    "this system refuses new threads: clone3 is refused with EPERM, as a seccomp profile older"
    " than clone3 does (Docker before 20.10.10, for one)\n"
    "    run mcpx-hooks under a newer container runtime, or with a seccomp profile that answers"
    " clone3 with ENOSYS (docker run --security-opt seccomp=PROFILE.json)\n"
)


@pytest.mark.parametrize(
    "command",
    [
        ("exec", "--", "true"),
        ("serve", "--port", "0"),
        ("mcp",),
        ("hook", "test", "--hook", '{"run": ["true"]}', "--phase", "before"),
        ("servers", "list"),
        ("hooks", "list", "--remote", "ws://localhost:1"),  # (a name looked up on a thread)
    ],
)
def test_threads_refused_are_said_with_the_way_out(
    readable_tmp: Path, command: tuple[str, ...]
) -> None:
    """Where clone3 is refused with EPERM every command that starts a thread died with a
    traceback ending in `RuntimeError: can't start new thread` (the spawner's first, then
    the supervisor's): now two lines, what is refused and the way out, and exit 1."""
    done = _supervisor(readable_tmp, NO_CLONE3, *command)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr == f"mcpx-hooks {command[0]}: {NO_THREADS_SAID}", done.stderr
    assert done.returncode == 1, done.stdout + done.stderr


@pytest.mark.parametrize("command", [("--version",), ("validate",), ("schema",)])
def test_commands_that_start_no_thread_still_work_without_them(
    readable_tmp: Path, command: tuple[str, ...]
) -> None:
    done = _supervisor(readable_tmp, NO_CLONE3, *command)
    assert done.returncode == 0 and done.stderr == "", done.stdout + done.stderr


def test_doctor_names_threads_refused_as_one_of_its_checks(readable_tmp: Path) -> None:
    """doctor died with two tracebacks (the spawner's probes, then its own) where clone3 is
    refused; now it says so, and checks what needs no thread."""
    done = _supervisor(readable_tmp, NO_CLONE3, "doctor")
    assert done.returncode == 1 and done.stderr == "", done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[2] == (
        "  threads: REFUSED: clone3 is refused with EPERM, as a seccomp profile older than"
        " clone3 does (Docker before 20.10.10, for one)"
    ), done.stdout
    assert lines[3].lstrip().startswith("to get them: run mcpx-hooks under a newer container")
    assert "spawner: not started (it needs threads)" in done.stdout
    assert any(line.startswith("run history: ") for line in lines), done.stdout


def test_a_spawner_refused_threads_says_so_in_its_report_and_leaves(tmp_path: Path) -> None:
    """The spawner (whose probes and jails are threads) died with a traceback on the
    supervisor's stderr, which then said "the spawner did not start: b''". Now its report
    line says why (the supervisor raises it as the spawner's error) and it exits."""
    import os
    import socket

    from mcpx_hooks.supervisor.process import runner_path

    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    taken = os.memfd_create("taken")
    spawner = [sys.executable, "-I", runner_path("spawner.py")]
    argv = [sys.executable, "-c", REFUSE, NO_CLONE3, "--", *spawner,
            str(os.getpid()), str(theirs.fileno()), "keeper", str(taken)]  # fmt: skip
    with mine, theirs:
        done = subprocess.run(argv, pass_fds=(theirs.fileno(), taken), capture_output=True,
                              text=True, timeout=60, check=False, cwd=tmp_path)  # fmt: skip
    os.close(taken)
    assert done.stderr == "" and done.returncode == 1, done.stdout + done.stderr
    assert json.loads(done.stdout) == {"refused": NO_THREADS_SAID.replace("\n    ", "\n")[:-1]}


#: Under the filter: a jail and an egress namespace's maker made once threads are refused
#: (a spawner that started with them, then met a pids limit).
_LATE = """
import json, types
from mcpx_hooks.runners import jail, loopback
from mcpx_hooks.runners.start import StartError
armed = jail.Jail(None, None)
said = {"armed": armed.wait_armed()}
request = types.SimpleNamespace(sandbox=types.SimpleNamespace(memory_bytes=0, egress=False))
try:
    armed.spawn(request, None, False)
except StartError as exc:
    said["spawn"] = str(exc)
maker = loopback.Maker()
maker.start()
try:
    maker.wait()
except OSError as exc:
    said["egress"] = exc.strerror
print(json.dumps(said))
"""


def test_a_jail_or_an_egress_maker_refused_its_thread_fails_its_request(tmp_path: Path) -> None:
    """A spawner refused a thread once it served (a pids limit reached) raised `RuntimeError`
    out of its loop when it armed the next jail or made an egress namespace's maker (and a
    jail's `spawn` would have waited for a thread that never ran): now the request fails
    with the refusal in words, as a start that failed."""
    argv = [sys.executable, "-c", REFUSE, NO_CLONE3, "--", sys.executable, "-c", _LATE]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 and done.stderr == "", done.stdout + done.stderr
    said = NO_THREADS_SAID.replace("\n    ", "; ")[:-1]
    assert json.loads(done.stdout) == {"armed": said, "spawn": f"sandbox: {said}", "egress": said}
