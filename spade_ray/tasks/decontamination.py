"""Validation twins: a task that computes what a validation problem computes is that problem.

The validation set (HumanEval) measures what the solver learnt on tasks it never saw. A task
whose reference agrees with a validation problem's canonical solution on every one of the task's
examples trains the solver on that problem under another name and description: a validation
figure it lifts says nothing. The copies that matter are semantic (the shipped seed pool had
`gcd`, HumanEval/13's greatest_common_divisor, with nothing in common in its text), so the test
is by execution: TWINS (twin_job.py: trusted text, run in the sandbox like any candidate, since
the inputs are the generator's) calls every validation problem whose function accepts the task's
arguments on them, as they are and reordered, one dropped or a single tuple of them spread (the
mappings), each call under a CALL_S timer of CPU time that a watching process enforces, and
prints the first problem whose results are, as data, the task's expected outputs under one
mapping: all of them, or nearly all those it answers (TWIN_FRACTION, MIN_AGREEING), so that
special-casing an input or two does not hide a copy. A run that fails twice rejects its tasks
(admission: sandbox_error), and its sandbox CPU is charged to them. Each task has an allowance
of its own (TASK_S): one whose examples keep the calls busy past it is left unchecked
(admission: twin_check_slow), and the rest of its chunk is checked as before.

The whole benchmark is held out (app.py), not only the problems a run validates on: a
checkpoint is judged on all of HumanEval later, and a twin of a problem outside the run's subset
would have trained on it just the same (0.35 s of sandbox time for 8 tasks against all 164
problems, measured here, against 0.02 s for 8 problems).

What it does not catch: a twin with examples on which the validation solution is slower than
CALL_S, or slow to raise, past RAISE_S in all (one or two before any disagreeing answer are
unanswered), a task that computes a validation problem only on inputs the task does not show,
one that special-cases more than a fifth of the examples the problem answers (or shows fewer
than MIN_AGREEING and special-cases one), and disguises past the mappings, the relabellings, the
affine maps, reversals and containments of the answer (twin_rules.py), the float tolerance, a
parameter of the problem filled with a constant its own test passes, or two with two one call of
its test passes (HumanEval/44's change_base(x, 3) as "x in base 3", red-team s33: twin_rules'
PARTIAL, by agreement, the answer backwards or affine only, on the task's own calls), and the
two other views of a task (a problem mapped over a list's items, item_view; a list of numbers
given as text, parsed_view: both admitted before, red-team s32; checked against the problems
whose solution is more than one `return`, as the squares of a list's items are an honest task
and no copy of HumanEval/41) (arguments nested deeper or re-encoded otherwise, renamed keys, an
output wrapped in a dict, reduced (the sum of /9's running maxima) or transformed otherwise, an
input shifted (HumanEval/55's fib(n + 1)), a special case combined with a changed answer,
rounding to fewer than two decimal places, a parameter fixed to a constant the problem's test
never passes as a literal (base 11; base 5, which /44's test passes in a loop), or mapped over a
list or a text of numbers, or so in fewer than MIN_DISTINCT outputs (/76's is_simple_power(n, 3)
as "is n a power of 3"), or with its answer changed otherwise (relabelled, held inside a longer
one), the two views composed (a text of numbers, each mapped), a map over items that also passes
a shared argument, a problem used as a filter (red-team s33)), and a copy beside two tasks of
its chunk whose inputs stick its problem in one C call (a problem killed is left out for the
rest of the run, ITEM_SLACK_S, and gets one more pass at the end). A known task is checked only
on calls with the kinds of arguments its own examples pass (kinds), so a copy that changes the
argument types (a str for a list) of a known task is missed. A validation problem is checked on
every call, but its answer held at one place inside an expected output (a containment:
twin_rules.spots) counts only on calls of the kinds its own test passes (written_for): on a str,
HumanEval/12's longest(strings) returns the first character, which starts the output of many
honest string tasks, and all of the red team's four such tasks were its twins (s31). Checked on
those kinds alone, 82 of the 164 problems gave the same answers with one argument of another
kind (a digit str for an int, a str for a list of characters, a dict for a list of its keys),
and copies so called were admitted (red-team s31, pass 20).
"""

