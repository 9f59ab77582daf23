"""Typed records passed between the stages of spade-ray, with a JSON round trip.

Every record is a frozen dataclass; units are in the field names. `to_dict` / `from_dict` are the
one serialisation path (trace store, Ray, CLI `--json`), so a record read back equals the record
written.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import types
import typing
from typing import Any, TypeVar

R = TypeVar("R")


class TrainAlgorithm(enum.StrEnum):
    """What the learner optimises: preference pairs (DPO) or rewarded samples (GRPO, critic-free;
    PPO, with a learned critic)."""

    DPO = "dpo"
    GRPO = "grpo"
    PPO = "ppo"

    @property
    def on_groups(self) -> bool:
        """Trains on CompletionGroups (rewarded samples), not on preference pairs."""
        return self is not TrainAlgorithm.DPO


class Critic(enum.StrEnum):
    """PPO's value model (learner/critic.py): its own LoRA adapter on the policy's base, or a
    value head on the policy's trunk."""

    LORA = "lora"
    HEAD = "head"


class KLMode(enum.StrEnum):
    """Where PPO puts the KL to the reference: a per-token reward penalty, or a loss term."""

    REWARD = "reward"
    LOSS = "loss"


class UpdateStatus(enum.StrEnum):
    """What the learn stage did in a round."""

    NONE = "none"  # collect-only run (learner=none)
    BUFFERING = "buffering"  # fewer items than an update needs: kept for the next round
    ACCEPTED = "accepted"
    REJECTED = "rejected"  # the gate rolled the update back (RoundMetrics.rejected_by says why)


class GateSignal(enum.StrEnum):
    """A validation signal that can reject an update (training.py's gate)."""

    PASS_AT_1 = "pass_at_1"
    HELDOUT_LOGP = "heldout_logp"


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
    family: TaskFamily
    topic: str
    description: str
    entry_point: str  # the reference's function
    signature: str  # e.g. "def add(a: int, b: int) -> int:"
    tests: TestSuite  # examples computed by running the reference (hidden: they grade)
    reference: str  # a full reference solution (passes every test)
    buggy: str | None = None  # repair family: the mutant whose bug the tests expose
    visible: tuple[IOExample, ...] = ()  # shown in the solver's prompt (predict: the question)
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
class WarmStart:
    """The SFT warm start before round 0 (learner.sft_warmup) and its gate's verdict."""

    demonstrations: int
    generator_demonstrations: int  # of those, the generator's (the rest: the solver's)
    epochs: int
    steps: int
    loss: float | None  # mean NLL per completion token over the steps
    update: UpdateStatus  # accepted, or rejected (the base weights are served again)
    pass_at_1_before: float | None
    pass_at_1_after: float | None
    heldout_logp_before: float | None
    heldout_logp_after: float | None
    rejected_by: tuple[GateSignal, ...] = ()
    wall_s: float = 0.0


@dataclasses.dataclass(frozen=True)
class LearnOutcome:
    """What the learn stage did in a round; its fields are RoundMetrics' learner fields."""

    update: UpdateStatus
    learner_step: int
    learner_loss: float | None = None
    gate_pass_at_1: float | None = None  # validation pass@1 with the update's weights
    # the policy's mean token log-prob on held-out reference solutions after the update
    gate_heldout_logp: float | None = None
    rejected_by: tuple[GateSignal, ...] = ()  # the gate signals that rejected the update
    # the algorithm's other figures, means over the update's steps (DPO's accuracy and margin,
    # PPO's value loss, KL and clip fraction, ...): (name, value), sorted
    learner_stats: tuple[tuple[str, float], ...] = ()
    learner_busy_s: float = 0.0  # the learner's own time in the update (overlapped or not)
    stale_items: int = 0  # items refused as older than loop.max_staleness versions
    trained_round: int | None = None  # the round whose items it trained on (loop.overlap)


