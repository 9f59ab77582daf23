"""What makes a task a twin of a problem: the figures, and the functions TWINS (twin_job.py)
runs on one (problem, task, mapping) item. RULES is their text, inserted into TWINS; kind and
fits also run here, where a known task's argument kinds are read off its examples."""

from __future__ import annotations

import inspect

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
# the problem's results on the examples it answers (MIN_AGREEING or more; one input it raises
# on, None, switched the rule off: red-team s25 F1) are bools, ints or strs in 2 to
# MAX_LABELS values, each given twice or more, and the expected outputs are one one-to-one
# relabelling of them (the map is read off the examples), it is a twin. Never by "nearly
# all": under MIN_DISTINCT values that rule keeps out.
MAX_LABELS = 3
# Or change the answer in one line (red-team s25 F1, each admitted before: HumanEval/18's body
# returning times + 1, 3 * times, -times, [times], (times, len(string)), 'found ' +
# str(times); the seeds' collatz_steps and max_subarray_sum the same way against the known
# run). So it is a twin too when, on MIN_AGREEING answered examples or more with MIN_DISTINCT
# results or more, every expected output is one affine function a * result + b (a != 0,
# within the tolerance) of the problem's result, or holds it at one place: the same item of
# a list or tuple of one length up to MAX_PACK, or its text at one offset from the start or
# the end of a str, or is it backwards (red-team s31: HumanEval/26's and /27's answers
# reversed were admitted). Not any one-to-one map: HumanEval/27's flip_case is one-to-one,
# and any task with distinct outputs would be its twin. An example whose result is one of
# the call's arguments does not count for these rules: frame(word, left, right) starts with
# left, and HumanEval/74 returns left on (left, right). Measured on the seed pool as shipped and
# augmented (as generated tasks) against all 164 problems and against each other, and on the
# red-team scripts' honest tasks: no new twin (/work/notes/s25/gen_fix).
MAX_PACK = 3
MAX_PERMUTED = 3  # 12 mappings for 3 arguments (6 orders, 3 x 2 with one dropped)
# More mappings (red-team s25 F1): calls of several arities (a defaulted parameter one call
# passes) are cut to the fewest arguments, then ordered as above: the arity skipped HumanEval/18
# on every mapping; one str argument that holds the same count of one separator
# (SEPARATORS) in every call is split on it ('aaaa|aa' for HumanEval/18's two). And a task
# with a flag (an argument of 2 or 3 small values) is a twin of a problem that agrees with
# every one of the examples of one flag value it answers, MIN_AGREEING and MIN_DISTINCT as
# above: HumanEval/13 and /49 on one flag agreed each on half and were admitted.
# Rounding must not hide a twin: to 2 decimal places (the usual "round to two decimals", and
# HumanEval/71's own) moves a value by up to 0.005, within ABS_TOL; to 4 significant digits
# by up to 5e-4 of it, within REL_TOL. A looser bound lets unrelated small floats agree.
REL_TOL = 1e-3
ABS_TOL = 1e-2
# Partial application (red-team s33, each admitted before): HumanEval/44's change_base(x, 3)
# as "x in base 3", /49's modp(n, 101) as "2^n mod 101". So a validation problem with one
# parameter more than a task's calls pass is called with that parameter filled, at its place,
# by each constant its own test passes there as a literal (decontamination.test_constants);
# one with two more, by two one call of its test passes (/71's triangle_area(a, 4, 5), s34);
# the task's arguments in every order, on the calls of the kinds its test passes. Such an item
# is a twin by agreement (all, or nearly all as above) in MIN_DISTINCT outputs or more, all
# agreeing too, or by its answer backwards (change_base(x, 2)[::-1]: s34), or affine in it
# where no argument alone makes the expected outputs affine (`modp(n, 101) + 1`: s34), against
# problems of more than one `return` (decontamination.one_line), on the task as it is: with
# the relabelling and the plain affine rule, /53's add(x, 1), /45's triangle_area(x, h) and
# /67's n minus a constant made every task linear in one number a twin, and gcd(n, 2) every
# parity test; is_simple_power(n, 2) agreed with the seed is_power_of_two in two values (s33's
# offline probe, /work/notes/s33/partial). With the ints 0 to 10 filled in too, and items on
# the views (a list's items, a text's numbers), 8 of 67 honest tasks a probe wrote were twins
# (s34, /work/notes/s34/fp): compare_one(x, 0) is max(x, 0) item by item ("replace negatives
# with zero"), choose_num(0, x) rounds down to even, change_base(x, 10) backwards reverses
# digits, select_words(s, 0) keeps the all-vowel words. As it is, none of those, nor any of the
# 124 seeds as admitted. Missed: a bool-valued copy ("is n a power of 3", /76 with n = 3), a
# constant that is no literal of the test (base 11; base 5, which /44's test passes in a loop),
# a copy mapped over a list or a text of numbers, the answer changed otherwise (relabelled,
# held inside a longer one).


