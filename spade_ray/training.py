"""The learn stage of a round (wiring layer): pairs or groups in, a gated weight update out.

After a round's pairs are built, `Trainer.update` feeds them to the learner, which buffers them
and, once it holds enough, updates the policy; the merged weights go to the rollout engines (one
object-store copy on CPU) under the next version. The loop then runs the fixed validation
subset once, on whatever the engines serve, and `Trainer.gate` judges the update: one that
lowers pass@1 by more than `pass_at_1_tolerance` below the served weights' is rejected: the
engines get the previous weights back (under a newer version: versions only increase) and the
learner is restored from its last accepted checkpoint. A second gate signal needs no sampling:
the policy's mean log-prob per token of the validation problems' reference solutions (held out:
never trained on). An update that puts it more than `heldout_logp_tolerance` nats below the
best that any accepted weights of the run had (the base weights' included) is rejected too. It
moves with every update, so it catches a harmful update also where pass@1 is 0 and cannot fall
(a weak model, a small subset). It is anchored at the best, not at the weights just before:
measured in a 10-round cpu_gemma_long run gated against the previous weights, 9 accepted DPO
updates each lowered it by 0.005-0.023 and together by 0.09, and HumanEval got worse (README:
what a long run shows). The best figure is carried in RoundState, so a resumed run keeps its
anchor. Accepted updates are checkpointed (learner state
+ the version), which is what a resumed run restores (RoundState); so is a learner that only
buffered new items (the same weights, a longer buffer), or a resumed run would never train them.

With loop.overlap the update is started (`start_update`) when the next round begins and
finished (`finish_update`: waited for, then published) once that round has generated: the
engines keep serving the gated weights meanwhile, so every rollout comes from weights the gate
kept. `max_staleness` bounds how old the trained-on data may be: the learner drops items whose
weights version is more than that below the version it updates from (see the README).

`warm_start`: the optional SFT on the seed pool before round 0 goes through the same gate.

GPU clusters: the same flow; `RoleEngines.update_weights` is the seam where an NCCL broadcast
into vLLM engines replaces the object-store copy (see rollout/vllm_backend.py).
"""

from __future__ import annotations

import dataclasses
import math
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import ray

from spade_ray.config import SftWarmup
from spade_ray.evaluation.humaneval import ValidationResult
from spade_ray.learner.actor import LearnerGroup
from spade_ray.records import (
    CompletionGroup,
    Demonstration,
    GateSignal,
    LearnOutcome,
    PreferencePair,
    Role,
    RoundState,
    TrainAlgorithm,
    UpdateStatus,
    WarmStart,
)
from spade_ray.rollout.actor import RoleEngines
from spade_ray.tasks.demonstrations import seed_demonstrations

if TYPE_CHECKING:
    from spade_ray.loop import Run


@dataclasses.dataclass(frozen=True)
class Gate:
    """How far a validation signal may fall before an update is rejected (None: not gated):
    pass@1 below the served weights', the held-out log-prob below the run's best."""

    pass_at_1_tolerance: float
    heldout_logp_tolerance: float | None = None


@dataclasses.dataclass(frozen=True)
class Published:
    """An update the engines serve now, waiting for the gate."""

    loss: float | None
    previous: ray.ObjectRef  # the weights served before it (for a rollback)
    heldout_logp: ray.ObjectRef | None  # measured on the learner while the engines validate
    stats: tuple[tuple[str, float], ...] = ()  # the algorithm's other figures (learner_stats)
    busy_s: float = 0.0  # the learner's own time in the update
    stale: int = 0  # items the learner dropped as older than the staleness bound


@dataclasses.dataclass(frozen=True)
class Training:
    """An update the learner ranks are running (start_update), not yet published."""

    refs: tuple[ray.ObjectRef, ...]


