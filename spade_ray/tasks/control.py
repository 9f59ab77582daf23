"""Co-evolution control: keep new tasks in the solver's zone of proximal development, keep them
spread over topics, and notice when generator and solver collapse into an easy corner.

Pure functions over what the rounds measured; loop.py applies the verdicts (the generator's
prompts, the replayed tasks, the trainer's rollback) and records them with their evidence.

- Difficulty (`next_level`): a level in -max..+max moves one step per round towards the band
  (default 30-70% pass rate, the seed's figure): above the band it rises (harder), below it
  falls. Four levers act on it: the few-shot programs are the known tasks whose measured
  pass rate is closest to the level's target (`target_pass_rate`); every program in the
  generator prompt, theirs and the one asked for, carries a difficulty label
  (`difficulty_label`: a base model continues a labelled document, so the label is the
  instruction it can follow; the asked-for one is never easier than `label_floor`'s); the
  families whose tasks the solver passes at about the
  target rate get more of the round's prompts (`family_weights`); and, on the solver's side,
  codegen and repair prompts show more of a task's examples below level 0, fewer above it
  (`solver_hints`, off unless `hint_step` > 0: the task stays the same, its statement says
  more). bench/solver_pass_rate.py --hints measures the last.
- Diversity: prompting.topic_schedule gives each topic an even quota per round, rotated, and
  skips a topic already over `max_topic_share` fair shares of the admitted tasks until the
  others catch up (forced switching). Exact and near-duplicates are rejected at admission
  (tasks/diversity.py); `task_diversity` is the round's figure.
- Dynamic sampling (`learnable`, off by default): solver items of tasks the solver always or
  never solves are kept from the learner (DAPO, Yu et al. 2025), so an update spends itself
  where the solver can still move.
- Collapse (`collapse_evidence`, `alarm`): evidence of the failure modes the seed names
  (sections 5.3-5.5): the generator repeats itself (duplicate share), its tasks resemble each
  other (task diversity), the solver passes nearly everything (too easy), the candidates are
  alike, the new-task pass rate jumps while validation stays flat (collusion). Two kinds in one
  round, or one kind in two rounds running, is an alarm.

Non-goals: an embedding model for paraphrased tasks (none ships offline; the 5-gram shingles of
diversity.py are exact where MinHash would approximate them, and cheap at a few hundred tasks).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence

from spade_ray.records import PreferencePair, Role, Task
from spade_ray.tasks.diversity import similarity

LABELS = ("very hard", "hard", "medium", "easy", "very easy")  # by pass rate, low to high


@dataclasses.dataclass(frozen=True)
class ControlConfig:
    """loop.control in the config."""

    band_low: float = 0.3  # new-task pass rate the generator aims at (seed: 30-70%)
    band_high: float = 0.7
    max_level: int = 2
    exemplars_by_difficulty: bool = True  # few-shot programs chosen by measured pass rate
    families_by_difficulty: bool = True  # more prompts for the families nearest the target
    difficulty_labels: bool = True  # label the programs in the generator prompt
    # the easiest level whose label the generator is asked for: below it the asked-for task
    # keeps this level's label ("medium" at 0) while the exemplars follow the level down.
    # bench/generator_admission.py --level, 48 outputs each: the "very easy" prompts of level
    # -2 (where a run whose solver passes nothing sits) admitted 5/48, "medium" 12/48 (more
    # outputs missing a section, more constant outputs). -max_level: the label follows the level.
    label_floor: int = 0
    # the hint lever: codegen and repair prompts show a task's visible examples at level 0,
    # `hint_step` more per level below it (easier), as many fewer per level above it (harder);
    # 0 turns it off (families.shown_examples never shows more than a task's most_shown)
    hint_step: int = 0
    max_topic_share: float = 2.0  # a topic over this many fair shares of the archive is skipped
    collapse_detection: bool = True
    rollback: bool = True  # on an alarm, serve the last good weights again (with a learner)
    inject_hard: int = 4  # hardest seed tasks replayed in the round after an alarm
    # DAPO's dynamic sampling: the learner gets no solver items of tasks every candidate
    # passed or every candidate failed (they are still recorded)
    dynamic_sampling: bool = False
    # evidence thresholds
    max_duplicate_share: float = 0.5  # generator outputs rejected as (near-)duplicates
    min_task_diversity: float = 0.5  # 1 - mean pairwise similarity of the round's new tasks
    too_easy_pass_rate: float = 0.9
    min_candidate_diversity: float = 0.4
    collusion_jump: float = 0.3  # new-task pass rate rise with validation not rising

    def __post_init__(self) -> None:
        if not 0 <= self.band_low < self.band_high <= 1:
            raise ValueError(f"control band must satisfy 0 <= band_low < band_high <= 1, got "
                             f"{self.band_low}..{self.band_high}")
        if not -self.max_level <= self.label_floor <= self.max_level:
            raise ValueError(f"control.label_floor must be a level in -max_level..max_level "
                             f"(-{self.max_level}..{self.max_level}), got {self.label_floor}")
        if self.max_level < 0 or self.inject_hard < 0 or self.hint_step < 0 \
                or self.max_topic_share < 1:
            raise ValueError("control: max_level, inject_hard and hint_step must be >= 0 and "
                             f"max_topic_share >= 1, got {self.max_level}, {self.inject_hard}, "
                             f"{self.hint_step}, {self.max_topic_share}")


@dataclasses.dataclass(frozen=True)
class Guidance:
    """What the controller tells the generator's prompt this round."""

    pass_rates: Mapping[str, float] = dataclasses.field(default_factory=dict)  # by task id
    target: float | None = None  # the exemplars' pass rate (None: exemplars at random)
    difficulty: str | None = None  # the asked-for task's label (None: no labels)


