"""One run as the jail's server (harness.py, PID 1) sees it: standard library only.

While a run's candidate (and, for a check, its grader) live, `pump` feeds the candidate's stdin,
collects its output, the memory-error flag and the grader's report, each read capped, and
enforces the wall-clock deadline, the CPU seconds of the candidate's tree (polled from /proc,
since RLIMIT_CPU is per process and forking escapes it) and the output cap; then `end` has the
spawner (spawner.py, the parent of every process a run leaves) kill and reap them, accounting
the CPU time and peak memory of all but the grader. Nothing here parses what a candidate wrote.
"""

import os
import select
import signal
import time

FLAG_CAP_BYTES = 16
CPU_POLL_S = 0.05
# How long the spawner may take to kill a run's processes after we asked: it does at once unless
# the run stopped or killed it (then we kill everything ourselves, the spawner too).
KILL_WAIT_S = 0.5
# ... and each message of the records after the kill: generous, since a late record of a slow
# but honest run is lost for good once we give up (the candidate's exit status with it)
RECORDS_WAIT_S = 5.0
CLK_TCK = os.sysconf("SC_CLK_TCK")


class Run:
    """Host-facing bookkeeping of one execution."""

    def __init__(self, limits, grader_pid, grading, report, spawner_pid):
        self.limits = limits
        self.grader_pid = grader_pid  # excluded from the candidate's accounting even unused
        self.spawner_pid = spawner_pid  # never the candidate's
        self.grading = grading
        self.out = bytearray()
        self.err = bytearray()
        self.flag = bytearray()
        self.report = report  # the server's buffer, zeroed after every use
        self.report_bytes = 0
        self.report_overflow = False
        self.reason = None  # "timeout" | "cpu" | "output" once we kill for a limit
        self.reaped_cpu_s = 0.0
        self.max_rss_kb = 0
        self.status = None  # wait status of the candidate
        self.grader_ended = False  # before our kill
        self.grader_status = None  # its exit code (or -signal), if it ended before our kill
        self.spawner_lost = False  # the run stopped or killed the spawner

    def account(self, pid, status, cpu_s, max_rss_kb, candidate_pid):
        if pid == candidate_pid:
            self.status = status
        if pid == self.grader_pid and self.grader_ended:
            self.grader_status = os.waitstatus_to_exitcode(status)
        if pid in (self.grader_pid, self.spawner_pid):  # not the candidate's time and memory
            return
        self.reaped_cpu_s += cpu_s
        self.max_rss_kb = max(self.max_rss_kb, max_rss_kb)


def end(run, spawner, candidate_pid):
    """Kill every process of the run and reap it, through the spawner; if it does not finish,
    ourselves (`run.spawner_lost`: the host then starts a fresh jail, and reads a candidate
    whose exit status the spawner took with it as the run's own failure)."""
    records, finished = spawner.end_run(KILL_WAIT_S, RECORDS_WAIT_S)
    if not finished:
        run.spawner_lost = True
        kill_all()
        records += reap_all()
    for record in records:
        run.account(*record, candidate_pid)


def kill_all():
    """SIGKILL every process of the namespace but us (we are its PID 1)."""
    try:
        os.kill(-1, signal.SIGKILL)
    except ProcessLookupError:
        pass


def reap_all():
    """Collect every child: [(pid, status, cpu_s, max_rss_kb)]. Blocks until none is left."""
    records = []
    while True:
        try:
            pid, status, rusage = os.wait4(-1, 0)
        except ChildProcessError:
            return records
        records.append((pid, status, rusage.ru_utime + rusage.ru_stime, rusage.ru_maxrss))


def live_pids(*ignore):
    """Every process of the namespace but us (PID 1) and `ignore`."""
    skip = {"1", *map(str, ignore)}
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and p not in skip]


def tree_cpu_s(run):
    """CPU seconds of the candidate's live tree plus everything already reaped."""
    total = run.reaped_cpu_s
    for pid in live_pids(run.spawner_pid):
        if pid == run.grader_pid:
            continue
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime
        except (OSError, IndexError, ValueError):
            pass
    return total


