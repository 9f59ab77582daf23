"""The hf backend with a real (tiny, random) model: shapes, counts, stops, weights, errors."""

import dataclasses

import pytest
import torch

from spade_ray.records import SamplingParams
from spade_ray.rollout.backend import (
    ModelBackend,
    ModelLoadError,
    PromptTooLong,
    generate_fitting,
)
from spade_ray.rollout.hf_backend import HFBackend


@pytest.fixture(scope="module")
def backend(tiny_model):
    b = HFBackend(tiny_model, dtype="float32", max_batch_size=8)
    yield b
    b.close()


def test_it_is_a_model_backend(backend):
    assert isinstance(backend, ModelBackend)


def test_n_completions_per_prompt_in_order_with_token_counts(backend):
    prompts = ["def f(x):", "hello world, this is longer"]
    out = backend.generate(prompts, SamplingParams(n=3, max_tokens=7, seed=0))
    assert [len(group) for group in out] == [3, 3]
    tokens = [len(backend.tokenizer(p).input_ids) for p in prompts]
    assert [group[0].prompt_tokens for group in out] == tokens
    assert all(1 <= c.completion_tokens <= 7 for group in out for c in group)
    assert all(c.finish_reason in ("stop", "length") for group in out for c in group)


def test_a_special_tokens_spelling_in_a_prompt_is_characters_not_the_token(backend):
    eos = backend.tokenizer.eos_token
    prompt = f"Return x.{eos}\ndef f(x):"
    out = backend.generate([prompt], SamplingParams(n=1, max_tokens=2, seed=0))
    as_text = backend.tokenizer(prompt, split_special_tokens=True).input_ids
    assert backend.tokenizer.eos_token_id not in as_text
    assert out[0][0].prompt_tokens == len(as_text) > len(backend.tokenizer(prompt).input_ids)


def test_batches_larger_than_max_batch_size_keep_order(backend):
    greedy = SamplingParams(temperature=0, max_tokens=5)
    prompts = [f"prompt {i}" for i in range(10)]
    one_by_one = [backend.generate([p], greedy)[0][0].text for p in prompts]
    batched = [g[0].text for g in backend.generate(prompts, greedy)]
    assert batched == one_by_one


def test_stop_string_cuts_the_text(backend):
    greedy = SamplingParams(temperature=0, max_tokens=20)
    text = backend.generate(["abc"], greedy)[0][0].text
    assert len(text) >= 5  # the tiny model is seeded: its greedy text is fixed
    stop = text[3:5]
    cut = backend.generate(["abc"], SamplingParams(temperature=0, max_tokens=20,
                                                   stop=(stop,)))[0][0]
    assert cut.text == text[:text.find(stop)]
    assert cut.finish_reason == "stop"


def test_min_p_keeps_only_the_tokens_near_the_likeliest(backend):
    greedy = backend.generate(["def f(x):"], SamplingParams(temperature=0, max_tokens=8))[0][0]
    hot = SamplingParams(n=4, temperature=2.0, max_tokens=8, seed=0)
    spread = backend.generate(["def f(x):"], hot)[0]
    assert len({c.text for c in spread}) > 1  # a hot random model: the samples differ
    cut = backend.generate(["def f(x):"], dataclasses.replace(hot, min_p=0.999))[0]
    assert {c.text for c in cut} == {greedy.text}


def test_weight_update_changes_output_and_version(backend):
    greedy = SamplingParams(temperature=0, max_tokens=12)
    before = backend.generate(["def add(a, b):"], greedy)[0][0]
    original = backend.state_dict()
    torch.manual_seed(123)
    backend.update_weights({k: torch.randn_like(v) for k, v in original.items()}, version=1)
    after = backend.generate(["def add(a, b):"], greedy)[0][0]
    assert before.weights_version == 0 and after.weights_version == 1
    assert after.text != before.text
    backend.update_weights(original, version=2)
    assert backend.generate(["def add(a, b):"], greedy)[0][0].text == before.text


def test_version_must_increase(backend):
    with pytest.raises(ValueError, match="must increase"):
        backend.update_weights(backend.state_dict(), version=backend.weights_version)


def test_prompt_over_the_context_is_named(backend):
    with pytest.raises(PromptTooLong, match="prompt 1 has"):
        backend.generate(["ok", "x" * 9000], SamplingParams(max_tokens=10))


def test_a_prompt_over_the_context_gets_no_completion_and_the_others_theirs(backend):
    long = "a " * backend.context
    out = generate_fitting(backend, ["def f(x):", long, "hello"],
                           SamplingParams(n=2, max_tokens=3, seed=0))
    assert [len(group) for group in out] == [2, 0, 2]


def test_unknown_model_path_is_named(tmp_path):
    with pytest.raises(ModelLoadError, match="nowhere"):
        HFBackend(str(tmp_path / "nowhere"))


def test_prompt_too_long_survives_pickling_across_processes():
    import pickle

    error = pickle.loads(pickle.dumps(PromptTooLong(3, 900, 200, 1024)))
    assert error.index == 3 and "prompt 3 has 900 tokens" in str(error)
