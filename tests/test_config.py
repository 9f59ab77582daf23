"""Every shipped model config composes, validates and becomes records; bad ones are named."""

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from spade_ray.config import (
    admission_config,
    control_config,
    role_sampling,
    sft_warmup,
    validate_learner,
    validate_loop,
    validate_model,
    validate_trace,
    validate_validation,
)
from spade_ray.preferences.generator import GeneratorReward
from spade_ray.records import TaskFamily

CONF = Path(__file__).resolve().parents[1] / "conf"


@pytest.mark.parametrize("path", sorted((CONF / "model").glob("*.yaml")), ids=lambda p: p.stem)
def test_shipped_model_configs_validate(path):
    model = validate_model(OmegaConf.load(path))
    assert role_sampling(model.roles["solver"]).n >= 1


def test_unknown_backend_is_named():
    cfg = OmegaConf.load(CONF / "model" / "tiny_hf.yaml")
    cfg.roles.solver.backend = "tgi"
    with pytest.raises(ValueError, match="roles.solver.backend='tgi'"):
        validate_model(cfg)


@pytest.mark.parametrize("key,value", [("top_p", 1.5), ("min_p", 1.0), ("min_p", -0.1)])
def test_bad_sampling_value_is_named(key, value):
    cfg = OmegaConf.load(CONF / "model" / "tiny_hf.yaml")
    cfg.roles.solver.sampling[key] = value
    with pytest.raises(ValueError, match=key):
        validate_model(cfg)


def test_unknown_key_is_refused():
    cfg = OmegaConf.load(CONF / "model" / "tiny_hf.yaml")
    cfg.roles.solver.temprature = 0.5
    with pytest.raises(Exception, match="temprature"):
        validate_model(cfg)


@pytest.mark.parametrize("experiment", sorted(p.stem for p in (CONF / "experiment").glob("*.yaml")))
def test_every_experiment_composes_and_validates(experiment):
    from hydra import compose, initialize_config_dir

    from spade_ray.config import (
        sandbox_limits,
        validate_learner,
        validate_loop,
        validate_validation,
    )
    from spade_ray.learner.engines import deepspeed_config

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[f"experiment={experiment}"])
    validate_model(cfg.model)
    validate_loop(cfg.loop)
    validate_validation(cfg.validation)
    sandbox_limits(cfg.sandbox)
    _, params = validate_learner(cfg.learner)
    if params is not None and params.deepspeed_config:
        deepspeed_config(params.deepspeed_config, lr=1e-5, weight_decay=0.0, max_grad_norm=1.0,
                         micro_batch_size=1, grad_accum=1, bf16=True)
    assert cfg.run_name == experiment


@pytest.mark.parametrize("field, value", [("min_pairs_per_update", 0), ("gate_tolerance", -0.1),
                                          ("gate_logp_tolerance", -0.01), ("name", "rloo"),
                                          ("ranks", 0), ("ranks", 2), ("cpus", 0),
                                          ("cpus", -1)])
def test_a_bad_learner_setting_is_named(field, value):
    # ranks=2 without deepspeed_config: the plain torch engine trains one rank
    with pytest.raises(ValueError, match=field if field != "name" else "learner='rloo'"):
        validate_learner({"name": "dpo", field: value})


@pytest.mark.parametrize("validation, message", [
    ({"tiers": ["trivial"]}, r"validation.tiers: unknown validation tiers \['trivial'\]"),
    ({"problems": 58, "tiers": ["easy"]}, r"validation.problems must be 0..57 \(the problems "
                                           r"of tiers \['easy'\]\), got 58"),
    ({"problems": 165}, "validation.problems must be 0..164"),
    ({"max_tokens": 0}, "validation.max_tokens must be >= 1, got 0"),
    ({"samples_per_problem": 0}, "validation.samples_per_problem must be >= 1, got 0"),
])
def test_a_bad_validation_setting_is_named(validation, message):
    with pytest.raises(ValueError, match=message):
        validate_validation(validation)


