"""PPO with a critic on the real tiny model, plain torch engine (DeepSpeed: test_deepspeed.py;
several ranks: test_ranks_ppo.py; the losses by hand: test_losses.py)."""

import pytest
import torch
from transformers import AutoModelForCausalLM

import spade_ray.learner.ppo as ppo
from spade_ray.learner import CompletionGroup, Learner, LearnerParams, losses
from tests.learner.conftest import FAST, TOY_PROMPT
from tests.learner.conftest import TOY_GROUPS as GROUPS

PPO = {**FAST, "algorithm": "ppo"}
TARGET = [(TOY_PROMPT + "a", "Q")]  # log p(Q | prompt, a): the rewarded completion's token


def ppo_run(tiny_model, updates, **overrides):
    learner = Learner(tiny_model, LearnerParams(**{**PPO, **overrides}))
    return learner, [learner.ppo_update(GROUPS) for _ in range(updates)]


def target_gain(tiny_model, critic):
    """How much 4 PPO updates raise log p(target token), in nats."""
    learner = Learner(tiny_model, LearnerParams(**{**PPO, "critic": critic}))
    before = learner.mean_token_logp(TARGET)
    for _ in range(4):
        learner.ppo_update(GROUPS)
    return learner.mean_token_logp(TARGET) - before


def flipped_gae(*args):
    advantages, returns = losses.gae(*args)
    return -advantages, returns


@pytest.mark.parametrize("critic", ["lora", "head"])
def test_ppo_raises_the_rewarded_tokens_probability_and_a_flipped_advantage_does_not(
        tiny_model, critic, monkeypatch):
    assert target_gain(tiny_model, critic) > 0.5  # measured: +1.0 (lora), +1.1 (head)
    monkeypatch.setattr(ppo, "gae", flipped_gae)
    assert target_gain(tiny_model, critic) < -0.3  # measured: -0.8, -0.8


@pytest.mark.parametrize("critic", ["lora", "head"])
def test_the_critic_learns_the_returns(tiny_model, critic):
    _, history = ppo_run(tiny_model, 4, critic=critic)
    # measured: 0.14 -> 0.056 (lora), 0.14 -> 0.067 (head)
    assert history[-1]["value_loss"] < 0.6 * history[0]["value_loss"]


def test_each_batch_takes_ppo_epochs_optimizer_steps(tiny_model):
    learner, history = ppo_run(tiny_model, 2, ppo_epochs=3)
    assert [(h["steps"], h["step"], h["items"]) for h in history] == [(3, 3, 4), (3, 6, 4)]


@pytest.mark.parametrize("kl_mode", ["reward", "loss"])
def test_the_kl_coefficient_holds_the_policy_near_the_reference(tiny_model, kl_mode):
    free, held = (ppo_run(tiny_model, 5, kl_mode=kl_mode, kl_coef=coef)[1][-1]["kl"]
                  for coef in (0.0, 1.0))
    assert held < 0.5 * free  # measured: 0.36 free, 0.066 (reward), 0.074 (loss) held


def critic_parameters(learner):
    return {n: p.detach().clone() for n, p in learner.engine.module.named_parameters()
            if "value_head" in n or ".critic." in n}


def test_the_lora_critic_trains_its_own_adapter_and_stays_out_of_the_merged_weights(
        tiny_model):
    learner = Learner(tiny_model, LearnerParams(**PPO))
    before = critic_parameters(learner)
    learner.ppo_update(GROUPS)
    after = critic_parameters(learner)
    trained = {n for n in before if not torch.equal(before[n], after[n])}
    assert any(".lora_B.critic." in n for n in trained) and "value_head.weight" in trained
    base = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    base.load_state_dict(learner.policy_state_dict(), strict=True)


def test_a_fully_fine_tuned_policy_with_a_value_head_merges_to_the_base_architecture(
        tiny_model):
    learner, _ = ppo_run(tiny_model, 1, lora_rank=0, critic="head", lr=1e-4)
    base = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    base.load_state_dict(learner.policy_state_dict(), strict=True)


@pytest.mark.parametrize("critic", ["lora", "head"])
def test_ppo_resume_gives_the_same_next_update_and_critic(tiny_model, tmp_path, critic):
    # A group left in the buffer must survive the checkpoint too.
    groups = GROUPS + GROUPS[:1]
    straight = Learner(tiny_model, LearnerParams(**{**PPO, "critic": critic, "warmup_steps": 5}))
    first = Learner(tiny_model, LearnerParams(**{**PPO, "critic": critic, "warmup_steps": 5}))
    expected = [straight.ppo_update(groups) for _ in range(3)][-1]
    for _ in range(2):
        first.ppo_update(groups)
    first.save_checkpoint(tmp_path / "ckpt")
    resumed = Learner(tiny_model, LearnerParams(**{**PPO, "critic": critic, "warmup_steps": 5}))
    resumed.load_checkpoint(tmp_path / "ckpt")
    assert critic_parameters(resumed).keys() == critic_parameters(first).keys()
    assert all(torch.equal(a, b) for a, b in zip(critic_parameters(resumed).values(),
                                                 critic_parameters(first).values()))
    after = resumed.ppo_update(groups)
    assert (after["step"], after["lr"]) == (expected["step"], expected["lr"])
    for key in ("loss", "value_loss", "policy_loss", "kl"):
        assert after[key] == pytest.approx(expected[key], abs=1e-6), key


def test_a_checkpoint_of_another_critic_is_refused(tiny_model, tmp_path):
    learner = Learner(tiny_model, LearnerParams(**PPO))
    learner.save_checkpoint(tmp_path / "ckpt")
    with pytest.raises(ValueError, match="critic"):
        Learner(tiny_model, LearnerParams(**{**PPO, "critic": "head"})).load_checkpoint(
            tmp_path / "ckpt")


def test_a_ppo_learner_refuses_preference_pairs(tiny_model, pairs):
    learner = Learner(tiny_model, LearnerParams(**PPO))
    with pytest.raises(TypeError, match="ppo_update takes CompletionGroup items"):
        learner.update(pairs)


def test_groups_of_different_sizes_train_together(tiny_model):
    # K varies within a batch: generator groups (outputs per prompt) and solver groups
    # (candidates per task) differ, and the pair builder drops candidates needing a re-run
    pair = CompletionGroup(TOY_PROMPT, ("aQb", "acb"), (1.0, 0.0), "k2")
    learner = Learner(tiny_model, LearnerParams(**PPO))
    stats = learner.ppo_update([pair, *GROUPS[:3]])
    assert (stats["steps"], stats["items"]) == (2, 4)
