"""The twin run's program (TWINS) and the figures it is built with.

TWINS is trusted text that decontamination.twins runs in the sandbox like any candidate (its
inputs are the generator's): it defines every held-out problem, calls each on every task's
examples under every mapping of their arguments, and prints the first problem each task is a
twin of, and the tasks that spent their allowance. Why each figure is what it is sits beside
it; decontamination.py says what a twin is and what the test does not catch.
"""

from __future__ import annotations

from spade_ray.tasks.imports import ALLOWED_IMPORTS

CALL_S = 0.05  # one validation solution on one input; a slower one is no twin
# ... and enforced from outside: the timer inside cannot stop one C call (HumanEval/60's
# sum(range(n + 1)) on n = 10**10 ran past the whole run's 26.6 s budget, and every task of
# its chunk went unchecked: red-team s23 H1). A child process runs the (problem, task,
# mapping) items and reports each; one silent for the item's examples x CALL_S plus this is
# killed, that item is no twin, and a new child goes on from the next. Slack for a fork and
# a loaded machine (this one ran the twin job at 6x its CPU time in wall time):
ITEM_SLACK_S = 0.5
# A problem killed once (or that ended the child) is left out for the rest of the run: stuck
# on a foreign input is no twin, and an archive's reference stuck in C on every non-int
# argument was killed on each (task, mapping) item of every chunk: 3 new tasks took 44.8 s
# and 14.7 s CPU each, 1.4 s and 0.3 s without it (red-team s24 H1); now 3.2 s and 0.9 s.
# The price: a copy in the chunk of a task whose input sticks its problem is not checked.
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
# "Nearly all" is bounded on three sides, measured on the seed pool against all 164 problems
# (tests/tasks/test_decontamination.py; as shipped, and augmented as generated tasks are),
# each for one mapping of the arguments:
TWIN_FRACTION = 0.8  # of the answered examples agree: all but 2 of 13 (a special case
# usually reaches an augmented input or two of the input it was written for)
MIN_AGREEING = 6  # agreeing examples at least: the shipped seeds' closest non-twins agree on
# 5 of 6 (insertion_sort with HumanEval/34's sorted(set(l)), max_index with /73); no seed
# has more than 7 examples, so none is a twin but by agreeing on all, as before
MIN_DISTINCT = 4  # different outputs among them at least: a bool or a small count agrees by
# chance (augmented seeds: is_power_of_two with /138 on 12 of 14 in two values, is_balanced
# with /56 on 13 of 15 in two, max_index with /73 on 11 of 14 in three); counted on the
# validation solution's results, so that a tolerance cannot make one value agree with four
# Disguises a generator writes in one line (red-team s23 H2, each admitted before): the
# arguments in another order (HumanEval/18, /44), an unused extra one (/18), all of them in
# one tuple (/18), a tuple for a list (/26), a float rounded (/4 to 12 places, which the
# grader's 1e-9 tolerance then passed /4's own solution on). So the task's arguments are
# mapped, alike on all its examples: every order of them and every order of all but one
# (up to MAX_PERMUTED arguments; past that only as they are and all but one), and a single
# list or tuple argument spread; a mapping the problem's signature does not bind is skipped.
# Results agree as data: a list or tuple with either, element by element, a str with the
# str() of the result, a number (never a bool) within the tolerance below.
# Or relabel the answer: HumanEval/48, /57 and /3 returning 1/0, 'yes'/'no' or the negated
# bool were admitted, and 28 of the 164 problems return only bools (red-team s24 H3). So when
# the problem's results on every example (all answered) are bools, ints or strs in 2 to
# MAX_LABELS values, each given twice or more, and the expected outputs are one one-to-one
# relabelling of them, on MIN_AGREEING examples or more (the map is read off the examples),
# it is a twin. Never by "nearly all": under MIN_DISTINCT values that rule keeps out.
MAX_LABELS = 3
MAX_PERMUTED = 3  # 12 mappings for 3 arguments (6 orders, 3 x 2 with one dropped)
# Rounding must not hide a twin: to 2 decimal places (the usual "round to two decimals", and
# HumanEval/71's own) moves a value by up to 0.005, within ABS_TOL; to 4 significant digits
# by up to 5e-4 of it, within REL_TOL. A looser bound lets unrelated small floats agree.
REL_TOL = 1e-3
ABS_TOL = 1e-2
TWINS = r'''
import base64, inspect, itertools, json, math, os, pickle, select, signal, struct, sys, time
job = json.loads(sys.stdin.read())
RECORD = struct.Struct("<?d")  # one per item the child ran: twin?, seconds it took
out = os.fdopen(os.dup(1), "w")
null = os.open(os.devnull, os.O_WRONLY)
os.dup2(null, 1)


class Late(Exception):
    pass


def late(*_):
    raise Late()


signal.signal(signal.SIGALRM, late)


def guarded(fn, *args):
    signal.setitimer(signal.ITIMER_REAL, CALL_S)
    try:
        return fn(*args)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def same(value, expected, isclose=math.isclose):  # bound now: a problem's module-level
    # `math.isclose = ...` made every float agree (red-team s24 H2)
    if isinstance(expected, bool) or expected is None:
        return value is expected
    if isinstance(expected, str):
        return value == expected if isinstance(value, str) else str(value) == expected
    if isinstance(expected, (int, float)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if isinstance(value, int) and isinstance(expected, int):
            return value == expected
        try:
            return isclose(value, expected, rel_tol=REL_TOL, abs_tol=ABS_TOL)
        except OverflowError:
            return False
    if isinstance(expected, (list, tuple)):
        return isinstance(value, (list, tuple)) and len(value) == len(expected) and \
            all(same(v, e) for v, e in zip(value, expected))
    if isinstance(expected, dict):
        return isinstance(value, dict) and value.keys() == expected.keys() and \
            all(same(value[k], e) for k, e in expected.items())
    return type(value) is type(expected) and value == expected


def label(value):
    """A value a relabelling may map, with its type (True is not 1), or None."""
    return (type(value), value) if type(value) in (bool, int, str) else None


def answer(fn, args, expected):
    value = fn(*args)
    return repr(value) if same(value, expected) else None, label(value)


def mapped(args, mapping):
    unpack, order = mapping
    args = tuple(args[0]) if unpack else args
    return args if order is None else tuple(args[j] for j in order)


def mappings(calls):
    arities = {len(args) for args in calls}
    tried = [(False, None)]
    if len(arities) == 1 and (n := arities.pop()) > 1:
        kept = [[j for j in range(n) if j != k] for k in range(n)]
        if n <= MAX_PERMUTED:
            orders = list(itertools.permutations(range(n)))[1:] + \
                [order for rest in kept for order in itertools.permutations(rest)]
        else:
            orders = [tuple(rest) for rest in kept]
        tried += [(False, order) for order in orders]
    if all(len(args) == 1 and type(args[0]) in (list, tuple) for args in calls):
        tried.append((True, None))
    return tried


def twin(fn, blobs, expected, mapping):
    agreed, answered, outputs = 0, 0, set()
    relabelled = {} if len(blobs) >= MIN_AGREEING else None  # result label: expected label
    seen = {}  # result label: how many times
    for i, (blob, wanted) in enumerate(zip(blobs, expected)):
        key, result = None, None
        try:
            key, result = guarded(answer, fn, mapped(pickle.loads(blob), mapping), wanted)
            answered += 1
            if key is not None:
                agreed += 1
                outputs.add(key)
        except Late:
            return False  # slower than CALL_S: no twin, as before (waiting on more cost 2x)
        except BaseException:
            pass  # not answered: no evidence either way
        if relabelled is not None:
            image = label(wanted)
            if result is None or image is None or relabelled.setdefault(result, image) != image \
                    or len(relabelled) > MAX_LABELS:
                relabelled = None
            else:
                seen[result] = seen.get(result, 0) + 1
        if relabelled is None and (answered - agreed > (1 - TWIN_FRACTION) * len(blobs) + 1e-9
                                   or agreed + len(blobs) - i - 1 <
                                   min(MIN_AGREEING, len(blobs))):
            return False  # no twin whatever the rest give
    return agreed == len(blobs) or (agreed >= MIN_AGREEING and len(outputs) >= MIN_DISTINCT
                                    and agreed >= TWIN_FRACTION * answered - 1e-9) or \
        relabelled is not None and len(relabelled) >= 2 and min(seen.values()) >= 2 and \
        len(set(relabelled.values())) == len(relabelled)


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
for examples in job["tasks"]:
    blobs = [base64.b64decode(args) for args, _ in examples]
    calls = [pickle.loads(blob) for blob in blobs]
    tasks.append((blobs, [pickle.loads(base64.b64decode(expected)) for _, expected in examples],
                  [(m, {len(mapped(args, m)) for args in calls}) for m in mappings(calls)],
                  (TASK_S * len(job["problems"]) + 1) * CALL_S * len(blobs) + ITEM_SLACK_S))
fns, work = [], []  # work: (problem, task, mapping) in the order they are tried
for problem_id, source, entry in job["problems"]:
    try:
        fn, signature = defined(source, problem_id, entry)
    except BaseException:
        continue
    binds = {}
    for n in {n for _, _, ms, _ in tasks for _, lengths in ms for n in lengths}:
        try:
            binds[n] = signature.bind(*range(n)) is not None
        except TypeError:
            binds[n] = False
    fns.append((problem_id, fn))
    work += [(len(fns) - 1, t, m) for t, (_, _, ms, _) in enumerate(tasks)
             for m, lengths in ms if all(binds[n] for n in lengths)]


def child(start, write):
    for p, t, m in work[start:]:
        if t not in found and p not in dropped:
            blobs, expected, _, _ = tasks[t]
            began = time.monotonic()
            hit = twin(fns[p][1], blobs, expected, m)
            if hit:
                found[t] = fns[p][0]
            os.write(write, RECORD.pack(hit, time.monotonic() - began))


def spend(t, seconds):
    """Counts an item's time against task t's allowance; True when that ends its checks (found:
    None, left unchecked)."""
    spent[t] = spent.get(t, 0.0) + seconds
    if t not in found and spent[t] > tasks[t][3]:
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
    i, done, k = start, b"", 0
    try:
        while True:
            while i < len(work) and (work[i][1] in found or work[i][0] in dropped):
                i += 1
            if i == len(work):
                return i
            t = work[i][1]
            while len(done) - k < RECORD.size:
                deadline = len(tasks[t][0]) * CALL_S + ITEM_SLACK_S
                if not select.select([read], [], [], deadline)[0]:
                    spend(t, deadline)
                    dropped.add(work[i][0])
                    return i + 1  # stuck in one call (a C loop the timer cannot stop)
                more = os.read(read, 65536)
                if not more:  # the child died on this one
                    dropped.add(work[i][0])
                    return i + 1
                done, k = done[k:] + more, 0
            hit, took = RECORD.unpack_from(done, k)
            if hit:
                found[t] = fns[work[i][0]][0]
            i, k = i + 1, k + RECORD.size
            if spend(t, took):
                return i
    finally:
        os.close(read)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


found, spent = {}, {}  # per task: the problem it is (None: past its allowance); its seconds
dropped = set()  # problems an item of which was killed (stuck) or ended the child: skipped
start = 0
while start < len(work):
    start = watch(start)
out.write(json.dumps({"found": {str(t): p for t, p in found.items() if p is not None},
                      "slow": [t for t, p in found.items() if p is None]}))
out.flush()
'''.replace("CALL_S", repr(CALL_S)).replace("ITEM_SLACK_S", repr(ITEM_SLACK_S)) \
    .replace("TASK_S", repr(TASK_S)) \
    .replace("TWIN_FRACTION", repr(TWIN_FRACTION)).replace("MIN_AGREEING", repr(MIN_AGREEING)) \
    .replace("MIN_DISTINCT", repr(MIN_DISTINCT)).replace("MAX_PERMUTED", repr(MAX_PERMUTED)) \
    .replace("MAX_LABELS", repr(MAX_LABELS)) \
    .replace("REL_TOL", repr(REL_TOL)).replace("ABS_TOL", repr(ABS_TOL)) \
    .replace("ALLOWED_IMPORTS", repr(sorted(ALLOWED_IMPORTS)))