@dataclasses.dataclass(frozen=True)
class RoundMetrics:
    """What one self-play round did, for the metrics file, W&B, plots and the summary table."""

    run_id: str
    round: int
    generator_version: int  # the weights that served this round (its update comes after)
    solver_version: int
    # HumanEval subset pass@1 of the weights the engines serve after the round's update (a
    # rejected update's own figure is gate_pass_at_1); None when not measured
    validation_pass_at_1: float | None
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
    # the learner's fields: a LearnOutcome's (the defaults: a collect-only run)
    update: UpdateStatus = UpdateStatus.NONE
    learner_step: int = 0
    learner_loss: float | None = None
    gate_pass_at_1: float | None = None
    gate_heldout_logp: float | None = None
    rejected_by: tuple[GateSignal, ...] = ()
    learner_stats: tuple[tuple[str, float], ...] = ()  # LearnOutcome.learner_stats
    learner_busy_s: float = 0.0
    stale_items: int = 0
    trained_round: int | None = None
    engine_busy_s: float = 0.0  # time the rollout engines had a request in flight
    new_task_candidates: int = 0  # what new_task_pass_rate is a fraction of
    sandbox_reruns: int = 0  # candidates whose execution was re-run after a sandbox_error
    sandbox_errors: int = 0  # candidates still sandbox_error after the re-run (not in pairs)
    hack_suspects: int = 0  # candidates whose check found evidence of probing the grader
    pairs_from_generated: int = 0  # solver pairs on tasks generated in this run (not seeds)
    generator_pairs: int = 0  # pairs of the generator role (counted in `pairs` too)
    generator_reward_mean: float | None = None  # over the round's rewarded generator outputs
    family_tasks: tuple[tuple[str, int], ...] = ()  # (family, admitted generated tasks)
    family_pairs: tuple[tuple[str, int], ...] = ()  # (family, solver pairs)
    topic_tasks: tuple[tuple[str, int], ...] = ()  # (topic, admitted generated tasks)
    # co-evolution control (tasks/control.py): the band the new-task pass rate aims at, the
    # difficulty level the generator was asked for (+ harder, - easier), the generator's
    # difficulty (mean 1 - pass rate over this round's generated tasks), their diversity
    # (1 - mean pairwise similarity), the collapse evidence, and what an alarm did
    difficulty_band: tuple[float, ...] = ()
    control_level: int = 0
    solver_hints: int | None = None  # examples codegen/repair prompts showed (None: visible)
    generator_difficulty: float | None = None
    task_diversity: float | None = None
    collapse_evidence: tuple[str, ...] = ()
    collapse_alarm: tuple[str, ...] = ()  # the evidence, when it raised the alarm
    generator_rollback: int | None = None  # the version served again after the alarm
    hard_tasks_injected: int = 0  # hardest seeds replayed because the last round alarmed
    validation_tiers: tuple[tuple[str, float], ...] = ()  # (tier, pass@1) of the served weights
    warm_start: WarmStart | None = None  # round 0 of a run that began with an SFT warm start

    @property
    def valid_task_rate(self) -> float:
        return self.tasks_valid / self.tasks_proposed if self.tasks_proposed else 0.0


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


