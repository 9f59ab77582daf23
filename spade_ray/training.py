"""The learn stage of a round (wiring layer): pairs or groups in, a gated weight update out.

After a round's pairs are built: the learner buffers them and, once it holds enough, updates
the policy; the merged weights go to the rollout engines (one object-store copy on CPU) under
the next version; the fixed validation subset is re-run with them, and an update that lowers
pass@1 by more than `gate_tolerance` is rejected: the engines get the previous weights back
(under a newer version: versions only increase) and the learner is restored from its last
accepted checkpoint. A second gate signal needs no sampling: the policy's mean log-prob per
token of the validation problems' reference solutions (held out: never trained on). An update
that lowers it by more than `gate_logp_tolerance` nats is rejected too. It moves with every
update, so it catches a harmful update also where pass@1 is 0 and cannot fall (a weak model, a
small subset). Accepted updates are checkpointed (learner state + the version), which is what a
resumed run restores.

GPU clusters: the same flow; `RoleEngines.update_weights` is the seam where an NCCL broadcast
into vLLM engines replaces the object-store copy (see rollout/vllm_backend.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import ray

from spade_ray.config import LearnerConfig
from spade_ray.learner.actor import LearnerGroup
from spade_ray.learner.algorithms import CompletionGroup
from spade_ray.records import PreferencePair
from spade_ray.rollout.actor import RoleEngines


@dataclasses.dataclass
class Trainer:
    """The learner and what the loop needs to gate, roll back and resume updates."""

    config: LearnerConfig
    learner: LearnerGroup
    engines: list[RoleEngines]  # every distinct set of engines serving the policy
    checkpoints: Path
    served: ray.ObjectRef  # the weights the engines serve now (merged, HF names)
    accepted_checkpoint: str
    version: int = 0  # weights version the engines serve
    heldout: tuple[tuple[str, str], ...] = ()  # (prompt, reference solution), never trained on
    heldout_logp: float | None = None  # the accepted policy's mean token log-prob on `heldout`

    @classmethod
    def start(cls, config: LearnerConfig, learner: LearnerGroup, engines: list[RoleEngines],
              run_dir: Path, heldout: Sequence[tuple[str, str]] = ()) -> Trainer:
        """`learner`: built with `learner_kwargs(config)` (Cluster.start_learner);
        `heldout`: the log-prob gate's texts (the gate is off without them or a tolerance)."""
        checkpoints = run_dir / "checkpoints"
        # Step 0 is the first accepted state: a rejected first update rolls back to it.
        base = learner.save_checkpoint(str(checkpoints / "step_000000"))
        trainer = cls(config, learner, engines, checkpoints, learner.policy_state_dict(),
                      base, heldout=tuple(heldout))
        trainer.heldout_logp = trainer.measure_heldout()
        return trainer

    def resume(self, state: dict[str, Any]) -> None:
        """Back to the last accepted update of a resumed run: learner state and engine weights."""
        if state.get("learner_checkpoint"):
            self.accepted_checkpoint = state["learner_checkpoint"]
            self.learner.load_checkpoint(self.accepted_checkpoint)
            self.heldout_logp = self.measure_heldout()
            self.version = state["weights_version"]
            if self.version:
                self.served = self.learner.policy_state_dict()
                self._publish(self.served, self.version)

    def state(self) -> dict[str, Any]:
        return {"learner_checkpoint": self.accepted_checkpoint, "weights_version": self.version}

    def update(self, items: list[PreferencePair] | list[CompletionGroup]) -> dict[str, Any] | None:
        """Feed the round's items; the learner's stats if it updated, else None."""
        return self.learner.update(self.config.name, items)

    def measure_heldout(self) -> float | None:
        """The learner's current mean token log-prob on `heldout` (None when the gate is off)."""
        pending = self._heldout_pending()
        return None if pending is None else ray.get(pending)

    def _heldout_pending(self) -> ray.ObjectRef | None:
        if not self.heldout or self.config.gate_logp_tolerance is None:
            return None
        return self.learner.mean_token_logp(self.heldout)

    def publish_update(self) -> ray.ObjectRef:
        """Send the updated policy to the engines; returns the previous weights (for rollback)."""
        previous, self.served = self.served, self.learner.policy_state_dict()
        self.version += 1
        self._publish(self.served, self.version)
        return previous

    def accept(self, heldout_logp: float | None) -> None:
        self.heldout_logp = heldout_logp
        step = self.learner.step()
        self.accepted_checkpoint = self.learner.save_checkpoint(
            str(self.checkpoints / f"step_{step:06d}"))

    def reject(self, previous: ray.ObjectRef) -> None:
        self.learner.load_checkpoint(self.accepted_checkpoint)
        self.served = previous
        self.version += 1  # the old weights under a new version: versions only increase
        self._publish(previous, self.version)

    def _publish(self, weights: ray.ObjectRef, version: int) -> None:
        for engines in self.engines:
            engines.update_weights(weights, version)


def learner_kwargs(config: LearnerConfig) -> dict[str, Any]:
    """The Learner's constructor arguments from the learner config (a relative deepspeed_config
    is resolved against the repository by learner.engines, wherever the actor runs)."""
    return dict(config.kwargs, min_pairs_per_update=config.min_pairs_per_update,
                algorithm=config.name)


@dataclasses.dataclass(frozen=True)
class LearnOutcome:
    update: str  # "buffering" | "accepted" | "rejected"
    learner_step: int
    learner_loss: float | None = None
    gate_pass_at_1: float | None = None
    gate_heldout_logp: float | None = None
    rejected_by: tuple[str, ...] = ()  # the gate signals that fell: "pass_at_1", "heldout_logp"


def learn(trainer: Trainer, items: list, before_pass_at_1: float | None, validate
          ) -> LearnOutcome:
    """Feed the round's pairs (DPO) or groups (GRPO); gate and publish an update if one ran.
    `validate()` re-runs the fixed validation subset on the engines' current weights."""
    stats = trainer.update(items)
    if stats is None:
        return LearnOutcome("buffering", trainer.learner.step())
    previous = trainer.publish_update()
    pending = trainer._heldout_pending()  # on the learner's CPUs while the engines validate
    gate = validate()
    gate_pass = gate.pass_at_k[1] if gate is not None else None
    before_logp, logp = trainer.heldout_logp, None if pending is None else ray.get(pending)
    rejected_by = []
    if (gate_pass is not None and before_pass_at_1 is not None
            and gate_pass < before_pass_at_1 - trainer.config.gate_tolerance):
        rejected_by.append("pass_at_1")
    if (logp is not None and before_logp is not None
            and logp < before_logp - trainer.config.gate_logp_tolerance):
        rejected_by.append("heldout_logp")
    if rejected_by:
        trainer.reject(previous)
    else:
        trainer.accept(logp)
    return LearnOutcome("rejected" if rejected_by else "accepted",
                        trainer.learner.step(), stats.get("loss"), gate_pass, logp,
                        tuple(rejected_by))


def group_for(prompt: str, programs: list[str], rewards: list[float], task_id: str
              ) -> CompletionGroup | None:
    """A GRPO group from a task's scored candidates (None when fewer than two)."""
    from spade_ray.learner.logprobs import split_program

    if len(programs) < 2:
        return None
    context, _ = split_program(prompt, programs[0])
    return CompletionGroup(prompt=context, completions=tuple(programs),
                           rewards=tuple(rewards), task_id=task_id)
