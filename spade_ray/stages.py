"""The stages of a self-play round, as loop.py calls them. Part of the wiring layer (with loop.py,
cluster.py, cli.py and config.py): the only modules that combine the stage packages.

Each stage takes the run's `Context` (built once by cli.py) plus typed values, records what it
did in the trace, and adds its figures to the round's tally.
"""

from __future__ import annotations

import dataclasses
import random
import time
from pathlib import Path
from typing import Any

from spade_ray.config import LoopConfig, ValidationConfig
from spade_ray.evaluation import humaneval
from spade_ray.evaluation.scoring import needs_rerun, score_many
from spade_ray.execution import Sandbox
from spade_ray.preferences.export import append_jsonl, read_jsonl, save_dataset
from spade_ray.preferences.pairs import build_pairs
from spade_ray.records import Candidate, Completion, Limits, RoundMetrics, SamplingParams, Task
from spade_ray.rollout.actor import RoleEngines
from spade_ray.rollout.sampling import TokenBudgetExceeded, TokenMeter, sample_distinct
from spade_ray.tasks.diversity import most_similar
from spade_ray.tasks.format import TaskFormatError, parse_task
from spade_ray.tasks.prompting import (
    candidate_program,
    generator_prompt,
    solver_prompt,
    topic_schedule,
)
from spade_ray.tasks.templates import PromptTemplate
from spade_ray.tasks.validate import Verdict, validate_tasks
from spade_ray.tracking.metrics import MetricsSink
from spade_ray.tracking.schema import GeneratorInput, Versions
from spade_ray.tracking.trace import TraceStore
from spade_ray.training import group_for


class CapReached(RuntimeError):
    """A per-round cap (tokens, sandbox CPU, wall time, tasks) stops new work this round."""


@dataclasses.dataclass
class Context:
    """Everything a round needs; built by cli.py, the only place that knows the topology."""

    run_id: str
    run_dir: Path
    generator: RoleEngines
    solver: RoleEngines
    sandbox: Sandbox
    store: TraceStore
    metrics: MetricsSink
    templates: dict[str, PromptTemplate]
    generator_sampling: SamplingParams
    solver_sampling: SamplingParams
    token_caps: dict[str, int | None]
    loop: LoopConfig
    validation: ValidationConfig
    limits: Limits
    seeds: list[Task]
    validation_problems: list[humaneval.HumanEvalProblem]
    trainer: Any = None  # training.Trainer, or None for collect-only rounds (learner=none)


@dataclasses.dataclass(frozen=True)
class GeneratedChunk:
    topics: list[str]
    inputs: list[GeneratorInput]
    verdicts: list[Verdict]
    rejected_unparsed: list[str]  # parse failure reasons
    generator_version: int
    generate_s: float = 0.0
    validate_s: float = 0.0
    error: str = ""

    @classmethod
    def failed(cls, topics: list[str], error: Exception) -> GeneratedChunk:
        return cls(topics, [], [], [], -1, error=f"{type(error).__name__}: {error}")


def versions(ctx: Context) -> Versions:
    return Versions(generator=ctx.generator.weights_version, solver=ctx.solver.weights_version)


def meters(ctx: Context) -> dict[str, TokenMeter]:
    return {role: TokenMeter(role, cap) for role, cap in ctx.token_caps.items()}


def wall_exceeded(ctx: Context, started: float) -> bool:
    cap = ctx.loop.caps.wall_s
    return cap is not None and time.monotonic() - started > cap


def over_caps(ctx: Context, tally: Any, meters: dict[str, TokenMeter], started: float) -> bool:
    caps = ctx.loop.caps
    return (wall_exceeded(ctx, started)
            or (caps.sandbox_cpu_s is not None and tally.sandbox_cpu_s >= caps.sandbox_cpu_s)
            or (caps.tasks is not None and tally.valid >= caps.tasks)
            or any(m.cap is not None and m.total >= m.cap for m in meters.values()))


def topics_for_round(ctx: Context, index: int) -> list[str]:
    return topic_schedule(list(ctx.loop.topics), ctx.loop.tasks_per_round, index)


def _role_generate(engines: RoleEngines):
    """A role's generate() for sample_distinct: lost prompts come back as None (re-issued)."""
    return lambda prompts, sampling: engines.generate(prompts, sampling).completions


def generate_tasks(ctx: Context, topics: list[str], archive: list[Task], rng: random.Random,
                   meters: dict[str, TokenMeter]) -> GeneratedChunk:
    """Generator step + validation by execution, for one chunk of topics."""
    pool = ctx.seeds + archive
    prompts = [generator_prompt(ctx.templates["generator"], t, pool, ctx.loop.few_shot, rng)
               for t in topics]
    started = time.monotonic()
    try:
        sample = sample_distinct(_role_generate(ctx.generator), prompts, ctx.generator_sampling,
                                 meters["generator"], resample_rounds=1)
    except TokenBudgetExceeded as e:
        raise CapReached(str(e)) from e
    generate_s = time.monotonic() - started
    known = list(pool)
    version = ctx.generator.weights_version
    inputs, parsed, unparsed = [], [], []
    for topic, prompt, group in zip(topics, prompts, sample.completions):
        for completion in group:
            outcome, task = _parse(completion, topic, ctx, version, known)
            inputs.append(GeneratorInput(index=0, prompt=prompt, completion=completion,
                                         outcome=outcome, task_id=task.task_id if task else None))
            if task is not None:
                parsed.append(task)
                known.append(task)
            else:
                unparsed.append(outcome)
    started = time.monotonic()
    verdicts = validate_tasks(parsed, ctx.sandbox) if parsed else []
    return GeneratedChunk(topics, inputs, verdicts, unparsed, version, generate_s,
                          time.monotonic() - started)