def kind(value):
    """An argument's kind, as a known task's examples and a new task's calls are compared: a
    list is a tuple (a copy may change one for the other), an int a float."""
    return "seq" if type(value) in (list, tuple) else "num" if type(value) in (int, float) \
        else type(value).__name__


def fits(args, kinds):
    """Whether a call passes arguments of kinds a known task's examples pass (kinds empty:
    any); a defaulted parameter may be passed or not."""
    mine = tuple(kind(v) for v in args)
    return not kinds or any(own[:len(mine)] == mine[:len(own)] for own in kinds)




RULES = (inspect.getsource(kind) + "\n\n" + inspect.getsource(fits) + "\n\n" + r'''
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


def number(value):
    return type(value) is int or type(value) is float and math.isfinite(value)


def answer(fn, args, expected):
    value = fn(*args)
    shown = repr(value)  # under the timer: a result's own __repr__ is the problem's code
    return shown if same(value, expected) else None, (value, shown)


SEPARATORS = "|,;:/ \t-_#"


def mapped(args, mapping):
    unpack, order, *fill = mapping
    if isinstance(unpack, str):
        args = tuple(args[0].split(unpack))
    elif unpack:
        args = tuple(args[0])
    args = args if order is None else tuple(args[j] for j in order)
    for k, blob in fill[0] if fill else ():  # a partial application: the problem's own
        # test constants at their positions (ascending), a fresh copy a call (a problem may
        # change its argument)
        args = args[:k] + (pickle.loads(blob),) + args[k:]
    return args


def orders(n, keep=True):
    """Every other order of range(n) and of all but one of it (as they are alone past
    MAX_PERMUTED); with keep, range(n) itself too."""
    kept = [[j for j in range(n) if j != k] for k in range(n)]
    if n <= MAX_PERMUTED:
        out = list(itertools.permutations(range(n)))[0 if keep else 1:] + \
            [order for rest in kept for order in itertools.permutations(rest)]
    else:
        out = ([tuple(range(n))] if keep else []) + [tuple(rest) for rest in kept]
    return out


def mappings(calls):
    arities = {len(args) for args in calls}
    tried = [(False, None)]
    n = min(arities, default=0)
    if n > 1 or len(arities) > 1 and n == 1:
        # calls of several arities (a defaulted parameter some pass) are tried cut to the
        # fewest arguments, as the rest are without it (red-team s25 F1)
        tried += [(False, order) for order in orders(n, keep=len(arities) > 1) if order]
    if all(len(args) == 1 and type(args[0]) in (list, tuple) for args in calls):
        tried.append((True, None))
    if all(len(args) == 1 and type(args[0]) is str for args in calls):
        for sep in SEPARATORS:  # the arguments written into one text ('abc|b')
            counts = {args[0].count(sep) for args in calls}
            if len(counts) == 1 and 0 < (k := counts.pop()) < MAX_PERMUTED:
                tried += [(sep, None)] + [(sep, order) for order in orders(k + 1, False)
                                          if len(order) == k + 1]
    return tried


def groups(calls):
    """Per argument with 2 or 3 values, each a small int, bool or short str (a mode flag), the
    value of each call: two problems on one flag are a twin of each on its half."""
    out = []
    for j in range(min((len(args) for args in calls), default=0)):
        values = [args[j] for args in calls]
        if all(type(v) in (bool, int, str) and len(repr(v)) <= 12 for v in values) and \
                2 <= len(set(map(label, values))) <= 3:
            out.append([label(v) for v in values])
    return out


class Evidence:
    """What the answered examples of one item say, rule by rule (twin_job's figures)."""

    def __init__(self, count, exact=False, partial=False):
        """exact: agreement alone; partial: agreement in MIN_DISTINCT outputs, the answer
        backwards, or affine where no argument alone is (PARTIAL)."""
        self.count, self.agreed, self.answered, self.counted = count, 0, 0, 0
        self.outputs, self.results = set(), set()  # agreeing outputs; results counted
        self.relabelled = {} if count >= MIN_AGREEING and not (exact or partial) else None
        self.seen, self.partial = {}, partial
        self.line, self.points = not exact, []  # expected = a * result + b, a != 0
        # partial: per argument, its (argument, expected) points while the expected outputs
        # are affine in it (a task linear in a number is no copy of a problem that is too)
        self.own, self.own_line = {}, {}
        self.spots = set() if exact else None  # where the result sits in each expected value

    def add(self, key, result, wanted, args=(), contained=True):
        """One answered example; `contained`: whether it may count for the containment rule
        (spots): a call of the kinds the problem was written for."""
        value, shown = result
        self.answered += 1
        if key is not None:
            self.agreed += 1
            self.outputs.add(key)
        if self.relabelled is not None:
            result, image = label(value), label(wanted)
            if result is None or image is None or \
                    self.relabelled.setdefault(result, image) != image or \
                    len(self.relabelled) > MAX_LABELS:
                self.relabelled = None
            else:
                self.seen[result] = self.seen.get(result, 0) + 1
        if any(type(value) is type(a) and value == a for a in args):
            return  # an argument passed through computes nothing: frame(word, left, right)
            # holds HumanEval/74's answer on (left, right), which is left
        self.counted += 1
        self.results.add(shown)
        if self.line:
            self.line = affine(self.points, value, wanted)
        if self.partial:
            for j, arg in enumerate(args):
                if self.own_line.get(j, True):
                    self.own_line[j] = affine(self.own.setdefault(j, []), arg, wanted)
        if not contained:
            self.spots = set()
        elif self.spots is None:
            self.spots = {spot for spot in itertools.islice(spots(value, shown, wanted),
                                                            2 * MAX_PACK)
                          if not self.partial or spot[0] == "reversed"}
        elif self.spots:
            self.spots = {spot for spot in self.spots if holds(spot, value, shown, wanted)}

    def dead(self, i):
        """True when no rule can call it a twin whatever examples i+1... give."""
        left = self.count - i - 1
        exact = not (self.answered - self.agreed > (1 - TWIN_FRACTION) * self.count + 1e-9
                     or self.agreed + left < min(MIN_AGREEING, self.count))
        return not (exact or self.answered + left >= MIN_AGREEING and
                    self.relabelled is not None or self.counted + left >= MIN_AGREEING and
                    (self.line or self.spots is None or self.spots))

    def twin(self):
        n = self.answered
        # the relabelling and the answer's changes need the problem to answer nearly all the
        # examples: is_simple_power (HumanEval/76) answered a bisect_right task's 9 of 12 (it
        # raised on the rest), True exactly where the expected index was 1, and 0 where False
        most = n >= TWIN_FRACTION * self.count - 1e-9
        return self.agreed == self.count and (not self.partial or
                                              len(self.outputs) >= MIN_DISTINCT) or \
            (self.agreed >= MIN_AGREEING and len(self.outputs) >= MIN_DISTINCT and
             self.agreed >= TWIN_FRACTION * n - 1e-9) or most and (
                self.relabelled is not None and len(self.relabelled) >= 2 and
                min(self.seen.values()) >= 2 and n >= MIN_AGREEING and
                len(set(self.relabelled.values())) == len(self.relabelled) or
                self.counted >= MIN_AGREEING and len(self.results) >= MIN_DISTINCT and
                bool(self.line and not any(self.own_line.values()) or self.spots))


def affine(points, x, wanted):
    """Whether `wanted` is one affine function a * x + b (a != 0, within the tolerance) of x
    here and at every one of `points`, which (x, wanted) joins."""
    if not (number(x) and number(wanted)):
        return False
    points.append((x, wanted))
    try:
        if len({at for at, _ in points}) < 2:
            return all(same(y, points[0][1]) for _, y in points)
        (x1, y1), (x2, y2) = points[0], next(p for p in points if p[0] != points[0][0])
        a = (y2 - y1) / (x2 - x1)
        return a != 0 and all(same(a * (x - x1) + y1, y) for x, y in points)
    except (OverflowError, ZeroDivisionError):
        return False


def spots(value, shown, wanted):
    """Where `value` sits inside `wanted`: an item of a short list or tuple, or its text at an
    offset from either end of a str (the answer wrapped, paired with a by-product, or
    printed in a sentence), or all of it backwards (a str, list or tuple reversed)."""
    if backwards(value, wanted):
        yield ("reversed",)
    if type(wanted) in (list, tuple) and len(wanted) <= MAX_PACK:
        for k, item in enumerate(wanted):
            if same(value, item):
                yield "item", len(wanted), k
    elif type(wanted) is str:
        text = value if type(value) is str else shown
        if text and text != wanted:
            k = wanted.find(text)
            while k >= 0:
                yield "head", k
                yield "tail", len(wanted) - k
                k = wanted.find(text, k + 1)


def backwards(value, wanted):
    """Whether `wanted` is `value` reversed: a str, or a list or tuple (either for either)."""
    if type(wanted) is str:
        return type(value) is str and value[::-1] == wanted
    return type(wanted) in (list, tuple) and type(value) in (list, tuple) and \
        len(value) == len(wanted) and same(list(value)[::-1], wanted)


def holds(spot, value, shown, wanted):
    """Whether `value` sits in `wanted` at `spot` (one of spots()): a check in one pass, so
    that a long expected output with many occurrences costs no more than one."""
    if spot[0] == "reversed":
        return backwards(value, wanted)
    if spot[0] == "item":
        return type(wanted) in (list, tuple) and len(wanted) == spot[1] and \
            same(value, wanted[spot[2]])
    if type(wanted) is not str:
        return False
    text = value if type(value) is str else shown
    k = spot[1] if spot[0] == "head" else len(wanted) - spot[1]
    return bool(text) and text != wanted and k >= 0 and wanted.startswith(text, k)


def twin(fn, blobs, expected, mapping, flags, allowed=float("inf"), kinds=(), written_for=(),
         partial=False):
    """Whether fn is the task under the mapping, and the seconds its unanswered calls took; it
    is no twin once they take more than `allowed`. Calls not of `kinds` are not answered;
    those not of `written_for` do not count for the containment rule. A `partial` mapping (a
    constant filled in) is a twin only by agreeing, on all or nearly all, in MIN_DISTINCT
    outputs or more, by answering backwards, or affinely where no argument alone does, and on
    no flag (PARTIAL)."""
    whole, raising = Evidence(len(blobs), partial=partial), 0.0
    if partial:
        flags = ()
    parts = {}  # (flag, value): the evidence of the examples with that value
    for j, values in enumerate(flags):
        for v in set(values):
            if values.count(v) >= MIN_AGREEING:
                parts[j, v] = Evidence(values.count(v), exact=True)
    for i, (blob, wanted) in enumerate(zip(blobs, expected)):
        began = time.process_time()  # CPU, as the timer (twin_job.CALL_S)
        try:
            args = mapped(pickle.loads(blob), mapping)
            if not fits(args, kinds):
                continue  # not of the kinds the known task was admitted on: not answered
            key, result = guarded(answer, fn, args, wanted)
        except BaseException as e:  # not answered (raised, or slower than CALL_S: Late):
            # no evidence either way, while the problem's unanswered calls on this task take
            # under RAISE_S in all. A Late used to end the item as no twin: an efficient
            # is_prime plus is_prime(10000019), where HumanEval/31 loops to n, was admitted
            # (red-team s25, the slow example). It still does once an answer disagreed (only
            # near-twins wait: waiting on every one doubled the twin run's CPU on the
            # augmented seed pool), and it did before any answer, so the slow inputs written
            # first hid the copy (s29).
            if isinstance(e, Late) and whole.agreed < whole.answered:
                return False, raising
            raising += time.process_time() - began
            if raising > allowed:
                return False, raising  # RAISE_S
            continue
        whole.add(key, result, wanted, args, fits(args, written_for))
        for j, values in enumerate(flags):
            if (j, values[i]) in parts:
                parts[j, values[i]].add(key, result, wanted)
        if whole.dead(i) and all(p.agreed < p.answered for p in parts.values()):
            return False, raising  # no twin whatever the rest give
    return whole.twin() or any(p.agreed == p.answered >= MIN_AGREEING and
                               p.answered >= TWIN_FRACTION * p.count - 1e-9 and
                               len(p.outputs) >= MIN_DISTINCT for p in parts.values()), raising
''').replace("TWIN_FRACTION", repr(TWIN_FRACTION)) \
    .replace("MIN_AGREEING", repr(MIN_AGREEING)).replace("MIN_DISTINCT", repr(MIN_DISTINCT)) \
    .replace("MAX_PERMUTED", repr(MAX_PERMUTED)).replace("MAX_LABELS", repr(MAX_LABELS)) \
    .replace("MAX_PACK", repr(MAX_PACK)).replace("REL_TOL", repr(REL_TOL)) \
    .replace("ABS_TOL", repr(ABS_TOL))
