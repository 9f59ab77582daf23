"""Admission's guesses: what passes without solving (tasks/guesses.py), each refused through
admit() with a real sandbox: null solvers, a table of the shown examples, and predict answers a
guess states (constants, echoes, literals, coin flips by any spelling)."""

import pytest

from spade_ray.execution import canonical
from spade_ray.tasks.admission import AdmissionConfig
from spade_ray.tasks.guesses import bit_on_an_argument, null_solvers
from spade_ray.tasks.stated import stated
from tests.tasks.test_admission import AUGMENT, CODEGEN, GOOD, PREDICT, REPAIR, proposal, verdict

UNSCORED = AdmissionConfig(augment_inputs=0, min_mutation_score=0.0)  # own inputs, any score


def test_a_bit_after_an_argument_is_found_whatever_its_spelling():
    bits = [0, 1, 1, 0, 1, 0]

    def examples(args, answer):
        return [canonical.example((a,), answer(a, b)) for a, b in zip(args, bits)]

    words = ["owl", "cat", "dog", "emu", "yak", "fox"]
    lists = [[1], [1, 2], [], [3] * 5, [4], [2] * 9]
    assert bit_on_an_argument(examples(words, lambda s, b: s + "ab"[b]))
    assert bit_on_an_argument(examples(words, lambda s, b: "xy"[b] + s))
    assert bit_on_an_argument(examples(lists, lambda xs, b: len(xs) * 2 + b))
    # another type among the answers does not hide the rest
    assert bit_on_an_argument(examples([3, 17, 40, 52, 71, 2.5], lambda n, b: n + 2 * b - 1))
    # three offsets or endings are a 1-in-3 guess: inside the band too (seven examples show it)
    thirds = [0, 2, 1, 1, 0, 2, 1]
    assert bit_on_an_argument([canonical.example((n,), n + [-1, 1, 2][t])
                               for n, t in zip([3, 17, 40, 52, 71, 88, 90], thirds)])
    assert bit_on_an_argument([canonical.example((w,), w + "abc"[t])
                               for w, t in zip(words + ["gnu"], thirds)])
    assert not bit_on_an_argument([canonical.example((n,), n + [-1, 1, 2][t])
                                   for n, t in zip([3, 17, 40, 52, 71], thirds)])  # too few
    # a rule is not a guess
    assert not bit_on_an_argument(examples(words, lambda s, b: s + "!"))
    assert not bit_on_an_argument(examples(lists, lambda xs, b: len(xs) * 2))
    assert not bit_on_an_argument(examples([3, 17, 40, 52, 71, 88], lambda n, b: n * n))


def test_a_tiny_float_answer_is_the_guess_zero(sandbox):
    # Within the tolerance float answers get, 0.0 equals any answer under 1e-9 (pass 8)
    p = proposal("def f(n: int) -> float:\n    return 0.5 ** (n + 40)", "f(1)\nf(5)\nf(9)")
    assert verdict(sandbox, p, PREDICT).reason == "trivial_passes:zero_float"
    assert verdict(sandbox, p, CODEGEN).reason == "trivial_passes:zero_float"


