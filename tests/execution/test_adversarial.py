"""Adversarial suite: each test is one hostile program, asserting containment and the exact status.

Runs on every backend (see conftest.py). Limits are TEST_LIMITS unless a test says otherwise.
"""

import dataclasses
import os
import signal
import textwrap
import uuid

from spade_ray.execution.hostpaths import SANDBOX_UID
from spade_ray.execution.jailuid import JAIL_UIDS
from spade_ray.records import ExecStatus, TestSuite
from tests.conftest import TEST_LIMITS


def run(sandbox, code, stdin=None, limits=None):
    return sandbox.run(textwrap.dedent(code), stdin, limits)


def host_processes_with(marker: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


# ------------------------------------------------------------------ time


def test_infinite_cpu_loop_hits_cpu_limit(sandbox):
    r = run(sandbox, "while True: pass")
    assert r.status is ExecStatus.TIMEOUT
    assert r.wall_s < TEST_LIMITS.timeout_s + 1


def test_sleeping_forever_hits_wall_clock_limit(sandbox):
    r = run(sandbox, "import time; time.sleep(10**6)")
    assert r.status is ExecStatus.TIMEOUT
    assert "wall-clock" in r.detail


def test_ignoring_sigterm_is_still_killed(sandbox):
    r = run(sandbox, """
        import signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(10**6)
    """)
    assert r.status is ExecStatus.TIMEOUT
    assert r.exit_code == -9


# ------------------------------------------------------------------ memory


def test_one_huge_allocation_is_refused(sandbox):
    r = run(sandbox, "x = b'x' * (8 * 2**30)")
    assert r.status is ExecStatus.MEMORY_LIMIT


def test_gradual_memory_growth_is_stopped_at_the_limit(sandbox):
    r = run(sandbox, """
        chunks = []
        while True:
            chunks.append(bytearray(2**20))
    """)
    assert r.status is ExecStatus.MEMORY_LIMIT
    assert r.peak_memory_mb <= TEST_LIMITS.memory_mb * 1.1 + 32


# ------------------------------------------------------------------ processes


def test_fork_bomb_is_contained(sandbox):
    # Enough memory that the process cap, not the OOM killer, is what stops it.
    limits = dataclasses.replace(TEST_LIMITS, memory_mb=512, max_processes=16)
    marker = f"bomb-{uuid.uuid4().hex}"
    r = run(sandbox, f"""
        import os
        MARKER = "{marker}"
        while True:
            try:
                os.fork()
            except OSError:
                pass
    """, limits=limits)
    assert r.status is ExecStatus.TIMEOUT
    assert host_processes_with(marker) == []


def test_thread_bomb_is_capped(sandbox):
    r = run(sandbox, """
        import threading, time
        while True:
            threading.Thread(target=time.sleep, args=(100,), daemon=True).start()
    """)
    assert r.status is ExecStatus.ERROR
    assert "can't start new thread" in r.stderr


def test_shelling_out_stays_in_the_jail(sandbox, backend):
    r = run(sandbox, """
        import subprocess
        out = subprocess.run(["sh", "-c", "id -u; ls /root 2>&1; ls /home 2>&1"],
                             capture_output=True, text=True)
        print(out.stdout)
    """)
    assert r.status is ExecStatus.OK
    # nobody in the local jail's own user namespace; a container runs as its worker's host uid
    uid = int(r.stdout.split()[0])
    assert uid == SANDBOX_UID if backend == "local" else uid in JAIL_UIDS
    assert "No such file" in r.stdout or "Permission denied" in r.stdout


def test_daemonised_grandchild_does_not_survive(sandbox):
    marker = f"daemon-{uuid.uuid4().hex}"
    r = run(sandbox, f"""
        import os, subprocess, sys
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)",
                                  "{marker}"], start_new_session=True)
            os._exit(0)
        import time; time.sleep(0.5)
        print("parent done")
    """)
    assert r.status is ExecStatus.OK
    assert host_processes_with(marker) == []


# ------------------------------------------------------------------ host files and secrets


def test_canary_file_on_host_is_invisible(sandbox, tmp_path):
    secret = uuid.uuid4().hex
    canary = tmp_path / "canary.txt"
    canary.write_text(secret)
    canary.chmod(0o644)
    r = run(sandbox, f"""
        for path in ["{canary}", "/tmp/{canary.name}", "/etc/hostname"]:
            try:
                print(open(path).read())
            except OSError as e:
                print("denied", type(e).__name__)
    """)
    assert secret not in r.stdout
    assert r.stdout.count("denied") >= 2


def test_host_environment_secrets_do_not_leak(backend, monkeypatch):
    from tests.conftest import open_sandbox

    secret = uuid.uuid4().hex
    monkeypatch.setenv("SPADE_TEST_SECRET", secret)
    with open_sandbox(backend, limits=TEST_LIMITS, workers=1) as sb:
        r = sb.run("import os; print(dict(os.environ)); print(open('/proc/1/environ','rb').read())")
    assert secret not in r.stdout + r.stderr
    assert "SPADE_TEST_SECRET" not in r.stdout


def test_proc_shows_only_the_jail(sandbox):
    r = run(sandbox, """
        import os
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
        print(len(pids))
    """)
    assert r.status is ExecStatus.OK
    # the harness, its spawner, the run's grader (a plain run's exits unused) and candidate
    assert int(r.stdout) <= 4


def test_no_fd_the_program_can_reach_moves_a_process_between_cgroups(sandbox):
    """The local backend's harness holds fds of the execution cgroup's `tasks` files (opened by
    root: whoever holds one may move any process of the jail, the server included, into the
    candidate's limits). Neither the candidate's own fds nor another process's reach them."""
    r = run(sandbox, """
        import os
        own = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                own.append(os.readlink(f"/proc/self/fd/{fd}"))
            except OSError:
                pass
        others = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            if int(pid) == os.getpid():
                continue
            try:
                others.append((pid, os.listdir(f"/proc/{pid}/fd")))
            except OSError:
                pass
        print(own)
        print(others)
    """)
    assert r.status is ExecStatus.OK, r.stderr
    own, others = r.stdout.splitlines()
    assert "tasks" not in own and "cgroup" not in own and "/sys" not in own
    assert others == "[]"


def test_writing_outside_the_working_dir_fails(sandbox):
    r = run(sandbox, """
        import os
        ok = []
        for path in ["/x", "/usr/x", "/etc/x", "/opt/x", "/proc/x", "/dev/x"]:
            try:
                with open(path, "w") as f:
                    f.write("x")
                ok.append(path)
            except OSError:
                pass
        with open("inside.txt", "w") as f:
            f.write("fine")
        print(ok, os.getcwd())
    """)
    assert r.status is ExecStatus.OK
    assert r.stdout.strip() == "[] /work"


# ------------------------------------------------------------------ disk and output


def test_huge_file_hits_the_file_size_limit(sandbox):
    r = run(sandbox, """
        with open("big", "wb") as f:
            for _ in range(64):
                f.write(b"x" * 2**20)
    """)
    assert r.status is ExecStatus.OUTPUT_LIMIT
    assert "file" in r.detail


def test_inode_exhaustion_is_capped(sandbox):
    r = run(sandbox, """
        import os
        n = 0
        try:
            while True:
                open(f"f{n}", "w").close()
                n += 1
        except OSError as e:
            print(n, e.errno)
    """)
    assert r.status is ExecStatus.OK
    created, errno = map(int, r.stdout.split())
    assert errno == 28  # ENOSPC
    assert created <= TEST_LIMITS.tmp_inodes


def test_stdout_flood_is_cut_at_the_cap(sandbox):
    r = run(sandbox, "while True: print('x' * 1000)")
    assert r.status is ExecStatus.OUTPUT_LIMIT
    assert r.truncated
    assert len(r.stdout) + len(r.stderr) <= TEST_LIMITS.max_output_bytes


def test_one_giant_line_is_cut_at_the_cap(sandbox):
    r = run(sandbox, "import sys; sys.stdout.write('y' * 10**7)")
    assert r.status is ExecStatus.OUTPUT_LIMIT
    assert r.truncated and set(r.stdout) == {"y"}


def test_non_utf8_output_is_decoded_with_replacement(sandbox):
    r = run(sandbox, r"import sys; sys.stdout.buffer.write(b'\xff\xfe ok\n')")
    assert r.status is ExecStatus.OK
    assert r.stdout == "\ufffd\ufffd ok\n"


# ------------------------------------------------------------------ signals and syscalls


def test_signalling_the_host_and_kill_minus_one_hurt_nobody(sandbox):
    r = run(sandbox, f"""
        import os, signal
        for target in ({os.getpid()}, -1, 1):
            try:
                os.kill(target, signal.SIGKILL)
                print(target, "sent")
            except OSError as e:
                print(target, type(e).__name__)
        print("alive")
    """)
    assert r.status is ExecStatus.OK
    assert r.stdout.splitlines()[0] == f"{os.getpid()} ProcessLookupError"
    assert r.stdout.endswith("alive\n")
    assert run(sandbox, "print('next')").stdout == "next\n"  # the harness survived


def test_ptrace_and_unshare_are_refused(sandbox):
    r = run(sandbox, """
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        PTRACE_ATTACH, CLONE_NEWUSER, CLONE_NEWNET = 16, 0x10000000, 0x40000000
        print(libc.ptrace(PTRACE_ATTACH, 1, 0, 0), libc.unshare(CLONE_NEWUSER),
              libc.unshare(CLONE_NEWNET))
    """)
    assert r.status is ExecStatus.OK
    assert r.stdout.split() == ["-1", "-1", "-1"]


def test_segfault_is_a_crash(sandbox):
    r = run(sandbox, "import ctypes; ctypes.string_at(0)")
    assert r.status is ExecStatus.ERROR
    assert "SIGSEGV" in r.detail


def test_a_program_that_ends_itself_by_any_signal_is_its_own_failure(sandbox):
    """Every signal a program can send itself, the real-time ones included (signal.Signals
    names few: signal 40 raised in the host, red-team s32): a result for each, never the
    sandbox's error, and a terminating one named by its number where it has no name."""
    numbers = range(1, signal.SIGRTMAX + 1)
    results = sandbox.run_many([f"import os\nos.kill(os.getpid(), {n})\nprint('alive')"
                                for n in numbers])
    for n, r in zip(numbers, results):
        assert r.status is not ExecStatus.SANDBOX_ERROR, (n, r.detail)
    assert results[40 - 1].status is ExecStatus.KILLED
    assert results[40 - 1].detail == "killed by signal 40"
    assert results[signal.SIGSEGV - 1].detail == "crashed with SIGSEGV"


def test_runaway_recursion_is_an_error(sandbox):
    r = run(sandbox, "def f(): return f()\nf()")
    assert r.status is ExecStatus.ERROR
    assert "RecursionError" in r.stderr


# ------------------------------------------------------------------ stdin, fakes, persistence


def test_reading_stdin_without_input_gets_eof(sandbox):
    r = run(sandbox, "import sys; print(repr(sys.stdin.read()))")
    assert r.status is ExecStatus.OK
    assert r.stdout == "''\n"


def test_stdin_is_delivered(sandbox):
    data = "line\n" * 50_000  # larger than a pipe buffer
    r = run(sandbox, "import sys; print(len(sys.stdin.read()))", stdin=data)
    assert r.stdout == f"{len(data)}\n"


def test_fake_success_does_not_pass_a_check(sandbox):
    tests = TestSuite(asserts=("assert add(1, 2) == 3",))
    result = sandbox.check("import os\nprint('PASS')\nos._exit(0)", tests)
    assert result.execution.status is ExecStatus.OK  # exit code 0 ...
    assert not result.passed  # ... but the tests never ran


def test_files_do_not_persist_between_runs(sandbox):
    run(sandbox, "open('left-behind', 'w').write('x'); import os; os.mkdir('d'); os.chmod('d', 0)")
    r = run(sandbox, "import os; print(os.listdir('.'))")
    assert r.stdout == "[]\n"
