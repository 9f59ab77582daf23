"""Losses against values computed by hand from the papers' formulas (see losses.py)."""

import math

import pytest
import torch

from spade_ray.learner.losses import dpo_loss, group_advantages, grpo_loss, nll_per_token

# h = (log pi_w - log ref_w) - (log pi_l - log ref_l) = (-1 + 2) - (-3 + 2) = 2
PC, PR, RC, RR = (torch.tensor([v]) for v in (-1.0, -3.0, -2.0, -2.0))


def test_dpo_sigmoid_is_minus_log_sigmoid_of_beta_h():
    loss, stats = dpo_loss(PC, PR, RC, RR, beta=0.5)
    assert loss.item() == pytest.approx(math.log(1 + math.exp(-1.0)))  # -log sigmoid(0.5 * 2)
    assert stats["rewards_margin"] == pytest.approx(0.5 * 2)
    assert stats["rewards_accuracy"] == 1.0


def test_dpo_label_smoothing_mixes_in_the_flipped_label():
    loss, _ = dpo_loss(PC, PR, RC, RR, beta=0.5, label_smoothing=0.1)
    expected = 0.9 * math.log(1 + math.exp(-1.0)) + 0.1 * math.log(1 + math.exp(1.0))
    assert loss.item() == pytest.approx(expected)


def test_ipo_is_the_squared_distance_of_h_to_one_over_two_beta():
    loss, _ = dpo_loss(PC, PR, RC, RR, beta=0.1, loss_type="ipo")
    assert loss.item() == pytest.approx((2.0 - 1 / 0.2) ** 2)


def test_dpo_gradient_pushes_chosen_up_and_rejected_down():
    chosen, rejected = PC.clone().requires_grad_(), PR.clone().requires_grad_()
    loss, _ = dpo_loss(chosen, rejected, RC, RR, beta=0.5)
    loss.backward()
    sig = 1 / (1 + math.exp(1.0))  # d/dh -log sigmoid(beta h) = -beta sigmoid(-beta h)
    assert chosen.grad.item() == pytest.approx(-0.5 * sig)
    assert rejected.grad.item() == pytest.approx(0.5 * sig)


def test_nll_per_token_pools_the_batch_tokens():
    # two completions: log-probs -6 over 3 tokens and -2 over 1 token: 8 nats over 4 tokens
    nll = nll_per_token(torch.tensor([-6.0, -2.0]), torch.tensor([3, 1]))
    assert nll.item() == pytest.approx(2.0)


def test_group_advantages_are_normalised_within_each_group():
    adv = group_advantages(torch.tensor([[1.0, 0.0, 0.0, 1.0], [3.0, 3.0, 3.0, 3.0]]))
    std = math.sqrt(4 * 0.25 / 3)  # sample std of (1, 0, 0, 1)
    expected = 0.5 / (std + 1e-4)
    assert torch.allclose(adv[0], torch.tensor([expected, -expected, -expected, expected]))
    assert torch.equal(adv[1], torch.zeros(4))  # no signal in a group of equal rewards


@pytest.mark.parametrize("ratio, advantage, expected", [
    (1.5, 1.0, -1.2),   # positive advantage: the gain is capped at 1 + eps
    (1.5, -1.0, 1.5),   # negative advantage: min() keeps the unclipped, worse term
    (0.5, -1.0, 0.8),   # negative advantage: the ratio cannot profit below 1 - eps
])
def test_grpo_clipped_surrogate(ratio, advantage, expected):
    logps = torch.full((1, 3), math.log(ratio))
    zeros = torch.zeros(1, 3)
    loss, stats = grpo_loss(logps, zeros, logps, torch.tensor([advantage]), torch.ones(1, 3),
                            clip_eps=0.2, kl_coef=0.0)
    assert loss.item() == pytest.approx(expected)


def test_grpo_kl_penalty_is_the_k3_estimator():
    logps = torch.zeros(1, 2)
    ref = torch.full((1, 2), math.log(2.0))  # pi_ref / pi = 2
    loss, stats = grpo_loss(logps, logps, ref, torch.zeros(1), torch.ones(1, 2), kl_coef=0.5)
    k3 = 2.0 - math.log(2.0) - 1.0
    assert stats["kl"] == pytest.approx(k3)
    assert loss.item() == pytest.approx(0.5 * k3)


def test_grpo_averages_tokens_per_sequence_then_sequences():
    logps = torch.full((2, 4), math.log(1.1))  # ratio 1.1, inside the clip range
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 0.0, 0.0, 0.0]])
    loss, _ = grpo_loss(logps, torch.zeros(2, 4), logps, torch.tensor([1.0, 3.0]), mask,
                        kl_coef=0.0)
    assert loss.item() == pytest.approx(-(1.1 * 1.0 + 1.1 * 3.0) / 2)  # masked tokens ignored
