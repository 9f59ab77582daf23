"""Checking a candidate against a task's tests, with per-test outcomes for partial credit.

The tests run in the jail's grader process, which calls the candidate's functions through a
data-only channel (sandbox/grader.py) and reports outcomes carrying the request's random nonce.
A candidate passes only if that report arrived, well formed and with the right nonce, holds one
outcome per test, every outcome passed and the candidate's execution itself ended `ok`: nothing
the candidate prints, exits with or writes anywhere is ever success.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from spade_ray.execution.canonical import example
from spade_ray.records import (
    CheckResult,
    ExecResult,
    ExecStatus,
    IOExample,
    TestOutcome,
    TestSuite,
    Verdict,
)


def to_check_result(tests: TestSuite, result: ExecResult, report: dict[str, Any]
                    ) -> CheckResult:
    """`report` is protocol.grader_report's: outcomes only when the grader's report was valid,
    and the suspicion (grader-side evidence of probing) always."""
    # protocol._is_outcome checked each one's fields and types: no records.from_dict, whose
    # type-hint resolution cost 0.1 ms per outcome on the host (measured).
    outcomes = tuple(TestOutcome(**o) for o in report.get("outcomes", ()))
    passed = ("outcomes" in report and result.status is ExecStatus.OK and len(outcomes) ==
              tests.total and all(o.outcome is Verdict.PASSED for o in outcomes))
    return CheckResult(execution=result, outcomes=outcomes, tests_total=tests.total,
                       passed=passed, suspicion=report.get("suspicion", ""))


def load_tests(path: str | Path) -> TestSuite:
    """A task file's tests. Accepts our fields (`tests`: list of asserts, `check`, `entry_point`,
    `preamble`, `examples`: [{"args": [...], "expected": ...}] in JSON, `float_tolerance`) and
    HumanEval's (`test` holding `def check(candidate)`, `entry_point`, `prompt` as preamble).
    JSON has no tuples: an example's `expected` is a list, which a returned tuple never equals
    (use asserts or a check program for such functions)."""
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
    examples = _examples(path, data.get("examples", []))
    try:  # TestSuite names the field that is wrong (float_tolerance, entry_point, check ...)
        return TestSuite(asserts=tuple(asserts), check=check, entry_point=data.get("entry_point"),
                         examples=examples, preamble=data.get("preamble", data.get("prompt")),
                         float_tolerance=data.get("float_tolerance", 0.0))
    except ValueError as e:
        raise ValueError(f"task {path}: {e}") from e


_EXAMPLE = "an object with 'args' (a list) and 'expected'"


def _examples(path: Path, given: Any) -> tuple[IOExample, ...]:
    """A task file's examples, or an error naming the example by its index and what is wrong
    with it (an exception's repr, KeyError('expected'), said neither)."""
    if not isinstance(given, list):
        raise ValueError(f"task {path}: 'examples' must be a list, each {_EXAMPLE}")
    examples = []
    for i, e in enumerate(given):
        if not isinstance(e, dict):
            raise ValueError(f"task {path}: examples[{i}] must be {_EXAMPLE}, got "
                             f"{json.dumps(e)[:80]}")
        for key in ("args", "expected"):
            if key not in e:
                raise ValueError(f"task {path}: examples[{i}] has no {key!r}; each example is "
                                 f"{_EXAMPLE}")
        if not isinstance(e["args"], list):
            raise ValueError(f"task {path}: examples[{i}].args must be a list of the "
                             f"arguments, got {json.dumps(e['args'])[:80]}")
        try:
            examples.append(example(tuple(e["args"]), e["expected"]))
        except (ValueError, TypeError) as err:
            raise ValueError(f"task {path}: examples[{i}]: {err}") from err
    return tuple(examples)