def test_a_predict_task_never_asks_for_an_answer_a_guess_can_give(sandbox):
    # A bool is a coin flip: a solver that guesses passes half the time, which is what the
    # generator's learnability reward pays most for. As code to write, the same is a task.
    p = proposal("def f(s: str) -> bool:\n    return s == s[::-1]",
                 "f('abba')\nf('abc')\nf('xyx')\nf('ab')")
    assert verdict(sandbox, p, CODEGEN).valid
    assert verdict(sandbox, p, PREDICT).reason in ("trivial_passes:true", "trivial_passes:false")
    # So are an empty result and an echo of the call's own argument, whichever input is asked;
    # a question is the generator's last input whose answer no such guess states.
    p = proposal("def f(n: int) -> int:\n    return n if n > 5 else n * n + 3",
                 "f(3)\nf(1)\nf(2)\nf(7)\nf(9)")
    v = verdict(sandbox, p, PREDICT)
    assert v.valid, v.reason
    assert canonical.decode(v.task.visible[0].args) == (2,)
    assert canonical.decode(v.task.tests.examples[0].expected) == 7
    p = proposal("def f(xs: list[int]) -> list[int]:\n    return xs if len(xs) > 1 else []",
                 "f([3, 1])\nf([5])\nf([2, 4, 6])")
    assert verdict(sandbox, p, PREDICT).reason in ("trivial_passes:echo_xs",
                                                   "trivial_passes:empty_list")
    # A literal of the shown program is a guess too: "even" or "odd" is a coin flip.
    p = proposal("def f(n: int) -> str:\n    return 'even' if n % 2 == 0 else 'odd'",
                 "f(4)\nf(7)\nf(10)\nf(3)")
    assert verdict(sandbox, p, CODEGEN).valid
    assert verdict(sandbox, p, PREDICT).reason == "trivial_passes:literal"
    # -1 is a literal as much as 1 is
    p = proposal("def f(n: int) -> int:\n    return 1 if n % 3 else -1", "f(4)\nf(6)")
    assert verdict(sandbox, p, PREDICT).reason == "trivial_passes:literal"


@pytest.mark.parametrize("body, reason", [
    ("def f(n: int) -> str:\n    return 'ny'[n % 7 > 3]", "few_valued"),
    ("def f(n: int) -> int:\n    return n % 2 * 2 - 1", "few_valued"),
    ("def f(n: int) -> list:\n    return [n % 7 > 3]", "bool"),
    ("def f(n: int) -> str:\n    return str(n % 7 > 3)", "bool"),
    ("def f(n: int) -> int:\n    return (n % 7 > 3) * 41 + 1", "few_valued"),
    ("def f(n: int) -> tuple:\n    return (n, n % 7 == 3)", "bool"),  # the echo is free
    # a bit around an argument: every answer differs, but each is n - 1 or n + 1 (pass 7)
    ("def f(n: int) -> int:\n    return n + 2 * (n * 1103515245 >> 16 & 1) - 1", "few_valued"),
    ("def f(n: int) -> int:\n    return 10 * n + (n % 4 == 1)", "few_valued"),
    # and its other spellings (pass 8): two multiples, a bit after an argument's text
    ("def f(n: int) -> int:\n    return n * (2 + (n * 1103515245 >> 16 & 1))", "few_valued"),
    ("def f(n: int) -> str:\n    return str(n) + 'xy'[n * 1103515245 >> 16 & 1]", "few_valued"),
])
def test_a_predict_task_whose_answers_take_two_values_is_a_coin_flip(sandbox, body, reason):
    """A third red-team pass had ones like the first four admitted as questions (and `1 if c
    else -1`, now a literal): a bool by another name, which a solver guesses right half the
    time. As code to write, each is a task."""
    p = proposal(body, "f(1)\nf(5)\nf(9)\nf(12)\nf(20)")
    assert verdict(sandbox, p, PREDICT).reason == f"trivial_passes:{reason}"
    assert verdict(sandbox, p, CODEGEN, UNSCORED).valid


SCRAMBLE = "(n * 1103515245 >> 16)"  # a bit source no reader computes


@pytest.mark.parametrize("body", [
    # a part a reader computes next to a bit: the tuple is a coin flip (pass 8's open case)
    f"def f(n: int) -> tuple:\n    return (n + 1, {SCRAMBLE} & 1)",
    f"def f(n: int) -> list:\n    return [2 * n - 3, 'ny'[{SCRAMBLE} & 1], n]",
    f"def f(n: int) -> tuple:\n    return (n + 1, n + {SCRAMBLE} % 2)",
    # three values are a 1-in-3 guess: 0.33, inside the band
    f"def f(n: int) -> int:\n    return n + [-1, 1, 2][{SCRAMBLE} % 3]",
    f"def f(n: int) -> str:\n    return 'abc'[{SCRAMBLE} % 3]",
    f"def f(n: int) -> tuple:\n    return (n, {SCRAMBLE} % 3)",
])
def test_a_predict_task_whose_answers_take_three_values_or_fewer_is_a_guess(sandbox, body):
    p = proposal(body, "\n".join(f"f({n})" for n in (1, 5, 9, 12, 20, 33, 41, 58)))
    assert verdict(sandbox, p, PREDICT).reason == "trivial_passes:few_valued"
    assert verdict(sandbox, p, CODEGEN, UNSCORED).valid


