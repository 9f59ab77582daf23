"""The forked children of the jail's server (harness.py): standard library only.

The candidate runs the program, then, for a check, answers the grader's calls: each call's
arguments arrive as canonical data (canonical.py), the function of the program's namespace is
called, and its result goes back as canonical data, or as the name of the exception it raised,
or as "unplain" with what made it so (a class of its own that defines how it compares: a
subclass of a plain type, an object with its own `__eq__`) for the grader to note. Everything
here runs in the candidate's process and so is the candidate's to change: nothing it does can
matter beyond the bytes it sends.

The grader's process (grader.py) gets its fds and limits here too. Both children see exactly
the fds listed for them and nothing else (no control channel of the server's, no other pipe).
"""

import ctypes
import fcntl
import io
import json
import os
import resource
import signal
import sys
import traceback
import types

import canonical
import framing
import grader

WORK_DIR = "/work"
CHILD_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": WORK_DIR,
    "TMPDIR": WORK_DIR,
    "LANG": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
}
# The candidate's fds: 0-2 as usual, then the memory-error flag and the call pipes (the grader's
# side of them is grader.REPLY_FD / grader.CALL_FD); the job pipe after those until the job came.
FLAG_FD, CALLS_FD, ANSWERS_FD, JOB_FD = 3, 4, 5, 6
PR_SET_DUMPABLE = 4  # <linux/prctl.h>
LIBC = ctypes.CDLL(None, use_errno=True)  # loaded once, not per execution (spawner.py too)
PLAIN_TYPES = (bool, int, float, str, bytes, list, tuple, dict, set, frozenset)


def install_fds(mapping):
    """Make exactly the fds in `mapping` (target -> source fd) open, and nothing else."""
    high = {target: fcntl.fcntl(source, fcntl.F_DUPFD, 256)
            for target, source in mapping.items() if source is not None}
    os.closerange(0, 256)
    os.closerange(max(high.values(), default=255) + 1, 65536)
    for target, fd in high.items():
        os.dup2(fd, target)
        os.close(fd)


def standard_streams():
    """Every candidate's sys.stdin, sys.stdout and sys.stderr, built once by the server, which
    never uses them: each fork gets them unused. Built over pipes on fds 0-2, as they are in a
    candidate, so that what they note at construction (not seekable, no position) is what a
    candidate's own would note. The server's fds 0-2 are as they were afterwards."""
    saved = [os.dup(fd) for fd in (0, 1, 2)]
    read_end, write_end = os.pipe()
    try:
        for fd, end in ((0, read_end), (1, write_end), (2, write_end)):
            os.dup2(end, fd)
        return (io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8",
                                 errors="replace"),
                io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8",
                                 errors="backslashreplace", write_through=False),
                io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8",
                                 errors="backslashreplace", line_buffering=True))
    finally:
        for fd, old in zip((0, 1, 2), saved):
            os.dup2(old, fd)
            os.close(old)
        os.close(read_end)
        os.close(write_end)


def candidate_main(fds, join_fds, streams):
    """Set up the forked candidate, wait for its job (the server's spare until then: it is in
    its cgroup before the job is sent, by `join_cgroup` or moved there by the host) and run it.
    Never returns.

    What does not depend on the job is done before it arrives, off the run's critical path. What
    does not depend on the run is the server's, inherited: the environment (CHILD_ENV) and the
    standard streams (`standard_streams`); setting them up here cost ~140 page faults per run
    (0.5 ms, measured in the jail)."""
    if join_fds:
        join_cgroup(join_fds, fds["joined_w"])
    os.setsid()
    install_fds({0: fds["stdin_r"], 1: fds["out_w"], 2: fds["err_w"], FLAG_FD: fds["flag_w"],
                 CALLS_FD: fds["calls_r"], ANSWERS_FD: fds["answers_w"], JOB_FD: fds["job_r"]})
    sys.stdin, sys.stdout, sys.stderr = streams
    sys.argv = ["solution.py"]
    body = framing.recv_frame(JOB_FD)
    if body is None:  # the server failed before sending a job
        os._exit(70)
    os.close(JOB_FD)
    req = json.loads(body)
    if not req["grade"]:  # a plain run: no call pipes, as for any program
        os.close(CALLS_FD)
        os.close(ANSWERS_FD)
    set_limits(req["limits"], req["rlimit_nproc"], req["address_space_mb"],
               req["shares_memory_cgroup"])
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as in any Python program
    os._exit(run_candidate(req["code"], serve=req["grade"]))


def join_cgroup(join_fds, joined_w):
    """Move this process into the execution cgroup through the `tasks` files the host opened
    (harness.py's module doc) and tell the server so; exit without a run if the kernel refuses.
    install_fds then closes these fds: the program never holds them."""
    try:
        for fd in join_fds:
            os.write(fd, b"0")
        os.write(joined_w, b"1")
    except OSError:
        os._exit(71)


