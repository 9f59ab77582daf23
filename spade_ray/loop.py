"""The self-play loop: `run()` resumes after the last completed round; `run_round()` is the stages.

A round streams: a producer thread generates and validates tasks a chunk at a time while the
main thread solves, executes and scores the chunk before it (a bounded queue is the
backpressure), so a task's candidates run while later tasks are still being written. All
recording happens on the main thread (one SQLite connection). Caps on tokens, sandbox CPU,
wall time and tasks stop the producer; what is in flight still finishes and is recorded.
A failing chunk is recorded as such and the round goes on.

Resume: a round's rows count only once the round is completed (TraceStore.complete_round holds
the loop state); rows of a round that was killed are discarded and the round runs again.
"""

from __future__ import annotations

import collections
import dataclasses
import queue
import random
import threading
import time
from typing import Any

from spade_ray import stages, training
from spade_ray.records import RoundMetrics, Task, from_dict, to_dict


@dataclasses.dataclass
class RoundTally:
    """What the stages of one round report, summed into its RoundMetrics."""

    generator_version: int = 0  # the weights that served the round (an update comes after)
    solver_version: int = 0
    proposed: int = 0
    valid: int = 0
    rejections: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    new_task_candidates: int = 0
    new_task_passed: int = 0
    task_pass_rates: list[float] = dataclasses.field(default_factory=list)
    pairs: int = 0
    sampled: int = 0
    distinct: int = 0
    sandbox_cpu_s: float = 0.0
    stage_s: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    new_tasks: list[Task] = dataclasses.field(default_factory=list)
    round_pairs: list = dataclasses.field(default_factory=list)  # for the learner (DPO)
    groups: list = dataclasses.field(default_factory=list)  # for the learner (GRPO)


def run(ctx: stages.Context) -> list[RoundMetrics]:
    """Run the remaining rounds of ctx's run; returns every round's metrics (resumed ones too)."""
    last = ctx.store.last_completed_round()
    start = 0 if last is None else last + 1
    if start < ctx.loop.rounds:
        dropped = ctx.store.discard_incomplete(start)
        if dropped:
            print(f"resume: discarded {dropped} rows of unfinished round {start}", flush=True)
    state = ctx.store.round_state(last) if last is not None else initial_state(ctx)
    if ctx.trainer is not None:
        ctx.trainer.resume(state)
    if last is not None:
        print(f"resume: rounds 0..{last} already completed in {ctx.run_dir}", flush=True)
        for metrics in ctx.store.round_metrics():  # a kill between the trace and the metrics
            ctx.metrics.log(metrics)  # file loses nothing; logging the same round is a no-op
    for index in range(start, ctx.loop.rounds):
        metrics, state = run_round(ctx, index, state)
        ctx.store.complete_round(index, metrics, state)
        ctx.metrics.log(metrics)
        print(stages.round_line(metrics), flush=True)
    return ctx.store.round_metrics()


def initial_state(ctx: stages.Context) -> dict[str, Any]:
    return {"archive": [], "replay_cursor": 0, "learner_checkpoint": None, "weights_version": 0}


def run_round(ctx: stages.Context, index: int, state: dict[str, Any]
              ) -> tuple[RoundMetrics, dict[str, Any]]:
    started = time.monotonic()
    tally = RoundTally(generator_version=ctx.generator.weights_version,
                       solver_version=ctx.solver.weights_version)
    meters = stages.meters(ctx)
    archive = [from_dict(Task, t) for t in state["archive"]]
    rng = random.Random(ctx.loop.seed * 1_000_003 + index)
    validation = stages.validate_solver(ctx, tally)
    replay, cursor = stages.replay_tasks(ctx, archive, state["replay_cursor"])
    _guarded(index, tally, stages.solve_and_score, ctx, index, replay, tally, meters, False)
    chunks: queue.Queue = queue.Queue(maxsize=1)  # backpressure: one chunk ahead at most
    stop = threading.Event()
    producer = threading.Thread(target=_produce, daemon=True, name=f"generator-round-{index}",
                                args=(ctx, index, archive, rng, meters, chunks, stop, started))
    producer.start()
    while (item := chunks.get()) is not None:
        _guarded(index, tally, stages.record_generated, ctx, index, item, tally)
        valid = [v.task for v in item.verdicts if v.valid]
        if stages.over_caps(ctx, tally, meters, started) or not _guarded(
                index, tally, stages.solve_and_score, ctx, index, valid, tally, meters, True):
            stop.set()
    producer.join()
    _guarded(index, tally, stages.export_round, ctx, index)
    outcome = _learn(ctx, tally, validation)
    new_archive = stages.update_archive(archive, tally.new_tasks, ctx.loop.archive_size)
    metrics = stages.round_metrics(ctx, index, tally, meters, validation,
                                   time.monotonic() - started, outcome)
    new_state = {"archive": [to_dict(t) for t in new_archive], "replay_cursor": cursor}
    if ctx.trainer is not None:
        new_state.update(ctx.trainer.state())
    return metrics, new_state


def _learn(ctx: stages.Context, tally: RoundTally, validation) -> training.LearnOutcome | None:
    """The learn stage (skipped for collect-only rounds). Not guarded: a failing update must
    stop the run before a round is marked complete with weights nobody checked."""
    if ctx.trainer is None:
        return None
    started = time.monotonic()
    items = tally.round_pairs if ctx.trainer.config.name == "dpo" else tally.groups
    before = validation.pass_at_k[1] if validation is not None else None
    outcome = training.learn(ctx.trainer, items, before,
                             lambda: stages.validate_solver(ctx, tally))
    tally.stage_s["learn"] += time.monotonic() - started
    return outcome


def _guarded(index: int, tally: RoundTally, stage, *args) -> bool:
    """Run a stage; a failure is counted and reported, never the end of the round. Returns
    False when a cap was reached (no more work this round)."""
    try:
        stage(*args)
    except stages.CapReached as e:
        print(f"round {index}: cap reached: {e}", flush=True)
        return False
    except Exception as e:  # noqa: BLE001 - one failing stage call never stops the round
        tally.rejections[f"stage_failed:{stage.__name__}:{type(e).__name__}"] += 1
        print(f"round {index}: {stage.__name__} failed: {e!r}", flush=True)
    return True


def _produce(ctx, index, archive, rng, meters, chunks, stop, started) -> None:
    """Generator side of the pipeline: chunks of topics -> parsed, validated tasks."""
    try:
        topics = stages.topics_for_round(ctx, index)
        size = ctx.loop.chunk_size
        for start in range(0, len(topics), size):
            if stop.is_set() or stages.wall_exceeded(ctx, started):
                break
            try:
                chunks.put(stages.generate_tasks(ctx, topics[start:start + size], archive, rng,
                                                 meters))
            except stages.CapReached:
                break
            except Exception as e:  # noqa: BLE001 - recorded by the consumer as a failed chunk
                chunks.put(stages.GeneratedChunk.failed(topics[start:start + size], e))
    finally:
        chunks.put(None)
