"""The admission driver: a reference's answers are what a fresh program returns (real sandbox)."""

import json

import pytest

from spade_ray.records import ExecResult, ExecStatus
from spade_ray.tasks.admission import AdmissionConfig
from spade_ray.tasks.driver import ARTEFACT, DRIVER, answers, driver_limits, job
from tests.tasks.conftest import LIMITS

MAX_CPU_S = AdmissionConfig().max_reference_cpu_s


def driven(sandbox, reference: str, entry: str, inputs: list[tuple]) -> list | str:
    """[kind, repr] per input from one driver job, or its rejection reason."""
    run = sandbox.run(DRIVER, job(reference, entry, inputs),
                      limits=driver_limits(LIMITS, MAX_CPU_S))
    result = answers(run, len(inputs), MAX_CPU_S)
    return result if isinstance(result, str) else [r[:2] for r in result]


@pytest.mark.parametrize("reference, entry, inputs", [
    # red-team pass 10: 107 answered from the entry 7 left in the memo, 50 where a
    # fresh program says 11450; both passes of one namespace agree, the memo being full by then
    ("_memo = {}\n\ndef square_plus_one(n: int) -> int:\n"
     "    return _memo.setdefault(n % 100, n * n + 1)\n",
     "square_plus_one", [(7,), (11,), (4,), (107,)]),
    # the same state kept on an allowed module rather than in the reference's own namespace,
    # which a fresh namespace alone would not reset (the static rules allow the assignment)
    ("import string\n\ndef triple(n: int) -> int:\n    try:\n        memo = string.memo\n"
     "    except AttributeError:\n        memo = string.memo = {}\n"
     "    return memo.setdefault(n % 10, n * 3)\n",
     "triple", [(3,), (5,), (7,), (14,), (13,)]),
], ids=["module_memo", "memo_on_an_allowed_module"])
def test_an_answer_left_by_earlier_inputs_is_nondeterministic(sandbox, reference, entry,
                                                              inputs):
    """An answer is what a fresh program returns for that input alone; a reference whose
    answer follows the inputs before it gives the grader expected outputs a correct solver
    fails."""
    assert driven(sandbox, reference, entry, inputs) == "nondeterministic"


@pytest.mark.parametrize("anchor, bit", [
    # red-team pass 10, admitted as codegen and repair: bit 4 of an object()
    ("_UNIT = object()", "repr(_UNIT)[-3] in '13579bdf'"),
    # a function: another allocator size class, tracked by the GC; bit 8, as its blocks (160
    # bytes) all share bit 4 within a pool
    ("_UNIT = lambda: 0", "repr(_UNIT)[-4] in '13579bdf'"),
], ids=["object", "lambda"])
def test_an_answer_that_reads_the_address_of_an_object_made_at_import_is_nondeterministic(
        sandbox, anchor, bit):
    """One address bit of an object the module makes when it runs: the same in every fresh
    interpreter that runs the module at the same heap state (4 of 4 driver jobs agreed in the
    red team's run), a coin flip in the jail, whose candidates are forked from a long-lived
    server. The driver must see it move."""
    reference = f"{anchor}\n\ndef f(n: int) -> int:\n    return 2 * n + ({bit})\n"
    assert driven(sandbox, reference, "f", [(3,), (5,), (8,), (13,), (21,)]) == \
        "nondeterministic"


@pytest.mark.parametrize("reference, entry", [
    ("import functools\n\n@functools.lru_cache(maxsize=None)\ndef fib(n: int) -> int:\n"
     "    return n if n < 2 else fib(n - 1) + fib(n - 2)\n", "fib"),
    # a memo that never changes an answer: keyed by the whole input
    ("_memo = {}\n\ndef fib(n: int) -> int:\n    if n not in _memo:\n"
     "        _memo[n] = n if n < 2 else fib(n - 1) + fib(n - 2)\n    return _memo[n]\n", "fib"),
    # a constant table built when the module runs
    ("def _table(size: int) -> list:\n    out = [0, 1]\n    while len(out) < size:\n"
     "        out.append(out[-1] + out[-2])\n    return out\n\n_FIB = _table(41)\n\n"
     "def fib(n: int) -> int:\n    return _FIB[n]\n", "fib"),
], ids=["lru_cache", "memo_dict", "module_table"])
def test_honest_memoisation_and_module_tables_are_deterministic(sandbox, reference, entry):
    """Module state that never changes an answer is no reason to reject a reference."""
    inputs = [(30,), (10,), (1,), (20,), (10,)]
    assert driven(sandbox, reference, entry, inputs) == \
        [["ok", "832040"], ["ok", "55"], ["ok", "1"], ["ok", "6765"], ["ok", "55"]]


