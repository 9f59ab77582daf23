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
