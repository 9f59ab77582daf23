"""Rollout stage: model backends (hf, vllm, openai) behind one interface, the model actor and
self-play sampling.

Public API for other stages: `normalise`, what counts as the same sampled text (candidates that
normalise alike are duplicates, for the sampler and for the pairs built from them), and
`bf16_supported`, the dtype question the learner must answer as the engines do.
"""

from spade_ray.rollout.dtypes import bf16_supported
from spade_ray.rollout.sampling import normalise

__all__ = ["bf16_supported", "normalise"]
