"""LearnerActor on a real local Ray cluster: the Learner's methods across the process boundary."""

import pytest
import ray
import torch

from spade_ray.learner.actor import LearnerActor
from spade_ray.records import LearnerParams
from tests.learner.conftest import FAST


@pytest.fixture(scope="module")
def actor(tiny_model):
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield LearnerActor.options(num_cpus=1).remote(tiny_model, LearnerParams(**FAST))
    finally:
        ray.shutdown()


@pytest.mark.slow  # a Ray cluster and a learner actor: ~25 s
def test_actor_updates_checkpoints_and_serves_merged_weights(actor, pairs, tmp_path):
    assert ray.get(actor.update.remote(pairs[:2])) is None  # below min_pairs_per_update
    stats = ray.get(actor.update.remote(pairs[2:]))
    assert stats["step"] == ray.get(actor.step.remote()) == 1
    state = ray.get(actor.policy_state_dict.remote())
    assert "model.layers.0.self_attn.q_proj.weight" in state
    assert not any("lora_" in k for k in state)
    ray.get(actor.save_checkpoint.remote(str(tmp_path / "ckpt")))
    ray.get(actor.update.remote(pairs))
    assert ray.get(actor.load_checkpoint.remote(str(tmp_path / "ckpt"))) == 1
    restored = ray.get(actor.policy_state_dict.remote())
    assert all(torch.equal(state[k], restored[k]) for k in state)
