"""Preference and policy-gradient losses, pure torch: no model, no tokenizer, no engine.

Scope: DPO (sigmoid, conservative/label-smoothed, IPO), the NLL term RPO adds to it, GRPO's
group-relative advantages and its clipped, KL-regularised per-token objective, and PPO's pieces:
per-token rewards, GAE, advantage whitening, the clipped policy and value losses. Every function
takes log-probabilities (or values) the caller computed (spade_ray.learner.logprobs, critic) and
returns a scalar loss to minimise (plus detached statistics) or the tensors a loss takes.
Non-goals: length normalisation choices beyond the ones documented per function.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from spade_ray.records.rounds import DPO_LOSS_TYPES


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
    surrogate, ratio, was_clipped = clipped_surrogate(
        logps, old_logps, advantages.unsqueeze(1).expand_as(logps), clip_eps)
    kl = k3_kl(logps, ref_logps)
    loss = sequence_mean(-(surrogate - kl_coef * kl), mask)
    stats = {
        "loss": loss.item(),
        "kl": token_mean(kl, mask),
        "clip_fraction": token_mean(was_clipped, mask),
        "ratio_mean": token_mean(ratio, mask),
    }
    return loss, stats


def clipped_surrogate(logps: Tensor, old_logps: Tensor, advantages: Tensor, clip_eps: float
                      ) -> tuple[Tensor, Tensor, Tensor]:
    """PPO's clipped surrogate per token, min(rho A, clip(rho, 1 - eps, 1 + eps) A) with
    rho = pi / pi_old (Schulman et al. 2017, "Proximal Policy Optimization Algorithms", eq. 7),
    all [B, T]; with rho (detached) and a 0/1 tensor of the tokens where min() took the clipped
    term (their gradient is 0: TRL's and OpenRLHF's clip fraction)."""
    ratio = torch.exp(logps - old_logps)
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps)
    surrogate = torch.minimum(ratio * advantages, clipped * advantages)
    was_clipped = (clipped * advantages < ratio * advantages).to(logps.dtype)
    return surrogate, ratio.detach(), was_clipped


def k3_kl(logps: Tensor, ref_logps: Tensor) -> Tensor:
    """Per-token KL(pi || pi_ref) by the unbiased, always-positive k3 estimator (Schulman 2020,
    "Approximating KL divergence"): pi_ref / pi - log(pi_ref / pi) - 1."""
    log_ref_ratio = ref_logps - logps
    return torch.exp(log_ref_ratio) - log_ref_ratio - 1.0


def sequence_mean(per_token: Tensor, mask: Tensor) -> Tensor:
    """Mean over each row's masked tokens, then over the rows (a row with no token counts 0)."""
    mask = mask.to(per_token.dtype)
    return ((per_token * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)).mean()


def token_mean(per_token: Tensor, mask: Tensor) -> float:
    """Mean over every masked token of the batch, detached (for statistics)."""
    mask = mask.to(per_token.dtype)
    return ((per_token.detach() * mask).sum() / mask.sum().clamp(min=1.0)).item()


def token_rewards(scores: Tensor, mask: Tensor, kl: Tensor | None = None,
                  kl_coef: float = 0.0) -> Tensor:
    """PPO's per-token rewards [B, T]: each row's score (the sandbox's, partial credit as the
    evaluator gives it) on its last completion token, and with `kl` [B, T] (log pi_old - log
    pi_ref per token) a penalty -kl_coef * kl on every token (Ouyang et al. 2022, "Training
    language models to follow instructions with human feedback", eq. 2, spread per token as
    OpenRLHF and TRL's PPO trainers do). 0 on masked positions."""
    if scores.shape != mask.shape[:1]:
        raise ValueError(f"scores must be [B] = {tuple(mask.shape[:1])}, got "
                         f"{tuple(scores.shape)}")
    mask = mask.to(torch.float32)
    positions = torch.arange(mask.shape[1], device=mask.device, dtype=torch.float32)
    last = (mask * (positions + 1)).argmax(dim=1)  # each row's last completion token
    rewards = torch.zeros_like(mask)
    rewards[torch.arange(mask.shape[0], device=mask.device), last] = scores.to(torch.float32)
    if kl is not None:
        _same_shape(kl, mask)
        rewards = rewards - kl_coef * kl
    return rewards * mask


