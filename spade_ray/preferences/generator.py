"""The generator's learning signal: a reward per generated task, and pairs or groups made of it.

Reward (`generator_reward`): an output that is not a new program gets -1 (it did not parse, or
it copies a known task); a new program that ran but was rejected by admission (trivial, weak
examples, nondeterministic...) gets -0.5: closer to a task than text that is not one, and never
better than a copy is worse, so a weak model learns to write runnable programs with inputs
before it writes good ones. An admitted task gets a learnability reward from the solver's pass
rate p on it (K candidates):

    band  1 - 2|p - 0.5| for 0 < p < 1, else 0   (the default)
    azr   1 - p          for 0 < p < 1, else 0   (Absolute Zero's proposer reward)

Both give nothing for a task nobody solves or everybody solves: neither teaches the solver, and
nothing for a task whose candidates split between the right answer and one or two others, each
given twice or more, or among more such others, none much rarer than the right one
(`two_answers`): which of several answers is right decided their verdicts, which is what a
guess the solver cannot compute looks like (`n * n + bit`, a bit from a scrambled seed;
`xs[h % 3]`: admission's guesses model some readable parts, this needs none), nor for a
predict task whose answers are three or more items of one argument (`item_guess`: `xs[h % 5]`),
or three or more orderings of one (`arrangement_guess`: xs rotated by h % len(xs)).
A program's answer is its verdict on each example (`behaviour`): a description with two
readings that only hidden examples tell apart is a coin flip too. An honest question with one
or two common traps looks the same and loses its band reward too: the price of never paying
for a guess. The default is `band` because the project's target is the zone of proximal
development (a pass rate of 30-70%): it peaks at p = 0.5 and is symmetric, where `azr` peaks at
the hardest solvable task and so pushes difficulty up until the solver fails (with K = 4 it pays
0.75 for p = 0.25, and
0.25 for p = 0.75). Configurable: `+loop.generator_reward=azr` (the composed config does not
hold the key).

Pairs: for one prompt, every output with a higher reward is preferred to every output with a
lower one (the prompt's outputs are its n samples). Groups (GRPO): the prompt's outputs with
their rewards, when there are two or more. An output whose reward is unknown (its task was
admitted but a cap or a failure stopped the solver before it) is in neither.
"""

from __future__ import annotations

import ast
import collections
import enum
from collections.abc import Sequence

from spade_ray.execution import canonical
from spade_ray.records import (
    Candidate,
    CheckResult,
    CompletionGroup,
    PreferencePair,
    Role,
    Task,
    TaskFamily,
    Verdict,
)
from spade_ray.tasks import items_of
from spade_ray.tracking import GeneratorInput

INVALID_REWARD = -1.0  # not a new program: unparsable, or a copy
REJECTED_REWARD = -0.5  # a new program that admission rejected
# two_answers: with three or more repeated wrong answers, a guess unless the right answer is
# given more than this many times as often as the most common wrong one
MANY_READINGS_RATIO = 1.5
_NO_LITERAL = object()
# what encoding a solver's literal can raise (an int past Python's digit limit, a nesting past
# the recursion limit, a NaN)
_NOT_DATA = (ValueError, TypeError, RecursionError, MemoryError, canonical.NotPlainData)


class GeneratorReward(enum.StrEnum):
    BAND = "band"
    AZR = "azr"


def generator_reward(admitted: bool, executed: bool, pass_rate: float | None,
                     kind: GeneratorReward) -> float | None:
    """`executed`: the output went through admission (it parsed and was not a copy)."""
    if not admitted:
        return REJECTED_REWARD if executed else INVALID_REWARD
    if pass_rate is None:
        return None
    if pass_rate <= 0.0 or pass_rate >= 1.0:
        return 0.0
    return 1.0 - 2.0 * abs(pass_rate - 0.5) if kind is GeneratorReward.BAND else 1.0 - pass_rate


