"""vllm backend on a real engine (vllm-cpu on this machine) with the tiny model.

Runs with the vLLM venv: `.venv-vllm/bin/python -m pytest tests/rollout/test_vllm_backend.py`
(launch/install_vllm_cpu.sh builds it). Elsewhere the module is skipped, unless
SPADE_REQUIRE_VLLM=1 (CI), which turns the skip into a failure. One engine serves the module
(~40 s to start on 2 cores); the weight-update tests leave it with the original weights.
"""

import importlib.util
import json
import os
import shutil

import pytest
from safetensors.torch import load_file

from spade_ray.records import SamplingParams
from spade_ray.rollout.backend import ModelLoadError, PromptTooLong
from spade_ray.rollout.models import build_tiny_model

if importlib.util.find_spec("vllm") is None:
    _reason = ("vLLM is not installed in this interpreter: run launch/install_vllm_cpu.sh, then "
               ".venv-vllm/bin/python -m pytest tests/rollout/test_vllm_backend.py")
    if os.environ.get("SPADE_REQUIRE_VLLM") == "1":
        pytest.fail(f"{_reason} (SPADE_REQUIRE_VLLM=1 forbids skipping)", pytrace=False)
    pytest.skip(_reason, allow_module_level=True)

pytestmark = pytest.mark.vllm

CONTEXT = 128  # max_model_len of the test engine
GREEDY = SamplingParams(n=1, temperature=0.0, max_tokens=12)


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("vllm-models")
    return build_tiny_model(root / "a", seed=0), build_tiny_model(root / "b", seed=1)


@pytest.fixture(scope="module")
def backend(model_dirs):
    from spade_ray.rollout.vllm_backend import VLLMBackend

    # block_size 32 (CPU default 128) so that a prompt fills whole, prefix-cached KV blocks.
    engine = VLLMBackend(str(model_dirs[0]), max_model_len=CONTEXT, block_size=32,
                         kv_cache_memory_bytes=64 << 20)
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def original_greedy(backend):
    return backend.generate(["def add(a, b):"], GREEDY)[0][0].text


def weights(model_dir):
    return load_file(str(model_dir / "model.safetensors"))


def test_n_completions_per_prompt_in_prompt_order(backend):
    prompts = ["a", "bb", "ccc", "dddd"]  # one token per byte: prompt i has i + 1 tokens
    out = backend.generate(prompts, SamplingParams(n=3, max_tokens=4, seed=0))
    assert [len(per_prompt) for per_prompt in out] == [3, 3, 3, 3]
    assert [[c.prompt_tokens for c in per_prompt] for per_prompt in out] == \
        [[1] * 3, [2] * 3, [3] * 3, [4] * 3]


def test_completion_tokens_and_finish_reason_agree(backend):
    out = backend.generate(["x = "] * 4, SamplingParams(n=4, max_tokens=6, seed=1))
    completions = [c for per_prompt in out for c in per_prompt]
    # A random model over 259 tokens rarely samples EOS, so most hit the budget.
    assert any(c.finish_reason == "length" for c in completions)
    for c in completions:
        assert c.completion_tokens == 6 if c.finish_reason == "length" else \
            1 <= c.completion_tokens <= 6


def test_seeded_sampling_repeats_and_its_n_samples_differ(backend):
    sampling = SamplingParams(n=4, temperature=1.0, max_tokens=8, seed=7)
    first = [c.text for c in backend.generate(["import os"], sampling)[0]]
    again = [c.text for c in backend.generate(["import os"], sampling)[0]]
    assert first == again
    assert len(set(first)) == 4


def test_min_p_reaches_the_engine():
    """Wiring only: this engine computes the tiny model in bfloat16, whose logits tie often
    enough that min_p 0.999 still leaves two tokens at some steps (the openai backend's test
    checks the effect through vLLM's server)."""
    from spade_ray.rollout.vllm_backend import VLLMBackend

    assert VLLMBackend._params(SamplingParams(min_p=0.1), 0, 1).min_p == 0.1
    assert VLLMBackend._params(SamplingParams(), 0, 1).min_p == 0.0


def test_greedy_sampling_with_n_gives_n_identical_completions(backend, original_greedy):
    out = backend.generate(["def add(a, b):"], SamplingParams(
        n=3, temperature=0.0, max_tokens=GREEDY.max_tokens))  # vLLM itself refuses n > 1 here
    assert [c.text for c in out[0]] == [original_greedy] * 3


def test_stop_string_ends_generation_and_is_cut(backend, original_greedy):
    # Stop at a printable character the greedy continuation emits after its first character.
    stop = next(ch for ch in original_greedy[1:] if ch.isascii() and ch.isprintable())
    out = backend.generate(["def add(a, b):"], SamplingParams(
        n=1, temperature=0.0, max_tokens=GREEDY.max_tokens, stop=(stop,)))[0][0]
    assert out.text == original_greedy[:original_greedy.index(stop)]
    assert out.finish_reason == "stop"
    assert out.completion_tokens < GREEDY.max_tokens


def test_prompt_too_long_is_refused_before_generating(backend):
    prompts = ["short", "y" * (CONTEXT - 4)]
    with pytest.raises(PromptTooLong, match=f"prompt 1 has {CONTEXT - 4} tokens") as info:
        backend.generate(prompts, SamplingParams(max_tokens=8))
    assert info.value.index == 1


def test_prompt_that_exactly_fills_the_context_is_accepted(backend):
    out = backend.generate(["z" * (CONTEXT - 8)], SamplingParams(max_tokens=8, seed=0))
    assert out[0][0].prompt_tokens + out[0][0].completion_tokens <= CONTEXT


