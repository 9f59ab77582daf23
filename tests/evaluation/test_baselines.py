"""The guesses partial credit is measured from, computed on the host (evaluation/baselines.py)."""

import tracemalloc

from spade_ray.evaluation import baselines
from spade_ray.evaluation.baselines import guesses, hardest_examples, nearest_shown, null_credit
from spade_ray.execution import canonical
from spade_ray.records import TestSuite


def test_an_operation_that_would_build_a_huge_value_is_not_run(monkeypatch):
    # 'ab' * 30 * 10**7 took 6 GB and 13 s of the host (red-team pass 8)
    calls = []

    def mul(a, b=None):
        calls.append((a, b))
        return a * b

    monkeypatch.setitem(baselines._OPS, "mul", mul)
    rows = guesses([(("ab" * 30, 10**7), "x"), (("ab", 3), "ababab"), (("c", 2), "cc")])
    assert len(calls) == 4 and all(10**7 not in call for call in calls)  # never the 600 MB one
    assert rows["mul(arg0, arg1)"] == [True, True, True]  # guarded there, as if it raised


def test_a_guarded_operation_returns_a_constant_where_it_raises():
    # min(xs) if xs else None: right on the empty list too
    rows = guesses([(([3, 1],), 1), (([],), None), (([5, 2, 9],), 2)])
    assert rows["min(arg0)"] == [True, True, True]
    assert rows["max(arg0)"] == [False, True, False]
    assert rows["last_index(arg0)"] == [True, False, True]


def test_two_operations_in_a_row_are_a_guess():
    # remove_duplicates's seed examples: sorted(set(xs), reverse=True) is right on four of six
    # (red-team pass 10: with a table of the two shown, it earned 0.667 over honest attempts)
    examples = [(([1, 2, 1, 3, 2],), [1, 2, 3]), (([],), []), ((["b", "a", "b"],), ["b", "a"]),
                (([4, 4, 4],), [4]), (([3, 2, 1],), [3, 2, 1]), (([2, 1, 2, 3],), [2, 1, 3])]
    rows = guesses(examples)
    assert rows["sorted_desc(set_sorted(arg0))"] == [False, True, True, True, True, False]
    # three of the four hidden examples, where no single operation gets more than one
    assert max(sum(row[2:]) for name, row in rows.items() if name.count("(") < 2) == 1
    # an inner operation that raises is guarded as one that raises by itself
    assert guesses([(([],), 0), (([2],), 2), (([3, 1],), 1)])["abs(min(arg0))"] == [True] * 3


def test_a_guess_shifted_by_a_small_constant_is_a_guess():
    # second_largest's wrong max(xs) - 1 (red-team pass 11: 11 of 13 of an augmented task)
    examples = [(([3, 1, 4, 1, 5],), 4), (([7, 7],), None), (([3, 1, 4, 2, 5],), 4),
                (([1, 9, 9, 8],), 8), (([-2, -1],), -2), (([1, 9],), 1), (([5, 5],), None)]
    rows = guesses(examples)
    assert rows["minus1(max(arg0))"] == [True, False, True, True, True, False, False]
    assert "plus1(arg0)" not in rows  # a list is no number


def test_a_constant_behind_a_one_line_guard_is_a_guess():
    # ... and `None if len(set(xs)) < 2` before it: 4 of the 5 hidden, where the best
    # unguarded guess gets 3
    examples = [(([3, 1, 4, 1, 5],), 4), (([7, 7],), None), (([3, 1, 4, 2, 5],), 4),
                (([1, 9, 9, 8],), 8), (([-2, -1],), -2), (([1, 9],), 1), (([5, 5],), None)]
    assert max(sum(row[2:]) for row in guesses(examples).values()) == 3
    assert null_credit(suite(examples), 2) == 0.8


def test_the_output_of_the_nearest_shown_input_is_a_guess():
    # hanoi's augmented inputs are one-step mutations of the shown ones (red-team pass 11)
    examples = [((1,), "x"), ((10,), "y"), ((2,), "x"), ((9,), "y"), ((5,), "z")]
    assert nearest_shown(examples, 2)["nearest0"] == [True, True, True, True, False]
    assert null_credit(suite(examples), 2) == 2 / 3
    assert nearest_shown(examples, 0) == {}


def test_two_guesses_split_by_a_condition_are_a_guess():
    # x + 1 for even x, -x for odd: each guess alone gets half the hidden examples; split by
    # `x % 2 == 0` (SPLITS) they get all (red-team pass 14: `min(xs) if target in xs else -1`
    # after a table of the shown examples earned 0.25 over honest near-misses at 0)
    examples = [((x,), x + 1 if x % 2 == 0 else -x) for x in range(2, 10)]
    assert max(sum(row[2:]) for row in guesses(examples).values()) == 3
    assert null_credit(suite(examples), 2) == 1.0


