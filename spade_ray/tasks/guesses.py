"""What a solver can pass without solving a task: admission's null solvers and guesses.

A codegen or repair task is trivial when a program that does not solve it passes every example:
a constant, an echo of an argument, an object equal to everything (null_solvers), or a table of
the shown examples plus one guessed value, or two split by a one-line condition (lookup_passes:
the programs of partial credit's floor, baselines.null_credit). A predict task is one call, so what
passes it without reading the program is a guessed answer (guessed_answers), or one of the at
most three answers the program gives once what a reader computes is left out (coin_flip): a
solver guessing passes a half or a third of the time, the pass rates the generator's
learnability reward pays most for.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Sequence

from spade_ray.evaluation import null_credit
from spade_ray.execution import canonical
from spade_ray.records import CheckResult, IOExample, TestSuite
from spade_ray.tasks import repair
from spade_ray.tasks.format import Proposal

SAME_RETURN_EVIDENCE = 5  # answers of one `return` that show it has at most two (coin_flip)
# A guess among this many answers passes a third of the time: inside the 30-70% band the
# generator's learnability reward pays most for (four or more: a quarter or less).
FEW_ANSWERS = 3
NULL_CONSTANTS = {"none": "None", "zero": "0", "zero_float": "0.0", "one": "1", "true": "True",
                  "false": "False", "empty_str": "''", "empty_list": "[]", "empty_dict": "{}",
                  "empty_tuple": "()"}
# How close a float answer must be (making.suite_of gives it a task with float answers):
# relative and absolute, so a float answer this close to 0 is the guess 0.0.
FLOAT_TOLERANCE = 1e-9
# Their canonical texts (what an example's expected output is stored as) -> name.
NULL_ENCODED = {name: canonical.encode(ast.literal_eval(value))
                for name, value in NULL_CONSTANTS.items()}
ALWAYS_EQUAL = """
    class Anything:
        def __eq__(self, other):
            return True
        def __ne__(self, other):
            return False
    return Anything()