from __future__ import annotations

import ast
import base64
import dataclasses
import itertools
import json
import pickle
import re
from collections.abc import Sequence

from spade_ray.execution import canonical
from spade_ray.records import ExecStatus, IOExample, Limits, Task
from spade_ray.tasks.twin_job import CALL_S, ITEM_SLACK_S, TASK_S, TWINS, kind

# A batch task's items checked at most (item_view): a problem call each, under CALL_S, as many
# as a task's own examples with the augmented inputs (16) and the generator's
MAX_ITEMS = 24


@dataclasses.dataclass(frozen=True)
class HeldOut:
    """A validation problem as the twin test needs it: its id, a program defining its entry
    point (HumanEval: prompt + canonical solution), and that entry point."""

    problem_id: str
    source: str
    entry_point: str
    # a known task's: the kinds of arguments its own examples pass (kinds()); it is checked
    # only on calls of those kinds (empty: on every call, as a validation problem is)
    kinds: tuple[tuple[str, ...], ...] = ()
    # a validation problem's: the kinds its own test passes (tested_kinds()); an answer held
    # inside the expected output (twin_rules.spots) counts only on calls of those kinds
    # (empty: on every call)
    written_for: tuple[tuple[str, ...], ...] = ()
    # a validation problem's: the constants its own test passes (test_constants), which fill
    # the one or two parameters a task does not pass (twin_rules' PARTIAL)
    fills: tuple[tuple[int, tuple[tuple[int, str], ...]], ...] = ()


def kinds(examples: Sequence[IOExample]) -> tuple[tuple[str, ...], ...]:
    """The kinds of arguments the examples pass, each call as a tuple (twin_job.kind): what a
    known reference was admitted on. Red-team s25 F5: an archived `tidy(x)` admitted on ints
    alone answered lists with their squares and strs with every other character in branches
    its examples never reach, and honest later tasks of those shapes were known_twin (-1)."""
    return tuple(sorted({tuple(kind(v) for v in canonical.decode(e.args)) for e in examples}))


def tested_kinds(test: str) -> tuple[tuple[str, ...], ...]:
    """The kinds of arguments a HumanEval test passes its `candidate`, read off the calls whose
    arguments are all literals (161 of the 164 problems have some; the three whose tests
    build their inputs, /32, /38 and /50, get none and are checked on every call)."""
    found = set()
    for node in ast.walk(ast.parse(test)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id == "candidate" and not node.keywords):
            try:
                found.add(tuple(kind(ast.literal_eval(a)) for a in node.args))
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                continue  # a name, a starred list, an expression: not a literal
    return tuple(sorted(found))


def test_constants(test: str) -> tuple[tuple[int, tuple[tuple[int, str], ...]], ...]:
    """What a partial application of a HumanEval problem fills in (twin_rules' PARTIAL), as
    (the call's arity, ((position, the value pickled as TWINS reads it), ...)), each distinct
    one once: each literal argument its test passes its `candidate`, read on its own, and each
    two literal arguments one call passes together (HumanEval/71's triangle_area(a, 4, 5) as
    "the area of a triangle with sides a, 4 and 5" was admitted, red-team s34). Not other
    ints: filled with one, problems are everyday operations (/137's compare_one(x, 0) is
    max(x, 0), /44's change_base(x, 10) is str(x), /13's gcd(n, 0) is n), and honest tasks
    were their twins (s34's probe: twin_rules' PARTIAL)."""
    one, two = {}, {}
    for node in ast.walk(ast.parse(test)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id == "candidate" and not node.keywords) or \
                len(node.args) < 2 or any(isinstance(a, ast.Starred) for a in node.args):
            continue  # one argument: nothing left for a task to pass
        literals = []
        for k, arg in enumerate(node.args):
            try:
                value = ast.literal_eval(arg)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                continue  # a name or an expression: not a constant of the test's
            key, fill = (k, type(value).__name__, repr(value)), (k, _pickled(value))
            one.setdefault((len(node.args), key), (fill,))
            literals.append((key, fill))
        if len(node.args) > 2:
            for (a, fill_a), (b, fill_b) in itertools.combinations(literals, 2):
                two.setdefault((len(node.args), a, b), (fill_a, fill_b))
    return tuple((key[0], filled) for key, filled in (*one.items(), *two.items()))