@pytest.mark.parametrize("reference, entry, inputs, kept", [
    # red-team s31: admitted, and an iterative count_up or a log10 digits7 (correct) failed
    ("def count_up(n: int) -> int:\n    def go(k):\n        return go(k + 1) if k < n else k\n"
     "    try:\n        return go(0)\n    except RecursionError:\n        return -1\n",
     "count_up", [(10,), (995,), (2000,), (500,)], [("10",), None, None, ("500",)]),
    ("def digits7(n: int) -> int:\n    try:\n        return len(str(7 ** n))\n"
     "    except ValueError:\n        return -1\n",
     "digits7", [(10,), (6000,), (5000,)], [("9",), None, ("4226",)]),
    # red-team s31, pass 20: past what the raised interpreter raises, a handler that names no
    # error made -1 the answer in all three, and honest solutions failed it
    ("def count_up(n: int) -> int:\n    def go(k):\n        return go(k + 1) if k < n else k\n"
     "    try:\n        return go(0)\n    except Exception:\n        return -1\n",
     "count_up", [(10,), (20000,), (500,)], [("10",), None, ("500",)]),
    ("def span(n: int) -> int:\n    try:\n        return len(range(n))\n    except:\n"
     "        return -1\n", "span", [(5,), (2 ** 64,), (100,)], [("5",), None, ("100",)]),
    # a limit error raised and caught deep inside, whatever the answer then is
    ("def depth(n: int) -> int:\n    def go(k):\n        try:\n            go(k + 1)\n"
     "        except BaseException:\n            pass\n    go(0)\n    return n\n",
     "depth", [(3,)], [None]),
    # red-team s33: a limit that raises ValueError, in islice and in a format's width
    ("import itertools\ndef head(xs: list, n: int) -> list:\n    try:\n"
     "        return list(itertools.islice(xs, n))\n    except ValueError:\n        return [-1]\n",
     "head", [([1, 2], 1), ([3], 2 ** 64), ([4, 5], 5)], [("[1]",), None, ("[4, 5]",)]),
    ("def pad(x: int, w: int) -> str:\n    try:\n        return f'{x:>{w}}'\n"
     "    except ValueError:\n        return ''\n",
     "pad", [(7, 3), (7, 2 ** 64), (12, 1)], [("'  7'",), None, ("'12'",)]),
    # an answer nested nearly to the raised limit: repr reads it, the set-order comparison
    # cannot; that is the comparison's limit, not a set's order (no set_order for the task)
    ("def nest(n: int) -> list:\n    x = []\n    for _ in range(n):\n        x = [x]\n"
     "    return x\n", "nest", [(2,), (9990,)], [("[[[]]]",), None]),
], ids=["recursion_limit", "int_str_digits", "recursion_past_the_raised_limit",
        "index_size", "caught_inside", "islice_past_maxsize", "format_width_past_maxsize",
        "nested_to_the_comparisons_limit"])
def test_an_answer_an_interpreter_limit_decides_is_dropped(sandbox, reference, entry, inputs,
                                                          kept):
    """The same in every interpreter with the defaults, but not an answer of the task: the
    input is dropped as one the reference raises on, and the others keep their answers."""
    assert driven(sandbox, reference, entry, inputs) == [
        ["ok", k[0]] if k else ["raise", ARTEFACT] for k in kept]


@pytest.mark.parametrize("body", [
    # red-team s32: "each distinct value doubled, in any order", graded on CPython's order
    # of an int set, which every interpreter shares; a sorted or first-seen answer failed
    "return [2 * x for x in set(xs)]",
    "out = []\n    for x in {abs(v) for v in xs}:\n        out.append(x)\n    return out",
    "return list(set(xs))",
    "return '-'.join(map(str, frozenset(xs)))",
    "return sorted(set(xs), key=lambda v: v % 2)",  # ties keep the set's order
    "s = set(xs)\n    return [s.pop(), len(s)]",
    "return next(iter(set(xs)))",
    "return [*set(xs)][0]",
    "return str(set(xs))",
    "return f'{set(xs)}!'",
    "return '%s!' % set(xs)",  # read in C: the set itself is made to iterate in the order
    # red-team s33: the same under reversal, not under the shuffle
    "s = list(set(xs))\n    return s[0] + s[-1]",
    "s = list(set(xs))\n    return sum(abs(b - a) for a, b in zip(s, s[1:]))",
    "return bytes({x % 256 for x in xs})",
    "out = []\n    out += set(xs)\n    return out",
], ids=["comprehension", "loop", "list", "join", "sort_ties", "pop", "next_iter", "star", "str",
        "f_string", "percent", "first_plus_last", "path_length", "bytes", "augmented"])
def test_an_answer_a_sets_order_decides_rejects_the_task(sandbox, body):
    """A set's order is the same in every interpreter for ints, but no description states it:
    the raised interpreter also answers with every set read in other orders, and an answer
    that changes rejects the task (on another input both orders could keep it by chance). An
    input with one distinct value has one order."""
    reference = f"def f(xs: list) -> list:\n    {body}\n"
    # the shuffle keeps a path's length through these for at most 1 order in 10, 4, 6, 90
    assert driven(sandbox, reference, "f", [([4, 4],), ([3, 1, 2, 200, -7],), ([65, 1, 33, -2],),
                                            ([70, -6, 3, 19, 3],), ([9, 100, -50, 7, 31, 2],)]
                  ) == "set_order"
    assert driven(sandbox, reference, "f", [([4, 4],), ([5],)])[0][0] == "ok"


