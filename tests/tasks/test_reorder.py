"""Reorder on the host: the rewrite the driver's raised interpreter answers with (reorder.py)."""

import pytest

from spade_ray.tasks.reorder import names, reordered_code, turned

XS = [3, 1, 2, 200, -7]


def both(body: str) -> tuple[object, object]:
    """f(XS) as written, and with every set read in reverse."""
    source = f"def f(xs):\n    {body}\n"
    plain, turned = {}, names()
    exec(compile(source, "<reference>", "exec"), plain)
    exec(reordered_code(source, "<reference>"), turned)
    return plain["f"](list(XS)), turned["f"](list(XS))


@pytest.mark.parametrize("body", [
    "return [2 * x for x in set(xs)]",
    "out = []\n    for x in {abs(v) for v in xs}:\n        out.append(x)\n    return out",
    "a, b, *rest = set(xs)\n    return [a, b]",
    "return list(set(xs))",
    "return '-'.join(map(str, frozenset(xs)))",
    "s = set(xs)\n    return [s.pop(), len(s)]",
    "return [*set(xs)]",
    "return f'{set(xs)}'",
    # where Python iterates it in C, not at a place the syntax shows (red-team s32 left `%`
    # open): a set the reference makes is iterated backwards wherever it goes
    "return '%s' % (set(xs),)",
    "return '%s' % set(xs)",
    "return bytes({x % 256 for x in xs})",
    "out = []\n    out += set(xs)\n    return out",
    "out = [0]\n    out[:] = set(xs)\n    return out",
    "return list(zip(*[set(xs)]))",
    "return list(map(list, [set(xs)]))",
    "return list(set(xs).__iter__())",
    "s = set(xs)\n    return [s.pop(), len(s)]",
    "s = {abs(x) for x in xs}\n    t = s | {1000}\n    return list(map(lambda v: v, [t]))[0].pop()",
    "return [list(u) for u in [set(xs).union([99]), set(xs) - {1}, frozenset(xs) & {3, 1, 2}]]",
    "return [*set().union(xs)]",
], ids=["comprehension", "loop", "unpacking", "list", "join", "pop", "star", "f_string",
        "percent_tuple", "percent", "bytes", "augmented", "slice", "zip_starred_list",
        "map_over_list", "dunder_iter", "pop_made", "pop_after_union", "set_operations",
        "union_of_empty"])
def test_every_way_of_reading_a_set_in_order_is_reversed(body):
    plain, turned = both(body)
    assert plain != turned, (plain, turned)


@pytest.mark.parametrize("body", [
    "return sorted(set(xs))",
    "return {x: xs.count(x) for x in set(xs)}",
    "return sum(set(xs)) + max(frozenset(xs))",
    "return [x for x in xs]",  # a list is read in its own order
    "return ''.join(str(x) for x in xs[::-1])",
    "s = set(xs)\n    return [isinstance(s, set), len(s | {3}), 200 in s, s == set(xs)]",
    "return sorted(set(xs) - {1}) + sorted(frozenset(xs) ^ {5})",
    "return {x: x * x for x in set(xs)} == {x: x * x for x in xs}",
    "return 7 % 3 + len('%d' % 5)",
    "first, *rest = sorted(xs)\n    return [first, len(rest)]",
], ids=["sorted", "dict", "sum_max", "list_loop", "join_list", "set_semantics",
        "sorted_operations", "dict_by_set", "int_modulus", "starred_target"])
def test_what_no_sets_order_decides_answers_alike(body):
    plain, turned = both(body)
    assert plain == turned


def test_a_set_made_by_the_rewrite_prints_as_a_set_with_its_items_turned():
    source = "def f(xs):\n    return [repr(set(xs)), str({xs[0]}), repr(frozenset(xs)), " \
             "repr(set()), str(frozenset())]\n"
    plain, turned = {}, names()
    exec(compile(source, "<reference>", "exec"), plain)
    exec(reordered_code(source, "<reference>"), turned)
    xs = [3, 1, 2]
    assert turned["f"](xs) == ["{3, 2, 1}", "{3}", "frozenset({3, 2, 1})", "set()",
                               "frozenset()"]
    assert plain["f"](xs) == ["{1, 2, 3}", "{3}", "frozenset({1, 2, 3})", "set()",
                              "frozenset()"]


def test_a_set_in_the_input_iterates_backwards_wherever_it_goes():
    given = ({3, 1, 2}, [frozenset({5, 4})], {"k": {7, 6}})
    s, (f,), d = turned(given)
    assert (s, f, d) == ({1, 2, 3}, frozenset({4, 5}), {"k": {6, 7}})
    assert bytes(s) == bytes(reversed(bytes({3, 1, 2})))
    assert list(f) == list(frozenset({4, 5}))[::-1]
    assert "%s" % d["k"] == "{7, 6}"