"""


def null_solvers(signature: str) -> dict[str, str]:
    """Name -> program: the signature with a body that cannot solve a real task."""
    programs = {name: f"{signature}\n    return {value}\n"
                for name, value in NULL_CONSTANTS.items()}
    for param in _params(signature):
        programs[f"echo_{param}"] = f"{signature}\n    return {param}\n"
    programs["always_equal"] = signature + ALWAYS_EQUAL
    return programs


def _params(signature: str) -> list[str]:
    node = ast.parse(signature + "\n    pass\n").body[0]
    return [a.arg for a in node.args.posonlyargs + node.args.args]


def lookup_passes(suite: TestSuite, visible: int, split: bool) -> str | None:
    """"lookup" when a solver that returns the shown examples' outputs for their inputs, and
    one guessed value for any other input, passes every example: the hidden examples are none,
    or all give one value that is a shown output or a null constant (e.g. an is_prime whose
    augmented inputs are all composite); "split" when a program of partial credit's floor
    does (baselines.null_credit 1.0: a table and two guesses split by a condition, e.g.
    `min(xs) if t in xs else -1`; with `split`). Such a task pays a solver for copying its
    prompt: it passes, value 1.0."""
    examples = suite.examples
    hidden = {e.expected for e in examples[visible:]}
    guessable = {e.expected for e in examples[:visible]} | set(NULL_ENCODED.values())
    if not hidden or len(hidden) == 1 and hidden <= guessable:
        return "lookup"
    return "split" if split and null_credit(suite, visible) >= 1.0 else None


def most_shown(suite: TestSuite, visible: int, bug: CheckResult | None, split: bool) -> int:
    """The most examples a prompt may show (the hint lever, control.solver_hints): up to half of
    them, while no table of the shown ones plus guesses passes (lookup_passes) and a hidden
    example still catches a repair task's shown `bug`. Red-team pass 10: at 3 of 6 shown, the
    seed binary_search's bug, as shown, plus a table of the three passed all six examples."""
    most = visible
    for shown in range(visible + 1, len(suite.examples) // 2 + 1):
        if lookup_passes(suite, shown, split) or (bug is not None
                                           and not repair.hidden_catch(bug, shown)):
            break
        most = shown
    return most


def question(p: Proposal, examples: Sequence[IOExample], own: int, lines: Sequence[int],
             least: int = 0) -> int | str:
    """A predict task's question: the index of the generator's last input (its first ones are
    its simplest; `own` of `examples` are its) whose answer no guess states and is no coin
    flip, or why there is none (`trivial_passes:<guess>`, `few_examples`: fewer than `least`
    examples, too few to tell a coin flip, `trivial_passes:few_valued`)."""
    guesses = guessed_answers(p, examples[:own])
    fair = [i for i, guess in enumerate(guesses) if guess is None]
    if not fair:
        return f"trivial_passes:{guesses[own - 1]}"
    if len(examples) < least:
        return "few_examples"
    fair = [i for i in fair if not coin_flip(examples, lines, i)]
    return fair[-1] if fair else "trivial_passes:few_valued"


def guessed_answers(p: Proposal, examples: Sequence[IOExample]) -> list[str | None]:
    """Per example, the null solver that states its answer as a predict question without
    reading the program, or None. A predict task is one call, so its null solvers are answers,
    not programs: a constant (a bool is a coin flip: a solver guessing it passes half the time,
    the pass rate the generator's learnability reward pays most for), an echo of one of the
    call's own arguments, a literal the shown program contains (`return "even" if ... else
    "odd"` is a coin flip too) or whose text one of its strings holds (`NOTE = "f(7) == 1784"`:
    the prompt shows the program, without its comments and docstrings), or an item of an
    argument of at most FEW_ANSWERS distinct items (`xs[h % len(xs)]`: red-team pass 10), all
    compared type-exactly, as the grader compares."""
    literals, texts = set(), []
    for node in ast.walk(ast.parse(p.reference)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            texts.append(node.value)
        signed = isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)) \
            and isinstance(node.operand, ast.Constant)  # -1 is a literal too
        if signed or isinstance(node, ast.Constant):
            try:
                literals.add(canonical.encode(ast.literal_eval(node)))
            except (canonical.NotPlainData, ValueError, TypeError):
                continue
    nulls = {text: name for name, text in NULL_ENCODED.items()}
    params = _params(p.signature)
    out = []
    for e in examples:
        echo = next((f"echo_{params[i] if i < len(params) else i}"
                     for i, arg in enumerate(canonical.decode(e.args))
                     if canonical.encode(arg) == e.expected), None)
        answer = canonical.decode(e.expected)
        tiny = type(answer) is float and abs(answer) <= FLOAT_TOLERANCE
        out.append(nulls.get(e.expected) or ("zero_float" if tiny else None) or echo
                   or ("literal" if e.expected in literals else None)
                   or ("in_text" if _written(answer, texts) else None)
                   or _picked(canonical.decode(e.args), e.expected, params)
                   or ("bool" if _bool_like(e) else None))
    return out


def _written(answer, texts: Sequence[str]) -> bool:
    """Whether a string of the program holds the answer's text (two characters or more)."""
    shown = {repr(answer), str(answer)}
    return any(len(t) >= 2 and t in text for t in shown for text in texts)


def _picked(args: tuple, expected: str, params: Sequence[str]) -> str | None:
    """`item_<param>` when the answer is an item (a dict's key or value, a string's character)
    of an argument with at most FEW_ANSWERS distinct ones: a guess among them passes a third
    of the time (red-team pass 11: `s[h % len(s)]` of 'uvw' was admitted)."""
    for i, arg in enumerate(args):
        encoded = items_of(arg)
        if encoded is not None and expected in encoded and len(encoded) <= FEW_ANSWERS:
            return f"item_{params[i] if i < len(params) else i}"
    return None


