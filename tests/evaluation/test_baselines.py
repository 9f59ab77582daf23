"""The guesses partial credit is measured from, computed on the host (evaluation/baselines.py)."""

import resource
import time

from spade_ray.evaluation.baselines import guesses


def test_an_operation_that_would_build_a_huge_value_is_not_run():
    # 'ab' * 30 * 10**7 took 6 GB and 13 s of the host (red-team pass 8)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.process_time()
    rows = guesses([(("ab" * 30, 10**7), "x"), (("ab", 3), "ababab"), (("c", 2), "cc")])
    assert time.process_time() - started < 1.0
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100_000  # KB
    assert rows["mul(arg0, arg1)"][1:] == [True, True]


def test_a_guarded_operation_returns_a_constant_where_it_raises():
    # min(xs) if xs else None: right on the empty list too
    rows = guesses([(([3, 1],), 1), (([],), None), (([5, 2, 9],), 2)])
    assert rows["min(arg0)"] == [True, True, True]
    assert rows["max(arg0)"] == [False, True, False]
    assert rows["last_index(arg0)"] == [True, False, True]