def known_tasks(tasks: Sequence[Task]) -> tuple[HeldOut, ...]:
    """Tasks the run knows (its archive and seeds) as the twin test checks them: a generated
    task that a known one's reference answers is that task again, however its text differs
    (red-team pass 11: a seed's code padded with a string statement, under a re-worded
    description, was new to the hash and to near-duplicates, and paid as a new task)."""
    by_reference: dict[str, list[Task]] = {}
    for t in tasks:
        by_reference.setdefault(t.reference, []).append(t)
    return tuple(HeldOut(same[-1].task_id, reference, same[-1].entry_point,
                         kinds([e for t in same for e in (*t.visible, *t.tests.examples)]))
                 for reference, same in by_reference.items())


def held_out(problems: Sequence) -> tuple[HeldOut, ...]:
    """HumanEval-shaped problems (task_id, prompt, canonical_solution, entry_point, test; the
    run passes all of evaluation.humaneval.load_problems()) as the twin test needs them."""
    return tuple(HeldOut(p.task_id, p.prompt + p.canonical_solution, p.entry_point,
                         written_for=tested_kinds(p.test), fills=test_constants(p.test))
                 for p in problems)


@dataclasses.dataclass(frozen=True)
class TwinCheck:
    """What the twin run found: per task, the id of the validation problem it is, or None;
    per task, whether its checks ran past its allowance (TASK_S) and it was left unchecked;
    `failed`: the run failed twice and no task was checked (found is all None); and the
    sandbox CPU of the runs, to be charged to the tasks."""

    found: tuple[str | None, ...]
    slow: tuple[bool, ...]
    failed: bool
    cpu_s: float


def twins(tasks: Sequence[Sequence[IOExample]], held_out: Sequence[HeldOut], executor,
          limits: Limits) -> TwinCheck:
    """Per task (its examples), the id of a validation problem whose solution returns every one
    of its expected outputs (as data: `True` is not `1`) under one mapping of its arguments,
    or nearly every one of those it answers (TWIN_FRACTION, MIN_AGREEING), or None. One
    sandbox run for all of them, run again once if it fails: a run that fails twice checks
    no task, and says so (a failed run used to mean no twin, and one slow task in a chunk
    let a verbatim HumanEval/18 through: red-team s23 H1)."""
    unchecked = (False,) * len(tasks)
    if not tasks or not held_out:
        return TwinCheck((None,) * len(tasks), unchecked, False, 0.0)
    # each task as it is, then as item_view and parsed_view see it (derived)
    views, owner, derived = [], [], []
    for t, examples in enumerate(tasks):
        pairs = [(canonical.decode(e.args), canonical.decode(e.expected)) for e in examples]
        for view in (pairs, item_view(pairs), parsed_view(pairs)):
            if view:
                views.append(view)
                owner.append(t)
                derived.append(view is not pairs)
    job = {"problems": [[h.problem_id, h.source, h.entry_point, [list(k) for k in h.kinds],
                         [list(k) for k in h.written_for], one_line(h.source, h.entry_point),
                         [[arity, [list(f) for f in filled]] for arity, filled in h.fills]]
                        for h in held_out],
           "tasks": [[[_pickled(args), _pickled(expected)] for args, expected in view]
                     for view in views],
           "derived": derived}
    # every view's allowance and the one item that may overrun it, the definitions, start-up
    budget = sum((TASK_S * len(held_out) + 2) * CALL_S * len(view) + 2 * ITEM_SLACK_S
                 for view in views) + CALL_S * len(held_out) + 2.0
    cpu_s = 0.0
    for _ in range(2):
        run = executor.run(TWINS, stdin=json.dumps(job),
                           limits=dataclasses.replace(limits, timeout_s=budget, cpu_s=budget))
        cpu_s += run.cpu_s
        printed = _found(run, len(views))
        if printed is not None:
            found, slow = [None] * len(tasks), [False] * len(tasks)
            for v, t in enumerate(owner):
                found[t] = found[t] or printed[0][v]
                # a task is unchecked when its own examples were; its items are a second look
                slow[t] = slow[t] or (printed[1][v] and not derived[v])
            return TwinCheck(tuple(found), tuple(slow), False, cpu_s)
    return TwinCheck((None,) * len(tasks), unchecked, True, cpu_s)


