"""`LearnerActor`: the Learner in a Ray actor; `LearnerGroup`: its data-parallel ranks as one.

The actor is thin on purpose: every method is the Learner's, so the learner is tested without
Ray and the actor only adds the process boundary. One rank: Ray restarts a dead learner
(max_restarts=-1) with its initial weights; the loop resumes it from the last checkpoint with
`load_checkpoint`. Calls are not retried (max_task_retries=0): an update is not idempotent (it
advances the step and the buffer).

Several ranks (DeepSpeed, one actor per placement-group bundle): the group sets each actor's
distributed environment (rank 0's node address and a free port on it, RANK, WORLD_SIZE;
LOCAL_RANK 0 because Ray shows each actor only its own GPUs), sends every update, checkpoint
save and load to all ranks, and asks rank 0 alone for what is the same on every rank (merged
weights, the held-out log-prob, the step). A rank that dies leaves the others blocked in a
collective, so nothing is restarted (max_restarts=0): the call fails, the run stops, and
re-running it resumes from the last accepted checkpoint.
Why not Ray Train's TorchTrainer, which also sets up the ranks' process group: it runs one
training function to completion, while the loop needs long-lived ranks that take an update, a
checkpoint or a weights request between rounds (OpenRLHF and veRL group their actors by hand
for the same reason).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import ray
import torch
from ray.util.placement_group import PlacementGroup
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from spade_ray.learner.learner import Learner
from spade_ray.records import CompletionGroup, Demonstration, LearnerParams, PreferencePair


@ray.remote(max_restarts=-1, max_task_retries=0)
class LearnerActor:
    def __init__(self, model_path: str, params: LearnerParams) -> None:
        # torch's thread count follows OMP_NUM_THREADS, which Ray sets to this actor's whole
        # CPUs (1 when num_cpus is unset or < 1; ray/_private/utils.py): give it num_cpus.
        self.learner = Learner(model_path, params)

    def update(self, items: Sequence[PreferencePair] | Sequence[CompletionGroup],
               min_version: int | None = None) -> dict[str, float] | None:
        return self.learner.update(items, min_version)

    def sft(self, demonstrations: Sequence[Demonstration], epochs: int, lr_scale: float,
            seed: int) -> dict[str, float]:
        return self.learner.sft(demonstrations, epochs, lr_scale, seed)

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


@ray.remote(num_cpus=0)
def _rendezvous() -> tuple[str, int]:
    """Rank 0's node address and a free port on it (run on rank 0's bundle)."""
    from spade_ray.learner.engines import free_port

    return ray.util.get_node_ip_address(), free_port()


class LearnerGroup:
    """The learner's ranks, one LearnerActor per bundle; methods return what the Learner's do.

    Methods that return an ObjectRef (merged weights, the held-out log-prob) let the caller pass
    it on or overlap it with other work, as with an actor handle.
    """

    def __init__(self, actors: list[Any]) -> None:
        self.actors = actors

    @classmethod
    def start(cls, placement_group: PlacementGroup, bundles: Sequence[int], cpus: float,
              gpus: int, model_path: str, params: LearnerParams) -> LearnerGroup:
        def on(index: int) -> PlacementGroupSchedulingStrategy:
            return PlacementGroupSchedulingStrategy(placement_group,
                                                    placement_group_bundle_index=index)

        if len(bundles) == 1:
            return cls([LearnerActor.options(scheduling_strategy=on(bundles[0]), num_cpus=cpus,
                                             num_gpus=gpus).remote(model_path, params)])
        address, port = ray.get(_rendezvous.options(scheduling_strategy=on(bundles[0])).remote())
        env = {"MASTER_ADDR": address, "MASTER_PORT": str(port),
               "WORLD_SIZE": str(len(bundles)), "LOCAL_RANK": "0", "LOCAL_SIZE": "1"}
        return cls([LearnerActor.options(
            scheduling_strategy=on(index), num_cpus=cpus, num_gpus=gpus, max_restarts=0,
            runtime_env={"env_vars": {**env, "RANK": str(rank)}},
        ).remote(model_path, params) for rank, index in enumerate(bundles)])

    def update(self, items: Sequence[PreferencePair] | Sequence[CompletionGroup],
               min_version: int | None = None) -> dict[str, float] | None:
        """The update on every rank; the stats (averaged over the ranks)."""
        return self.wait(self.start_update(items, min_version))[0]

    def start_update(self, items: Sequence[PreferencePair] | Sequence[CompletionGroup],
                     min_version: int | None = None) -> list[ray.ObjectRef]:
        """The update sent to every rank, not waited for: `wait` gives its stats (the loop
        overlaps it with generation, loop.overlap). Learner.update's `min_version`."""
        batch = ray.put(list(items))  # one copy for all ranks
        return [actor.update.remote(batch, min_version) for actor in self.actors]

    def sft(self, demonstrations: Sequence[Demonstration], epochs: int, lr_scale: float,
            seed: int) -> dict[str, float]:
        """Supervised fine-tuning on every rank (Learner.sft); the stats."""
        batch = ray.put(list(demonstrations))
        return self._all(lambda actor: actor.sft.remote(batch, epochs, lr_scale, seed))[0]

    def mean_token_logp(self, texts: Sequence[tuple[str, str]]) -> ray.ObjectRef:
        return self.actors[0].mean_token_logp.remote(list(texts))

    def policy_state_dict(self) -> ray.ObjectRef:
        return self.actors[0].policy_state_dict.remote()

    def save_checkpoint(self, directory: str, merged: bool = False) -> str:
        return self._all(lambda actor: actor.save_checkpoint.remote(directory, merged))[0]

    def load_checkpoint(self, directory: str) -> int:
        return self._all(lambda actor: actor.load_checkpoint.remote(directory))[0]

    def step(self) -> int:
        return ray.get(self.actors[0].step.remote())

    def _all(self, call: Callable[[Any], ray.ObjectRef]) -> list[Any]:
        """`call(actor)` on every rank, in rank order (`wait`)."""
        return self.wait([call(a) for a in self.actors])

    @staticmethod
    def wait(refs: list[ray.ObjectRef]) -> list[Any]:
        """The ranks' results, in rank order; the first failure is raised at once (the other
        ranks may be blocked in a collective it never joins)."""
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            ray.get(ready[0])
        return ray.get(refs)

    def kill(self) -> None:
        for actor in self.actors:
            ray.kill(actor, no_restart=True)
