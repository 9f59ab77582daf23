"""The records of learning and of a round: how the learner trains (LearnerParams and its
enums), what an update and the SFT warm start did (LearnOutcome, WarmStart, the gate's
UpdateStatus and GateSignal), what a round did (RoundMetrics) and what it hands the next round
or a resumed run (RoundState)."""

from __future__ import annotations

import dataclasses
import enum
import math
import operator

from spade_ray.records.items import CompletionGroup, PreferencePair, Task


class TrainAlgorithm(enum.StrEnum):
    """What the learner optimises: preference pairs (DPO) or rewarded samples (GRPO, critic-free;
    PPO, with a learned critic)."""

    DPO = "dpo"
    GRPO = "grpo"
    PPO = "ppo"

    @property
    def on_groups(self) -> bool:
        """Trains on CompletionGroups (rewarded samples), not on preference pairs."""
        return self is not TrainAlgorithm.DPO


class Critic(enum.StrEnum):
    """PPO's value model (learner/critic.py): its own LoRA adapter on the policy's base, or a
    value head on the policy's trunk."""

    LORA = "lora"
    HEAD = "head"


class KLMode(enum.StrEnum):
    """Where PPO puts the KL to the reference: a per-token reward penalty, or a loss term."""

    REWARD = "reward"
    LOSS = "loss"


class UpdateStatus(enum.StrEnum):
    """What the learn stage did in a round."""

    NONE = "none"  # collect-only run (learner=none)
    BUFFERING = "buffering"  # fewer items than an update needs: kept for the next round
    ACCEPTED = "accepted"
    REJECTED = "rejected"  # the gate rolled the update back (RoundMetrics.rejected_by says why)


class GateSignal(enum.StrEnum):
    """A validation signal that can reject an update (training.py's gate)."""

    PASS_AT_1 = "pass_at_1"
    HELDOUT_LOGP = "heldout_logp"


@dataclasses.dataclass(frozen=True)
class WarmStart:
    """The SFT warm start before round 0 (learner.sft_warmup) and its gate's verdict."""

    demonstrations: int
    generator_demonstrations: int  # of those, the generator's (the rest: the solver's)
    epochs: int
    steps: int
    loss: float | None  # mean NLL per completion token over the steps
    update: UpdateStatus  # accepted, or rejected (the base weights are served again)
    pass_at_1_before: float | None
    pass_at_1_after: float | None
    heldout_logp_before: float | None
    heldout_logp_after: float | None
    rejected_by: tuple[GateSignal, ...] = ()
    wall_s: float = 0.0


@dataclasses.dataclass(frozen=True)
class LearnOutcome:
    """What the learn stage did in a round; its fields are RoundMetrics' learner fields."""

    update: UpdateStatus
    learner_step: int
    learner_loss: float | None = None
    gate_pass_at_1: float | None = None  # validation pass@1 with the update's weights
    # the policy's mean token log-prob on held-out reference solutions after the update
    gate_heldout_logp: float | None = None
    rejected_by: tuple[GateSignal, ...] = ()  # the gate signals that rejected the update
    # the algorithm's other figures, means over the update's steps (DPO's accuracy and margin,
    # PPO's value loss, KL and clip fraction, ...): (name, value), sorted
    learner_stats: tuple[tuple[str, float], ...] = ()
    learner_busy_s: float = 0.0  # the learner's own time in the update (overlapped or not)
    stale_items: int = 0  # items refused as older than loop.max_staleness versions
    trained_round: int | None = None  # the round whose items it trained on (loop.overlap)