def test_a_set_given_as_input_is_read_backwards_too(sandbox):
    """A slice assignment reads its set in C, at no place the rewrite's syntax sees: the
    input's own set iterates backwards."""
    reference = "def f(s: set) -> list:\n    out = [0]\n    out[:] = s\n    return out\n"
    assert driven(sandbox, reference, "f", [({4},), ({3, 1, 2},)]) == "set_order"
    assert driven(sandbox, reference, "f", [({4},), ({5},)]) == [["ok", "[4]"], ["ok", "[5]"]]


@pytest.mark.parametrize("body, answers", [
    # a dict's order is no answer (the grader compares dicts as mappings): int keys, as str
    # keys would take the order of each interpreter's own string hash
    ("return {x: xs.count(x) for x in set(xs)}", ["{200: 1, 1: 1, 3: 2}", "{5: 1}"]),
    ("return sorted(set(xs))", ["[1, 3, 200]", "[5]"]),
    ("return len(set(xs)) + sum(map(abs, set(xs)))", ["207", "6"]),
    ("return max(set(xs)) - min(frozenset(xs))", ["199", "0"]),
    ("seen = set()\n    for x in xs:\n        seen.add(x)\n    return len(seen)", ["3", "1"]),
    # a starred target is written, not read: the rewrite once made it a call, which does not
    # compile, and every reference that unpacked so was a reference_error
    ("first, *rest = sorted(set(xs))\n    return [first, len(rest)]", ["[1, 2]", "[5, 0]"]),
    ("out = []\n    for a, *b in [xs, xs[::-1]]:\n        out.append(a + len(b))\n    return out",
     ["[6, 203]", "[5, 5]"]),
], ids=["dict", "sorted", "len_sum", "max_min", "set_built_in_order", "starred_target",
        "starred_loop_target"])
def test_an_answer_no_sets_order_decides_keeps_its_answers(sandbox, body, answers):
    reference = f"def f(xs: list) -> object:\n    {body}\n"
    assert driven(sandbox, reference, "f", [([3, 1, 3, 200],), ([5],)]) == \
        [["ok", a] for a in answers]


def test_a_handler_that_meets_no_limit_keeps_its_answers(sandbox):
    """Honest parsing code catches what it parses badly: only a limit's errors drop an input."""
    reference = ("def parse(text: str) -> int:\n    try:\n        return int(text)\n"
                 "    except Exception:\n        return -1\n")
    assert driven(sandbox, reference, "parse", [("12",), ("x",), ("7",)]) == \
        [["ok", "12"], ["ok", "-1"], ["ok", "7"]]


def _run(*outputs) -> ExecResult:
    """A driver run whose interpreters printed `outputs` (JSON values), in order."""
    return ExecResult(status=ExecStatus.OK, exit_code=0,
                      stdout=json.dumps([[0, json.dumps(o), ""] for o in outputs]), stderr="",
                      truncated=False, wall_s=0.1, cpu_s=0.1, peak_memory_mb=10.0, env_hash="",
                      limits_enforced_by="")


def test_only_the_inputs_the_raised_interpreter_answers_otherwise_are_dropped():
    default = [["ok", "1", 2], ["ok", "-1", 4], ["raise", "RecursionError", 0]]
    raised = [["ok", "1", 2], ["ok", "995", 2], ["ok", "3000", 2]]
    assert answers(_run(default, raised, default), 3, MAX_CPU_S) == \
        [["ok", "1", 2], ["raise", ARTEFACT, 0], ["raise", ARTEFACT, 0]]
    # the two with the defaults must agree exactly, as before
    assert answers(_run(default, default, raised), 3, MAX_CPU_S) == "nondeterministic"


@pytest.mark.parametrize("raised", [[1, "x", None], [[], ["ok"], {"a": 1}]])
def test_entries_the_reference_forged_are_dropped_not_trusted(raised):
    """A reference that writes the interpreter's output itself (and exits) chooses its shape."""
    default = [["ok", "1", 2], ["ok", "2", 3], ["ok", "3", 4]]
    assert answers(_run(default, raised, default), 3, MAX_CPU_S) == \
        [["raise", ARTEFACT, 0]] * 3


def test_an_input_that_crashes_the_raised_interpreter_is_dropped_not_the_task(sandbox):
    """Recursion through sorted(key=...) overflows the C stack at the raised recursion limit
    (red-team s31, pass 20: the whole task was reference_error); at the default one it raises
    RecursionError. Answered alone in a forked child, the crash loses that input only."""
    reference = ("import functools\n\n@functools.lru_cache(maxsize=None)\n"
                 "def steps(n: int) -> int:\n    if n <= 0:\n        return 0\n"
                 "    options = sorted({n - int(d) for d in str(n) if d != '0'}, key=steps)\n"
                 "    return 1 + steps(options[0])\n")
    assert driven(sandbox, reference, "steps", [(7,), (30000,), (19,)]) == \
        [["ok", "1"], ["raise", ARTEFACT], ["ok", "3"]]
