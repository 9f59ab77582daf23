"""What a program earns without solving its task: the floor partial credit is measured from.

A policy optimised against partial credit first finds the programs that read nothing of the task
but its prompt: a table of the shown examples, and for any other input a constant, an argument
as it is, one cheap operation on an argument (`len`, `sorted`, a reversal, `min`, `sum`,
`not`, `a + b`...), or two of the one-argument operations in a row (red-team pass 10: a table
plus `sorted(set(xs), reverse=True)` earned 0.667 on the seed `remove_duplicates`, where every
single operation earned nothing). On the seed pool, the best constant or echo earned 0.25 or
more on 34 of 45 codegen tasks (`return False`: 0.75), and a shown table plus one cheap
operation 0.33 to 0.67 on eight more; each outscored every honest attempt that raised.
`null_credit` is the best such program's credit on a suite, the zero of
`scoring.partial_credit`.

The guesses run here, on the host, on decoded plain data (admission caps a generated task's
inputs and outputs; an example whose encoded arguments are over `MAX_GUESSED_ARGS` characters is
a miss for every operation); one that raises is a miss. Two operations in a row make 961 guesses
an argument: once per task, 4.8 s of host CPU for `null_credit` and 3.9 s for
`hardest_examples` on 14 examples of 90,000-character strings, the largest arguments guessed on
(1.8 s and 1.7 s with s35's 441), 0.8 s and 1.1 s on lists of 9,000 ints
(/work/notes/s36/floor/worst.py). Non-goal: every short program; these are the ones that need
no reading of the description.

A generated task's hidden examples are mostly one-step mutations of the generator's inputs
(tasks/augment.py), neighbours of the shown ones, so a rule fitted to the shown examples carries
over to them. Red-team pass 11 on the augmented pool: `None if len(set(xs)) < 2 else max(xs) - 1`
earned 0.6 on `second_largest` (11 of 13) over honest attempts scoring 0; `n + 1` below two base
cases 0.1 on `lucas`; the output of the nearest shown input 0.111 on `hanoi`. So the floor also
has each numeric guess shifted by a small constant (`OFFSETS`), every guess behind a one-line
guard that returns a constant (`GUARDS`: `c if len(set(xs)) < 2 else ...`), and the output of
the shown input nearest to each hidden one (`nearest_shown`).

Red-team pass 14 went one step further: two of those guesses, one on each side of a one-line
condition (`min(xs) if target in xs else -1` after a table of the shown examples), earned 0.10-
0.40 on 4 of 39 generated tasks, above honest near-misses at 0. So the floor is now the best
such split: any guess where a condition holds, any other where it does not (`SPLITS` on one
argument, `SPLITS2` on two, and every guess whose value is a bool), the constant behind a guard
being one case of it. Measured (/work/notes/s27/sel/near_miss.py, one-operator mutants of the
references as honest near-misses): on the seed pool it changes no near-miss's credit; on the
generated pool, with admission's hidden examples chosen against these guesses
(`hardest_examples`), near-misses keep their credit (38 of 276 credited, mean 0.059, where the
floor without splits and examples drawn at random gave 40 of 279, mean 0.053).

Red-team pass 24 found guesses and conditions just outside those lists: the middle item
(`xs[len(xs) // 2]`, 0.654 on the seed `most_frequent`, above honest attempts with the wrong
tie rule at 0.308), a change of case, and splits on `len(x) % 2 == 0`, `x[0] < x[-1]`,
`s.isalpha()`, `b % a == 0`... So UNARY has the middle item, a tail, an init, a square, a
split into words and three case changes, and SPLITS and SPLITS2 those tests. On the 45 seed
codegen tasks (/work/notes/s36/floor/measure.py): an extra guess alone earned credit on 4 tasks
before (up to 0.654) and 1 after (0.25), a split on such a test on 8 (up to 0.667) and 1
(0.375), a three-way split (two nested conditions, which the floor does not model) on 14 (up to
0.885) and 9 (0.625); the reference's one-operator mutants, as honest near-misses, were
credited 45 of 265 times (mean 0.068) before and 34 (0.056) after. The floor's host time on
those tasks rose from 27 to 42 ms a task, `hardest_examples`' from 46 to 76 ms. `xs[1]` and
`xs[-2]` are left out: two of them in a row (`sorted(set(xs))[-2]`) solve the seed
`second_largest`, which admission would then reject as trivial.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence, Sized
from typing import Any

from spade_ray.execution import canonical
from spade_ray.records import IOExample, TestSuite

MAX_GUESSED_ARGS = 100_000

# One cheap operation on one argument ({0}), and on two ({0}, {1}): the expression, so that a
# test can write each as a program; the functions are made of the same text.
UNARY = {
    "len": "len({0})", "sorted": "sorted({0})", "sorted_desc": "sorted({0}, reverse=True)",
    "reversed": "{0}[::-1]", "min": "min({0})", "max": "max({0})", "sum": "sum({0})",
    "first": "{0}[0]", "last": "{0}[-1]", "not": "not {0}", "bool": "bool({0})",
    "neg": "-{0}", "abs": "abs({0})", "str": "str({0})", "int": "int({0})",
    "lower": "{0}.lower()", "upper": "{0}.upper()", "strip": "{0}.strip()",
    "set_sorted": "sorted(set({0}))", "wrapped": "[{0}]", "last_index": "len({0}) - 1",
    "middle": "{0}[len({0}) // 2]", "tail": "{0}[1:]", "init": "{0}[:-1]",
    "square": "{0} * {0}", "split": "{0}.split()", "title": "{0}.title()",
    "capitalize": "{0}.capitalize()", "swapcase": "{0}.swapcase()",
}
BINARY = {
    "add": "{0} + {1}", "sub": "{0} - {1}", "mul": "{0} * {1}", "eq": "{0} == {1}",
    "in": "{0} in {1}", "min2": "min({0}, {1})", "max2": "max({0}, {1})",
}
# A numeric guess shifted by a small constant ({0}: the guess), and a one-line guard on an
# argument ({0}) behind which a program returns a constant instead of its guess.
OFFSETS = {"plus1": "{0} + 1", "minus1": "{0} - 1", "plus2": "{0} + 2", "minus2": "{0} - 2",
           "double": "2 * {0}", "half": "{0} // 2"}
GUARDS = {"falsy": "not {0}", "len_lt2": "len({0}) < 2", "len_lt3": "len({0}) < 3",
          "distinct_lt2": "len(set({0})) < 2", "negative": "{0} < 0", "lt2": "{0} < 2",
          "lt3": "{0} < 3"}
# The conditions a program splits on without reading the description: the guards, and a few more
# one-line tests of one argument ({0}) or two ({0}, {1}) (red-team pass 14's screen).
# (`even` of numbers only: `s % 2` of a str is printf, and a hidden '%01000000000d' built a
# gigabyte on the host, red-team pass 16)
SPLITS = GUARDS | {"zero": "{0} == 0", "one": "{0} == 1",
                   "even": "type({0}) in (int, float) and {0} % 2 == 0",
                   "len1": "len({0}) == 1", "is_sorted": "list({0}) == sorted({0})",
                   "has_negative": "any(v < 0 for v in {0})",
                   "has_duplicate": "len(set({0})) < len({0})",
                   "mod3": "type({0}) is int and {0} % 3 == 0",
                   "len_even": "len({0}) % 2 == 0", "first_lt_last": "{0}[0] < {0}[-1]",
                   "is_sorted_desc": "list({0}) == sorted({0}, reverse=True)",
                   "palindrome": "{0} == {0}[::-1]", "has_space": "' ' in {0}",
                   "isalpha": "{0}.isalpha()", "isdigit": "{0}.isdigit()",
                   "isupper": "{0}.isupper()", "islower": "{0}.islower()",
                   "all_positive": "all(v > 0 for v in {0})", "sum_positive": "sum({0}) > 0"}
SPLITS2 = {"lt": "{0} < {1}", "gt": "{0} > {1}",  # `==` and `in` are guesses (BINARY)
           "divides": "type({0}) is int and type({1}) is int and {1} != 0 and {0} % {1} == 0",
           "longer": "len({0}) > {1}", "len_eq": "len({0}) == {1}"}
_OPS: dict[str, Callable[..., Any]] = {
    name: eval(f"lambda a, b=None: {expression.format('a', 'b')}")  # noqa: S307 - our text
    for name, expression in (UNARY | BINARY | OFFSETS | SPLITS | SPLITS2).items()}


def guesses(examples: Sequence[tuple[tuple, Any]], tolerance: float = 0.0,
            sizes: Sequence[int] | None = None) -> dict[str, list[bool]]:
    """Per guess, which (args, expected) examples it gets right: `const:<repr>` for every
    example's expected value, `arg<k>` for an argument as it is, `<op>(arg<k>)` and
    `<op>(arg<j>, arg<k>)` for one operation and `<op>(<op>(arg<k>))` for two, guarded: where
    an operation raises (on an empty list, say), `x if xs else c` returns the best constant of
    those inputs (`sizes`: each example's encoded argument size)."""
    return _guessed(examples, tolerance, sizes)[0]


def _guessed(examples: Sequence[tuple[tuple, Any]], tolerance: float,
             sizes: Sequence[int] | None) -> tuple[dict[str, list[bool]], list[list[bool]]]:
    """`guesses`' rows, and where each guess whose values are bools is True: a condition a
    program can split on (`xs == sorted(xs)` is no guess of a list, but `x in xs` is one)."""
    sizes = sizes or [0] * len(examples)
    rows: dict[str, list[bool]] = {}
    conditions: list[list[bool]] = []
    for _, expected in examples:
        rows.setdefault(f"const:{canonical.encode(expected)}",
                        [canonical.same(expected, e, tolerance) for _, e in examples])
    arity = max((len(args) for args, _ in examples), default=0)
    arg_lists = [args for args, _ in examples]
    answers = [e for _, e in examples]
    # per example, the examples whose expected value is the same: once here, not per guess
    # (comparing the raised ones pairwise in every guard was most of admission's host time)
    alike = [_mask(canonical.same(a, b, tolerance) for b in answers) for a in answers]
    for name, values in _values(arg_lists, sizes, arity):
        rows[name] = _guarded(_rights(values, answers, tolerance), alike)
        if all(v is _RAISED or v is _MISSED or type(v) is bool for v in values):
            conditions.append([v is True for v in values])
        if any(_is_number(v) for v in values):
            for offset in OFFSETS:
                shifted = [_applied(offset, (v,), (0,), 0) if _is_number(v) else _RAISED
                           for v in values]
                rows[f"{offset}({name})"] = _guarded(_rights(shifted, answers, tolerance),
                                                     alike)
    return rows, conditions


def _values(arg_lists: Sequence[tuple], sizes: Sequence[int], arity: int
            ) -> Iterator[tuple[str, list[Any]]]:
    """Each guess of an argument, one operation or two, with its value on every example."""
    for k in range(arity):
        yield f"arg{k}", [args[k] if k < len(args) else _MISSED for args in arg_lists]
        for name in UNARY:
            values = [_applied(name, args, (k,), size) for args, size in zip(arg_lists, sizes)]
            yield f"{name}(arg{k})", values
            for outer in UNARY:
                yield f"{outer}({name}(arg{k}))", [
                    v if v is _RAISED or v is _MISSED else _applied(outer, (v,), (0,), 0)
                    for v in values]
    for j, k in itertools.permutations(range(arity), 2):
        for name in BINARY:
            yield f"{name}(arg{j}, arg{k})", [_applied(name, args, (j, k), size)
                                              for args, size in zip(arg_lists, sizes)]


def _is_number(value: Any) -> bool:
    return type(value) in (int, float)


_RAISED = object()  # the operation raised (or would build a value far bigger than its arguments)
_MISSED = object()  # not tried: the example's arguments are too big, or too few


def _applied(name: str, args: tuple, positions: tuple[int, ...], size: int) -> Any:
    """The operation's value on the example's arguments at `positions`: `_RAISED` where it
    raises or would build a value far bigger than its arguments (`'ab' * 10**7` took 6 GB of
    the host), `_MISSED` where the arguments are too big or too few to try it."""
    if size > MAX_GUESSED_ARGS or max(positions) >= len(args):
        return _MISSED
    values = [args[i] for i in positions]
    if name == "mul" and _product_size(*values) > MAX_GUESSED_ARGS:
        return _RAISED
    try:
        return _OPS[name](*values)
    except Exception:  # noqa: BLE001 - a guess that raises on this input is guarded
        return _RAISED


def _rights(values: Sequence[Any], expected: Sequence[Any], tolerance: float
            ) -> list[bool | None]:
    """Per example, whether the guessed value is right; None where the guess raised."""
    return [None if v is _RAISED else v is not _MISSED and canonical.same(v, e, tolerance)
            for v, e in zip(values, expected)]


def _product_size(a: Any, b: Any) -> int:
    """The length `a * b` would have when one is a sequence and the other an int (else 0)."""
    for seq, times in ((a, b), (b, a)):
        if isinstance(seq, (str, bytes, list, tuple)) and type(times) is int:
            return len(seq) * abs(times)
    return 0


def _guarded(right: list[bool | None], alike: Sequence[int]) -> list[bool]:
    """An operation's row with its guard: where it raised, the most common expected value of
    those examples (the first on a tie) is right. `alike[i]`: the examples whose expected
    value is example i's."""
    raised = _mask(r is None for r in right)
    if not raised:
        return [bool(r) for r in right]
    best = max((i for i, r in enumerate(right) if r is None),
               key=lambda i: (alike[i] & raised).bit_count())
    return [r if r is not None else bool(alike[best] >> j & 1) for j, r in enumerate(right)]


@functools.lru_cache(maxsize=1024)
def null_credit(tests: TestSuite, shown: int) -> float:
    """The best credit (`scoring.partial_credit`, unscaled) a program that does not solve the
    task earns on `tests`' examples when the first `shown` are in its prompt: a table of the
    shown ones and, for every other input, a guess (`guesses`, `nearest_shown`: a constant is
    one), or one guess where a condition (`SPLITS`, `SPLITS2`, a bool-valued guess) holds and
    another where it does not."""
    examples = _decoded(tests.examples)
    hidden = len(examples) - shown
    if hidden <= 0:
        return 0.0
    sizes = [len(e.args) for e in tests.examples]
    rows, conditions = _guessed(examples, tests.float_tolerance, sizes)
    rows |= nearest_shown(examples, shown, tests.float_tolerance)
    masks = {_mask(right[shown:]) for right in rows.values()}
    splits = {0} | {_mask(holds[shown:]) for holds in conditions} | \
        _split_masks(examples[shown:], sizes[shown:])
    everything = (1 << hidden) - 1
    return max(max((mask & split).bit_count() for mask in masks)
               + max((mask & ~split & everything).bit_count() for mask in masks)
               for split in splits) / hidden


def _split_masks(examples: Sequence[tuple[tuple, Any]], sizes: Sequence[int]) -> set[int]:
    """Where each of SPLITS (on each argument) and SPLITS2 (on each pair) holds."""
    arity = max((len(args) for args, _ in examples), default=0)
    places = [(name, (k,)) for name in SPLITS for k in range(arity)] + \
        [(name, pair) for name in SPLITS2 for pair in itertools.permutations(range(arity), 2)]
    return {_mask(_applied(name, args, positions, size) is True
                  for (args, _), size in zip(examples, sizes)) for name, positions in places}


def hardest_examples(examples: Sequence[IOExample], fixed: int, shown: int, count: int
                     ) -> list[int]:
    """Which `count` of the examples after the first `fixed` to keep (their indices among those,
    in order): one at a time, the one that the guesses (`guesses`, `nearest_shown` of the first
    `shown`) right so far most often get wrong, then the one fewest guesses get right, then the
    first. Admission draws more augmented inputs than it keeps and keeps these: a guess right on
    most hidden examples is a floor that leaves an honest near-miss little credit and a split of
    two guesses a lot (/work/notes/s27/sel: the generated pool's mean floor 0.60 -> 0.46).
    Floats compare exactly here: a choice, not a verdict."""
    decoded = _decoded(examples)
    rows = (guesses(decoded, 0.0, [len(e.args) for e in examples])
            | nearest_shown(decoded, shown)).values()
    masks = [_mask(row) for row in rows]
    right = [(mask & ((1 << fixed) - 1) & ~((1 << shown) - 1)).bit_count() for mask in masks]
    left, kept = list(range(fixed, len(examples))), []
    while left and len(kept) < count:
        best = min(left, key=lambda i: (max(r + (m >> i & 1) for r, m in zip(right, masks)),
                                        sum(m >> i & 1 for m in masks), i))
        left.remove(best)
        kept.append(best)
        right = [r + (m >> best & 1) for r, m in zip(right, masks)]
    return sorted(i - fixed for i in kept)


def _decoded(examples: Sequence[IOExample]) -> list[tuple[tuple, Any]]:
    return [(canonical.decode(e.args), canonical.decode(e.expected)) for e in examples]


def nearest_shown(examples: Sequence[tuple[tuple, Any]], shown: int, tolerance: float = 0.0
                  ) -> dict[str, list[bool]]:
    """Per way of measuring distance, which examples the output of the nearest shown example
    gets right (`nearest<k>`: by argument k, a number's difference or a collection's length;
    `nearest`: by how many arguments differ), the first shown one on a tie."""
    if not shown:
        return {}
    table = examples[:shown]
    arity = max((len(args) for args, _ in examples), default=0)
    measures = {f"nearest{k}": functools.partial(_distance, k) for k in range(arity)}
    measures["nearest"] = lambda a, b: sum(x != y for x, y in zip(a, b)) + abs(len(a) - len(b))
    rows = {}
    for name, distance in measures.items():
        row = []
        for args, expected in examples:
            near = min(table, key=lambda example: distance(args, example[0]))
            row.append(canonical.same(near[1], expected, tolerance))
        rows[name] = row
    return rows


def _distance(k: int, a: tuple, b: tuple) -> float:
    """How far apart two examples' argument k is: a number's difference, a collection's length,
    0 or 1 for anything else (infinite when one has no argument k)."""
    if k >= len(a) or k >= len(b):
        return float("inf")
    x, y = a[k], b[k]
    if _is_number(x) and _is_number(y):
        return abs(x - y)
    if isinstance(x, Sized) and isinstance(y, Sized):
        return abs(len(x) - len(y))
    return float(x != y)


def _mask(bits: Iterable[bool]) -> int:
    """The examples where `bits` is true, as the set bits of an int."""
    return sum(1 << i for i, bit in enumerate(bits) if bit)
