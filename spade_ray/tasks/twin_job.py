"""The twin run's program (TWINS) and the figures it is built with.

TWINS is trusted text that decontamination.twins runs in the sandbox like any candidate (its
inputs are the generator's): it defines every held-out problem, calls each on every task's
examples under every mapping of their arguments, and prints the first problem each task is a
twin of, and the tasks that spent their allowance. Why each figure is what it is sits beside
it; decontamination.py says what a twin is and what the test does not catch.
"""

from __future__ import annotations

from spade_ray.tasks.imports import ALLOWED_IMPORTS
from spade_ray.tasks.twin_rules import RULES, kind

__all__ = ["CALL_S", "ITEM_SLACK_S", "RAISE_S", "TASK_S", "TWINS", "kind"]

CALL_S = 0.05  # one validation solution on one input; a slower one is no twin
# Seconds of CPU, not of the clock (ITIMER_PROF): on a loaded machine a call waits for a core,
# and a clock timer made a verbatim HumanEval/31 copy's first call Late, which ends the item as
# no twin, and the copy was admitted (a `make test` beside a `make run`, s28). The same for
# RAISE_S (twin_rules.twin) and for the watch below. The task allowance (TASK_S) stays in
# clock time: it bounds how long a chunk's run takes, a sleeping call included.
# ... and enforced from outside: the timer inside cannot stop one C call (HumanEval/60's
# sum(range(n + 1)) on n = 10**10 ran past the whole run's 26.6 s budget, and every task of
# its chunk went unchecked: red-team s23 H1). A child process runs the (problem, task,
# mapping) items and reports each; one that spends the item's examples x CALL_S plus this in
# CPU without a report is killed, that item is no twin, and a new child goes on from the next.
# Slack for a fork:
ITEM_SLACK_S = 0.5
# ... and one silent that long times this in clock time, CPU or not (a call blocked in a
# system call; this machine ran the twin job at 6x its CPU time in wall time under load):
SILENT_WAITS = 8
# A problem killed once (or that ended the child) is left out for the rest of the run: stuck
# on a foreign input is no twin, and an archive's reference stuck in C on every non-int
# argument was killed on each (task, mapping) item of every chunk: 3 new tasks took 44.8 s
# and 14.7 s CPU each, 1.4 s and 0.3 s without it (red-team s24 H1); now 3.2 s and 0.9 s.
# The items it skipped get one more pass at the end of the run (below: F4).
# A task's allowance: TASK_S x CALL_S x problems x its examples, plus one stuck item (a big
# input may stick one solution, as digit_count(10**10) does HumanEval/60, and be no copy). The
# calls of one task whose inputs keep many solutions busy just under CALL_S (an item stops
# early on wrong answers, not on raises) outlasted the chunk's whole budget, the run failed
# twice and every task of the chunk was rejected as sandbox_error (red-team s24). Honest tasks
# take milliseconds a problem: the augmented seed pool's 39 tasks took 4.1-7.3 s together,
# where half of CALL_S is 8-27 s each against the 164 problems. A quarter would leave too
# little to an honest task whose inputs keep the solutions busy 20 ms a call; more lets a
# slow task burn more CPU before it is stopped.
TASK_S = 0.5
# A problem's unanswered calls on one task's inputs (raised, or Late) may take this much in
# all, over its mappings; then the problem is no twin of the task. A raise is no evidence, so
# an item goes on through raises until too few examples are left to agree: 12 archived tasks
# that spin 30 ms and raise on any non-int argument cost each later 3-argument task 13
# mappings x 10 calls x 30 ms apiece, 66 s for a chunk of 3, and made them twin_check_slow
# (red-team s25 F3; 17 s and admitted with this). Honest problems raise in microseconds (a
# TypeError on the first line). A Late is unanswered too, within this: up to 3 slow examples
# of a copy no longer hide it; more, or a problem slow to raise on a copy's inputs, still do.
RAISE_S = 3 * CALL_S
# A twin: the validation solution gives every one of the task's expected outputs, or nearly
# all of those of the examples it answers (returns a value on). Every one was evaded by
# one special case: HumanEval/13's gcd plus `if a == 0 and b == 0: return -1` and the input
# (0, 0) agreed on 12 of 13 examples (augment_inputs=8) and was admitted (red-team pass
# 10). An example on which it raises counts for neither side, or inputs outside the problem's
# domain would hide a copy: the seed count_vowels agreed with HumanEval/64 on the 4 of its 5
# examples /64 answers ("" raises IndexError there), too few to tell (MIN_AGREEING), and
# augmented on 12 of 12 (it is distinct_vowels now, and the seed fibonacci, /55 on every
# input but fib(50), which /55 computes too slowly, is lucas). One slower than CALL_S still
# ends the mapping: the augmented seed pool's twin run (39 tasks, 514 examples) took 4.5 s
# here where the every-example rule took 2.6 s, and waiting on each slow example as on a raise
# made it 7.0 s. The mappings (below) double the calls (45,390 where 22,410 on the augmented
# pool, 8,239 where 4,565 as shipped); parsing each example once, not once per problem, pays
# for most of it: the TWINS process's CPU, 3 runs each alternating with the old one, was
# 4.1-7.3 s augmented where 4.1-6.0 s, 2.8-3.2 s as shipped where 2.2-2.3 s (s23; this
# 2-core machine under other jobs, where the same run's CPU time varies up to 2x). A call
# stuck in C costs its item's examples x CALL_S plus ITEM_SLACK_S: digit_count(10**10) with
# HumanEval/60, 0.7 s, where it took the whole 26.6 s budget and the chunk.

