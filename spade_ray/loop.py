"""The self-play loop: `run_rounds()` resumes after the last completed round; `run_round()` is one.

    a new run with learner.sft_warmup: fine-tune on the seed pool's demonstrations, gated
        (training.warm_start)
    for each round:
        tasks = generate(generator, previous tasks); admit the ones execution makes tasks of
        solutions = solve(solver, tasks, K); results = execute(sandbox, solutions)
        scores, pairs = score(solutions, results); generator rewards and pairs from pass rates
        if the learner holds enough pairs: update the policy and publish it to the engines
        validate once on the fixed set; the gate keeps or rolls back the update; record
        steer: the difficulty asked of the generator moves towards the band; on a collapse
        alarm the last good weights are served again and hard seed tasks are replayed

Generation streams: a producer thread (streaming.Ahead) writes and validates the next chunk of
tasks while this thread solves, executes and scores the current one, and the solver also
replays seed and archived tasks. Caps on tokens, sandbox CPU, wall time and tasks stop new work;
what is in flight still finishes and is recorded. A failing stage call is recorded as such and
the round goes on; a failing update is not caught: it stops the run before the round is marked
complete with weights nobody checked.
"""

from __future__ import annotations

import collections
import dataclasses
import random
import time
from collections.abc import Callable, Iterator, Sequence

from spade_ray import stages
from spade_ray.budget import Budget
from spade_ray.config import LoopConfig, SftWarmup, ValidationConfig
from spade_ray.evaluation import humaneval
from spade_ray.evaluation.humaneval import HumanEvalProblem, ValidationResult
from spade_ray.execution import Executor
from spade_ray.recorder import Recorder, RoundRecord
from spade_ray.records import (
    CompletionGroup,
    LearnOutcome,
    Limits,
    PreferencePair,
    RoundMetrics,
    RoundState,
    Task,
    TaskFamily,
    TrainAlgorithm,
    UpdateStatus,
)
from spade_ray.streaming import Ahead
from spade_ray.tasks.archive import replay_tasks, update_archive
from spade_ray.tasks.control import (
    ControlConfig,
    Guidance,
    RoundSignals,
    alarm,
    collapse_evidence,
    family_weights,
    hardest,
    learnable,
    level_label,
    next_level,
    solver_hints,
    target_pass_rate,
)
from spade_ray.tasks.diversity import normalised_hash
from spade_ray.tasks.prompting import family_schedule, topic_schedule
from spade_ray.tracking import Versions
from spade_ray.training import Trainer, Training, warm_start


def run_round(run: Run, index: int, state: RoundState) -> tuple[RoundMetrics, RoundState]:
    """One round, in the order of the algorithm; its metrics and the next round's state."""
    record = run.recorder.start_round(index, run.served_versions(), run.loop.tasks_per_round
                                      * run.generation.sampling.n)
    budget = Budget(run.loop.caps)
    busy_before = run.engine_busy_s()
    # loop.overlap: the update on the last round's items runs while this round generates
    training = (run.trainer.start_update(pending_items(state))
                if run.trainer is not None and run.loop.overlap and pending_items(state)
                else None)
    known = [*run.seeds, *state.archive]
    started_from = run.trainer.carry(state) if run.trainer is not None else state
    injected = [t for t in run.seeds if t.task_id in state.inject]  # after a collapse alarm
    replay, cursor = replay_tasks(run.seeds, state.archive, state.replay_cursor,
                                  run.loop.replay_tasks_per_round, run.loop.replay_archive_share)
    hints = solver_hints(state.control_level, run.generation.admission.visible_examples,
                         run.control)
    solve_execute_score(run, record, budget, [*injected, *(t for t in replay
                                                           if t.task_id not in state.inject)],
                        generated=False, hints=hints)
    solving = True  # until a cap is reached; a chunk already generated is still recorded
    for chunk in generated_chunks(run, record, budget, known, state,
                                  keep_going=lambda: solving):
        solving = solving and not budget.exhausted(record) and solve_execute_score(
            run, record, budget, chunk.valid_tasks, generated=True, hints=hints)
        record.rewarded(stages.reward_generator(
            chunk, record.task_pass_rates, run.loop.generator_reward, record.index,
            record.generator_outputs, record.versions.solver,
            with_groups=run.on_groups, flaky=frozenset(record.flaky),
            split=frozenset(record.two_answers)))
    _attempt(record, "export", record.export_pairs)
    items = round_items(run, record)
    if run.trainer is not None and not run.loop.overlap:
        training = run.trainer.start_update(items)
    outcome, pass_at_1_served, tiers = learn_and_validate(run, record, training)
    if outcome is not None and outcome.update is not UpdateStatus.BUFFERING:
        outcome = dataclasses.replace(outcome,
                                      trained_round=index - 1 if run.loop.overlap else index)
    control = run.control
    metrics = record.metrics(pass_at_1_served, len(run.validation_problems), outcome,
                             budget.meters, budget.elapsed_s(),
                             band=(control.band_low, control.band_high),
                             level=state.control_level, hints=hints, tiers=tiers,
                             injected=len(injected),
                             engine_busy_s=run.engine_busy_s() - busy_before)
    metrics = dataclasses.replace(metrics, warm_start=state.warm_start)
    carried = carry_over(run, state, record, items, cursor)
    metrics, next_state = steer(run, metrics, carried, started_from,
                                {t.task_id for t in [*run.seeds, *carried.archive]},
                                record.task_pass_rates)
    if run.trainer is not None:
        next_state = run.trainer.carry(next_state)
    return metrics, next_state