@pytest.mark.parametrize("body", [
    "def f(n: int) -> tuple:\n    return (n + 1, n * n)",  # every part read, many answers
    "def f(n: int) -> int:\n    return n % 4 + 10 * (n % 5)",  # many values, no argument
    "def f(xs: list) -> tuple:\n    return (len(xs), sum(xs) * 2 + 1)",
])
def test_a_predict_task_with_many_answers_past_what_a_reader_computes_is_asked(sandbox, body):
    inputs = "\n".join(f"f({n})" for n in (1, 5, 9, 12, 20, 33, 41, 58)) if "n:" in body \
        else "f([1])\nf([2, 7])\nf([5, 5, 1])\nf([9, 0])\nf([4, 4, 4, 8])\nf([3, 6])"
    v = verdict(sandbox, proposal(body, inputs), PREDICT, UNSCORED)
    assert v.valid, v.reason


@pytest.mark.parametrize("coin_flip", ["str(n % 7 == 3)", "'ny'[n % 7 == 3]"])
def test_a_coin_flip_behind_an_extra_branch_is_not_asked(sandbox, coin_flip):
    """A fourth red-team pass had these asked at f(52): a branch for big inputs gave the
    program more than two answers, but the asked one came from a `return` that has two."""
    p = proposal(f"def f(n: int):\n    if n > 1000:\n        return n * 3\n"
                 f"    return {coin_flip}", "f(5000)\nf(3000)\nf(45)\nf(52)")
    v = verdict(sandbox, p, PREDICT, AUGMENT)
    assert v.valid and canonical.decode(v.task.visible[0].args) == (3000,)


@pytest.mark.parametrize("family", [CODEGEN, REPAIR])
def test_a_task_a_table_of_its_shown_examples_passes_is_trivial(sandbox, family):
    # Two examples are shown (AdmissionConfig.visible_examples): a solver that returns their
    # outputs for their inputs, and one guess for any other, must fail a hidden example.
    no_hidden = proposal("def f(n: int) -> int:\n    return n * n + 1", "f(2)\nf(3)")
    assert verdict(sandbox, no_hidden, family).reason == "trivial_passes:lookup"
    # Hidden outputs all False, one of the shown outputs ...
    shown = proposal("def f(n: int) -> bool:\n    return n in (2, 3, 5, 7)",
                     "f(2)\nf(4)\nf(8)\nf(9)\nf(10)")
    assert verdict(sandbox, shown, family).reason == "trivial_passes:lookup"
    # ... or all a null constant the shown ones never give.
    constant = proposal("def f(n: int) -> int:\n    return n - 1 if n < 5 else 0",
                        "f(2)\nf(4)\nf(8)\nf(9)")
    assert verdict(sandbox, constant, family).reason == "trivial_passes:lookup"
    mixed = proposal("def f(n: int) -> bool:\n    return n in (2, 3, 5, 7)",
                     "f(2)\nf(4)\nf(5)\nf(9)")
    assert verdict(sandbox, mixed, family, UNSCORED).valid


def test_null_solvers_cover_constants_echoes_and_an_always_equal_object():
    names = set(null_solvers("def f(a: int, b: str = 'x') -> int:"))
    assert {"none", "zero", "empty_list", "echo_a", "echo_b", "always_equal"} <= names


def test_the_always_equal_object_never_passes(sandbox):
    programs = null_solvers(GOOD.signature)
    task = verdict(sandbox, GOOD).task
    assert not sandbox.check(programs["always_equal"], task.tests).passed