def _parse(completion: Completion, topic: str, ctx: Context, version: int, known: list[Task]
           ) -> tuple[str, Task | None]:
    try:
        task = parse_task(completion.text, topic, ctx.limits, generator_version=version)
    except TaskFormatError as e:
        return e.reason, None
    _, similarity = most_similar(task, known)
    if similarity >= ctx.loop.max_similarity:
        return "near_duplicate", None
    return "parsed", task


def record_generated(ctx: Context, index: int, chunk: GeneratedChunk, tally: Any) -> None:
    if chunk.error:
        tally.rejections["generator_failed"] += len(chunk.topics)
        print(f"round {index}: generation failed for {chunk.topics}: {chunk.error}", flush=True)
        return
    v = versions(ctx)
    # The round's inputs recorded so far: a killed round's rows were discarded before it re-ran.
    for i, item in enumerate(chunk.inputs, start=tally.proposed):
        ctx.store.record_generator_input(index, dataclasses.replace(item, index=i), v)
    for verdict in chunk.verdicts:
        ctx.store.record_task(index, verdict.task, verdict.valid, verdict.reason, v)
    tally.stage_s["generate"] += chunk.generate_s
    tally.stage_s["validate_tasks"] += chunk.validate_s
    tally.sandbox_cpu_s += sum(v.reference_cpu_s for v in chunk.verdicts)
    tally.proposed += len(chunk.inputs)
    tally.rejections.update(chunk.rejected_unparsed)
    tally.rejections.update(v.reason for v in chunk.verdicts if not v.valid)
    valid = [v.task for v in chunk.verdicts if v.valid]
    tally.valid += len(valid)
    tally.new_tasks += valid


def solve_and_score(ctx: Context, index: int, tasks: list[Task], tally: Any,
                    meters: dict[str, TokenMeter], generated: bool) -> None:
    """Solver step, execution, scoring and preference pairs for a batch of tasks."""
    if not tasks:
        return
    examples = [t for t in ctx.seeds if t.family == "codegen"]
    prompts = [solver_prompt(ctx.templates["solver"], t, examples, ctx.loop.few_shot)
               for t in tasks]
    sampling = dataclasses.replace(ctx.solver_sampling, n=ctx.loop.candidates)
    started = time.monotonic()
    try:
        sample = sample_distinct(_role_generate(ctx.solver), prompts, sampling, meters["solver"])
    except TokenBudgetExceeded as e:
        raise CapReached(str(e)) from e
    tally.stage_s["solve"] += time.monotonic() - started
    tally.sampled += sample.sampled
    chat = ctx.templates["solver"].chat
    candidates = [Candidate(candidate_id=f"{task.task_id}/r{index}/{k}", task_id=task.task_id,
                            code=candidate_program(task, c.text, chat),
                            solver_version=c.weights_version, prompt_tokens=c.prompt_tokens,
                            completion_tokens=c.completion_tokens)
                  for task, group in zip(tasks, sample.completions)
                  for k, c in enumerate(group)]
    tally.distinct += len(candidates)
    by_task = {t.task_id: t for t in tasks}
    started = time.monotonic()
    checks = ctx.sandbox.check_many([c.code for c in candidates],
                                    [by_task[c.task_id].tests for c in candidates],
                                    limits=ctx.limits)
    scores = score_many(candidates, checks)
    tally.stage_s["execute"] += time.monotonic() - started
    tally.sandbox_cpu_s += sum(c.execution.cpu_s for c in checks)
    v = versions(ctx)
    ctx.store.record_candidates(index, candidates, v)
    ctx.store.record_executions(index, [(c.candidate_id, c.task_id, r)
                                        for c, r in zip(candidates, checks)], v)
    ctx.store.record_scores(index, scores, v)
    pairs = []
    for task, prompt in zip(tasks, prompts):
        mine = [(c, s) for c, s in zip(candidates, scores) if c.task_id == task.task_id]
        if not mine:
            continue
        rated = [s for _, s in mine if not needs_rerun(s)]
        if rated:
            tally.task_pass_rates.append(sum(s.passed for s in rated) / len(rated))
        if generated:
            tally.new_task_candidates += len(rated)
            tally.new_task_passed += sum(s.passed for s in rated)
        pairs += build_pairs(task, prompt, [c for c, _ in mine], [s for _, s in mine],
                             task.generator_version, margin=ctx.loop.pair_margin)
        usable = [(c, s) for c, s in mine if not needs_rerun(s)]
        group = group_for(prompt, [c.code for c, _ in usable], [s.value for _, s in usable],
                          task.task_id)
        if group is not None:
            tally.groups.append(group)
    ctx.store.record_pairs(index, pairs, v)
    append_jsonl(pairs_file(ctx, index), pairs)
    tally.pairs += len(pairs)
    tally.round_pairs += pairs


