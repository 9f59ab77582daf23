"""Preference and policy-gradient losses, pure torch: no model, no tokenizer, no engine.

Scope: DPO (sigmoid, conservative/label-smoothed, IPO), the NLL term RPO adds to it, GRPO's
group-relative advantages and its clipped, KL-regularised per-token objective. Every function
takes log-probabilities the caller computed (spade_ray.learner.logprobs) and returns a scalar
loss to minimise (plus detached statistics). Non-goals: PPO with a learned critic (GAE
advantages would replace `group_advantages`; `grpo_loss` is already PPO's clipped surrogate),
length normalisation choices beyond the ones documented per function.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

DPO_LOSS_TYPES = ("sigmoid", "ipo")


def dpo_loss(policy_chosen_logps: Tensor, policy_rejected_logps: Tensor,
             ref_chosen_logps: Tensor, ref_rejected_logps: Tensor, beta: float,
             label_smoothing: float = 0.0, loss_type: str = "sigmoid"
             ) -> tuple[Tensor, dict[str, float]]:
    """Mean DPO loss over a batch of pairs; each input is [B] (one log-prob per sequence).

    With h = (log pi(y_w|x) - log pi_ref(y_w|x)) - (log pi(y_l|x) - log pi_ref(y_l|x)):

    * "sigmoid" (Rafailov et al. 2023, "Direct Preference Optimization", eq. 7):
        L = -log sigmoid(beta * h).
      With label_smoothing eps > 0, the conservative DPO of Mitchell 2023 ("A note on DPO with
      noisy preferences"), as in TRL's DPOTrainer: labels are flipped with probability eps,
        L = -(1 - eps) log sigmoid(beta * h) - eps log sigmoid(-beta * h).
    * "ipo" (Azar et al. 2023, "A General Theoretical Paradigm to Understand Learning from Human
      Preferences", eq. 17): L = (h - 1 / (2 beta))^2. The paper's h uses log-likelihoods; TRL
      (and our learner) pass length-averaged log-probs for IPO, which the caller decides.

    Stats: the implicit rewards beta * (log pi - log pi_ref) of chosen and rejected, their
    margin, and the fraction of pairs whose chosen reward is higher.
    """
    if loss_type not in DPO_LOSS_TYPES:
        raise ValueError(f"unknown DPO loss_type {loss_type!r}: choose one of {DPO_LOSS_TYPES}")
    if beta <= 0:
        raise ValueError(f"DPO beta must be > 0, got {beta}")
    if not 0.0 <= label_smoothing < 0.5:
        raise ValueError(f"label_smoothing is a label-flip probability in [0, 0.5), got "
                         f"{label_smoothing}")
    if label_smoothing and loss_type != "sigmoid":
        raise ValueError("label_smoothing applies to the sigmoid loss only (IPO has no labels "
                         "to smooth)")
    _same_shape(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps,
                ref_rejected_logps)
    chosen_logratios = policy_chosen_logps - ref_chosen_logps
    rejected_logratios = policy_rejected_logps - ref_rejected_logps
    h = chosen_logratios - rejected_logratios
    if loss_type == "sigmoid":
        losses = (-(1.0 - label_smoothing) * F.logsigmoid(beta * h)
                  - label_smoothing * F.logsigmoid(-beta * h))
    else:
        losses = (h - 1.0 / (2.0 * beta)) ** 2
    chosen_rewards = (beta * chosen_logratios).detach()
    rejected_rewards = (beta * rejected_logratios).detach()
    stats = {
        "loss": losses.mean().item(),
        "rewards_chosen": chosen_rewards.mean().item(),
        "rewards_rejected": rejected_rewards.mean().item(),
        "rewards_margin": (chosen_rewards - rejected_rewards).mean().item(),
        "rewards_accuracy": (chosen_rewards > rejected_rewards).float().mean().item(),
        "logratio_margin": h.detach().mean().item(),  # margin / beta: comparable across betas
    }
    return losses.mean(), stats


def nll_per_token(completion_logps: Tensor, completion_tokens: Tensor) -> Tensor:
    """The completions' negative log-likelihood per token, pooled over the batch: -sum log pi /
    tokens for summed log-probs [B] and token counts [B].

    Added to DPO with a weight alpha on the chosen completions it is RPO (Pang et al. 2024,
    "Iterative Reasoning Preference Optimization", eq. 1; TRL's `rpo_alpha`): plain DPO may lower
    the likelihood of the chosen completions along with the rejected ones, and the NLL term
    holds it up."""
    _same_shape(completion_logps, completion_tokens)
    return -completion_logps.sum() / completion_tokens.sum().clamp(min=1)


def group_advantages(rewards: Tensor, eps: float = 1e-4) -> Tensor:
    """GRPO's outcome-supervised advantages, per group: A_ik = (r_ik - mean_k r_i) / (std_k r_i
    + eps) for rewards [G, K] (Shao et al. 2024, "DeepSeekMath", sec. 4.1.2).

    std is the sample (unbiased) standard deviation, as in TRL's GRPOTrainer; eps (TRL's 1e-4)
    keeps a group whose K rewards are all equal at advantage 0 instead of 0/0.
    """
    if rewards.dim() != 2 or rewards.shape[1] < 2:
        raise ValueError(f"group_advantages needs rewards of shape [groups, K] with K >= 2 (one "
                         f"candidate has no group to be relative to), got {tuple(rewards.shape)}")
    mean = rewards.mean(dim=1, keepdim=True)
    std = rewards.std(dim=1, keepdim=True, unbiased=True)
    return (rewards - mean) / (std + eps)


def grpo_loss(logps: Tensor, old_logps: Tensor, ref_logps: Tensor, advantages: Tensor,
              mask: Tensor, clip_eps: float = 0.2, kl_coef: float = 0.04
              ) -> tuple[Tensor, dict[str, float]]:
    """GRPO's objective, negated to a loss (Shao et al. 2024, "DeepSeekMath", eq. 3):

        J = 1/G sum_i 1/|o_i| sum_t [ min(rho_it A_i, clip(rho_it, 1 - eps, 1 + eps) A_i)
                                      - kl_coef * KL_it ],    rho_it = pi(o_it) / pi_old(o_it),

    with the per-token KL to the reference by the unbiased, always-positive k3 estimator
    (ibid. eq. 4; Schulman 2020, "Approximating KL divergence"):
        KL_it = pi_ref / pi - log(pi_ref / pi) - 1.

    Shapes: logps, old_logps, ref_logps and mask are [B, T] (per completion token; mask is 1 on
    completion tokens), advantages is [B] (one per sequence). old_logps are the sampling policy's
    (for a single update on fresh samples: logps.detach(), so rho = 1 but its gradient is not 0).
    The 1/|o_i| per-sequence mean is the paper's; a sequence with no tokens contributes 0.
    """
    _same_shape(logps, old_logps, ref_logps, mask)
    if advantages.shape != logps.shape[:1]:
        raise ValueError(f"advantages must be [B] = {tuple(logps.shape[:1])}, got "
                         f"{tuple(advantages.shape)}")
    if clip_eps <= 0 or kl_coef < 0:
        raise ValueError(f"need clip_eps > 0 and kl_coef >= 0, got {clip_eps}, {kl_coef}")
    mask = mask.to(logps.dtype)
    ratio = torch.exp(logps - old_logps)
    adv = advantages.unsqueeze(1)
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps)
    surrogate = torch.minimum(ratio * adv, clipped * adv)
    log_ref_ratio = ref_logps - logps
    kl = torch.exp(log_ref_ratio) - log_ref_ratio - 1.0
    per_token = -(surrogate - kl_coef * kl)
    tokens = mask.sum(dim=1)
    per_sequence = (per_token * mask).sum(dim=1) / tokens.clamp(min=1.0)
    loss = per_sequence.mean()
    total = mask.sum().clamp(min=1.0)
    was_clipped = ((ratio * adv) != (clipped * adv)).to(logps.dtype)
    stats = {
        "loss": loss.item(),
        "kl": ((kl * mask).sum() / total).item(),
        "clip_fraction": ((was_clipped * mask).sum() / total).item(),
        "ratio_mean": ((ratio * mask).sum() / total).item(),
    }
    return loss, stats


def _same_shape(*tensors: Tensor) -> None:
    shapes = {tuple(t.shape) for t in tensors}
    if len(shapes) != 1:
        raise ValueError(f"log-prob tensors must share one shape, got {sorted(shapes)}")