@dataclasses.dataclass(frozen=True)
class RoundMetrics:
    """What one self-play round did, for the metrics file, W&B, plots and the summary table."""

    run_id: str
    round: int
    generator_version: int  # the weights that served this round (its update comes after)
    solver_version: int
    # HumanEval subset pass@1 of the weights the engines serve after the round's update (a
    # rejected update's own figure is gate_pass_at_1); None when not measured
    validation_pass_at_1: float | None
    validation_problems: int
    tasks_proposed: int  # generator outputs, parsed or not
    tasks_valid: int
    rejection_reasons: tuple[tuple[str, int], ...]  # (reason, count), most common first
    # fraction of candidates on this round's tasks that passed; None when none was rated (no
    # new task, or only flaky ones): 0.0 there read as a round below the band
    new_task_pass_rate: float | None
    mean_difficulty: float  # 1 - mean pass rate per task
    pairs: int
    candidate_diversity: float  # distinct candidates / candidates
    tokens_generator: int
    tokens_solver: int
    sandbox_cpu_s: float
    stage_s: tuple[tuple[str, float], ...]  # (stage, seconds)
    wall_s: float
    # the learner's fields: a LearnOutcome's (the defaults: a collect-only run)
    update: UpdateStatus = UpdateStatus.NONE
    learner_step: int = 0
    learner_loss: float | None = None
    gate_pass_at_1: float | None = None
    gate_heldout_logp: float | None = None
    rejected_by: tuple[GateSignal, ...] = ()
    learner_stats: tuple[tuple[str, float], ...] = ()  # LearnOutcome.learner_stats
    learner_busy_s: float = 0.0
    stale_items: int = 0
    trained_round: int | None = None
    engine_busy_s: float = 0.0  # time the rollout engines had a request in flight
    # what new_task_pass_rate is a fraction of: the solver's draws on new tasks (a candidate
    # text counts as often as it was drawn: Candidate.draws)
    new_task_candidates: int = 0
    sandbox_reruns: int = 0  # candidates whose execution was re-run after a sandbox_error
    sandbox_errors: int = 0  # candidates still sandbox_error after the re-run (not in pairs)
    hack_suspects: int = 0  # candidates whose check found evidence of probing the grader
    # tasks whose own reference failed their tests beside their candidates (stages.control):
    # kept out of pairs, pass rates and the archive, their generator output rewarded as rejected
    flaky_tasks: int = 0
    # new predict tasks whose candidates split between the right answer and one other
    # (preferences.generator.two_answers): their generator outputs earn no band reward
    two_answer_tasks: int = 0
    pairs_from_generated: int = 0  # solver pairs on tasks generated in this run (not seeds)
    generator_pairs: int = 0  # pairs of the generator role (counted in `pairs` too)
    generator_reward_mean: float | None = None  # over the round's rewarded generator outputs
    family_tasks: tuple[tuple[str, int], ...] = ()  # (family, admitted generated tasks)
    family_pairs: tuple[tuple[str, int], ...] = ()  # (family, solver pairs)
    topic_tasks: tuple[tuple[str, int], ...] = ()  # (topic, admitted generated tasks)
    # co-evolution control (tasks/control.py): the band the new-task pass rate aims at, the
    # difficulty level the generator was asked for (+ harder, - easier), the generator's
    # difficulty (mean 1 - pass rate over this round's generated tasks), their diversity
    # (1 - mean pairwise similarity), the collapse evidence, and what an alarm did
    difficulty_band: tuple[float, ...] = ()
    control_level: int = 0
    solver_hints: int | None = None  # examples codegen/repair prompts showed (None: visible)
    generator_difficulty: float | None = None
    task_diversity: float | None = None
    collapse_evidence: tuple[str, ...] = ()
    collapse_alarm: tuple[str, ...] = ()  # the evidence, when it raised the alarm
    generator_rollback: int | None = None  # the version served again after the alarm
    hard_tasks_injected: int = 0  # hardest seeds replayed because the last round alarmed
    validation_tiers: tuple[tuple[str, float], ...] = ()  # (tier, pass@1) of the served weights
    warm_start: WarmStart | None = None  # round 0 of a run that began with an SFT warm start

    @property
    def valid_task_rate(self) -> float:
        return self.tasks_valid / self.tasks_proposed if self.tasks_proposed else 0.0


DPO_LOSS_TYPES = ("sigmoid", "ipo")  # learner/losses.dpo_loss