def gae(rewards: Tensor, values: Tensor, mask: Tensor, gamma: float, lam: float
        ) -> tuple[Tensor, Tensor]:
    """Generalized advantage estimation over each row's completion tokens (Schulman et al.
    2016, "High-Dimensional Continuous Control Using Generalized Advantage Estimation", eq. 16):

        delta_t = r_t + gamma V_{t+1} - V_t   (V after the last token = 0: the episode ends),
        A_t = delta_t + gamma lambda A_{t+1},   returns R_t = A_t + V_t (the critic's target).

    rewards, values and mask are [B, T]; a row's tokens are contiguous, masked positions count
    neither reward nor value. Returns (advantages, returns), 0 on masked positions.
    """
    _same_shape(rewards, values, mask)
    if not (0.0 <= gamma <= 1.0 and 0.0 <= lam <= 1.0):
        raise ValueError(f"GAE needs gamma and lambda in [0, 1], got {gamma}, {lam}")
    mask = mask.to(torch.float32)
    rewards, values = rewards.float() * mask, values.float() * mask
    advantage = next_value = torch.zeros_like(values[:, 0])
    columns = []
    for t in reversed(range(values.shape[1])):
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        advantage = delta + gamma * lam * advantage
        columns.append(advantage)
        next_value = values[:, t]
    advantages = torch.stack(columns[::-1], dim=1) * mask
    return advantages, advantages + values


def whiten(advantages: Sequence[Tensor], masks: Sequence[Tensor],
           mean_over_ranks: Callable[[list[float]], list[float]] = lambda v: v,
           eps: float = 1e-8) -> list[Tensor]:
    """Advantages shifted and scaled to mean 0 and standard deviation 1 over every completion
    token of an optimizer step: all its micro-batches and, through `mean_over_ranks` (which
    averages each value over the data-parallel ranks), all ranks, so W ranks whiten as one rank
    with the whole batch would. The population std over tokens, as OpenRLHF's experience maker
    normalises advantages. 0 on masked positions."""
    moments = [0.0, 0.0, 0.0]  # sum, sum of squares, token count
    for a, m in zip(advantages, masks, strict=True):
        m = m.to(a.dtype)
        moments = [moments[0] + float((a * m).sum()), moments[1] + float((a * a * m).sum()),
                   moments[2] + float(m.sum())]
    total, squares, count = mean_over_ranks(moments)
    if count == 0:
        return [torch.zeros_like(a) for a in advantages]
    mean = total / count
    std = max(squares / count - mean * mean, 0.0) ** 0.5
    return [(a - mean) / (std + eps) * m.to(a.dtype) for a, m in zip(advantages, masks)]


def ppo_policy_loss(logps: Tensor, old_logps: Tensor, advantages: Tensor, mask: Tensor,
                    clip_eps: float = 0.2) -> tuple[Tensor, dict[str, float]]:
    """PPO's clipped policy loss with per-token advantages, all [B, T]: -min(rho A, clip(rho)
    A) averaged over each row's tokens, then over rows (as grpo_loss)."""
    _same_shape(logps, old_logps, advantages, mask)
    if clip_eps <= 0:
        raise ValueError(f"need clip_eps > 0, got {clip_eps}")
    surrogate, ratio, was_clipped = clipped_surrogate(logps, old_logps, advantages, clip_eps)
    loss = sequence_mean(-surrogate, mask)
    return loss, {"policy_loss": loss.item(), "clip_fraction": token_mean(was_clipped, mask),
                  "ratio_mean": token_mean(ratio, mask)}


def ppo_value_loss(values: Tensor, old_values: Tensor, returns: Tensor, mask: Tensor,
                   value_clip: float = 0.2) -> tuple[Tensor, dict[str, float]]:
    """PPO's clipped value loss, all [B, T] (the PPO2 baselines form; TRL's cliprange_value,
    OpenRLHF's value_clip): with V_clip = V_old + clip(V - V_old, -c, c),

        L = 1/2 max((V - R)^2, (V_clip - R)^2),

    averaged over each row's tokens, then over rows. The critic moves at most c per update from
    the values the advantages were computed with, unless moving further lowers the loss anyway.
    """
    _same_shape(values, old_values, returns, mask)
    if value_clip <= 0:
        raise ValueError(f"need value_clip > 0, got {value_clip}")
    clipped = old_values + torch.clamp(values - old_values, -value_clip, value_clip)
    unclipped_loss, clipped_loss = (values - returns) ** 2, (clipped - returns) ** 2
    loss = 0.5 * sequence_mean(torch.maximum(unclipped_loss, clipped_loss), mask)
    was_clipped = (clipped_loss > unclipped_loss).to(values.dtype)
    return loss, {"value_loss": loss.item(), "value_clip_fraction": token_mean(was_clipped, mask),
                  "value_mean": token_mean(values, mask)}


def _same_shape(*tensors: Tensor) -> None:
    shapes = {tuple(t.shape) for t in tensors}
    if len(shapes) != 1:
        raise ValueError(f"log-prob tensors must share one shape, got {sorted(shapes)}")
