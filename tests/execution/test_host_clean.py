"""After hostile runs and close(), the host is as it was: no process, mount or cgroup left; and
while it runs, every program is inside its worker's cgroup."""

import os
import re
import signal
import threading
import time
from pathlib import Path

import pytest

from spade_ray.execution import cgroups
from spade_ray.execution.hostpaths import MOUNT_ROOT
from spade_ray.execution.jailuid import JAIL_UIDS
from spade_ray.records import ExecStatus, TestSuite
from tests.conftest import TEST_LIMITS, open_sandbox

HOSTILE = [
    "import os\nwhile True:\n    try: os.fork()\n    except OSError: pass",
    "import os, subprocess, sys\nif os.fork() == 0:\n    os.setsid()\n"
    "    subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n",
    "x = []\nwhile True: x.append(bytearray(2**20))",
]


def sandbox_uid_processes() -> set[int]:
    """The jails' processes (their host uids: JAIL_UIDS), but those another process on the
    machine started (a fresh clone's `make test` failed here once, seeing the jails of a test
    run next to it): those
    whose nearest ancestor of another user is alive and neither this process nor PID 1 (where
    a process that escaped its jail ends up)."""
    found = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if _uid(pid) in JAIL_UIDS and _owner(pid) in (os.getpid(), 1, None):
                found.add(int(pid))
        except OSError:
            pass
    return found


def _uid(pid: str) -> int:
    return os.stat(f"/proc/{pid}").st_uid


def _owner(pid: str) -> int | None:
    """The nearest ancestor of `pid` that is not a jail's (None: gone meanwhile)."""
    try:
        while _uid(pid) in JAIL_UIDS:
            status = Path(f"/proc/{pid}/status").read_text()
            pid = re.search(r"^PPid:\s+(\d+)", status, re.MULTILINE)[1]
        return int(pid)
    except OSError:
        return None


def our_mounts() -> set[str]:
    """This process's workers' mounts (w-<pid>-<n> and their packages' p-<pid>-<n>-..., as
    our_cgroups): not another process's sandbox in the same mount namespace (one running beside
    a fresh-clone `make test` made test_a_failed_start_leaves_no_mount fail)."""
    mine = [f"{MOUNT_ROOT}/{kind}-{os.getpid()}-" for kind in ("w", "p")]  # LocalWorker's
    return {line for line in Path("/proc/self/mounts").read_text().splitlines()
            if any(prefix in line for prefix in mine)}


def our_cgroups() -> set[Path]:
    return set(Path("/sys/fs/cgroup").glob(f"*/{cgroups.GROUP}/w-{os.getpid()}-*"))


def test_nothing_of_the_local_sandbox_survives_close():
    before = sandbox_uid_processes(), our_mounts(), our_cgroups()
    with open_sandbox("local", limits=TEST_LIMITS, workers=2) as sb:
        sb.run_many(HOSTILE)
        assert sandbox_uid_processes() - before[0]  # the warm jails are running
        assert our_mounts() - before[1]  # with their working dirs mounted
    assert sandbox_uid_processes() - before[0] == set()
    assert our_mounts() - before[1] == set()
    assert our_cgroups() - before[2] == set()


def test_a_flood_on_the_flag_fd_does_not_grow_the_harness():
    """The server reads what a candidate floods it with through fixed caps (192 MB here)."""
    flood = ("import os\nchunk = b'[' * 65536\nfor _ in range(3000):\n    os.write(3, chunk)\n"
             "def add(a, b):\n    return a + b\n")
    with open_sandbox("local", limits=TEST_LIMITS, workers=1) as sb:
        sb.check(flood, TestSuite(asserts=("assert add(1, 2) == 3",)))
        status = Path(f"/proc/{sb._all[0]._harness_pid}/status").read_text()
    peak_kb = int(re.search(r"VmHWM:\s+(\d+)", status).group(1))
    assert peak_kb < 64 * 1024


def _kill_the_jail_once(sb, after_s: float) -> threading.Thread:
    worker = sb._all[0]
    harness = worker._harness_pid

    def kill() -> None:
        time.sleep(after_s)
        os.kill(harness, signal.SIGKILL)

    thread = threading.Thread(target=kill)
    thread.start()
    return thread


def test_a_sandbox_failure_is_run_again_on_a_fresh_jail():
    """An infrastructure failure (the jail's server killed from the host) is re-run once."""
    with open_sandbox("local", limits=TEST_LIMITS, workers=1) as sb:
        killer = _kill_the_jail_once(sb, 0.3)
        result = sb.run("import time; time.sleep(1); print('done')")
        killer.join()
    assert (result.status.value, result.stdout, result.attempts) == ("ok", "done\n", 2)


def test_the_candidate_runs_in_its_workers_cgroup():
    """On v1 the candidate joins the group itself through fds the harness holds; on v2 the host
    moves it. Either way every run's program is inside it."""
    wanted = ("memory", "pids") if cgroups.detect() == "v1" else ("",)  # v2: "0::/path"
    with open_sandbox("local", limits=TEST_LIMITS, workers=1) as sb:
        for _ in range(2):  # the first spare, and one forked after a run
            r = sb.run("print(open('/proc/self/cgroup').read())")
            lines = [line for line in r.stdout.split() if line.split(":")[1] in wanted]
            assert len(lines) == len(wanted), r.stdout
            assert all(f"/{cgroups.GROUP}/w-{os.getpid()}-" in line for line in lines), r.stdout


def test_a_candidate_that_cannot_join_its_cgroup_never_runs(monkeypatch):
    """If the kernel refuses the join, the harness reports an infrastructure failure before the
    program starts: a sandbox_error (re-run once on a fresh jail), never the program's score."""
    if cgroups.detect() != "v1":
        pytest.skip("candidates join their cgroup themselves on cgroup v1 only")
    monkeypatch.setattr(cgroups.ExecCgroup, "join_fds",
                        lambda self: [os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC)])
    with open_sandbox("local", limits=TEST_LIMITS, workers=1) as sb:
        r = sb.run("open('ran', 'w').write('x'); print('ran')")
    assert r.status is ExecStatus.SANDBOX_ERROR
    assert "could not join its execution cgroup" in r.detail
    assert r.stdout == "" and r.attempts == 2
