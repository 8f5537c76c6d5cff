"""Properties (Hypothesis) of the seccomp filter (`runners/seccomp.py`), run as the kernel
runs it: a small cBPF interpreter here (the few opcodes the filter uses) reads it against any
system call number and arguments. For each `SOCKET_FAMILIES` level, `socket()` is allowed for
exactly the families listed (any other: EACCES), `socketpair` is never judged, another
architecture and the x32 numbers are refused, and a call the filter does not list is allowed.
Pure: no filter is installed.
"""

from __future__ import annotations

import errno
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcpx_hooks.runners.libc import table
from mcpx_hooks.runners.seccomp import (
    DENIED,
    MODE_ARGUMENT,
    OPEN_ARGUMENTS,
    SOCKET_FAMILIES,
    UNJUDGED,
    seccomp_program,
)

FOUND = table()
pytestmark = pytest.mark.skipif(FOUND is None, reason="no system call table for this machine")
ALLOW = 0x7FFF0000
ERRNO = 0x00050000
#: The most instructions the kernel takes in one filter (BPF_MAXINSNS).
MAX_INSNS = 4096
X32_BIT = 0x40000000
#: socketpair's number by audit arch (x86_64, aarch64): the filter names it nowhere.
SOCKETPAIR = {0xC000003E: 53, 0xC00000B7: 199}


def run(program: bytes, nr: int, arch: int, args: tuple[int, ...]) -> int:
    """What the filter returns for `struct seccomp_data` {nr, arch, ip 0, args}."""
    data = struct.pack("=iIQ6Q", nr, arch, 0, *args)
    ops = [struct.unpack_from("=HBBI", program, i) for i in range(0, len(program), 8)]
    assert len(ops) <= MAX_INSNS
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = ops[pc]
        pc += 1
        if code == 0x20:  # BPF_LD | BPF_W | BPF_ABS
            assert k % 4 == 0 and k + 4 <= len(data), k
            acc = struct.unpack_from("=I", data, k)[0]
        elif code == 0x15:  # BPF_JMP | BPF_JEQ | BPF_K
            pc += jt if acc == k else jf
        elif code == 0x35:  # BPF_JMP | BPF_JGE | BPF_K
            pc += jt if acc >= k else jf
        elif code == 0x45:  # BPF_JMP | BPF_JSET | BPF_K
            pc += jt if acc & k else jf
        elif code == 0x06:  # BPF_RET | BPF_K
            return k
        else:
            raise AssertionError(f"opcode {code:#x} at {pc - 1}")
        assert pc < len(ops), "ran off the end"


def fails(code: int) -> int:
    return ERRNO | code


arch, nrs = FOUND if FOUND is not None else (0, {})
JUDGED = {
    *DENIED,
    *UNJUDGED,
    *MODE_ARGUMENT,
    *OPEN_ARGUMENTS,
    "clone",
    "clone3",
    "prlimit64",
    "socket",
    "memfd_create",
    "shmget",
}
u64 = st.integers(0, 2**64 - 1)
args6 = st.tuples(u64, u64, u64, u64, u64, u64)
levels = st.sampled_from(sorted(SOCKET_FAMILIES))
flags = st.tuples(st.booleans(), st.booleans())


@given(
    level=levels,
    extra=flags,
    family=st.one_of(st.integers(0, 50), st.integers(0, 2**32 - 1)),
    high=st.integers(0, 2**32 - 1),
    rest=st.tuples(u64, u64, u64, u64, u64),
)
def test_socket_makes_the_families_listed_and_no_other(
    level: str, extra: tuple[bool, bool], family: int, high: int, rest: tuple[int, ...]
) -> None:
    program = seccomp_program(level, *extra)
    listed = SOCKET_FAMILIES[level]
    # (the kernel reads `int family`: the high half of the register is not the family)
    said = run(program, nrs["socket"], arch, (family | high << 32, *rest))
    allowed = listed is None or family in listed
    assert said == (ALLOW if allowed else fails(errno.EACCES)), (level, family, hex(said))


@given(level=levels, extra=flags, args=args6)
def test_socketpair_is_never_judged(level: str, extra: tuple[bool, bool], args: tuple) -> None:
    assert run(seccomp_program(level, *extra), SOCKETPAIR[arch], arch, args) == ALLOW


@given(
    level=levels,
    extra=flags,
    nr=st.one_of(st.sampled_from(sorted(nrs.values())), st.integers(0, 2**31 - 1)),
    args=args6,
)
def test_every_other_call_as_listed(
    level: str, extra: tuple[bool, bool], nr: int, args: tuple[int, ...]
) -> None:
    program = seccomp_program(level, *extra)
    names = {n for n, number in nrs.items() if number == nr}
    said = run(program, nr, arch, args)
    if nr & X32_BIT and arch == 0xC000003E:
        assert said == fails(errno.EPERM)
    elif names & set(DENIED):
        assert said == fails(errno.EPERM), names
    elif names & {*UNJUDGED, "clone3"}:
        assert said == fails(errno.ENOSYS), names
    elif not names & JUDGED:
        assert said == ALLOW, (names, nr)
    # Another machine's calls are refused whatever they are.
    assert run(program, nr, arch ^ 1, args) == fails(errno.EPERM)
