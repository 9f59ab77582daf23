"""Validation twins: a task that computes a validation problem is rejected, by execution."""

import pytest

from spade_ray.evaluation.humaneval import load_problems
from spade_ray.records import Limits, TaskFamily, TaskSource
from spade_ray.tasks.admission import AdmissionConfig, admit
from spade_ray.tasks.decontamination import HeldOut, held_out, known_tasks, twins
from spade_ray.tasks.format import parse_proposal
from spade_ray.tasks.seeds import load_seed_proposals

LIMITS = Limits(timeout_s=1.0, cpu_s=1.0)
HUMANEVAL = held_out(load_problems())  # what a run holds out: all of it, not its subset
OWN_INPUTS = AdmissionConfig(augment_inputs=0)  # the examples each test writes, no more


def proposal(body: str, inputs: str, description: str = "Do it."):
    return parse_proposal(f"Description: {description}\nReference:\n{body}\nInputs:\n{inputs}")


# HumanEval/13 (greatest_common_divisor) under another name, description and loop.
EUCLID = proposal("def common_part(x: int, y: int) -> int:\n    while y:\n"
                  "        x, y = y, x % y\n    return x\n",
                  "common_part(12, 18)\ncommon_part(7, 3)\ncommon_part(100, 75)\n"
                  "common_part(9, 6)", "The largest number dividing both.")


def verdict(sandbox, p, held_out, config=OWN_INPUTS):
    return admit([p], [TaskFamily.CODEGEN], ["math"], sandbox, LIMITS, config,
                 held_out=held_out)[0]


def test_a_task_that_computes_a_validation_problem_is_rejected(sandbox):
    assert verdict(sandbox, EUCLID, ()).valid
    assert verdict(sandbox, EUCLID, HUMANEVAL).reason == "validation_twin:HumanEval/13"


def test_a_twin_agrees_as_data_on_every_example(sandbox):
    even = proposal("def f(n: int) -> bool:\n    return n % 2 == 0", "f(2)\nf(3)\nf(8)\nf(11)")
    as_int = HeldOut("H/int", "def g(n):\n    return int(n % 2 == 0)\n", "g")
    wrong_once = HeldOut("H/once", "def g(n):\n    return n % 2 == 0 and n != 8\n", "g")
    same = HeldOut("H/same", "def g(k):\n    return not k % 2\n", "g")
    assert verdict(sandbox, even, (as_int, wrong_once)).valid  # 1 is not True
    assert verdict(sandbox, even, (as_int, same)).reason == "validation_twin:H/same"


WORDS = ("aba", "abc", "", "xyzzyx", "ab", "racecar", "hello", "noon")


@pytest.mark.parametrize("yes, no", [("1", "0"), ("'yes'", "'no'"), ("False", "True")])
def test_a_bool_problem_with_its_answer_relabelled_is_a_twin(sandbox, yes, no):
    """HumanEval/48 (is_palindrome) answering 1/0, 'yes'/'no' or the negated bool: all were
    admitted, as were the same copies of /57 and /3 (red-team s24 H3)."""
    mirror = proposal(f"def mirror(word: str):\n    return {yes} if word == word[::-1] else {no}\n",
                      "\n".join(f"mirror({w!r})" for w in WORDS))
    assert verdict(sandbox, mirror, (problem("HumanEval/48"),)).reason == \
        "validation_twin:HumanEval/48"


def test_another_bool_task_is_no_relabelled_twin(sandbox):
    """Ascending only against HumanEval/57's monotonic (either way): a descending list is True
    for /57 and for no relabelling of ascending's answers that maps the others."""
    ascending = proposal("def ascending(xs: list) -> bool:\n"
                         "    return all(a <= b for a, b in zip(xs, xs[1:]))\n",
                         "\n".join(f"ascending({xs})" for xs in (
                             [1, 2, 3], [3, 2, 1], [1, 3, 2], [5, 5, 6], [9, 4, 4], [2, 1, 2],
                             [0, 1], [4, 8, 1])))
    assert verdict(sandbox, ascending, (problem("HumanEval/57"),)).valid


