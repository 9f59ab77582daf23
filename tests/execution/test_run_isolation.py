"""Isolation between runs on one worker: nothing a run does reaches the next run there.

Each attack (a WRONG `add`, as in test_grader_canaries.py) tries to leave something behind: the
jail's processes' limits and scheduling, the working directory's attributes, a message queue,
the page cache, kernel memory charged to the worker, counters that accumulate. It must score
0.0, never come back `sandbox_error`, and leave the next honest run seeing exactly what it saw
before; peak memory and CPU must be each run's own.
"""

import dataclasses
import textwrap

import pytest

from spade_ray.records import ExecStatus
from tests.conftest import TEST_LIMITS
from tests.execution.canaries import (
    ASSERTS,
    CHECK,
    CONTROLS,
    SHAPES,
    WRONG,
    dentry_flood,
    verdict,
)

# ------------------------------------------- state a run leaves for the next one on its worker

# What a run inherits from its jail: an honest candidate sees the same before and after any
# other run, whatever that run tried. It runs as a checked program: its own `add` is correct.
# In a test program: "ok" when the call succeeds, else the errno it failed with.
ATTEMPT = """
def attempt(call):
    try:
        call()
        return "ok"
    except OSError as e:
        return e.errno
"""
FINGERPRINT = """
import os, resource
print(os.stat("/work").st_atime_ns, os.stat("/work").st_mtime_ns)  # 0 0: cleanup.py resets them
os.makedirs("/work/d/e")
with open("/work/d/e/f", "w") as f:
    f.write("ok")
print(sorted((n, resource.getrlimit(getattr(resource, n))) for n in dir(resource)
             if n.startswith("RLIMIT_")))
print(os.getpriority(os.PRIO_PROCESS, 0), sorted(os.sched_getaffinity(0)),
      os.sched_getscheduler(0), os.listxattr("/work"), sorted(os.listdir("/work")),
      sorted(os.listdir("/dev/mqueue")) if os.path.isdir("/dev/mqueue") else None)
def add(a, b):
    return a + b
"""
# Every other process of the jail gets `limits` ((resource, value) pairs) if the kernel lets it.
PRLIMITS = """
    import os, resource
    for pid in range(1, 8):
        for limit, value in ({limits}):
            try:
                if pid != os.getpid():
                    resource.prlimit(pid, limit, (value, value))
            except (OSError, ValueError):
                pass
    def add(a, b):
        return 0
"""
# The server is PID 1 and the grader PID 2 (or the next pids): both run as the candidate's uid.
# Each attack tries every way it knows and ignores refusals; its `add` is wrong.
LINGERING = {
    # limits just under what every child of the server sets itself: each later one would fail
    "lowers_the_jails_limits": PRLIMITS.format(
        limits="(resource.RLIMIT_NOFILE, 255), (resource.RLIMIT_FSIZE, 4096), "
               "(resource.RLIMIT_CORE, 0), (resource.RLIMIT_STACK, 1 << 20)"),
    # limits the server cannot work under: the run must still be the candidate's failure
    "crushes_the_jails_limits": PRLIMITS.format(
        limits="(resource.RLIMIT_AS, 1 << 20), (resource.RLIMIT_NPROC, 0), "
               "(resource.RLIMIT_NOFILE, 3)"),
    "takes_the_servers_files_and_cpu": """
        import os, resource
        try:
            fields = open("/proc/1/stat").read().rsplit(")", 1)[1].split()
            used = (int(fields[11]) + int(fields[12])) // os.sysconf("SC_CLK_TCK")
            resource.prlimit(1, resource.RLIMIT_CPU, (used, used))
        except OSError:
            pass
        try:
            resource.prlimit(1, resource.RLIMIT_NOFILE, (0, 0))
        except OSError:
            pass
        def add(a, b):
            return 0
    """,
    "deprioritises_the_jail": """
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        attempts = [
            lambda: os.setpriority(os.PRIO_PROCESS, 1, 19),
            lambda: os.setpriority(os.PRIO_PROCESS, 2, 19),
            lambda: os.setpriority(os.PRIO_PGRP, 0, 19),
            lambda: os.setpriority(os.PRIO_USER, 0, 19),
            lambda: os.sched_setaffinity(1, {0}),
            lambda: os.sched_setscheduler(1, os.SCHED_IDLE, os.sched_param(0)),
            lambda: os.sched_setscheduler(2, os.SCHED_BATCH, os.sched_param(0)),
            lambda: os.sched_setparam(1, os.sched_param(0)),
            # ioprio_set(IOPRIO_WHO_USER, 0, idle class): x86_64 251, aarch64 30
            lambda: libc.syscall(251 if os.uname().machine == "x86_64" else 30, 3, 0, 3 << 13),
        ]
        for attempt in attempts:
            try:
                attempt()
            except OSError:
                pass
        def add(a, b):
            return 0
    """,
    # POSIX message queues outlive their process; Docker mounts their file system
    "leaves_a_message_queue": """
        import os
        try:
            os.close(os.open("/dev/mqueue/left-by-a-previous-run", os.O_CREAT | os.O_RDWR))
        except OSError:
            pass
        def add(a, b):
            return 0
    """,
    "marks_the_working_directory": """
        import os, struct
        os.utime("/work", ns=(0x5EC1319, 0x5EC1319))  # any 64-bit value (red-team s24 H2)
        # a default POSIX ACL that gives nobody anything (tags user, group, other), and data
        acl = struct.pack("<I", 2) + b"".join(struct.pack("<HHI", tag, 0, 0xFFFFFFFF)
                                              for tag in (0x01, 0x04, 0x20))
        for name, value in (("system.posix_acl_default", acl), ("system.posix_acl_access", acl),
                            ("user.spade", b"from a previous run")):
            try:
                os.setxattr("/work", name, value)
            except OSError:
                pass
        try:
            os.chmod("/work", 0o1000)
        except OSError:
            pass
        def add(a, b):
            return 0
    """,
}