@dataclasses.dataclass(frozen=True)
class RoundSignals:
    """What one round measured that the controller and the collapse detector read."""

    proposed: int  # generator outputs
    duplicates: int  # of those, rejected as duplicate or near_duplicate
    new_task_pass_rate: float | None  # None when nothing was rated
    rated: int  # candidates on new tasks with a verdict (what the pass rate is a fraction of)
    task_diversity: float | None  # None: fewer than two new tasks
    candidate_diversity: float
    validation_pass_at_1: float | None


def next_level(level: int, signals: RoundSignals, config: ControlConfig) -> int:
    """One step towards the band: harder above it, easier below it, unchanged inside it or
    when nothing was rated."""
    if signals.rated == 0:
        return level
    if signals.new_task_pass_rate > config.band_high:
        return min(level + 1, config.max_level)
    if signals.new_task_pass_rate < config.band_low:
        return max(level - 1, -config.max_level)
    return level


def target_pass_rate(level: int, config: ControlConfig) -> float:
    """The pass rate the level's exemplars should have: the band's middle at level 0, its
    edges at -1 (easier) and +1 (harder), half a band past them at +-2 (clamped to 0..1)."""
    middle = (config.band_low + config.band_high) / 2
    half = (config.band_high - config.band_low) / 2
    return min(1.0, max(0.0, middle - level * half))


def family_weights(families: Sequence[str], tasks: Sequence[Task],
                   pass_rates: Mapping[str, float], target: float) -> list[float]:
    """A weight per family: 1 / (0.1 + |its tasks' mean measured pass rate - target|), so the
    families the solver passes at about the target rate get more of the round's prompts (an
    unmeasured family counts as 0.5); the 0.1 keeps every family in the schedule."""
    rates: dict[str, list[float]] = {}
    for task in tasks:
        if task.task_id in pass_rates:
            rates.setdefault(str(task.family), []).append(pass_rates[task.task_id])
    means = {f: sum(r) / len(r) for f, r in rates.items()}
    return [1 / (0.1 + abs(means.get(str(f), 0.5) - target)) for f in families]


def solver_hints(level: int, visible: int, config: ControlConfig) -> int | None:
    """The examples codegen and repair prompts show at `level`: `visible` (admission's count)
    at level 0, `hint_step` more per level below it, as many fewer per level above it, none at
    the least; None (each task's visible ones) with the lever off."""
    if config.hint_step == 0:
        return None
    return max(0, visible - level * config.hint_step)


