"""Scripted models for real rounds (loop.run_rounds with a real sandbox, real admission and a
real trace): engines and a trainer that are test doubles of RoleEngines and training.Trainer
whose "weights" are labels. An update publishes the label the script learns, a rollback
publishes the label its checkpoint held (the real Trainer is tested in test_training.py)."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools

from spade_ray import loop, stages
from spade_ray.config import ValidationConfig, admission_config, validate_loop
from spade_ray.recorder import Recorder
from spade_ray.records import (
    Completion,
    LearnOutcome,
    Limits,
    RoundState,
    SamplingParams,
    TaskFamily,
    TrainAlgorithm,
    UpdateStatus,
)
from spade_ray.rollout.actor import BusyClock, GenerationResult
from spade_ray.tasks.control import ControlConfig
from spade_ray.tasks.format import render_proposal
from spade_ray.tasks.seeds import load_seed_proposals, load_seed_tasks
from spade_ray.tasks.templates import load_prompts
from spade_ray.tracking import MetricsSink, TraceStore

LIMITS = Limits(timeout_s=5, cpu_s=5, memory_mb=256)


class Script:
    """What the scripted models write. Healthy: the next unused seed program (distinct,
    varied); collapsed: `x + n`, one near-copy after another. The solver gets two of its four
    candidates right on a healthy task and all four on a trivial one (predict: it answers k)."""

    def __init__(self, healthy_programs):
        self.healthy = iter(healthy_programs)
        self.trivial = itertools.count(1)
        self.references: dict[str, str] = {}  # description -> reference

    def task(self, weights: str) -> str:
        if weights == "healthy":
            proposal = next(self.healthy)
            description, reference, calls = (proposal.description, proposal.reference,
                                             proposal.calls)
        else:
            n = next(self.trivial)
            description = f"Return x plus {n}."
            reference = f"def plus_{n}(x: int) -> int:\n    return x + {n}\n"
            calls = tuple(f"plus_{n}({x})" for x in (0, 1, 5, -3))
        self.references[description] = reference
        return render_proposal(description, reference, calls)

    def candidate(self, prompt: str, k: int) -> str:
        if "### Task\n" not in prompt:  # a predict task (a replayed seed): answer k
            return f"{k}\n"
        description = prompt.rsplit("### Task\n", 1)[1].split("\n", 1)[0]
        reference = self.references[description]
        body = reference.split(":\n", 1)[1]  # after the signature the prompt ends with
        trivial = description.startswith("Return x plus")
        return body + f"    # {k}\n" if trivial or k < 2 else f"    return {k}\n"


class ScriptedEngines:
    """RoleEngines' interface over a script; `weights` is a label."""

    def __init__(self, role: str, write):
        self.role, self.write = role, write
        self.weights, self.weights_version = "healthy", 0
        self.clock = BusyClock()

    @property
    def busy_s(self) -> float:
        return self.clock.seconds()

    def generate(self, prompts, sampling: SamplingParams) -> GenerationResult:
        with self.clock:
            return self._generate(prompts, sampling)

    def _generate(self, prompts, sampling: SamplingParams) -> GenerationResult:
        rows = [[Completion(self.write(self.weights, p, k), 10, 10, "stop", self.weights_version)
                 for k in range(sampling.n)] for p in prompts]
        return GenerationResult(rows, ())

    def update_weights(self, weights: str, version: int) -> None:
        self.weights, self.weights_version = weights, version


