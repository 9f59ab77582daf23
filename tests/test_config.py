"""Every shipped model config composes, validates and becomes records; bad ones are named."""

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from spade_ray.config import role_sampling, role_specs, validate_model

CONF = Path(__file__).resolve().parents[1] / "conf"


@pytest.mark.parametrize("path", sorted((CONF / "model").glob("*.yaml")), ids=lambda p: p.stem)
def test_shipped_model_configs_validate(path):
    model = validate_model(OmegaConf.load(path))
    specs = role_specs(model)
    assert [s.role for s in specs] == ["generator", "solver"]
    assert role_sampling(model.roles["solver"]).n >= 1


def test_unknown_backend_is_named():
    cfg = OmegaConf.load(CONF / "model" / "tiny_hf.yaml")
    cfg.roles.solver.backend = "tgi"
    with pytest.raises(ValueError, match="roles.solver.backend='tgi'"):
        validate_model(cfg)


def test_bad_sampling_value_is_named():
    cfg = OmegaConf.load(CONF / "model" / "tiny_hf.yaml")
    cfg.roles.solver.sampling.top_p = 1.5
    with pytest.raises(ValueError, match="top_p"):
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
    from spade_ray.training import learner_kwargs

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[f"experiment={experiment}"])
    validate_model(cfg.model)
    validate_loop(cfg.loop)
    validate_validation(cfg.validation)
    sandbox_limits(cfg.sandbox)
    kwargs = learner_kwargs(validate_learner(cfg.learner))
    if kwargs.get("deepspeed_config"):
        deepspeed_config(kwargs["deepspeed_config"], lr=1e-5, weight_decay=0.0, max_grad_norm=1.0,
                         micro_batch_size=1, grad_accum=1, bf16=True)
    assert cfg.run_name == experiment


@pytest.mark.parametrize("field, value", [("min_pairs_per_update", 0), ("gate_tolerance", -0.1),
                                          ("gate_logp_tolerance", -0.01), ("name", "ppo"),
                                          ("ranks", 0), ("ranks", 2)])
def test_a_bad_learner_setting_is_named(field, value):
    from spade_ray.config import validate_learner

    # ranks=2 without deepspeed_config: the plain torch engine trains one rank
    with pytest.raises(ValueError, match=field if field != "name" else "learner='ppo'"):
        validate_learner({"name": "dpo", field: value})
