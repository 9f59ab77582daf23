"""The records the stages pass one another: tasks and their tests, executions and their limits,
candidates, scores, and the items a learner trains on (preference pairs, completion groups,
demonstrations)."""

from __future__ import annotations

import ast
import dataclasses
import enum
import keyword
import math


class TaskFamily(enum.StrEnum):
    """What the solver is asked to do with a generated program (tasks/families.py)."""

    CODEGEN = "codegen"  # write the function from its description and visible examples
    REPAIR = "repair"  # fix a mutant of the reference that the examples catch
    PREDICT = "predict"  # state the reference's output on one input, graded as data


class Role(enum.StrEnum):
    """Who wrote what a preference pair prefers: the learner trains that role's policy."""

    GENERATOR = "generator"  # tasks: a better-rewarded task over a worse one, same prompt
    SOLVER = "solver"  # programs: a better-scored candidate over a worse one, same task


class TaskSource(enum.StrEnum):
    GENERATED = "generated"  # written by the generator (archived tasks keep this source)
    SEED = "seed"  # shipped with the project (tasks/seeds.py)


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
            if not isinstance(value, (int, float)) or isinstance(value, bool) \
                    or not math.isfinite(value) or value <= 0:  # NaN is not <= 0
                raise ValueError(f"Limits.{field.name} must be a finite positive number, got "
                                 f"{value!r}")
            # The MB and count limits reach mount options, cgroup files and slices as they are:
            # 512.0 failed there as "Invalid argument" (and a hint to install bubblewrap), or made
            # every run a sandbox_error.
            if field.type == "int" and not isinstance(value, int):
                raise ValueError(f"Limits.{field.name} must be an integer, got {value!r}")
        if self.memory_mb < 16:
            raise ValueError(f"Limits.memory_mb={self.memory_mb} is too small to start Python "
                             "(use at least 16)")
        if self.tmp_inodes < 2:  # the directory itself, and the harness's probe file at start
            raise ValueError(f"Limits.tmp_inodes={self.tmp_inodes} is too small for the sandbox "
                             "to start (use at least 2)")


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
        # What is wrong with a suite is said here, naming the field: found by the grader, it was
        # the candidate's failure (a check() without its argument, an examples tuple, ...).
        for name, of in (("asserts", "assert statements"), ("examples", "IOExamples")):
            value = getattr(self, name)
            if not isinstance(value, (tuple, list)):  # a str would be iterated character-wise
                raise ValueError(f"TestSuite.{name} must be a tuple of {of}, got "
                                 f"{type(value).__name__} {value!r:.80}")
            object.__setattr__(self, name, tuple(value))
        if not self.asserts and not self.check and not self.examples:
            raise ValueError("a TestSuite needs at least one assert statement, a check program "
                             "or an example")
        if (self.check or self.examples) and not self.entry_point:
            raise ValueError("a check program or examples need the entry_point they call")
        if self.entry_point is not None and not (
                isinstance(self.entry_point, str) and self.entry_point.isidentifier()
                and not keyword.iskeyword(self.entry_point)):
            raise ValueError(f"TestSuite.entry_point must be a function name, got "
                             f"{self.entry_point!r:.80}")
        for i, source in enumerate(self.asserts):
            _must_compile(source, f"asserts[{i}]")
        if self.check:
            _must_define_check(self.check)
        if self.preamble:
            _must_compile(self.preamble, "preamble")
        for i, e in enumerate(self.examples):
            if not isinstance(e, IOExample):
                raise ValueError(f"TestSuite.examples[{i}] must be an IOExample "
                                 f"(execution.canonical.example builds one), got "
                                 f"{type(e).__name__} {e!r:.80}")
        if not isinstance(self.float_tolerance, (int, float)) \
                or isinstance(self.float_tolerance, bool) or not 0 <= self.float_tolerance < 1:
            raise ValueError(f"float_tolerance must be a number in [0, 1), got "
                             f"{self.float_tolerance!r}")

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


def _must_define_check(source: str) -> None:
    """The grader calls `check(candidate)`: a program that defines no such function failed
    every candidate (KeyError, or a TypeError about check's arguments)."""
    _must_compile(source, "check")
    defs = [node for node in ast.parse(source).body
            if isinstance(node, ast.FunctionDef) and node.name == "check"]
    if not defs:
        raise ValueError("test check must define a top-level function check(candidate)")
    args = defs[-1].args  # the last definition is the one called
    positional = len(args.posonlyargs) + len(args.args)
    takes_one = (positional >= 1 or args.vararg is not None) and \
        positional - len(args.defaults) <= 1 and all(d is not None for d in args.kw_defaults)
    if not takes_one:
        raise ValueError(f"test check must define check(candidate) taking one argument, got "
                         f"def check({ast.unparse(args)}) (line {defs[-1].lineno})")


