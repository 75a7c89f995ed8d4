"""A seccomp filter for student code that runs natively (the CPU harness) and for the compilers.

bwrap installs it (`--seccomp FD`) right before it starts the command. It is a deny list: what an SGEMM
kernel, g++ or nvcc never needs and an escape would — tracing other processes, sockets other than
AF_UNIX, mounts, new namespaces, BPF, the kernel keyring, kexec and modules, io_uring (which can open
sockets without socket(2)). A denied call fails with EPERM; a call through another ABI (i386 `int 0x80`,
x32) kills the process, since the numbers below mean nothing there.

Written as classic BPF by hand (x86-64 only): it is a few dozen instructions, and a binding to libseccomp
would add a C library the GPU machines and LMS containers may not have.
"""
from __future__ import annotations

import platform
import struct

AUDIT_ARCH_X86_64 = 0xC000003E
X32_SYSCALL_BIT = 0x40000000

# struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6]
NR_OFFSET, ARCH_OFFSET, ARG0_OFFSET = 0, 4, 16

# classic BPF opcodes
LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
JGE_K = 0x35  # BPF_JMP | BPF_JGE | BPF_K
JSET_K = 0x45  # BPF_JMP | BPF_JSET | BPF_K
RET_K = 0x06  # BPF_RET | BPF_K

RET_ALLOW = 0x7FFF0000
RET_KILL_PROCESS = 0x80000000
RET_EPERM = 0x00050000 | 1  # SECCOMP_RET_ERRNO | EPERM

AF_UNIX = 1
# CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET
CLONE_NEW_NAMESPACES = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000

# x86-64 syscall numbers (arch/x86/entry/syscalls/syscall_64.tbl)
DENIED = {
    "ptrace": 101, "syslog": 103, "personality": 135, "vhangup": 153, "pivot_root": 155, "adjtimex": 159,
    "chroot": 161, "acct": 163, "settimeofday": 164, "mount": 165, "umount2": 166, "swapon": 167,
    "swapoff": 168, "reboot": 169, "iopl": 172, "ioperm": 173, "init_module": 175, "delete_module": 176,
    "quotactl": 179, "clock_settime": 227, "kexec_load": 246, "add_key": 248, "request_key": 249,
    "keyctl": 250, "unshare": 272, "perf_event_open": 298, "name_to_handle_at": 303, "open_by_handle_at": 304,
    "setns": 308, "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312, "finit_module": 313,
    "kexec_file_load": 320, "bpf": 321, "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426,
    "io_uring_register": 427, "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431,
    "fsmount": 432, "fspick": 433, "pidfd_getfd": 438, "mount_setattr": 442,
}
SOCKET, CLONE, CLONE3 = 41, 56, 435
RET_ENOSYS = 0x00050000 | 38  # clone3's flags sit in memory a filter cannot read: glibc falls back to clone


def supported() -> bool:
    return platform.machine() == "x86_64"


def _op(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def filter_program() -> bytes:
    """The filter as bwrap reads it: an array of struct sock_filter."""
    body = [
        _op(LD_W_ABS, ARCH_OFFSET),
        _op(JEQ_K, AUDIT_ARCH_X86_64, jt=1),
        _op(RET_K, RET_KILL_PROCESS),
        _op(LD_W_ABS, NR_OFFSET),
        _op(JGE_K, X32_SYSCALL_BIT, jf=1),
        _op(RET_K, RET_KILL_PROCESS),
    ]
    for number in sorted(DENIED.values()):
        body += [_op(JEQ_K, number, jf=1), _op(RET_K, RET_EPERM)]
    body += [
        _op(JEQ_K, CLONE3, jf=1), _op(RET_K, RET_ENOSYS),
        # clone(flags, ...): no new namespaces
        _op(JEQ_K, CLONE, jf=3), _op(LD_W_ABS, ARG0_OFFSET), _op(JSET_K, CLONE_NEW_NAMESPACES, jf=1),
        _op(RET_K, RET_EPERM),
        # socket(domain, ...): AF_UNIX only. (Reloading nr is harmless when we came from the clone check.)
        _op(LD_W_ABS, NR_OFFSET),
        _op(JEQ_K, SOCKET, jf=3), _op(LD_W_ABS, ARG0_OFFSET), _op(JEQ_K, AF_UNIX, jt=1), _op(RET_K, RET_EPERM),
        _op(RET_K, RET_ALLOW),
    ]
    return b"".join(body)