def items_of(arg) -> frozenset[str] | None:
    """An argument's items as canonical data (a container's items, a dict's keys and values, a
    string's characters); None for an argument without items (or with one that is not data)."""
    if type(arg) in (list, tuple, set, frozenset, str):
        items = list(arg)
    elif type(arg) is dict:
        items = [*arg, *arg.values()]
    else:
        return None
    try:
        return frozenset(canonical.encode(x) for x in items)
    except canonical.NotPlainData:
        return None


def _bool_like(example: IOExample) -> bool:
    """A bool by another name: 'True' or 'False', or a tuple or list of bools once the items
    that repeat an argument are left out (`(n, n % 7 == 3)`)."""
    answer = canonical.decode(example.expected)
    if answer in ("True", "False") and isinstance(answer, str):
        return True
    rest = _rest(example)
    return bool(rest) and all(isinstance(x, bool) for x in rest)


def coin_flip(examples: Sequence[IOExample], lines: Sequence[int], asked: int) -> bool:
    """Whether the answer to example `asked` is one of a few (`_few`: two, as 3 or more examples
    show, or three, as 5 show), or, as SAME_RETURN_EVIDENCE of those answered by the same
    `return` show (two more for three answers: an extra branch for other inputs made a bool by
    another name look like a question: `return n * 3` for big n, `return str(n % 7 == 3)` for
    the rest), each answer without the parts a reader computes from an argument (`_unread`:
    `(n, n % 7 == 3)`, `(n + 1, bit)`), or a few answers around an argument
    (bit_on_an_argument)."""
    groups = [(range(len(examples)), 3)]
    if len(lines) == len(examples):  # fewer answers of one `return` are no evidence
        groups.append(([i for i, line in enumerate(lines) if line == lines[asked]],
                       SAME_RETURN_EVIDENCE))  # (an index found at 0, 2, 0)
    for group, least in groups:
        unread = _unread([examples[i] for i in group])
        if _few([e.expected for e in unread], least) or bit_on_an_argument(unread):
            return True
    return False


def _few(values: Sequence, least: int = SAME_RETURN_EVIDENCE) -> bool:
    """Whether `values` take at most FEW_ANSWERS distinct values and enough of them show it:
    two among `least` or more, and two more for each value past two."""
    distinct = len(set(values))
    return distinct <= FEW_ANSWERS and len(values) >= least + 2 * max(0, distinct - 2)


def bit_on_an_argument(examples: Sequence[IOExample]) -> bool:
    """Whether the answers are an argument with a few values no reader computes: each int answer
    one integer slope times an int argument (or its length) plus two or three offsets, or one of
    two or three multiples of it (`n + 2 * bit - 1`, `10 * n + bit`, `n * (2 + bit)`,
    `len(xs) * 2 + bit`, `n + [-1, 1, 2][x % 3]`), or each str answer an argument's text plus
    one of a few endings or beginnings (`s + 'ab'[bit]`, `str(n) + 'xy'[bit]`). Their answers
    all differ because they follow the argument, yet a guess passes a half or a third of the
    time (one offset is a rule, not a guess). Examples of other types are left out rather
    than hiding the rest."""
    pairs = [(canonical.decode(e.args), canonical.decode(e.expected)) for e in examples]
    for k in range(max((len(args) for args, _ in pairs), default=0)):
        features = [[(a[k], y) for a, y in pairs if k < len(a) and type(a[k]) is int],
                    [(len(a[k]), y) for a, y in pairs
                     if k < len(a) and isinstance(a[k], (str, list, tuple, dict))]]
        if any(_few_offsets([(x, y) for x, y in points if type(y) is int])
               for points in features):
            return True
        texts = [(a[k] if type(a[k]) is str else str(a[k]), y) for a, y in pairs
                 if k < len(a) and type(a[k]) in (str, int) and type(y) is str]
        ends = [y[len(t):] for t, y in texts if y.startswith(t)]
        starts = [y[:len(y) - len(t)] for t, y in texts if y.endswith(t)]
        if any(len(set(rest)) >= 2 and _few(rest) for rest in (ends, starts)):
            return True
    return False


