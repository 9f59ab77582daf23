"""Checking a candidate against a task's tests, with per-test outcomes for partial credit.

The harness runs the candidate, then each test in the same namespace, and writes a report
carrying the request's random nonce on a private pipe. A candidate passes only if that report
arrived with the right nonce, holds one outcome per test, every outcome passed and the
execution itself ended `ok`: exit code 0 alone, or "PASS" on stdout, is never success.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from spade_ray.records import CheckResult, ExecResult, ExecStatus, TestOutcome, TestSuite


def to_check_result(tests: TestSuite, result: ExecResult, report: dict[str, Any]
                    ) -> CheckResult:
    """`report` is the harness's test report, already matched against the nonce (or {})."""
    outcomes = tuple(TestOutcome(**o) for o in report.get("outcomes", ()))
    passed = (bool(report) and result.status is ExecStatus.OK and len(outcomes) == tests.total
              and all(o.outcome == "passed" for o in outcomes))
    return CheckResult(execution=result, outcomes=outcomes, tests_total=tests.total,
                       passed=passed)


def load_tests(path: str | Path) -> TestSuite:
    """A task file's tests. Accepts our fields (`tests`: list of asserts, `check`,
    `entry_point`) and HumanEval's (`test` holding `def check(candidate)`, `entry_point`)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"cannot read task {path}: {e}") from e
    if not isinstance(data, dict):
        raise ValueError(f"task {path} must be a JSON object, got {type(data).__name__}")
    asserts = data.get("tests", [])
    if isinstance(asserts, str) or not isinstance(asserts, list):
        raise ValueError(f"task {path}: 'tests' must be a list of assert statements")
    check = data.get("check", data.get("test"))
    try:
        return TestSuite(asserts=tuple(asserts), check=check, entry_point=data.get("entry_point"))
    except ValueError as e:
        raise ValueError(f"task {path}: {e}") from e
