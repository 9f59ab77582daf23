"""The solver's pass rate: what the sampling temperature, min-p and the examples a prompt shows
do to it, and to the tasks in the co-evolution band and the pairs.

The run's solver step (stages.Solving: the family's few-shot prompt, K distinct candidates,
checked in the local sandbox, scored and paired by the evaluator) on the admitted seed tasks, or
on the generated tasks a run admitted (`--run runs/NAME`: the tasks the band is about), for
every temperature, every min-p (`--min-p`, 0: off) and every hint count (`--hints`: examples
shown in codegen and repair prompts, families.shown_examples; `own` = the task's visible ones,
what the controller's level 0 shows), the same model and sampling seed, in one run. For each
setting: the pass rate over candidates (95% Wilson interval; candidates of one task are not
independent, so the interval is narrower than the truth), the share of tasks whose pass rate
lies in the band (0.3-0.7), the tasks with at least one passing candidate, the preference pairs
built, completions sampled (duplicates are re-sampled: a cost of low temperatures), and seconds,
each per family.

With --sft-warmup EPOCHS every setting is measured again after the solver's SFT warm start
(learner.sft_warmup with roles [solver], the dpo learner's settings, in this process), rows
marked "+sft". On seed tasks the warm start trains only on the seed programs none of the measured
tasks is made from (in any family), so the rows say what it does to tasks it has not seen; with
--run it trains on the whole pool, as a run's warm start does.

    .venv/bin/python bench/solver_pass_rate.py [--tasks 24] [--temperatures 1.0,0.7,0.5]
        [--min-p 0,0.1] [--sft-warmup 1] [--families repair]
    .venv/bin/python bench/solver_pass_rate.py --run runs/cpu_gemma --temperatures 1.0 \
        --hints own,4,6
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time

from generator_admission import DirectEngines, warm_start  # bench/ is on the path
from learning_result import wilson

from spade_ray.execution import Sandbox
from spade_ray.records import Limits, SamplingParams, Task, TaskFamily, TaskSource
from spade_ray.rollout.actor import make_backend
from spade_ray.rollout.sampling import TokenMeter
from spade_ray.stages import Solving, execute, score
from spade_ray.tasks.seeds import load_seed_tasks
from spade_ray.tasks.templates import load_prompts
from spade_ray.tracking.diagnose_run import load_run

STOP = ("\ndef ", "\nclass ", "\nif __name__", "\n### ")  # conf/model/gemma_hf.yaml's solver


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gemma3-270m")
    parser.add_argument("--tasks", type=int, default=24, help="tasks, families in turn")
    parser.add_argument("--families", default=",".join(f.value for f in TaskFamily),
                        help="the task families measured, e.g. repair")
    parser.add_argument("--run", help="a run directory: solve its admitted generated tasks")
    parser.add_argument("--candidates", type=int, default=4)
    parser.add_argument("--temperatures", default="1.0,0.7,0.5")
    parser.add_argument("--min-p", default="0", help="min-p values, e.g. 0,0.1 (0: off)")
    parser.add_argument("--hints", default="own", help="examples shown, e.g. own,4,6")
    parser.add_argument("--band", default="0.3,0.7")
    parser.add_argument("--sft-warmup", type=int, default=0, metavar="EPOCHS",
                        help="also measure after the solver's SFT warm start (0: not)")
    args = parser.parse_args()
    low, high = (float(x) for x in args.band.split(","))
    limits = Limits()
    engines = DirectEngines(make_backend("hf", args.model, dtype="auto", max_batch_size=8))
    templates = load_prompts("fewshot")
    base = SamplingParams(n=args.candidates, temperature=1.0, top_p=0.95, max_tokens=256,
                          stop=STOP, seed=1234)
    rows = []
    with Sandbox("local", limits) as sandbox:
        seeds = load_seed_tasks(sandbox, limits)
        families = {TaskFamily(f) for f in args.families.split(",")}
        tasks = in_turn([t for t in (generated_tasks(args.run) if args.run else seeds)
                         if t.family in families], args.tasks)
        settings = [(float(t), float(m), None if h == "own" else int(h))
                    for t in args.temperatures.split(",") for m in args.min_p.split(",")
                    for h in args.hints.split(",")]
        title = (f"model {args.model}, {len(tasks)} {'generated' if args.run else 'seed'} "
                 f"tasks x {args.candidates} candidates, top_p 0.95, sampling seed 1234, "
                 f"band {low}-{high}")
        for weights in ["base", "+sft"] if args.sft_warmup else ["base"]:
            if weights == "+sft":
                shown = {t.reference for t in tasks}
                warm_start(args.model, [t for t in seeds if t.reference not in shown],
                           args.sft_warmup, engines.backend, 1, roles=("solver",))
            for temperature, min_p, hints in settings:
                rows += measure(engines, templates, dataclasses.replace(base,
                                temperature=temperature, min_p=min_p), seeds, tasks, hints,
                                sandbox, limits, (low, high), weights)
                print_rows(rows, title)
    return 0


def measure(engines, templates, sampling: SamplingParams, seeds: list[Task], tasks: list[Task],
            hints: int | None, sandbox: Sandbox, limits: Limits, band: tuple[float, float],
            weights: str) -> list[tuple]:
    """One setting's rows: per family and for all, what the solver's candidates scored."""
    low, high = band
    solving = Solving(engines, {f: templates[f] for f in TaskFamily}, templates["codegen"].chat,
                      sampling, 2, tuple(seeds))
    started = time.monotonic()
    solutions = solving.solve(tasks, 0, TokenMeter("solver"), hints=hints)
    scored = score(solutions, execute(sandbox, solutions, limits), 0.0, False)
    seconds = time.monotonic() - started
    rows = []
    for family in [*{t.family: None for t in tasks}, None]:  # the measured families, then all
        mine = [t.task_id for t in tasks if family is None or t.family is family]
        verdicts = [s for c, s in zip(solutions.candidates, scored.scores) if c.task_id in mine]
        rates = [scored.pass_rates[t] for t in mine if t in scored.pass_rates]
        rows.append((weights, sampling.temperature, sampling.min_p, hints or "own",
                     family.value if family else "all", len(mine),
                     sum(s.passed for s in verdicts), len(verdicts),
                     sum(low <= r <= high for r in rates), sum(r > 0 for r in rates),
                     sum(p.task_id in mine for p in scored.pairs),
                     solutions.sampled if family is None else None, seconds))
    return rows


def generated_tasks(run_dir: str) -> list[Task]:
    """The run's admitted generated tasks, each once, in the order they were first recorded."""
    tasks = {traced.task.task_id: traced.task for _, traced in load_run(run_dir).tasks
             if traced.valid and traced.task.source is TaskSource.GENERATED}
    if not tasks:
        raise SystemExit(f"{run_dir} has no admitted generated task")
    return list(tasks.values())


