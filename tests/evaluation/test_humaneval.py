"""HumanEval as the fixed validation set: problems, subsets, pass@k, evaluation through a real
local sandbox with the canonical solutions and with a real tiny model."""

import dataclasses
import math

import pytest

from spade_ray.evaluation.humaneval import (
    HUMAN_EVAL_SIZE,
    STOP,
    default_sampling,
    evaluate,
    load_problems,
    pass_at_k,
    to_tests,
)
from spade_ray.execution import Sandbox
from spade_ray.records import Completion, Limits
from spade_ray.rollout.hf_backend import HFBackend

SUBSET = 20


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(backend="local", limits=Limits(timeout_s=5.0, cpu_s=5.0), workers=2) as sb:
        yield sb


@pytest.fixture(scope="module")
def problems():
    return load_problems(subset=SUBSET, seed=0)


def completion(text: str) -> Completion:
    return Completion(text=text, prompt_tokens=0, completion_tokens=0, finish_reason="stop",
                      weights_version=0)


def answering(texts_for):
    """A generate() whose completions for a prompt are texts_for(problem, i) for sample i."""
    by_prompt = {p.prompt: p for p in load_problems()}

    def generate(prompts, sampling):
        return [[completion(texts_for(by_prompt[p], i)) for i in range(sampling.n)]
                for p in prompts]
    return generate


def test_all_problems_load_in_humaneval_order():
    ids = [p.task_id for p in load_problems()]
    assert ids == [f"HumanEval/{i}" for i in range(HUMAN_EVAL_SIZE)]


def test_a_subset_is_fixed_by_its_seed():
    first = [p.task_id for p in load_problems(subset=10, seed=3)]
    assert first == [p.task_id for p in load_problems(subset=10, seed=3)]
    assert first != [p.task_id for p in load_problems(subset=10, seed=4)]
    assert len(set(first)) == 10


@pytest.mark.parametrize("subset", [0, HUMAN_EVAL_SIZE + 1])
def test_a_subset_outside_the_set_is_an_error(subset):
    with pytest.raises(ValueError, match="subset"):
        load_problems(subset=subset)


def test_tests_call_check_with_the_entry_point(problems):
    tests = to_tests(problems[0])
    assert tests.entry_point == problems[0].entry_point
    assert "def check(candidate)" in tests.check and tests.total == 1


@pytest.mark.parametrize("n, c, k", [(1, 0, 1), (1, 1, 1), (5, 2, 1), (10, 3, 4), (20, 1, 10),
                                     (10, 8, 3)])
def test_pass_at_k_is_the_unbiased_estimator(n, c, k):
    assert pass_at_k(n, c, k) == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k))


@pytest.mark.parametrize("n, c, k", [(0, 0, 1), (3, 4, 1), (3, 1, 4), (3, 1, 0)])
def test_pass_at_k_rejects_impossible_counts(n, c, k):
    with pytest.raises(ValueError, match="pass_at_k"):
        pass_at_k(n, c, k)


def test_canonical_solutions_score_pass_at_1_of_one(sandbox, problems):
    result = evaluate(answering(lambda p, i: p.canonical_solution), sandbox, problems)
    assert result.pass_at_k == {1: 1.0}
    assert result.problems == SUBSET and set(result.passed_per_problem.values()) == {1}


def test_a_model_that_writes_no_body_scores_zero(sandbox, problems):
    result = evaluate(answering(lambda p, i: "    pass\n"), sandbox, problems)
    assert result.pass_at_k == {1: 0.0} and result.syntax_errors == 0


def test_pass_at_k_counts_passes_per_problem(sandbox, problems):
    # Sample 0 of each problem is canonical, samples 1..3 are wrong: c = 1 of n = 4.
    generate = answering(lambda p, i: p.canonical_solution if i == 0 else "    return None\n")
    result = evaluate(generate, sandbox, problems[:5], samples_per_problem=4, ks=(1, 2, 4))
    assert list(result.passed_per_problem.values()) == [1] * 5
    assert result.pass_at_k == pytest.approx({1: 0.25, 2: 0.5, 4: 1.0})


def test_programs_that_do_not_compile_fail_without_running(sandbox, problems):
    # A NUL byte (a byte-level model can emit one) would make the sandbox refuse the batch.
    generate = answering(lambda p, i: "    return \x00\n" if i == 0 else p.canonical_solution)
    result = evaluate(generate, sandbox, problems[:3], samples_per_problem=2, ks=(1,))
    assert result.syntax_errors == 3
    assert list(result.passed_per_problem.values()) == [1, 1, 1]


def test_k_larger_than_the_samples_is_an_error(sandbox, problems):
    with pytest.raises(ValueError, match="samples_per_problem"):
        evaluate(answering(lambda p, i: p.canonical_solution), sandbox, problems, ks=(1, 5))


def test_default_sampling_stops_at_the_next_top_level_statement():
    sampling = default_sampling(1)
    assert sampling.stop == STOP and "\ndef " in sampling.stop and sampling.temperature == 0


def test_a_real_tiny_model_runs_end_to_end(sandbox, tiny_model):
    # The tiny model's byte-level context is 1024 tokens: take the shortest prompts.
    short = sorted(load_problems(), key=lambda p: len(p.prompt))[:4]
    backend = HFBackend(tiny_model, dtype="float32")
    try:
        sampling = dataclasses.replace(default_sampling(2), max_tokens=24, seed=0)
        result = evaluate(backend.generate, sandbox, short, samples_per_problem=2, ks=(1, 2),
                          sampling=sampling)
    finally:
        backend.close()
    assert 0.0 <= result.pass_at_k[1] <= result.pass_at_k[2] <= 1.0
    assert result.problems == 4 and sum(result.passed_per_problem.values()) <= 8
