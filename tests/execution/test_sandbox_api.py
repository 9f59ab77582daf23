"""The Python API: run / run_many / check, input validation, per-test outcomes."""

import json

import pytest

from spade_ray.execution import Sandbox, SandboxInputError
from spade_ray.execution.checking import load_tests
from spade_ray.records import ExecStatus, TestSuite
from tests.conftest import TEST_LIMITS, open_sandbox

ADD_TESTS = TestSuite(asserts=("assert add(1, 2) == 3", "assert add(-1, 1) == 0",
                               "assert add(2, 2) == 5"))
HUMANEVAL_CHECK = TestSuite(check="def check(candidate):\n    assert candidate(3) == 9\n",
                            entry_point="square")


def test_run_many_keeps_the_given_order(sandbox):
    results = sandbox.run_many([f"import time; time.sleep({0.05 * (5 - i)}); print({i})"
                                for i in range(6)])
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(6)]


def test_run_many_passes_each_stdin(sandbox):
    results = sandbox.run_many(["print(input()[::-1])"] * 2, stdins=["abc", b"xyz"])
    assert [r.stdout for r in results] == ["cba\n", "zyx\n"]


PROBE_STATE = """
import json, os, sys
streams = [(s.seekable(), s.encoding, s.errors, s.line_buffering)
           for s in (sys.stdin, sys.stdout, sys.stderr)]
print(json.dumps({"env": dict(os.environ), "streams": streams, "stdin": sys.stdin.read()}))
"""
LEAVE_STATE = """
import os, sys
os.environ["LEFT_BEHIND"] = "1"
sys.stdout.reconfigure(encoding="latin-1")
sys.stderr.write("unflushed")
"""


def test_every_run_starts_from_the_same_environment_and_streams(sandbox):
    """The environment and the standard streams come from the server, built once: each run gets
    them unused (nothing an earlier run changed), and they are what a fresh interpreter on pipes
    has (not seekable, utf-8)."""
    first = sandbox.run(PROBE_STATE, stdin="in")
    assert sandbox.run(LEAVE_STATE).status is ExecStatus.OK
    again = sandbox.run(PROBE_STATE, stdin="in")
    assert first.stdout == again.stdout and again.stderr == ""
    state = json.loads(again.stdout)
    assert state["env"] == {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/work",
                            "TMPDIR": "/work", "LANG": "C.UTF-8",
                            "PYTHONDONTWRITEBYTECODE": "1"}
    assert state["streams"] == [[False, "utf-8", "replace", False],
                                [False, "utf-8", "backslashreplace", False],
                                [False, "utf-8", "backslashreplace", True]]
    assert state["stdin"] == "in"


def test_check_gives_per_test_outcomes_for_partial_credit(sandbox):
    result = sandbox.check("def add(a, b):\n    return a + b\n", ADD_TESTS)
    assert [o.outcome for o in result.outcomes] == ["passed", "passed", "failed"]
    assert result.fraction_passed == pytest.approx(2 / 3)
    assert not result.passed


def test_check_passes_only_when_every_test_passes(sandbox):
    tests = TestSuite(asserts=ADD_TESTS.asserts[:2])
    assert sandbox.check("def add(a, b):\n    return a + b\n", tests).passed


def test_humaneval_check_form_works(sandbox):
    assert sandbox.check("def square(x):\n    return x * x\n", HUMANEVAL_CHECK).passed
    assert not sandbox.check("def square(x):\n    return x + x\n", HUMANEVAL_CHECK).passed


def test_missing_entry_point_is_an_error_outcome(sandbox):
    result = sandbox.check("def cube(x):\n    return x ** 3\n", HUMANEVAL_CHECK)
    assert result.outcomes[0].outcome == "error"
    assert "square" in result.outcomes[0].message


def test_an_exception_in_a_call_is_named_once(sandbox):
    result = sandbox.check("def square(x):\n    raise ValueError('no squares today')\n",
                           HUMANEVAL_CHECK)
    assert result.outcomes[0].outcome == "error"
    assert result.outcomes[0].message == "ValueError: no squares today"