@dataclasses.dataclass(frozen=True)
class LearnerParams:
    """How the learner trains (conf/learner/*.yaml `params`): checked when the config is read,
    before any actor is placed. `lora_rank` 0 = full fine-tuning; `bf16` None = where the
    hardware supports it; `deepspeed_config` None = the plain torch engine (a relative path is
    resolved against the repository wherever the actor runs); GRPO and PPO count
    `min_pairs_per_update` and `micro_batch_size` in groups. `clip_eps` and `kl_coef` are GRPO's
    and PPO's; `critic` ... `gae_lambda` are PPO's alone (learner/ppo.py)."""

    algorithm: TrainAlgorithm = TrainAlgorithm.DPO
    lora_rank: int = 16
    lora_alpha: int | None = None
    lr: float = 5e-5
    beta: float = 0.1
    label_smoothing: float = 0.0
    dpo_loss_type: str = "sigmoid"  # or "ipo"
    rpo_alpha: float = 0.0
    clip_eps: float = 0.2
    kl_coef: float = 0.04
    weight_decay: float = 0.0
    warmup_steps: int = 0
    max_grad_norm: float = 1.0
    deepspeed_config: str | None = None
    bf16: bool | None = None
    min_pairs_per_update: int = 8
    micro_batch_size: int = 2
    grad_accum: int = 1
    max_length: int = 1024
    activation_checkpointing: bool = False
    seed: int = 0
    critic: Critic = Critic.LORA
    kl_mode: KLMode = KLMode.REWARD
    ppo_epochs: int = 2
    value_clip: float = 0.2
    vf_coef: float = 0.1
    gamma: float = 1.0
    gae_lambda: float = 0.95

    def __post_init__(self) -> None:
        object.__setattr__(self, "algorithm", TrainAlgorithm(self.algorithm))
        for name, kind in (("critic", Critic), ("kl_mode", KLMode)):
            value = getattr(self, name)
            if value not in tuple(kind):
                raise ValueError(f"learner {name}={value!r}: use one of "
                                 f"{[str(k) for k in kind]}")
            object.__setattr__(self, name, kind(value))
        if self.lr <= 0:
            raise ValueError(f"learner lr must be > 0, got {self.lr}")
        for name in ("min_pairs_per_update", "micro_batch_size", "grad_accum"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"learner {name} must be an integer >= 1, got {value!r}")
        if not isinstance(self.lora_rank, int) or self.lora_rank < 0:
            raise ValueError(f"learner lora_rank must be an integer >= 0 (0: full fine-tuning), "
                             f"got {self.lora_rank!r}")
        if self.algorithm is TrainAlgorithm.PPO:
            self._check_ppo()

    def _check_ppo(self) -> None:
        if not isinstance(self.ppo_epochs, int) or self.ppo_epochs < 1:
            raise ValueError(f"learner ppo_epochs must be an integer >= 1, got "
                             f"{self.ppo_epochs!r}")
        for name in ("clip_eps", "value_clip", "vf_coef"):
            if getattr(self, name) <= 0:
                raise ValueError(f"learner {name} must be > 0, got {getattr(self, name)}")
        for name in ("gamma", "gae_lambda"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"learner {name} must lie in [0, 1], got {getattr(self, name)}")
        if self.kl_coef < 0:
            raise ValueError(f"learner kl_coef must be >= 0, got {self.kl_coef}")
        if self.critic is Critic.LORA and self.lora_rank == 0:
            raise ValueError("learner critic='lora' is an adapter on the LoRA policy's base; "
                             "with lora_rank=0 (full fine-tuning) use critic='head'")
        if self.critic is Critic.LORA and self.activation_checkpointing:
            raise ValueError("learner critic='lora' with activation_checkpointing: backward "
                             "would recompute the critic's layers under the policy's adapter; "
                             "turn one of them off (critic='head' works with it)")


@dataclasses.dataclass(frozen=True)
class RoundState:
    """What the next round (or a resumed run) carries over from a completed one."""

    archive: tuple[Task, ...] = ()  # generated tasks the generator and solver see again
    replay_cursor: int = 0  # where the next round's replayed tasks start in seeds + archive
    learner_checkpoint: str | None = None  # the last accepted learner state
    weights_version: int = 0  # the version the engines serve
    # validation pass@1 of the served weights: what the next update's gate compares against
    served_pass_at_1: float | None = None
    # the best held-out log-prob of the run's accepted weights: the log-prob gate's anchor
    best_heldout_logp: float | None = None
    # co-evolution control (tasks/control.py): the generator's difficulty level, the last
    # measured pass rate of each known task (task id, rate), the hardest seeds to replay next
    # round after a collapse alarm, and the last state no collapse evidence was seen in
    control_level: int = 0
    task_pass_rates: tuple[tuple[str, float], ...] = ()
    inject: tuple[str, ...] = ()
    good_checkpoint: str | None = None
    good_version: int = 0
    good_pass_at_1: float | None = None
    warm_start: WarmStart | None = None  # what the warm start did, until round 0 records it
    # loop.overlap: the completed round's items, which the next round's update trains on while
    # that round generates (a resumed run trains them again from `learner_checkpoint`)
    pending_pairs: tuple[PreferencePair, ...] = ()
    pending_groups: tuple[CompletionGroup, ...] = ()


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
    if origin in (typing.Union, types.UnionType):  # X | None: X's conversion, or None
        if value is None:
            return None
        inner = [a for a in typing.get_args(hint) if a is not type(None)]
        return _convert(inner[0], value) if len(inner) == 1 else value
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return hint(value)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return from_dict(hint, value)
    if origin is tuple and value is not None:
        (item_hint, _ellipsis) = typing.get_args(hint)
        return tuple(_convert(item_hint, v) for v in value)
    return value
