"""Structured config: the schema of each conf/ group, validated once and turned into records.

Components never see the config object: `role_sampling()`, `sandbox_limits()` and
`validate_learner()` turn the groups into the flat typed values the stages take (DESIGN.md,
style 3); app.py turns the `model` group into cluster.py's RoleSpecs. Reading the schema loads
neither Ray nor torch.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

from omegaconf import DictConfig, OmegaConf

from spade_ray.evaluation.humaneval import HumanEvalProblem, load_problems
from spade_ray.execution import BACKENDS as SANDBOX_BACKENDS
from spade_ray.execution.executor import Placement
from spade_ray.preferences.generator import GeneratorReward
from spade_ray.records import (
    LearnerParams,
    Limits,
    Role,
    SamplingParams,
    TaskFamily,
    TrainAlgorithm,
)
from spade_ray.rollout.backend import BACKENDS
from spade_ray.tasks.admission import AdmissionConfig
from spade_ray.tasks.control import ControlConfig

ROLES = ("generator", "solver")
NO_LEARNER = "none"  # collect-only rounds
LEARNERS = (NO_LEARNER, *TrainAlgorithm)
STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")  # Ray placement strategies


class ConfigError(ValueError):
    """A setting `spade-ray run` refuses before it starts: printed as one line, exit status 2."""


@dataclasses.dataclass
class SamplingConfig:
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    min_p: float = 0.0
    max_tokens: int = 256
    stop: list[str] = dataclasses.field(default_factory=list)
    seed: int | None = None


@dataclasses.dataclass
class RoleConfig:
    backend: str = "hf"
    model: str = "tiny"
    engines: int = 1
    gpus_per_engine: int = 0
    cpus_per_engine: float = 1.0
    backend_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    sampling: SamplingConfig = dataclasses.field(default_factory=SamplingConfig)


@dataclasses.dataclass
class ModelConfig:
    colocate: bool = False
    placement_strategy: str = "PACK"
    prompts: str = "fewshot"
    roles: dict[str, RoleConfig] = dataclasses.field(default_factory=dict)
    # Ray custom resources added to every engine and learner bundle, so that they are placed only
    # on the nodes that have them, e.g. {spade_model: 0.001} with model nodes started with
    # `--resources='{"spade_model": 1}'`. Empty: any node with the CPUs and GPUs.
    node_resources: dict[str, float] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class CapsConfig:
    """Per-round caps (None: uncapped): reaching one stops new work; what is in flight ends."""

    tokens_generator: int | None = None
    tokens_solver: int | None = None
    sandbox_cpu_s: float | None = None
    wall_s: float | None = None  # per round
    tasks: int | None = None  # valid generated tasks per round

    def __post_init__(self) -> None:
        # A cap <= 0 is reached before any work: the round would run empty, silently.
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ValueError(f"loop.caps.{field.name} must be > 0 or null (uncapped), "
                                 f"got {value}")


@dataclasses.dataclass
class LoopConfig:
    rounds: int = 1
    tasks_per_round: int = 4
    replay_tasks_per_round: int = 0
    replay_archive_share: float = 0.5  # of the replayed tasks, at most this share (rounded up)
    # from this run's archive of generated tasks, the newest first; seeds fill the rest
    chunk_size: int = 2
    candidates: int = 4
    few_shot: int = 2  # solved examples in a solver prompt
    generator_few_shot: int = 4  # programs in a generator prompt (fewer: the model copies them)
    topics: list[str] = dataclasses.field(default_factory=list)
    pair_margin: float = 0.0
    max_similarity: float = 0.8  # a new task this close to a known one is a near-duplicate
    families: list[str] = dataclasses.field(
        default_factory=lambda: [str(f) for f in TaskFamily])  # round-robin over prompts
    generator_reward: str = GeneratorReward.BAND  # preferences.generator
    frame_tokens: int = 96  # continue generator outputs that lack inputs (0: off)
    # tasks.admission.AdmissionConfig's fields (its defaults where absent)
    admission: dict[str, Any] = dataclasses.field(default_factory=dict)
    # tasks.control.ControlConfig's fields: difficulty band, diversity, collapse and rollback
    control: dict[str, Any] = dataclasses.field(default_factory=dict)
    seed: int = 0
    caps: CapsConfig = dataclasses.field(default_factory=CapsConfig)
    archive_size: int = 200  # 0: keep no generated task (replay and exemplars: seeds only)
    # Round r+1 generates while the learner trains on round r's items (training.py); the
    # learner drops items written by weights more than max_staleness versions old (null: never)
    overlap: bool = False
    max_staleness: int | None = 1


@dataclasses.dataclass
class TraceConfig:
    max_text_chars: int = 20_000  # stdout/stderr/raw model text kept per row (head + tail)
    keep_text_rounds: int | None = 20  # older rounds' texts are pruned; null: keep all
    max_mb: float | None = 2048  # past this, texts are pruned to the last round; null: no limit

    def __post_init__(self) -> None:
        # TraceStore checks the first two as well, but only once Ray is up (app.open_records).
        if self.max_text_chars < 200:
            raise ValueError(f"trace.max_text_chars must be >= 200 (a head and a tail), got "
                             f"{self.max_text_chars}")
        if self.keep_text_rounds is not None and self.keep_text_rounds < 1:
            raise ValueError(f"trace.keep_text_rounds must be >= 1 or null (keep all), got "
                             f"{self.keep_text_rounds}")
        # <= 0 would prune every older round's texts after each round
        if self.max_mb is not None and not (math.isfinite(self.max_mb) and self.max_mb > 0):
            raise ValueError(f"trace.max_mb must be > 0 or null (no limit), got {self.max_mb}")

    @property
    def max_bytes(self) -> int | None:
        return None if self.max_mb is None else int(self.max_mb * 2**20)


def validate_trace(cfg: DictConfig | dict) -> TraceConfig:
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(TraceConfig), cfg))


@dataclasses.dataclass
class ValidationConfig:
    problems: int = 8  # HumanEval subset per round; 164 = all (of `tiers`); 0 = no validation
    samples_per_problem: int = 1
    max_tokens: int = 256
    # draw the subset from these tiers only (humaneval.TIERS: easy, medium, hard); empty: all
    tiers: list[str] = dataclasses.field(default_factory=list)

    def load(self, seed: int) -> list[HumanEvalProblem]:
        """The run's fixed validation problems: `problems` of `tiers`, chosen by `seed`."""
        if not self.problems:
            return []
        pool = len(load_problems(tiers=self.tiers))
        return load_problems(self.problems if self.problems < pool else None, seed, self.tiers)