def pairs_file(ctx: Context, index: int) -> Path:
    return ctx.run_dir / "pairs" / f"round_{index:03d}.jsonl"


def export_round(ctx: Context, index: int) -> Path:
    """The round's pairs as a `datasets` dataset TRL's DPOTrainer loads (pairs/round_N/)."""
    path = pairs_file(ctx, index)
    return save_dataset(read_jsonl(path) if path.exists() else [],
                        ctx.run_dir / "pairs" / f"round_{index:03d}")


def validate_solver(ctx: Context, tally: Any) -> humaneval.ValidationResult | None:
    """The fixed validation set (a HumanEval subset), never mixed with generated tasks."""
    if not ctx.validation_problems:
        return None
    sampling = dataclasses.replace(
        humaneval.default_sampling(ctx.validation.samples_per_problem),
        max_tokens=ctx.validation.max_tokens)
    started = time.monotonic()
    result = humaneval.evaluate(complete(ctx.solver), ctx.sandbox, ctx.validation_problems,
                                samples_per_problem=ctx.validation.samples_per_problem,
                                sampling=sampling)
    tally.stage_s["validation"] += time.monotonic() - started
    return result


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


def replay_tasks(ctx: Context, archive: list[Task], cursor: int) -> tuple[list[Task], int]:
    """Seed and archived tasks the solver also attempts this round (rotating through them)."""
    pool = ctx.seeds + archive
    count = min(ctx.loop.replay_tasks_per_round, len(pool))
    chosen = [pool[(cursor + i) % len(pool)] for i in range(count)]
    return chosen, (cursor + count) % max(1, len(pool))


def update_archive(archive: list[Task], new: list[Task], size: int) -> list[Task]:
    seen, merged = set(), []
    for task in archive + new:
        if task.task_id not in seen:
            seen.add(task.task_id)
            merged.append(task)
    return merged[-size:] if size else []


def round_metrics(ctx: Context, index: int, tally: Any, meters: dict[str, TokenMeter],
                  validation: humaneval.ValidationResult | None, wall_s: float,
                  learned: Any = None) -> RoundMetrics:
    rates = tally.task_pass_rates
    learner = {} if learned is None else {
        "update": learned.update, "learner_step": learned.learner_step,
        "learner_loss": learned.learner_loss, "gate_pass_at_1": learned.gate_pass_at_1,
        "gate_heldout_logp": learned.gate_heldout_logp, "rejected_by": learned.rejected_by}
    return RoundMetrics(
        run_id=ctx.run_id, round=index, generator_version=tally.generator_version,
        solver_version=tally.solver_version,
        validation_pass_at_1=validation.pass_at_k[1] if validation else None,
        validation_problems=validation.problems if validation else 0,
        tasks_proposed=tally.proposed, tasks_valid=tally.valid,
        rejection_reasons=tuple(tally.rejections.most_common()),
        new_task_pass_rate=(tally.new_task_passed / tally.new_task_candidates
                            if tally.new_task_candidates else 0.0),
        new_task_candidates=tally.new_task_candidates,
        mean_difficulty=1 - sum(rates) / len(rates) if rates else 0.0,
        pairs=tally.pairs,
        candidate_diversity=tally.distinct / tally.sampled if tally.sampled else 0.0,
        tokens_generator=meters["generator"].total, tokens_solver=meters["solver"].total,
        sandbox_cpu_s=round(tally.sandbox_cpu_s, 3),
        stage_s=tuple((k, round(v, 3)) for k, v in sorted(tally.stage_s.items())),
        wall_s=round(wall_s, 3), **learner)


def round_line(m: RoundMetrics) -> str:
    val = "n/a" if m.validation_pass_at_1 is None else f"{m.validation_pass_at_1:.3f}"
    reasons = ", ".join(f"{r}={n}" for r, n in m.rejection_reasons[:3]) or "-"
    return (f"round {m.round}: val pass@1 {val} ({m.validation_problems} problems) | tasks "
            f"{m.tasks_valid}/{m.tasks_proposed} valid (rejected: {reasons}) | new-task pass "
            f"{m.new_task_pass_rate:.2f} | difficulty {m.mean_difficulty:.2f} | pairs {m.pairs}"
            f" | diversity {m.candidate_diversity:.2f} | tokens {m.tokens_generator}+"
            f"{m.tokens_solver} | sandbox {m.sandbox_cpu_s:.1f} cpu-s | {m.wall_s:.0f} s"
            + ("" if m.update == "none" else f" | update {m.update} (step {m.learner_step}"
               + ("" if m.learner_loss is None else f", loss {m.learner_loss:.4f}")
               + ("" if m.gate_heldout_logp is None
                  else f", held-out logp {m.gate_heldout_logp:.4f}")
               + (f", by {'+'.join(m.rejected_by)}" if m.rejected_by else "") + ")"))
