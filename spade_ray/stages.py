"""The stages of a self-play round, as loop.py calls them: typed values in, typed values out.

Part of the wiring layer (with loop.py, recorder.py, streaming.py, training.py, cluster.py,
app.py, cli.py and config.py): the only modules that combine the stage packages. A stage
records nothing and counts nothing; it returns a value that the loop hands to the Recorder.

    Generation.generate  (topic, family)s -> GeneratedChunk (outputs parsed, deduplicated and
                         admitted by execution)
    Solving.solve        tasks  -> Solutions (K distinct candidate programs per task)
    execute              Solutions -> checks, one CheckResult per candidate (any Executor)
    control              tasks -> Controls (those whose own reference fails their tests now)
    score                Solutions + checks -> Scored (scores, preference pairs, GRPO groups)
    reward_generator     GeneratedChunk + pass rates -> GeneratorRewards (generator pairs)
    validate             the solver's pass@1 on the fixed validation set
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Collection, Mapping, Sequence

from spade_ray.evaluation import humaneval, needs_rerun, score_many
from spade_ray.evaluation.scoring import shown_examples
from spade_ray.execution import Executor
from spade_ray.preferences import build_groups, build_pairs
from spade_ray.preferences.generator import (
    GeneratorReward,
    behaviour,
    build_generator_groups,
    build_generator_pairs,
    generator_reward,
    guessed,
)
from spade_ray.records import (
    Candidate,
    CheckResult,
    Completion,
    CompletionGroup,
    ExecStatus,
    Limits,
    PreferencePair,
    SamplingParams,
    Score,
    Task,
    TaskFamily,
)
from spade_ray.rollout.actor import RoleEngines
from spade_ray.rollout.sampling import TokenBudgetExceeded, TokenMeter, sample_distinct
from spade_ray.tasks import candidate_program, executable
from spade_ray.tasks.admission import AdmissionConfig, Admitted, admit
from spade_ray.tasks.control import Guidance
from spade_ray.tasks.decontamination import HeldOut, known_tasks
from spade_ray.tasks.diversity import most_similar, normalised_hash
from spade_ray.tasks.families import solver_prompt
from spade_ray.tasks.format import Proposal, TaskFormatError, inputs_frame, parse_proposal
from spade_ray.tasks.prompting import generator_prompt
from spade_ray.tasks.templates import PromptTemplate
from spade_ray.tracking import GeneratorInput


class CapReached(RuntimeError):
    """A per-round cap (tokens, sandbox CPU, wall time, tasks) stops new work this round."""


@dataclasses.dataclass(frozen=True)
class GeneratedChunk:
    """One chunk of (topic, family) prompts through the generator and admission."""

    work: tuple[tuple[str, TaskFamily], ...]
    inputs: tuple[GeneratorInput, ...]  # every generator output, its outcome (index unset)
    admitted: tuple[Admitted, ...]  # one per output that parsed and was not a duplicate
    generate_s: float
    validate_s: float

    @property
    def valid_tasks(self) -> list[Task]:
        return [v.task for v in self.admitted if v.task is not None]


@dataclasses.dataclass(frozen=True)
class Generation:
    """The generator step: prompts from topics and few-shot tasks, parsing, dedup, admission."""

    engines: RoleEngines
    template: PromptTemplate
    sampling: SamplingParams
    few_shot: int
    max_similarity: float  # a new task this close to a known one is a near-duplicate
    limits: Limits
    admission: AdmissionConfig = AdmissionConfig()
    frame_tokens: int = 0  # > 0: continue outputs that lack their inputs (`complete_frames`)
    held_out: tuple[HeldOut, ...] = ()  # the validation problems no task may compute

    def generate(self, work: Sequence[tuple[str, TaskFamily]], known: Sequence[Task],
                 rng: random.Random, meter: TokenMeter, executor: Executor,
                 guidance: Guidance = Guidance(), retired: Collection[str] = ()
                 ) -> GeneratedChunk:
        """`known`: tasks a new one may not copy (and the exemplars); `retired`: normalised
        hashes of tasks the run admitted that have left `known`, which it may not copy."""
        prompts = [generator_prompt(self.template, topic, list(known), self.few_shot, rng,
                                    guidance=guidance)
                   for topic, _ in work]
        started = time.monotonic()
        sample = _sample(self.engines, prompts, self.sampling, meter, resample_rounds=1)
        if self.frame_tokens:
            self.complete_frames(prompts, sample.completions, meter)
        generate_s = time.monotonic() - started
        seen = list(known)
        hashes = {normalised_hash(t.reference) for t in known} | set(retired)
        outputs, proposals = [], []  # outputs: (topic, family, prompt, completion, outcome)
        for (topic, family), prompt, group in zip(work, prompts, sample.completions):
            for completion in group:
                outcome, proposal = self._parse(completion.text, seen, hashes)
                outputs.append((topic, family, prompt, completion, outcome))
                if proposal is not None:
                    proposals.append((len(outputs) - 1, proposal))
        started = time.monotonic()
        admitted = admit([p for _, p in proposals], [outputs[i][1] for i, _ in proposals],
                         [outputs[i][0] for i, _ in proposals], executor, self.limits,
                         self.admission, generator_version=self.engines.weights_version,
                         held_out=self.held_out, known=known_tasks(known))
        verdicts = {i: v for (i, _), v in zip(proposals, admitted)}
        inputs = []
        for i, (_, family, prompt, completion, outcome) in enumerate(outputs):
            verdict = verdicts.get(i)
            if verdict is not None:
                outcome = "admitted" if verdict.valid else verdict.reason
            inputs.append(GeneratorInput(index=0, prompt=prompt, completion=completion,
                                         outcome=outcome, family=family,
                                         # a known task's twin is a copy (-1)
                                         executed=verdict is not None
                                         and verdict.reason != "known_twin",
                                         task_id=verdict.task.task_id
                                         if verdict is not None and verdict.valid else None))
        return GeneratedChunk(tuple(work), tuple(inputs), tuple(admitted), generate_s,
                              time.monotonic() - started)

    def complete_frames(self, prompts: list[str], groups: list[list[Completion]],
                        meter: TokenMeter) -> None:
        """Constrain the frame of the task format where the model left it: an output with a
        description and a reference but no usable inputs is continued (in place) from
        `...Inputs:\n<its function>(`, for at most `frame_tokens` tokens. The hf backend has
        no grammar-constrained decoding; forcing the one section small models most often drop
        is the part of it that matters here (bench/generator_admission.py measures it)."""
        todo = [(i, k, frame) for i, group in enumerate(groups) for k, c in enumerate(group)
                if (frame := inputs_frame(c.text)) is not None]
        if not todo:
            return
        sampling = dataclasses.replace(self.sampling, n=1, max_tokens=self.frame_tokens,
                                       stop=(*self.sampling.stop, "\n### ", "\nDescription:"))
        sample = _sample(self.engines, [prompts[i] + frame for i, _, frame in todo], sampling,
                         meter, resample_rounds=0)
        for (i, k, frame), continued in zip(todo, sample.completions):
            if not continued:  # lost with a dead engine: the output stays as it was
                continue
            first, more = groups[i][k], continued[0]
            groups[i][k] = dataclasses.replace(
                more, text=frame + more.text,
                completion_tokens=first.completion_tokens + more.completion_tokens)

    def _parse(self, text: str, known: list, hashes: set[str]) -> tuple[str, Proposal | None]:
        """("parsed", proposal), or (the reason, None); a parsed proposal joins `known`."""
        try:
            proposal = parse_proposal(text)
        except TaskFormatError as e:
            return e.reason, None
        digest = normalised_hash(proposal.reference)
        if digest in hashes:
            return "duplicate", None
        _, similarity = most_similar(proposal, known)
        if similarity >= self.max_similarity:
            return "near_duplicate", None
        known.append(proposal)
        hashes.add(digest)
        return "parsed", proposal


@dataclasses.dataclass(frozen=True)
class Solutions:
    """K distinct candidate programs per task, with the prompts they answered."""

    tasks: tuple[Task, ...]
    prompts: tuple[str, ...]  # prompts[i] is the prompt of tasks[i]
    candidates: tuple[Candidate, ...]  # grouped by task, in task order
    sampled: int  # completions generated, duplicates included
    solve_s: float
    hints: int | None = None  # the examples codegen and repair prompts showed (None: visible)


@dataclasses.dataclass(frozen=True)
class Solving:
    """The solver step: few-shot prompts of each task's family, K distinct completions, the
    programs to check."""

    engines: RoleEngines
    templates: dict[str, PromptTemplate]  # one per task family
    chat: bool
    sampling: SamplingParams  # n = K candidates per task
    few_shot: int
    examples: tuple[Task, ...]  # solved tasks shown in the prompt (the same family's)

    def solve(self, tasks: Sequence[Task], round_index: int, meter: TokenMeter,
              hints: int | None = None) -> Solutions:
        """`hints`: the examples codegen and repair prompts show (None: each task's visible
        ones; families.shown_examples)."""
        prompts = [solver_prompt(self.templates, t, list(self.examples), self.few_shot,
                                 hints=hints)
                   for t in tasks]
        started = time.monotonic()
        sample = _sample(self.engines, prompts, self.sampling, meter)
        candidates = [Candidate(candidate_id=f"{task.task_id}/r{round_index}/{k}",
                                task_id=task.task_id,
                                code=candidate_program(task, c.text, self.chat),
                                solver_version=c.weights_version, prompt_tokens=c.prompt_tokens,
                                completion_tokens=c.completion_tokens, draws=draws)
                      for task, group, counts in zip(tasks, sample.completions, sample.draws)
                      for k, (c, draws) in enumerate(zip(group, counts))]
        return Solutions(tuple(tasks), tuple(prompts), tuple(candidates), sample.sampled,
                         time.monotonic() - started, hints)


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
    tasks = {t.task_id: t for t in solutions.tasks}
    return executor.check_many([executable(tasks[c.task_id], c.code)
                                for c in solutions.candidates],
                               [tasks[c.task_id].tests for c in solutions.candidates],
                               limits=limits)


@dataclasses.dataclass(frozen=True)
class Controls:
    """What running a batch's own references beside its candidates found (`control`)."""

    flaky: frozenset[str] = frozenset()  # ids of the tasks whose reference failed their tests
    cpu_s: float = 0.0  # the control runs' sandbox CPU


