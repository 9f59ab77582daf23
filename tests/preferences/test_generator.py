"""The generator's reward, pairs and groups."""

import pytest

from spade_ray.execution import canonical
from spade_ray.preferences.generator import (
    GeneratorReward,
    arrangement_guess,
    arrangement_key,
    build_generator_groups,
    build_generator_pairs,
    generator_reward,
    item_guess,
    two_answers,
)
from spade_ray.records import Completion, Role
from spade_ray.tracking import GeneratorInput

BAND, AZR = GeneratorReward.BAND, GeneratorReward.AZR


@pytest.mark.parametrize("admitted, rate, band, azr", [
    (False, None, -0.5, -0.5),  # a new program admission rejected
    (True, 0.0, 0.0, 0.0), (True, 1.0, 0.0, 0.0),  # nobody / everybody solves it
    (True, 0.5, 1.0, 0.5), (True, 0.25, 0.5, 0.75), (True, 0.75, 0.5, 0.25),
    (True, None, None, None),  # admitted, never solved (a cap stopped it): unknown
])
def test_reward(admitted, rate, band, azr):
    assert generator_reward(admitted, True, rate, BAND) == band
    assert generator_reward(admitted, True, rate, AZR) == azr


def test_text_that_is_no_new_program_gets_the_lowest_reward():
    assert generator_reward(False, False, None, BAND) == -1.0


@pytest.mark.parametrize("answers, passed, split", [
    # a bit no reader computes: the right answer or the other one (red-team pass 9)
    (["7744", "7745", "7744", "7745"], [True, False, True, False], True),
    (["[7744, 0]", "[7744,1]", "[7744, 1]", "[7744, 0]"], [True, False, False, True], True),
    (["'OWLa'", "'OWLb'", "'OWLb'", "'OWLb'"], [True, False, False, False], True),
    # wrong in more than one way, or wrong once, or never right: not a split
    (["7744", "1", "7744", "2"], [True, False, True, False], False),
    (["1", "1.0", "2", "1.0"], [False, False, True, True], False),  # 1 and 1.0 differ
    (["3", "3", "3", "4"], [True, True, True, False], False),
    (["4", "4", "4", "4"], [False, False, False, False], False),
    (["x y", "x y", "5", "5"], [False, False, True, True], True),  # the same text, not data
    # a guess among three (red-team pass 11: xs[h % 3]), each wrong answer given twice or more
    (["44", "19", "19", "2", "2", "2"], [True, False, False, False, False, False], True),
    # ... or among four or more (red-team pass 13: n * n + h % 4 paid 0.33-0.40 at K = 8):
    # three repeated wrong answers, the right one no more common than 1.5x the commonest
    (["44", "19", "19", "2", "2", "7", "7"], [True] + [False] * 6, True),
    (["44", "44", "19", "19", "2", "2", "7", "7"], [True] * 2 + [False] * 6, True),
    (["44"] * 3 + ["19", "19", "2", "2", "7", "7"], [True] * 3 + [False] * 6, True),
    # a solver that computes it is right more often than it falls into any one trap
    (["44"] * 4 + ["19", "19", "2", "2", "7", "7"], [True] * 4 + [False] * 6, False),
    # ... and a stray draw does not hide it (red-team pass 12: one stray draw in five paid
    # those guesses 0.29-0.75): others given once, or programs that read nothing (None),
    # are noise while the repeated ones hold half the wrong draws
    (["44", "19", "19", "2"], [True, False, False, False], True),
    (["44", "19", "19", "2", "2", "9"], [True] + [False] * 5, True),
    (["7", None, "8", "8"], [True, False, False, False], True),
    (["7", "8", "8", "1", "2", "3"], [True] + [False] * 5, False),  # mostly scattered
    (["7", None, None, "8"], [True, False, False, False], False),
])
def test_a_predict_task_split_between_two_answers_is_told(answers, passed, split):
    assert two_answers(answers, passed) is split


ITEMS = (frozenset(canonical.encode(x) for x in [4, 9, 15, 22, 31]),)