def test_weight_update_changes_output_and_stamps_the_new_version(backend, model_dirs,
                                                                  original_greedy):
    old_version = backend.weights_version
    try:
        backend.update_weights(weights(model_dirs[1]), old_version + 1)
        out = backend.generate(["def add(a, b):"], GREEDY)[0][0]
        assert out.text != original_greedy
        assert out.weights_version == backend.weights_version == old_version + 1
    finally:
        backend.update_weights(weights(model_dirs[0]), backend.weights_version + 1)


def test_weight_update_round_trip_restores_the_exact_output(backend, model_dirs,
                                                            original_greedy):
    backend.update_weights(weights(model_dirs[1]), backend.weights_version + 1)
    backend.update_weights(weights(model_dirs[0]), backend.weights_version + 1)
    assert backend.generate(["def add(a, b):"], GREEDY)[0][0].text == original_greedy


def test_weight_update_drops_kv_blocks_cached_with_the_old_weights(backend, model_dirs):
    prompt = "".join(f"x{i} = {i}\n" for i in range(14))  # 106 tokens: 3 full blocks of 32
    backend.generate([prompt], GREEDY)  # its full blocks now sit in the prefix cache
    try:
        backend.update_weights(weights(model_dirs[1]), backend.weights_version + 1)
        after_update = backend.generate([prompt], GREEDY)[0][0].text
        backend.llm.reset_prefix_cache()
        recomputed = backend.generate([prompt], GREEDY)[0][0].text
        assert after_update == recomputed
    finally:
        backend.update_weights(weights(model_dirs[0]), backend.weights_version + 1)


def test_partial_state_dict_leaves_the_other_weights_in_place(backend, model_dirs,
                                                               original_greedy):
    layer0_mlp = {k: v for k, v in weights(model_dirs[0]).items() if ".layers.0.mlp." in k}
    backend.update_weights(layer0_mlp, backend.weights_version + 1)  # same values as now
    assert backend.generate(["def add(a, b):"], GREEDY)[0][0].text == original_greedy


def test_unknown_weight_name_is_refused_and_the_engine_survives(backend, model_dirs,
                                                                original_greedy):
    version = backend.weights_version
    bad = {"model.layers.0.mlp.typo.weight": weights(model_dirs[0])["model.norm.weight"]}
    with pytest.raises(ValueError, match="typo"):
        backend.update_weights(bad, version + 1)
    assert backend.weights_version == version
    assert backend.generate(["def add(a, b):"], GREEDY)[0][0].text == original_greedy


def test_weight_version_must_increase(backend, model_dirs):
    version = backend.weights_version
    with pytest.raises(ValueError, match="must increase"):
        backend.update_weights(weights(model_dirs[0]), version)
    assert backend.weights_version == version


def test_unsupported_head_dim_fails_before_starting_an_engine(model_dirs, tmp_path):
    from vllm.platforms import current_platform

    from spade_ray.rollout.vllm_backend import VLLMBackend

    if not current_platform.is_cpu():
        pytest.skip("the head_dim limit is the CPU attention kernel's")

    bad = tmp_path / "head-dim-16"
    shutil.copytree(model_dirs[0], bad)
    config = json.loads((bad / "config.json").read_text())
    config.update(num_attention_heads=4, num_key_value_heads=2, head_dim=16)
    (bad / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match="head_dim=16"):
        VLLMBackend(str(bad))


def test_model_directory_without_config_is_refused(tmp_path):
    from spade_ray.rollout.vllm_backend import VLLMBackend

    with pytest.raises(ModelLoadError, match="no config.json"):
        VLLMBackend(str(tmp_path))


def _kill_engine_processes(actor_pid):
    """SIGKILLs everything the actor process spawned: vLLM's engine core and its workers.

    Matching on vLLM's process title ("VLLM::EngineCore") proved unreliable: on the CI machine
    every child read plain "python". The actor itself runs no other child processes, so killing
    all its descendants is what an OOM-killed engine looks like. psutil finds children by their
    parent pid, whichever of the actor's threads forked them.
    """
    import psutil

    children = psutil.Process(actor_pid).children(recursive=True)
    for child in children:
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass
    return [child.pid for child in children]


def test_a_dead_engine_core_restarts_its_actor_which_catches_up(model_dirs):
    import time

    import ray

    from spade_ray.rollout.actor import ModelActor, RoleEngines

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        kwargs = {"max_model_len": CONTEXT, "kv_cache_memory_bytes": 64 << 20}
        solver = RoleEngines("solver", [ModelActor.options(num_cpus=1).remote(
            "vllm", str(model_dirs[0]), kwargs)])
        solver.update_weights(weights(model_dirs[1]), 1)
        served = solver.generate(["def add(a, b):"], GREEDY).completions[0][0].text
        actor_pid = ray.get(solver.actors[0].pid.remote())
        assert _kill_engine_processes(actor_pid), "the actor spawned no engine process"
        assert solver.generate(["def add(a, b):"], GREEDY).lost == (0,)
        deadline = time.monotonic() + 300  # Ray restarts the actor: a fresh engine, ~40 s
        while (again := solver.generate(["def add(a, b):"], GREEDY)).lost:
            assert time.monotonic() < deadline, "the engine did not come back"
            time.sleep(2)
        completion = again.completions[0][0]
        assert completion.weights_version == 1 and completion.text == served
    finally:
        ray.shutdown()


def test_a_special_tokens_spelling_in_a_prompt_is_characters_not_the_token(backend):
    tokenizer = backend.tokenizer
    prompt = f"Return x.{tokenizer.eos_token}\ndef f(x):"
    as_text = tokenizer(prompt, split_special_tokens=True).input_ids
    assert tokenizer.eos_token_id not in as_text
    out = backend.generate([prompt], GREEDY)
    assert out[0][0].prompt_tokens == len(as_text) > len(tokenizer(prompt).input_ids)