def test_a_twin_with_one_special_cased_input_is_still_a_twin(sandbox):
    """HumanEval/13's gcd plus `if a == 0 and b == 0: return -1` and the input (0, 0): its 12
    other examples (augmented, as in the gemma configs) agree, and it was admitted (red-team
    pass 10)."""
    special = proposal("def common_divisor(a: int, b: int) -> int:\n"
                       "    if a == 0 and b == 0:\n        return -1\n"
                       "    while b:\n        a, b = b, a % b\n    return a\n",
                       "common_divisor(12, 18)\ncommon_divisor(35, 14)\ncommon_divisor(9, 28)\n"
                       "common_divisor(100, 75)\ncommon_divisor(0, 0)")
    augmented = AdmissionConfig(augment_inputs=8)
    assert verdict(sandbox, special, (), augmented).valid
    assert verdict(sandbox, special, HUMANEVAL, augmented).reason == \
        "validation_twin:HumanEval/13"


SQUARE = "def f(n: int) -> int:\n    return n * n\n"
SMALL_ONLY = HeldOut("H/small", "def g(n):\n    if n > 10:\n        raise ValueError(n)\n"
                     "    return n * n\n", "g")  # answers 10 and below alone


def calls(*ns: int) -> str:
    return "\n".join(f"f({n})" for n in ns)


def test_examples_the_validation_solution_does_not_answer_do_not_hide_a_twin(sandbox):
    """Inputs outside the validation problem's domain (it raises) say nothing either way: a
    generator adding some must not hide the agreement on the rest."""
    outside = proposal(SQUARE, calls(1, 2, 3, 4, 5, 6, 11, 20))
    assert verdict(sandbox, outside, (SMALL_ONLY,)).reason == "validation_twin:H/small"


def test_a_validation_solution_that_answers_too_few_examples_is_no_twin(sandbox):
    few = proposal(SQUARE, calls(1, 2, 3, 4, 5, 11, 20, 30))  # 5 answered: too few to tell
    assert verdict(sandbox, few, (SMALL_ONLY,)).valid


def test_agreeing_on_all_but_a_few_in_two_values_is_no_twin(sandbox):
    """A bool agrees by chance: augmented, the seed is_power_of_two agreed with HumanEval/138
    on 12 of 14 examples."""
    even = proposal("def f(n: int) -> bool:\n    return n % 2 == 0",
                    calls(2, 3, 8, 4, 11, 20, 7, 6))
    but_once = HeldOut("H/once", "def g(n):\n    return n % 2 == 0 and n != 8\n", "g")
    assert verdict(sandbox, even, (but_once,)).valid


def test_a_validation_solution_that_hangs_or_breaks_is_no_twin(sandbox):
    hangs = HeldOut("H/hangs", "def g(a, b):\n    while True:\n        pass\n", "g")
    broken = HeldOut("H/broken", "def g(a, b) return a\n", "g")
    imports_nothing = HeldOut("H/missing", "x = 1\n", "g")
    assert verdict(sandbox, EUCLID, (hangs, broken, imports_nothing)).valid



@pytest.mark.parametrize("wait_s", [0.08, 0.3])
def test_a_twin_whose_calls_wait_for_a_core_is_still_a_twin(sandbox, wait_s):
    """A call that waits for a core on a loaded machine takes clock time and no CPU: the sleep
    stands for that here. With a clock timer, a verbatim HumanEval/31 copy's first call was
    Late, which ends the item as no twin, and the copy was admitted (a `make test` beside a
    `make run`, s28); and the watch killed an item silent for its examples x CALL_S plus
    ITEM_SLACK_S in clock time (6 calls of 0.3 s: 1.8 s against 0.8 s), stuck or not."""
    waits = HeldOut("H/waits", f"import time\ndef g(n):\n    time.sleep({wait_s})\n"
                    "    return n * n\n", "g")
    copy = proposal(SQUARE, calls(1, 2, 3, 4, 5, 6))
    assert verdict(sandbox, copy, (waits,)).reason == "validation_twin:H/waits"

def test_the_seed_pool_has_no_twin_in_humaneval(sandbox):
    # Five seeds had one (max_of, is_prime, gcd, prime_factors, and insertion_sort on inputs
    # where sorting by digit sum sorts too): the seeds of every run trained on validation. Two
    # more hid behind one input (red-team pass 10): count_vowels (HumanEval/64 raises on "")
    # and fibonacci (/55 is too slow on fib(50)).
    seeds = load_seed_proposals()
    verdicts = admit([p for _, p in seeds], [TaskFamily.CODEGEN] * len(seeds),
                     [t for t, _ in seeds], sandbox, LIMITS, source=TaskSource.SEED)
    examples = [v.task.tests.examples for v in verdicts]
    check = twins(examples, HUMANEVAL, sandbox, LIMITS)
    assert check.found == (None,) * len(seeds) and check.slow == (False,) * len(seeds)


