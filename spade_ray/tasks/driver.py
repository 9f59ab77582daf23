"""The driver: the trusted program admission runs in the sandbox to learn a reference's answers.

It runs the reference on every input in INTERPRETERS fresh interpreters, in order in one
program and each input alone in a fresh one, and reads back, per input, the repr of the result
or the name of the exception; `answers` turns its output into those results or a rejection
reason (admission.py names them).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from collections.abc import Sequence

from spade_ray.records import ExecResult, ExecStatus, Limits
from spade_ray.tasks import reorder

# Runs in the sandbox: the reference on every input, in INTERPRETERS fresh interpreters (each
# with its own random hash seed and address layout), twice in each, one JSON line out. Each
# interpreter prints [["ok", repr] | ["raise", type name], ...], or "nondeterministic" when its
# two passes disagree. Why so many: what a program can read of its own process (the order of a
# set of strings, an object's address in f"{object()}") may agree between two interpreters by
# chance (1 in 2 for one bit), and such a task is graded by luck, a pass rate the generator's
# reward would pay for. A third interpreter halves that chance again.
#
# The first pass runs the module, then the inputs in order, as the grader's check of the
# reference does; it also records which line of the entry function returned each answer (a
# trace of that function's frames only), so that a predict question can be judged among the
# answers of the same `return` (guesses.coin_flip). The second pass answers each input alone,
# in a child forked before the reference ran in this process, that runs the module anew: what
# a fresh program returns for that input, which is what a correct solver returns. An answer
# that follows the calls before it differs from it. The old second pass (the inputs in reverse
# order, in the same namespace) ran after a first-writer-wins memo had filled, and agreed:
# `_memo.setdefault(n % 100, n * n + 1)` was admitted with 107 -> 50, 7's entry (red-team
# pass 10). A fork, not just a fresh namespace, so that state kept on an allowed module
# (`string.memo = {}`, which the static rules allow) is fresh too. Honest memoisation (an
# lru_cache, a memo keyed by the whole input) changes no answer and agrees.
#
# The heap is shifted before the module runs, before each call of the first pass and before
# each child is forked: a random count of blocks in each of pymalloc's 32 size classes (16 to
# 512 bytes, up to a 16 KiB pool's worth), of which a random half is freed again (holes the
# next objects of the class fill, as in a long-lived process), and a malloc block of a random
# size. Without it the module ran at the same heap state in every interpreter: an object it
# made (`_UNIT = object()`, a module-level lambda, the entry function) had the same low address
# bits in all of them (4 of 4 driver jobs agreed) while the jail's candidates, forked from a
# long-lived server, saw them vary, and `repr(_UNIT)[-3] in '13579bdf'` became a repair task
# whose correct fix passed half its checks (red-team pass 10). Measured since, 100 driver
# jobs each: that reference, a module-level lambda's bit 8 and the entry function's bit 8 are
# nondeterministic in 100 of 100 (0 of 30 before). Without the holes, the order of a set of two
# objects made per call was a 7:1 coin (consecutive blocks) and got through 4 of 100 jobs.
#
# Cost, the 45 seed proposals 4 times over (180 jobs, each paired with the old driver on the
# same worker, twice): +14 ms of sandbox CPU per job, +12% (112 -> 126 and 129 -> 144 ms on a
# shared 2-core machine), ~0.9 ms per input per interpreter, most of it the child: a page it
# writes costs it a copy (~4 us here), and it writes ~180. A reference whose module does heavy
# work runs it 1 + len(inputs) times per interpreter, and is slow sooner (slow_s); the module
# code of the seeds is a few definitions.
#
# Each interpreter's environment holds a random value of its own, so one read from the
# environment differs.
INTERPRETERS = 3
PASSES = 2  # over the inputs, in each interpreter
#
# An interpreter's limits are data too: `except RecursionError: return -1`, or the ValueError
# of str() on an int past 4300 digits, turns them into an answer the description cannot state
# (red-team s31: "count to n by recursion, -1 if too deep" and "the digits of 7**n, -1 past
# str's limit" were admitted; a correct iterative or log10 solution failed them). So one
# interpreter (RAISED) runs with a recursion limit ten times the default and no int-to-str
# limit: an input whose answer changes there depends on a limit, and is dropped as one the
# reference raises on (ARTEFACT), as it does where it leaves the error uncaught. The
# other two keep the defaults the grader's candidates run with, and must agree exactly; so
# must the raised one on every input it is not dropped for (a hash-seed coin flip agrees in
# all three only 1 time in 4, as before). It answers each input alone only, in a forked
# child (the second pass): recursion through C code (sorted(key=f)) overflows the 8 MB stack
# from about 2,000 frames deep, and a child that crashes loses that input's answer, where
# the interpreter's own crash rejected the whole task (red-team s31, pass 20). 10,000
# frames: 20,000 of pure Python ran here.
#
# Past that, or past a limit no setting moves (an index past sys.maxsize: `len(range(2 ** 64))`
# raises OverflowError in every interpreter), the answer is alike in all three, and a bare or
# `except Exception` handler around either made -1 an answer (red-team s31, pass 20: honest
# solutions scored 0.76 and 0.72). So the raised interpreter also watches for the errors of a limit
# (LIMIT_ERRORS, and a ValueError that names one, LIMIT_MESSAGES: `islice`'s stop or a format's
# width past sys.maxsize, red-team s33) while it answers: a trace hook on every frame's `exception`
# event (lines off) sees one raised anywhere, caught or not, and the input is dropped. A call of the
# hook that fails (at the recursion limit itself, or out of memory) turns it off for the thread: the
# input is dropped then too. A handler that names a limit error is refused before anything runs
# (tasks/static.py). Cost, paired with the driver before it on one worker: +2.7% of sandbox CPU per
# job on the seed pool (131 -> 135 ms), +16% on a naive recursive fib (233 -> 270 ms), whose every
# call the hook sees.
#
# A set's order is the same kind of answer: an int's hash is the int, so an int set's order
# is the same in every interpreter, and "each distinct value doubled, in any order" over
# `[2 * x for x in set(xs)]` was admitted; a sorted or first-seen answer failed it, and the
# generator was paid for it as for an honest task (red-team s32). So the raised interpreter's
# child also answers its input with the reference rewritten (tasks/reorder.py) to read every set
# in another order, twice: reversed, and shuffled by a salt of its own. Every set it makes, gets
# or is given iterates so wherever Python iterates it (in C too: `bytes(s)`, `out += s`, `"%s" %
# s`), a set C made (a dict view's `&`, `operator.and_`) is turned where it comes out, and any
# other is turned where the syntax reads it in order. An answer that is not
# the same as the first, compared as the grader compares (2 is not 2.0; a dict built in another
# order is the same answer), rejects the task (SET_ORDER): its reference reads a set in an order
# that matters, and on another input both orders can keep the answer by chance. What it misses:
# a set C code makes and reads in one call (none of the allowed modules' functions returns an
# order of a set it made) and a reference whose every input keeps its answer in both orders.
# Cost, paired on the seed pool (90 jobs each): +3% of sandbox CPU per job for the reversed
# order (103 -> 106 ms), +1.6% more for the shuffled one (98.0 -> 99.6 ms), +3.5% more for
# turning every call's and set operator's result (157 -> 163 ms, beside other jobs); +4.5% on
# the fib for one order.
RAISED = 1
RAISED_RECURSION_LIMIT = 10_000
ARTEFACT = "Artefact"  # the exception name a dropped input's answer reads as: a limit
# decided it
SET_ORDER = "SetOrder"  # the raised interpreter's answer where a set's order decided it: the
# task is rejected (`set_order`), as its reference reads a set in an order that matters, and
# on another input an answer can keep both other orders by chance (a path's length through a
# set of four keeps it for 2 or more of the 24 orders)
#
# The clocks jump: every read of the time module's clocks (and of the local or UTC time they
# give) is off by a fresh random amount of up to 136 years. A reference may not read the time at
# all (tasks/static.py), but one that reaches a clock by a way the static rules do not know
# would agree with itself for the second admission takes (`int(time.time() // 3) % 2`); with
# jumping clocks it disagrees between passes and interpreters, and is nondeterministic.
RUNNER = r'''
import ast, itertools, json, os, sys, time
job = json.loads(sys.stdin.read())
raised_limits = os.environ["SPADE_LIMITS"] == "raised"
if raised_limits:
    sys.setrecursionlimit(RAISED_RECURSION_LIMIT)
    sys.set_int_max_str_digits(0)
out = os.fdopen(os.dup(1), "w")
null = os.open(os.devnull, os.O_WRONLY)
os.dup2(null, 1)


def jumping(read, unit):
    return lambda *args: read(*args) + unit * int.from_bytes(os.urandom(4), "big")


for name in ("time", "monotonic", "perf_counter", "process_time", "thread_time",
             "clock_gettime"):
    setattr(time, name, jumping(getattr(time, name), 1))
    setattr(time, name + "_ns", jumping(getattr(time, name + "_ns"), 10 ** 9))
for name in ("localtime", "gmtime", "ctime"):
    setattr(time, name, lambda *args, at=getattr(time, name): at(*(args or (time.time(),))))
time.asctime = lambda *args, at=time.asctime: at(*(args or (time.localtime(),)))
time.strftime = lambda form, *args, at=time.strftime: at(form, *(args or (time.localtime(),)))
source = compile(job["source"], "<reference>", "exec")
held = []  # the shift's blocks stay live: freed, they would be reused and the shift undone


def shift_heap(span):
    draws = os.urandom(66)
    for size_class in range(1, 33):  # blocks of 16 * size_class bytes
        count = int.from_bytes(draws[2 * size_class - 2:2 * size_class], "big")
        count %= span // size_class
        if size_class == 1:
            blocks = list(map(object.__new__, itertools.repeat(object, count)))
        elif size_class == 2:
            blocks = list(range(1 << 40, (1 << 40) + count))  # ints of 32 bytes
        else:
            blocks = list(map(bytes, itertools.repeat(16 * size_class - 33, count)))
        # about half stay; the others are freed, holes that the next blocks of the class fill
        held.append(list(itertools.compress(blocks, map((1).__and__, os.urandom(count)))))
    held.append(bytes(16 * int.from_bytes(draws[64:], "big") % 131072))


def reference():
    namespace = {"__name__": "reference"}
    exec(source, namespace)
    return namespace[job["entry"]]


line = [0]
code = [None]


def calls_of_entry(frame, event, arg):
    if frame.f_code is not code[0]:
        return None
    frame.f_trace_lines = False
    return its_return


def its_return(frame, event, arg):
    if event == "return":
        line[0] = frame.f_lineno
    return its_return


LIMIT_ERRORS = (RecursionError, OverflowError, MemoryError)
LIMIT_MESSAGES = ("sys.maxsize", "decimal digits", "ssize_t", "index-sized")
limited = [False]


def watch_calls(frame, event, arg):
    frame.f_trace_lines = False
    return watch_frame


def watch_frame(frame, event, arg):
    if event == "exception" and (issubclass(arg[0], LIMIT_ERRORS) or issubclass(
            arg[0], ValueError) and any(m in str(arg[1]) for m in LIMIT_MESSAGES)):
        limited[0] = True
    return watch_frame


def answer(call, hook):
    line[0] = 0
    sys.settrace(hook)
    try:
        value = call()
        hooked = sys.gettrace()
        sys.settrace(None)
        result = ["ok", repr(value)]
    except BaseException as e:
        hooked = sys.gettrace()
        sys.settrace(None)
        result = ["raise", type(e).__name__]
    if hook is watch_calls and (limited[0] or hooked is not hook):
        return ["raise", "ARTEFACT"]
    if hook is watch_calls and result[0] == "ok":
        same = same_reordered(value)
        if not same:
            return ["raise", "ARTEFACT" if same is None else "SET_ORDER"]
    return result + [line[0]] if hook is calls_of_entry else result


REORDER


def same_reordered(value):
    """Whether the reference, with every set read in each other order, answers the input the
    child was forked for as it did (as the grader compares: a dict's order is no answer); None
    where the comparison itself failed (an answer nested past the recursion limit, which is no
    example anyway)."""
    for way in ORDERS:
        order[0] = way
        try:
            namespace = {"__name__": "reference", **names()}
            exec(reordered_source, namespace)
            other = namespace[job["entry"]](*turned(ast.literal_eval(the_input[0])))
        except BaseException:
            return False
        try:
            if not same_answer(other, value):
                return False
        except BaseException:
            return None
    return True


the_input = [None]


def alone(text):
    # the shift and the parse here, not in the child: each page a child writes costs it a copy
    shift_heap(1024)
    the_input[0] = text
    try:
        args = ast.literal_eval(text)
    except BaseException as e:
        return ["raise", type(e).__name__]
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:  # whatever happens, the child never goes on as the parent
            hook = watch_calls if raised_limits else None
            data = memoryview(json.dumps(answer(lambda: reference()(*args), hook)).encode())
            while data:
                data = data[os.write(write, data):]
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        text = pipe.read()
    os.waitpid(pid, 0)
    return json.loads(text) if text else ["lost"]


def in_order(text):
    shift_heap(256)  # so that objects made per call move between the calls
    return answer(lambda: entry(*ast.literal_eval(text)), calls_of_entry)


if raised_limits:
    reordered_source = reordered_code(job["source"], "<reference>")
again = [alone(text) for text in job["calls"]]  # before the reference runs in this process
if raised_limits:  # its answers alone: none in this process
    out.write(json.dumps(again))
    out.flush()
    os._exit(0)
shift_heap(1024)
entry = reference()
code[0] = getattr(entry, "__code__", None)
first = [in_order(text) for text in job["calls"]]
same = [result[:2] for result in first] == again
out.write(json.dumps(first if same else "nondeterministic"))
out.flush()
'''
DRIVER = r'''
import json, os, subprocess, sys
job = sys.stdin.read()
runs = []
for k in range(INTERPRETERS):
    done = subprocess.run([sys.executable, "-I", "-c", RUNNER], input=job, text=True,
                          capture_output=True,
                          env={"SPADE_NONCE": os.urandom(8).hex(),
                               "SPADE_LIMITS": "raised" if k == RAISED else "default"})
    runs.append([done.returncode, done.stdout[-4000000:], done.stderr[-2000:]])
print(json.dumps(runs))
'''.replace("RUNNER", repr(RUNNER.replace("RAISED_RECURSION_LIMIT", str(RAISED_RECURSION_LIMIT))
                          .replace("ARTEFACT", ARTEFACT).replace("SET_ORDER", SET_ORDER)
                          .replace("REORDER", inspect.getsource(reorder)))) \
    .replace("INTERPRETERS", str(INTERPRETERS)).replace("RAISED", str(RAISED))


def job(reference: str, entry_point: str, inputs: Sequence[tuple]) -> str:
    """The DRIVER's stdin: the reference, its entry point and the inputs as reprs."""
    return json.dumps({"source": reference, "entry": entry_point,
                       "calls": [repr(args) for args in inputs]})


def slow_s(max_reference_cpu_s: float) -> float:
    """The driver CPU past which a reference is slow: `max_reference_cpu_s` is for two passes,
    and the driver makes INTERPRETERS * PASSES of them."""
    return max_reference_cpu_s * INTERPRETERS * PASSES / 2


def driver_limits(limits: Limits, max_reference_cpu_s: float) -> Limits:
    """Every interpreter runs every input PASSES times: that many times the task's limits, plus
    their start-up, but no more than twice what `answers` calls slow (`max_reference_cpu_s` is
    for two passes): a reference over that is rejected whatever it does next, and one that
    loops had cost 31.5 s of CPU per driver job under make run's limits (6 x 5 s), twice over
    with augmented inputs; 13.5 s now. The wall budget keeps the task's ratio of wall to CPU."""
    runs = INTERPRETERS * PASSES
    cpu_s = min(runs * limits.cpu_s, 2 * slow_s(max_reference_cpu_s))
    return dataclasses.replace(limits, timeout_s=cpu_s * limits.timeout_s / limits.cpu_s + 1.5,
                               cpu_s=cpu_s + 1.5)


def answers(run: ExecResult, calls: int, max_reference_cpu_s: float) -> list | str:
    """Per input, ["ok", repr, line] or ["raise", type name, line] from a DRIVER run (the
    interpreters agreeing; the line of the entry function's `return` that answered, 0 when
    none did), or admission's rejection reason. `max_reference_cpu_s` is for two passes."""
    if run.status is ExecStatus.SANDBOX_ERROR:
        return "sandbox_error"
    if run.status is not ExecStatus.OK:
        return f"reference_{run.status.value}"
    if run.cpu_s > slow_s(max_reference_cpu_s):
        return "reference_slow"
    try:
        interpreters = json.loads(run.stdout)
        codes = [code for code, _, _ in interpreters]
        outputs = [json.loads(out) for _, out, _ in interpreters]
    except (ValueError, TypeError):
        return "reference_error"  # the reference failed at import, or broke its own output
    if len(outputs) != INTERPRETERS or any(codes):
        return "reference_error"
    raised = outputs.pop(RAISED)
    if "nondeterministic" in (*outputs, raised) or any(o != outputs[0] for o in outputs):
        return "nondeterministic"
    first = outputs[0]
    if not all(isinstance(o, list) and len(o) == calls for o in (first, raised)):
        return "reference_error"
    if any(type(theirs) is list and theirs[:2] == ["raise", SET_ORDER] for theirs in raised):
        return "set_order"
    # the entries are the reference's process's output: checked as data, never trusted to
    # have a shape (admission reads only well-formed ones)
    return [mine if type(mine) is list and type(theirs) is list and mine[:2] == theirs[:2]
            else ["raise", ARTEFACT, 0] for mine, theirs in zip(first, raised)]
