"""Losses (DPO, GRPO, PPO and its GAE) against values computed by hand from the papers' formulas
(see losses.py)."""

import math

import pytest
import torch

from spade_ray.learner.losses import (
    dpo_loss,
    gae,
    group_advantages,
    grpo_loss,
    nll_per_token,
    ppo_policy_loss,
    ppo_value_loss,
    token_rewards,
    whiten,
)

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


# PPO. One completion of 3 tokens, critic values V = (0.5, 0.2, 0.4), score 1 at the last token.
VALUES = torch.tensor([[0.5, 0.2, 0.4]])
ONE_ROW = torch.ones(1, 3)


def test_gae_by_hand():
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    # gamma 1, lambda 0.5: delta = (0 + 0.2 - 0.5, 0 + 0.4 - 0.2, 1 + 0 - 0.4) = (-0.3, 0.2, 0.6)
    # A_2 = 0.6; A_1 = 0.2 + 0.5 * 0.6 = 0.5; A_0 = -0.3 + 0.5 * 0.5 = -0.05; R = A + V
    advantages, returns = gae(rewards, VALUES, ONE_ROW, gamma=1.0, lam=0.5)
    assert advantages[0].tolist() == pytest.approx([-0.05, 0.5, 0.6])
    assert returns[0].tolist() == pytest.approx([0.45, 0.7, 1.0])
    # lambda 1: A_t = discounted return - V_t; gamma 0.9: returns (0.81, 0.9, 1)
    advantages, returns = gae(rewards, VALUES, ONE_ROW, gamma=0.9, lam=1.0)
    assert returns[0].tolist() == pytest.approx([0.81, 0.9, 1.0])
    assert advantages[0].tolist() == pytest.approx([0.31, 0.7, 0.6])


def test_gae_ignores_masked_positions_on_either_side_of_a_completion():
    # the 2-token completion sits between a prompt position and a pad position, whose
    # rewards and values (9s) must not leak in: as the 2-token row (0.2, 0.4) alone,
    # lambda 0.5: A = (0.2 + 0.5 * 0.6, 0.6) = (0.5, 0.6), R = (0.7, 1.0)
    rewards = torch.tensor([[9.0, 0.0, 1.0, 9.0]])
    values = torch.tensor([[9.0, 0.2, 0.4, 9.0]])
    mask = torch.tensor([[0, 1, 1, 0]])
    advantages, returns = gae(rewards, values, mask, gamma=1.0, lam=0.5)
    assert advantages[0].tolist() == pytest.approx([0.0, 0.5, 0.6, 0.0])
    assert returns[0].tolist() == pytest.approx([0.0, 0.7, 1.0, 0.0])


def test_token_rewards_put_the_score_on_the_last_token_and_the_kl_penalty_on_every_token():
    mask = torch.tensor([[1, 1, 1, 0], [0, 1, 0, 0]])
    kl = torch.tensor([[0.1, 0.2, -0.1, 5.0], [5.0, 0.3, 5.0, 5.0]])
    rewards = token_rewards(torch.tensor([0.5, 1.0]), mask, kl, kl_coef=0.1)
    assert rewards.flatten().tolist() == pytest.approx([-0.01, -0.02, 0.5 + 0.01, 0.0,
                                                        0.0, 1.0 - 0.03, 0.0, 0.0])


def test_whitening_pools_every_micro_batch_and_rank():
    # tokens 1, 3 (micro-batch 1) and 5 (micro-batch 2; 100 is masked): mean 3,
    # population variance (4 + 0 + 4) / 3, so whitened (-1, 0, 1) * sqrt(3 / 2)
    first, second = torch.tensor([[1.0, 3.0]]), torch.tensor([[5.0, 100.0]])
    masks = [torch.ones(1, 2), torch.tensor([[1.0, 0.0]])]
    out = whiten([first, second], masks)
    k = math.sqrt(1.5)
    assert torch.cat(out, dim=1)[0].tolist() == pytest.approx([-k, 0.0, k, 0.0], abs=1e-6)
    # another rank's moments (sum 3 over 1 token, squares 9) averaged in: 4 tokens 1, 3, 5, 3
    other = [3.0, 9.0, 1.0]
    pooled = whiten([first, second], masks, lambda mine: [(a + b) / 2 for a, b in
                                                          zip(mine, other)])
    std = math.sqrt((4 + 0 + 4 + 0) / 4)
    assert torch.cat(pooled, dim=1)[0].tolist() == pytest.approx(
        [-2 / std, 0.0, 2 / std, 0.0], abs=1e-6)


@pytest.mark.parametrize("ratio, advantage, expected, clipped", [
    (1.5, 2.0, -2.4, 1.0),   # positive advantage: the gain is capped at (1 + eps) A
    (0.5, 2.0, -1.0, 0.0),   # positive advantage, ratio down: the unclipped, worse term
    (1.5, -2.0, 3.0, 0.0),   # negative advantage, ratio up: the unclipped, worse term
    (0.5, -2.0, 1.6, 1.0),   # negative advantage: no profit below (1 - eps)
])
def test_ppo_policy_loss_by_hand(ratio, advantage, expected, clipped):
    logps = torch.full((1, 2), math.log(ratio))
    loss, stats = ppo_policy_loss(logps, torch.zeros(1, 2), torch.full((1, 2), advantage),
                                  torch.ones(1, 2), clip_eps=0.2)
    assert loss.item() == pytest.approx(expected)
    assert (stats["clip_fraction"], stats["ratio_mean"]) == (clipped, pytest.approx(ratio))


def test_ppo_policy_loss_uses_each_tokens_advantage_and_averages_rows_then_tokens():
    # ratio 1 everywhere: loss = -mean over rows of the row's mean advantage
    advantages = torch.tensor([[1.0, 3.0], [-4.0, 7.0]])
    mask = torch.tensor([[1, 1], [1, 0]])
    loss, _ = ppo_policy_loss(torch.zeros(2, 2), torch.zeros(2, 2), advantages, mask)
    assert loss.item() == pytest.approx(-((1 + 3) / 2 + -4) / 2)


@pytest.mark.parametrize("value, expected", [
    (1.0, 0.5 * 0.3 ** 2),  # moved +0.5 to the return: clipped at 0.7, whose error 0.3 counts
    (0.6, 0.5 * 0.4 ** 2),  # within the clip range: the plain squared error
    (0.0, 0.5 * 1.0 ** 2),  # moved away from the return: the larger, unclipped error counts
])
def test_ppo_value_loss_by_hand(value, expected):
    # old value 0.5, return 1.0, value_clip 0.2
    loss, stats = ppo_value_loss(torch.tensor([[value]]), torch.tensor([[0.5]]),
                                 torch.tensor([[1.0]]), torch.ones(1, 1), value_clip=0.2)
    assert loss.item() == pytest.approx(expected)
    assert stats["value_clip_fraction"] == (1.0 if value == 1.0 else 0.0)