def control(executor: Executor, tasks: Sequence[Task], limits: Limits) -> Controls:
    """Each task's own reference against its tests, here and now, under the candidates'
    limits. Admission ran the reference in fresh interpreters and once in a jail; a program
    whose answers follow what no run fixes (an address's layout bits) can agree there by
    chance (2 in 60 tries for a one-bit dependence) and then grade its candidates by luck, a
    pass rate the generator's reward would pay for. A task whose reference fails is flaky: the
    loop keeps its candidates out of pairs, groups and pass rates, gives its generator output
    the reward of a rejected one and drops it from the archive. Predict tasks compare a literal
    with a stored answer (nothing of the jail enters the verdict): no control. A control that
    met a sandbox_error twice tells nothing: not flaky."""
    controlled = [t for t in tasks if t.family is not TaskFamily.PREDICT]
    if not controlled:
        return Controls()
    results = executor.check_many([executable(t, t.reference) for t in controlled],
                                  [t.tests for t in controlled], limits=limits)
    return Controls(frozenset(t.task_id for t, r in zip(controlled, results) if not r.passed
                              and r.execution.status is not ExecStatus.SANDBOX_ERROR),
                    sum(r.execution.cpu_s for r in results))


@dataclasses.dataclass(frozen=True)
class Scored:
    """The evaluator's verdicts on one batch and the training items built from them."""

    scores: tuple[Score, ...]  # scores[i] is the score of solutions.candidates[i]
    pairs: tuple[PreferencePair, ...]
    groups: tuple[CompletionGroup, ...]  # built only when the learner trains on groups
    pass_rates: dict[str, float]  # task id -> the share of its rated draws that passed
    rated: int  # draws (Candidate.draws) with a verdict (not sandbox_error), tasks not flaky
    passed: int  # of those, how many passed every test
    controls: Controls = Controls()  # the batch's flaky tasks make no items
    # tasks whose candidates look like a guess (generator.guessed, of their `behaviour`s:
    # split between the right answer and one other, ...): their generator outputs earn no
    # band reward
    two_answers: frozenset[str] = frozenset()