def carry_over(run: Run, state: RoundState, record: RoundRecord,
               items: Sequence[PreferencePair | CompletionGroup], cursor: int) -> RoundState:
    """What the round hands on before the controller steers: the archive with its new tasks
    (flaky ones left out), the hashes of every task the run admitted, the replay cursor, and
    (loop.overlap) the items the next round's update trains on."""
    archive = update_archive([t for t in state.archive if t.task_id not in record.flaky],
                             [t for t in record.new_tasks if t.task_id not in record.flaky],
                             run.loop.archive_size)
    admitted = {*state.admitted_hashes,
                *(normalised_hash(t.reference) for t in record.new_tasks)}
    pending = items if run.trainer is not None and run.loop.overlap else ()
    return dataclasses.replace(
        state, archive=archive, admitted_hashes=tuple(sorted(admitted)), replay_cursor=cursor,
        inject=(), warm_start=None,
        pending_pairs=tuple(i for i in pending if isinstance(i, PreferencePair)),
        pending_groups=tuple(i for i in pending if isinstance(i, CompletionGroup)))


def steer(run: Run, metrics: RoundMetrics, state: RoundState, started_from: RoundState,
          known: set[str], measured: dict[str, float]) -> tuple[RoundMetrics, RoundState]:
    """The co-evolution controller after a round (tasks/control.py): the next difficulty
    level, the pass rates the exemplars are chosen by, and the collapse check. On an alarm
    the weights that served the last round without evidence are served again (under a new
    version; one policy serves both roles, so the solver goes back with the generator), the
    hardest seeds are replayed next round, and (loop.overlap) this round's items, not yet
    trained on, are dropped. `started_from`: the trainer's state when this round began, the last
    good one if the round shows no evidence."""
    config = run.control
    history = [*run.recorder.all_metrics(), metrics]
    signals = [round_signals(m) for m in history]
    rates = {k: v for k, v in (*state.task_pass_rates, *measured.items()) if k in known}
    state = dataclasses.replace(state, control_level=next_level(
        state.control_level, signals[-1], config), task_pass_rates=tuple(sorted(rates.items())))
    evidence = collapse_evidence(signals, config) if config.collapse_detection else ()
    metrics = dataclasses.replace(metrics, collapse_evidence=evidence)
    if not evidence:
        return metrics, dataclasses.replace(
            state, good_checkpoint=started_from.learner_checkpoint,
            good_version=started_from.weights_version,
            good_pass_at_1=started_from.served_pass_at_1)
    if not alarm(evidence, history[-2].collapse_evidence if len(history) > 1 else ()):
        return metrics, state
    rollback = None
    if config.rollback and run.trainer is not None and state.good_checkpoint:
        rollback = run.trainer.roll_back(state.good_checkpoint, state.good_version,
                                         state.good_pass_at_1)
    hard = hardest(run.seeds, rates, config.inject_hard)
    print(f"round {metrics.round}: collapse alarm ({'; '.join(evidence)}): "
          + (f"serving the weights of version {rollback} again, " if rollback is not None
             else "no earlier weights to roll back to, ")
          + f"replaying the {len(hard)} hardest seed tasks next round", flush=True)
    # with loop.overlap this round's items are still untrained: the collapsing policy wrote them
    return (dataclasses.replace(metrics, collapse_alarm=evidence, generator_rollback=rollback),
            dataclasses.replace(state, inject=tuple(t.task_id for t in hard), pending_pairs=(),
                                pending_groups=()))


