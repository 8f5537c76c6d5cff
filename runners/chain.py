"""A child started by a chain of system calls, without a fork of this (Python) process.

Standard library only. `clone(CLONE_VM | CLONE_VFORK | flags)` starts a child that shares
this process's memory and runs, on a small stack of its own, a fixed routine of machine code
(`_X86_64`, 145 bytes, its source below) that makes the system calls of a `Chain` one after
the other, each with the arguments laid out for it here, and ends with `execve`. The calling
thread waits until that exec (or the child's exit); the other threads go on. Nothing of
Python runs in the child, so nothing is copied: a fork of the spawner costs about 0.7 ms
before its child runs at all, and every step in that child then costs several times what
it costs here (the copy-on-write of each page its Python touches); this costs about what
`posix_spawn` does (which uses the same clone).

It is for a child that needs what a thread cannot do for it and `posix_spawn` will not: a
rootless hook's own user namespace (`unshare` of one refuses a thread of a process with
others; the child, a process of its own that only shares memory, may), then its maps,
limits and the rest of its seal (`chained.py`).

A step that fails stops the chain: the routine stores the step's index and the error where
this process reads them (its memory is shared) and exits 127; `spawn` reaps it and raises
`ChainError` naming the step. The routine touches nothing but its own stack and the chain's
memory, which stays alive and unchanged until `spawn` returns.

Signals: the calling thread blocks every signal around the clone (the child starts with
that mask), the chain sets the dispositions it is given back to the default, and its last
steps before `execve` restore the mask the program is to start with: no handler of this
process ever runs in the child.

Where this machine has no routine (not x86_64), or `MCPX_HOOKS_HIDE` names `chain`, or the
routine's page cannot be made executable, `available()` is False and the caller forks.

The routine (GNU as, `.intel_syntax noprefix`; `rdi` = the chain: a header of two words,
index of the failed step and its result, then entries of 8 words: number, six arguments,
flags; bit 0/1: argument 0/1 is the saved result; bit 6: a failure does not stop; bit 7: the
result is saved; an entry numbered -1 ends it):

        endbr64
        mov rbx, rdi            ; the header
        lea r12, [rdi+16]       ; the first entry
        xor r14d, r14d          ; its index
        xor ebp, ebp            ; the saved result
    1:  mov rax, [r12]
        cmp rax, -1
        je 9f
        mov r15, [r12+56]
        mov rdi, [r12+8]
        test r15d, 1
        jz 2f
        mov rdi, rbp
    2:  mov rsi, [r12+16]
        test r15d, 2
        jz 3f
        mov rsi, rbp
    3:  mov rdx, [r12+24]
        mov r10, [r12+32]
        mov r8, [r12+40]
        mov r9, [r12+48]
        syscall
        test r15d, 0x80
        jz 4f
        mov rbp, rax
    4:  test r15d, 0x40
        jnz 5f
        cmp rax, -4095
        jae 8f
    5:  add r12, 64
        inc r14
        jmp 1b
    8:  mov [rbx], r14
        mov [rbx+8], rax
    9:  mov edi, 127
        mov eax, 231            ; exit_group
        syscall
        hlt
"""

from __future__ import annotations

import ctypes
import os
import struct
import threading

from .isolation import hidden

_X86_64 = bytes.fromhex(
    "f30f1efa4889fb4c8d67104531f631ed498b04244883f8ff746a4d8b7c2438498b7c240841f7c701000000"
    "74034889ef498b74241041f7c70200000074034889ee498b5424184d8b5424204d8b4424284d8b4c2430"
    "0f0541f7c78000000074034889c541f7c7400000007508483d01f0ffff73094983c44049ffc6eb934c89"
    "3348894308bf7f000000b8e70000000f05f4"
)

#: Entry flags: argument 0 (1) or 1 (2) is the saved result; a failure does not stop the
#: chain; the result is saved (for the next entries' `SAVED` arguments).
ARG0_SAVED = 0x01
ARG1_SAVED = 0x02
MAY_FAIL = 0x40
SAVE = 0x80

#: `execve` here: the call every chain ends with (the routine exists for x86_64 only).
EXECVE = 59
CLONE_VM = 0x00000100
CLONE_VFORK = 0x00004000
_SIGCHLD = 17
_WORD = (1 << 64) - 1
_NONE = _WORD  # an index that is no step's: no step failed
_STACK = 16384

_libc = ctypes.CDLL(None, use_errno=True)
_libc.clone.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
_libc.clone.restype = ctypes.c_int
_libc.mmap.argtypes = [
    ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long,
]  # fmt: skip
_libc.mmap.restype = ctypes.c_void_p
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]

_routine: int | None = None
_made = False


def _make_routine() -> int | None:
    """The routine's address, on a page of its own made read+execute; None where it cannot
    be (another machine, or a policy refusing executable memory)."""
    if os.uname().machine != "x86_64":
        return None
    prot_rw, prot_rx, private_anon = 0x3, 0x5, 0x22
    page = _libc.mmap(None, 4096, prot_rw, private_anon, -1, 0)
    if page is None or page == ctypes.c_void_p(-1).value:
        return None
    ctypes.memmove(page, _X86_64, len(_X86_64))
    if _libc.mprotect(page, 4096, prot_rx) != 0:
        return None
    return int(page)