def test_crashing_candidate_fails_its_check(sandbox):
    result = sandbox.check("raise SystemExit(3)", ADD_TESTS)
    assert result.execution.status is ExecStatus.ERROR
    assert not result.passed and result.tests_passed == 0


def test_same_code_gets_the_same_outcomes_every_time(sandbox):
    code = "def add(a, b):\n    return a + b if a >= 0 else 0\n"
    first, *rest = sandbox.check_many([code] * 4, [ADD_TESTS] * 4)
    assert all(r.outcomes and [o.outcome for o in r.outcomes] ==
               [o.outcome for o in first.outcomes] for r in rest)


def test_every_jail_orders_a_set_of_strings_alike(backend):
    """One fixed hash seed for every jail: a program that follows a set's order (which a random
    seed per jail would make pass on some workers and fail on others) prints the same on fresh
    jails and in a check. Eight words have 40,320 orders: a random seed per jail repeating one
    three times would be chance of about 1 in 1.6e9."""
    code = "print(list({'ant', 'bee', 'cat', 'dog', 'eel', 'fox', 'gnu', 'hen'}))\n"
    seen = set()
    for _ in range(3):
        with open_sandbox(backend, limits=TEST_LIMITS, workers=1) as fresh:
            result = fresh.run(code)
            assert result.status is ExecStatus.OK, result.stderr
            seen.add(result.stdout)
    assert len(seen) == 1


@pytest.mark.parametrize("code, message", [
    ("", "empty"),
    ("   \n", "empty"),
    (b"\xff\xfe", "not valid UTF-8"),
    ("x" * 1_000_001, "over the"),
    (42, "must be str or bytes"),
])
def test_bad_input_is_refused_with_a_named_reason(sandbox, code, message):
    with pytest.raises(SandboxInputError, match=message):
        sandbox.run(code)


def test_bad_input_in_a_batch_names_its_index_and_runs_nothing(sandbox):
    with pytest.raises(SandboxInputError, match=r"code\[1\]"):
        sandbox.run_many(["print(1)", ""])
    assert sandbox.run("print(2)").stdout == "2\n"  # the sandbox is still usable


def test_unknown_backend_is_named():
    with pytest.raises(ValueError, match="'podman'"):
        Sandbox(backend="podman")


def test_task_file_in_humaneval_format_loads(tmp_path):
    task = tmp_path / "task.json"
    task.write_text(json.dumps({"test": HUMANEVAL_CHECK.check, "entry_point": "square"}))
    assert load_tests(task) == HUMANEVAL_CHECK


def test_malformed_task_file_is_named(tmp_path):
    task = tmp_path / "task.json"
    task.write_text("{not json")
    with pytest.raises(ValueError, match="task.json"):
        load_tests(task)


@pytest.mark.parametrize("data, message", [
    ({"entry_point": "f", "check": "x = 1"}, "define a top-level function check"),
    ({"entry_point": "f", "examples": [{"args": [1], "expected": 1}], "float_tolerance": "abc"},
     "float_tolerance must be a number in \\[0, 1\\), got 'abc'"),
    ({"entry_point": "add", "examples": [{"args": [1, 2], "expected": 3}, [1, 2, 3]]},
     r"examples\[1\] must be an object with 'args' \(a list\) and 'expected', got \[1, 2, 3\]"),
    ({"entry_point": "f", "examples": [{"args": [1]}]}, r"examples\[0\] has no 'expected'"),
    ({"entry_point": "f", "examples": [{"args": 1, "expected": 1}]},
     r"examples\[0\].args must be a list"),
    ({"entry_point": "f", "examples": {"args": [1], "expected": 1}}, "'examples' must be a list"),
])
def test_a_task_file_names_the_field_that_is_wrong(tmp_path, data, message):
    """Not an exception's repr (KeyError('expected')), nor a check that fails every solution."""
    task = tmp_path / "task.json"
    task.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=message) as raised:
        load_tests(task)
    assert "task.json" in str(raised.value) and "Error(" not in str(raised.value)
