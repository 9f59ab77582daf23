"""The stages of a self-play round, as loop.py calls them: typed values in, typed values out.

Part of the wiring layer (with loop.py, recorder.py, streaming.py, training.py, cluster.py,
app.py, cli.py and config.py): the only modules that combine the stage packages. A stage
records nothing and counts nothing; it returns a value that the loop hands to the Recorder.

    Generation.generate  topics -> GeneratedChunk (tasks parsed and validated by execution)
    Solving.solve        tasks  -> Solutions (K distinct candidate programs per task)
    execute              Solutions -> checks, one CheckResult per candidate (any Executor)
    score                Solutions + checks -> Scored (scores, preference pairs, GRPO groups)
    validate             the solver's pass@1 on the fixed validation set
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Sequence

from spade_ray.evaluation import humaneval, needs_rerun, score_many
from spade_ray.execution import Executor
from spade_ray.preferences import build_groups, build_pairs
from spade_ray.records import (
    Candidate,
    CheckResult,
    CompletionGroup,
    Limits,
    PreferencePair,
    SamplingParams,
    Score,
    Task,
)
from spade_ray.rollout.actor import RoleEngines
from spade_ray.rollout.sampling import TokenBudgetExceeded, TokenMeter, sample_distinct
from spade_ray.tasks import candidate_program
from spade_ray.tasks.diversity import most_similar
from spade_ray.tasks.format import TaskFormatError, parse_task
from spade_ray.tasks.prompting import generator_prompt, solver_prompt
from spade_ray.tasks.templates import PromptTemplate
from spade_ray.tasks.validate import Verdict, validate_tasks
from spade_ray.tracking import GeneratorInput


class CapReached(RuntimeError):
    """A per-round cap (tokens, sandbox CPU, wall time, tasks) stops new work this round."""


@dataclasses.dataclass(frozen=True)
class GeneratedChunk:
    """One chunk of topics through the generator and task validation."""

    topics: tuple[str, ...]
    inputs: tuple[GeneratorInput, ...]  # every generator output, parsed or not (index unset)
    verdicts: tuple[Verdict, ...]  # one per parsed task
    unparsed: tuple[str, ...]  # the reasons the other outputs were not tasks
    generate_s: float
    validate_s: float

    @property
    def valid_tasks(self) -> list[Task]:
        return [v.task for v in self.verdicts if v.valid]


@dataclasses.dataclass(frozen=True)
class Generation:
    """The generator step: prompts from topics and few-shot tasks, parsing, validation."""

    engines: RoleEngines
    template: PromptTemplate
    sampling: SamplingParams
    few_shot: int
    max_similarity: float  # a new task this close to a known one is a near-duplicate
    limits: Limits

    def generate(self, topics: Sequence[str], known: Sequence[Task], rng: random.Random,
                 meter: TokenMeter, executor: Executor) -> GeneratedChunk:
        prompts = [generator_prompt(self.template, t, list(known), self.few_shot, rng)
                   for t in topics]
        started = time.monotonic()
        sample = _sample(self.engines, prompts, self.sampling, meter, resample_rounds=1)
        generate_s = time.monotonic() - started
        seen, version = list(known), self.engines.weights_version
        inputs, parsed, unparsed = [], [], []
        for topic, prompt, group in zip(topics, prompts, sample.completions):
            for completion in group:
                outcome, task = self._parse(completion.text, topic, version, seen)
                inputs.append(GeneratorInput(index=0, prompt=prompt, completion=completion,
                                             outcome=outcome,
                                             task_id=task.task_id if task else None))
                if task is None:
                    unparsed.append(outcome)
                else:
                    parsed.append(task)
                    seen.append(task)
        started = time.monotonic()
        verdicts = validate_tasks(parsed, executor) if parsed else []
        return GeneratedChunk(tuple(topics), tuple(inputs), tuple(verdicts), tuple(unparsed),
                              generate_s, time.monotonic() - started)

    def _parse(self, text: str, topic: str, version: int, known: list[Task]
               ) -> tuple[str, Task | None]:
        try:
            task = parse_task(text, topic, self.limits, generator_version=version)
        except TaskFormatError as e:
            return e.reason, None
        _, similarity = most_similar(task, known)
        if similarity >= self.max_similarity:
            return "near_duplicate", None
        return "parsed", task


@dataclasses.dataclass(frozen=True)
class Solutions:
    """K distinct candidate programs per task, with the prompts they answered."""

    tasks: tuple[Task, ...]
    prompts: tuple[str, ...]  # prompts[i] is the prompt of tasks[i]
    candidates: tuple[Candidate, ...]  # grouped by task, in task order
    sampled: int  # completions generated, duplicates included
    solve_s: float


@dataclasses.dataclass(frozen=True)
class Solving:
    """The solver step: few-shot prompts, K distinct completions, the programs to check."""

    engines: RoleEngines
    template: PromptTemplate
    sampling: SamplingParams  # n = K candidates per task
    few_shot: int
    examples: tuple[Task, ...]  # solved tasks shown in the prompt

    def solve(self, tasks: Sequence[Task], round_index: int, meter: TokenMeter) -> Solutions:
        prompts = [solver_prompt(self.template, t, list(self.examples), self.few_shot)
                   for t in tasks]
        started = time.monotonic()
        sample = _sample(self.engines, prompts, self.sampling, meter)
        candidates = [Candidate(candidate_id=f"{task.task_id}/r{round_index}/{k}",
                                task_id=task.task_id,
                                code=candidate_program(task, c.text, self.template.chat),
                                solver_version=c.weights_version, prompt_tokens=c.prompt_tokens,
                                completion_tokens=c.completion_tokens)
                      for task, group in zip(tasks, sample.completions)
                      for k, c in enumerate(group)]
        return Solutions(tuple(tasks), tuple(prompts), tuple(candidates), sample.sampled,
                         time.monotonic() - started)


def _sample(engines: RoleEngines, prompts: list[str], sampling: SamplingParams,
            meter: TokenMeter, resample_rounds: int = 2):
    """sample_distinct on a role's engines (prompts lost with a dead engine are re-issued)."""
    try:
        return sample_distinct(lambda p, s: engines.generate(p, s).completions, prompts,
                               sampling, meter, resample_rounds=resample_rounds)
    except TokenBudgetExceeded as e:
        raise CapReached(str(e)) from e


