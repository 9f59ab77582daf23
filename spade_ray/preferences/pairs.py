"""Preference pairs from one task's scored candidates, ordered by the evaluator's `compare`.

Rule: every ordered pair (chosen, rejected) of the task's candidates such that
  * `compare(chosen, rejected) > 0` (the evaluator's rules: value, passed, then efficiency beyond
    its noise margins when both pass), and
  * chosen.value - rejected.value >= `margin`.
So with margin == 0 efficiency-only wins (both pass, one is clearly faster or smaller) are pairs;
with margin > 0 only correctness wins of at least that much are, since an efficiency-only win
has a value difference of 0.

Also excluded: candidates whose score is a sandbox_error (`needs_rerun`: they say nothing about
the code, and the sandbox has already re-run them once), pairs of identical code after
whitespace normalisation (rollout's `normalise`: no signal to learn), and repeats of a
(chosen, rejected) text pair already emitted (duplicated samples would weigh one comparison
several times). Pairs come out in candidate order, deterministically.

chosen / rejected are the candidates' code, as the completion of `prompt`: the prompt the
solver saw, less the signature line both programs start with for a base model
(tasks.split_program), so that prompt + chosen is the text the model wrote, for TRL's
preference format as for our learner (the signature once, not twice). `build_groups` gives a
policy-gradient learner the same candidates as one CompletionGroup, their score values as
rewards. Non-goal: sampling or balancing pairs across tasks.
"""

from __future__ import annotations

from collections.abc import Sequence

# The evaluator's public API (not its internals): pairs must agree with its ranking exactly.
from spade_ray.evaluation import compare, needs_rerun
from spade_ray.records import Candidate, CompletionGroup, PreferencePair, Score, Task
from spade_ray.rollout import normalise
from spade_ray.tasks import split_program


def build_pairs(task: Task, prompt: str, candidates: Sequence[Candidate],
                scores: Sequence[Score], generator_version: int,
                margin: float = 0.0) -> list[PreferencePair]:
    """The preference pairs of one task; `scores[i]` is the score of `candidates[i]`."""
    _validate(task, candidates, scores, margin)
    usable = [(c, s) for c, s in zip(candidates, scores) if not needs_rerun(s)]
    normalised = [normalise(c.code) for c, _ in usable]
    seen: set[tuple[str, str]] = set()
    pairs = []
    for i, (chosen, chosen_score) in enumerate(usable):
        for j, (rejected, rejected_score) in enumerate(usable):
            if i == j or normalised[i] == normalised[j]:
                continue
            if compare(chosen_score, rejected_score) <= 0:
                continue
            if chosen_score.value - rejected_score.value < margin:
                continue
            if (normalised[i], normalised[j]) in seen:
                continue
            seen.add((normalised[i], normalised[j]))
            pairs.append(PreferencePair(
                task_id=task.task_id, prompt=_context(prompt, [chosen.code, rejected.code]),
                chosen=chosen.code, rejected=rejected.code,
                chosen_candidate_id=chosen.candidate_id,
                rejected_candidate_id=rejected.candidate_id,
                chosen_score=chosen_score.value, rejected_score=rejected_score.value,
                solver_version=chosen.solver_version, generator_version=generator_version))
    return pairs


def build_groups(task: Task, prompt: str, candidates: Sequence[Candidate],
                 scores: Sequence[Score]) -> list[CompletionGroup]:
    """The task's GRPO group (none when fewer than two candidates have a verdict): the
    programs as completions of `prompt`'s context (tasks.split_program), the values as rewards,
    each program once per draw that gave it (Candidate.draws). The solver keeps one copy of a
    repeated text, but GRPO's group is the K draws: a text drawn 9 times in 10 counts 9 times
    in the group's mean and std, as in TRL, or the rare text's advantage is overstated."""
    _validate(task, candidates, scores, 0.0)
    usable = [(c, s) for c, s in zip(candidates, scores) if not needs_rerun(s)]
    if len(usable) < 2:
        return []
    context = _context(prompt, [c.code for c, _ in usable])
    drawn = [(c, s) for c, s in usable for _ in range(c.draws)]
    return [CompletionGroup(prompt=context, completions=tuple(c.code for c, _ in drawn),
                            rewards=tuple(s.value for _, s in drawn), task_id=task.task_id,
                            weights_version=min(c.solver_version for c, _ in usable))]


def _context(prompt: str, programs: Sequence[str]) -> str:
    """The context `programs` all complete (tasks.split_program), or the whole prompt when
    they do not all split it alike (one candidate's first line sets no one else's context)."""
    contexts = {split_program(prompt, code)[0] for code in programs}
    return contexts.pop() if len(contexts) == 1 else prompt


def _validate(task: Task, candidates: Sequence[Candidate], scores: Sequence[Score],
              margin: float) -> None:
    if len(candidates) != len(scores):
        raise ValueError(f"build_pairs got {len(candidates)} candidates but {len(scores)} scores")
    if not 0.0 <= margin <= 1.0:
        raise ValueError(f"margin is a difference of test fractions, in [0, 1]; got {margin}")
    for c, s in zip(candidates, scores):
        if c.task_id != task.task_id:
            raise ValueError(f"candidate {c.candidate_id} belongs to task {c.task_id}, not "
                             f"{task.task_id}")
        if s.candidate_id != c.candidate_id:
            raise ValueError(f"score for {s.candidate_id} is paired with candidate "
                             f"{c.candidate_id}: scores must be in candidate order")
    versions = sorted({c.solver_version for c in candidates})
    if len(versions) > 1:
        # One PreferencePair has one solver_version: mixing weights in a task is an upstream bug.
        raise ValueError(f"candidates of task {task.task_id} come from several solver versions "
                         f"{versions}: build pairs per version")