def _few_offsets(points: list[tuple[int, int]]) -> bool:
    """(x, y) where y is m * x plus a few (`_few`: two or three) offsets for one integer m, or
    a few multiples of x (through any two points a slope fits: fewer prove nothing)."""
    if len(points) < SAME_RETURN_EVIDENCE:
        return False
    offsets = [[y - m * x for x, y in points] for m in _slopes(points)]
    if any(len(set(o)) >= 2 and _few(o) for o in offsets):
        return True
    return all(x and y % x == 0 for x, y in points) and \
        len({y // x for x, y in points}) >= 2 and _few([y // x for x, y in points])


def _slopes(points: list[tuple[int, int]]) -> set[int]:
    """The integer slopes near those of the lines through two of the points."""
    return {(y2 - y1) // (x2 - x1) + d for (x1, y1), (x2, y2)
            in itertools.combinations(points, 2) if x1 != x2 for d in (0, 1)}


def _unread(examples: Sequence[IOExample]) -> list[IOExample]:
    """The examples, each tuple or list answer without the items a reader computes from an
    argument: when every answer has the same length, the items at a position where each equals
    one of its call's arguments or where every one is one integer slope times an int argument
    (or its length) plus one offset (`(n + 1, bit)` as `bit`); else each item equal to one of
    its call's arguments. An answer left with one item is that item."""
    answers = [canonical.decode(e.expected) for e in examples]
    shaped = bool(answers) and all(type(a) in (tuple, list) and len(a) == len(answers[0])
                                   for a in answers)
    read = None
    if shaped:
        args = [canonical.decode(e.args) for e in examples]
        read = {j for j in range(len(answers[0]))
                if all(_echoes(a[j], call) for a, call in zip(answers, args))
                or all(type(a[j]) is int for a in answers)
                and any(_one_offset([(x, a[j]) for x, a in zip(xs, answers)])
                        for xs in _features(args))}
    out = []
    for e, answer in zip(examples, answers):
        rest = _rest(e, read)
        if rest is not None:
            e = IOExample(args=e.args, expected=canonical.encode(
                rest[0] if len(rest) == 1 else type(answer)(rest)))
        out.append(e)
    return out


def _features(args: Sequence[tuple]) -> list[list[int]]:
    """Per argument position every call has, its values when they are all ints, and their
    lengths when they are all sized."""
    out = []
    for k in range(min((len(a) for a in args), default=0)):
        values = [a[k] for a in args]
        if all(type(v) is int for v in values):
            out.append(values)
        elif all(isinstance(v, (str, list, tuple, dict)) for v in values):
            out.append([len(v) for v in values])
    return out


def _one_offset(points: list[tuple[int, int]]) -> bool:
    """Three or more (x, y), two of x at least, where y is one integer slope times x plus one
    offset: a rule a reader applies."""
    return len(points) >= 3 and len({x for x, _ in points}) >= 2 and any(
        len({y - m * x for x, y in points}) == 1 for m in _slopes(points))


def _rest(example: IOExample, read: set[int] | None = None) -> list | None:
    """The items of a tuple or list answer not at a `read` position, or (read None) that do
    not equal one of the call's arguments; None for another answer."""
    answer = canonical.decode(example.expected)
    if not isinstance(answer, (tuple, list)):
        return None
    if read is not None:
        return [x for j, x in enumerate(answer) if j not in read]
    args = canonical.decode(example.args)
    return [x for x in answer if not _echoes(x, args)]


def _echoes(item, args: tuple) -> bool:
    """Whether `item` is one of `args`, compared as canonical data (type-exactly)."""
    return canonical.encode(item) in {canonical.encode(a) for a in args}
