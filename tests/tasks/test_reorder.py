"""Reorder on the host: the rewrite the driver's raised interpreter answers with (reorder.py)."""

import pytest

from spade_ray.tasks.reorder import names, reordered_code

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
], ids=["comprehension", "loop", "unpacking", "list", "join", "pop", "star", "f_string"])
def test_every_way_of_reading_a_set_in_order_is_reversed(body):
    plain, turned = both(body)
    assert plain != turned, (plain, turned)


@pytest.mark.parametrize("body", [
    "return sorted(set(xs))",
    "return {x: xs.count(x) for x in set(xs)}",
    "return sum(set(xs)) + max(frozenset(xs))",
    "return [x for x in xs]",  # a list is read in its own order
    "return ''.join(str(x) for x in xs[::-1])",
], ids=["sorted", "dict", "sum_max", "list_loop", "join_list"])
def test_what_no_sets_order_decides_answers_alike(body):
    plain, turned = both(body)
    assert plain == turned
