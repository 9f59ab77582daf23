"""After hostile runs and close(), the host is as it was: no process, mount or cgroup left."""

import os
from pathlib import Path

from spade_ray.execution import cgroups
from spade_ray.execution.local import MOUNT_ROOT
from tests.conftest import TEST_LIMITS, open_sandbox

HOSTILE = [
    "import os\nwhile True:\n    try: os.fork()\n    except OSError: pass",
    "import os, subprocess, sys\nif os.fork() == 0:\n    os.setsid()\n"
    "    subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n",
    "x = []\nwhile True: x.append(bytearray(2**20))",
]


def sandbox_uid_processes() -> set[int]:
    found = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.stat(f"/proc/{pid}").st_uid == 65534:
                found.add(int(pid))
        except OSError:
            pass
    return found


def our_mounts() -> set[str]:
    return {line for line in Path("/proc/self/mounts").read_text().splitlines()
            if str(MOUNT_ROOT) in line}


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
