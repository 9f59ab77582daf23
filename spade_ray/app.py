"""The `spade-ray run` Hydra app and `spade-ray eval`: config in, a running loop.Run out.

Part of the wiring layer: validates the composed config once, builds the components from flat
typed values (the Ray cluster and its engines, the executor, the trace store, the metrics sink,
the learner) and hands them to loop.run_rounds(). The run directory is fixed by the run name
(hydra.run.dir), so re-running the same command resumes the same run; one with other settings
(but its length and where its records go) is refused there (`check_settings`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

import datasets
import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from spade_ray import loop, stages
from spade_ray.cluster import Cluster, RoleSpec
from spade_ray.config import (
    ConfigError,
    LearnerConfig,
    LoopConfig,
    ModelConfig,
    SandboxConfig,
    TraceConfig,
    ValidationConfig,
    admission_config,
    control_config,
    role_sampling,
    sandbox_limits,
    sft_warmup,
    validate_learner,
    validate_loop,
    validate_model,
    validate_trace,
    validate_validation,
)
from spade_ray.connect import connect
from spade_ray.evaluation import humaneval
from spade_ray.execution import Executor, Placement, Sandbox
from spade_ray.recorder import Recorder
from spade_ray.records import LearnerParams, Limits, TaskFamily
from spade_ray.rollout.models import resolve_model
from spade_ray.tasks import decontamination
from spade_ray.tasks.seeds import load_seed_tasks
from spade_ray.tasks.templates import load_prompts
from spade_ray.tracking.metrics import MetricsSink, load_metrics, summary_table
from spade_ray.tracking.trace import TraceDamaged, TraceInUse, TraceStore
from spade_ray.training import Gate, Trainer

CONF_DIR = str(Path(__file__).resolve().parents[1] / "conf")
SETTINGS_FILE = "settings.json"  # in the run directory: the settings its rounds ran with
# What a resumed run may change: how many rounds it runs, and where its records go.
RESUMABLE = ("loop.rounds", "run_root", "trace.", "wandb.", "resume_check")


@hydra.main(config_path=CONF_DIR, config_name="config", version_base="1.3")
def hydra_main(cfg: DictConfig) -> None:
    hydra_cfg = HydraConfig.get()
    sweep_point = hydra_cfg.job.num if hydra_cfg.mode is RunMode.MULTIRUN else None
    try:
        run(cfg, Path(hydra_cfg.runtime.output_dir), sweep_point)
    except (ConfigError, TraceInUse, TraceDamaged) as e:  # bad input or a run dir in use or
        # damaged: one line, as cli.py's other commands (not Hydra's dump)
        print(f"spade-ray: error: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:  # the trace discards the unfinished round when the run resumes
        print("spade-ray: interrupted; run the same command again to resume after the last "
              "completed round", file=sys.stderr)
        sys.exit(130)


def run(cfg: DictConfig, run_dir: Path, sweep_point: int | None = None) -> None:
    """`sweep_point`: the job number within a Hydra multirun (each point is a run of its own,
    `<run_name>-<n>`, its W&B run grouped under the run name)."""
    # Every group is validated before anything is placed: a bad value fails in seconds.
    try:
        model = validate_model(cfg.model)
        loop_cfg = validate_loop(cfg.loop)
        validation = validate_validation(cfg.validation)
        sandbox_cfg, limits = sandbox_limits(cfg.sandbox)
        learner, params = validate_learner(cfg.learner)
        trace = validate_trace(cfg.trace)
        check_together(model, loop_cfg, params)
        role_specs(model)  # their engine counts and resources, checked before Ray starts
    except (ValueError, OmegaConfBaseException) as e:  # an unknown key (`+loop.bogus=3`) is
        # a KeyError of OmegaConf's, its type errors are ValueErrors
        raise ConfigError("; ".join(line.strip() for line in str(e).splitlines()
                                    if line.strip())) from e
    run_dir.mkdir(parents=True, exist_ok=True)
    run_id = str(cfg.run_name) if sweep_point is None else f"{cfg.run_name}-{sweep_point}"
    datasets.disable_progress_bars()  # one line per round on the console, no bars in between
    # before Ray starts: a run directory in use, damaged or orphaned fails in a second
    store, sink = open_records(cfg, trace, run_dir, run_id, loop_cfg.seed)
    print(f"run {run_id}: {run_dir} ({loop_cfg.rounds} rounds, model {model.roles['solver'].model}"
          f" on {model.roles['solver'].backend}, sandbox {sandbox_cfg.backend} on the "
          f"{sandbox_cfg.placement})", flush=True)
    try:
        connect(log_to_driver=False)  # RAY_ADDRESS (ray job submit) joins a cluster
        with Cluster(role_specs(model), model.colocate, model.placement_strategy,
                     learner_cpus=learner.cpus if params else 0.0,
                     learner_gpus=learner.gpus if params else 0,
                     learner_ranks=learner.ranks,
                     node_resources=model.node_resources) as cluster, \
                open_executor(sandbox_cfg, limits) as executor:
            admission = admission_config(loop_cfg)
            seeds = tuple(load_seed_tasks(executor, limits, admission))
            templates = load_prompts(model.prompts)
            problems = tuple(validation.load(loop_cfg.seed))
            solver_sampling = dataclasses.replace(role_sampling(model.roles["solver"]),
                                                  n=loop_cfg.candidates)
            the_run = loop.Run(
                recorder=Recorder(run_id, run_dir, store, sink),
                generation=stages.Generation(
                    cluster["generator"], templates["generator"],
                    role_sampling(model.roles["generator"]), loop_cfg.generator_few_shot,
                    loop_cfg.max_similarity, limits, admission, loop_cfg.frame_tokens,
                    held_out=decontamination.held_out(humaneval.load_problems())),
                solving=stages.Solving(
                    cluster["solver"], {f: templates[f] for f in TaskFamily},
                    templates["codegen"].chat, solver_sampling, loop_cfg.few_shot, seeds),
                executor=executor, limits=limits, loop=loop_cfg, validation=validation,
                validation_problems=problems, seeds=seeds,
                trainer=start_trainer(cluster, model, learner, params, problems, run_dir,
                                      loop_cfg.max_staleness) if params else None,
                control=control_config(loop_cfg),
                warm_start=sft_warmup(learner) if params else None)
            metrics = loop.run_rounds(the_run)
    finally:
        sink.close()
        store.close()
    print(summary_table(metrics), flush=True)
    held = [name for name in ("trace.sqlite", "pairs/", "metrics.jsonl", "plots/", "wandb/")
            if (run_dir / name).exists()]
    print(f"run directory: {run_dir} ({', '.join(held)})")


def check_settings(cfg: DictConfig, run_dir: Path, resumed: bool) -> None:
    """Record the run's settings in its directory, or, for a run that already completed
    rounds there, refuse other ones (but RESUMABLE's): resuming would mix two experiments in
    one trace, W&B run and learner. `resume_check=false` resumes with the new settings."""
    now = json.loads(json.dumps(_flat(OmegaConf.to_container(cfg, resolve=True)), default=str))
    path = run_dir / SETTINGS_FILE
    if resumed and path.is_file() and cfg.get("resume_check", True):
        try:
            before = json.loads(path.read_text())
        except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
            raise ConfigError(f"{path} is not readable JSON ({e}): restore it, or delete it to "
                              "resume with the current settings unchecked") from e
        changed = sorted(k for k in before.keys() | now.keys()
                         if before.get(k) != now.get(k) and not k.startswith(RESUMABLE))
        if changed:
            shown = "; ".join(f"{k}: {before.get(k)!r} -> {now.get(k)!r}" for k in changed[:5])
            raise ConfigError(
                f"{run_dir} holds rounds run with other settings ({len(changed)} differ: "
                f"{shown}); resuming would mix them in one trace. Give this run a directory of "
                f"its own (run_name=NAME), or resume with the new settings (resume_check=false)")
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(now, indent=1, sort_keys=True))
    os.replace(tmp, path)


def _flat(tree, prefix: str = "") -> dict:
    """A nested config as {dotted key: value}, lists kept whole."""
    if not isinstance(tree, dict):
        return {prefix[:-1]: tree}
    out = {}
    for key, value in tree.items():
        out.update(_flat(value, f"{prefix}{key}."))
    return out


def check_together(model: ModelConfig, loop_cfg: LoopConfig, params: LearnerParams | None
                   ) -> None:
    """The settings each group's validation cannot judge alone."""
    if params and model.roles["generator"].model != model.roles["solver"].model:
        raise ValueError("a learner trains one policy, which serves both roles: give "
                         "model.roles.generator and model.roles.solver the same model (a learner "
                         "per role is not built yet)")
    if loop_cfg.overlap and not params:
        raise ValueError("loop.overlap=true needs a learner: it runs the update alongside the "
                         "next round's generation, and learner=none has no update (pick "
                         "learner=dpo, grpo or ppo, or drop loop.overlap)")


def open_records(cfg: DictConfig, trace: TraceConfig, run_dir: Path, run_id: str, seed: int
                 ) -> tuple[TraceStore, MetricsSink]:
    """The run's trace store and metrics sink (its W&B run grouped and tagged for a sweep),
    once the settings are those the run's completed rounds had (check_settings) and the trace
    accounts for every round the directory records (`_orphaned`)."""
    trace_path = run_dir / "trace.sqlite"
    if not trace_path.exists():
        _orphaned(run_dir, "no trace.sqlite")
    store = TraceStore(trace_path, run_id,
                       max_text_chars=trace.max_text_chars,
                       keep_text_rounds=trace.keep_text_rounds, max_bytes=trace.max_bytes)
    try:
        resumed = store.last_completed_round() is not None
        if not resumed:
            _orphaned(run_dir, "a trace with no completed round", files=False)
        check_settings(cfg, run_dir, resumed=resumed)
    except ValueError:
        store.close()
        raise
    sink = MetricsSink(run_dir, run_id, OmegaConf.to_container(cfg, resolve=True),
                       wandb_mode=cfg.wandb.mode, wandb_project=cfg.wandb.project,
                       wandb_group=str(cfg.wandb.group or cfg.run_name),
                       wandb_tags=(str(cfg.experiment_name), f"seed={seed}",
                                   *map(str, cfg.wandb.tags)))
    return store, sink


def _orphaned(run_dir: Path, trace: str, files: bool = True) -> None:
    """Refuse a run directory whose records the trace does not account for: started afresh,
    the run would append its rounds to metrics.jsonl after the old ones and rewrite their
    pairs (a directory whose trace.sqlite was lost ran rounds 0-2 again: metrics.jsonl read
    rounds 0, 1, 0, 1, 2). `files`: whether pairs and checkpoints count (a run killed in its
    first round, or in its SFT warm start, leaves some beside its trace; the resume redoes
    them)."""
    held = []
    try:
        rounds = sorted(m.round for m in load_metrics(run_dir / "metrics.jsonl"))
    except ValueError as e:  # a line that is not JSON: the file names it
        raise ConfigError(str(e)) from e
    if rounds:
        held.append(f"metrics.jsonl (rounds {rounds[0]}-{rounds[-1]})")
    for name in ("pairs", "checkpoints") if files else ():
        if (run_dir / name).is_dir() and any((run_dir / name).iterdir()):
            held.append(f"{name}/")
    if held:
        raise ConfigError(f"{run_dir} holds {', '.join(held)} but {trace}: its rounds would be "
                          "run and recorded again. Restore the trace, or give this run a "
                          "directory of its own (run_name=NAME)")


def role_specs(model: ModelConfig) -> list[RoleSpec]:
    return [RoleSpec(role=name, backend=r.backend, model=r.model, engines=r.engines,
                     gpus_per_engine=r.gpus_per_engine, cpus_per_engine=r.cpus_per_engine,
                     backend_kwargs=tuple(sorted(r.backend_kwargs.items())))
            for name, r in model.roles.items()]


def open_executor(sandbox: SandboxConfig, limits: Limits) -> Executor:
    """The sandbox the run executes in: the driver's own workers, or the Ray actor pool."""
    if sandbox.placement is Placement.DRIVER:
        return Sandbox(sandbox.backend, limits, sandbox.workers)
    from spade_ray.execution.pool import SandboxPool

    return SandboxPool(sandbox.backend, limits, num_actors=sandbox.workers,
                       cpus_per_actor=sandbox.cpus_per_worker, resources=sandbox.resources)


def start_trainer(cluster: Cluster, model: ModelConfig, learner: LearnerConfig,
                  params: LearnerParams, problems: tuple[humaneval.HumanEvalProblem, ...],
                  run_dir: Path, max_staleness: int | None) -> Trainer:
    """The learner's ranks on their bundles, wrapped for gating; the log-prob gate's held-out
    texts are the validation problems' reference solutions."""
    group = cluster.start_learner(resolve_model(model.roles["solver"].model), params)
    return Trainer.start(params.algorithm, Gate(learner.gate_tolerance,
                                                learner.gate_logp_tolerance),
                         group, cluster.engines, run_dir,
                         [(p.prompt, p.canonical_solution) for p in problems], max_staleness)


def evaluate_model(model: str, validation: ValidationConfig
                   ) -> tuple[humaneval.ValidationResult, list[humaneval.HumanEvalProblem]]:
    """`spade-ray eval`: HumanEval through the sandbox, with the hf backend on this machine; the
    result and the problems it was measured on."""
    connect(log_to_driver=False)
    spec = RoleSpec("solver", "hf", model, cpus_per_engine=float(os.cpu_count() or 1))
    samples = validation.samples_per_problem
    sampling = dataclasses.replace(humaneval.default_sampling(samples),
                                   max_tokens=validation.max_tokens)
    problems = validation.load(seed=0)
    with Cluster([spec]) as cluster, Sandbox("local", Limits(timeout_s=10, cpu_s=10)) as box:
        return humaneval.evaluate(stages.complete(cluster["solver"]), box, problems,
                                  samples_per_problem=samples,
                                  ks=tuple(k for k in (1, 10, 100) if k <= samples),
                                  sampling=sampling), problems