@pytest.mark.parametrize("answers, guess", [
    (["4", "9", "15", "4"], True),  # xs[h % 4] of a 5-item list (red-team pass 12)
    (["4", "9", "15", "100"], True),  # ... with a stray draw
    (["31", "31", "31", "4"], False),  # "the largest item", the solver wrong once
    (["31", "31", "4", "9", "100", "101"], False),  # three items, by too few draws
    (["4", "9", "100", "101"], False),
])
def test_a_predict_guess_among_the_items_of_an_argument_is_told(answers, guess):
    assert item_guess(answers, ITEMS) is guess
    assert not item_guess(answers, ())


# the asked call's arguments: a list to arrange and a key whose scrambled hash picks how
XS_KEY = tuple(arrangement_key(a) for a in ([6, 2, 8, 3], "lime", "tuvw"))


@pytest.mark.parametrize("answers, guess", [
    # one of the 4 rotations of xs, k a scrambled hash of the key (red-team pass 24: 0.211
    # at K = 4 for a uniform guesser)
    (["[6, 2, 8, 3]", "[2, 8, 3, 6]", "[8, 3, 6, 2]", "[6, 2, 8, 3]"], True),
    (["[3, 6, 2, 8]", "[8, 3, 6, 2]", "[2, 8, 3, 6]", "7"], True),  # ... with a stray draw
    (["'tuvw'", "'vwtu'", "'wtuv'", "'tuvw'"], True),  # a string's rotations
    (["[2, 3, 6, 8]", "[2, 3, 6, 8]", "[6, 2, 8, 3]", "[6, 2, 8, 3]"], False),  # sort xs, one trap
    (["[2, 3, 6, 8]", "[2, 3, 6, 8]", "[2, 3, 6, 8]", "[8, 6, 3, 2]"], False),
    (["[2, 3, 6, 8]", "[6, 2, 8, 3]", "[8, 6, 3, 2]", "[2, 3, 6]", "[1]", "9"], False),  # few
    (["(6, 2, 8, 3)", "(2, 8, 3, 6)", "(8, 3, 6, 2)", "(3, 6, 2, 8)"], False),  # other type
    (["'lmie'", "'mile'", "'emil'", "'lime'"], True),  # the key's own letters
])
def test_a_predict_guess_among_the_arrangements_of_an_argument_is_told(answers, guess):
    assert arrangement_guess(answers, XS_KEY) is guess
    assert not arrangement_guess(answers, ())


def output(index, prompt, text, reward, task_id=None):
    return GeneratorInput(index=index, prompt=prompt,
                          completion=Completion(text, 10, 20, "stop", 3), outcome="x",
                          task_id=task_id, family="codegen", reward=reward)


def test_pairs_prefer_the_better_task_within_a_prompt_only():
    items = [output(0, "p1", "good", 1.0, "t0"), output(1, "p1", "bad", -1.0),
             output(2, "p1", "meh", 0.0, "t2"), output(3, "p2", "other", -1.0),
             output(4, "p1", "unknown", None, "t4")]
    pairs = build_generator_pairs(items, round_index=5, solver_version=2)
    assert {(p.chosen, p.rejected) for p in pairs} == {("good", "bad"), ("good", "meh"),
                                                       ("meh", "bad")}
    first = pairs[0]
    assert first.role is Role.GENERATOR and first.prompt == "p1" and first.task_id == "t0"
    assert first.chosen_candidate_id == "generator/r5/0"
    assert (first.generator_version, first.solver_version) == (3, 2)


def test_equal_rewards_and_identical_texts_make_no_pair():
    items = [output(0, "p", "a", 0.5, "t"), output(1, "p", "b", 0.5, "u"),
             output(2, "p", "a", -1.0)]
    pairs = build_generator_pairs(items, 0, 0)
    assert [(p.chosen_candidate_id, p.rejected_candidate_id) for p in pairs] == \
        [("generator/r0/1", "generator/r0/2")]


def test_groups_need_two_rewarded_outputs_of_a_prompt():
    items = [output(0, "p1", "a", 1.0, "t"), output(1, "p1", "b", -1.0),
             output(2, "p2", "c", 0.0, "u")]
    (group,) = build_generator_groups(items)
    assert group.prompt == "p1" and group.rewards == (1.0, -1.0)
