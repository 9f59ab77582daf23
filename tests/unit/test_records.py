import pytest

from spade_ray.execution.canonical import example
from spade_ray.records import (
    CheckResult,
    ExecResult,
    ExecStatus,
    Limits,
    SamplingParams,
    TestOutcome,
    TestSuite,
    from_dict,
    to_dict,
)


def _result(**overrides):
    fields = dict(status=ExecStatus.TIMEOUT, exit_code=-9, stdout="a\ufffd", stderr="",
                  truncated=True, wall_s=1.5, cpu_s=1.0, peak_memory_mb=3.25, env_hash="ab",
                  limits_enforced_by="cgroup-v1", detail="wall-clock")
    fields.update(overrides)
    return ExecResult(**fields)


def test_exec_result_round_trips_through_json():
    assert from_dict(ExecResult, to_dict(_result())) == _result()


def test_check_result_round_trips_with_nested_records():
    check = CheckResult(execution=_result(), outcomes=(TestOutcome("check", "failed", "m", 0.1),),
                        tests_total=2, passed=False)
    assert from_dict(CheckResult, to_dict(check)) == check


def test_unknown_field_is_named():
    data = to_dict(_result()) | {"bogus": 1}
    with pytest.raises(ValueError, match="bogus"):
        from_dict(ExecResult, data)


def test_non_positive_limit_is_named():
    with pytest.raises(ValueError, match="timeout_s"):
        Limits(timeout_s=0)


@pytest.mark.parametrize("field, value", [("timeout_s", float("nan")), ("timeout_s", float("inf")),
                                          ("cpu_s", float("nan")), ("memory_mb", float("inf"))])
def test_a_non_finite_limit_is_named(field, value):
    with pytest.raises(ValueError, match=f"Limits.{field} must be a finite positive number"):
        Limits(**{field: value})


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_non_finite_temperature_is_named(value):
    with pytest.raises(ValueError, match="SamplingParams.temperature must be a finite number"):
        SamplingParams(temperature=value)


def test_test_suite_needs_a_test():
    with pytest.raises(ValueError, match="at least one"):
        TestSuite()


def test_test_suite_rejects_invalid_python_naming_the_test():
    with pytest.raises(ValueError, match=r"asserts\[1\]"):
        TestSuite(asserts=("assert True", "assert ("))


def test_check_program_needs_entry_point():
    with pytest.raises(ValueError, match="entry_point"):
        TestSuite(check="def check(c): pass")


@pytest.mark.parametrize("field, value", [("memory_mb", 512.0), ("max_processes", 64.0),
                                          ("tmp_mb", 0.001), ("tmp_inodes", 4096.0),
                                          ("max_output_bytes", 1e6), ("max_file_mb", 16.0)])
def test_an_integer_limit_given_a_float_is_named(field, value):
    """512.0 reached the mount options and cgroup files as it was, and failed there as
    "Invalid argument" with a hint to install bubblewrap, or made every run a sandbox_error."""
    with pytest.raises(ValueError, match=f"Limits.{field} must be"):
        Limits(**{field: value})


def test_too_few_tmp_inodes_for_the_sandbox_to_start_is_named():
    """The harness makes a probe file in the working directory as it starts."""
    with pytest.raises(ValueError, match="Limits.tmp_inodes=1 is too small"):
        Limits(tmp_inodes=1)
    assert Limits(tmp_inodes=2).tmp_inodes == 2


ONE = (example((1,), 1),)


@pytest.mark.parametrize("kwargs, message", [
    ({"check": "x = 1", "entry_point": "f"}, "define a top-level function check"),
    ({"check": "def check():\n    pass", "entry_point": "f"},
     r"taking one argument, got def check\(\)"),
    ({"check": "def check(a, b):\n    pass", "entry_point": "f"}, "taking one argument"),
    ({"check": "def check(c, *, k):\n    pass", "entry_point": "f"}, "taking one argument"),
    ({"asserts": "assert f(1) == 1"},
     "TestSuite.asserts must be a tuple of assert statements, got str"),
    ({"entry_point": "f(1); import os", "examples": ONE},
     "TestSuite.entry_point must be a function name"),
    ({"entry_point": "class", "examples": ONE}, "TestSuite.entry_point"),
    ({"entry_point": "f", "examples": (*ONE, ((1,), 1))},
     r"TestSuite.examples\[1\] must be an IOExample"),
    ({"entry_point": "f", "examples": ONE, "float_tolerance": "abc"},
     "float_tolerance must be a number"),
])
def test_a_malformed_test_suite_is_refused_naming_the_field(kwargs, message):
    """Found by the grader, each of these was the candidate's failure (or a test of nothing)."""
    with pytest.raises(ValueError, match=message):
        TestSuite(**kwargs)


@pytest.mark.parametrize("check", ["def check(candidate):\n    assert candidate(1)",
                                   "def check(candidate, n=3):\n    pass",
                                   "def check(*candidates):\n    pass",
                                   "import math\n\n\ndef check(c):\n    pass\n\n\ncheck(1)\n"])
def test_a_check_callable_with_one_argument_is_accepted(check):
    assert TestSuite(check=check, entry_point="f").total == 1


def test_a_list_of_asserts_is_kept_as_a_tuple():
    assert TestSuite(asserts=["assert f(1) == 1"]).asserts == ("assert f(1) == 1",)
