"""Admission by execution: one task per rule, breaking exactly that rule (real sandbox)."""

import dataclasses
import functools
import json

import pytest

from spade_ray.execution import canonical
from spade_ray.records import ExecResult, ExecStatus, Limits, TaskFamily, TaskSource
from spade_ray.tasks.admission import AdmissionConfig, admit
from spade_ray.tasks.diversity import normalised_hash
from spade_ray.tasks.driver import DRIVER, answers, driver_limits, job
from spade_ray.tasks.format import parse_proposal

CODEGEN, REPAIR, PREDICT = TaskFamily.CODEGEN, TaskFamily.REPAIR, TaskFamily.PREDICT
LIMITS = Limits(timeout_s=1.0, cpu_s=1.0)
AUGMENT = AdmissionConfig(augment_inputs=8)
# The generator's own inputs alone (by default admission adds 16 mutations of them): what these
# tests pin is what admission does with the examples they write.
OWN_INPUTS = AdmissionConfig(augment_inputs=0)


def proposal(body: str, inputs: str, description: str = "Do it."):
    return parse_proposal(f"Description: {description}\nReference:\n{body}\nInputs:\n{inputs}")


GOOD = proposal("def clip_sum(xs: list[int], k: int) -> int:\n"
                "    total = 0\n"
                "    for x in xs:\n"
                "        if x <= k:\n"
                "            total += x\n"
                "    return total\n",
                "clip_sum([1, 2, 3], 2)\nclip_sum([5, 1, 2], 5)\nclip_sum([], 3)\n"
                "clip_sum([4, 4], 4)\nclip_sum([7, 1, 6], 6)")


def verdict(sandbox, p, family=CODEGEN, config=OWN_INPUTS, limits=LIMITS):
    return admit([p], [family], ["lists"], sandbox, limits, config)[0]


@pytest.mark.parametrize("family", list(TaskFamily))
def test_a_good_program_becomes_a_task_of_every_family(sandbox, family):
    v = verdict(sandbox, GOOD, family)
    assert v.valid, v.reason
    task = v.task
    assert task.family is family and task.topic == "lists"
    assert v.mutation_score is not None and v.mutation_score >= 0.5
    if family is PREDICT:
        assert len(task.tests.examples) == 1 and task.tests.entry_point == "answer"
        assert canonical.decode(task.visible[0].args) == ([4, 4], 4)
        assert canonical.decode(task.tests.examples[0].expected) == 8
    else:
        assert [canonical.decode(e.expected) for e in task.tests.examples] == [3, 8, 0, 8, 7]
        assert len(task.visible) == 2
    if family is REPAIR:
        assert task.buggy and task.buggy != task.reference
        assert not sandbox.check(task.buggy, task.tests).passed
        assert sandbox.check(task.reference, task.tests).passed


@pytest.mark.parametrize("body, reason", [
    ("import random\ndef f(n: int) -> int:\n    return random.randint(0, n)", "forbidden:random"),
    ("import os\ndef f(n: int) -> int:\n    return n + len(os.listdir('.'))", "forbidden:os"),
    ("def f(n: int) -> int:\n    print(n)\n    return n + 1", "forbidden:print"),
    ("def f(n: int) -> int:\n    return id(n) % 7 + n", "forbidden:id"),
    ("def f(n: int) -> int:\n    return n.__class__(n + 1)", "forbidden:__class__"),
    ("C = [0]\ndef f(n: int) -> int:\n    global C\n    C[0] += 1\n    return n + C[0]",
     "forbidden:global"),
    ("for i in range(3):\n    pass\ndef f(n: int) -> int:\n    return n + 1", "module_code"),
    # a red-team pass had this admitted: its answers flip every 3 s (tests/tasks/test_static.py)
    ("import statistics\ndef f(n: int) -> int:\n"
     "    return 2 * n + int(statistics.sys.modules['time'].time() // 3) % 2", "forbidden:time"),
    # red-team pass 10: the def line the solver's prompt ends with carried the answer
    ("def f(n: int, g=lambda n: n * n + 1) -> int:\n    return g(n)", "signature:default"),
])
def test_static_rules(sandbox, body, reason):
    assert verdict(sandbox, proposal(body, "f(1)\nf(2)")).reason == reason


