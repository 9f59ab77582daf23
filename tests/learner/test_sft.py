"""The SFT warm start's learner side: imitation on Demonstrations, at its own learning rate on
the rounds' optimizer (tiny model, plain torch engine)."""

import pytest
import torch

from spade_ray.learner import Learner, LearnerParams
from spade_ray.learner.engines import scaled_schedule, warmup_scheduler
from spade_ray.records import Demonstration, Role
from tests.learner.conftest import FAST, make_pair


def demonstrations(pairs):
    return [Demonstration(p.task_id, p.prompt, p.chosen, Role.SOLVER) for p in pairs]


def test_sft_raises_the_likelihood_of_the_demonstrations(tiny_model, pairs):
    learner = Learner(tiny_model, LearnerParams(**FAST))
    texts = [(p.prompt, p.chosen) for p in pairs]
    before = learner.mean_token_logp(texts)
    stats = learner.sft(demonstrations(pairs), epochs=3, lr_scale=1.0)
    assert stats["steps"] == 3 and learner.step == 3  # 4 demonstrations, 4 per step
    assert learner.mean_token_logp(texts) > before + 0.2


def test_sft_trains_at_its_own_rate_and_leaves_the_rounds_rate_as_it_was(tiny_model, pairs):
    learner = Learner(tiny_model, LearnerParams(**{**FAST, "warmup_steps": 4}))
    rate = learner.engine.lr()
    stats = learner.sft(demonstrations(pairs), epochs=1, lr_scale=10.0)
    assert stats["lr"] == pytest.approx(10 * rate)
    assert learner.engine.lr() == pytest.approx(2 * rate)  # warm-up step 2 of 4, unscaled
    assert learner.dpo_update(pairs)["lr"] == pytest.approx(2 * rate)


def test_scaled_schedule_scales_every_group_and_restores_the_schedule():
    weights = torch.nn.Parameter(torch.zeros(2))
    optimizer = torch.optim.AdamW([weights], lr=0.1)
    scheduler = warmup_scheduler(optimizer, 2)
    with scaled_schedule(scheduler, 5.0):
        assert optimizer.param_groups[0]["lr"] == pytest.approx(0.25)  # 0.1 * 5 * 1/2
        optimizer.step()
        scheduler.step()
        assert optimizer.param_groups[0]["lr"] == pytest.approx(0.5)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.1)
    assert scheduler.state_dict()["base_lrs"] == [0.1]


def test_sft_refuses_other_items_and_too_few_demonstrations(tiny_model, pairs):
    learner = Learner(tiny_model, LearnerParams(**FAST))
    with pytest.raises(TypeError, match="Demonstration"):
        learner.sft(pairs, epochs=1, lr_scale=1.0)
    with pytest.raises(ValueError, match="at least 4 demonstrations"):
        learner.sft(demonstrations([make_pair(0)]), epochs=1, lr_scale=1.0)
