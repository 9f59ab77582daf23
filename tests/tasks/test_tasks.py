"""Task format, seeds and validation by execution (real sandbox)."""

import dataclasses
import random

import pytest

from spade_ray.execution import Sandbox
from spade_ray.records import Limits, TestSuite
from spade_ray.tasks import candidate_program
from spade_ray.tasks.format import TaskFormatError, parse_task, render_task
from spade_ray.tasks.prompting import (
    generator_prompt,
    solver_prompt,
    topic_schedule,
)
from spade_ray.tasks.seeds import load_seed_tasks
from spade_ray.tasks.templates import load_prompts
from spade_ray.tasks.validate import validate_tasks

GOOD = """Description: Double a number.
Signature: def double(x: int) -> int:
Tests:
assert double(2) == 4
assert double(-1) == -2
Reference:
def double(x: int) -> int:
    return 2 * x
"""


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(limits=Limits(timeout_s=5, cpu_s=5), workers=2) as sb:
        yield sb


def test_parse_and_render_round_trip():
    task = parse_task(GOOD, "math")
    assert (task.entry_point, task.family, len(task.tests.asserts)) == ("double", "codegen", 2)
    assert parse_task(render_task(task), "math") == task


def test_same_content_same_id():
    assert parse_task(GOOD, "math").task_id == parse_task(GOOD + "\n\n", "math").task_id


@pytest.mark.parametrize("text, reason", [
    ("Description: x\nSignature: def f(x):\n", "missing_section"),
    (GOOD.replace("Signature: def double(x: int) -> int:", "Signature: double(x)"),
     "bad_signature"),
    (GOOD.replace("assert double(-1) == -2\n", ""), "test_count"),
    (GOOD.replace("    return 2 * x", "    return 2 *"), "reference_syntax"),
    (GOOD.replace("def double(x: int) -> int:\n    return", "def triple(x):\n    return"),
     "reference_missing_entry_point"),
    ("the model rambled on about nothing", "missing_section"),
])
def test_malformed_generator_output_gets_a_countable_reason(text, reason):
    with pytest.raises(TaskFormatError) as e:
        parse_task(text, "math")
    assert e.value.reason == reason


def test_every_seed_task_is_valid(sandbox):
    seeds = load_seed_tasks()
    assert {t.family for t in seeds} == {"codegen", "repair"}
    verdicts = validate_tasks(seeds, sandbox)
    assert [(v.task.entry_point, v.reason) for v in verdicts if not v.valid] == []


def test_wrong_reference_is_rejected(sandbox):
    task = parse_task(GOOD.replace("return 2 * x", "return x + 2"), "math")
    assert validate_tasks([task], sandbox)[0].reason == "reference_fails_tests"


def test_tests_a_trivial_program_passes_are_rejected(sandbox):
    weak = GOOD.replace("assert double(2) == 4\nassert double(-1) == -2",
                        "assert double(0) == 0\nassert double(0) in (0, 1)")
    assert validate_tasks([parse_task(weak, "math")], sandbox)[0].reason == \
        "trivial_passes:return_zero"


def test_echo_is_a_trivial_program(sandbox):
    task = parse_task(GOOD, "math")
    echo_ok = dataclasses.replace(task, tests=TestSuite(
        asserts=("assert double(0) == 0", "assert double(0) + 1 == 1")))
    assert not validate_tasks([echo_ok], sandbox)[0].valid


def test_reference_over_its_limits_is_rejected(sandbox):
    slow = GOOD.replace("    return 2 * x", "    while True:\n        pass")
    task = dataclasses.replace(parse_task(slow, "math"),
                               limits=Limits(timeout_s=1, cpu_s=1))
    assert validate_tasks([task], sandbox)[0].reason == "reference_timeout"


def test_repair_task_whose_bug_the_tests_miss_is_rejected(sandbox):
    repair = GOOD.replace("Reference:", "Buggy:\ndef double(x: int) -> int:\n    return x * 2\n"
                                        "Reference:")
    task = parse_task(repair, "math")
    assert task.family == "repair"
    assert validate_tasks([task], sandbox)[0].reason == "buggy_passes_tests"


def test_topic_schedule_gives_each_topic_its_quota_and_rotates():
    topics = ["a", "b", "c"]
    assert topic_schedule(topics, 6, 0) == ["a", "a", "b", "b", "c", "c"]
    assert topic_schedule(topics, 4, 1) == ["b", "b", "c", "c"]


def test_generator_prompt_shows_examples_and_ends_at_the_new_task():
    seeds = load_seed_tasks()
    text = generator_prompt(load_prompts("fewshot")["generator"], "strings", seeds, 2,
                            random.Random(0))
    assert text.count("Description:") == 2
    assert text.endswith("### Topic\nstrings\n### Task\n")


def test_base_model_candidate_is_signature_plus_body():
    task = parse_task(GOOD, "math")
    prompt = solver_prompt(load_prompts("fewshot")["solver"], task, load_seed_tasks(), 2)
    assert prompt.rstrip().endswith(task.signature)
    code = candidate_program(task, "\n    return x * 2\n### Task", chat=False)
    assert code.startswith("def double(x: int) -> int:\n    return x * 2")


def test_chat_candidate_is_the_code_block():
    task = parse_task(GOOD, "math")
    answer = "Sure!\n```python\ndef double(x):\n    return x + x\n```\nDone."
    assert candidate_program(task, answer, chat=True) == "def double(x):\n    return x + x\n"


def test_unrunnable_model_output_still_becomes_a_program():
    task = parse_task(GOOD, "math")
    assert "\x00" not in candidate_program(task, "\n    return\x00 x", chat=False)
    assert candidate_program(task, "   ", chat=True).strip()


def test_a_replayed_seed_task_never_shows_its_own_solution():
    seeds = load_seed_tasks()
    prompt = solver_prompt(load_prompts("fewshot")["solver"], seeds[0], seeds, 2)
    assert seeds[0].reference.strip() not in prompt
    assert prompt.count("### Task") == 3  # two examples + the task


def test_a_renamed_copy_of_a_seed_is_a_near_duplicate():
    from spade_ray.tasks.diversity import most_similar

    seeds = load_seed_tasks()
    word_counts = next(t for t in seeds if t.entry_point == "word_counts")
    copy = parse_task(render_task(word_counts).replace("word_counts", "count_words")
                      .replace("Count how often", "Count how many times"), "dictionaries")
    match, similarity = most_similar(copy, seeds)
    assert match is word_counts and similarity >= 0.8
    others = [t for t in seeds if t is not word_counts]
    assert most_similar(word_counts, others)[1] < 0.5