def behaviour(task: Task, candidate: Candidate, check: CheckResult, shown: int) -> str | None:
    """What a candidate answered, for two_answers: a predict task's literal, or a
    reading of the task: the verdict on each example of a program that fits every example its
    prompt showed (`shown`; red-team pass 11: 'the middle element', shown on odd lengths and
    graded on even ones, split a solver between two readings and paid its generator 0.68 at
    K = 4). None for any other program (one that crashed, or fails what it was shown, read
    nothing of the task: each of its draws counts as an answer of its own)."""
    if task.family is TaskFamily.PREDICT:
        return candidate.code
    verdicts = {o.name: o.outcome for o in check.outcomes}
    if not verdicts or any(verdicts.get(f"example[{i}]") is not Verdict.PASSED
                           for i in range(shown)):
        return None
    return repr(tuple(o.outcome.value for o in check.outcomes))


def two_answers(answers: Sequence[str | None], passed: Sequence[bool]) -> bool:
    """Whether a task's rated draws (`answers`: a predict literal, or a program's verdicts,
    `behaviour`; None: a program that read nothing of the task) split between the right answer
    and one other, or two others, each given by two draws or more and together by at least half
    of the wrong draws, compared as data: a guess among two or three answers (red-team pass 11:
    an item at h % 3 of a list, or one of three orderings of it, each a reader can compute
    where no reader computes h, paid its generator 0.51 and 0.36 at K = 4, 0.70 and 0.59 at
    K = 8, in shapes admission's guesses do not model). Wrong draws given once, and those that
    read nothing, are noise around the guess: when every wrong draw had to be one of the two
    (pass 11's rule), one stray draw in five paid those guesses 0.29-0.75 again (pass 12).
    Three or more repeated wrong answers are a guess too when the right one is no more common
    than 1.5 times the most common of them (`MANY_READINGS_RATIO`): a guesser's draws spread
    evenly over its readings, where a solver that computes the task is right more often than it
    falls into any one trap (red-team pass 13: `n * n + h % 4`, one of four orderings, or four
    readings of "the centre" that fail different hidden examples paid 0.33-0.40 at K = 8)."""
    wrong = collections.Counter(_value(a) for a, ok in zip(answers, passed)
                                if not ok and a is not None)
    repeated = [n for n in wrong.values() if n >= 2]
    right = sum(passed)
    return (right > 0 and bool(repeated) and 2 * sum(repeated) >= len(passed) - right
            and (len(repeated) <= 2 or right <= MANY_READINGS_RATIO * max(repeated)))


def guessed(task: Task, answers: Sequence[str | None], passed: Sequence[bool]) -> bool:
    """Whether a task's rated draws (`behaviour`s, and whether each passed) look like a guess
    its generator's band reward must not pay: two_answers, item_guess or arrangement_guess."""
    return (two_answers(answers, passed) or item_guess(answers, answer_items(task))
            or arrangement_guess(answers, answer_arrangements(task)))


def item_guess(answers: Sequence[str | None], items: Sequence[frozenset[str]]) -> bool:
    """Whether a predict task's draws guess among the items of one argument of its call
    (`items`: per argument, its items as canonical data; `answer_items`): three or more
    distinct items answered, by three quarters of the draws or more. Admission models a guess
    among at most three items (guesses.FEW_ANSWERS); `xs[h % 4]` and `xs[h % 5]` of a 5-item
    list, h a scrambled hash no reader computes, paid 0.28 and 0.18 at K = 4, 0.49 and 0.34 at
    K = 8 (red-team pass 12). An honest "the largest item" keeps its band reward while the
    solver's wrong draws are one or two items; a solver wrong in three ways costs it."""
    values = [_value(a) for a in answers if a is not None]
    return any(_spread([v for v in values if v in pool], answers) for pool in items)


def arrangement_guess(answers: Sequence[str | None], arrangements: Sequence[str]) -> bool:
    """Whether a predict task's draws guess among the arrangements of one argument of its call
    (`arrangements`: per argument, the key of its items in any order; `answer_arrangements`):
    three or more distinct arrangements answered, by three quarters of the draws or more, as
    item_guess counts items. Red-team pass 24: `xs[k:] + xs[:k]`, `s[k:] + s[:k]` or one of the
    orderings of xs, with k a scrambled hash of another argument no reader computes, paid a
    uniform guesser 0.19-0.21 at K = 4, where two_answers needs a wrong answer given twice (a
    1-in-4 guess seldom repeats one) and item_guess counts items, not orderings of them. An
    honest "sort xs" keeps its band reward while the solver's wrong orderings are one or two;
    one wrong in three ways costs it, as item_guess's "the largest item" does."""
    given = [a for a in answers if a is not None]
    keys = [arrangement_key(_literal(a)) for a in given]
    values = [_value(a) for a in given]
    return any(_spread([v for v, k in zip(values, keys) if k == key], answers)
               for key in arrangements)