@dataclasses.dataclass
class Trainer:
    """The learner and what the loop needs to gate, roll back and resume updates."""

    algorithm: TrainAlgorithm
    gate_config: Gate
    learner: LearnerGroup
    engines: list[RoleEngines]  # every distinct set of engines serving the policy
    checkpoints: Path
    served: ray.ObjectRef  # the weights the engines serve now (merged, HF names)
    accepted_checkpoint: str
    version: int = 0  # weights version the engines serve
    heldout: tuple[tuple[str, str], ...] = ()  # (prompt, reference solution), never trained on
    # the best mean token log-prob on `heldout` that accepted weights of this run had: the
    # log-prob gate's anchor
    heldout_logp: float | None = None
    served_pass_at_1: float | None = None  # validation pass@1 of the served weights
    # items written by weights more than this many versions below the served ones are dropped
    # by the learner (None: none are)
    max_staleness: int | None = None
    # the learner took items since its state was last saved (an update that only buffers them
    # saves it, so that a resumed run still has them)
    unsaved: bool = dataclasses.field(default=False, init=False, repr=False)

    @classmethod
    def start(cls, algorithm: TrainAlgorithm, gate: Gate, learner: LearnerGroup,
              engines: list[RoleEngines], run_dir: Path,
              heldout: Sequence[tuple[str, str]] = (), max_staleness: int | None = None
              ) -> Trainer:
        """`heldout`: the log-prob gate's texts (that gate is off without them)."""
        checkpoints = run_dir / "checkpoints"
        # Step 0 is the first accepted state: a rejected first update rolls back to it.
        base = learner.save_checkpoint(str(checkpoints / "step_000000"))
        trainer = cls(algorithm, gate, learner, engines, checkpoints,
                      learner.policy_state_dict(), base, heldout=tuple(heldout),
                      max_staleness=max_staleness)
        trainer.heldout_logp = trainer.measure_heldout()
        return trainer

    def resume(self, state: RoundState) -> None:
        """Back to the state a completed round left: learner state and engine weights."""
        self.served_pass_at_1 = state.served_pass_at_1
        if state.learner_checkpoint:
            self.accepted_checkpoint = state.learner_checkpoint
            self._load(self.accepted_checkpoint)
            self.heldout_logp = self.measure_heldout()
            self._raise_anchor(state.best_heldout_logp)
            self.version = state.weights_version
            if self.version:
                self.served = self.learner.policy_state_dict()
                self._publish(self.served, self.version)

    def carry(self, state: RoundState) -> RoundState:
        """`state` with what a resumed run needs of the trainer."""
        return dataclasses.replace(state, learner_checkpoint=self.accepted_checkpoint,
                                   weights_version=self.version,
                                   served_pass_at_1=self.served_pass_at_1,
                                   best_heldout_logp=self.heldout_logp)

    def update(self, items: Sequence[PreferencePair] | Sequence[CompletionGroup]
               ) -> Published | None:
        """Feed the round's items; when the learner updated, publish its weights to the
        engines (the gate decides whether they stay)."""
        return self.finish_update(self.start_update(items))

    def start_update(self, items: Sequence[PreferencePair] | Sequence[CompletionGroup]
                     ) -> Training:
        """Send the items to the learner ranks and return at once; the engines go on serving
        what they serve until `finish_update`."""
        min_version = None if self.max_staleness is None else self.version - self.max_staleness
        self.unsaved = self.unsaved or bool(items)
        return Training(tuple(self.learner.start_update(items, min_version)))

    def finish_update(self, training: Training) -> Published | None:
        """Wait for the update; when the learner trained, publish its weights to the engines
        (the gate decides whether they stay)."""
        stats = self.learner.wait(list(training.refs))[0]
        if stats is None:
            return None
        previous, self.served = self.served, self.learner.policy_state_dict()
        self.version += 1
        self._publish(self.served, self.version)
        return Published(stats.get("loss"), previous, self._heldout_pending(),
                         algorithm_stats(stats), stats.get("wall_s", 0.0),
                         int(stats.get("stale", 0)))

    def warm_start(self, demonstrations: Sequence[Demonstration], epochs: int, lr_scale: float,
                   gate: Gate, seed: int) -> tuple[Published, dict[str, float]]:
        """Supervised fine-tuning on `demonstrations` (the SFT warm start before round 0),
        published like an update; `gate(published, validation, gate)` then keeps it or serves
        the base weights again. Its own `gate`: imitation moves the held-out log-prob more
        than a preference update does. The learner's stats come back too."""
        if self.heldout_logp is None:  # the rounds' gate may leave the log-prob signal off
            self.heldout_logp = self.measure_heldout(gate)
        stats = self.learner.sft(demonstrations, epochs, lr_scale, seed)
        previous, self.served = self.served, self.learner.policy_state_dict()
        self.version += 1
        self._publish(self.served, self.version)
        return Published(stats.get("loss"), previous, self._heldout_pending(gate),
                         algorithm_stats(stats)), stats

    def gate(self, published: Published | None, validation: ValidationResult | None,
             config: Gate | None = None) -> LearnOutcome:
        """Keep or roll back the published update, given the validation of what is served
        (judged by `config`, the rounds' gate by default)."""
        measured = validation.pass_at_k[1] if validation is not None else None
        if published is None:  # the served weights did not change: a fresh baseline
            self.served_pass_at_1 = measured
            step = self.learner.step()
            if self.unsaved:  # the same weights, more items buffered: a resume must have them
                self._save(f"step_{step:06d}_buffered_{uuid.uuid4().hex[:8]}")
            return LearnOutcome(UpdateStatus.BUFFERING, step)
        logp = None if published.heldout_logp is None else ray.get(published.heldout_logp)
        rejected_by = self._fallen(measured, logp, config or self.gate_config)
        if rejected_by:
            self._reject(published.previous)
        else:
            self._accept(measured, logp)
        return LearnOutcome(UpdateStatus.REJECTED if rejected_by else UpdateStatus.ACCEPTED,
                            self.learner.step(), published.loss, measured, logp, rejected_by,
                            published.stats, published.busy_s, published.stale)

    def roll_back(self, checkpoint: str, version: int, served_pass_at_1: float | None
                  ) -> int | None:
        """Serve the weights of an earlier accepted `checkpoint` (they served as `version`)
        again, under a new version, and make them the pass@1 gate's baseline (the log-prob
        gate's stays the run's best); the version rolled back to, or None when they are what
        is served now."""
        if checkpoint == self.accepted_checkpoint:
            return None
        self._load(checkpoint)
        self.accepted_checkpoint = checkpoint
        self.served = self.learner.policy_state_dict()
        self.version += 1
        self._publish(self.served, self.version)
        self.served_pass_at_1 = served_pass_at_1
        return version

    def measure_heldout(self, gate: Gate | None = None) -> float | None:
        """The learner's current mean token log-prob on `heldout` (None when `gate`, the
        rounds' gate by default, leaves that signal off)."""
        pending = self._heldout_pending(gate)
        return None if pending is None else ray.get(pending)

    def _heldout_pending(self, gate: Gate | None = None) -> ray.ObjectRef | None:
        if not self.heldout or (gate or self.gate_config).heldout_logp_tolerance is None:
            return None
        return self.learner.mean_token_logp(self.heldout)

    def _fallen(self, pass_at_1: float | None, logp: float | None, gate: Gate
                ) -> tuple[GateSignal, ...]:
        fallen = []
        if (pass_at_1 is not None and self.served_pass_at_1 is not None
                and pass_at_1 < self.served_pass_at_1 - gate.pass_at_1_tolerance):
            fallen.append(GateSignal.PASS_AT_1)
        if (logp is not None and self.heldout_logp is not None
                and gate.heldout_logp_tolerance is not None
                and logp < self.heldout_logp - gate.heldout_logp_tolerance):
            fallen.append(GateSignal.HELDOUT_LOGP)
        return tuple(fallen)

    def _accept(self, pass_at_1: float | None, heldout_logp: float | None) -> None:
        self.served_pass_at_1 = pass_at_1
        self._raise_anchor(heldout_logp)
        self._save(f"step_{self.learner.step():06d}")

    def _raise_anchor(self, heldout_logp: float | None) -> None:
        """The log-prob gate's anchor: the best accepted figure so far."""
        if heldout_logp is not None and (self.heldout_logp is None
                                         or heldout_logp > self.heldout_logp):
            self.heldout_logp = heldout_logp

    def _save(self, name: str) -> None:
        """Checkpoint the learner as the accepted state."""
        self.accepted_checkpoint = self.learner.save_checkpoint(str(self.checkpoints / name))
        self.unsaved = False

    def _reject(self, previous: ray.ObjectRef) -> None:
        self._load(self.accepted_checkpoint)
        self.served = previous
        self.version += 1  # the old weights under a new version: versions only increase
        self._publish(previous, self.version)

    def _load(self, checkpoint: str) -> None:
        self.learner.load_checkpoint(checkpoint)
        self.unsaved = False

    def _publish(self, weights: ray.ObjectRef, version: int) -> None:
        for engines in self.engines:
            engines.update_weights(weights, version)


