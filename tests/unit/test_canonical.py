"""The canonical data codec (sandbox/canonical.py): what crosses between candidate and grader."""

import itertools
import math

import pytest

from spade_ray.execution.canonical import NotPlainData, decode, encode, example, same

PLAIN = [None, True, False, 0, -7, 10**5000, 1.5, -0.0, float("inf"), "", "héllo\ud800",
         b"\x00\xff", [], [1, [2, [3]]], (), (1, "a"), {1: "a", "b": [None]}, set(), {1, 2},
         frozenset({"x"}), {(1, 2): frozenset({3})}]


@pytest.mark.parametrize("value", PLAIN, ids=lambda v: type(v).__name__)
def test_plain_values_round_trip_with_their_exact_types(value):
    back = decode(encode(value))
    assert same(value, back) and type(back) is type(value)


def test_nan_round_trips_and_equals_nan():
    assert math.isnan(decode(encode(float("nan")))) and same(float("nan"), float("nan"))


class EqualsAnything(int):
    def __eq__(self, other):
        return True

    __hash__ = int.__hash__


@pytest.mark.parametrize("value", [EqualsAnything(1), [EqualsAnything(2)], (x for x in []),
                                   object(), print, type("E", (), {})()], ids=repr)
def test_anything_but_plain_data_is_refused(value):
    with pytest.raises(NotPlainData):
        encode(value)


def test_a_cycle_is_refused_not_followed_forever():
    loop = []
    loop.append(loop)
    with pytest.raises(NotPlainData, match="deeper"):
        encode(loop)


@pytest.mark.parametrize("text", ["", "[", "[" * 100_000, "{}", "[]", '["L2","i1"]',
                                  '["i1","i2"]', '["S1","L0"]', '["x"]', '["i"]', '["i-"]',
                                  '["i12g"]', '["f1.5zz"]', '["L99999999"]', '[1]', '["D1","i1"]',
                                  '[' + '"L1",' * 70 + '"N"]', '["L\u00b2","i1","i2"]',
                                  '["D\u0663","i1","i2"]'],
                         ids=lambda t: t[:30])
def test_malformed_text_is_refused_without_recursion(text):
    with pytest.raises(NotPlainData):
        decode(text)


@pytest.mark.parametrize("a, b", [(1, True), (1, 1.0), ([1], (1,)), ({1: 2}, {True: 2}),
                                  ("1", 1), (b"a", "a"), ({1}, frozenset({1})), (None, 0)])
def test_same_requires_the_same_types(a, b):
    assert not same(a, b)


# Set items and dict keys are compared by Python as hash-equal: `{True, 2.0} == {1, 2}`.
@pytest.mark.parametrize("a, b", [({True, 2.0, 3}, {1, 2, 3}), ({(1, 2): 5}, {(True, 2.0): 5}),
                                  (frozenset({0.5, 2}), frozenset({0.5, 2.0})),
                                  ({frozenset({1})}, {frozenset({True})}),
                                  ({(1, (2, "a"))}, {(1, (2.0, "a"))}), ({1, 2}, {1, 2, 3})])
def test_set_items_and_dict_keys_keep_their_types(a, b):
    assert not same(a, b) and not same(b, a)


def test_equal_sets_are_the_same_whatever_their_order_or_nans():
    nan = float("nan")
    assert same({3, 2, 1}, {1, 2, 3})
    assert same({frozenset({1, (2, "a")})}, {frozenset({(2, "a"), 1})})
    assert same({nan, 1.5}, {float("nan"), 1.5})  # NaN equals NaN, as elsewhere
    assert same({-0.0}, {0.0}) and same({(1, 2): {3}}, {(1, 2): {3}})
    assert not same({1.0}, {1.0 + 1e-12}, tolerance=1e-6)  # set items stay exact


def test_two_nans_are_two_items_and_nan_keys_pair_their_values():
    # Two NaN objects are two items of a set, but one typed item: compared as a set of typed
    # items, a two-item answer equalled a one-item {nan}, and a NaN key raised KeyError.
    one, two = float("nan"), float("nan")
    assert not same({one, two}, {one}) and not same({one}, {one, two})
    assert not same(frozenset({one, two}), frozenset({one}))
    assert not same({(one,), (two,)}, {(one,)})
    assert same({one, two}, {float("nan"), float("nan")})
    assert same({one: [1]}, {two: [1]}) and not same({one: 1}, {two: 2})
    assert not same({one: 1, two: 1}, {one: 1})


def test_same_compares_floats_exactly_unless_a_tolerance_is_given():
    assert not same(0.1 + 0.2, 0.3)
    assert same(0.1 + 0.2, 0.3, tolerance=1e-9)
    assert same(0.0, -0.0)


def test_example_encodes_arguments_and_expected_value():
    e = example((1, [2]), {"k": 3})
    assert decode(e.args) == (1, [2]) and decode(e.expected) == {"k": 3}


def test_example_arguments_must_be_a_tuple():
    with pytest.raises(NotPlainData, match="tuple"):
        example([1], 2)


P = 2**61 - 1  # every multiple of it hashes to 0; so does every 1-tuple of one


def _flood_texts(n):
    ints = ",".join(f'"i{k * P:x}"' for k in range(1, n + 1))
    pairs = ",".join(f'"i{k * P:x}","N"' for k in range(1, n + 1))
    tuples = ",".join(f'"U1","i{k * P:x}"' for k in range(1, n + 1))
    return {"set": f'["S{n}",{ints}]', "frozenset": f'["Z{n}",{ints}]',
            "dict": f'["D{n}",{pairs}]', "set of tuples": f'["S{n}",{tuples}]',
            "nested in a list": f'["L2","N","S{n}",{ints}]'}


@pytest.mark.parametrize("shape", list(_flood_texts(1)))
def test_a_hash_flood_is_refused_before_it_is_built(shape):
    """5,000 items sharing a hash would cost 12.5 million comparisons to build."""
    with pytest.raises(NotPlainData, match="hash flood"):
        decode(_flood_texts(5000)[shape])


@pytest.mark.parametrize("value", [
    {-1, -2},  # hash(-1) == hash(-2)
    set(itertools.product([-1, -2], repeat=6)),  # 64 6-tuples sharing one hash
    {k * P for k in range(1, 400)},  # 79,800 comparisons: under the cap
    {frozenset({k * P}): k for k in range(1, 300)},
], ids=["minus_one_and_two", "tuples_of_them", "399_colliding_ints", "frozenset_keys"])
def test_values_under_the_collision_cap_round_trip_and_compare(value):
    back = decode(encode(value))
    assert same(value, back) and same(back, value)


def test_same_is_false_for_a_hash_flood_on_either_side():
    flood = {k * P for k in range(1, 3000)}
    assert not same(flood, flood) and not same({1}, flood) and not same(flood, {1})
    assert not same([{(k * P,) for k in range(1, 3000)}], [{1}])


def test_a_flood_of_long_keys_is_charged_their_length():
    """Red-team s31 pass 20: 447 colliding tuples (under the cap by count) that share a prefix
    of 2,200 items cost 2.2e8 item comparisons, and the grader its CPU limit."""
    prefix = ",".join(['"i3e8"'] * 1000)
    keys = ",".join(f'"U1001",{prefix},"i{k * P:x}"' for k in range(1, 448))
    with pytest.raises(NotPlainData, match="hash flood"):
        decode(f'["S447",{keys}]')
    assert same(decode(encode({(1000,) * 1000 + (k,) for k in range(447)})),
                {(1000,) * 1000 + (k,) for k in range(447)})  # long keys, honest hashes