@dataclasses.dataclass
class SandboxConfig:
    backend: str = "local"
    placement: str = Placement.POOL  # execution.Placement (OmegaConf matches enums by name)
    workers: int | None = None  # driver: worker processes; pool: actors (None: one per CPU)
    cpus_per_worker: float = 1.0  # pool: each actor's CPUs (a fraction shares a core)
    # pool: Ray custom resources each actor requests, so that it runs only on the nodes that have
    # them, e.g. {spade_sandbox: 1} with sandbox nodes started with
    # `--resources='{"spade_sandbox": 100}'`. Empty: any node with a free CPU.
    resources: dict[str, float] = dataclasses.field(default_factory=dict)
    limits: dict[str, float] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class LearnerConfig:
    name: str = NO_LEARNER  # none | dpo | grpo | ppo
    cpus: float = 1.0  # per rank
    gpus: int = 0  # per rank
    ranks: int = 1  # data-parallel DeepSpeed ranks, one actor and bundle each
    min_pairs_per_update: int = 8
    gate_tolerance: float = 0.05  # validation pass@1 drop that rejects an update
    # how far (nats) the mean token log-prob of held-out reference solutions may fall below the
    # best the run's accepted weights had (the base weights' included) before an update is
    # rejected; None: that gate signal is off
    gate_logp_tolerance: float | None = None
    params: dict[str, Any] = dataclasses.field(default_factory=dict)  # records.LearnerParams
    # SFT on the seed pool before round 0 (SftWarmup's keys); null: off
    sft_warmup: dict[str, Any] | None = None