def item_view(pairs: Sequence[tuple]) -> list[tuple]:
    """A batch task's items, one call each: when every call passes one list (or tuple) and
    gets back a list (or tuple) as long, (item,) and the item of the answer at its place, each
    distinct one once, up to MAX_ITEMS; else none. A validation problem mapped over a list
    (`[fib4(n) for n in ns]`, `[rolling_max(g) for g in groups]`) was admitted: no mapping of
    the arguments calls a problem once per item (red-team s32)."""
    out, seen = [], set()
    for args, expected in pairs:
        if len(args) != 1 or type(args[0]) not in (list, tuple) or \
                type(expected) not in (list, tuple) or len(expected) != len(args[0]):
            return []
        for item, answer in zip(args[0], expected):
            key = canonical.encode(((item,), answer))
            if key not in seen and len(out) < MAX_ITEMS:
                seen.add(key)
                out.append(((item,), answer))
    return out


def one_line(source: str, entry_point: str) -> bool:
    """Whether the entry point's body is one `return` (a docstring aside): `return n ** 2`
    (HumanEval/41), `return len(string)` (/23). A task seen as item_view or parsed_view sees
    it is checked only against problems that compute more: the squares or the lengths of a
    list's items are honest tasks, and were twins of /41 and /23 item by item."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == entry_point:
            body = node.body[1:] if ast.get_docstring(node) is not None else node.body
            return len(body) == 1 and isinstance(body[0], ast.Return)
    return False


def parsed_view(pairs: Sequence[tuple]) -> list[tuple]:
    """A task whose one argument is a text of numbers, with the list of them instead: when
    every call passes one str of ints (or of numbers) split by spaces, commas, semicolons or
    bars; else none. HumanEval/9's rolling_max on "5 3 5 2" was admitted (red-team s32)."""
    parsed = []
    for args, expected in pairs:
        if len(args) != 1 or type(args[0]) is not str:
            return []
        parsed.append(([t for t in re.split(r"[\s,;|]+", args[0].strip()) if t], expected))
    for number in (int, float):
        try:
            return [(([number(t) for t in tokens],), expected) for tokens, expected in parsed]
        except ValueError:
            continue
    return []


def _pickled(value) -> str:
    """A value as TWINS reads it: pickled (trusted data from here), since a repr does not
    always parse back (float('inf') prints as `inf`)."""
    return base64.b64encode(pickle.dumps(value)).decode()


def _found(run, count: int) -> tuple[tuple[str | None, ...], tuple[bool, ...]] | None:
    """Per task, the problem TWINS printed for it, and whether it said the task ran past its
    allowance; None when the run did not end well."""
    if run.status is not ExecStatus.OK:
        return None
    try:
        printed = json.loads(run.stdout)
    except ValueError:
        return None
    if not isinstance(printed, dict) or not isinstance(printed.get("found"), dict) \
            or not isinstance(printed.get("slow"), list):
        return None
    found, slow = printed["found"], set(printed["slow"])
    return (tuple(found.get(str(t)) if isinstance(found.get(str(t)), str) else None
                  for t in range(count)), tuple(t in slow for t in range(count)))
