"""Learner stage: preference (DPO/IPO), group policy-gradient (GRPO) and PPO (with a critic)
updates of the policy.

Public API: `Learner` (plain torch or DeepSpeed engine, LoRA by default), built from a
`LearnerParams`; `CompletionGroup` (GRPO's and PPO's input; both records live in
spade_ray.records); the pure-torch losses; and `LearnerActor` / `LearnerGroup` (its
data-parallel ranks) in spade_ray.learner.actor (imports Ray). The learner takes
PreferencePairs or CompletionGroups and gives merged weights back.
"""

from spade_ray.learner.learner import Learner
from spade_ray.learner.losses import (
    dpo_loss,
    gae,
    group_advantages,
    grpo_loss,
    ppo_policy_loss,
    ppo_value_loss,
)
from spade_ray.records import CompletionGroup, LearnerParams

__all__ = ["CompletionGroup", "Learner", "LearnerParams", "dpo_loss", "gae", "group_advantages",
           "grpo_loss", "ppo_policy_loss", "ppo_value_loss"]