@dataclasses.dataclass(frozen=True)
class LearnerParams:
    """How the learner trains (conf/learner/*.yaml `params`): checked when the config is read,
    before any actor is placed. `lora_rank` 0 = full fine-tuning; `bf16` None = where the
    hardware supports it; `deepspeed_config` None = the plain torch engine (a relative path is
    resolved against the repository wherever the actor runs); GRPO and PPO count
    `min_pairs_per_update` and `micro_batch_size` in groups. `clip_eps` and `kl_coef` are GRPO's
    and PPO's; `critic` ... `gae_lambda` are PPO's alone (learner/ppo.py)."""

    algorithm: TrainAlgorithm = TrainAlgorithm.DPO
    lora_rank: int = 16
    lora_alpha: int | None = None
    lr: float = 5e-5
    beta: float = 0.1
    label_smoothing: float = 0.0
    dpo_loss_type: str = "sigmoid"  # or "ipo"
    rpo_alpha: float = 0.0
    clip_eps: float = 0.2
    kl_coef: float = 0.04
    weight_decay: float = 0.0
    warmup_steps: int = 0
    max_grad_norm: float = 1.0
    deepspeed_config: str | None = None
    bf16: bool | None = None
    min_pairs_per_update: int = 8
    micro_batch_size: int = 2
    grad_accum: int = 1
    max_length: int = 1024
    activation_checkpointing: bool = False
    seed: int = 0
    critic: Critic = Critic.LORA
    kl_mode: KLMode = KLMode.REWARD
    ppo_epochs: int = 2
    value_clip: float = 0.2
    vf_coef: float = 0.1
    gamma: float = 1.0
    gae_lambda: float = 0.95

    def __post_init__(self) -> None:
        object.__setattr__(self, "algorithm", TrainAlgorithm(self.algorithm))
        for name, kind in (("critic", Critic), ("kl_mode", KLMode)):
            value = getattr(self, name)
            if value not in tuple(kind):
                raise ValueError(f"learner {name}={value!r}: use one of "
                                 f"{[str(k) for k in kind]}")
            object.__setattr__(self, name, kind(value))
        for name in ("lr", "beta", "max_grad_norm", "clip_eps"):
            _check_number(name, getattr(self, name), above=0.0)
        for name in ("rpo_alpha", "weight_decay", "kl_coef"):
            _check_number(name, getattr(self, name), at_least=0.0)
        # 0.5 flips the preference: conservative DPO's smoothing is the chance the label is wrong
        _check_number("label_smoothing", self.label_smoothing, at_least=0.0, below=0.5)
        if self.dpo_loss_type not in DPO_LOSS_TYPES:
            raise ValueError(f"learner dpo_loss_type={self.dpo_loss_type!r}: use one of "
                             f"{list(DPO_LOSS_TYPES)}")
        for name in ("min_pairs_per_update", "micro_batch_size", "grad_accum", "max_length"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"learner {name} must be an integer >= 1, got {value!r}")
        if not isinstance(self.warmup_steps, int) or self.warmup_steps < 0:
            raise ValueError(f"learner warmup_steps must be an integer >= 0, got "
                             f"{self.warmup_steps!r}")
        if not isinstance(self.lora_rank, int) or self.lora_rank < 0:
            raise ValueError(f"learner lora_rank must be an integer >= 0 (0: full fine-tuning), "
                             f"got {self.lora_rank!r}")
        if self.algorithm is TrainAlgorithm.PPO:
            self._check_ppo()

    def _check_ppo(self) -> None:
        if not isinstance(self.ppo_epochs, int) or self.ppo_epochs < 1:
            raise ValueError(f"learner ppo_epochs must be an integer >= 1, got "
                             f"{self.ppo_epochs!r}")
        for name in ("value_clip", "vf_coef"):
            _check_number(name, getattr(self, name), above=0.0)
        for name in ("gamma", "gae_lambda"):
            _check_number(name, getattr(self, name), at_least=0.0, at_most=1.0)
        if self.critic is Critic.LORA and self.lora_rank == 0:
            raise ValueError("learner critic='lora' is an adapter on the LoRA policy's base; "
                             "with lora_rank=0 (full fine-tuning) use critic='head'")
        if self.critic is Critic.LORA and self.activation_checkpointing:
            raise ValueError("learner critic='lora' with activation_checkpointing: backward "
                             "would recompute the critic's layers under the policy's adapter; "
                             "turn one of them off (critic='head' works with it)")


def _check_number(name: str, value: object, *, above: float | None = None,
                  at_least: float | None = None, below: float | None = None,
                  at_most: float | None = None) -> None:
    """A learner parameter that must be a finite number within the given bounds."""
    bounds = [(sign, bound, holds) for sign, bound, holds in (
        (">", above, operator.gt), (">=", at_least, operator.ge), ("<", below, operator.lt),
        ("<=", at_most, operator.le)) if bound is not None]
    if not (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value) and all(holds(value, b) for _, b, holds in bounds)):
        raise ValueError(f"learner {name} must be a finite number "
                         f"{' and '.join(f'{sign} {b}' for sign, b, _ in bounds)}, got {value!r}")


@dataclasses.dataclass(frozen=True)
class RoundState:
    """What the next round (or a resumed run) carries over from a completed one."""

    archive: tuple[Task, ...] = ()  # generated tasks the generator and solver see again
    # tasks.diversity.normalised_hash of every task this run admitted: one that has left the
    # archive is still a duplicate (red-team pass 10: with archive_size 2, a task written
    # again two rounds later was admitted and rewarded again)
    admitted_hashes: tuple[str, ...] = ()
    replay_cursor: int = 0  # where the next round's replayed tasks start in seeds + archive
    learner_checkpoint: str | None = None  # the last accepted learner state
    weights_version: int = 0  # the version the engines serve
    # validation pass@1 of the served weights: what the next update's gate compares against
    served_pass_at_1: float | None = None
    # the best held-out log-prob of the run's accepted weights: the log-prob gate's anchor
    best_heldout_logp: float | None = None
    # co-evolution control (tasks/control.py): the generator's difficulty level, the last
    # measured pass rate of each known task (task id, rate), the hardest seeds to replay next
    # round after a collapse alarm, and the last state no collapse evidence was seen in
    control_level: int = 0
    task_pass_rates: tuple[tuple[str, float], ...] = ()
    inject: tuple[str, ...] = ()
    good_checkpoint: str | None = None
    good_version: int = 0
    good_pass_at_1: float | None = None
    warm_start: WarmStart | None = None  # what the warm start did, until round 0 records it
    # loop.overlap: the completed round's items, which the next round's update trains on while
    # that round generates (a resumed run trains them again from `learner_checkpoint`)
    pending_pairs: tuple[PreferencePair, ...] = ()
    pending_groups: tuple[CompletionGroup, ...] = ()