def pump(run, spares, start, stdin_data, spawner):
    """Feed stdin, collect output and enforce the wall, CPU and output limits until the
    candidate and (for a check) the grader have both ended, or a limit is reached."""
    limits = run.limits
    deadline = start + limits["timeout_s"]
    stdin_w, out_r, err_r, flag_r = spares.stdin_w, spares.out_r, spares.err_r, spares.flag_r
    report_r = spares.report_r if run.grading else None
    waiting = {os.pidfd_open(spares.candidate_pid): "candidate"}
    if run.grading:
        waiting[os.pidfd_open(run.grader_pid)] = "grader"
    pidfds = list(waiting)
    os.set_blocking(stdin_w, False)
    if not stdin_data:
        os.close(stdin_w)
        stdin_w = None
    readers = [fd for fd in (out_r, err_r, flag_r, report_r) if fd is not None]
    for fd in readers:
        os.set_blocking(fd, False)
    next_cpu_check = start + CPU_POLL_S
    while run.reason is None and waiting:
        now = time.monotonic()
        if now >= deadline:
            run.reason = "timeout"
            break
        if now >= next_cpu_check:
            next_cpu_check = now + CPU_POLL_S
            if tree_cpu_s(run) > limits["cpu_s"]:
                run.reason = "cpu"
                break
        wait = min(deadline, next_cpu_check) - now
        wlist = [stdin_w] if stdin_w is not None else []
        ready_r, ready_w, _ = select.select([*readers, *waiting], wlist, [], max(wait, 0))
        if stdin_w in ready_w:
            stdin_data = _feed(stdin_w, stdin_data)
            if not stdin_data:
                os.close(stdin_w)
                stdin_w = None
        for fd in ready_r:
            if fd in waiting:
                if waiting.pop(fd) == "grader":
                    run.grader_ended = True
            elif _take(run, fd, out_r, err_r, flag_r) is False:
                readers.remove(fd)
    end(run, spawner, spares.candidate_pid)
    for fd in readers:  # after the kill every writer is gone: take what is left
        while _take(run, fd, out_r, err_r, flag_r):
            pass
    for fd in (out_r, err_r, flag_r, spares.report_r, stdin_w, *pidfds):
        if fd is not None:
            os.close(fd)


def _take(run, fd, out_r, err_r, flag_r):
    """Read what fd has, within its cap: True if it gave data, None if it had none yet, False
    once it is at end of stream or over its cap (then we stop reading it)."""
    if fd in (out_r, err_r, flag_r):
        chunk = _read_some(fd, 4096 if fd == flag_r else 65536)
        if not chunk:
            return None if chunk is None else False
        if fd == flag_r:
            run.flag.extend(chunk[:max(0, FLAG_CAP_BYTES - len(run.flag))])
            return True
        (run.out if fd == out_r else run.err).extend(chunk)
        if len(run.out) + len(run.err) > run.limits["max_output_bytes"]:
            run.reason = run.reason or "output"
            return False
        return True
    room = memoryview(run.report)[run.report_bytes:]  # the grader's report
    if not room:
        run.report_overflow = bool(_read_some(fd, 1))
        return False
    n = _read_some(fd, 0, room)
    if not n:
        return None if n is None else False
    run.report_bytes += n
    return True


def _read_some(fd, size, into=None):
    """Bytes read (or, with `into`, how many), b""/0 at end of stream, None if none yet (the
    fds are non-blocking)."""
    try:
        return os.readv(fd, [into]) if into is not None else os.read(fd, size)
    except BlockingIOError:
        return None


def _feed(fd, data):
    """Write what the pipe takes now; return the rest (nothing if the reader is gone). A full
    pipe after select() said it had room is the candidate's doing (it can open its own stdin
    pipe for writing through /proc/self/fd/0 and refill it): we keep the data and try again at
    the next select, never fail the run (red-team s24 H3, p4_stdin_eagain.py)."""
    try:
        return data[os.write(fd, data[:65536]):]
    except BlockingIOError:
        return data
    except BrokenPipeError:
        return b""