def problem(problem_id: str) -> HeldOut:
    return next(h for h in HUMANEVAL if h.problem_id == problem_id)


PAIRS = [("aaaa", "aa"), ("abcabcab", "ab"), ("xyzxyzx", "x"), ("banana", "ana"),
         ("mississippi", "ss"), ("hello", "l")]
COUNTING = ("    times = 0\n    for i in range(len(string) - len(substring) + 1):\n"
            "        if string[i:i+len(substring)] == substring:\n            times += 1\n"
            "    return times\n")  # HumanEval/18's body
HOW_MANY_TIMES = proposal("def how_many_times(string: str, substring: str) -> int:\n"
                          + COUNTING, "\n".join(f"how_many_times({a!r}, {b!r})"
                                                for a, b in PAIRS))


def test_one_task_with_a_big_input_leaves_the_rest_of_its_chunk_checked(sandbox):
    """HumanEval/60's sum(range(n + 1)) on 10**10 is one C call that the timer inside the
    twin run cannot stop: it ran past the chunk's whole budget, and a verbatim HumanEval/18 in
    the same chunk was admitted (red-team s23 H1). Now that call alone is stopped, as slow."""
    digits = proposal("def digit_count(n: int) -> int:\n    count = 0\n    while n > 0:\n"
                      "        n //= 10\n        count += 1\n    return count\n",
                      "digit_count(10000000000)\ndigit_count(7)\ndigit_count(123)\n"
                      "digit_count(4567)")
    held = (problem("HumanEval/60"), problem("HumanEval/18"))  # a 2.6 s budget: soon spent
    chunk = admit([HOW_MANY_TIMES, digits], [TaskFamily.CODEGEN] * 2, ["text", "math"],
                  sandbox, LIMITS, OWN_INPUTS, held_out=held)
    assert [v.reason for v in chunk] == ["validation_twin:HumanEval/18", ""]


def test_one_task_that_keeps_the_solutions_busy_leaves_the_rest_of_its_chunk_checked(sandbox):
    """Calls just under CALL_S that raise (an item stops early on wrong answers, not on raises)
    outlasted the chunk's whole budget: the run failed twice and every task of the chunk, a
    verbatim HumanEval/13 here, was rejected as sandbox_error (red-team s24). Now the busy task
    alone is left unchecked, once it has spent its allowance. (Raising calls may take RAISE_S
    a problem and task since red-team s25 F3, so these answer: right on all but the last
    four examples.)"""
    busy = tuple(HeldOut(f"H/busy{i}", "import time\ndef g(a, b, c):\n    time.sleep(0.03)\n"
                         "    return a - b * c + a % 7 if b < 8 else 0\n", "g")
                 for i in range(8))
    big = proposal("def spread(a: int, b: int, c: int) -> int:\n    return a - b * c + a % 7\n",
                   "\n".join(f"spread({10 ** 7 + 7919 * i}, {i}, {i + 2})" for i in range(13)))
    chunk = admit([EUCLID, big], [TaskFamily.CODEGEN] * 2, ["math", "math"], sandbox, LIMITS,
                  held_out=(problem("HumanEval/13"), *busy))
    assert [v.reason for v in chunk] == ["validation_twin:HumanEval/13", "twin_check_slow"]


def test_a_known_program_stuck_in_one_call_costs_one_item_per_run(sandbox):
    """An archived reference stuck in one C call on foreign inputs was killed on every (task,
    mapping) item, on every chunk: 3 new tasks waited 45 s and were charged 14.7 s of CPU each
    (red-team s24 H1). Once killed it is dropped for the rest of the run; with the allowance of
    one stuck item per task, two kills of it made every task here twin_check_slow."""
    stuck = HeldOut("archive/stuck", "def g(a, b=1, c=0):\n    return sum(range(10 ** 12))\n",
                    "g")
    pair = [proposal(f"def f{i}(a: str, b: str) -> str:\n    return a * {i + 2} + b\n",
                     "\n".join(f"f{i}({a!r}, {b!r})" for a, b in PAIRS[:4])) for i in range(2)]
    chunk = admit([*pair, EUCLID], [TaskFamily.CODEGEN] * 3, ["text", "text", "math"], sandbox,
                  LIMITS, held_out=(problem("HumanEval/13"),), known=(stuck,))
    assert [v.reason for v in chunk] == ["", "", "validation_twin:HumanEval/13"]