def available() -> bool:
    """Whether `Chain.spawn` can run here (`MCPX_HOOKS_HIDE=chain` says no)."""
    global _routine, _made
    if "chain" in hidden():
        return False
    if not _made:
        _routine, _made = _make_routine(), True
    return _routine is not None


class ChainError(OSError):
    """A step of the chain failed: `what` is its description, `errno` its error."""

    def __init__(self, err: int, what: str) -> None:
        super().__init__(err, os.strerror(err))
        self.what = what


Arg = int | bytes | None
_ENTRY = struct.Struct("=8Q")


class Chain:
    """The system calls a child makes before its program runs, in order (`call`, `extend`),
    then `spawn`. An argument is an int, bytes (passed as a pointer to a NUL-terminated copy
    kept here) or None (0). Each entry is laid out as it is added, so that a chain built
    once (the steps every child of this process shares) is reused at the cost of a copy."""

    def __init__(self) -> None:
        self._packed: list[bytes] = []
        self._whats: list[str] = []
        self._keep: list[object] = []
        self._last = -1

    def pointer(self, data: bytes) -> int:
        """The address of a copy of `data` (NUL-terminated) that lives as long as the chain."""
        buf = ctypes.create_string_buffer(data, len(data) + 1)
        self._keep.append(buf)
        return ctypes.addressof(buf)

    def strings(self, items: list[bytes]) -> int:
        """The address of a NULL-terminated array of pointers to copies of `items` (one
        buffer holds them all)."""
        buf = ctypes.create_string_buffer(b"\0".join(items) + b"\0")
        base, addresses = ctypes.addressof(buf), []
        for item in items:
            addresses.append(base)
            base += len(item) + 1
        array = (ctypes.c_void_p * (len(items) + 1))(*addresses, None)
        self._keep += (buf, array)
        return ctypes.addressof(array)

    def call(self, number: int, *args: Arg, what: str, flags: int = 0) -> None:
        """Adds system call `number` with up to six `args`; `what` names it if it fails."""
        words = [self._word(a) for a in args]
        self._packed.append(_ENTRY.pack(number, *words, *(0,) * (6 - len(words)), flags))
        self._whats.append(what)
        self._last = number

    def extend(self, other: Chain) -> None:
        """Adds the calls of `other` (kept alive as long as this chain)."""
        self._packed += other._packed
        self._whats += other._whats
        self._keep.append(other)
        self._last = other._last

    def _word(self, arg: Arg) -> int:
        if arg is None:
            return 0
        if isinstance(arg, bytes):
            return self.pointer(arg)
        return arg & _WORD

    def spawn(self, flags: int = 0) -> int:
        """Starts the child (`clone` with `CLONE_VM | CLONE_VFORK | flags`), which makes the
        calls in order; returns its pid once it has exec'd. Raises `ChainError` for the step
        that failed (the child reaped), `OSError` if `clone` itself failed."""
        assert available() and _routine is not None
        assert self._last == EXECVE, "a chain ends with its exec"
        laid = b"".join((_HEADER, *self._packed, _END))
        mem = (ctypes.c_uint64 * (len(laid) // 8)).from_buffer_copy(laid)
        old = ctypes.create_string_buffer(_SIGSET_BYTES)
        with _stack_lock:  # (one child at a time on the stack; its clone returns after exec)
            _pthread_sigmask(_SIG_BLOCK, _EVERY_SIGNAL, old)
            try:
                pid: int = _libc.clone(
                    _routine, _STACK_TOP, CLONE_VM | CLONE_VFORK | flags | _SIGCHLD,
                    ctypes.addressof(mem),
                )  # fmt: skip
                err = ctypes.get_errno()
            finally:
                _pthread_sigmask(_SIG_SETMASK, old, None)
        if pid < 0:
            raise OSError(err, f"clone: {os.strerror(err)}")
        if mem[0] == _NONE:
            return pid
        os.waitpid(pid, 0)
        index, result = int(mem[0]), int(mem[1])
        raise ChainError((-result) & 0xFFFF, self._whats[index])


#: The chain's header (no step failed yet) and its end.
_HEADER = struct.pack("=QQ", _NONE, 0)
_END = _ENTRY.pack(_WORD, 0, 0, 0, 0, 0, 0, 0)

#: The children's stack, one at a time (`_stack_lock`).
_STACK_MEMORY = ctypes.create_string_buffer(_STACK)
_STACK_TOP = (ctypes.addressof(_STACK_MEMORY) + _STACK - 64) & ~15
_stack_lock = threading.Lock()
#: The calling thread's signal mask, through libc (a `sigset_t` as bytes, every bit set for
#: "all"): what `signal.pthread_sigmask` does without building a set of the old mask.
_SIG_BLOCK, _SIG_SETMASK, _SIGSET_BYTES = 0, 2, 128
_EVERY_SIGNAL = ctypes.create_string_buffer(b"\xff" * _SIGSET_BYTES, _SIGSET_BYTES)
_pthread_sigmask = _libc.pthread_sigmask
_pthread_sigmask.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
