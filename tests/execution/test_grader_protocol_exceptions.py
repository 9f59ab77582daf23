"""Canaries for exceptions with a meaning to the test code's own control flow: a candidate's
StopIteration raised inside the tests' map, filter or next(it, default) must not end that
iteration early, and a candidate that ends or breaks the call protocol fails test code that
drops the exception its calls then raise (test_grader_canaries.py holds the other attack
families)."""

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


# Test code that drops whatever its calls raise, as plain Python lets it: a `return` or
# `continue` in a `finally`, an `except BaseException`, asserts run in a thread (the thread
# machinery prints their exception and drops it). Red-team s37: a candidate that exited in such
# a check passed it, on both backends.
DROPPING = {
    "finally_return": "def check(candidate):\n    try:\n        assert candidate(1, 2) == 3\n"
                      "        assert candidate(2, 2) == 4\n    finally:\n        return\n",
    "finally_continue": "def check(candidate):\n    for a in [1, 2, 3]:\n        try:\n"
                        "            assert candidate(a, a) == 2 * a\n        finally:\n"
                        "            continue\n",
    "except_base_exception": "def check(candidate):\n    try:\n        r = candidate(1, 2)\n"
                             "    except BaseException:\n        return\n    assert r == 3\n",
    "thread": "import threading\ndef check(candidate):\n    def run():\n"
              "        for a in [1, 2, 3]:\n            assert candidate(a, a) == 2 * a\n"
              "    t = threading.Thread(target=run)\n    t.start()\n    t.join()\n",
}
ENDINGS = {
    "system_exit_0": "def add(a, b):\n    raise SystemExit(0)\n",
    "keyboard_interrupt": "def add(a, b):\n    raise KeyboardInterrupt\n",
    "os_exit_0": "import os\ndef add(a, b):\n    os._exit(0)\n",
    "os_exit_1": "import os\ndef add(a, b):\n    os._exit(1)\n",
    # a reply frame written out of turn on the answers pipe (fd 5), then a wrong answer
    "reply_out_of_turn": "import os\ndef add(a, b):\n"
                         "    os.write(5, b'\\x00\\x00\\x00\\x02[]')\n    return a + b + 1\n",
}


@pytest.mark.parametrize("shape", DROPPING)
@pytest.mark.parametrize("ending", ENDINGS)
def test_a_candidate_that_ends_or_breaks_the_protocol_fails_tests_that_drop_the_error(
        sandbox, ending, shape):
    tests = TestSuite(check=DROPPING[shape], entry_point="add")
    result, s = verdict(sandbox, ENDINGS[ending], tests)
    assert not result.passed and s.value == 0.0, result.outcomes
    assert result.execution.status is not ExecStatus.SANDBOX_ERROR


def test_a_candidate_that_exits_fails_an_assert_list_that_drops_the_error(sandbox):
    tests = TestSuite(asserts=("for a in [1, 2, 3]:\n    try:\n        assert add(a, a) == 2 * a\n"
                               "    finally:\n        continue\n",))
    result, s = verdict(sandbox, ENDINGS["system_exit_0"], tests)
    assert not result.passed and s.value == 0.0, result.outcomes


@pytest.mark.parametrize("shape", DROPPING)
def test_a_right_answer_passes_the_tests_that_drop_errors(sandbox, shape):
    result, s = verdict(sandbox, CONTROLS["plain"], TestSuite(check=DROPPING[shape],
                                                              entry_point="add"))
    assert result.passed and s.value == 1.0, result.outcomes