@pytest.mark.parametrize("flip", [
    "int(time.time() // 3) % 2", "time.time_ns() // 3_000_000_000 % 2",
    "int(time.monotonic() // 3) % 2", "time.localtime().tm_sec // 3 % 2",
    "int(time.strftime('%S')) // 3 % 2", "time.gmtime().tm_sec // 3 % 2",
    "int(time.clock_gettime(time.CLOCK_REALTIME) // 3) % 2"])
def test_a_reference_that_reads_the_clock_is_nondeterministic_in_the_driver(sandbox, flip):
    """The runtime back-up of the static rules: were a way to the clock to pass them, the
    driver's clocks jump at every read, so the reference disagrees with itself. (The driver is
    given `import time` directly here; admission's static rules refuse it.)"""
    reference = f"import time\ndef f(n: int) -> int:\n    return 2 * n + {flip}"
    run = sandbox.run(DRIVER, job(reference, "f", [(n,) for n in range(8)]),
                      limits=driver_limits(LIMITS, AdmissionConfig().max_reference_cpu_s))
    assert answers(run, 8, AdmissionConfig().max_reference_cpu_s) == "nondeterministic"


def test_a_reference_that_loops_forever_is_a_timeout(sandbox):
    p = proposal("def f(n: int) -> int:\n    while True:\n        n += 1", "f(1)\nf(2)")
    assert verdict(sandbox, p).reason == "reference_timeout"


def test_a_looping_reference_is_stopped_at_twice_the_slow_bound(sandbox):
    """Not at the task's limits times the driver's runs (6 s of CPU under LIMITS): 2 x 0.2 s
    per pass, 3 interpreters, plus their start-up."""
    p = proposal("def f(n: int) -> int:\n    while True:\n        n += 1", "f(1)\nf(2)")
    v = verdict(sandbox, p, config=AdmissionConfig(augment_inputs=0, max_reference_cpu_s=0.2))
    assert v.reason == "reference_timeout" and v.cpu_s < 4.0


def test_a_reference_that_depends_on_the_hash_seed_is_nondeterministic(sandbox):
    p = proposal("def f(s: str) -> list:\n    return list(set(s.split()))",
                 "f('a b c d e f')\nf('x y z w v')")
    assert verdict(sandbox, p).reason == "nondeterministic"


@pytest.mark.parametrize("body", [
    # an address's low bits: the same in every fresh interpreter, they follow the heap
    "def f(n: int) -> int:\n    return n + int(f'{object()}'[-4:-1], 16)",
    # a set of objects is ordered by their addresses
    "def f(n: int) -> int:\n    a, b = object(), object()\n"
    "    return n + [a, b].index(next(iter({a, b})))",
    # state kept between calls (a module's list; a mutable default is refused statically, by
    # signature_reason): an input's answer follows the calls before
    "SEEN = []\ndef f(n: int) -> int:\n    SEEN.append(n)\n    return n + len(SEEN)",
    # ... even when the count repeats with the same period in both passes (a fourth red-team
    # pass had this admitted: 4 inputs, answers by len(seen) % 4)
    "SEEN = []\ndef f(n: int) -> int:\n    SEEN.append(n)\n    return n + len(SEEN) % 4",
])
def test_a_reference_whose_answer_follows_its_process_is_nondeterministic(sandbox, body):
    """Each of these gives the same answers in two fresh interpreters, so the old check (two
    interpreters, one pass) let them through to the grader, whose verdict then followed the
    worker's history. Every interpreter now answers every input twice, on a moved heap."""
    assert verdict(sandbox, proposal(body, "f(1)\nf(5)\nf(-3)\nf(10)")).reason == \
        "nondeterministic"