TWINS = r'''
import base64, inspect, itertools, json, math, os, pickle, select, signal, struct, sys, time
job = json.loads(sys.stdin.read())
RECORD = struct.Struct("<?dd")  # one per item the child ran: twin?, seconds it took, the
# child's CPU seconds after it
TICK = os.sysconf("SC_CLK_TCK")
out = os.fdopen(os.dup(1), "w")
null = os.open(os.devnull, os.O_WRONLY)
os.dup2(null, 1)


class Late(Exception):
    pass


def late(*_):
    raise Late()


signal.signal(signal.SIGPROF, late)


def guarded(fn, *args):
    signal.setitimer(signal.ITIMER_PROF, CALL_S)  # CPU time: see CALL_S
    try:
        return fn(*args)
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)


RULES


for name in ALLOWED_IMPORTS:
    __import__(name)
# the modules every problem shares, as they were before any ran: a known reference's
# module-level `bisect.bisect_right = bisect.bisect_left` (static.py refuses it now) changed
# the other references, and a copy of the seed first_greater was admitted (red-team s24 H2)
pristine = [(vars(m), dict(vars(m))) for n, m in list(sys.modules.items())
            if n.split(".")[0] in ALLOWED_IMPORTS]


def defined(source, problem_id, entry):
    namespace = {"__name__": "validation"}
    try:
        guarded(exec, compile(source, problem_id, "exec"), namespace)
    finally:
        for now, then in pristine:
            if now != then:
                now.clear()
                now.update(then)
    fn = namespace[entry]
    return fn, inspect.signature(fn)


tasks = []  # per task: its calls' arguments as pickles (a fresh copy per call: /70 and
# others change their argument), its expected outputs, its mappings with the counts of
# arguments each makes, and its allowance in seconds
plain = []  # per task as it is (not a view: filled in, problems mapped item by item were
# honest tasks' twins, s34) whose calls all pass n arguments, n >= 1: those calls (the
# partial items', twin_rules' PARTIAL); else None
for examples, derived in zip(job["tasks"], job["derived"]):
    blobs = [base64.b64decode(args) for args, _ in examples]
    calls = [pickle.loads(blob) for blob in blobs]
    tasks.append((blobs, [pickle.loads(base64.b64decode(expected)) for _, expected in examples],
                  [(m, {len(mapped(args, m)) for args in calls}) for m in mappings(calls)],
                  groups(calls),
                  (TASK_S * len(job["problems"]) + 1) * CALL_S * len(blobs) + ITEM_SLACK_S))
    plain.append(calls if not derived and calls and calls[0]
                 and len({len(args) for args in calls}) == 1 else None)
fns, work = [], []  # work: (problem, task, mapping) in the order they are tried
for problem_id, source, entry, own, written_for, one_line, fills in job["problems"]:
    try:
        fn, signature = defined(source, problem_id, entry)
    except BaseException:
        continue
    binds = {}
    for n in {n for _, _, ms, _, _ in tasks for _, lengths in ms for n in lengths} | \
            {arity for arity, _ in fills}:
        try:
            binds[n] = signature.bind(*range(n)) is not None
        except TypeError:
            binds[n] = False
    written_for = {tuple(k) for k in written_for}
    fns.append((problem_id, fn, {tuple(k) for k in own}, written_for))
    work += [(len(fns) - 1, t, m) for t, (_, _, ms, _, _) in enumerate(tasks)
             if not (one_line and job["derived"][t])
             for m, lengths in ms if all(binds[n] for n in lengths)]
    if one_line:
        continue  # no partial items (twin_rules' PARTIAL)
    fills = [(arity, tuple((k, base64.b64decode(blob)) for k, blob in filled))
             for arity, filled in fills if binds[arity]]
    work += [(len(fns) - 1, t, m) for t, calls in enumerate(plain) if calls
             for arity, filled in fills if arity == len(calls[0]) + len(filled)
             for order in orders(len(calls[0])) if len(order) == len(calls[0])
             for m in [(False, order, filled)]
             if any(fits(mapped(args, m), written_for) for args in calls)]


def child(start, write):
    raised = {}  # (problem, task): seconds its calls spent raising, over the task's mappings
    for p, t, m in work[start:]:
        if t not in found and p not in dropped:
            blobs, expected, _, flags, _ = tasks[t]
            began = time.monotonic()
            partial = len(m) > 2  # a constant filled in: on calls of the test's kinds only
            hit, took = twin(fns[p][1], blobs, expected, m, flags,
                             RAISE_S - raised.get((p, t), 0.0),
                             fns[p][3] if partial else fns[p][2], fns[p][3], partial)
            raised[p, t] = raised.get((p, t), 0.0) + took
            if hit:
                found[t] = fns[p][0]
            os.write(write, RECORD.pack(hit, time.monotonic() - began, time.process_time()))


def spend(t, seconds):
    """Counts an item's time against task t's allowance; True when that ends its checks (found:
    None, left unchecked)."""
    spent[t] = spent.get(t, 0.0) + seconds
    if t not in found and spent[t] > tasks[t][4]:
        found[t] = None
    return found.get(t, "") is None


def watch(start):
    """Runs work[start:] in a child; the index to go on from: len(work), or the item after one
    the child did not finish within its deadline (killed: no twin, and its problem is dropped,
    so a new child leaves the problem out) or that spent the rest of its task's allowance (a
    new child leaves the task out)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read)
            child(start, write)
        finally:
            os._exit(0)
    os.close(write)
    i, done, k, cpu = start, b"", 0, 0.0  # cpu: the child's CPU seconds at its last report
    try:
        while True:
            while i < len(work) and (work[i][1] in found or work[i][0] in dropped):
                i += 1
            if i == len(work):
                return i
            t = work[i][1]
            while len(done) - k < RECORD.size:
                deadline = len(tasks[t][0]) * CALL_S + ITEM_SLACK_S
                if silent(read, pid, cpu, deadline):
                    spend(t, deadline)
                    dropped.add(work[i][0])
                    stuck.add(work[i][:2])
                    return i + 1  # stuck in one call (a C loop the timer cannot stop)
                more = os.read(read, 65536)
                if not more:  # the child died on this one
                    dropped.add(work[i][0])
                    stuck.add(work[i][:2])
                    return i + 1
                done, k = done[k:] + more, 0
            hit, took, cpu = RECORD.unpack_from(done, k)
            ran.add(work[i])
            if hit:
                found[t] = fns[work[i][0]][0]
            i, k = i + 1, k + RECORD.size
            if spend(t, took):
                return i
    finally:
        os.close(read)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def silent(read, pid, cpu, deadline):
    """Whether the child sends nothing before it has spent `deadline` CPU seconds past `cpu`
    (stuck in one C call), or SILENT_WAITS x `deadline` in clock time (blocked): one waiting
    for a core on a loaded machine is neither."""
    give_up = time.monotonic() + SILENT_WAITS * deadline
    wait = deadline
    while not select.select([read], [], [], wait)[0]:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            return False  # gone: its pipe says so
        left = min(deadline - ((int(fields[11]) + int(fields[12])) / TICK - cpu),
                   give_up - time.monotonic())
        if left <= 0:
            return True
        wait = max(left, 0.05)
    return False


found, spent = {}, {}  # per task: the problem it is (None: past its allowance); its seconds
dropped = set()  # problems an item of which was killed (stuck) or ended the child: skipped
ran, stuck = set(), set()  # items that ran to the end; (problem, task) of those killed
start = 0
while start < len(work):
    start = watch(start)
# The items a dropped problem skipped get one more pass, in which a problem killed again is
# dropped for good (stuck on foreign inputs: one more item a run). A task that sticks one
# problem hid a copy of it elsewhere in its chunk (HumanEval/60 verbatim beside
# digit_count(10**12): red-team s25 F4).
work = [w for w in work if w[0] in dropped and w not in ran and w[:2] not in stuck]
dropped, start = set(), 0
while start < len(work):
    start = watch(start)
out.write(json.dumps({"found": {str(t): p for t, p in found.items() if p is not None},
                      "slow": [t for t, p in found.items() if p is None]}))
out.flush()
'''.replace("CALL_S", repr(CALL_S)).replace("ITEM_SLACK_S", repr(ITEM_SLACK_S)) \
    .replace("SILENT_WAITS", repr(SILENT_WAITS)) \
    .replace("TASK_S", repr(TASK_S)).replace("RAISE_S", repr(RAISE_S)) \
    .replace("ALLOWED_IMPORTS", repr(sorted(ALLOWED_IMPORTS))).replace("RULES", RULES)
