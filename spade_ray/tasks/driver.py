"""The driver: the trusted program admission runs in the sandbox to learn a reference's answers.

It runs the reference on every input in INTERPRETERS fresh interpreters and reads back, per
input, the repr of the result or the name of the exception; `answers` turns its output into
those results or a rejection reason (admission.py names them).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence

from spade_ray.records import ExecResult, ExecStatus, Limits

# Runs in the sandbox: the reference on every input, in INTERPRETERS fresh interpreters (each
# with its own random hash seed and address layout), twice in each (the second time on a heap
# moved by live ballast), one JSON line out. Each interpreter prints [["ok", repr] | ["raise",
# type name], ...], or "nondeterministic" when its two passes disagree. Why so many: what a
# program can read of its own process (the order of a set of strings, an object's address in
# f"{object()}") may agree between two interpreters by chance (1 in 2 for one bit), and such a
# task is graded by luck, a pass rate the generator's reward would pay for. A third interpreter
# halves that chance again, and the second pass catches the bits that follow the heap (the
# low bits of an address) rather than the layout. The second pass calls the inputs in reverse
# order, so an answer that follows the calls before it (a mutable default counting them) moves,
# and each interpreter's environment holds a random value of its own, so one read from the
# environment differs. The first pass also records which line of the entry function returned
# each answer (a trace of that function's frames only), so that a predict question can be
# judged among the answers of the same `return` (guesses.coin_flip). Cost: ~40 ms of CPU
# per interpreter.
INTERPRETERS = 3
PASSES = 2  # over the inputs, in each interpreter
#
# The clocks jump: every read of the time module's clocks (and of the local or UTC time they
# give) is off by a fresh random amount of up to 136 years. A reference may not read the time at
# all (tasks/static.py), but one that reaches a clock by a way the static rules do not know
# would agree with itself for the second admission takes (`int(time.time() // 3) % 2`); with
# jumping clocks it disagrees between passes and interpreters, and is nondeterministic.
RUNNER = r'''
import ast, json, os, sys, time
job = json.loads(sys.stdin.read())
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
namespace = {"__name__": "reference"}
exec(compile(job["source"], "<reference>", "exec"), namespace)


entry = namespace[job["entry"]]
code = getattr(entry, "__code__", None)
line = [0]


def calls_of_entry(frame, event, arg):
    if frame.f_code is not code:
        return None
    frame.f_trace_lines = False
    return its_return


def its_return(frame, event, arg):
    if event == "return":
        line[0] = frame.f_lineno
    return its_return


def answers(calls, traced):
    results = []
    for args in calls:
        line[0] = 0
        sys.settrace(calls_of_entry if traced else None)
        try:
            value = entry(*ast.literal_eval(args))
            sys.settrace(None)
            results.append(["ok", repr(value)])
        except BaseException as e:
            sys.settrace(None)
            results.append(["raise", type(e).__name__])
        if traced:
            results[-1].append(line[0])
    return results


first = answers(job["calls"], True)
ballast = [object() for _ in range(100000)]  # 1.6 MB: a new arena, the heap moves
again = answers(job["calls"][::-1], False)[::-1]
same = [result[:2] for result in first] == again
out.write(json.dumps(first if same else "nondeterministic"))
out.flush()
'''
DRIVER = r'''
import json, os, subprocess, sys
job = sys.stdin.read()
runs = []
for _ in range(INTERPRETERS):
    done = subprocess.run([sys.executable, "-I", "-c", RUNNER], input=job, text=True,
                          capture_output=True, env={"SPADE_NONCE": os.urandom(8).hex()})
    runs.append([done.returncode, done.stdout[-4000000:], done.stderr[-2000:]])
print(json.dumps(runs))
'''.replace("RUNNER", repr(RUNNER)).replace("INTERPRETERS", str(INTERPRETERS))


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
    if "nondeterministic" in outputs or any(o != outputs[0] for o in outputs):
        return "nondeterministic"
    first = outputs[0]
    if not isinstance(first, list) or len(first) != calls:
        return "reference_error"
    return first
