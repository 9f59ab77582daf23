"""LearnerActor on a real local Ray cluster: the Learner's methods across the process boundary.
Every test starts from the actor's step-0 checkpoint (the actor is shared: slow to start)."""

import pytest
import ray
import torch

from spade_ray.learner.actor import LearnerActor
from spade_ray.records import LearnerParams
from tests.learner.conftest import FAST

pytestmark = pytest.mark.slow  # a Ray cluster and a learner actor: 13-25 s for the module


@pytest.fixture(scope="module")
def started(tiny_model, tmp_path_factory):
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        actor = LearnerActor.options(num_cpus=1).remote(tiny_model, LearnerParams(**FAST))
        base = str(tmp_path_factory.mktemp("base") / "step_0")
        ray.get(actor.save_checkpoint.remote(base))
        yield actor, base
    finally:
        ray.shutdown()


@pytest.fixture
def actor(started):
    actor, base = started
    ray.get(actor.load_checkpoint.remote(base))
    return actor


def test_too_few_pairs_are_buffered(actor, pairs):
    assert ray.get(actor.update.remote(pairs[:2])) is None  # below min_pairs_per_update


def test_an_update_takes_one_step(actor, pairs):
    stats = ray.get(actor.update.remote(pairs))
    assert stats["step"] == ray.get(actor.step.remote()) == 1


def test_merged_weights_carry_plain_hf_names(actor):
    state = ray.get(actor.policy_state_dict.remote())
    assert "model.layers.0.self_attn.q_proj.weight" in state
    assert not any("lora_" in k for k in state)


def test_a_checkpoint_restores_the_weights(actor, pairs, tmp_path):
    ray.get(actor.update.remote(pairs))
    state = ray.get(actor.policy_state_dict.remote())
    ray.get(actor.save_checkpoint.remote(str(tmp_path / "ckpt")))
    ray.get(actor.update.remote(pairs))
    ray.get(actor.load_checkpoint.remote(str(tmp_path / "ckpt")))
    restored = ray.get(actor.policy_state_dict.remote())
    assert all(torch.equal(state[k], restored[k]) for k in state)
