"""Co-evolution control: the difficulty level, the exemplars and labels it puts in the generator
prompt, the topic quota, and the collapse evidence and alarm (tasks/control.py)."""

import dataclasses
import random

import pytest

from spade_ray.evaluation import humaneval
from spade_ray.records import TaskFamily
from spade_ray.tasks.control import (
    ControlConfig,
    Guidance,
    RoundSignals,
    alarm,
    collapse_evidence,
    difficulty_label,
    family_weights,
    hardest,
    learnable,
    level_label,
    next_level,
    solver_hints,
    target_pass_rate,
    task_diversity,
)
from spade_ray.tasks.prompting import family_schedule, generator_prompt, topic_schedule
from spade_ray.tasks.templates import load_prompts

CONFIG = ControlConfig()
HEALTHY = RoundSignals(proposed=8, duplicates=1, new_task_pass_rate=0.5, rated=12,
                       task_diversity=0.8, candidate_diversity=0.9, validation_pass_at_1=0.25)


def signals(**changes):
    return dataclasses.replace(HEALTHY, **changes)


def kinds(evidence):
    return sorted(e.split(":")[0] for e in evidence)


@pytest.mark.parametrize("rate,level,expected", [
    (0.9, 0, 1), (0.9, 2, 2), (0.1, 0, -1), (0.1, -2, -2), (0.5, 1, 1), (0.3, -1, -1)])
def test_the_level_steps_towards_the_band(rate, level, expected):
    assert next_level(level, signals(new_task_pass_rate=rate), CONFIG) == expected


def test_nothing_rated_leaves_the_level_alone():
    assert next_level(1, signals(new_task_pass_rate=0.0, rated=0), CONFIG) == 1


def test_the_levels_target_spans_the_band_and_labels_follow_it():
    targets = [target_pass_rate(level, CONFIG) for level in (-2, -1, 0, 1, 2)]
    assert targets == pytest.approx([0.9, 0.7, 0.5, 0.3, 0.1])
    assert [difficulty_label(t) for t in targets] == [
        "very easy", "easy", "medium", "hard", "very hard"]
    assert difficulty_label(None) == "medium" and difficulty_label(1.0) == "very easy"


def test_the_asked_for_label_stops_at_the_floor_while_the_exemplars_target_follows():
    assert [level_label(level, CONFIG) for level in (-2, -1, 0, 1, 2)] == [
        "medium", "medium", "medium", "hard", "very hard"]
    assert target_pass_rate(-2, CONFIG) == pytest.approx(0.9)
    unfloored = ControlConfig(label_floor=-2)
    assert [level_label(level, unfloored) for level in (-2, -1, 0)] == [
        "very easy", "easy", "medium"]
    with pytest.raises(ValueError, match="label_floor"):
        ControlConfig(label_floor=-3)


def test_the_hint_lever_shows_more_examples_below_level_0_and_fewer_above():
    hinting = ControlConfig(hint_step=2)
    assert [solver_hints(level, 2, hinting) for level in (-2, -1, 0, 1, 2)] == [6, 4, 2, 0, 0]
    assert solver_hints(-2, 2, CONFIG) is None  # off by default: each task's visible examples
    with pytest.raises(ValueError, match="hint_step"):
        ControlConfig(hint_step=-1)


def test_a_band_that_is_not_a_band_is_refused():
    with pytest.raises(ValueError, match="band"):
        ControlConfig(band_low=0.7, band_high=0.3)


def test_exemplars_are_the_topics_tasks_closest_to_the_target_and_carry_labels(seeds):
    template = load_prompts("fewshot")["generator"]
    strings = [t for t in seeds if t.topic == "strings" and t.family is TaskFamily.CODEGEN]
    rates = {t.task_id: i / (len(strings) - 1) for i, t in enumerate(strings)}
    easy = generator_prompt(template, "strings", seeds, 2, random.Random(0),
                            guidance=Guidance(rates, target=1.0, difficulty="easy"))
    hard = generator_prompt(template, "strings", seeds, 2, random.Random(0),
                            guidance=Guidance(rates, target=0.0, difficulty="hard"))
    shown = {prompt: [t.entry_point for t in strings if f"def {t.entry_point}(" in prompt]
             for prompt in (easy, hard)}
    assert set(shown[easy]) == {strings[-1].entry_point, strings[-2].entry_point}
    assert set(shown[hard]) == {strings[0].entry_point, strings[1].entry_point}
    assert easy.endswith("### Topic\nstrings (easy)\n### Task\n")
    assert "strings (very easy)" in easy and "strings (very hard)" in hard


def test_without_guidance_the_prompt_has_no_labels(seeds):
    template = load_prompts("fewshot")["generator"]
    text = generator_prompt(template, "lists", seeds, 3, random.Random(1))
    assert "(medium)" not in text and text.endswith("### Topic\nlists\n### Task\n")


def test_a_topic_over_its_share_of_the_archive_sits_out_the_round():
    topics = ["a", "b", "c"]
    assert "a" not in topic_schedule(topics, 6, 0, {"a": 9, "b": 1, "c": 2}, max_share=2.0)
    assert "a" in topic_schedule(topics, 6, 0, {"a": 3, "b": 2, "c": 2}, max_share=2.0)
    assert topic_schedule(topics, 3, 0, {}, max_share=2.0) == topics