# The learner's bookkeeping (step counts, sizes, time) and the loss, which has a field of its own.
BOOKKEEPING = frozenset({"loss", "step", "steps", "items", "buffered", "wall_s", "stale"})


def algorithm_stats(stats: dict[str, float]) -> tuple[tuple[str, float], ...]:
    """The learner's figures of the algorithm itself, as LearnOutcome.learner_stats."""
    return tuple(sorted((k, float(v)) for k, v in stats.items()
                        if k not in BOOKKEEPING and math.isfinite(v)))


def warm_start(run: Run, trainer: Trainer, config: SftWarmup, state: RoundState) -> RoundState:
    """The SFT warm start of a new run (learner.sft_warmup; seed 7.3: SFT first, then DPO): the
    seed pool's demonstrations (tasks/demonstrations.py) trained on before round 0, served,
    validated and gated like an update; the state round 0 starts from, carrying what it did
    (round 0's metrics and its own printed line). A run killed before round 0 completes starts
    again from the base weights and warm-starts again (nothing of it was recorded as
    complete)."""
    started = time.monotonic()
    templates = {**run.solving.templates, "generator": run.generation.template}
    demonstrations = seed_demonstrations(run.seeds, templates, run.loop.few_shot,
                                         run.loop.generator_few_shot,
                                         [Role(r) for r in config.roles], run.loop.seed)
    gate = Gate(config.gate_tolerance, config.gate_logp_tolerance)
    published, stats = trainer.warm_start(demonstrations, config.epochs, config.lr_scale, gate,
                                          run.loop.seed)
    logp_before = trainer.heldout_logp  # the base weights' (warm_start measures it first)
    outcome = trainer.gate(published, run.validate(), gate)
    record = WarmStart(
        demonstrations=len(demonstrations),
        generator_demonstrations=sum(d.role is Role.GENERATOR for d in demonstrations),
        epochs=config.epochs, steps=int(stats["steps"]), loss=stats.get("loss"),
        update=outcome.update, pass_at_1_before=state.served_pass_at_1,
        pass_at_1_after=outcome.gate_pass_at_1, heldout_logp_before=logp_before,
        heldout_logp_after=outcome.gate_heldout_logp,
        rejected_by=outcome.rejected_by, wall_s=time.monotonic() - started)
    print(warm_start_line(record), flush=True)
    return dataclasses.replace(trainer.carry(state), warm_start=record)


def warm_start_line(w: WarmStart) -> str:
    def fmt(value: float | None, digits: int) -> str:
        return "-" if value is None else f"{value:.{digits}f}"

    verdict = str(w.update) + (f" ({', '.join(map(str, w.rejected_by))} fell)"
                               if w.rejected_by else "")
    return (f"sft warm start: {w.demonstrations} demonstrations ({w.generator_demonstrations} "
            f"generator), {w.epochs} epoch(s), {w.steps} steps, loss {fmt(w.loss, 3)}, "
            f"{verdict}: val pass@1 {fmt(w.pass_at_1_before, 3)} -> "
            f"{fmt(w.pass_at_1_after, 3)}, held-out logp {fmt(w.heldout_logp_before, 4)} -> "
            f"{fmt(w.heldout_logp_after, 4)}, {w.wall_s:.0f} s")