def test_an_item_at_a_fixed_place_and_a_change_of_case_are_guesses():
    # Red-team pass 24: xs[len(xs) // 2] was right on 22 of most_frequent's 25 examples and
    # outscored honest attempts with the wrong tie rule (0.654 against 0.308)
    examples = [(([1, 3, 3, 2],), 3), (([4, 9, 9],), 9), (([6, 2, 6, 9, 1],), 6),
                (([2, 7, 7, 5],), 7), (([5, 1, 1, 1],), 1)]
    assert guesses(examples)["middle(arg0)"] == [True, True, True, True, True]
    assert null_credit(suite(examples), 2) == 1.0
    words = [(("ab cd",), "Ab Cd"), (("x",), "X"), (("hi there",), "Hi There"), (("a b",), "A B")]
    assert guesses(words)["title(arg0)"] == [True] * 4


def test_two_guesses_split_by_another_common_one_line_test_are_a_guess():
    # Red-team pass 24: splits on tests outside the first SPLITS (`len(x) % 2 == 0`,
    # `x[0] < x[-1]`, `s.isalpha()`, `b % a == 0`...) earned credit on 8 of the 45 seed tasks
    # (up to 0.667): each guess alone gets at most half, split they get every hidden example
    cases = [
        [((s,), s.upper() if s.isalpha() else s) for s in
         ("ab", "a1", "xyz", "q r", "hello", "7", "Mix", "1b2")],
        [((xs,), max(xs) if xs[0] < xs[-1] else min(xs)) for xs in
         ([1, 5], [5, 1], [2, 9, 3], [8, 0, 4], [1, 2, 3], [3, 2, 1], [0, 7], [9, 6])],
        [((a, b), a if b % a == 0 else b) for a, b in
         ((2, 4), (3, 4), (5, 10), (4, 6), (7, 14), (6, 9), (2, 8), (3, 7))],
        [((xs,), len(xs) if len(xs) % 2 == 0 else sum(xs)) for xs in
         ([1, 2], [4, 4, 4], [5, 1, 2, 2], [3], [2, 2, 2, 2, 2, 2], [7, 1, 1], [6, 6], [8])],
    ]
    for examples in cases:
        assert max(sum(row[2:]) for row in guesses(examples).values()) <= 4, examples
        assert null_credit(suite(examples), 2) == 1.0, examples


def test_a_guess_whose_values_are_bools_is_a_condition_to_split_on():
    # len(xs) where x is in xs, else 0: `x in xs` is a guess (BINARY), and a condition
    examples = [((x, xs), len(xs) if x in xs else 0) for x, xs in (
        (1, [1, 2]), (5, [1]), (3, [3, 4, 5]), (9, [2, 2]), (2, [7, 2, 1, 1]), (4, [1, 2]),
        (6, [6]), (8, [1, 2, 3]))]
    assert max(sum(row[2:]) for row in guesses(examples).values()) == 3
    assert null_credit(suite(examples), 2) == 1.0


def test_the_augmented_examples_kept_are_those_the_guesses_get_wrong():
    # f(x) = x below 10, x * x + 5 above: the echo gets every small input right
    examples = [canonical.example((x,), x if x < 10 else x * x + 5)
                for x in (1, 2, 3, 12, 4, 13, 5)]
    assert hardest_examples(examples, 2, 2, 2) == [1, 3]  # 12 and 13, of the five after two
    assert hardest_examples(examples, 2, 2, 9) == [0, 1, 2, 3, 4]


def test_a_string_argument_is_never_formatted_by_a_split():
    # `s % 2` of a str is printf: a hidden '%0100000000d' built 100 MB on the host, '%01000000000d'
    # a gigabyte (red-team pass 16); `even` splits numbers only
    tracemalloc.start()
    try:
        baselines._applied("even", ("%0100000000d",), (0,), 0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000
    assert [baselines._applied("even", (x,), (0,), 0) for x in (4, 3, 2.0, True)] == \
        [True, False, True, False]
    # nor by a test of divisibility
    assert baselines._applied("mod3", ("%0100000000d",), (0,), 0) is False
    assert baselines._applied("divides", ("%0100000000d", 3), (0, 1), 0) is False
    assert [baselines._applied("divides", (a, b), (0, 1), 0) for a, b in ((6, 3), (7, 3), (6, 0))] \
        == [True, False, False]


def suite(examples) -> TestSuite:
    return TestSuite(examples=tuple(canonical.example(args, expected)
                                    for args, expected in examples), entry_point="f")