def in_turn(tasks: list[Task], count: int) -> list[Task]:
    """Up to `count` tasks, the families taking turns (as long as each has tasks left)."""
    queues = [[t for t in tasks if t.family is f] for f in TaskFamily]
    out = []
    while len(out) < count and any(queues):
        out += [q.pop(0) for q in queues if q][:count - len(out)]
    return out


def print_rows(rows: list[tuple], title: str) -> None:
    """The table so far (printed after each setting: a long run shows its progress)."""
    print(f"\n{title}")
    print(f"{'weights':<8}{'temp':>5}{'min_p':>6} {'hints':>5} {'family':<8}{'tasks':>6}"
          f"{'passed':>10}{'rate':>6}{'95% CI':>14}{'in band':>8}{'any pass':>9}{'pairs':>6}"
          f"{'sampled':>8}{'s':>6}", flush=True)
    for weights, temp, min_p, hints, family, n, passed, total, band, anyp, pairs, sampled, \
            seconds in rows:
        lo, hi = wilson(passed, total)
        print(f"{weights:<8}{temp:>5.2f}{min_p:>6.2f} {hints:>5} {family:<8}{n:>6}"
              f"{f'{passed}/{total}':>10}{passed / max(total, 1):>6.2f}   [{lo:.2f}, {hi:.2f}]"
              f"{band:>8}{anyp:>9}{pairs:>6}{'' if sampled is None else sampled:>8}"
              f"{'' if sampled is None else f'{seconds:.0f}':>6}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