def score(solutions: Solutions, checks: Sequence[CheckResult], pair_margin: float,
          with_groups: bool, controls: Controls = Controls()) -> Scored:
    """Every candidate's score; pairs, groups and pass rates of the tasks `controls` did not
    find flaky (their verdicts are luck: recorded, but learnt from by neither role)."""
    flaky = controls.flaky
    scores = score_many(list(solutions.candidates), list(checks),
                        {t.task_id: t for t in solutions.tasks}, solutions.hints)
    pairs: list[PreferencePair] = []
    groups: list[CompletionGroup] = []
    rates: dict[str, float] = {}
    split: set[str] = set()
    rated = [(c, s) for c, s in zip(solutions.candidates, scores)
             if not needs_rerun(s) and c.task_id not in flaky]
    for task, prompt in zip(solutions.tasks, solutions.prompts):
        if task.task_id in flaky:
            continue
        mine = [(c, s) for c, s in zip(solutions.candidates, scores) if c.task_id == task.task_id]
        verdicts = [(c, s, r) for c, s, r in zip(solutions.candidates, scores, checks)
                    if c.task_id == task.task_id and not needs_rerun(s)]
        if verdicts:
            rates[task.task_id] = (sum(c.draws * s.passed for c, s, _ in verdicts)
                                   / sum(c.draws for c, _, _ in verdicts))
        shown = shown_examples(task, solutions.hints)
        answers = [(behaviour(task, c, r, shown), s.passed)
                   for c, s, r in verdicts for k in range(c.draws)]
        if guessed(task, [a for a, _ in answers], [ok for _, ok in answers]):
            split.add(task.task_id)
        pairs += build_pairs(task, prompt, [c for c, _ in mine], [s for _, s in mine],
                             task.generator_version, margin=pair_margin)
        if with_groups:
            groups += build_groups(task, prompt, [c for c, _ in mine], [s for _, s in mine])
    return Scored(tuple(scores), tuple(pairs), tuple(groups), rates,
                  sum(c.draws for c, _ in rated), sum(c.draws * s.passed for c, s in rated),
                  controls, frozenset(split))