@pytest.mark.parametrize("body, calls, reason", [
    # red-team pass 10, each admitted before and paid in the band by a guessing solver:
    # an item of a short list argument (a guess among three passes a third of the time)
    ("def f(xs: list[int]) -> int:\n    h = sum(x * 7919 for x in xs) % 97\n"
     "    return xs[h % len(xs)]",
     "f([13, 2, 40])\nf([5, 9, 31])\nf([8, 21, 3])\nf([17, 4, 6])\nf([11, 29, 14])",
     "trivial_passes:item_xs"),
    # ... or a character of a short string argument (red-team pass 11)
    ("def f(s: str) -> str:\n    h = sum(ord(c) * 7919 for c in s) % 97\n"
     "    return s[h % len(s)]",
     "f('abc')\nf('xyz')\nf('pqr')\nf('def')\nf('uvw')", "trivial_passes:item_s"),
    # too few answers to see a coin flip: h % 3 on four inputs
    ("def f(n: int) -> int:\n    return (n * 7919 + 1007) % 3 + 2",
     "f(5)\nf(17)\nf(44)\nf(123)", "few_examples"),
])
def test_a_predict_answer_a_guess_can_give_is_no_question(sandbox, body, calls, reason):
    assert verdict(sandbox, proposal(body, calls), PREDICT).reason == reason


def test_a_predict_question_is_never_one_whose_answer_a_string_of_the_program_holds(sandbox):
    # red-team pass 10: the answer in a comment (the prompt shows the program without its
    # comments and docstrings) or in a string; the question is then another input's
    p = proposal("NOTE = 'f(123) gives 1044'\ndef f(n: int) -> int:\n"
                 "    return (n * 7919 + 1007) % 2000", "f(5)\nf(17)\nf(44)\nf(90)\nf(123)")
    v = verdict(sandbox, p, PREDICT)
    assert v.valid and canonical.decode(v.task.visible[0].args) == (90,)


def test_the_examples_a_description_states_are_found():
    examples = [canonical.example((67,), 57), canonical.example((305,), 74),
                canonical.example((7,), 3), canonical.example(("ab", [1, 2]), "b")]
    assert stated("Mix the digits. Checks: mix(67) == 57, mix(305) == 74.", examples) == [0, 1]
    assert stated("For 305 the answer is 74; f(7) gives 3.", examples) == [1, 2]
    assert stated("f('ab', [1, 2]) returns 'b'", examples) == [3]
    # small numbers that happen to be near each other are no example
    assert stated("Count the 7 digits, 3 at most, of 67.", examples) == []
    # the output first, or the inputs and outputs as two lists (red-team pass 12: admitted
    # with augment_inputs 0, and a table copied from the prompt passed every example)
    assert stated("57 is what mix(67) gives.", examples) == [0]
    assert stated("For the inputs 67, 305 and 7 the answers are 57, 74 and 3.", examples) == [0, 1]


@pytest.mark.parametrize("description", [
    "Checks: spread([8,2,6,5],1)=49, spread([2,5,2,5],6)=34.",  # no spaces
    "Table (xs; k; result): 8 2 6 5; 1; 49 | 2 5 2 5; 6; 34.",  # a table
    "spread(xs=[8, 2, 6, 5], k=1) -> 49 and spread(xs=[2, 5, 2, 5], k=6) -> 34",  # keywords
    "[8 2 6 5] with 1 is 49; [2 5 2 5] with 6 is 34",  # words between
    "49 <- (8, 2, 6, 5), 1 and 34 <- (2, 5, 2, 5), 6",  # the output first
])
def test_examples_in_any_spelling_are_stated(description):
    """Red-team pass 13 (F6): the description carried the hidden examples in spellings other
    than Python's (no spaces, a table), and with augment_inputs 0 a table copied from the
    prompt passed every example."""
    examples = [canonical.example(([8, 2, 6, 5], 1), 49), canonical.example(([7], 3), 1),
                canonical.example(([2, 5, 2, 5], 6), 34), canonical.example((["go up"], 2), 5)]
    assert stated(description, examples) == [0, 2]
    assert stated("Spread the list xs by k: 1 is the least k, 2 5 8 the usual ones.",
                  examples) == []
    assert stated("Count: 'go up', 2 gives 5.", examples) == [3]