@dataclasses.dataclass(frozen=True)
class SftWarmup:
    """learner.sft_warmup: supervised fine-tuning on the seed pool's tasks and solutions before
    round 0 (tasks/demonstrations.py), then its own gate (training.Trainer.warm_start)."""

    epochs: int = 1  # passes over the demonstrations
    lr_scale: float = 4.0  # the learner's params.lr times this, for the warm start only
    roles: tuple[str, ...] = ("solver", "generator")  # whose demonstrations
    gate_tolerance: float = 0.05  # validation pass@1 drop that rejects the warm start
    gate_logp_tolerance: float | None = 0.1  # held-out log-prob drop below the base's; None: off

    def __post_init__(self) -> None:
        object.__setattr__(self, "roles", tuple(self.roles))
        if not isinstance(self.epochs, int) or self.epochs < 1:
            raise ValueError(f"learner.sft_warmup.epochs must be an integer >= 1, got "
                             f"{self.epochs!r}")
        if self.lr_scale <= 0:
            raise ValueError(f"learner.sft_warmup.lr_scale must be > 0, got {self.lr_scale}")
        wrong = [r for r in self.roles if r not in tuple(Role)]
        if wrong or not self.roles:
            raise ValueError(f"learner.sft_warmup.roles={list(self.roles)}: list one or more "
                             f"of {[str(r) for r in Role]}")
        if self.gate_tolerance < 0 or (self.gate_logp_tolerance or 0) < 0:
            raise ValueError("learner.sft_warmup gate tolerances must be >= 0")


def sft_warmup(learner: LearnerConfig) -> SftWarmup | None:
    """The warm start's typed settings (None: off), a misspelt key named."""
    if learner.sft_warmup is None:
        return None
    if learner.name == NO_LEARNER:
        raise ValueError("learner.sft_warmup needs a learner (learner=dpo, grpo or ppo)")
    return _typed(SftWarmup, dict(learner.sft_warmup), "learner.sft_warmup")


def validate_learner(cfg: DictConfig | dict) -> tuple[LearnerConfig, LearnerParams | None]:
    """The learner group and its typed training parameters (None for learner=none): a wrong
    key or value fails here, before anything is placed."""
    merged = OmegaConf.merge(OmegaConf.structured(LearnerConfig), cfg)
    learner: LearnerConfig = OmegaConf.to_object(merged)
    if learner.name not in LEARNERS:
        raise ValueError(f"learner={learner.name!r}: use one of {LEARNERS}")
    if learner.name != NO_LEARNER and learner.cpus <= 0:  # each rank's bundle needs a CPU share
        raise ValueError(f"learner.cpus must be > 0 with learner={learner.name}, got "
                         f"{learner.cpus}")
    if learner.gate_tolerance < 0:
        raise ValueError(f"learner.gate_tolerance must be >= 0, got {learner.gate_tolerance}")
    if learner.ranks < 1:
        raise ValueError(f"learner.ranks must be >= 1, got {learner.ranks}")
    if learner.gate_logp_tolerance is not None and learner.gate_logp_tolerance < 0:
        raise ValueError(f"learner.gate_logp_tolerance must be >= 0 or null (off), got "
                         f"{learner.gate_logp_tolerance}")
    sft_warmup(learner)  # checked here, used by the loop
    if learner.name == NO_LEARNER:
        return learner, None
    known = {f.name for f in dataclasses.fields(LearnerParams)} - {"algorithm",
                                                                   "min_pairs_per_update"}
    unknown = set(learner.params) - known
    if unknown:
        raise ValueError(f"learner.params: unknown keys {sorted(unknown)}; known: {sorted(known)}")
    params = LearnerParams(algorithm=TrainAlgorithm(learner.name),
                           min_pairs_per_update=learner.min_pairs_per_update, **learner.params)
    if learner.ranks > 1 and not params.deepspeed_config:
        raise ValueError(f"learner.ranks={learner.ranks} needs learner.params.deepspeed_config "
                         "(e.g. conf/deepspeed/zero2.json): the plain torch engine trains one rank")
    return learner, params


