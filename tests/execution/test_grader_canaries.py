"""Canaries for the reward: programs that try to be scored correct without being correct.

Every attack is a WRONG solution of `add(a, b)` (it never returns a + b by itself) plus a trick
aimed at the grader. Each runs against the three shapes of tests (assert statements, a HumanEval
`check(candidate)` with its preamble, I/O examples) on every backend, and must score exactly 0.0,
never pass, and never come back `sandbox_error` (which would drop it from training instead of
penalising it). Controls, correct programs with odd but honest habits, must score 1.0. The
families: equality overloading and plain-type subclasses, builtin shadowing and patching, exits and
BaseExceptions at every point, trace and profile hooks, frame, gc and memory introspection, fd
forging and flooding, attacks on the grader process, and harness-crash attempts.
"""

import textwrap

import pytest

from spade_ray.execution.canonical import example
from spade_ray.records import ExecStatus, TestSuite
from tests.execution.canaries import ASSERTS, ATTACKS, CONTROLS, SCAN, SHAPES, verdict


@pytest.mark.parametrize("program", [*ATTACKS.values(), *CONTROLS.values()])
def test_every_canary_is_valid_python(program):
    """A canary that does not compile would score 0.0 for the wrong reason."""
    compile(textwrap.dedent(program), "canary", "exec")


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("attack", ATTACKS)
def test_attack_scores_zero(sandbox, attack, shape):
    result, s = verdict(sandbox, ATTACKS[attack], SHAPES[shape])
    assert (s.value, result.passed) == (0.0, False), result.outcomes
    assert result.execution.status is not ExecStatus.SANDBOX_ERROR, result.execution.detail


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("control", CONTROLS)
def test_control_scores_one(sandbox, control, shape):
    result, s = verdict(sandbox, CONTROLS[control], SHAPES[shape])
    assert (s.value, result.passed) == (1.0, True), (result.outcomes, result.execution)


def test_the_memory_scanner_finds_text_that_is_there(sandbox):
    """Positive control for the memory canary: a needle it did not build is found."""
    code = SCAN + "\nplanted = ''.join(['== ', '15'])\nprint(leaked(b'== 15'))\n"
    assert sandbox.run(textwrap.dedent(code)).stdout.strip() not in ("", "0")


def test_a_forged_frame_does_not_touch_the_next_candidates(sandbox):
    sandbox.check(textwrap.dedent(ATTACKS["forged_reports_on_every_fd"]), ASSERTS)
    results = [sandbox.check(CONTROLS["plain"], ASSERTS) for _ in range(3)]
    assert all(r.passed for r in results)


def test_ipc_objects_cannot_be_created(sandbox):
    code = textwrap.dedent("""
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        print(libc.shmget(0, 150 << 20, 0o1000 | 0o600), libc.semget(0, 1, 0o1000 | 0o600),
              libc.msgget(0, 0o1000 | 0o600))
        try:
            print(os.listdir("/dev/shm"), open("/dev/shm/x", "w"))
        except OSError as e:
            print("shm", type(e).__name__)
    """)
    result = sandbox.run(code)
    assert result.stdout.split()[:3] == ["-1", "-1", "-1"], result.stdout


def test_io_uring_is_refused(sandbox):
    code = textwrap.dedent("""
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        params = ctypes.create_string_buffer(120)
        print(libc.syscall(425, 8, params), ctypes.get_errno())
    """)
    assert sandbox.run(code).stdout.split() == ["-1", "1"]


@pytest.mark.parametrize("shape", SHAPES)
def test_what_a_candidate_says_comes_back_as_text_that_can_be_recorded(sandbox, shape, tmp_path):
    """A lone surrogate travels in JSON (an exception message) but not in UTF-8: the trace,
    W&B and a terminal would refuse it, and a round that cannot record a result dies."""
    from spade_ray.tracking import TraceStore, Versions

    code = "def add(a, b):\n    raise ValueError('\\ud800 bad \\udfff')\n"
    result, s = verdict(sandbox, code, SHAPES[shape])
    assert (s.value, result.passed) == (0.0, False)
    assert any("bad" in o.message for o in result.outcomes), result.outcomes
    with TraceStore(tmp_path / "trace.sqlite", "run") as store:
        assert store.record_execution(0, "t/0", "t", result, Versions(0, 0)) == 1


# `tally(s)`: how often each character occurs, and its first and last character as a pair
TALLY = {
    "asserts": TestSuite(asserts=("assert tally('aab') == ({'a': 2, 'b': 1}, ('a', 'b'))",
                                  "assert tally('x') == ({'x': 1}, ('x', 'x'))")),
    "check": TestSuite(preamble="def tally(s):\n    pass\n", entry_point="tally", check=(
        "def check(candidate):\n"
        "    assert candidate('aab') == ({'a': 2, 'b': 1}, ('a', 'b'))\n"
        "    assert candidate('x') == ({'x': 1}, ('x', 'x'))\n")),
    "examples": TestSuite(entry_point="tally", examples=(
        example(("aab",), ({"a": 2, "b": 1}, ("a", "b"))),
        example(("x",), ({"x": 1}, ("x", "x"))))),
}
ENDS = "    ends = collections.namedtuple('Ends', 'first last')(s[0], s[-1])\n"


@pytest.mark.parametrize("shape", TALLY)
@pytest.mark.parametrize("body, right", [
    ("    return collections.Counter(s), (s[0], s[-1])\n", True),
    ("    return collections.OrderedDict(collections.Counter(s)), (s[0], s[-1])\n", True),
    ("    d = collections.defaultdict(int)\n    for c in s:\n        d[c] += 1\n"
     "    return d, (s[0], s[-1])\n", True),
    (ENDS + "    return dict(collections.Counter(s)), ends\n", True),
    ("    class Ends(typing.NamedTuple):\n        first: str\n        last: str\n"
     "    return collections.Counter(s), Ends(s[0], s[-1])\n", True),
    # wrong as Python compares them too: a deque is no tuple, a Counter of other counts no dict
    ("    return collections.Counter(s), collections.deque([s[0], s[-1]])\n", False),
    ("    return collections.Counter(s * 2), (s[0], s[-1])\n", False),
], ids=["counter", "ordered_dict", "defaultdict", "namedtuple", "typing_namedtuple", "deque",
        "wrong_counts"])
def test_pythons_own_containers_are_judged_as_the_type_they_extend(sandbox, shape, body, right):
    """A Counter equals the dict of its counts, a namedtuple the tuple of its fields, as `==`
    says and HumanEval's own harness passes them; only their items cross (red-team s33: a
    correct HumanEval/111 returning a Counter scored 0)."""
    code = "import collections, typing\ndef tally(s):\n" + body
    result, s = verdict(sandbox, code, TALLY[shape])
    assert (s.value, result.passed) == ((1.0, True) if right else (0.0, False)), result.outcomes
    assert result.suspicion == ""
