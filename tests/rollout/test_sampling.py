"""Distinct candidates per prompt with re-sampling, lost prompts re-issued, token caps."""

import itertools

import pytest

from spade_ray.records import Completion, SamplingParams
from spade_ray.rollout.hf_backend import HFBackend
from spade_ray.rollout.sampling import TokenBudgetExceeded, TokenMeter, normalise, sample_distinct


def scripted(texts_per_call):
    """A generate() that answers each call from a script: call k -> texts for each prompt."""
    calls = iter(texts_per_call)
    seen_params = []

    def generate(prompts, params):
        seen_params.append(params)
        script = next(calls)
        return [None if script[i] is None else
                [Completion(t, 3, 2, "stop", 0) for t in script[i][:params.n]]
                for i in range(len(prompts))]

    return generate, seen_params


def test_duplicates_are_resampled_until_distinct():
    generate, params = scripted([
        [["a", "a ", "b"], ["x", "y", "z"]],  # prompt 0 has a whitespace-only duplicate
        [["c"]],  # the re-sample asks prompt 0 alone for the missing one
    ])
    result = sample_distinct(generate, ["p0", "p1"], SamplingParams(n=3), TokenMeter("solver"))
    assert [[c.text for c in g] for g in result.completions] == [["a", "b", "c"], ["x", "y", "z"]]
    assert params[1].n == 1  # the re-sample asks only for what is missing


def test_sampled_and_duplicates_count_every_completion_generated():
    generate, _ = scripted([[["a", "a ", "b"], ["x", "y", "z"]], [["c"]]])
    result = sample_distinct(generate, ["p0", "p1"], SamplingParams(n=3), TokenMeter("solver"))
    assert (result.sampled, result.duplicates) == (7, 1)
    assert result.draws == [[2, 1, 1], [1, 1, 1]]  # "a " was a draw of "a"


def test_draws_of_a_kept_text_are_counted_across_resamples():
    generate, _ = scripted([[["a", "a", "a"]], [["a", "b"]], [["a"]]])
    result = sample_distinct(generate, ["p"], SamplingParams(n=3), TokenMeter("solver"))
    assert [c.text for c in result.completions[0]] == ["a", "b"]
    assert result.draws == [[5, 1]] and result.sampled == 6


def test_resampling_stops_after_its_rounds():
    generate, _ = scripted(itertools.repeat([["same", "same"]]))
    result = sample_distinct(generate, ["p"], SamplingParams(n=2), TokenMeter("solver"),
                             resample_rounds=2)
    assert [c.text for c in result.completions[0]] == ["same"]
    assert result.sampled == 4 and result.duplicates == 3  # 2 + 1 + 1 sampled


def test_lost_prompts_are_reissued():
    generate, _ = scripted([[None, ["x"]], [["a"]]])
    result = sample_distinct(generate, ["p0", "p1"], SamplingParams(n=1), TokenMeter("solver"))
    assert [[c.text for c in g] for g in result.completions] == [["a"], ["x"]]
    assert result.lost == 1


def test_a_refused_prompt_gets_no_completion_and_is_not_asked_again():
    # [] is what backend.generate_fitting gives a prompt too long for the model's context
    generate, params = scripted([[["a", "b"], []], [["c"]]])
    result = sample_distinct(generate, ["p0", "p1"], SamplingParams(n=3), TokenMeter("solver"))
    assert [[c.text for c in g] for g in result.completions] == [["a", "b", "c"], []]
    assert result.refused == (1,) and len(params) == 2  # the re-sample asked p0 alone


def test_meter_counts_tokens_and_enforces_its_cap():
    meter = TokenMeter("generator", cap=10)
    generate, _ = scripted(itertools.repeat([["a", "b"]]))
    sample_distinct(generate, ["p"], SamplingParams(n=2), meter)
    assert (meter.prompt_tokens, meter.completion_tokens, meter.calls) == (6, 4, 1)
    with pytest.raises(TokenBudgetExceeded, match="generator used 10 tokens"):
        sample_distinct(generate, ["p"], SamplingParams(n=2), meter)


def test_greedy_real_model_yields_one_distinct_candidate(tiny_model):
    backend = HFBackend(tiny_model, dtype="float32")
    meter = TokenMeter("solver")
    result = sample_distinct(backend.generate, ["def f():"],
                             SamplingParams(n=3, temperature=0, max_tokens=4), meter,
                             resample_rounds=1)
    assert len(result.completions[0]) == 1
    assert result.duplicates == result.sampled - 1
    prompt_len = len(backend.tokenizer("def f():").input_ids)
    assert meter.calls == 2 and result.sampled == 3 + 2  # n, then the 2 missing re-sampled
    assert meter.prompt_tokens == prompt_len * result.sampled


def test_normalise_ignores_spacing_between_tokens_only():
    assert normalise("def f():\n\n    return  1  \n") == normalise("def f( ):\n  return 1")
    assert normalise("a=1") == normalise("a = 1")
    assert normalise("def f():\n\treturn 1\n") == normalise("def f():\n    return 1\n")
    # indentation is Python's meaning: one level out is another program
    inside = "def f(xs):\n    for x in xs:\n        return x\n"
    assert normalise(inside) != normalise(inside.replace("        return", "    return"))
    # and so is a string's text, and a line break (U+2028 is not one)
    assert normalise("s.split(' ')") != normalise("s.split('  ')")
    assert normalise("x = 1\u2028y = 2") != normalise("x = 1\ny = 2")
    # text that does not tokenize is compared by its lines
    assert normalise("def f(:\n    x  +  1") == "def f(:\n    x + 1" != normalise("def f(:\nx + 1")