def validate_loop(cfg: DictConfig | dict) -> LoopConfig:
    loop: LoopConfig = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(LoopConfig), cfg))
    for name in ("rounds", "tasks_per_round", "chunk_size", "candidates"):
        if getattr(loop, name) < 1:
            raise ValueError(f"loop.{name} must be >= 1, got {getattr(loop, name)}")
    # a negative count slices prompts and replay from the end (`pool[:-1]`: all but one)
    for name in ("few_shot", "generator_few_shot", "replay_tasks_per_round", "frame_tokens",
                 "archive_size"):
        if getattr(loop, name) < 0:
            raise ValueError(f"loop.{name} must be >= 0, got {getattr(loop, name)}")
    if not 0.0 <= loop.pair_margin <= 1.0:  # a difference of test fractions
        raise ValueError(f"loop.pair_margin must be in [0, 1], got {loop.pair_margin}")
    if not 0.0 < loop.max_similarity <= 1.0:  # 0 makes every new task a near-duplicate
        raise ValueError(f"loop.max_similarity must be in (0, 1], got {loop.max_similarity}")
    if not loop.topics:
        raise ValueError("loop.topics is empty: list at least one topic")
    if not 0.0 <= loop.replay_archive_share <= 1.0:
        raise ValueError(f"loop.replay_archive_share must be in [0, 1], got "
                         f"{loop.replay_archive_share}")
    families = [str(f) for f in TaskFamily]
    wrong = [f for f in loop.families if f not in families]
    if wrong or not loop.families:
        raise ValueError(f"loop.families={loop.families}: list one or more of {families}")
    loop.families = [TaskFamily(f) for f in loop.families]
    if loop.generator_reward not in tuple(GeneratorReward):
        raise ValueError(f"loop.generator_reward={loop.generator_reward!r}: use one of "
                         f"{[str(r) for r in GeneratorReward]}")
    loop.generator_reward = GeneratorReward(loop.generator_reward)
    if loop.max_staleness is not None and loop.max_staleness < (1 if loop.overlap else 0):
        raise ValueError(f"loop.max_staleness={loop.max_staleness}: an overlapped update trains "
                         "on items one version old, so with loop.overlap it must be >= 1"
                         if loop.overlap else
                         f"loop.max_staleness={loop.max_staleness}: a version count, >= 0 "
                         "(null: no bound)")
    admission_config(loop)  # AdmissionConfig checks the values
    control_config(loop)  # so does ControlConfig
    return loop


def admission_config(loop: LoopConfig) -> AdmissionConfig:
    return _typed(AdmissionConfig, loop.admission, "loop.admission")


def control_config(loop: LoopConfig) -> ControlConfig:
    return _typed(ControlConfig, loop.control, "loop.control")


def _typed(cls: type, values: dict[str, Any], where: str) -> Any:
    """`cls(**values)` (which checks the values), a misspelt key named first."""
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = set(values) - known
    if unknown:
        raise ValueError(f"{where}: unknown keys {sorted(unknown)}; known: {sorted(known)}")
    return cls(**values)


def validate_validation(cfg: DictConfig | dict) -> ValidationConfig:
    merged = OmegaConf.merge(OmegaConf.structured(ValidationConfig), cfg)
    validation: ValidationConfig = OmegaConf.to_object(merged)
    try:
        pool = len(load_problems(tiers=validation.tiers))
    except ValueError as e:
        raise ValueError(f"validation.tiers: {e}") from None
    if not 0 <= validation.problems <= pool:
        raise ValueError(f"validation.problems must be 0..{pool} (the problems of tiers "
                         f"{validation.tiers or 'all'}), got {validation.problems}")
    # checked here, not at the end of round 0 where stages.validate samples with them
    for name in ("samples_per_problem", "max_tokens"):
        if getattr(validation, name) < 1:
            raise ValueError(f"validation.{name} must be >= 1, got {getattr(validation, name)}")
    return validation