def test_a_problem_cannot_change_how_results_compare(sandbox):
    """All problems are defined in one process before any item runs: an archived reference's
    module-level `math.isclose = ...` (static.py refuses it now) made every float agree, and
    an unrelated task was a known_twin (red-team s24 H2). TWINS binds its helpers first."""
    patches = HeldOut("H/patches", "import math\nmath.isclose = lambda a, b, **tol: True\n"
                      "def g(x):\n    return 0.5\n", "g")
    third = proposal("def third(x: int) -> float:\n    return x / 3\n",
                     "\n".join(f"third({n})" for n in (1, 4, 9, 10, 22, 35)))
    assert verdict(sandbox, third, (patches,)).valid


def test_a_problem_cannot_change_the_modules_the_others_use(sandbox):
    """An archived reference's `bisect.bisect_right = bisect.bisect_left` made the seed
    first_greater compute another thing in the twin run, and its copy was admitted (red-team
    s24 H2). The shared modules are put back after each problem is defined."""
    patches = HeldOut("H/patches", "import bisect\nbisect.bisect_right = bisect.bisect_left\n"
                      "def g(x):\n    return None\n", "g")
    after = HeldOut("H/after", "import bisect\ndef h(xs, x):\n"
                    "    return bisect.bisect_right(xs, x)\n", "h")
    copy = proposal("def after(xs: list, x: int) -> int:\n"
                    "    return sum(1 for v in xs if v <= x)\n",
                    "\n".join(f"after([1, 2, 2, 3, 5, 5, 8], {x})" for x in (1, 2, 4, 5, 7, 9)))
    assert verdict(sandbox, copy, (patches, after)).reason == "validation_twin:H/after"


def test_a_twin_run_that_fails_twice_rejects_its_tasks(sandbox):
    """Not checked is not admitted: a failed run used to mean no twin for every task."""
    exits = HeldOut("H/exits", "import os\nos._exit(3)\n", "g")  # ends the whole run
    assert verdict(sandbox, EUCLID, (exits,)).reason == "sandbox_error"


def test_the_twin_runs_cpu_is_charged_to_the_tasks_it_checked(sandbox):
    """It was charged to none: a chunk's run of up to 100 s went uncounted (red-team s23 H1)."""
    burns = HeldOut("H/burns", "x = sum(range(10 ** 8))\n", "g")  # 0.8-2.5 s in one C call
    alone = verdict(sandbox, EUCLID, ())
    others = tuple(h for h in HUMANEVAL if h.problem_id != "HumanEval/13")  # a budget for it
    checked = verdict(sandbox, EUCLID, (burns, *others))
    assert alone.valid and checked.valid and checked.cpu_s > alone.cpu_s + 0.5


def swapped(name: str) -> str:
    return "\n".join(f"{name}({b!r}, {a!r})" for a, b in PAIRS)


def test_arguments_in_another_order_hide_no_twin(sandbox):
    """A one-line disguise a solver carries straight back to the validation problem (red-team
    s23 H2), as each of the next ones."""
    occurrences = proposal("def occurrences(substring: str, string: str) -> int:\n"
                           + COUNTING, swapped("occurrences"))
    in_base = proposal("def in_base(base: int, x: int) -> str:\n    ret = ''\n"
                       "    while x > 0:\n        ret = str(x % base) + ret\n"
                       "        x //= base\n    return ret\n",
                       "in_base(3, 8)\nin_base(2, 100)\nin_base(7, 255)\nin_base(4, 64)\n"
                       "in_base(9, 999)\nin_base(5, 35)")
    assert verdict(sandbox, occurrences, (problem("HumanEval/18"),)).reason == \
        "validation_twin:HumanEval/18"
    assert verdict(sandbox, in_base, (problem("HumanEval/44"),)).reason == \
        "validation_twin:HumanEval/44"