def grader_main(fds):
    """Set up the forked grader, wait for its settings and tests (the server's spare until
    then) and run them. Never returns.

    The candidate has our uid and can signal us: SIGINT, which Python would raise as
    KeyboardInterrupt wherever we are (a call interrupted after its request left, and the next
    example was graded on the answer to the last one: red-team pass 14), is ignored until the
    tests start and then only noted (grader.main). Any other signal ends us, and the check
    with us (protocol.grader_report notes how)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    devnull = os.open("/dev/null", os.O_RDWR)
    install_fds({0: devnull, 1: devnull, 2: devnull, grader.REPORT_FD: fds["report_w"],
                 grader.REPLY_FD: fds["answers_r"], grader.CALL_FD: fds["calls_w"],
                 grader.TESTS_FD: fds["tests_r"]})
    os.chdir("/")  # nothing the candidate writes in /work is near the grader
    body = framing.recv_frame(grader.TESTS_FD)
    if body is None:  # a plain run: no tests for this grader
        os._exit(0)
    settings = json.loads(body)
    set_limits(settings["limits"], settings["rlimit_nproc"],
               settings["limits"]["memory_mb"] + 128, False)
    grader.main(framing.recv_frame(grader.TESTS_FD, cap=grader.TESTS_CAP_BYTES))


def set_limits(limits, rlimit_nproc, address_space_mb, shares_memory_cgroup):
    if shares_memory_cgroup:  # with the server (Docker): the OOM killer must pick the candidate
        prctl(PR_SET_DUMPABLE, 1)  # our /proc files back to our uid, to write oom_score_adj
        try:
            with open("/proc/self/oom_score_adj", "w") as f:
                f.write("1000")
        except OSError:
            pass
    mb = 1024 * 1024
    cpu = max(1, int(limits["cpu_s"] + 0.999))
    rlimits = [
        (resource.RLIMIT_CPU, (cpu, cpu + 1)),
        (resource.RLIMIT_FSIZE, (limits["max_file_mb"] * mb,) * 2),
        (resource.RLIMIT_NOFILE, (256, 256)),
        (resource.RLIMIT_CORE, (0, 0)),
        # The host chooses: a loose backstop under a memory cgroup, a tight cap without one.
        (resource.RLIMIT_AS, (address_space_mb * mb,) * 2),
    ]
    if rlimit_nproc:  # only where the uid is the jail's alone (its own user namespace)
        rlimits.append((resource.RLIMIT_NPROC, (limits["max_processes"],) * 2))
    for res, value in rlimits:
        resource.setrlimit(res, value)
    # CPython ignores SIGXFSZ so that writes fail with EFBIG; we want the kernel's verdict
    # (killed by SIGXFSZ = file size limit) to be unambiguous.
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def run_candidate(code, serve):
    """Run the code, then (for a check) answer the grader's calls; return the exit code."""
    main = types.ModuleType("__main__")
    main.__file__ = "solution.py"
    sys.modules["__main__"] = main
    exit_code = 0
    try:
        exec(compile(code, "solution.py", "exec"), main.__dict__)
        if serve:
            answer_calls(main.__dict__)
    except SystemExit as e:
        exit_code = _exit_code(e.code)
    except MemoryError:
        _flag_memory_error()
        _print_traceback()
        exit_code = 1
    except BaseException:  # noqa: BLE001 - any exception of the candidate is its failure
        _print_traceback()
        exit_code = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:  # noqa: BLE001 - a closed or broken stdout is the candidate's doing
        exit_code = exit_code or 1
    return exit_code


def answer_calls(namespace):
    """Serve the grader: one canonical answer per call, until it closes the pipe."""
    while True:
        body = framing.recv_frame(CALLS_FD)
        if body is None:
            return
        seq, name, args, kwargs = canonical.decode(body)
        framing.send_frame(ANSWERS_FD, answer(namespace, seq, name, args, kwargs).encode())


def answer(namespace, seq, name, args, kwargs):
    try:
        function = namespace.get(name)
        if not callable(function):
            raise NameError(f"name {name!r} is not a function of the solution")
        value = function(*args, **kwargs)
    except BaseException as e:  # noqa: BLE001 - the grader decides what it means
        if isinstance(e, MemoryError):
            _flag_memory_error()
        return canonical.encode((seq, "raise", type(e).__name__, grader.message_of(e)[:300]))
    try:
        return canonical.encode((seq, "ok", value))
    except canonical.NotPlainData as e:
        return canonical.encode((seq, "unplain", canonical.type_name(value), _oddity(value)
                                 or f"not plain data: {e}"[:200], bool(_oddity(value))))


def _oddity(value):
    """What makes a value look built to fool a comparison: a class of the program's own (not
    the standard library's: a range, a deque, a Fraction are honest non-data, and a make run
    counted a returned range as a hack suspect) that defines how it compares. "" for honest
    non-data."""
    own = [k for k in type(value).__mro__ if not _standard(k)]
    overridden = [m for m in ("__eq__", "__ne__", "__hash__") if any(m in vars(k) for k in own)]
    if not isinstance(value, PLAIN_TYPES):
        return "defines __eq__" if "__eq__" in overridden else ""
    return f"subclass of a plain type overriding {', '.join(overridden)}" if overridden else ""


def _standard(kind):
    """Whether a class comes with Python: a builtin, or a standard-library module's that the
    module holds under the class's own name, with no comparison of the program's own. A class
    can name any module in `__module__` (`__module__ = "collections"`), so the name alone
    is not enough; this stays a label, and the verdict never reads it."""
    module = getattr(kind, "__module__", None)
    if module == "builtins":
        return True
    if not isinstance(module, str) or module.split(".")[0] not in sys.stdlib_module_names:
        return False
    held = sys.modules.get(module)
    for part in str(getattr(kind, "__qualname__", "")).split("."):
        held = getattr(held, part, None)
    return held is kind and not any(
        getattr(getattr(vars(kind).get(m), "__code__", None), "co_filename", "") == "solution.py"
        for m in ("__eq__", "__ne__", "__hash__"))


def _flag_memory_error():
    try:
        os.write(FLAG_FD, b"M")
    except OSError:
        pass


def _print_traceback():
    """The candidate's traceback, without the harness frames above its code."""
    etype, value, tb = sys.exc_info()
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    traceback.print_exception(etype, value, tb)


def _exit_code(code):
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def prctl(option, value):
    LIBC.prctl(option, value, 0, 0, 0)