class Verdict(enum.StrEnum):
    """One test's result, from the grader."""

    PASSED = "passed"
    FAILED = "failed"  # an assertion failed (or an example's result differed)
    ERROR = "error"  # the test raised something else (the candidate's exception, a bad reply)


@dataclasses.dataclass(frozen=True)
class TestOutcome:
    __test__ = False

    name: str  # "assert[3]", "check" or "example[0]"
    outcome: Verdict
    message: str
    wall_s: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "outcome", Verdict(self.outcome))  # "passed" -> Verdict.PASSED


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
        return sum(o.outcome is Verdict.PASSED for o in self.outcomes)

    @property
    def fraction_passed(self) -> float:
        return self.tests_passed / self.tests_total if self.tests_total else 0.0


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    """How to sample, per role (generator / solver); see conf/model/*.yaml."""

    n: int = 1  # completions per prompt
    temperature: float = 1.0
    top_p: float = 1.0
    # min-p sampling (0: off): drop the tokens less likely than min_p times the likeliest one.
    # It scales with the model's confidence, so a high temperature spreads over the plausible
    # tokens only (Nguyen et al. 2024); hf, vLLM and vLLM's OpenAI server apply it.
    min_p: float = 0.0
    max_tokens: int = 256  # new tokens per completion
    stop: tuple[str, ...] = ()  # cut the text before the first of these (excluded)
    seed: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.n, int) or self.n < 1:
            raise ValueError(f"SamplingParams.n must be an integer >= 1, got {self.n!r}")
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise ValueError(f"SamplingParams.temperature must be a finite number >= 0, got "
                             f"{self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"SamplingParams.top_p must be in (0, 1], got {self.top_p}")
        if not 0 <= self.min_p < 1:
            raise ValueError(f"SamplingParams.min_p must be in [0, 1), got {self.min_p}")
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
    family: TaskFamily
    topic: str
    description: str
    entry_point: str  # the reference's function
    signature: str  # e.g. "def add(a: int, b: int) -> int:"
    tests: TestSuite  # examples computed by running the reference (hidden: they grade)
    reference: str  # a full reference solution (passes every test)
    buggy: str | None = None  # repair family: the mutant whose bug the tests expose
    visible: tuple[IOExample, ...] = ()  # shown in the solver's prompt (predict: the question)
    # the most examples a prompt may show (the hint lever): admission checked that a table of
    # them plus a guess, and a repair task's bug, still fail (None: the visible ones)
    most_shown: int | None = None
    limits: Limits = Limits()
    source: TaskSource = TaskSource.GENERATED
    generator_version: int = -1  # weights version of the generator; -1 for seed tasks


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One solver attempt at a task."""

    candidate_id: str  # f"{task_id}/r{round}/{index}"
    task_id: str
    code: str  # the full program checked against the task's tests
    solver_version: int
    prompt_tokens: int
    completion_tokens: int
    # the solver's draws that gave this text (one copy is kept): pass rates count each draw
    draws: int = 1


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
    # what the harness's own coding of the task's calls can cost in the candidate's process,
    # where a program can replace it: compare() tells two passes apart only beyond it
    # (evaluation/scoring.py, codec_margins); 0 where the task is unknown or has no examples
    codec_cpu_s: float = 0.0
    codec_mb: float = 0.0


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
    role: Role = Role.SOLVER  # generator pairs: candidate ids are generator-output ids


@dataclasses.dataclass(frozen=True)
class Demonstration:
    """A supervised example for the SFT warm start: a role's prompt and the text it should write
    after it (a seed task's solution for the solver, the seed task itself for the generator)."""

    task_id: str
    prompt: str
    completion: str
    role: Role


@dataclasses.dataclass(frozen=True)
class CompletionGroup:
    """GRPO's group: one prompt, K >= 2 sampled completions (the text after the prompt, as the
    model wrote it) and their rewards. For candidate programs, `split_program` (tasks) gives the
    split DPO uses."""

    prompt: str
    completions: tuple[str, ...]
    rewards: tuple[float, ...]
    task_id: str = ""
    weights_version: int | None = None  # the weights that wrote the completions (None: unknown)

    def __post_init__(self) -> None:
        if len(self.completions) != len(self.rewards):
            raise ValueError(f"group {self.task_id!r}: {len(self.completions)} completions but "
                             f"{len(self.rewards)} rewards")
        if len(self.completions) < 2:
            raise ValueError(f"group {self.task_id!r} has {len(self.completions)} completion(s); "
                             "group-relative advantages need K >= 2")
        if not all(math.isfinite(r) for r in self.rewards):
            raise ValueError(f"group {self.task_id!r} has a non-finite reward: {self.rewards}")
