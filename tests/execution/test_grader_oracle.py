"""Whether an answer was right must not show in the calls the candidate sees. A check that stopped
at its first failed assert (or whose message called the candidate again only on failure) told the
candidate which answer was wrong, and a store that outlives the run (the host's page or dentry
cache) carried that to its next run: a program holding no answers passed HumanEval's check after
a few runs (red-team s25 Q2, F1). The grader now records each assert and decides after the last
call (sandbox/recording.py)."""

from spade_ray.execution.canonical import example
from spade_ray.records import ExecStatus, TestSuite, Verdict

# Prints every call it gets; its answer to 1 is right only if RIGHT.
LOGS_ITS_CALLS = """
RIGHT = {right}

def f(x):
    print("call", x)
    return x + 1 if RIGHT or x != 1 else 0
"""

CHECK = TestSuite(check="""
def check(candidate):
    assert candidate(1) == 2, "first: " + str(candidate(1))
    for x in (2, 3):
        assert candidate(x) == x + 1
""", entry_point="f")

ASSERTS = TestSuite(asserts=("assert f(1) == 2, 'first: ' + str(f(1))\nassert f(2) == 3",
                             "assert f(3) == 4"))


def calls_seen(sandbox, suite, right):
    result = sandbox.check(LOGS_ITS_CALLS.format(right=right), suite)
    assert result.execution.status is ExecStatus.OK, result.execution.detail
    assert result.passed is right, result.outcomes
    return result.execution.stdout, result.outcomes


def test_a_check_makes_the_same_calls_whether_the_first_answer_is_right_or_wrong(sandbox):
    right, _ = calls_seen(sandbox, CHECK, True)
    wrong, outcomes = calls_seen(sandbox, CHECK, False)
    assert wrong == right == "call 1\ncall 1\ncall 2\ncall 3\n"
    # The verdict is the one the first failed assert gave, with its message.
    assert [(o.name, o.outcome.value, o.message) for o in outcomes] == [
        ("check", "failed", "AssertionError: first: 0")]


def test_asserts_make_the_same_calls_whether_the_first_answer_is_right_or_wrong(sandbox):
    right, _ = calls_seen(sandbox, ASSERTS, True)
    wrong, outcomes = calls_seen(sandbox, ASSERTS, False)
    assert wrong == right == "call 1\ncall 1\ncall 2\ncall 3\n"
    assert [(o.name, o.outcome.value, o.message) for o in outcomes] == [
        ("assert[0]", "failed", "AssertionError: first: 0"), ("assert[1]", "passed", "")]


# What honest test code does is kept: an assert whose failure the check's own `try` catches, one
# in a class body and one that binds a name (:=) still raise, as before; a message that raises
# on a failed assert gives that error, as before.
KEEPS_ITS_MEANING = TestSuite(check="""
def check(candidate):
    try:
        assert candidate(0) == 99
    except AssertionError:
        pass
    class T:
        y = candidate(1)
        assert y == 2
    assert (z := candidate(2)) == 3
    assert z == 3
""", entry_point="f")

A_MESSAGE_THAT_RAISES = TestSuite(check="""
def check(candidate):
    assert candidate(1) == 5, "got " + str(len(candidate(1)))
""", entry_point="f")


def test_the_rewrite_keeps_what_honest_test_code_means(sandbox):
    program = LOGS_ITS_CALLS.format(right=True)
    assert sandbox.check(program, KEEPS_ITS_MEANING).passed
    outcomes = sandbox.check(program, A_MESSAGE_THAT_RAISES).outcomes
    assert [(o.outcome.value, o.message) for o in outcomes] == [
        ("error", "TypeError: object of type 'int' has no len()")]


def test_an_answer_far_larger_than_the_expected_one_is_wrong_and_not_kept(sandbox):
    """The grader keeps every example's answer until the last call, and on the local backend it
    is outside the run's memory cgroup: 15 MB answered to each of 12 examples grew it to 182 MB
    under a 128 MB limit (red-team pass 14, R2). An answer over 1 MB (or 4x the task's longest
    expected result's text) fails its example unread, and the grader keeps none of it (the
    candidate reads the grader's resident memory at every call); a long right answer passes."""
    suite = TestSuite(entry_point="f", examples=tuple(
        example((i,), "x" * 70_000 if i == 0 else i) for i in range(8)))
    big = sandbox.check("""
import os
def grader_rss_mb():
    mine = {1, os.getpid(), os.getppid()}
    (pid,) = [p for p in os.listdir("/proc") if p.isdigit() and int(p) not in mine]
    with open(f"/proc/{pid}/status") as f:
        return [int(line.split()[1]) // 1024 for line in f if line.startswith("VmRSS")][0]
def f(i):
    print(grader_rss_mb())
    return 'y' * (15 << 20) if i else 'x' * 70_000
""", suite)
    assert [o.outcome for o in big.outcomes] == [Verdict.PASSED] + [Verdict.FAILED] * 7, big
    assert all("bytes, over the" in o.message for o in big.outcomes[1:])
    rss = [int(line) for line in big.execution.stdout.split()]
    assert len(rss) == 8 and max(rss) < rss[1] + 20, rss  # one answer's room at most
    right = sandbox.check("def f(i):\n    return 'x' * 70_000 if i == 0 else i\n", suite)
    assert right.passed, right


def test_how_an_answer_is_read_does_not_depend_on_its_own_expected_result(sandbox):
    """An answer was decoded at once if it was under 4x its own example's expected result
    (plus 64 KB), and refused unread otherwise: the grader's CPU time, which the candidate
    reads, told it whether each hidden result was longer than a size it picked (12 of 12,
    red-team s32). One bound for the task, and every answer decoded after the last call: 300
    KB answers are read alike whether the expected result is "a" or 100 KB long."""
    suite = TestSuite(entry_point="f", examples=tuple(
        example((i,), "a" if i % 2 else "b" * 100_000) for i in range(4)))
    result = sandbox.check("def f(i):\n    return 'c' * 300_000\n", suite)
    assert [(o.outcome, o.message) for o in result.outcomes] == \
        [(Verdict.FAILED, "AssertionError: the result differs from the expected one")] * 4
