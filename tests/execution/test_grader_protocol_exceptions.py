"""Canaries for exceptions with a meaning to the test code's own control flow: a candidate's
StopIteration raised inside the tests' map, filter or next(it, default) must not end that
iteration early (test_grader_canaries.py holds the other attack families)."""

import pytest

from spade_ray.records import ExecStatus, TestSuite
from tests.execution.canaries import CONTROLS, verdict

# Test code that iterates over the candidate's answers: a builtin that consumes an iterator
# (map, filter, next with a default) ends quietly at a StopIteration raised inside it.
ITERATING = {
    "check": TestSuite(check="def check(candidate):\n"
                             "    pairs = [(1, 2), (-1, 4), (2, 2)]\n"
                             "    assert all(map(lambda p: candidate(*p) == sum(p), pairs))\n",
                       entry_point="add"),
    "asserts": TestSuite(asserts=(
        "assert all(map(lambda p: add(*p) == sum(p), [(1, 2), (-1, 4)]))",
        "assert next(filter(lambda p: add(*p) != sum(p), [(1, 2), (5, 5)]), None) is None",
        "assert sum(map(lambda p: add(*p), [(1, 2), (3, 4)])) == 10")),
}
PROTOCOL_EXCEPTIONS = {
    "stop_iteration": "def add(a, b):\n    raise StopIteration\n",
    "stop_async_iteration": "def add(a, b):\n    raise StopAsyncIteration\n",
    "stop_iteration_after_a_right_answer": """
        calls = []
        def add(a, b):
            calls.append(1)
            if len(calls) > 1:
                raise StopIteration(a + b)
            return a + b
    """,
    "stop_iteration_subclass": """
        class Done(StopIteration):
            pass
        def add(a, b):
            raise Done
    """,
}


@pytest.mark.parametrize("shape", ITERATING)
@pytest.mark.parametrize("attack", PROTOCOL_EXCEPTIONS)
def test_an_exception_with_a_protocol_meaning_cannot_end_the_tests_iteration(sandbox, attack,
                                                                             shape):
    result, s = verdict(sandbox, PROTOCOL_EXCEPTIONS[attack], ITERATING[shape])
    assert not result.passed and s.value == 0.0, result.outcomes
    assert result.execution.status is not ExecStatus.SANDBOX_ERROR


@pytest.mark.parametrize("shape", ITERATING)
def test_a_right_answer_passes_the_iterating_tests(sandbox, shape):
    result, s = verdict(sandbox, CONTROLS["plain"], ITERATING[shape])
    assert result.passed and s.value == 1.0, result.outcomes


def test_a_builtin_exception_that_takes_more_than_a_message_still_reaches_its_handler(sandbox):
    """A UnicodeDecodeError cannot be rebuilt from its message alone: it reaches the test as a
    UnicodeError, which a test's `except ValueError` catches, as it catches the original."""
    tests = TestSuite(check="def check(candidate):\n    try:\n        candidate(b'\\xff')\n"
                            "    except ValueError:\n        return\n"
                            "    assert False, 'no ValueError'\n", entry_point="decode")
    result, s = verdict(sandbox, "def decode(data):\n    return data.decode()\n", tests)
    assert (s.value, result.passed) == (1.0, True), result.outcomes
