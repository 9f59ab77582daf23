"""`LearnerActor`: the Learner in a Ray actor, on the placement-group bundle cluster.py gives it.

Thin on purpose: every method is the Learner's, so the learner is tested without Ray and the
actor only adds the process boundary. Ray restarts a dead learner (max_restarts=-1) with its
initial weights; the loop resumes it from the last checkpoint with `load_checkpoint`. Calls are
not retried (max_task_retries=0): an update is not idempotent (it advances the step and the
buffer).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import ray
import torch

from spade_ray.learner.algorithms import CompletionGroup
from spade_ray.learner.learner import Learner
from spade_ray.records import PreferencePair


@ray.remote(max_restarts=-1, max_task_retries=0)
class LearnerActor:
    def __init__(self, model_path: str, learner_kwargs: dict[str, Any]) -> None:
        # torch's thread count follows OMP_NUM_THREADS, which Ray sets to this actor's whole
        # CPUs (1 when num_cpus is unset or < 1; ray/_private/utils.py): give it num_cpus.
        self.learner = Learner(model_path, **learner_kwargs)

    def dpo_update(self, pairs: Sequence[PreferencePair]) -> dict[str, float] | None:
        return self.learner.dpo_update(pairs)

    def grpo_update(self, groups: Sequence[CompletionGroup]) -> dict[str, float] | None:
        return self.learner.grpo_update(groups)

    def mean_token_logp(self, texts: Sequence[tuple[str, str]]) -> float:
        return self.learner.mean_token_logp(texts)

    def policy_state_dict(self) -> dict[str, torch.Tensor]:
        return self.learner.policy_state_dict()

    def save_checkpoint(self, directory: str, merged: bool = False) -> str:
        return str(self.learner.save_checkpoint(directory, merged=merged))

    def load_checkpoint(self, directory: str) -> int:
        self.learner.load_checkpoint(directory)
        return self.learner.step

    def step(self) -> int:
        return self.learner.step

    def buffered(self) -> int:
        return self.learner.buffered

    def pid(self) -> int:
        return os.getpid()