def _spread(picked: list[str], answers: Sequence[str | None]) -> bool:
    """Three or more distinct answers among those `picked`, and they three quarters of the
    draws or more."""
    return len(set(picked)) >= 3 and 4 * len(picked) >= 3 * len(answers)


def answer_arrangements(task: Task) -> tuple[str, ...]:
    """A predict task's question's arguments of three items or more (a list, tuple or str),
    each as the key its arrangements share (`arrangement_key`)."""
    if task.family is not TaskFamily.PREDICT or not task.visible:
        return ()
    found = (arrangement_key(arg) for arg in canonical.decode(task.visible[0].args))
    return tuple(key for key in found if key is not None)


def arrangement_key(value) -> str | None:
    """The key every ordering of `value`'s items shares (its type and the sorted canonical data
    of its items), for a list, tuple or str of three items or more; None otherwise."""
    if type(value) not in (list, tuple, str) or len(value) < 3:
        return None
    try:
        return f"{type(value).__name__}:{sorted(canonical.encode(x) for x in value)}"
    except _NOT_DATA:
        return None


def answer_items(task: Task) -> tuple[frozenset[str], ...]:
    """A predict task's question's arguments' items (guesses.items_of), per argument that has
    them."""
    if task.family is not TaskFamily.PREDICT or not task.visible:
        return ()
    found = (items_of(arg) for arg in canonical.decode(task.visible[0].args))
    return tuple(items for items in found if items is not None)


def _value(answer: str) -> str:
    """A literal's canonical data (type-exact), or its text when it is not one."""
    value = _literal(answer)
    try:
        return f"text:{answer.strip()}" if value is _NO_LITERAL else canonical.encode(value)
    except _NOT_DATA:
        return f"text:{answer.strip()}"


def _literal(answer: str):
    """The Python literal an answer writes, or _NO_LITERAL."""
    try:
        return ast.literal_eval(answer.strip())
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        return _NO_LITERAL


def output_id(round_index: int, item: GeneratorInput) -> str:
    """A generator output's id where a pair needs a candidate id."""
    return f"generator/r{round_index}/{item.index}"


def build_generator_pairs(items: Sequence[GeneratorInput], round_index: int,
                          solver_version: int) -> list[PreferencePair]:
    """Pairs within each prompt's rewarded outputs, higher reward chosen."""
    pairs = []
    for outputs in _by_prompt(items):
        for chosen in outputs:
            for rejected in outputs:
                if chosen.reward <= rejected.reward or chosen.completion.text == \
                        rejected.completion.text:
                    continue
                pairs.append(PreferencePair(
                    task_id=chosen.task_id or "", prompt=chosen.prompt,
                    chosen=chosen.completion.text, rejected=rejected.completion.text,
                    chosen_candidate_id=output_id(round_index, chosen),
                    rejected_candidate_id=output_id(round_index, rejected),
                    chosen_score=chosen.reward, rejected_score=rejected.reward,
                    solver_version=solver_version,
                    generator_version=chosen.completion.weights_version, role=Role.GENERATOR))
    return pairs


def build_generator_groups(items: Sequence[GeneratorInput]) -> list[CompletionGroup]:
    return [CompletionGroup(prompt=outputs[0].prompt,
                            completions=tuple(o.completion.text for o in outputs),
                            rewards=tuple(o.reward for o in outputs),
                            task_id=outputs[0].task_id or "",
                            weights_version=min(o.completion.weights_version for o in outputs))
            for outputs in _by_prompt(items) if len(outputs) >= 2]


def _by_prompt(items: Sequence[GeneratorInput]) -> list[list[GeneratorInput]]:
    groups: dict[str, list[GeneratorInput]] = {}
    for item in items:
        if item.reward is not None:
            groups.setdefault(item.prompt, []).append(item)
    return list(groups.values())