def test_the_validation_set_is_drawn_from_its_tiers_and_fixed_by_the_seed():
    easy = validate_validation({"problems": 16, "tiers": ["easy"]})
    problems = easy.load(seed=0)
    assert len(problems) == 16 and {p.tier for p in problems} == {"easy"}
    assert problems == easy.load(seed=0) and problems != easy.load(seed=1)
    assert len(validate_validation({"problems": 57, "tiers": ["easy"]}).load(0)) == 57
    assert validate_validation({"problems": 0}).load(0) == []
    # without tiers, the subset a seed picks is the one runs before tiers existed validated on
    assert [p.task_id for p in validate_validation({"problems": 4}).load(0)] == [
        "HumanEval/10", "HumanEval/66", "HumanEval/98", "HumanEval/107"]


def test_a_misspelt_learner_parameter_is_refused_before_anything_starts():
    with pytest.raises(ValueError, match=r"learner.params: unknown keys \['lora_rnak'\]"):
        validate_learner({"name": "dpo", "params": {"lora_rnak": 4}})


@pytest.mark.parametrize("name, params, message", [
    ("dpo", {"lr": 0.0}, "lr must be a finite number > 0"),
    ("dpo", {"lr": float("nan")}, "lr must be a finite number > 0"),
    # each of these started a run that could only fail at its first update, tens of minutes
    # in, or trained the wrong way silently (a negative NLL weight trains the chosen side down)
    ("dpo", {"dpo_loss_type": "bogus"}, r"dpo_loss_type='bogus': use one of \['sigmoid'"),
    ("dpo", {"beta": 0.0}, "beta must be a finite number > 0"),
    ("dpo", {"label_smoothing": 0.5}, "label_smoothing must be a finite number >= 0.0 and < 0.5"),
    ("dpo", {"rpo_alpha": -5.0}, "rpo_alpha must be a finite number >= 0"),
    ("dpo", {"max_length": 0}, "max_length must be an integer >= 1"),
    ("dpo", {"warmup_steps": -1}, "warmup_steps must be an integer >= 0"),
    ("grpo", {"clip_eps": -1.0}, "clip_eps must be a finite number > 0"),
    ("grpo", {"kl_coef": -1.0}, "kl_coef must be a finite number >= 0"),
])
def test_a_bad_learner_parameter_value_is_named(name, params, message):
    with pytest.raises(ValueError, match=message):
        validate_learner({"name": name, "params": params})


@pytest.mark.parametrize("warmup, message", [
    ({"epoch": 1}, r"learner.sft_warmup: unknown keys \['epoch'\]"),
    ({"epochs": 0}, "epochs must be an integer >= 1"),
    ({"roles": ["critic"]}, "roles=\\['critic'\\]"),
    ({"lr_scale": 0}, "lr_scale must be > 0"),
])
def test_a_bad_sft_warmup_is_named(warmup, message):
    with pytest.raises(ValueError, match=message):
        validate_learner({"name": "dpo", "sft_warmup": warmup})


def test_an_sft_warmup_needs_a_learner_and_defaults_to_both_roles():
    with pytest.raises(ValueError, match="sft_warmup needs a learner"):
        validate_learner({"name": "none", "sft_warmup": {}})
    learner, _ = validate_learner({"name": "grpo", "sft_warmup": {"epochs": 2}})
    assert sft_warmup(learner).roles == ("solver", "generator")
    assert sft_warmup(validate_learner({"name": "dpo"})[0]) is None


@pytest.mark.parametrize("path", sorted((CONF / "learner").glob("*.yaml")), ids=lambda p: p.stem)
def test_shipped_learner_configs_validate(path):
    learner, params = validate_learner(OmegaConf.load(path))
    assert (params is None) == (learner.name == "none")
    if params is not None:
        assert str(params.algorithm) == path.stem


