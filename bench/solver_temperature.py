"""Solver temperature: what the sampling temperature does to the solver's pass rate and pairs.

The run's solver step (stages.Solving: the family's few-shot prompt, K distinct candidates,
checked in the local sandbox, scored and paired by the evaluator) on the admitted seed tasks,
at several temperatures, the same model and sampling seed, in one run. For each temperature:
the pass rate over candidates (95% Wilson interval; candidates of one task are not independent,
so the interval is narrower than the truth), the share of tasks whose pass rate lies in the
co-evolution band (0.3-0.7), the tasks with at least one passing candidate, the preference
pairs built, completions sampled (duplicates are re-sampled: a cost of low temperatures), and
seconds, each per family.

    .venv/bin/python bench/solver_temperature.py [--tasks 24] [--temperatures 1.0,0.7,0.5]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time

from generator_admission import DirectEngines  # bench/ is on the path when this file runs
from learning_result import wilson

from spade_ray.execution import Sandbox
from spade_ray.records import Limits, SamplingParams, TaskFamily
from spade_ray.rollout.actor import make_backend
from spade_ray.rollout.sampling import TokenMeter
from spade_ray.stages import Solving, execute, score
from spade_ray.tasks.seeds import load_seed_tasks
from spade_ray.tasks.templates import load_prompts

STOP = ("\ndef ", "\nclass ", "\nif __name__", "\n### ")  # conf/model/gemma_hf.yaml's solver


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gemma3-270m")
    parser.add_argument("--tasks", type=int, default=24, help="seed tasks, families in turn")
    parser.add_argument("--candidates", type=int, default=4)
    parser.add_argument("--temperatures", default="1.0,0.7,0.5")
    parser.add_argument("--band", default="0.3,0.7")
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
        by_family = {f: [t for t in seeds if t.family is f] for f in TaskFamily}
        tasks = [t for group in zip(*by_family.values()) for t in group][:args.tasks]
        for temperature in (float(t) for t in args.temperatures.split(",")):
            solving = Solving(engines, {f: templates[f] for f in TaskFamily},
                              templates["codegen"].chat,
                              dataclasses.replace(base, temperature=temperature), 2, tuple(seeds))
            started = time.monotonic()
            solutions = solving.solve(tasks, 0, TokenMeter("solver"))
            scored = score(solutions, execute(sandbox, solutions, limits), 0.0, False)
            seconds = time.monotonic() - started
            for family in [*TaskFamily, None]:
                mine = [t.task_id for t in tasks if family is None or t.family is family]
                verdicts = [s for c, s in zip(solutions.candidates, scored.scores)
                            if c.task_id in mine]
                rates = [scored.pass_rates[t] for t in mine if t in scored.pass_rates]
                rows.append((temperature, family.value if family else "all", len(mine),
                             sum(s.passed for s in verdicts), len(verdicts),
                             sum(low <= r <= high for r in rates), sum(r > 0 for r in rates),
                             sum(p.task_id in mine for p in scored.pairs),
                             solutions.sampled if family is None else None, seconds))
            print_rows(rows, f"model {args.model}, {len(tasks)} seed tasks x {args.candidates} "
                             f"candidates, top_p 0.95, sampling seed 1234, band {low}-{high}")
    return 0


def print_rows(rows: list[tuple], title: str) -> None:
    """The table so far (printed after each temperature: a long run shows its progress)."""
    print(f"\n{title}")
    print(f"{'temp':>5} {'family':<8}{'tasks':>6}{'passed':>10}{'rate':>6}{'95% CI':>14}"
          f"{'in band':>8}{'any pass':>9}{'pairs':>6}{'sampled':>8}{'s':>6}", flush=True)
    for temp, family, n, passed, total, band, anyp, pairs, sampled, seconds in rows:
        lo, hi = wilson(passed, total)
        print(f"{temp:>5.2f} {family:<8}{n:>6}{f'{passed}/{total}':>10}"
              f"{passed / max(total, 1):>6.2f}   [{lo:.2f}, {hi:.2f}]{band:>8}{anyp:>9}"
              f"{pairs:>6}{'' if sampled is None else sampled:>8}"
              f"{'' if sampled is None else f'{seconds:.0f}':>6}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