@dataclasses.dataclass
class ScriptedTrainer:
    """training.Trainer's interface: every update publishes `learns` and is accepted."""

    engines: list[ScriptedEngines]
    learns: str
    algorithm: TrainAlgorithm = TrainAlgorithm.DPO
    version: int = 0
    accepted_checkpoint: str = "ckpt-0"
    served_pass_at_1: float | None = None
    held: dict[str, str] = dataclasses.field(default_factory=lambda: {"ckpt-0": "healthy"})
    rollbacks: list[tuple[str, int]] = dataclasses.field(default_factory=list)

    trained: list[list] = dataclasses.field(default_factory=list)  # the items of each update

    def start_update(self, items):
        return list(items)

    def finish_update(self, items):
        if not items:
            return None
        self.trained.append(items)
        self.version += 1
        self._publish(self.learns)
        return self.learns

    def gate(self, published, validation) -> LearnOutcome:
        if published is None:
            return LearnOutcome(UpdateStatus.BUFFERING, self.version)
        self.accepted_checkpoint = f"ckpt-{self.version}"
        self.held[self.accepted_checkpoint] = published
        return LearnOutcome(UpdateStatus.ACCEPTED, self.version)

    def carry(self, state: RoundState) -> RoundState:
        return dataclasses.replace(state, learner_checkpoint=self.accepted_checkpoint,
                                   weights_version=self.version,
                                   served_pass_at_1=self.served_pass_at_1)

    def resume(self, state: RoundState) -> None:
        pass

    def roll_back(self, checkpoint: str, version: int, served_pass_at_1):
        if checkpoint == self.accepted_checkpoint:
            return None
        self.rollbacks.append((checkpoint, version))
        self.accepted_checkpoint = checkpoint
        self.version += 1
        self._publish(self.held[checkpoint])
        return version

    def _publish(self, weights: str) -> None:
        for engines in self.engines:
            engines.update_weights(weights, self.version)


def run_scripted(sandbox, tmp_path, learns: str, rounds: int = 5, trainer=None,
                 control: ControlConfig = ControlConfig(inject_hard=2), **loop_keys):
    """Rounds of the scripted models on the real loop; `trainer` (a ScriptedTrainer) carries
    over from an earlier call, as a resumed run's learner does."""
    proposals = [p for _, p in load_seed_proposals()]
    seed_references = {p.reference for p in proposals[:3]}
    seeds = tuple(t for t in load_seed_tasks(sandbox, LIMITS)
                  if t.reference in seed_references)
    script = Script(p for p in proposals[3:] if p.reference.startswith("def "))
    script.references.update((t.description, t.reference) for t in seeds)
    generator = ScriptedEngines("generator", lambda weights, _, __: script.task(weights))
    solver = ScriptedEngines("solver", lambda _, prompt, k: script.candidate(prompt, k))
    trainer = trainer or ScriptedTrainer([], learns)
    trainer.engines = [generator, solver]
    # Admitted on their own inputs: augmented, the collapsed generator's first task (`x + 1`,
    # an argument plus one: a guess of partial credit's floor) is trivial_passes:split and the
    # alarm comes a round later; these tests are of what comes after admission
    config = validate_loop({"rounds": rounds, "tasks_per_round": 2, "chunk_size": 2,
                            "candidates": 4, "topics": ["strings", "lists"],
                            "families": ["codegen"], "frame_tokens": 0,
                            "admission": {"augment_inputs": 0}, **loop_keys})
    with scripted_loop(sandbox, tmp_path, generator, solver, config, seeds=seeds,
                       trainer=trainer, control=control) as (run, _):
        return loop.run_rounds(run), trainer, generator


@contextlib.contextmanager
def scripted_loop(sandbox, tmp_path, generator, solver, config, seeds=(), trainer=None,
                  control: ControlConfig = ControlConfig(), outputs_per_prompt: int = 2,
                  few_shot: tuple[int, int] = (2, 1)):
    """The real loop's Run on scripted engines (`few_shot`: the generator's and the solver's
    exemplars), and its trace store, closed on leaving."""
    templates = load_prompts("fewshot")
    store = TraceStore(tmp_path / "trace.sqlite", "scripted")
    sink = MetricsSink(tmp_path, "scripted", {}, wandb_mode="disabled")
    run = loop.Run(
        recorder=Recorder("scripted", tmp_path, store, sink),
        generation=stages.Generation(generator, templates["generator"],
                                     SamplingParams(n=outputs_per_prompt), few_shot[0],
                                     config.max_similarity, LIMITS, admission_config(config)),
        solving=stages.Solving(solver, {f: templates[f] for f in TaskFamily}, False,
                               SamplingParams(n=4), few_shot[1], seeds),
        executor=sandbox, limits=LIMITS, loop=config, validation=ValidationConfig(problems=0),
        validation_problems=(), seeds=seeds, trainer=trainer, control=control)
    try:
        yield run, store
    finally:
        sink.close()
        store.close()