@dataclasses.dataclass(frozen=True)
class GeneratorRewards:
    """A chunk's generator outputs with their rewards, and the training items made of them."""

    inputs: tuple[GeneratorInput, ...]  # the chunk's, with pass_rate and reward set
    pairs: tuple[PreferencePair, ...]
    groups: tuple[CompletionGroup, ...]


def reward_generator(chunk: GeneratedChunk, pass_rates: Mapping[str, float],
                     kind: GeneratorReward, round_index: int, first_index: int,
                     solver_version: int, with_groups: bool,
                     flaky: frozenset[str] = frozenset(),
                     split: frozenset[str] = frozenset()) -> GeneratorRewards:
    """Each output's reward from its admission and the solver's pass rate on its task; the
    outputs numbered from `first_index` (the round's outputs so far, in the order chunks
    complete: a killed round's rows are discarded before it re-runs, so numbers repeat). An
    output whose task turned out `flaky` (`control`) is rewarded as admission's rejections
    are, and its outcome says "flaky"; one whose task's candidates `split` between
    two answers (Scored.two_answers) gets no band reward (its task stays admitted)."""
    rewarded = []
    for i, item in enumerate(chunk.inputs):
        flaked = item.task_id is not None and item.task_id in flaky
        was_split = item.task_id is not None and item.task_id in split
        rate = pass_rates.get(item.task_id) if item.task_id and not flaked else None
        reward = generator_reward(item.task_id is not None and not flaked, item.executed,
                                  rate, kind)
        rewarded.append(dataclasses.replace(
            item, index=first_index + i, pass_rate=rate,
            outcome="flaky" if flaked else item.outcome,
            reward=0.0 if was_split else reward))
    inputs = tuple(rewarded)
    return GeneratorRewards(inputs, tuple(build_generator_pairs(inputs, round_index,
                                                                solver_version)),
                            tuple(build_generator_groups(inputs)) if with_groups else ())


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
