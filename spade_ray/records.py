"""Typed records passed between the stages of spade-ray, with a JSON round trip.

Every record is a frozen dataclass; units are in the field names. `to_dict` / `from_dict` are the
one serialisation path (trace store, Ray, CLI `--json`), so a record read back equals the record
written.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import typing
from typing import Any, TypeVar

R = TypeVar("R")


class ExecStatus(str, enum.Enum):
    """How one execution ended. Exactly one applies; limits are checked before `error`."""

    OK = "ok"  # exit code 0 (for a check: and every test passed, confirmed by the sentinel)
    ERROR = "error"  # non-zero exit, uncaught exception or a crash signal (SIGSEGV, SIGABRT ...)
    TIMEOUT = "timeout"  # wall-clock deadline or the CPU-seconds limit of the process tree
    MEMORY_LIMIT = "memory_limit"  # the memory cgroup's OOM killer, or MemoryError under rlimit
    OUTPUT_LIMIT = "output_limit"  # stdout+stderr over the cap, or a file over the size limit
    KILLED = "killed"  # killed by a signal that no limit of ours explains
    SANDBOX_ERROR = "sandbox_error"  # the sandbox itself failed; says nothing about the code


@dataclasses.dataclass(frozen=True)
class Limits:
    """Resource limits of one execution (the whole process tree, not one process)."""

    timeout_s: float = 10.0
    cpu_s: float = 10.0
    memory_mb: int = 512
    max_output_bytes: int = 1_000_000  # stdout + stderr together
    max_processes: int = 64  # processes and threads
    max_file_mb: int = 16  # largest single file
    tmp_mb: int = 64  # the working directory (a tmpfs)
    tmp_inodes: int = 4096  # files and directories in the working directory

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"Limits.{field.name} must be a positive number, got {value!r}")
        if self.memory_mb < 16:
            raise ValueError(f"Limits.memory_mb={self.memory_mb} is too small to start Python "
                             "(use at least 16)")


@dataclasses.dataclass(frozen=True)
class ExecResult:
    """What one execution did, measured from outside the code."""

    status: ExecStatus
    exit_code: int | None  # negative: killed by that signal; None: no exit status was seen
    stdout: str  # decoded as UTF-8 with replacement
    stderr: str
    truncated: bool  # output was cut at Limits.max_output_bytes
    wall_s: float
    cpu_s: float  # user + system, whole process tree
    peak_memory_mb: float  # whole tree (cgroup); largest single process where cgroups are off
    env_hash: str  # interpreter, packages, backend, limits, image: what reproduces this result
    limits_enforced_by: str  # e.g. "cgroup-v1", "cgroup-v2", "docker", "rlimit (degraded: ...)"
    detail: str = ""  # why the status was chosen, in words (which limit, which signal)
    attempts: int = 1  # runs it took: 2 when a sandbox_error was re-run once on a fresh worker


@dataclasses.dataclass(frozen=True)
class IOExample:
    """One call of a task's entry point and the result it must return, both as canonical data
    text (sandbox/canonical.py; `spade_ray.execution.canonical.example` builds one)."""

    args: str  # the encoded argument tuple
    expected: str  # the encoded return value

    def __post_init__(self) -> None:
        for name in ("args", "expected"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.startswith("["):
                raise ValueError(f"IOExample.{name} must be canonical data text, got {value!r:.80}")


@dataclasses.dataclass(frozen=True)
class TestSuite:
    """A task's tests, run by the trusted grader process, never in the candidate's.

    `asserts`: statements, one outcome each. `check`: a program defining `check(candidate)`
    (HumanEval's form), called with the solution's `entry_point`; one outcome. `examples`: calls
    of `entry_point` whose results must equal the expected data exactly (floats within
    `float_tolerance` when it is above 0); one outcome each. `preamble`: trusted code the grader
    runs before the tests (HumanEval's prompt), so the helpers the tests use are the task's own.
    """

    __test__ = False  # not a pytest class, despite the name

    asserts: tuple[str, ...] = ()
    check: str | None = None
    entry_point: str | None = None
    examples: tuple[IOExample, ...] = ()
    preamble: str | None = None
    float_tolerance: float = 0.0

    def __post_init__(self) -> None:
        if not self.asserts and not self.check and not self.examples:
            raise ValueError("a TestSuite needs at least one assert statement, a check program "
                             "or an example")
        if (self.check or self.examples) and not self.entry_point:
            raise ValueError("a check program or examples need the entry_point they call")
        for i, source in enumerate(self.asserts):
            _must_compile(source, f"asserts[{i}]")
        if self.check:
            _must_compile(self.check, "check")
        if self.preamble:
            _must_compile(self.preamble, "preamble")
        if not 0 <= self.float_tolerance < 1:
            raise ValueError(f"float_tolerance must be in [0, 1), got {self.float_tolerance}")

    @property
    def total(self) -> int:
        return len(self.asserts) + (1 if self.check else 0) + len(self.examples)


def _must_compile(source: str, where: str) -> None:
    if not isinstance(source, str) or not source.strip():
        raise ValueError(f"test {where} is empty or not text")
    try:
        compile(source, f"<{where}>", "exec")
    except SyntaxError as e:
        raise ValueError(f"test {where} is not valid Python: {e.msg} (line {e.lineno})") from e


@dataclasses.dataclass(frozen=True)
class TestOutcome:
    __test__ = False

    name: str  # "assert[3]" or "check"
    outcome: str  # "passed" | "failed" | "error"
    message: str
    wall_s: float


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """A candidate run against a task's tests. `passed` needs the harness's sentinel."""

    execution: ExecResult
    outcomes: tuple[TestOutcome, ...]
    tests_total: int
    passed: bool
    suspicion: str = ""  # trusted-side evidence that the candidate probed the grader ("" none)

    @property
    def tests_passed(self) -> int:
        return sum(o.outcome == "passed" for o in self.outcomes)

    @property
    def fraction_passed(self) -> float:
        return self.tests_passed / self.tests_total if self.tests_total else 0.0


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    """How to sample, per role (generator / solver); see conf/model/*.yaml."""

    n: int = 1  # completions per prompt
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 256  # new tokens per completion
    stop: tuple[str, ...] = ()  # cut the text before the first of these (excluded)
    seed: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.n, int) or self.n < 1:
            raise ValueError(f"SamplingParams.n must be an integer >= 1, got {self.n!r}")
        if self.temperature < 0:
            raise ValueError(f"SamplingParams.temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"SamplingParams.top_p must be in (0, 1], got {self.top_p}")
        if not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise ValueError(f"SamplingParams.max_tokens must be an integer >= 1, got "
                             f"{self.max_tokens!r}")
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise ValueError(f"SamplingParams.stop must hold non-empty strings, got {self.stop!r}")


@dataclasses.dataclass(frozen=True)
class Completion:
    """One sampled continuation, stamped with the weights that produced it."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str  # "stop" (EOS or a stop string) | "length" (hit max_tokens)
    weights_version: int


@dataclasses.dataclass(frozen=True)
class Task:
    """An executable programming task: data plus code, validated by running it (tasks/)."""

    task_id: str  # content hash: the same task always gets the same id
    family: str  # "codegen" | "repair"
    topic: str
    description: str
    entry_point: str  # the function the tests call
    signature: str  # e.g. "def add(a: int, b: int) -> int:"
    tests: TestSuite
    reference: str  # a full reference solution (passes every test)
    buggy: str | None = None  # repair family: the program whose bug the tests expose
    limits: Limits = Limits()
    source: str = "generated"  # "generated" | "seed" | "archive"
    generator_version: int = -1  # weights version of the generator; -1 for seed tasks


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One solver attempt at a task."""

    candidate_id: str  # f"{task_id}/{index}"
    task_id: str
    code: str  # the full program checked against the task's tests
    solver_version: int
    prompt_tokens: int
    completion_tokens: int


@dataclasses.dataclass(frozen=True)
class Score:
    """The evaluator's verdict on one candidate. `value` orders candidates: rules first."""

    candidate_id: str
    task_id: str
    value: float  # fraction of tests passed in [0, 1]; 0 for timeouts, crashes, limits
    passed: bool  # every test passed, confirmed by the harness sentinel
    tests_passed: int
    tests_total: int
    status: ExecStatus
    cpu_s: float
    peak_memory_mb: float


@dataclasses.dataclass(frozen=True)
class PreferencePair:
    """A DPO pair in TRL's format (prompt, chosen, rejected) plus where it came from."""

    task_id: str
    prompt: str
    chosen: str
    rejected: str
    chosen_candidate_id: str
    rejected_candidate_id: str
    chosen_score: float
    rejected_score: float
    solver_version: int
    generator_version: int


@dataclasses.dataclass(frozen=True)
class RoundMetrics:
    """What one self-play round did, for the metrics file, W&B, plots and the summary table."""

    run_id: str
    round: int
    generator_version: int  # the weights that served this round (its update comes after)
    solver_version: int
    validation_pass_at_1: float | None  # HumanEval subset; None if not measured this round
    validation_problems: int
    tasks_proposed: int  # generator outputs, parsed or not
    tasks_valid: int
    rejection_reasons: tuple[tuple[str, int], ...]  # (reason, count), most common first
    new_task_pass_rate: float  # fraction of candidates on this round's tasks that passed
    mean_difficulty: float  # 1 - mean pass rate per task
    pairs: int
    candidate_diversity: float  # distinct candidates / candidates
    tokens_generator: int
    tokens_solver: int
    sandbox_cpu_s: float
    stage_s: tuple[tuple[str, float], ...]  # (stage, seconds)
    wall_s: float
    # "none" (learner=none), "buffering" (fewer pairs than an update needs), "accepted", or
    # "rejected" (the gate rolled the update back: see rejected_by)
    update: str = "none"
    learner_step: int = 0
    learner_loss: float | None = None
    gate_pass_at_1: float | None = None  # validation pass@1 with the update's weights
    # the policy's mean token log-prob on held-out reference solutions after the update
    gate_heldout_logp: float | None = None
    rejected_by: tuple[str, ...] = ()  # the gate signals that rejected the update
    new_task_candidates: int = 0  # what new_task_pass_rate is a fraction of

    @property
    def valid_task_rate(self) -> float:
        return self.tasks_valid / self.tasks_proposed if self.tasks_proposed else 0.0


def to_dict(record: Any) -> dict[str, Any]:
    """A record as plain JSON-able data (enums as their values, tuples as lists)."""
    return json.loads(json.dumps(dataclasses.asdict(record), default=_enum_value))


def _enum_value(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    raise TypeError(f"cannot serialise {type(value).__name__}")


def from_dict(cls: type[R], data: dict[str, Any]) -> R:
    """Rebuild a record from `to_dict` output; unknown or missing fields are errors."""
    if not isinstance(data, dict):
        raise TypeError(f"{cls.__name__} needs a JSON object, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(data) - names
    if unknown:
        raise ValueError(f"unknown fields for {cls.__name__}: {sorted(unknown)}")
    kwargs = {name: _convert(hints[name], value) for name, value in data.items()}
    return cls(**kwargs)


def _convert(hint: Any, value: Any) -> Any:
    origin = typing.get_origin(hint)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return hint(value)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return from_dict(hint, value)
    if origin is tuple and value is not None:
        (item_hint, _ellipsis) = typing.get_args(hint)
        return tuple(_convert(item_hint, v) for v in value)
    return value