def round_signals(m: RoundMetrics) -> RoundSignals:
    reasons = dict(m.rejection_reasons)
    return RoundSignals(proposed=m.tasks_proposed,
                        duplicates=reasons.get("duplicate", 0) + reasons.get("near_duplicate", 0),
                        new_task_pass_rate=m.new_task_pass_rate, rated=m.new_task_candidates,
                        task_diversity=m.task_diversity,
                        candidate_diversity=m.candidate_diversity,
                        validation_pass_at_1=m.validation_pass_at_1)


def generated_chunks(run: Run, record: RoundRecord, budget: Budget, known: list[Task],
                     state: RoundState, keep_going: Callable[[], bool]
                     ) -> Iterator[stages.GeneratedChunk]:
    """The round's (topic, family) prompts, a chunk at a time, generated and admitted by
    execution one chunk ahead on a producer thread (until `keep_going()` turns False or the
    wall cap is reached); each chunk recorded as it arrives. The controller's state picks
    the exemplars and the difficulty asked for, the archive's topics the schedule."""
    control = run.control
    level, target = state.control_level, target_pass_rate(state.control_level, run.control)
    guidance = Guidance(
        pass_rates=dict(state.task_pass_rates),
        target=target if control.exemplars_by_difficulty else None,
        difficulty=level_label(level, control) if control.difficulty_labels else None)
    seen = list(known)  # and the tasks of the round's chunks so far (one may copy another)
    rng = random.Random(run.loop.seed * 1_000_003 + record.index)

    def generate(chunk_work: list[tuple[str, TaskFamily]]) -> stages.GeneratedChunk:
        # on the producer thread, one chunk after another: red-team pass 10 had one task
        # admitted (and rewarded) once per chunk of a round, each chunk checking its outputs
        # against the round's start
        chunk = run.generation.generate(chunk_work, known=seen, meter=budget.generator,
                                        executor=run.executor, rng=rng, guidance=guidance,
                                        retired=state.admitted_hashes)
        seen.extend(chunk.valid_tasks)
        return chunk

    topics = topic_schedule(list(run.loop.topics), run.loop.tasks_per_round, record.index,
                            collections.Counter(t.topic for t in state.archive),
                            control.max_topic_share)
    families = list(run.loop.families)
    weights = (family_weights(families, known, guidance.pass_rates, target)
               if control.families_by_difficulty else None)
    work = list(zip(topics, family_schedule(families, run.loop.tasks_per_round, record.index,
                                            weights)))
    ahead = Ahead(generate, [work[i:i + run.loop.chunk_size]
                             for i in range(0, len(work), run.loop.chunk_size)],
                  keep_going=lambda: keep_going() and budget.wall_left(),
                  name=f"generator-round-{record.index}")
    entries = iter(ahead)
    try:
        for chunk_work, chunk in entries:
            if isinstance(chunk, Exception):
                record.generation_failed(chunk_work, chunk)
                if isinstance(chunk, stages.CapReached):
                    ahead.stop()
                continue
            record.generated(chunk)
            yield chunk
    finally:
        entries.close()  # stops and joins the producer if the round ends on an error


def solve_execute_score(run: Run, record: RoundRecord, budget: Budget, tasks: Sequence[Task],
                        generated: bool, hints: int | None = None) -> bool:
    """Solve `tasks` (K candidates each, `hints` examples shown), execute the candidates, score
    them, record it all; `generated`: the tasks are this round's new ones. False when a cap
    stopped it."""
    def step() -> None:
        solutions = run.solving.solve(tasks, record.index, budget.solver, hints=hints)
        started = time.monotonic()
        checks = stages.execute(run.executor, solutions, run.limits)
        record.executed(solutions, checks)
        controls = stages.control(run.executor, solutions.tasks, run.limits)
        scored = stages.score(solutions, checks, run.loop.pair_margin,
                              with_groups=run.on_groups, controls=controls)
        record.timed("execute", time.monotonic() - started)
        record.solved(solutions, scored, generated)

    return not tasks or _attempt(record, "solve", step)


def pending_items(state: RoundState) -> list[PreferencePair | CompletionGroup]:
    """What the last round left for this round's overlapped update (loop.overlap)."""
    return [*state.pending_pairs, *state.pending_groups]


