"""Validation twins: a task that computes a validation problem is rejected, by execution."""

from spade_ray.evaluation.humaneval import load_problems
from spade_ray.records import Limits, TaskFamily, TaskSource
from spade_ray.tasks.admission import AdmissionConfig, admit
from spade_ray.tasks.decontamination import HeldOut, held_out, twins
from spade_ray.tasks.format import parse_proposal
from spade_ray.tasks.seeds import load_seed_proposals

LIMITS = Limits(timeout_s=1.0, cpu_s=1.0)
HUMANEVAL = held_out(load_problems())  # what a run holds out: all of it, not its subset


def proposal(body: str, inputs: str, description: str = "Do it."):
    return parse_proposal(f"Description: {description}\nReference:\n{body}\nInputs:\n{inputs}")


# HumanEval/13 (greatest_common_divisor) under another name, description and loop.
EUCLID = proposal("def common_part(x: int, y: int) -> int:\n    while y:\n"
                  "        x, y = y, x % y\n    return x\n",
                  "common_part(12, 18)\ncommon_part(7, 3)\ncommon_part(100, 75)\n"
                  "common_part(9, 6)", "The largest number dividing both.")


def verdict(sandbox, p, held_out, config=AdmissionConfig()):
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


def test_the_seed_pool_has_no_twin_in_humaneval(sandbox):
    # Five seeds had one (max_of, is_prime, gcd, prime_factors, and insertion_sort on inputs
    # where sorting by digit sum sorts too): the seeds of every run trained on validation. Two
    # more hid behind one input (red-team pass 10): count_vowels (HumanEval/64 raises on "")
    # and fibonacci (/55 is too slow on fib(50)).
    seeds = load_seed_proposals()
    verdicts = admit([p for _, p in seeds], [TaskFamily.CODEGEN] * len(seeds),
                     [t for t, _ in seeds], sandbox, LIMITS, source=TaskSource.SEED)
    examples = [v.task.tests.examples for v in verdicts]
    assert twins(examples, HUMANEVAL, sandbox, LIMITS) == [None] * len(seeds)