def test_interpreters_that_disagree_make_a_task_nondeterministic():
    """Three interpreters, the last one's answers differ: what one bit of a random address
    layout does to one in two of them."""
    agree = json.dumps([["ok", "2"], ["ok", "6"]])
    differs = json.dumps([["ok", "2"], ["ok", "7"]])
    stdout = json.dumps([[0, agree, ""], [0, agree, ""], [0, differs, ""]])
    run = ExecResult(status=ExecStatus.OK, exit_code=0, stdout=stdout, stderr="",
                     truncated=False, wall_s=0.1, cpu_s=0.1, peak_memory_mb=10.0, env_hash="",
                     limits_enforced_by="")
    assert answers(run, 2, AdmissionConfig().max_reference_cpu_s) == "nondeterministic"
    same = dataclasses.replace(run, stdout=json.dumps([[0, agree, ""]] * 3))
    assert answers(same, 2, AdmissionConfig().max_reference_cpu_s) == [["ok", "2"], ["ok", "6"]]


def test_inputs_the_reference_raises_on_are_dropped_until_too_few_remain(sandbox):
    p = proposal("def f(n: int) -> int:\n    return 10 // n", "f(0)\nf(2)\nf(5)\nf(3)")
    v = verdict(sandbox, p)
    assert v.valid and [canonical.decode(e.args) for e in v.task.tests.examples] == \
        [(2,), (5,), (3,)]
    assert verdict(sandbox, p, config=AdmissionConfig(augment_inputs=0, min_examples=4)).reason == \
        "reference_raises"


def test_an_output_that_is_not_plain_data_is_not_an_example(sandbox):
    p = proposal("def f(n: int) -> float:\n    return n * 2 if n > 1 else float('nan')",
                 "f(0)\nf(2)\nf(3)\nf(4)")
    v = verdict(sandbox, p)
    assert v.valid and len(v.task.tests.examples) == 3


def test_a_slow_reference_is_rejected(sandbox):
    """~1 s of CPU over the driver's 12 calls: over the 0.6 s it may take, under the 2.7 s at
    which the driver is stopped (a reference past that is a timeout). The wall budget is 20x
    the CPU's: slow is a matter of CPU, and a loaded machine (make run beside make test) took
    the driver past 4x's 6.3 s of wall (reference_timeout) and LIMITS' 1:1 before that."""
    p = proposal("def f(n: int) -> int:\n    t = 0\n    for i in range(n):\n        t += i\n"
                 "    return t", "f(1500000)\nf(1500001)")
    assert verdict(sandbox, p, config=AdmissionConfig(augment_inputs=0, max_reference_cpu_s=0.2),
                   limits=Limits(timeout_s=20.0, cpu_s=1.0)).reason == "reference_slow"


def test_constant_outputs_are_rejected(sandbox):
    p = proposal("def f(s: str) -> bool:\n    return len(s) >= 0", "f('a')\nf('bc')")
    assert verdict(sandbox, p).reason == "constant_outputs"


def test_a_task_an_echo_solves_is_trivial(sandbox):
    p = proposal("def f(xs: list) -> list:\n    return sorted(xs)", "f([1, 2])\nf([3, 5, 9])")
    assert verdict(sandbox, p).reason == "trivial_passes:echo_xs"


def test_examples_that_kill_few_mutants_are_weak(sandbox):
    p = proposal("def f(a: int, b: int) -> int:\n    return a + b if a < 1000 else a - b",
                 "f(1, 2)\nf(3, 4)\nf(5, 6)")
    v = verdict(sandbox, p)
    assert v.reason == "weak_examples" and v.mutation_score < 0.5
    assert verdict(sandbox, p, config=AdmissionConfig(augment_inputs=0,
                                                      min_mutation_score=0.0)).valid


