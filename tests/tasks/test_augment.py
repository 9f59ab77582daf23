"""Augmented inputs: type-preserving one-step mutations of the generator's own inputs."""

import ast
import math
import random

import pytest

from spade_ray.tasks.augment import augmented_inputs
from spade_ray.tasks.format import MAX_LITERAL_CHARS, input_key

INPUTS = [
    ((1, 2, 3), True, "abc", [1, [2, 3]], {"a": 1, "b": "x"}),
    ((), False, "", [], {}),
    ((7,), True, "Hello World", [0.5, -2.0], {"k": [1, 2]}),
]


def test_the_same_seed_gives_the_same_inputs_and_another_seed_others():
    assert augmented_inputs(INPUTS, 12, seed=3) == augmented_inputs(INPUTS, 12, seed=3)
    assert augmented_inputs(INPUTS, 12, seed=3) != augmented_inputs(INPUTS, 12, seed=4)


def test_new_inputs_are_distinct_from_the_generators_and_from_each_other():
    out = augmented_inputs(INPUTS, 20, seed=0)
    assert len(out) == 20
    texts = [repr(args) for args in out]
    assert len(set(texts)) == len(texts)
    assert not set(texts) & {repr(args) for args in INPUTS}


def test_each_new_input_changes_one_argument_and_keeps_every_argument_type():
    for args in augmented_inputs(INPUTS, 30, seed=1):
        parents = [p for p in INPUTS if len(p) == len(args)
                   and sum(repr(a) != repr(b) for a, b in zip(p, args)) == 1]
        assert parents, args
        assert [type(a) for a in args] == [type(a) for a in parents[0]]


def test_every_new_input_reads_back_as_a_literal_within_the_line_limit():
    inputs = [("x" * 300, [1.5, 2.5], {3, 4, 5}, b"bytes", None)]
    out = augmented_inputs(inputs, 20, seed=2)
    assert out
    for args in out:
        text = repr(args)
        assert len(text) <= MAX_LITERAL_CHARS
        assert ast.literal_eval(text) == args
        assert all(not isinstance(a, float) or math.isfinite(a) for a in args)
        assert all(not isinstance(a, set) or a for a in args)  # set() is not a literal


def test_ints_stay_bounded_and_bools_stay_bools():
    out = augmented_inputs([(10**6, True)], 10, seed=5)
    assert out
    for n, flag in out:
        assert type(n) is int and abs(n) <= 10**6 and type(flag) is bool


@pytest.mark.parametrize("inputs", [[], [()], [(None,), (None, None)]])
def test_inputs_with_nothing_to_mutate_give_none(inputs):
    assert augmented_inputs(inputs, 5, seed=0) == []


def test_new_inputs_stay_in_the_domain_the_generators_own_show():
    """Outside it the description says nothing, so a hidden example there grades a right
    solution on the reference's accident (red-team pass 9: fib(-10) -> 0, '' -> 0.0)."""
    own = [(1, "hello", [3, 1, 2]), (5, "world", [0, 4]), (12, "apple", [7])]
    out = [args for seed in range(40) for args in augmented_inputs(own, 8, seed)]
    assert len(out) > 200
    letters = set("helloworldapple")
    for n, word, xs in out:
        assert n > 0  # all positive: no zero, no negative
        assert word and set(word) <= letters  # none empty, no upper case, no new character
        assert xs and all(x >= 0 for x in xs)  # none empty; a zero item is theirs


def test_a_domain_the_generators_inputs_show_is_reached():
    own = [(-3, "Ab", []), (4, "cD", [1]), (2, "", [5])]
    out = [args for seed in range(40) for args in augmented_inputs(own, 8, seed)]
    assert any(n < 0 for n, _, _ in out) and any(n == 0 for n, _, _ in out)
    assert any(w == "" for _, w, _ in out) and any(w.isupper() for _, w, _ in out)
    assert any(xs == [] for _, _, xs in out)


def test_sorted_lists_of_distinct_items_stay_sorted_and_distinct():
    """A binary search's list, unsorted or with a repeated item, has no right answer but the
    reference's accident (the seed binary_search: `ascending list xs of distinct values`)."""
    own = [([1, 3, 5, 8], 3), ([2, 4], 7), ((0, 9, 12), 1)]
    out = [args for seed in range(40) for args in augmented_inputs(own, 8, seed)]
    assert len(out) > 200
    assert any(len(xs) == 3 for xs, _ in out)  # items dropped
    assert any(len(xs) == 4 and list(xs) != [1, 3, 5, 8] for xs, _ in out)  # and changed
    for xs, _ in out:
        assert list(xs) == sorted(xs) and len(set(xs)) == len(xs), xs


def test_an_order_the_inputs_do_not_keep_is_not_imposed():
    own = [([3, 1, 2],), ([1, 1, 4],), ([],)]  # one unsorted, one with a repeat
    out = [xs for seed in range(40) for (xs,) in augmented_inputs(own, 8, seed)]
    assert any(xs != sorted(xs) for xs in out) and any(len(set(xs)) < len(xs) for xs in out)
    sorted_only = [([1, 2, 2],), ([0, 5],)]  # sorted, with a repeat: sorted is kept
    out = [xs for seed in range(40) for (xs,) in augmented_inputs(sorted_only, 8, seed)]
    assert all(xs == sorted(xs) for xs in out) and any(len(set(xs)) < len(xs) for xs in out)


