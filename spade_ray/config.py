"""Structured config: the schema of each conf/ group, validated once and turned into records.

Components never see the config object: `role_specs()` and `role_sampling()` turn the `model`
group into the flat typed arguments that cluster.py and the rollout take (DESIGN.md, style 3).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from omegaconf import DictConfig, OmegaConf

from spade_ray.cluster import STRATEGIES, RoleSpec
from spade_ray.records import SamplingParams
from spade_ray.rollout.actor import BACKENDS

ROLES = ("generator", "solver")


@dataclasses.dataclass
class SamplingConfig:
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 256
    stop: list[str] = dataclasses.field(default_factory=list)
    seed: int | None = None


@dataclasses.dataclass
class RoleConfig:
    backend: str = "hf"
    model: str = "tiny"
    engines: int = 1
    gpus_per_engine: int = 0
    cpus_per_engine: float = 1.0
    backend_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    sampling: SamplingConfig = dataclasses.field(default_factory=SamplingConfig)
    token_cap: int | None = None


@dataclasses.dataclass
class ModelConfig:
    colocate: bool = False
    placement_strategy: str = "PACK"
    prompts: str = "fewshot"
    roles: dict[str, RoleConfig] = dataclasses.field(default_factory=dict)


def validate_model(cfg: DictConfig | dict) -> ModelConfig:
    """Typed, checked model config; errors name the key and the value."""
    merged = OmegaConf.merge(OmegaConf.structured(ModelConfig), cfg)
    model: ModelConfig = OmegaConf.to_object(merged)
    if set(model.roles) != set(ROLES):
        raise ValueError(f"model.roles must define exactly {ROLES}, got {sorted(model.roles)}")
    if model.placement_strategy not in STRATEGIES:
        raise ValueError(f"model.placement_strategy={model.placement_strategy!r}: use one of "
                         f"{STRATEGIES}")
    for name, role in model.roles.items():
        if role.backend not in BACKENDS:
            raise ValueError(f"model.roles.{name}.backend={role.backend!r}: use one of "
                             f"{BACKENDS}")
        role_sampling(role)  # SamplingParams checks the values
    return model


def role_specs(model: ModelConfig) -> list[RoleSpec]:
    return [RoleSpec(role=name, backend=r.backend, model=r.model, engines=r.engines,
                     gpus_per_engine=r.gpus_per_engine, cpus_per_engine=r.cpus_per_engine,
                     backend_kwargs=tuple(sorted(r.backend_kwargs.items())))
            for name, r in model.roles.items()]


def role_sampling(role: RoleConfig) -> SamplingParams:
    s = role.sampling
    return SamplingParams(n=s.n, temperature=s.temperature, top_p=s.top_p,
                          max_tokens=s.max_tokens, stop=tuple(s.stop), seed=s.seed)