def test_an_unused_extra_argument_hides_no_twin(sandbox):
    extra = proposal("def occurrences(string: str, substring: str, start: int) -> int:\n"
                     + COUNTING, "\n".join(f"occurrences({a!r}, {b!r}, {k})"
                                           for k, (a, b) in enumerate(PAIRS)))
    assert verdict(sandbox, extra, (problem("HumanEval/18"),)).reason == \
        "validation_twin:HumanEval/18"


def test_arguments_packed_in_one_tuple_hide_no_twin(sandbox):
    packed = proposal("def occurrences(pair: tuple) -> int:\n    string, substring = pair\n"
                      + COUNTING, "\n".join(f"occurrences(({a!r}, {b!r}))" for a, b in PAIRS))
    assert verdict(sandbox, packed, (problem("HumanEval/18"),)).reason == \
        "validation_twin:HumanEval/18"


def test_a_tuple_for_a_list_hides_no_twin(sandbox):
    once = proposal("def unique_once(numbers: list) -> tuple:\n    import collections\n"
                    "    c = collections.Counter(numbers)\n"
                    "    return tuple(n for n in numbers if c[n] <= 1)\n",
                    "unique_once([1, 2, 3, 2, 4])\nunique_once([5, 5, 6, 7])\n"
                    "unique_once([9, 8, 9, 8, 1])\nunique_once([4, 3, 2, 3])\n"
                    "unique_once([7, 1, 7, 2, 2, 3])\nunique_once([6, 0, 6, 5])")
    assert verdict(sandbox, once, (problem("HumanEval/26"),)).reason == \
        "validation_twin:HumanEval/26"


@pytest.mark.parametrize("places", [12, 2])
def test_a_rounded_float_hides_no_twin(sandbox, places):
    """Rounded to 12 places, HumanEval/4's own solution passed the admitted task (the grader
    allows 1e-9); to 2 places is how a description asks for it."""
    spread = proposal("def spread(numbers: list) -> float:\n"
                      "    mean = sum(numbers) / len(numbers)\n"
                      f"    return round(sum(abs(x - mean) for x in numbers) / len(numbers), "
                      f"{places})\n",
                      "spread([1.1, 2.3, 4.7])\nspread([0.3, 0.7, 1.9, 2.2])\n"
                      "spread([5.5, 1.25, 3.3])\nspread([9.1, 2.2, 7.7, 0.4])\n"
                      "spread([1.0, 2.0, 3.0, 4.0])\nspread([2.71, 3.14, 1.41])")
    assert verdict(sandbox, spread, (problem("HumanEval/4"),)).reason == \
        "validation_twin:HumanEval/4"


def test_a_known_task_under_new_text_is_a_copy(sandbox, seeds):
    # Red-team pass 11: a seed's code with a sentence as a statement, its last return through a
    # variable, under a re-worded description, was new to the hash and to near-duplicates.
    # What it computes is the seed: the twin test with the run's known tasks says so.
    body = ("def squeeze(text: str) -> str:\n    out = ''\n"
            "    'Walk the text once, keeping the count of the current run.'\n"
            "    for ch, group in groupby(text):\n        out += f'{ch}{len(list(group))}'\n"
            "    result = out\n    return result\n")
    calls = "squeeze('aaabcc')\nsqueeze('')\nsqueeze('zz')\nsqueeze('abc')\nsqueeze('xxxyyz')"
    copy = proposal("from itertools import groupby\n\n" + body, calls,
                    "Shorten a string by writing each block of one letter as letter and length.")
    known = known_tasks([t for t in seeds if t.family is TaskFamily.CODEGEN])
    assert verdict(sandbox, copy, HUMANEVAL).valid
    (copied,) = admit([copy], [TaskFamily.CODEGEN], ["strings"], sandbox, LIMITS,
                      held_out=HUMANEVAL, known=known)
    assert copied.reason == "known_twin"
    # the seed pool's own: one seed computes another on its examples (an index in a sorted
    # list of distinct items is its last index too)
    twins_found = {t.entry_point: twins([t.tests.examples], [k for k in known
                                        if k.problem_id != t.task_id], sandbox,
                                        LIMITS).found[0]
                   for t in seeds if t.family is TaskFamily.CODEGEN}
    assert {name for name, twin in twins_found.items() if twin} == {"binary_search"}
