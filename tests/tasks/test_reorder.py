"""Reorder on the host: the rewrite the driver's raised interpreter answers with (reorder.py)."""

import pytest

from spade_ray.tasks import reorder
from spade_ray.tasks.reorder import ORDERS, names, reordered_code, same_answer, turned

XS = [3, 1, 2, 200, -7]


def answers(body: str, xs=XS) -> tuple[object, list[object]]:
    """f(xs) as written, and with every set read in each of the other orders."""
    source = f"def f(xs):\n    {body}\n"
    plain = {}
    exec(compile(source, "<reference>", "exec"), plain)
    others = []
    for way in ORDERS:
        reorder.order[0] = way
        namespace = names()
        exec(reordered_code(source, "<reference>"), namespace)
        others.append(namespace["f"](turned(list(xs))))
    reorder.order[0] = ORDERS[0]
    return plain["f"](list(xs)), others


def both(body: str) -> tuple[object, object]:
    """f(XS) as written, and the first other answer that is not the same (else the last)."""
    plain, others = answers(body)
    return plain, next((o for o in others if not same_answer(o, plain)), others[-1])


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
    "s = {abs(x) for x in xs}\n    t = s | {1000}\n    return list(map(lambda v: v, [t]))[0].pop()",
    "return [list(u) for u in [set(xs).union([99]), set(xs) - {1}, frozenset(xs) & {3, 1, 2}]]",
    "return [*set().union(xs)]",
    # red-team s33: sets the rewrite did not make, read in C
    "out = []\n    for g in map(set, [xs]):\n        out += g\n    return out",
    "d = dict.fromkeys(xs)\n    out = []\n    out += d.keys() & d.keys()\n    return out",
    "import collections\n    c = collections.Counter()\n    c.update(set(xs))\n"
    "    return list(c)",
    "import collections\n    q = collections.deque()\n    q.extendleft(set(xs))\n"
    "    return list(q)",
    "import itertools\n    return list(itertools.chain.from_iterable([set(xs)]))",
    "make = set\n    return [*make(xs)]",
    "return list(set.union(set(xs), {0}))",
    # red-team s34: a set C made (a view's operator, operator.and_, reduce), read in C by a
    # consumer no list names
    "import heapq\n    d = dict.fromkeys(xs, 1)\n"
    "    return heapq.nsmallest(1, d.keys() - {0}, key=d.get)",
    "import heapq\n    d = dict.fromkeys(xs)\n    return list(heapq.merge(d.keys() & d.keys()))",
    "import itertools\n    d = dict.fromkeys(xs)\n"
    "    return list(itertools.tee(d.keys() | {0})[0])",
    "import heapq, operator\n    d = dict.fromkeys(xs)\n"
    "    return list(heapq.merge(operator.and_(d.keys(), d.keys())))",
    "import functools, heapq, operator\n    d = dict.fromkeys(xs)\n"
    "    return list(heapq.merge(functools.reduce(operator.or_, [d.keys(), {0}])))",
], ids=["comprehension", "loop", "unpacking", "list", "join", "pop", "star", "f_string",
        "percent_tuple", "percent", "bytes", "augmented", "slice", "zip_starred_list",
        "map_over_list", "dunder_iter", "pop_after_union", "set_operations",
        "union_of_empty", "map_set", "dict_view_and", "counter_update", "deque_extendleft",
        "from_iterable", "set_by_another_name", "union_of_the_class", "view_nsmallest",
        "view_merge", "view_tee", "operator_and", "reduce_or"])
def test_every_way_of_reading_a_set_in_order_is_read_in_another_order(body):
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
    plain, others = answers(body)
    assert all(same_answer(o, plain) for o in others), (plain, others)


@pytest.mark.parametrize("body", [
    # the same under reversal, not under a shuffle (red-team s33: both were admitted)
    "s = list(set(xs))\n    return sum(abs(a - b) for a, b in zip(s, s[1:]))",
    "s = list(set(xs))\n    return s[0] + s[-1]",
    "s = list(set(xs))\n    return s[1] + s[-2]",
], ids=["path_length", "first_plus_last", "second_plus_second_last"])
@pytest.mark.parametrize("salt", range(10))
def test_an_answer_a_reversal_keeps_is_changed_by_the_shuffle(body, salt, monkeypatch):
    monkeypatch.setattr(reorder, "SALT", salt)
    plain, others = answers(body, [3, 1, 2, 200, -7, 64, 9])
    assert same_answer(others[0], plain) and not same_answer(others[1], plain)


def test_an_order_that_decides_only_the_answers_type_is_found():
    """2 == 2.0, but the grader does not take one for the other (red-team s33)."""
    plain, others = answers("return abs(min(set(xs), key=abs))", [-2, 2.0, 5])
    assert plain == others[0]  # as Python compares
    assert not same_answer(plain, others[0])


def test_to_the_reference_a_set_it_did_not_make_is_still_a_set():
    plain, others = answers("d = dict.fromkeys(xs)\n"
                            "    v = d.keys() & d.keys()\n"
                            "    return [isinstance(v, set), issubclass(type(v), set),"
                            " isinstance(set(xs), set), isinstance(frozenset(), frozenset)]")
    assert plain == [True] * 4 and all(o == [True] * 4 for o in others)


@pytest.mark.parametrize("a, b, same", [
    (2, 2.0, False), (1, True, False), ([1, (2, 3)], [1, (2, 3)], True), ([1], (1,), False),
    ({1: "a", 2: "b"}, {2: "b", 1: "a"}, True), ({1: "a"}, {1.0: "a"}, False),
    ({1, 2.0}, {1, 2}, False), ({3, 1}, {1, 3}, True), (float("nan"), float("nan"), True),
    ({"k": [1, 2]}, {"k": [1, 2.0]}, False), (frozenset({1}), {1}, False),
    (type("S", (str,), {})("a"), type("S", (str,), {})("b"), True),  # no example: not data
], ids=str)
def test_answers_are_compared_as_the_grader_compares_them(a, b, same):
    assert same_answer(a, b) is same and same_answer(b, a) is same


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
