"""Compile sandbox/seccomp.json into the classic-BPF program that bwrap's `--seccomp FD` loads.

Why hand-written: libseccomp's Python binding is not on PyPI (only Debian's python3-seccomp,
tied to the system interpreter), and the filter we need is a deny list, a few argument checks
and one flag check, about a hundred instructions. The layout follows the kernel's seccomp_filter
documentation: check the architecture first (a foreign ABI such as i386 or x32 on x86_64 would
renumber every syscall), then compare the syscall number.
"""

from __future__ import annotations

import errno
import json
import os
import platform
import struct
from pathlib import Path

PROFILE = Path(__file__).resolve().parents[2] / "sandbox" / "seccomp.json"

# <linux/filter.h>, <linux/bpf_common.h>, <linux/seccomp.h>, <linux/sched.h>
BPF_LD_W_ABS = 0x20
BPF_JEQ_K = 0x15
BPF_JGE_K = 0x35
BPF_JSET_K = 0x45
BPF_RET_K = 0x06
RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000
RET_ALLOW = 0x7FFF0000
X32_SYSCALL_BIT = 0x40000000
OFFSET_NR, OFFSET_ARCH, OFFSET_ARG0 = 0, 4, 16  # struct seccomp_data, little-endian
CLONE_FLAGS = {"CLONE_NEWNS": 0x00020000, "CLONE_NEWCGROUP": 0x02000000,
               "CLONE_NEWUTS": 0x04000000, "CLONE_NEWIPC": 0x08000000,
               "CLONE_NEWUSER": 0x10000000, "CLONE_NEWPID": 0x20000000,
               "CLONE_NEWNET": 0x40000000}


class UnsupportedArchitecture(RuntimeError):
    pass


def compile_filter(machine: str | None = None, profile: Path = PROFILE) -> bytes:
    """The BPF program (struct sock_filter[]) for this machine's architecture."""
    spec = json.loads(profile.read_text())
    machine = machine or platform.machine()
    if machine not in spec["arch"]:
        raise UnsupportedArchitecture(f"no seccomp profile for {machine!r} in {profile}")
    arch = spec["arch"][machine]
    numbers = arch["syscalls"]
    clone_mask = 0
    for flag in spec["clone_denied_flags"]:
        clone_mask |= CLONE_FLAGS[flag]

    program = [(BPF_LD_W_ABS, 0, 0, OFFSET_ARCH),
               (BPF_JEQ_K, "nr", "kill", arch["audit_arch"]),
               ("label", "nr"), (BPF_LD_W_ABS, 0, 0, OFFSET_NR)]
    if machine == "x86_64":
        program.append((BPF_JGE_K, "eperm", 0, X32_SYSCALL_BIT))
    # a call this architecture does not have (null: aarch64 has no inotify_init) needs no rule
    program += [(BPF_JEQ_K, "eperm", 0, numbers[name]) for name in spec["deny"]
                if numbers[name] is not None]
    program += _self_only(spec, numbers) + _socket_families(spec, numbers) + \
        _argument_checks(spec, numbers)
    program += [(BPF_JEQ_K, "enosys", 0, numbers["clone3"]),
                (BPF_JEQ_K, 0, "allow", numbers["clone"]),
                (BPF_LD_W_ABS, 0, 0, OFFSET_ARG0),
                (BPF_JSET_K, "eperm", 0, clone_mask),
                ("label", "allow"), (BPF_RET_K, 0, 0, RET_ALLOW),
                ("label", "eperm"), (BPF_RET_K, 0, 0, RET_ERRNO | errno.EPERM),
                ("label", "enosys"), (BPF_RET_K, 0, 0, RET_ERRNO | errno.ENOSYS),
                ("label", "kill"), (BPF_RET_K, 0, 0, RET_KILL_PROCESS)]
    return _assemble(program)


def _self_only(spec: dict, numbers: dict) -> list[tuple]:
    """A call that names a process by its arguments may name only the caller (arguments 0): the
    low word, as the kernel reads these int arguments."""
    program = []
    for name, indices in spec["self_only"].items():
        program.append((BPF_JEQ_K, 0, f"not {name}", numbers[name]))
        for index in indices:
            program += [(BPF_LD_W_ABS, 0, 0, OFFSET_ARG0 + 8 * index),
                        (BPF_JEQ_K, 0, "eperm", 0)]
        program += [(BPF_RET_K, 0, 0, RET_ALLOW), ("label", f"not {name}")]
    return program


def _socket_families(spec: dict, numbers: dict) -> list[tuple]:
    """Socket families: argument 0 (its low word) one of these, else refused."""
    program = []
    families = spec["socket_families"]
    for name in families["calls"]:
        program += [(BPF_JEQ_K, 0, f"not {name}", numbers[name]),
                    (BPF_LD_W_ABS, 0, 0, OFFSET_ARG0),
                    *((BPF_JEQ_K, "allow", 0, family) for family in families["allowed"]),
                    (BPF_RET_K, 0, 0, RET_ERRNO | errno.EAFNOSUPPORT), ("label", f"not {name}")]
    return program