WEAK = ("    if a > 1000 and b < 7:\n        return a * b - 3\n    return a + b",
        "f(1, 2)\nf(3, 4)\nf(5, 9)\nf(10, 20)")  # the else branch is never taken


@pytest.mark.parametrize("padding", [
    # a spin that makes every mutant time out under a fixed budget (a timeout was a kill)
    "    s = 0\n    for i in range(3_000_000):\n        s ^= i\n    a += s & 0\n",
    # a guard of constant comparisons whose mutants raise on every input
    "    if not (2 < 3 and 4 > 1 and 5 - 4 == 1 and 6 // 2 == 3 and 7 % 4 == 3 and 9 >= 9):\n"
    "        raise ValueError('bad')\n",
    # the same guard written with names: its mutants are left out as killed by any input, and
    # more mutants are drawn so that the rest still make a sample
    "    two, three = 2, 3\n    if not (two < three and three > 1 and three - two == 1 and "
    "three // two == 1 and three % two == 1):\n        raise ValueError('bad')\n",
    # input-independent arithmetic added to the answer: its mutants change every answer, so
    # every input kills them (a fourth red-team pass: 0.5 where the plain reference had 0.0)
    "    k, m, n = 1, 2, 3\n    base = k * m + n - 5\n    a += base\n",
])
def test_padding_does_not_make_weak_examples_strong(sandbox, padding):
    """A third red-team pass had the first two admitted (mutation scores 1.0 and 0.875, where
    the same examples kill 0.125 of the plain reference's mutants)."""
    plain = proposal("def f(a: int, b: int) -> int:\n" + WEAK[0], WEAK[1])
    padded = proposal("def f(a: int, b: int) -> int:\n" + padding + WEAK[0], WEAK[1])
    # room for the spin on a loaded machine, where it took the reference past LIMITS and past
    # max_reference_cpu_s (reference_slow), and its mutants past a budget measured from the
    # reference's run before the load rose (timeouts count as kills: 0.33 with make run beside
    # make test): this test is about mutation scores, not speed
    roomy = dict(config=AdmissionConfig(augment_inputs=0, max_reference_cpu_s=10.0,
                                        check_timeout_s=4.0),
                 limits=Limits(timeout_s=4.0, cpu_s=4.0))
    assert verdict(sandbox, plain, **roomy).reason == "weak_examples"
    v = verdict(sandbox, padded, **roomy)
    assert v.reason == "weak_examples" and v.mutation_score <= 0.25


def test_a_reference_written_without_operators_is_still_mutated(sandbox):
    """Written with operator's functions and string constants, a reference had no mutation
    site, no mutation score, and weak examples admitted (a fourth red-team pass)."""
    p = proposal("import operator\ndef f(a: int, b: int) -> int:\n"
                 "    if operator.gt(a, int('5000')):\n"
                 "        return operator.sub(operator.mul(a, b), int('3'))\n"
                 "    return operator.add(a, b)", WEAK[1])
    assert verdict(sandbox, p).reason == "weak_examples"
    p = proposal("def f(s: str) -> str:\n    return s.replace('zzz', 'Q').upper()",
                 "f('abc')\nf('hello world')\nf('xy')")
    assert verdict(sandbox, p).reason == "weak_examples"


SQUARES = proposal("def squares(xs: list[int]) -> int:\n    return sum(x * x for x in xs)",
                   "squares([1, 2, 3])\nsquares([4, -5])\nsquares([7])\nsquares([2, 2, 9, 1])")
SQUARES_AGAIN = proposal("def total_power(values: list[int]) -> int:\n    total = 0\n"
                         "    for v in values:\n        total += v ** 2\n    return total",
                         "total_power([3, 1])\ntotal_power([6, -2, 5])\ntotal_power([8])\n"
                         "total_power([1, 0, 4])", "Add up the second powers.")


