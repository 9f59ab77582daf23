import pytest

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