def execute(executor: Executor, solutions: Solutions, limits: Limits) -> list[CheckResult]:
    """Every candidate against its task's tests. A sandbox_error the executor could not cure
    by its own re-run stays in the results: it is recorded and kept out of the pairs."""
    tests = {t.task_id: t.tests for t in solutions.tasks}
    return executor.check_many([c.code for c in solutions.candidates],
                               [tests[c.task_id] for c in solutions.candidates], limits=limits)


@dataclasses.dataclass(frozen=True)
class Scored:
    """The evaluator's verdicts on one batch and the training items built from them."""

    scores: tuple[Score, ...]  # scores[i] is the score of solutions.candidates[i]
    pairs: tuple[PreferencePair, ...]
    groups: tuple[CompletionGroup, ...]  # built only when the learner trains on groups
    pass_rates: tuple[float, ...]  # per task with rated candidates: the fraction that passed
    rated: int  # candidates with a verdict (not sandbox_error)
    passed: int  # of those, how many passed every test


def score(solutions: Solutions, checks: Sequence[CheckResult], pair_margin: float,
          with_groups: bool) -> Scored:
    scores = score_many(list(solutions.candidates), list(checks))
    pairs: list[PreferencePair] = []
    groups: list[CompletionGroup] = []
    rates: list[float] = []
    rated = [s for s in scores if not needs_rerun(s)]
    for task, prompt in zip(solutions.tasks, solutions.prompts):
        mine = [(c, s) for c, s in zip(solutions.candidates, scores) if c.task_id == task.task_id]
        verdicts = [s for _, s in mine if not needs_rerun(s)]
        if verdicts:
            rates.append(sum(s.passed for s in verdicts) / len(verdicts))
        pairs += build_pairs(task, prompt, [c for c, _ in mine], [s for _, s in mine],
                             task.generator_version, margin=pair_margin)
        if with_groups:
            groups += build_groups(task, prompt, [c for c, _ in mine], [s for _, s in mine])
    return Scored(tuple(scores), tuple(pairs), tuple(groups), tuple(rates), len(rated),
                  sum(s.passed for s in rated))


def validate(engines: RoleEngines, executor: Executor,
             problems: Sequence[humaneval.HumanEvalProblem], samples_per_problem: int,
             max_tokens: int) -> humaneval.ValidationResult | None:
    """The fixed validation set (a HumanEval subset), never mixed with generated tasks."""
    if not problems:
        return None
    sampling = dataclasses.replace(humaneval.default_sampling(samples_per_problem),
                                   max_tokens=max_tokens)
    return humaneval.evaluate(complete(engines), executor, problems,
                              samples_per_problem=samples_per_problem, sampling=sampling)


def complete(engines: RoleEngines):
    """generate() that re-issues prompts lost with a dead engine once, then gives up loudly."""
    def generate(prompts, sampling):
        result = engines.generate(prompts, sampling)
        if result.lost:
            retry = engines.generate([prompts[i] for i in result.lost], sampling)
            if retry.lost:
                raise RuntimeError(f"{engines.role}: prompts {list(retry.lost)} lost twice")
            for i, group in zip(result.lost, retry.completions):
                result.completions[i] = group
        return result.completions
    return generate


def replay_tasks(known: Sequence[Task], cursor: int, count: int) -> tuple[list[Task], int]:
    """Seed and archived tasks the solver also attempts this round (rotating through them);
    the tasks and the next round's cursor."""
    count = min(count, len(known))
    chosen = [known[(cursor + i) % len(known)] for i in range(count)]
    return chosen, (cursor + count) % max(1, len(known))


def update_archive(archive: Sequence[Task], new: Sequence[Task], size: int) -> tuple[Task, ...]:
    """The last `size` distinct tasks of archive + new."""
    seen, merged = set(), []
    for task in [*archive, *new]:
        if task.task_id not in seen:
            seen.add(task.task_id)
            merged.append(task)
    return tuple(merged[-size:]) if size else ()
