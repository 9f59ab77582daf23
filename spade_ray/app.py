"""The `spade-ray run` Hydra app and `spade-ray eval`: config in, a running Context out.

Part of the wiring layer: validates the composed config once, builds the components from flat
typed values (the Ray cluster and its engines, the sandbox, the trace store, the metrics sink)
and hands them to loop.run(). The run directory is fixed by the run name (hydra.run.dir), so
re-running the same command resumes the same run.
"""

from __future__ import annotations

import os
from pathlib import Path

import datasets
import hydra
import ray
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from spade_ray import loop, stages, training
from spade_ray.cluster import Cluster, RoleSpec
from spade_ray.config import (
    role_sampling,
    role_specs,
    sandbox_limits,
    validate_learner,
    validate_loop,
    validate_model,
    validate_validation,
)
from spade_ray.evaluation import humaneval
from spade_ray.execution import Sandbox
from spade_ray.records import Limits
from spade_ray.rollout.models import resolve_model
from spade_ray.tasks.seeds import load_seed_tasks
from spade_ray.tasks.templates import load_prompts
from spade_ray.tracking.metrics import MetricsSink, summary_table
from spade_ray.tracking.trace import TraceStore

CONF_DIR = str(Path(__file__).resolve().parents[1] / "conf")


@hydra.main(config_path=CONF_DIR, config_name="config", version_base="1.3")
def hydra_main(cfg: DictConfig) -> None:
    run(cfg, Path(HydraConfig.get().runtime.output_dir))


def run(cfg: DictConfig, run_dir: Path) -> None:
    model = validate_model(cfg.model)
    loop_cfg = validate_loop(cfg.loop)
    validation = validate_validation(cfg.validation)
    sandbox_cfg, limits = sandbox_limits(cfg.sandbox)
    learner = validate_learner(cfg.learner)
    run_dir.mkdir(parents=True, exist_ok=True)
    run_id = str(cfg.run_name)
    datasets.disable_progress_bars()  # one line per round on the console, no bars in between
    if not ray.is_initialized():  # RAY_ADDRESS (ray job submit) joins a cluster
        ray.init(address=os.environ.get("RAY_ADDRESS"), log_to_driver=False)
    store = TraceStore(run_dir / "trace.sqlite", run_id,
                       max_text_chars=cfg.trace.max_text_chars,
                       keep_text_rounds=cfg.trace.keep_text_rounds,
                       max_bytes=cfg.trace.max_mb * 2**20)
    sink = MetricsSink(run_dir, run_id, OmegaConf.to_container(cfg, resolve=True),
                       wandb_mode=cfg.wandb.mode, wandb_project=cfg.wandb.project)
    print(f"run {run_id}: {run_dir} ({loop_cfg.rounds} rounds, model {model.roles['solver'].model}"
          f" on {model.roles['solver'].backend}, sandbox {sandbox_cfg.backend})", flush=True)
    try:
        trains = learner.name != "none"
        with Cluster(role_specs(model), model.colocate, model.placement_strategy,
                     learner_cpus=learner.cpus if trains else 0.0,
                     learner_gpus=learner.gpus if trains else 0,
                     learner_ranks=learner.ranks) as cluster, \
                Sandbox(sandbox_cfg.backend, limits, sandbox_cfg.workers) as sandbox:
            ctx = stages.Context(
                run_id=run_id, run_dir=run_dir, generator=cluster["generator"],
                solver=cluster["solver"], sandbox=sandbox, store=store, metrics=sink,
                templates=load_prompts(model.prompts),
                generator_sampling=role_sampling(model.roles["generator"]),
                solver_sampling=role_sampling(model.roles["solver"]),
                token_caps={"generator": loop_cfg.caps.tokens_generator,
                            "solver": loop_cfg.caps.tokens_solver},
                loop=loop_cfg, validation=validation, limits=limits,
                seeds=load_seed_tasks(limits),
                validation_problems=humaneval.load_problems(validation.problems or None,
                                                            seed=loop_cfg.seed)
                if validation.problems else [])
            if trains:
                group = cluster.start_learner(resolve_model(model.roles["solver"].model),
                                              training.learner_kwargs(learner))
                heldout = [(p.prompt, p.canonical_solution) for p in ctx.validation_problems]
                ctx.trainer = training.Trainer.start(learner, group, cluster.engines, run_dir,
                                                     heldout)
            metrics = loop.run(ctx)
    finally:
        sink.close()
        store.close()
    print(summary_table(metrics), flush=True)
    print(f"run directory: {run_dir} (trace.sqlite, pairs/, metrics.jsonl, plots/, wandb/)")


def evaluate_model(model: str, problems: int, samples: int, max_tokens: int
                   ) -> humaneval.ValidationResult:
    """`spade-ray eval`: HumanEval through the sandbox, with the hf backend on this machine."""
    import dataclasses

    if not ray.is_initialized():
        ray.init(address=os.environ.get("RAY_ADDRESS"), log_to_driver=False)
    spec = RoleSpec("solver", "hf", model, cpus_per_engine=float(os.cpu_count() or 1))
    sampling = dataclasses.replace(humaneval.default_sampling(samples), max_tokens=max_tokens)
    with Cluster([spec]) as cluster, Sandbox("local", Limits(timeout_s=10, cpu_s=10)) as box:
        return humaneval.evaluate(stages.complete(cluster["solver"]), box,
                                  humaneval.load_problems(problems if problems < 164 else None),
                                  samples_per_problem=samples,
                                  ks=tuple(k for k in (1, 10, 100) if k <= samples),
                                  sampling=sampling)