def fingerprint(sandbox):
    result = sandbox.check(textwrap.dedent(FINGERPRINT), ASSERTS)
    assert result.passed, (result.outcomes, result.execution)
    return result.execution.stdout


@pytest.mark.parametrize("attack", LINGERING)
def test_a_run_cannot_leave_anything_to_the_next(sandbox, attack):
    before = fingerprint(sandbox)
    result, s = verdict(sandbox, LINGERING[attack], ASSERTS)
    assert (s.value, result.passed) == (0.0, False), result.outcomes
    assert result.execution.status is not ExecStatus.SANDBOX_ERROR, result.execution.detail
    assert [fingerprint(sandbox) for _ in range(2)] == [before] * 2


@pytest.mark.parametrize("attack", LINGERING)
def test_lingering_attacks_score_zero_on_every_shape(sandbox, attack):
    for shape in ("check", "examples"):
        result, s = verdict(sandbox, LINGERING[attack], SHAPES[shape])
        assert (s.value, result.passed) == (0.0, False), (shape, result.outcomes)
        assert result.execution.status is not ExecStatus.SANDBOX_ERROR, result.execution.detail
    assert sandbox.check(CONTROLS["plain"], CHECK).passed


def test_memory_a_run_left_charged_does_not_count_in_the_next(sandbox):
    """Kernel memory outlives its process: failed lookups leave dentries charged to the worker's
    cgroup (300,000 of them ~58 MB). Peak memory breaks ties between candidates, so it must be
    the run's own."""
    honest = [sandbox.check(CONTROLS["plain"], ASSERTS).execution.peak_memory_mb
              for _ in range(2)]
    flood = dentry_flood(300_000) + WRONG
    sandbox.check(flood, ASSERTS, limits=dataclasses.replace(TEST_LIMITS, timeout_s=10,
                                                            cpu_s=10))
    after = sandbox.check(CONTROLS["plain"], ASSERTS).execution.peak_memory_mb
    assert after <= max(honest) + 4, (honest, after)


def test_a_program_may_change_its_own_limits_and_scheduling_but_no_other_process(sandbox):
    code = ATTEMPT + textwrap.dedent("""
        import os, resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        print(attempt(lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft - 1, hard))),
              attempt(lambda: os.nice(1)), attempt(lambda: os.sched_setaffinity(0, {0})),
              attempt(lambda: os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))))
        print(attempt(lambda: resource.prlimit(1, resource.RLIMIT_NOFILE, (soft, hard))),
              attempt(lambda: os.setpriority(os.PRIO_PROCESS, 1, 5)),
              attempt(lambda: os.setpriority(os.PRIO_USER, 0, 5)),
              attempt(lambda: os.sched_setaffinity(1, {0})),
              attempt(lambda: os.sched_setparam(1, os.sched_param(0))))
    """)
    result = sandbox.run(code)
    assert result.stdout.split("\n")[:2] == ["ok ok ok ok", "1 1 1 1 1"], result


