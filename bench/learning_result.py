"""What a run learnt: HumanEval pass@1 of the base model and of the run's last accepted weights,
the admitted rate of generated tasks and the new-task pass rate of its first and last rounds
(with the per-round generator and pair figures), each with its sample count and a 95%
confidence interval, and the held-out log-prob per token of the canonical solutions (the
update gate's signal) for both models.

The validation figure is re-measured here on more problems than the run's per-round subset:
both models, the same problems, the same sampling (greedy by default, so one sample per problem
is the model's answer), checked in the local sandbox. Intervals: Wilson for a proportion; for
the change in pass@1, a paired bootstrap over problems (the same problems are scored twice, so
the change is judged per problem). The new-task pass rate is over candidates, and candidates
of one task are not independent: its interval is narrower than the truth.

    make run    # (or any run with a learner); then
    .venv/bin/python bench/learning_result.py runs/cpu_gemma [--problems 164] [--samples 1]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from spade_ray.records import RoundMetrics, from_dict
from spade_ray.tracking.query import run_sql

Z95 = 1.959964
BOOTSTRAP = 10_000


def wilson(passed: int, total: int) -> tuple[float, float]:
    """95% Wilson score interval of passed / total."""
    if total == 0:
        return (float("nan"), float("nan"))
    p = passed / total
    centre = (p + Z95**2 / (2 * total)) / (1 + Z95**2 / total)
    half = Z95 * math.sqrt(p * (1 - p) / total + Z95**2 / (4 * total**2)) / (1 + Z95**2 / total)
    return (max(0.0, centre - half), min(1.0, centre + half))


def paired_bootstrap(statistic: Callable[[list[int]], float], count: int, seed: int = 0
                     ) -> tuple[float, float]:
    """95% percentile interval of `statistic(indices)` over problem indices resampled with
    replacement (both models are scored on the same problems: the change is judged per
    problem)."""
    rng = random.Random(seed)
    values = sorted(statistic([rng.randrange(count) for _ in range(count)])
                    for _ in range(BOOTSTRAP))
    return (values[int(0.025 * BOOTSTRAP)], values[int(0.975 * BOOTSTRAP) - 1])


def heldout_logps(model_path: str, problems: list) -> list[tuple[float, int]]:
    """Per problem: the model's summed log-prob of the canonical solution after the prompt and
    its token count (float32; what the learner's update gate measures on the run's subset)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from spade_ray.learner.logprobs import text_logps

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    return text_logps(model, tokenizer, [(p.prompt, p.canonical_solution) for p in problems],
                      max_length=1024)


def read_run(run_dir: Path) -> tuple[list[RoundMetrics], str | None]:
    """The run's completed rounds and the learner checkpoint its last one left accepted."""
    db = run_dir / "trace.sqlite"
    if not db.is_file():
        raise SystemExit(f"{db} not found: give the run directory of a finished run")
    rows, _ = run_sql(db, "SELECT round, metrics, state FROM rounds ORDER BY round")
    if not rows:
        raise SystemExit(f"{run_dir} has no completed round")
    metrics = [from_dict(RoundMetrics, json.loads(m)) for _, m, _ in rows]
    return metrics, json.loads(rows[-1][2]).get("learner_checkpoint")


