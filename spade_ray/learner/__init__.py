"""Learner stage: preference (DPO/IPO) and group policy-gradient (GRPO) updates of the policy.

Public API: `Learner` (plain torch or DeepSpeed engine, LoRA by default), `CompletionGroup`
(GRPO's input), the pure-torch losses, and `LearnerActor` / `LearnerGroup` (its data-parallel
ranks) in spade_ray.learner.actor (imports Ray). The learner takes PreferencePairs from
spade_ray.records and gives merged weights back.
"""

from spade_ray.learner.algorithms import CompletionGroup
from spade_ray.learner.learner import Learner
from spade_ray.learner.losses import dpo_loss, group_advantages, grpo_loss

__all__ = ["CompletionGroup", "Learner", "dpo_loss", "group_advantages", "grpo_loss"]
