"""What a candidate can learn of the tester process before it answers. The tester runs under the
same uid in the same jail, so its /proc entries are readable; its CPU time (schedstat) must not
tell the candidate anything about the answer it is asked for (test_grader_canaries.py holds the
attacks on the verdict itself)."""

from spade_ray.execution import canonical
from spade_ray.records import ExecStatus, TestSuite

# At its second call, the CPU time every other process of the jail but the harness (PID 1) spent
# since the first call: the tester's work between the two calls.
MEASURES_THE_TESTER = """
import os
SEEN = []

def cpu_ns():
    found = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) not in (1, os.getpid()):
            try:
                with open(f"/proc/{pid}/schedstat") as f:
                    found[pid] = int(f.read().split()[0])
            except OSError:
                pass
    return found

def echo(x):
    SEEN.append(cpu_ns())
    if len(SEEN) == 2:
        print("tester_ms", max(SEEN[1][p] - SEEN[0].get(p, 0) for p in SEEN[1]) / 1e6)
    return x
"""


def cpu_of_tester(sandbox, second_expected: str, first_expected: str = "a") -> float:
    suite = TestSuite(examples=(canonical.example(("a",), first_expected),
                                canonical.example(("b",), second_expected)), entry_point="echo")
    result = sandbox.check(MEASURES_THE_TESTER, suite)
    assert result.execution.status is ExecStatus.OK, result.execution.detail
    return float(result.execution.stdout.split("tester_ms")[1])


def test_the_tester_decodes_an_expected_result_only_after_the_answer(sandbox):
    # Decoding 4 MB before the call cost the tester 7-9 ms, visible to the candidate before it
    # answered (0.1-0.2 ms for one character); now the second call sees the same either way.
    small = min(cpu_of_tester(sandbox, "b") for _ in range(2))
    big = min(cpu_of_tester(sandbox, "y" * 4_000_000) for _ in range(2))
    assert big < small + 2.0, (small, big)


def test_the_tester_compares_no_answer_before_the_last_call(sandbox):
    # Comparing the first answer between the two calls showed at the second call: decoding its
    # 4 MB expected result cost the tester 7-9 ms, and a failure's path a few microseconds more
    # than a pass's (66-73% of verdicts told right, red-team s24). Every answer is now compared
    # after the last call.
    right = min(cpu_of_tester(sandbox, "b") for _ in range(2))
    wrong_and_big = min(cpu_of_tester(sandbox, "b", "y" * 4_000_000) for _ in range(2))
    assert wrong_and_big < right + 2.0, (right, wrong_and_big)
