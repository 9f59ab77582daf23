"""Admission's augmented inputs (tasks/augment.py): what they add to a task, what they cannot
take from it, and what a floor program passing them all makes of it (real sandbox)."""

from spade_ray.evaluation.baselines import null_credit
from spade_ray.execution import canonical
from spade_ray.records import TaskSource
from spade_ray.tasks import admission
from spade_ray.tasks.admission import AdmissionConfig, admit
from tests.tasks.test_admission import (
    AUGMENT,
    CODEGEN,
    GOOD,
    LIMITS,
    PREDICT,
    REPAIR,
    proposal,
    verdict,
)


def args_of(task):
    return [canonical.decode(e.args) for e in task.tests.examples]


def test_augmented_inputs_follow_the_generators_own_and_the_prompt_shows_only_its_own(sandbox):
    # Every input the generator wrote is a multiple of 7: constant on its own inputs.
    p = proposal("def f(n: int) -> int:\n    return n % 7 * n + 2 * 3", "f(7)\nf(14)\nf(21)")
    assert verdict(sandbox, p).reason == "constant_outputs"
    for family in (CODEGEN, PREDICT):
        v = verdict(sandbox, p, family, AUGMENT)
        assert v.valid, v.reason
        if family is PREDICT:  # the question is the generator's last input
            assert canonical.decode(v.task.visible[0].args) == (21,)
    task = verdict(sandbox, p, CODEGEN, AUGMENT).task
    assert args_of(task)[:3] == [(7,), (14,), (21,)] and len(args_of(task)) > 3
    assert [canonical.decode(e.args) for e in task.visible] == [(7,), (14,)]
    assert {canonical.decode(e.expected) for e in task.tests.examples} > {6}


def test_seed_tasks_are_augmented_by_a_count_of_their_own(sandbox):
    """A seed's 4-7 hand-written inputs left 2-5 hidden examples: a table plus a split of two
    guesses passed every one of 16 of the 45 seed codegen tasks."""
    config = AdmissionConfig(augment_inputs=8, seed_augment_inputs=6)
    def examples(source, config):
        v = admit([GOOD], [CODEGEN], ["lists"], sandbox, LIMITS, config, source=source)[0]
        return args_of(v.task)
    own = args_of(verdict(sandbox, GOOD).task)
    assert len(own) == 5
    assert examples(TaskSource.SEED, config)[:5] == own
    assert len(examples(TaskSource.SEED, config)) == 5 + 6
    assert len(examples(TaskSource.GENERATED, config)) == 5 + 8
    assert examples(TaskSource.SEED, AdmissionConfig(seed_augment_inputs=0)) == own


SPLIT = AdmissionConfig(augment_inputs=1)  # judged by the floor, and no more than one new input


def test_a_task_a_split_of_two_guesses_passes_is_trivial(sandbox):
    # `len(xs) if t in xs else -1`: two guesses (a length, a constant) split by a third (t in
    # xs) pass every example, augmented or not (passed, value 1.0) with no table at all
    p = proposal("def f(xs: list[int], t: int) -> int:\n"
                 "    n = 0\n"
                 "    for x in xs:\n"
                 "        n += 1\n"
                 "    return n if t in xs else -1\n",
                 "f([1, 2, 3], 1)\nf([5, 6], 5)\nf([4, 7], 9)\nf([2, 3, 4, 8], 8)\nf([3], 3)\n"
                 "f([6, 1], 2)")
    for family in (CODEGEN, REPAIR):
        assert verdict(sandbox, p, family, SPLIT).reason == "trivial_passes:split"
        assert verdict(sandbox, p, family).valid  # judged only where inputs are augmented
    # which they are by default (augment_inputs was 0 but in the gemma configs: a user's own
    # experiment admitted such a task, and paid a wrong program 1.0 on it)
    assert verdict(sandbox, p, CODEGEN, AdmissionConfig()).reason == "trivial_passes:split"
    # one step more (the count of items before t) is no split of guesses, as augmented inputs
    # show (on the 5 hidden examples of one augmented input, one of the floor's splits fits
    # it by chance)
    index = proposal(p.reference.replace("        n += 1\n", "        if x == t:\n"
                                         "            break\n        n += 1\n"), "\n".join(p.calls))
    assert verdict(sandbox, index, CODEGEN, AdmissionConfig()).valid


def test_a_reference_that_loops_on_an_augmented_input_keeps_its_own_examples(sandbox):
    # An odd input (one more or less than its own) never reaches 0: the extra run times out,
    # the task stands on its own.
    p = proposal("def f(n: int) -> int:\n    t = 0\n    while n != 0:\n        n -= 2\n"
                 "        t += n\n    return t", "f(4)\nf(6)\nf(8)\nf(10)\nf(2)\nf(14)")
    v = verdict(sandbox, p, config=AUGMENT)
    assert v.valid, v.reason
    assert args_of(v.task) == [(4,), (6,), (8,), (10,), (2,), (14,)]


def test_augmented_inputs_that_show_hash_seed_dependence_reject_the_task(sandbox):
    p = proposal("def f(s: str) -> list:\n    if len(s) == 3:\n        return sorted(s)\n"
                 "    return list(set(s + 'vwxyz'))", "f('abc')\nf('cab')\nf('zzz')")
    assert verdict(sandbox, p).valid
    assert verdict(sandbox, p, config=AUGMENT).reason == "nondeterministic"


def test_augmented_examples_do_not_stand_in_for_the_generators_own(sandbox):
    p = proposal("def f(n: int, m: int) -> int:\n    return 10 // n + m", "f(0, 1)\nf(0, 2)")
    assert verdict(sandbox, p, config=AUGMENT).reason == "reference_raises"


def test_augmented_inputs_kill_mutants_the_generators_own_miss(sandbox):
    # Own inputs never reach the else branch (a >= 3); a one-step change of a does.
    p = proposal("def f(a: int, b: int) -> int:\n    return a + b if a < 3 else a * a - b",
                 "f(2, 3)\nf(1, 4)\nf(2, 6)")  # this program's seed draws a = 3 twice
    assert verdict(sandbox, p).reason == "weak_examples"
    v = verdict(sandbox, p, config=AUGMENT)
    assert v.valid and v.mutation_score > verdict(sandbox, p).mutation_score


def test_the_augmented_inputs_kept_leave_the_floor_lower_than_those_drawn_first(sandbox,
                                                                               monkeypatch):
    # last index of t in xs, or -1: most one-step changes of an input miss t or keep the
    # answer, and the floor's guesses (-1, len(xs) - 1, the nearest shown output) get them right
    p = proposal("def last_index(xs: list, t: int) -> int:\n    for i in range(len(xs) - 1, -1, "
                 "-1):\n        if xs[i] == t:\n            return i\n    return -1",
                 "last_index([1, 2, 3, 2], 2)\nlast_index([5, 5, 5], 5)\nlast_index([4, 1], 7)\n"
                 "last_index([3, 1, 3, 1, 2], 3)")
    kept = verdict(sandbox, p, config=AUGMENT).task
    monkeypatch.setattr(admission, "AUGMENT_POOL", 1)  # the first ones drawn, as before
    drawn = verdict(sandbox, p, config=AUGMENT).task
    assert len(kept.tests.examples) == len(drawn.tests.examples) == 12
    assert null_credit(kept.tests, 2) < null_credit(drawn.tests, 2)
