"""The local backend's seccomp filter: kernel attack surface refused, ordinary work allowed."""

import json
import platform
import struct

import pytest

from spade_ray.execution import seccomp
from spade_ray.records import ExecStatus

PROBE = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
for name, nr, args in {calls}:
    ret = libc.syscall(nr, *args)
    print(name, ret, ctypes.get_errno())
"""


@pytest.fixture(scope="module")
def local():
    from tests.conftest import TEST_LIMITS, open_sandbox

    with open_sandbox("local", limits=TEST_LIMITS, workers=1) as sb:
        yield sb


def test_kernel_attack_surface_is_refused_with_eperm(local):
    numbers = json.loads(seccomp.PROFILE.read_text())["arch"][platform.machine()]["syscalls"]
    calls = [(name, numbers[name], args) for name, args in [
        ("bpf", (0, 0, 0)), ("keyctl", (0, 0, 0)), ("io_uring_setup", (1, 0)),
        ("perf_event_open", (0, 0, -1, -1, 0)), ("userfaultfd", (0,))]]
    r = local.run(PROBE.format(calls=calls))
    assert r.status is ExecStatus.OK
    assert [line.split()[1:] for line in r.stdout.splitlines()] == [["-1", "1"]] * len(calls)


def test_threads_fork_and_subprocess_still_work(local):
    r = local.run("import os, subprocess, threading\n"
                  "t = threading.Thread(target=print, args=('thread',)); t.start(); t.join()\n"
                  "print(subprocess.run(['echo', 'child'], capture_output=True, text=True).stdout)")
    assert r.stdout.split() == ["thread", "child"]


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_filter_compiles_to_whole_instructions(machine):
    program = seccomp.compile_filter(machine)
    assert len(program) % 8 == 0
    # the first instruction loads the architecture word of struct seccomp_data
    assert struct.unpack("<HBBI", program[:8]) == (seccomp.BPF_LD_W_ABS, 0, 0, 4)


def test_unknown_architecture_is_named():
    with pytest.raises(seccomp.UnsupportedArchitecture, match="riscv64"):
        seccomp.compile_filter("riscv64")