def test_task_diversity_is_low_for_near_copies_and_high_for_distinct_tasks(seeds):
    codegen = [t for t in seeds if t.family is TaskFamily.CODEGEN][:6]
    copies = [dataclasses.replace(codegen[0], task_id=f"c{i}",
                                  reference=codegen[0].reference.replace("return", f"return {i}+"
                                                                         if i else "return"))
              for i in range(4)]
    # six string tasks: 0.70 by resemblance, 0.697 since descriptions count by containment
    assert task_diversity(codegen) > 0.6 and task_diversity(copies) < 0.5
    assert task_diversity(codegen[:1]) is None


def test_a_healthy_round_shows_no_evidence():
    assert collapse_evidence([HEALTHY, HEALTHY], CONFIG) == ()


@pytest.mark.parametrize("changes,kind", [
    (dict(duplicates=5), "repetition"),
    (dict(task_diversity=0.3), "similar_tasks"),
    (dict(new_task_pass_rate=0.95), "too_easy"),
    (dict(candidate_diversity=0.3), "alike_candidates"),
])
def test_each_kind_of_collapse_evidence_is_seen(changes, kind):
    assert kinds(collapse_evidence([signals(**changes)], CONFIG)) == [kind]


def test_pass_rate_jumping_while_validation_stays_flat_is_collusion():
    before = signals(new_task_pass_rate=0.3)
    assert kinds(collapse_evidence([before, signals(new_task_pass_rate=0.65)], CONFIG)) == [
        "collusion"]
    rising = signals(new_task_pass_rate=0.65, validation_pass_at_1=0.5)
    assert collapse_evidence([before, rising], CONFIG) == ()


def test_a_round_with_nothing_rated_is_no_evidence_of_collusion_either_side():
    unrated = signals(new_task_pass_rate=None, rated=0)
    assert collapse_evidence([unrated, signals(new_task_pass_rate=0.65)], CONFIG) == ()
    assert collapse_evidence([signals(new_task_pass_rate=0.0), unrated], CONFIG) == ()
    assert next_level(1, unrated, CONFIG) == 1


def test_too_few_candidates_are_not_evidence():
    assert collapse_evidence([signals(new_task_pass_rate=1.0, rated=2)], CONFIG) == ()


def test_an_alarm_needs_two_kinds_or_one_kind_twice_running():
    assert not alarm(("repetition: 5/8",), ())
    assert alarm(("repetition: 5/8", "too_easy: 0.95"), ())
    assert alarm(("repetition: 5/8",), ("repetition: 6/8",))
    assert not alarm(("repetition: 5/8",), ("too_easy: 1.00",))


def test_the_hardest_tasks_are_the_lowest_measured_pass_rates(seeds):
    rates = {seeds[3].task_id: 0.0, seeds[1].task_id: 0.25, seeds[0].task_id: 1.0}
    assert hardest(seeds, rates, 2) == [seeds[3], seeds[1]]


def test_validation_tiers_follow_the_canonical_solutions_size():
    problems = humaneval.load_problems()
    tiers = [p.tier for p in problems]
    assert (tiers.count("easy"), tiers.count("medium"), tiers.count("hard")) == (57, 60, 47)
    subset = problems[:6]
    result = humaneval.ValidationResult(
        pass_at_k={1: 0.5}, problems=6, samples_per_problem=2,
        passed_per_problem={p.task_id: 2 * (p.tier == "easy") for p in subset},
        syntax_errors=0, generate_s=0.0, check_s=0.0)
    by_tier = dict(humaneval.pass_at_1_by_tier(result, subset))
    assert by_tier["easy"] == 1.0 and all(v == 0.0 for k, v in by_tier.items() if k != "easy")


def test_dynamic_sampling_keeps_the_solvers_pairs_of_tasks_it_sometimes_solves():
    from spade_ray.records import Role
    from tests.tracking import factories as f

    pairs = [f.pair("always"), f.pair("never"), f.pair("sometimes"),
             dataclasses.replace(f.pair("always"), role=Role.GENERATOR)]
    rates = {"always": 1.0, "never": 0.0, "sometimes": 0.25}
    kept = learnable(pairs, rates)
    assert [(p.task_id, p.role) for p in kept] == [("sometimes", Role.SOLVER),
                                                   ("always", Role.GENERATOR)]


def test_families_nearest_the_target_get_more_prompts(seeds):
    families = list(TaskFamily)
    of = {f: [t for t in seeds if t.family is f][:3] for f in families}
    rates = {t.task_id: {"codegen": 0.0, "repair": 0.6, "predict": 0.1}[str(t.family)]
             for ts in of.values() for t in ts}
    weights = family_weights(families, [t for ts in of.values() for t in ts], rates, 0.7)
    schedule = family_schedule(families, 4, 0, weights)
    assert schedule.count(TaskFamily.REPAIR) == 2 and len(set(schedule)) == 3
    assert family_schedule(families, 6, 1, [1.0, 1.0, 1.0]) == family_schedule(families, 6, 1)
    assert family_schedule(families, 5, 0, [1.0, 0.0, 0.0]) == [TaskFamily.CODEGEN] * 5