def _argument_checks(spec: dict, numbers: dict) -> list[tuple]:
    """Calls refused for one argument: any of `flags` set (denied_flags), or one of `values`
    (denied_values)."""
    program = []
    for name, (index, flags) in spec["denied_flags"].items():
        program += [(BPF_JEQ_K, 0, f"no {name}", numbers[name]),
                    (BPF_LD_W_ABS, 0, 0, OFFSET_ARG0 + 8 * index),
                    (BPF_JSET_K, "eperm", "allow", flags), ("label", f"no {name}")]
    for name, (index, values) in spec["denied_values"].items():
        program += [(BPF_JEQ_K, 0, f"no {name} value", numbers[name]),
                    (BPF_LD_W_ABS, 0, 0, OFFSET_ARG0 + 8 * index),
                    *((BPF_JEQ_K, "eperm", 0, value) for value in values),
                    (BPF_RET_K, 0, 0, RET_ALLOW), ("label", f"no {name} value")]
    return program


def _assemble(program: list[tuple]) -> bytes:
    """Resolve label jumps into BPF's relative offsets (instructions to skip)."""
    labels, code = {}, []
    for item in program:
        if item[0] == "label":
            labels[item[1]] = len(code)
        else:
            code.append(item)
    out = bytearray()
    for index, (op, jt, jf, k) in enumerate(code):
        jt, jf = (labels[j] - index - 1 if isinstance(j, str) else j for j in (jt, jf))
        if not (0 <= jt <= 255 and 0 <= jf <= 255):
            raise ValueError(f"BPF jump out of range at instruction {index}")
        out += struct.pack("<HBBI", op, jt, jf, k)
    return bytes(out)


def docker_profile(profile: Path = PROFILE) -> str:
    """The same deny list as a Docker seccomp profile (JSON text for `--security-opt seccomp=`).
    Docker resolves names per architecture itself. Unlike our BPF filter it allows other ABIs:
    the engine's profile format cannot say "kill any other architecture" without listing them."""
    spec = json.loads(profile.read_text())
    errno_rule = {"action": "SCMP_ACT_ERRNO", "errnoRet": errno.EPERM}
    rules = [{"names": spec["deny"], **errno_rule},
             {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": errno.ENOSYS}]
    # self_only: one rule per argument that must be 0 (any of them non-zero refuses the call)
    rules += [{"names": [name], **errno_rule,
               "args": [{"index": index, "value": 0, "op": "SCMP_CMP_NE"}]}
              for name, indices in spec["self_only"].items() for index in indices]
    rules += [{"names": [name], **errno_rule,
               "args": [{"index": index, "value": flags, "valueTwo": flags,
                         "op": "SCMP_CMP_MASKED_EQ"}]}
              for name, (index, flags) in spec["denied_flags"].items()]
    rules += [{"names": [name], **errno_rule,
               "args": [{"index": index, "value": value, "op": "SCMP_CMP_EQ"}]}
              for name, (index, values) in spec["denied_values"].items() for value in values]
    # Socket families: one comparison of an argument per rule (as below, a rule's conditions
    # must all hold; libseccomp takes one per argument).
    families = spec["socket_families"]
    rules += [{"names": families["calls"], "action": "SCMP_ACT_ERRNO",
               "errnoRet": errno.EAFNOSUPPORT, "args": [{"index": 0, **arg}]}
              for arg in _other_values(families["allowed"])]
    # One rule per flag: a rule's argument conditions must all hold, so "any of these flags"
    # is several rules of "(flags & F) == F".
    for flag in spec["clone_denied_flags"]:
        value = CLONE_FLAGS[flag]
        rules.append({"names": ["clone"], **errno_rule,
                      "args": [{"index": 0, "value": value, "valueTwo": value,
                                "op": "SCMP_CMP_MASKED_EQ"}]})
    return json.dumps({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": rules})


def _other_values(allowed: list[int]) -> list[dict]:
    """Docker argument comparisons that, one per rule, match every value not in `allowed`."""
    top = max(allowed)
    return [*({"value": v, "op": "SCMP_CMP_EQ"} for v in range(top) if v not in allowed),
            {"value": top + 1, "op": "SCMP_CMP_GE"}]


def filter_fd(machine: str | None = None) -> int:
    """A memfd holding the program, positioned at 0, for `bwrap --seccomp FD` (caller closes)."""
    fd = os.memfd_create("spade-ray-seccomp", 0)
    os.write(fd, compile_filter(machine))
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