def round_items(run: Run, record: RoundRecord) -> list[PreferencePair | CompletionGroup]:
    """What the learner trains on from this round: its groups (GRPO, PPO) or its pairs (DPO;
    with dynamic sampling only those of tasks solved sometimes, not always)."""
    if run.on_groups:
        return list(record.groups)
    return list(learnable(record.pairs, record.task_pass_rates)
                if run.control.dynamic_sampling else record.pairs)


def learn_and_validate(run: Run, record: RoundRecord, training: Training | None
                       ) -> tuple[LearnOutcome | None, float | None, tuple[tuple[str, float], ...]]:
    """The update `training` finished and published (if any), the validation of what the
    engines then serve, the gate's verdict; the outcome, the validation pass@1 of the weights
    served after it and its pass@1 per tier (empty when the gate rolled the measured weights
    back). The "learn" stage time is the wait: with loop.overlap, what generation did not hide."""
    published = None
    if run.trainer is not None:
        started = time.monotonic()
        published = run.trainer.finish_update(training) if training is not None else None
        record.timed("learn", time.monotonic() - started)
    started = time.monotonic()
    validation = run.validate()
    record.timed("validation", time.monotonic() - started)
    tiers = (() if validation is None
             else humaneval.pass_at_1_by_tier(validation, run.validation_problems))
    if run.trainer is None:
        return None, pass_at_1(validation), tiers
    outcome = run.trainer.gate(published, validation)
    return (outcome, run.trainer.served_pass_at_1,
            () if outcome.update is UpdateStatus.REJECTED else tiers)


def run_rounds(run: Run) -> list[RoundMetrics]:
    """The remaining rounds of the run; every round's metrics (resumed ones too)."""
    start, state = run.recorder.resume(run.loop.rounds)
    new = state is None
    if state is None:  # a new run: the gate's first baseline is the base weights' pass@1
        state = RoundState(served_pass_at_1=pass_at_1(run.validate())
                           if run.trainer is not None else None)
    if run.trainer is not None:
        run.trainer.resume(state)
        if new and run.warm_start is not None:
            state = warm_start(run, run.trainer, run.warm_start, state)
    for index in range(start, run.loop.rounds):
        metrics, state = run_round(run, index, state)
        run.recorder.complete(metrics, state)
    return run.recorder.all_metrics()


@dataclasses.dataclass(frozen=True)
class Run:
    """The run's components, built once by app.py (the only place that knows the topology)."""

    recorder: Recorder
    generation: stages.Generation
    solving: stages.Solving
    executor: Executor
    limits: Limits
    loop: LoopConfig
    validation: ValidationConfig
    validation_problems: tuple[HumanEvalProblem, ...]
    seeds: tuple[Task, ...]
    trainer: Trainer | None = None  # None: collect-only rounds (learner=none)
    control: ControlConfig = ControlConfig()
    warm_start: SftWarmup | None = None  # SFT on the seed pool before round 0 (with a trainer)

    @property
    def algorithm(self) -> TrainAlgorithm | None:
        return None if self.trainer is None else self.trainer.algorithm

    @property
    def on_groups(self) -> bool:
        """The learner trains on rewarded groups (GRPO, PPO), not on pairs."""
        return self.algorithm is not None and self.algorithm.on_groups

    def served_versions(self) -> Versions:
        return Versions(generator=self.generation.engines.weights_version,
                        solver=self.solving.engines.weights_version)

    def engine_busy_s(self) -> float:
        """Seconds the rollout engines have had a request in flight (each set of engines once)."""
        engines = {id(e): e for e in (self.generation.engines, self.solving.engines)}
        return sum(e.busy_s for e in engines.values())

    def validate(self) -> ValidationResult | None:
        return stages.validate(self.solving.engines, self.executor, self.validation_problems,
                               self.validation.samples_per_problem, self.validation.max_tokens)


def pass_at_1(validation: ValidationResult | None) -> float | None:
    return None if validation is None else validation.pass_at_k[1]


def _attempt(record: RoundRecord, stage: str, call: Callable[[], object]) -> bool:
    """One step of the round; a failure is recorded, never the end of the round. False when
    the round must stop new work (a cap was reached)."""
    try:
        call()
    except stages.CapReached as e:
        record.cap_reached(str(e))
        return False
    except Exception as e:  # noqa: BLE001 - one failing stage call never stops the round
        record.failed(stage, e)
    return True
