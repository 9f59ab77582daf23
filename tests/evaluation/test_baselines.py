"""The guesses partial credit is measured from, computed on the host (evaluation/baselines.py)."""

from spade_ray.evaluation import baselines
from spade_ray.evaluation.baselines import guesses


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