def test_a_task_written_twice_in_one_call_is_admitted_once(sandbox):
    """Red-team pass 12: the same task in other words and syntax, twice in one chunk, was
    admitted and paid twice (the copy test knew only the tasks of earlier chunks)."""
    verdicts = admit([SQUARES, SQUARES_AGAIN], [CODEGEN] * 2, ["lists"] * 2, sandbox, LIMITS)
    assert [v.reason for v in verdicts] == ["", "known_twin"]
    alone = admit([SQUARES_AGAIN], [CODEGEN], ["lists"], sandbox, LIMITS)
    assert alone[0].valid, alone[0].reason


def test_a_generated_reference_without_a_mutation_site_is_not_a_task(sandbox):
    p = proposal("def f(s: str) -> str:\n    return s.encode().hex()", "f('aB')\nf('xyZ')\nf('Q')")
    assert verdict(sandbox, p).reason == "no_mutants"
    seed = admit([p], [CODEGEN], ["strings"], sandbox, LIMITS, source=TaskSource.SEED)[0]
    assert seed.valid and seed.mutation_score is None  # the shipped pool is curated


def test_examples_that_catch_every_mutant_everywhere_are_strong(sandbox):
    p = proposal("def f(a: int, b: int) -> int:\n    return a * b + 1", "f(2, 3)\nf(4, 5)\nf(6, 7)")
    v = verdict(sandbox, p)
    assert v.valid and v.mutation_score == 1.0


def test_repair_needs_a_mutant_the_examples_catch(sandbox):
    p = proposal("def f(s: str) -> str:\n    return s.encode().hex()", "f('aB')\nf('bc')\nf('XyZ')")
    seed = functools.partial(admit, executor=sandbox, limits=LIMITS, source=TaskSource.SEED)
    assert seed([p], [CODEGEN], ["strings"])[0].valid  # a seed need not have a mutant
    assert seed([p], [REPAIR], ["strings"])[0].reason == "no_killed_mutant"


def test_a_repair_bug_that_reads_the_process_is_nondeterministic(sandbox):
    # Only a mutant (startswith -> endswith) reaches the branch that reads an address: its
    # copy would pass by luck. The bug runs through the driver as the reference does.
    p = proposal("def f(s: str) -> int:\n"
                 "    r = len(s) * 3 + s.count('a') * 5 - 2\n"
                 "    if s.startswith('qz'):\n"
                 "        r += int(repr(object())[-4:-1], 16) % 7\n"
                 "    return r\n",
                 "f('abcqz')\nf('banana')\nf('alphaqz')\nf('aardvark')\nf('ma')\n"
                 "f('papaya')\nf('lambdaqz')")
    for _ in range(2):
        v = verdict(sandbox, p, REPAIR, AdmissionConfig(augment_inputs=8))
        assert v.reason == "nondeterministic" or "endswith('qz')" not in v.task.buggy, v


def test_float_answers_are_compared_with_a_tolerance_the_order_of_a_sum_cannot_fail(sandbox):
    # Every mean below is right; exactly, only the reference's own order of additions passed.
    p = proposal("def mean(xs: list[float]) -> float:\n    return math.fsum(xs) / len(xs)",
                 "mean([1.5, 2.5])\nmean([1.0, 2.0, 4.5])\nmean([0.1] * 10)\n"
                 "mean([0.1, 0.2, 0.3])\nmean([0.7, 0.1, 0.3, 0.9])")
    v = verdict(sandbox, p, CODEGEN, AdmissionConfig(augment_inputs=0, min_mutation_score=0.0))
    assert v.valid and v.task.tests.float_tolerance > 0, v.reason
    means = ["import math\ndef mean(xs):\n    return math.fsum(xs) / len(xs)\n",
             "def mean(xs):\n    return sum(xs) / len(xs)\n",
             "import statistics\ndef mean(xs):\n    return statistics.mean(xs)\n",
             "def mean(xs):\n    t = 0.0\n    for x in xs:\n        t += x\n"
             "    return t / len(xs)\n"]
    assert [r.passed for r in sandbox.check_many(means, [v.task.tests] * 4)] == [True] * 4
    assert verdict(sandbox, GOOD).task.tests.float_tolerance == 0.0  # ints stay exact