def test_str_and_bytes_at_one_argument_keep_alphabets_of_their_own():
    """Their characters were pooled and sorting str with ints raised TypeError out of admit(),
    losing every proposal of the chunk (red-team pass 10: size('abc'), size(b'hello'))."""
    own = [("abc",), (b"hello",), ("xy",), (["ab", b"cd"],), ([b"q", "z"],)]
    out = [args for seed in range(20) for args in augmented_inputs(own, 8, seed)]
    alphabets = {str: set("abcxy"), bytes: set(b"hello")}  # of the values themselves
    within_lists = {str: set("abz"), bytes: set(b"cdq")}  # of the items of the lists
    assert {type(v) for (v,) in out} == {str, bytes, list}
    for (v,) in out:
        for x, alphabet in ([(x, within_lists) for x in v] if type(v) is list
                            else [(v, alphabets)]):
            assert set(x) <= alphabet[type(x)], v


def _sign(x):
    return (x > 0) - (x < 0)


def _within(value, pool) -> bool:
    """The domain the module docstring promises, written out independently: what `pool` (the
    generator's values at one argument) shows, per type for emptiness and characters."""
    kind = type(value)
    if kind in (int, float):
        signs = {_sign(x) for x in pool if type(x) in (int, float) and x == x}  # NaN: no sign
        return _sign(value) in signs or value == 0 and {-1, 1} <= signs
    if kind in (str, bytes, list, tuple, set, dict) and not value:
        return any(type(x) is kind and not x for x in pool)
    if kind in (str, bytes):
        return set(value) <= {c for x in pool if type(x) is kind for c in x}
    if kind in (list, tuple):
        shown = [x for x in pool if type(x) in (list, tuple) and len(x) > 1]
        if shown and all(map(_sorted, shown)) and not _sorted(value):
            return False
        if shown and all(map(_unique, shown)) and not _unique(value):
            return False
    if kind in (list, tuple, set, dict):
        held = [y for x in pool if type(x) in (list, tuple, set) for y in x] + \
            [y for x in pool if type(x) is dict for y in x.values()]
        items = value.values() if kind is dict else value
        return not held or all(_within(y, held) for y in items)
    return True


def _sorted(xs) -> bool:
    try:
        return list(xs) == sorted(xs)
    except TypeError:
        return False


def _unique(xs) -> bool:
    return not any(xs[i] == xs[j] for i in range(len(xs)) for j in range(i + 1, len(xs)))


_ATOMS = [0, 1, -3, 7, 10**300, -(10**300), 2.5, -0.0, 0.0, -1.5, float("nan"), float("inf"),
          True, False, None, "", "ab", "Zq9", "\u00e9", b"", b"ab", b"\x00\xff", 1j]


def _hashable(value) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _mixed(rng, depth: int):
    """One value of any literal type, containers holding a mix of types, some empty."""
    kind = rng.randrange(6) if depth else 0
    if kind <= 1:
        return rng.choice(_ATOMS)
    items = [_mixed(rng, depth - 1) for _ in range(rng.randrange(4))]
    hashable = [x for x in items if _hashable(x)]
    if kind == 2:
        return items
    if kind == 3:
        return tuple(items)
    if kind == 4:
        return set(hashable)
    return {k: v for k, v in zip(hashable, items)}


def _changed(parent: tuple, args: tuple) -> int | None:
    """The one argument in which `args` differs from `parent` keeping its type, or None."""
    differ = [k for k, (a, b) in enumerate(zip(parent, args)) if repr(a) != repr(b)]
    return differ[0] if len(differ) == 1 and type(parent[differ[0]]) is type(args[differ[0]]) \
        else None


def test_inputs_mixing_types_at_one_argument_give_new_inputs_within_its_domain():
    """Mixed int/float/bool/None/str/bytes/containers at one argument, nested, empty, huge,
    NaN and -0.0: nothing raises, each new input changes one argument of one of the generator's
    own within what that argument's values show, and (the guard not hiding a failure) nearly
    every case gives some."""
    rng = random.Random(0)
    cases, answered = 300, 0
    for case in range(cases):
        arity = rng.randrange(1, 4)
        own = [tuple(_mixed(rng, 3) for _ in range(arity)) for _ in range(rng.randrange(2, 6))]
        out = augmented_inputs(own, 8, seed=case)
        answered += bool(out)
        for args in out:
            changed = [_changed(p, args) for p in own if len(p) == len(args)]
            positions = [k for k in changed if k is not None]
            assert positions, (own, args)  # one argument of one of them changed, its type kept
            k = positions[0]
            assert _within(args[k], [p[k] for p in own if len(p) > k]), (own, args)
            assert ast.literal_eval(repr(args[k])) == args[k]  # the driver reads it back
    # 286 of the 300 give some; the others hold only empties, one-item sets, ints past
    # _INT_BOUND and literals past the line limit (and with the guard hiding a raise, none)
    assert answered >= 0.9 * cases


def _nested(depth: int) -> list:
    value: list = [1]
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("own", [[(10**5000, "ab"), (1, "cd")], [(_nested(3000),), (2,)]],
                         ids=["int_past_repr", "too_deep"])
def test_inputs_it_cannot_work_on_give_no_new_inputs_rather_than_an_error(own):
    """admit() calls it unguarded, so an error loses the whole chunk (red-team pass 10):
    inputs with an int whose repr Python refuses (over 4300 digits) or a nesting past the
    recursion limit get none."""
    assert augmented_inputs(own, 8, seed=0) == []


def test_no_new_input_is_another_input_retyped():
    """(3, 9) after [3, 9] is the same content (format.input_key): as a hidden example it tells
    a solver nothing the shown one did not (red-team pass 10)."""
    own = [([3, 9],), ((3, 9, 4),), (True,), (2,)]
    out = [args for seed in range(40) for args in augmented_inputs(own, 8, seed)]
    assert len(out) > 100
    assert {input_key(args) for args in out}.isdisjoint(input_key(args) for args in own)