@pytest.mark.parametrize("params, message", [
    ({"critic": "lroa"}, r"critic='lroa': use one of \['lora', 'head'\]"),
    ({"kl_mode": "penalty"}, r"kl_mode='penalty': use one of \['reward', 'loss'\]"),
    ({"ppo_epochs": 0}, "ppo_epochs must be an integer >= 1"),
    ({"gae_lambda": 1.5}, r"gae_lambda must be a finite number >= 0.0 and <= 1.0"),
    ({"value_clip": 0.0}, "value_clip must be a finite number > 0"),
    ({"critic": "lora", "lora_rank": 0}, "with lora_rank=0 .* use critic='head'"),
    ({"critic": "lora", "activation_checkpointing": True}, "activation_checkpointing"),
])
def test_a_bad_ppo_parameter_is_named(params, message):
    with pytest.raises(ValueError, match=message):
        validate_learner({"name": "ppo", "params": params})


def test_an_unknown_sandbox_placement_is_named():
    from spade_ray.config import sandbox_limits

    with pytest.raises(ValueError, match="sandbox.placement='cloud'"):
        sandbox_limits({"placement": "cloud"})


@pytest.mark.parametrize("key, value", [("timeout_s", float("nan")), ("cpu_s", float("inf")),
                                        ("memory_mb", float("inf")),
                                        ("max_processes", float("nan"))])
def test_a_non_finite_sandbox_limit_is_named(key, value):
    from spade_ray.config import sandbox_limits

    with pytest.raises(ValueError, match=f"sandbox.limits.{key} must be a finite positive number"):
        sandbox_limits({"limits": {key: value}})


@pytest.mark.parametrize("key, value", [("memory_mb", 0.5), ("tmp_mb", 64.5),
                                        ("max_processes", 1.25)])
def test_a_fractional_whole_number_sandbox_limit_is_named(key, value):
    """int() made memory_mb=0.5 a 0, and the error then said "got 0"."""
    from spade_ray.config import sandbox_limits

    with pytest.raises(ValueError, match=f"sandbox.limits.{key} must be a whole number, got "
                                         f"{value}"):
        sandbox_limits({"limits": {key: value}})


def test_whole_number_sandbox_limits_from_yaml_become_ints():
    from spade_ray.config import sandbox_limits

    limits = sandbox_limits({"limits": {"memory_mb": 256.0, "timeout_s": 2.5}})[1]
    assert (limits.memory_mb, type(limits.memory_mb), limits.timeout_s) == (256, int, 2.5)


def test_a_learner_needs_cpus_only_when_there_is_one():
    assert validate_learner({"name": "none", "cpus": 0})[1] is None


def test_reading_the_config_schema_loads_neither_ray_nor_torch():
    import subprocess
    import sys

    code = "import sys, spade_ray.config; print('ray' in sys.modules, 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.split() == ["False", "False"]