def test_a_reference_whose_printed_output_lies_fails_the_trusted_check(sandbox):
    # repr says 'a', but the value is a str subclass: not plain data for the grader.
    p = proposal("def f(s: str) -> str:\n    class S(str):\n        pass\n"
                 "    return S(s + s[:1])", "f('a')\nf('bc')")
    assert verdict(sandbox, p).reason == "reference_fails_examples"


def test_the_reference_is_checked_under_the_tasks_limits_not_the_mutants_timeout(sandbox):
    # A mutants' timeout no check can meet stands for a loaded machine: the reference must
    # still be judged by what it returns.
    v = verdict(sandbox, GOOD, config=AdmissionConfig(augment_inputs=0, check_timeout_s=0.001))
    assert v.valid, v.reason


def test_sandbox_cpu_of_a_program_listed_for_several_families_counts_once(sandbox):
    v = admit([GOOD] * 3, list(TaskFamily), ["lists"] * 3, sandbox, LIMITS)
    assert all(x.valid for x in v) and v[0].cpu_s > 0
    # what the others add is their own: the repair task's bug through the driver, none else
    assert {x.family: x.cpu_s > 0 for x in v[1:]} == {f: f is REPAIR for f in list(TaskFamily)[1:]}


def test_normalised_hash_ignores_names_docstrings_and_layout():
    a = ("def total(xs):\n    '''Sum.'''\n    s = 0\n    for x in xs:\n        s += x\n"
         "    return s\n")
    b = "def add_all(values: list) -> int:\n    acc = 0\n    for v in values:  # loop\n" \
        "        acc += v\n    return acc\n"
    assert normalised_hash(a) == normalised_hash(b)
    assert normalised_hash(a) != normalised_hash(a.replace("s += x", "s -= x"))


def test_limits_of_the_task_are_kept(sandbox):
    limits = dataclasses.replace(LIMITS, memory_mb=200)
    assert verdict(sandbox, GOOD, limits=limits).task.limits == limits


def test_a_reference_that_forgot_an_import_is_admitted_with_it(sandbox):
    p = proposal("def top(s: str) -> str:\n    return Counter(s).most_common(1)[0][0]",
                 "top('abca')\ntop('zzy')\ntop('qqq')")
    v = verdict(sandbox, p)
    assert v.valid, v.reason
    assert v.task.reference.startswith("from collections import Counter\n")


def test_examples_the_description_states_are_shown_ones(sandbox):
    # Red-team pass 11: a description listing the hidden examples was admitted, and with
    # augment_inputs 0 a table of the prompt passed every one of them.
    body = ("def digit_mix(n: int) -> int:\n    total = 0\n"
            "    for i, ch in enumerate(str(n)):\n"
            "        total = total * 3 + int(ch) * (i + 2)\n    return total % 97\n")
    calls = "digit_mix(98)\ndigit_mix(1111)\ndigit_mix(67)\ndigit_mix(305)\ndigit_mix(42)"
    leaky = proposal(body, calls, "Mix the digits of n. Checks: digit_mix(67) == 57, "
                                  "digit_mix(305) == 74, digit_mix(42) == 30.")
    assert verdict(sandbox, leaky).reason == "trivial_passes:lookup"  # nothing left hidden
    task = verdict(sandbox, leaky, config=AUGMENT).task  # the augmented inputs stay hidden
    assert [canonical.decode(e.args) for e in task.visible] == [(98,), (1111,), (67,), (305,),
                                                               (42,)]
    assert task.tests.examples[:5] == task.visible and len(task.tests.examples) > 5
    assert verdict(sandbox, proposal(body, calls, "Mix the digits of n.")).valid