def difficulty_label(pass_rate: float | None) -> str:
    """A task's difficulty in words from its measured pass rate (unknown: medium)."""
    if pass_rate is None:
        return "medium"
    return LABELS[min(len(LABELS) - 1, int(pass_rate * len(LABELS)))]


def level_label(level: int, config: ControlConfig) -> str:
    """The label of the task the generator is asked for at `level`, never easier than
    `label_floor`'s."""
    return difficulty_label(target_pass_rate(max(level, config.label_floor), config))


def rank_exemplars(programs: Sequence[Task], topic: str, target: float | None,
                   pass_rates: Mapping[str, float], jitter: Sequence[float]) -> list[Task]:
    """`programs` in the order a prompt should take them: the topic's first, then (with a
    target) the measured pass rate closest to it (an unmeasured one counts as 0.5), ties
    broken by `jitter` (one random number per program)."""
    def key(item: tuple[Task, float]) -> tuple[bool, float]:
        task, noise = item
        distance = 0.0 if target is None else abs(pass_rates.get(task.task_id, 0.5) - target)
        return task.topic != topic, distance + noise * 1e-3
    return [t for t, _ in sorted(zip(programs, jitter), key=key)]


def task_diversity(tasks: Sequence[Task]) -> float | None:
    """1 - the mean pairwise similarity (diversity.similarity) of `tasks`; None below two."""
    pairs = list(itertools.combinations(tasks, 2))
    if not pairs:
        return None
    return 1 - sum(similarity(a, b) for a, b in pairs) / len(pairs)


def collapse_evidence(history: Sequence[RoundSignals], config: ControlConfig) -> tuple[str, ...]:
    """The evidence of collapse in the last round of `history` (earlier rounds give the
    trend), each as 'kind: figures'."""
    now = history[-1]
    found = []
    if now.proposed and now.duplicates / now.proposed >= config.max_duplicate_share:
        found.append(f"repetition: {now.duplicates}/{now.proposed} outputs were duplicates")
    if now.task_diversity is not None and now.task_diversity < config.min_task_diversity:
        found.append(f"similar_tasks: task diversity {now.task_diversity:.2f}")
    if now.rated >= 4 and now.new_task_pass_rate >= config.too_easy_pass_rate:
        found.append(f"too_easy: new-task pass rate {now.new_task_pass_rate:.2f} "
                     f"over {now.rated} candidates")
    if now.rated >= 4 and now.candidate_diversity < config.min_candidate_diversity:
        found.append(f"alike_candidates: candidate diversity {now.candidate_diversity:.2f}")
    if len(history) > 1:
        before = history[-2]
        flat = (now.validation_pass_at_1 is None or before.validation_pass_at_1 is None
                or now.validation_pass_at_1 <= before.validation_pass_at_1)
        rise = (now.new_task_pass_rate - before.new_task_pass_rate
                if before.rated and now.rated else 0.0)
        if rise >= config.collusion_jump and flat:
            found.append(f"collusion: new-task pass rate +{rise:.2f} while validation did "
                         "not rise")
    return tuple(found)


def alarm(evidence: Sequence[str], previous: Sequence[str]) -> bool:
    """Two kinds of evidence in one round, or one kind in two rounds running."""
    kinds = {e.split(":")[0] for e in evidence}
    return len(kinds) >= 2 or bool(kinds & {e.split(":")[0] for e in previous})


def hardest(tasks: Sequence[Task], pass_rates: Mapping[str, float], count: int) -> list[Task]:
    """The `count` tasks with the lowest measured pass rate (unmeasured ones after them)."""
    order = sorted(tasks, key=lambda t: pass_rates.get(t.task_id, 1.0))
    return order[:count]


def learnable(pairs: Sequence[PreferencePair], pass_rates: Mapping[str, float]
              ) -> list[PreferencePair]:
    """`pairs` less the solver's on tasks whose measured pass rate is 0 or 1; the generator's
    are all kept (their reward is what the pass rate says). GRPO needs no such filter: a group
    whose rewards are all equal has no advantage to learn from."""
    return [p for p in pairs if p.role is not Role.SOLVER
            or 0 < pass_rates.get(p.task_id, 0.5) < 1]