def merged_model(base: str, checkpoint: Path, out: Path) -> str:
    """The base model with the checkpoint's LoRA adapters merged in, saved under `out`."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.bfloat16)
    model = PeftModel.from_pretrained(model, str(checkpoint / "policy")).merge_and_unload()
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(base).save_pretrained(out)
    return str(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--model", default="gemma3-270m", help="the run's base model")
    parser.add_argument("--problems", type=int, default=164)
    parser.add_argument("--samples", type=int, default=1, help="per problem; 1 = greedy")
    parser.add_argument("--max-tokens", type=int, default=160, help="as the run's validation")
    args = parser.parse_args()

    from spade_ray.app import evaluate_model
    from spade_ray.rollout.models import resolve_model

    metrics, checkpoint = read_run(args.run_dir)
    updates = [m.update for m in metrics]
    print(f"run {args.run_dir}: {len(metrics)} rounds, updates {updates}, final weights "
          f"version {metrics[-1].solver_version}, last accepted checkpoint {checkpoint}")
    print("per-round validation pass@1 (the run's own subset): " + ", ".join(
        f"r{m.round} {m.validation_pass_at_1:.3f}/{m.validation_problems}"
        for m in metrics if m.validation_pass_at_1 is not None))

    report_self_play(metrics)
    report_new_task_pass_rate(metrics[0], metrics[-1])

    base = resolve_model(args.model)
    trained = checkpoint and Path(checkpoint).name != "step_000000"
    if not trained:
        print("\nno update was accepted in this run: the final weights are the base model's")
        return 0
    from spade_ray.evaluation.humaneval import load_problems

    problems = load_problems(args.problems if args.problems < 164 else None)
    with tempfile.TemporaryDirectory() as tmp:
        final = merged_model(base, Path(checkpoint), Path(tmp) / "final")
        models = (("base", base), ("final", final))
        scored = {name: heldout_logps(path, problems) for name, path in models}
        results = {name: evaluate_model(path, args.problems, args.samples, args.max_tokens)
                   for name, path in models}
    report_pass_at_1(results, args.samples, args.max_tokens)
    report_heldout(scored)
    return 0


def report_self_play(metrics: list[RoundMetrics]) -> None:
    """Per round: admitted generated tasks, pairs (on generated tasks, of the generator), the
    generator's mean reward; then the admitted rate of the first and the last round."""
    print("\nper round: admitted/proposed generator outputs, pairs (on generated tasks, "
          "generator), mean generator reward, admitted tasks per family")
    for m in metrics:
        reward = "n/a" if m.generator_reward_mean is None else f"{m.generator_reward_mean:+.2f}"
        families = ", ".join(f"{f} {n}" for f, n in m.family_tasks) or "-"
        print(f"  r{m.round}: {m.tasks_valid}/{m.tasks_proposed} admitted | pairs {m.pairs} "
              f"({m.pairs_from_generated} generated, {m.generator_pairs} generator) | reward "
              f"{reward} | {families}")
    print("\nadmitted rate (generator outputs that became tasks)")
    for label, m in (("first round", metrics[0]), ("last round", metrics[-1])):
        low, high = wilson(m.tasks_valid, m.tasks_proposed)
        print(f"  {label:<12} round {m.round}: " + (
            f"{m.tasks_valid}/{m.tasks_proposed} = {m.valid_task_rate:.3f}  95% CI "
            f"[{low:.3f}, {high:.3f}]" if m.tasks_proposed else "no generator output"))


def report_new_task_pass_rate(first: RoundMetrics, last: RoundMetrics) -> None:
    print("\nnew-task pass rate (candidates on the round's own valid generated tasks)")
    for label, m in (("first round", first), ("last round", last)):
        n = m.new_task_candidates
        passed = round(m.new_task_pass_rate * n) if n else 0
        low, high = wilson(passed, n)
        print(f"  {label:<12} round {m.round}: " + (
            f"{passed}/{n} = {passed / n:.3f}  95% CI [{low:.3f}, {high:.3f}]" if n else
            f"no candidates (tasks valid {m.tasks_valid}/{m.tasks_proposed}): not measurable"))


def report_pass_at_1(results: dict, samples: int, max_tokens: int) -> None:
    ids = sorted(results["base"].passed_per_problem)
    per = {name: [r.passed_per_problem[i] / samples for i in ids]
           for name, r in results.items()}
    total = len(ids) * samples
    print(f"\nHumanEval pass@1, {len(ids)} problems x {samples} sample(s) "
          f"({'greedy' if samples == 1 else 'temperature 0.8'}, max {max_tokens} "
          "tokens), local sandbox")
    for name, r in results.items():
        passed = sum(r.passed_per_problem.values())
        low, high = wilson(passed, total)
        print(f"  {name:<6} {r.pass_at_k[1]:.3f} ({passed}/{total})  95% CI [{low:.3f}, "
              f"{high:.3f}]  syntax errors {r.syntax_errors}")
    change = results["final"].pass_at_k[1] - results["base"].pass_at_k[1]
    low, high = paired_bootstrap(
        lambda idx: sum(per["final"][i] - per["base"][i] for i in idx) / len(idx), len(ids))
    gained = sum(a > b for a, b in zip(per["final"], per["base"]))
    lost = sum(a < b for a, b in zip(per["final"], per["base"]))
    print(f"  change {change:+.3f}  95% CI [{low:+.3f}, {high:+.3f}] (paired bootstrap over "
          f"problems); problems gained {gained}, lost {lost}")


def report_heldout(scored: dict[str, list[tuple[float, int]]]) -> None:
    tokens = [count for _, count in scored["base"]]
    print(f"\nheld-out log-prob per token of the canonical solutions ({len(tokens)} problems, "
          f"{sum(tokens)} tokens; the update gate's signal)")

    def mean(name: str, idx: list[int]) -> float:
        return sum(scored[name][i][0] for i in idx) / sum(tokens[i] for i in idx)

    every = list(range(len(tokens)))
    for name in scored:
        print(f"  {name:<6} {mean(name, every):.4f}")
    low, high = paired_bootstrap(lambda idx: mean("final", idx) - mean("base", idx),
                                 len(tokens))
    print(f"  change {mean('final', every) - mean('base', every):+.4f}  95% CI [{low:+.4f}, "
          f"{high:+.4f}] (paired bootstrap over problems)")


if __name__ == "__main__":
    sys.exit(main())