def test_the_page_cache_cannot_be_probed_or_evicted(sandbox):
    """The host's page cache outlives every run: a program that could evict a page of a file it
    can read and later test whether it is cached could keep state from run to run, and so learn
    a test's hidden answers one failed run at a time (a check stops at its first failed assert,
    so being called again says the last guess was right)."""
    code = ATTEMPT + textwrap.dedent("""
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        fd = os.open("/usr/lib/os-release", os.O_RDONLY)
        stat = ctypes.create_string_buffer(64)
        rng = (ctypes.c_uint64 * 2)(0, 0)
        cachestat = libc.syscall(451, fd, rng, stat, 0)
        print(attempt(lambda: os.preadv(fd, [bytearray(16)], 0)),
              attempt(lambda: os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)),
              attempt(lambda: os.preadv(fd, [bytearray(16)], 0, os.RWF_NOWAIT)),
              cachestat if cachestat == 0 else ctypes.get_errno())
    """)
    assert sandbox.run(code).stdout.split() == ["ok", "1", "1", "1"]


def test_memory_the_oom_killer_takes_from_the_jail_is_the_programs_limit(sandbox):
    """Memory in a memfd is in no process's RSS: with its own OOM score lowered, a program that
    fills the limit that way leaves the kernel only the jail's server to kill (Docker, where the
    server shares the container's memory). It is still the program's memory limit."""
    code = textwrap.dedent("""
        import os
        try:
            with open("/proc/self/oom_score_adj", "w") as f:
                f.write("0")
        except OSError:
            pass
        fds = [os.memfd_create("x") for _ in range(100)]  # each under the file-size limit
        for fd in fds:
            for _ in range(3):
                os.write(fd, b"\\1" * (1 << 20))
    """) + WRONG
    result, s = verdict(sandbox, code, ASSERTS)
    assert s.value == 0.0 and result.execution.status is ExecStatus.MEMORY_LIMIT, result.execution


def test_cpu_in_children_the_kernel_reaps_counts_against_the_limit(sandbox):
    """With SIGCHLD ignored the kernel reaps a program's children itself, and no wait() returns
    their CPU time: the work they did must still count, and stop at the CPU limit."""
    code = textwrap.dedent("""
        import os, signal, time
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)
        for _ in range(20):
            if os.fork() == 0:
                end = time.process_time() + 0.06
                while time.process_time() < end:
                    pass
                os._exit(0)
            time.sleep(0.07)
    """) + WRONG
    limits = dataclasses.replace(TEST_LIMITS, cpu_s=0.5, timeout_s=5.0)
    result = sandbox.check(code, ASSERTS, limits=limits)
    assert result.execution.status is ExecStatus.TIMEOUT, result.execution
    assert result.execution.cpu_s > 0.5


def test_the_workers_cgroup_counters_are_out_of_sight(sandbox):
    """A worker's cgroup counters (peak usage, CPU, page faults) accumulate over all its runs:
    a run that could read them could read a number an earlier run left there."""
    code = textwrap.dedent("""
        import os
        print(sum(len(files) for _, _, files in os.walk("/sys/fs/cgroup")))
    """)
    assert sandbox.run(code).stdout.split() == ["0"]


def test_peak_memory_counts_memory_no_process_maps(sandbox):
    """Peak memory breaks ties: memory held in memfds (in no process's RSS) must count."""
    code = textwrap.dedent("""
        import os
        fds = [os.memfd_create("x") for _ in range(20)]  # each under the file-size limit
        for fd in fds:
            for _ in range(3):
                os.write(fd, b"\\1" * (1 << 20))
    """) + CONTROLS["plain"]
    result = sandbox.check(code, ASSERTS)
    assert result.passed and result.execution.peak_memory_mb > 50, result.execution


def test_a_noisy_run_does_not_raise_the_next_runs_peak(backend):
    """The jail's server grows with what a run prints (up to the output cap, 1 MB here), and
    later runs are forked from it: their peak must still be their own."""
    from tests.conftest import open_sandbox

    limits = dataclasses.replace(TEST_LIMITS, max_output_bytes=1_000_000)
    with open_sandbox(backend, limits=limits, workers=1) as sandbox:
        honest = [sandbox.check(CONTROLS["plain"], ASSERTS).execution.peak_memory_mb
                  for _ in range(2)]
        sandbox.run("import sys\nsys.stdout.write('\\u00e9' * 490_000)\n")
        after = [sandbox.check(CONTROLS["plain"], ASSERTS).execution.peak_memory_mb
                 for _ in range(2)]
    assert max(after) <= max(honest) + 2, (honest, after)