@pytest.mark.parametrize("loop, message", [
    ({"families": ["codegen", "essay"]}, "loop.families"),
    ({"families": []}, "loop.families"),
    ({"generator_reward": "happiness"}, "loop.generator_reward"),
    ({"admission": {"max_mutant": 3}}, "unknown keys \\['max_mutant'\\]"),
    ({"admission": {"min_mutation_score": 2}}, "min_mutation_score"),
    ({"control": {"band": [0.3, 0.7]}}, "loop.control: unknown keys \\['band'\\]"),
    ({"control": {"band_low": 0.8}}, "band_low < band_high"),
    ({"overlap": True, "max_staleness": 0}, "with loop.overlap it must be >= 1"),
    ({"max_staleness": -1}, "loop.max_staleness=-1: a version count"),
    ({"replay_archive_share": 1.5}, "loop.replay_archive_share must be in \\[0, 1\\]"),
    ({"few_shot": -1}, "loop.few_shot must be >= 0, got -1"),
    ({"generator_few_shot": -1}, "loop.generator_few_shot must be >= 0, got -1"),
    ({"replay_tasks_per_round": -2}, "loop.replay_tasks_per_round must be >= 0, got -2"),
    ({"frame_tokens": -1}, "loop.frame_tokens must be >= 0, got -1"),
    ({"archive_size": -1}, "loop.archive_size must be >= 0, got -1"),
    ({"pair_margin": -1}, "loop.pair_margin must be in \\[0, 1\\], got -1"),
    ({"pair_margin": 1.5}, "loop.pair_margin must be in \\[0, 1\\], got 1.5"),
    ({"pair_margin": float("nan")}, "loop.pair_margin must be in \\[0, 1\\], got nan"),
    ({"max_similarity": 0}, "loop.max_similarity must be in \\(0, 1\\], got 0"),
    ({"max_similarity": 1.2}, "loop.max_similarity must be in \\(0, 1\\], got 1.2"),
    ({"caps": {"wall_s": -1}}, "loop.caps.wall_s must be > 0 or null"),
    ({"caps": {"wall_s": float("inf")}}, "loop.caps.wall_s must be > 0 or null"),
    ({"caps": {"tokens_generator": 0}}, "loop.caps.tokens_generator must be > 0 or null"),
    ({"caps": {"tokens_solver": -5}}, "loop.caps.tokens_solver must be > 0 or null"),
    ({"caps": {"sandbox_cpu_s": float("nan")}}, "loop.caps.sandbox_cpu_s must be > 0 or null"),
    ({"caps": {"tasks": 0}}, "loop.caps.tasks must be > 0 or null"),
])
def test_a_bad_self_play_setting_is_named(loop, message):
    with pytest.raises(ValueError, match=message):
        validate_loop({"topics": ["lists"], **loop})


def test_zero_counts_and_set_caps_are_valid_self_play_settings():
    loop = validate_loop({"topics": ["lists"], "few_shot": 0, "generator_few_shot": 0,
                          "replay_tasks_per_round": 0, "frame_tokens": 0, "archive_size": 0,
                          "pair_margin": 1.0, "max_similarity": 1.0,
                          "caps": {"wall_s": 0.5, "tasks": 1}})
    assert (loop.archive_size, loop.caps.wall_s, loop.caps.tokens_solver) == (0, 0.5, None)


@pytest.mark.parametrize("trace, message", [
    ({"max_mb": -1}, "trace.max_mb must be > 0 or null \\(no limit\\), got -1"),
    ({"max_mb": 0}, "trace.max_mb must be > 0 or null"),
    ({"max_mb": float("nan")}, "trace.max_mb must be > 0 or null"),
    ({"max_text_chars": 100}, "trace.max_text_chars must be >= 200"),
    ({"keep_text_rounds": 0}, "trace.keep_text_rounds must be >= 1 or null"),
])
def test_a_bad_trace_setting_is_named(trace, message):
    with pytest.raises(ValueError, match=message):
        validate_trace(trace)


def test_trace_max_mb_null_is_no_size_limit():
    assert validate_trace({"max_mb": None}).max_bytes is None
    assert validate_trace({"max_mb": 1.5}).max_bytes == 3 * 2**19
    assert validate_trace(OmegaConf.load(CONF / "config.yaml").trace).max_bytes == 2048 * 2**20


def test_self_play_settings_become_typed_values():
    loop = validate_loop({"topics": ["lists"], "families": ["predict"], "generator_reward": "azr",
                          "admission": {"max_mutants": 3}})
    assert loop.families == [TaskFamily.PREDICT] and loop.generator_reward is GeneratorReward.AZR
    assert admission_config(loop).max_mutants == 3
    control = control_config(validate_loop({"topics": ["lists"], "control": {"band_high": 0.6}}))
    assert (control.band_low, control.band_high) == (0.3, 0.6)