def sandbox_limits(cfg: DictConfig | dict) -> tuple[SandboxConfig, Limits]:
    merged = OmegaConf.merge(OmegaConf.structured(SandboxConfig), cfg)
    sandbox: SandboxConfig = OmegaConf.to_object(merged)
    if sandbox.placement not in tuple(Placement):
        raise ValueError(f"sandbox.placement={sandbox.placement!r}: use one of "
                         f"{[str(p) for p in Placement]}")
    sandbox.placement = Placement(sandbox.placement)
    if sandbox.backend not in SANDBOX_BACKENDS:  # else found once Ray and the run dir are up
        raise ValueError(f"sandbox.backend={sandbox.backend!r}: use one of "
                         f"{list(SANDBOX_BACKENDS)}")
    if sandbox.workers is not None and sandbox.workers < 1:
        raise ValueError(f"sandbox.workers must be >= 1 or null (one per CPU), got "
                         f"{sandbox.workers}")
    if sandbox.cpus_per_worker <= 0:
        raise ValueError(f"sandbox.cpus_per_worker must be > 0, got {sandbox.cpus_per_worker}")
    check_resources("sandbox.resources", sandbox.resources, "sandbox.cpus_per_worker")
    if sandbox.resources and sandbox.placement is Placement.DRIVER:
        raise ValueError(f"sandbox.resources={sandbox.resources} places pool actors, but "
                         "sandbox.placement=driver runs the sandbox in the driver's own "
                         "processes: set sandbox.placement=pool or drop sandbox.resources")
    defaults = Limits()
    unknown = set(sandbox.limits) - {f.name for f in dataclasses.fields(Limits)}
    if unknown:
        raise ValueError(f"sandbox.limits: unknown keys {sorted(unknown)}")
    for key, value in sandbox.limits.items():
        if not math.isfinite(value):  # int(nan) below would fail without naming the key
            raise ValueError(f"sandbox.limits.{key} must be a finite positive number, got "
                             f"{value}")
        # int() below would make memory_mb=0.5 a 0, which the error then named instead of 0.5
        if isinstance(getattr(defaults, key), int) and not float(value).is_integer():
            raise ValueError(f"sandbox.limits.{key} must be a whole number, got {value}")
    # YAML numbers arrive as floats here; whole-number limits (MB, counts) must stay ints.
    typed = {k: type(getattr(defaults, k))(v) for k, v in sandbox.limits.items()}
    return sandbox, Limits(**typed)


def validate_model(cfg: DictConfig | dict) -> ModelConfig:
    """Typed, checked model config; errors name the key and the value."""
    merged = OmegaConf.merge(OmegaConf.structured(ModelConfig), cfg)
    model: ModelConfig = OmegaConf.to_object(merged)
    if set(model.roles) != set(ROLES):
        raise ValueError(f"model.roles must define exactly {ROLES}, got {sorted(model.roles)}")
    if model.placement_strategy not in STRATEGIES:
        raise ValueError(f"model.placement_strategy={model.placement_strategy!r}: use one of "
                         f"{STRATEGIES}")
    for name, role in model.roles.items():
        if role.backend not in BACKENDS:
            raise ValueError(f"model.roles.{name}.backend={role.backend!r}: use one of "
                             f"{BACKENDS}")
        role_sampling(role)  # SamplingParams checks the values
    check_resources("model.node_resources", model.node_resources,
                    "model.roles.<role>.cpus_per_engine / gpus_per_engine")
    return model


# Ray's own resources, set by their own keys, never by name (ray/_common/ray_option_utils.py
# refuses CPU and GPU in `resources`; memory and object_store_memory are node capacities).
_RAY_RESOURCES = ("CPU", "GPU", "memory", "object_store_memory")
_RESOURCE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:/-]*")
_RESOURCE_UNIT = 1e-4  # Ray's finest resource quantity (RESOURCE_UNIT_SCALING = 10000)


def check_resources(key: str, resources: dict[str, float], instead: str) -> None:
    """Custom Ray resources: names a `ray start --resources` JSON can carry, positive amounts
    Ray can represent. `instead`: the keys that set CPUs and GPUs."""
    for name, amount in resources.items():
        if name in _RAY_RESOURCES:
            raise ValueError(f"{key}.{name}: {name} is Ray's own resource, set by {instead}; "
                             "name a custom resource here (e.g. spade_model, spade_sandbox)")
        if not _RESOURCE_NAME.fullmatch(name):
            raise ValueError(f"{key}: resource name {name!r} must start with a letter or _ and "
                             "hold only letters, digits and _ . : / -")
        if isinstance(amount, bool) or not isinstance(amount, (int, float)) \
                or not math.isfinite(amount) or amount < _RESOURCE_UNIT:
            raise ValueError(f"{key}.{name}={amount!r}: use a number >= {_RESOURCE_UNIT} (Ray's "
                             "finest amount); a tiny amount such as 0.001 only selects the nodes")


def role_sampling(role: RoleConfig) -> SamplingParams:
    s = role.sampling
    return SamplingParams(n=s.n, temperature=s.temperature, top_p=s.top_p, min_p=s.min_p,
                          max_tokens=s.max_tokens, stop=tuple(s.stop), seed=s.seed)
