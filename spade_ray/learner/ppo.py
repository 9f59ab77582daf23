"""PPO with a learned critic on CompletionGroups: GAE over each completion's tokens, the sandbox
score as the reward at its last token, clipped policy and value losses, several epochs a batch.

Behind the learner's Algorithm seam (algorithms.py): `reference` gives the frozen reference's
per-token log-probs; `prepare`, once per batch before its first epoch, runs the policy and the
critic without gradients for the old log-probs and old values, turns each row's score (partial
credit as the evaluator gives it) into per-token rewards, runs GAE and whitens the advantages
over the whole batch (every micro-batch, every rank); each of the `epochs` optimizer steps then
takes `loss` over the same micro-batches against those frozen terms (Schulman et al. 2017,
"Proximal Policy Optimization Algorithms", Algorithm 1; the RLHF form of Ouyang et al. 2022).
The rows of a group are independent episodes here: the group only batches them (GRPO's group
baseline is the critic's job in PPO).

KL to the reference, `kl_mode`: "reward" (the default) subtracts kl_coef * (log pi_old - log
pi_ref) from every token's reward, InstructGPT's form and OpenRLHF's and TRL's PPO default: the
critic then learns the KL-regularised return and GAE assigns the penalty to the tokens that
incur it. "loss" adds kl_coef times the k3 estimate of KL(pi || pi_ref) to the loss (GRPO's
form): the rewards stay the sandbox's alone and the penalty follows the current policy through
the epochs instead of the one that sampled.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from torch import Tensor

from spade_ray.learner.algorithms import EncodedItem, MicroBatch, Model, per_token_reference
from spade_ray.learner.critic import policy_and_values
from spade_ray.learner.logprobs import CausalLM, encode
from spade_ray.learner.losses import (
    gae,
    k3_kl,
    ppo_policy_loss,
    ppo_value_loss,
    sequence_mean,
    token_mean,
    token_rewards,
    whiten,
)
from spade_ray.records import CompletionGroup, Critic, KLMode


@dataclasses.dataclass(frozen=True)
class PPOTerms:
    """A micro-batch's terms frozen before the first epoch, each [B, T] over completion tokens."""

    mask: Tensor
    old_logps: Tensor
    old_values: Tensor
    ref_logps: Tensor
    advantages: Tensor  # whitened
    returns: Tensor  # the critic's targets: raw advantages + old values


@dataclasses.dataclass(frozen=True)
class PPO:
    tokenizer: Any
    max_length: int
    critic: Critic = Critic.LORA
    epochs: int = 2
    clip_eps: float = 0.2
    value_clip: float = 0.2
    vf_coef: float = 0.1
    kl_coef: float = 0.05
    kl_mode: KLMode = KLMode.REWARD
    gamma: float = 1.0
    gae_lambda: float = 0.95

    def encode(self, item: CompletionGroup) -> EncodedItem:
        rows = tuple(encode(self.tokenizer, item.prompt, c, self.max_length)
                     for c in item.completions)
        return EncodedItem(rows, tuple(float(r) for r in item.rewards))

    reference = per_token_reference

    def prepare(self, policy: CausalLM, batches: Sequence[MicroBatch],
                references: Sequence[Tensor],
                mean_over_ranks: Callable[[list[float]], list[float]]) -> list[PPOTerms]:
        terms = [self._rollout(policy, b, r) for b, r in zip(batches, references, strict=True)]
        advantages = whiten([t.advantages for t in terms], [t.mask for t in terms],
                            mean_over_ranks)
        return [dataclasses.replace(t, advantages=a) for t, a in zip(terms, advantages)]

    def _rollout(self, policy: CausalLM, batch: MicroBatch, ref_logps: Tensor) -> PPOTerms:
        logps, values, mask = policy_and_values(policy, batch.tokens, self.critic)
        kl = logps - ref_logps if self.kl_mode is KLMode.REWARD else None
        rewards = token_rewards(batch.values, mask, kl, self.kl_coef)
        advantages, returns = gae(rewards, values, mask, self.gamma, self.gae_lambda)
        return PPOTerms(mask, logps.detach(), values.detach(), ref_logps, advantages, returns)

    def loss(self, model: Model, batch: MicroBatch, terms: PPOTerms
             ) -> tuple[Tensor, dict[str, float]]:
        model = model if isinstance(model, CausalLM) else CausalLM(model)
        logps, values, mask = policy_and_values(model, batch.tokens, self.critic)
        policy_loss, stats = ppo_policy_loss(logps, terms.old_logps, terms.advantages, mask,
                                             self.clip_eps)
        value_loss, value_stats = ppo_value_loss(values, terms.old_values, terms.returns, mask,
                                                 self.value_clip)
        kl = k3_kl(logps, terms.ref_logps)
        loss = policy_loss + self.vf_coef * value_loss
        if self.kl_mode is KLMode.LOSS:
            loss = loss + self.kl_coef * sequence_mean(kl, mask)
        return loss, {"loss": loss.item(), **stats, **value_stats, "kl": token_mean(kl, mask),
                      "return_mean": token_mean(terms.returns, mask)}
