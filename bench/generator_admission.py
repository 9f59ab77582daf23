"""Generator admission: what decoding does to the share of generator outputs that become tasks.

The same prompts (the run's generator prompt: topic, few-shot seed programs, no difficulty
labels unless --level), the same model and sampling seeds, several decoding set-ups, measured in
one run:
  no-stop   the format's stop strings off: the model writes until max_tokens
  stop      stop at the end of the entry ("### END", "### Topic"), as `make run` samples
  frame     stop, plus continuing outputs that lack their inputs from `Inputs:\\n<function>(`
            (the frame constraint: loop.frame_tokens)
  frame-t0.6  the same at temperature 0.6 instead of 0.9 (fewer broken programs, more copies)
  frame-4shot frame with four few-shot programs instead of two (make run's default)
  frame-6shot frame with six
  frame-4shot-aug  frame-4shot with make run's admission: 16 augmented inputs per proposal
            (admission.augment_inputs; the rows above have none): make run's decoding and admission
  frame-4shot-aug-minp  the same at temperature 1.2 with min-p 0.1 (SamplingParams.min_p: the
            tokens under a tenth of the likeliest one's probability are cut, so a hotter
            temperature spreads over plausible tokens only)
For each: outputs, admitted (with a 95% Wilson interval), tokens per output, seconds, and the
most common rejection reasons. Admission is the run's own (tasks/admission.py, local sandbox).

With --level N (repeatable) the same variants run again with the prompts a run's controller
writes at difficulty level N (tasks/control.py: every program labelled with its difficulty, the
asked-for task with the level's own label, below any run's label_floor; the bench's seed tasks
are unmeasured), each row "@levelN".

With --checkpoint RUN/checkpoints/step_N (repeatable) the same variants run again on that
learner checkpoint's weights (the run's own learner settings), each row marked "+step_N": what
a run's updates did to the generator's admission.

With --sft-warmup EPOCHS the same variants run again on the weights of the SFT warm start
(learner.sft_warmup: the seed pool's demonstrations of both roles, the dpo learner's settings,
in this process), each row marked "+sft": what the warm start does to admission. The seed
programs it imitates are also the ones admission rejects copies of, so it can lower the rate.

    .venv/bin/python bench/generator_admission.py [--prompts 12] [--only frame,frame-4shot]
        [--level 0 --level -2] [--checkpoint runs/cpu_gemma/checkpoints/step_000012]
        [--sft-warmup 1]
        [--dump outputs.jsonl]   (every output's variant, family, outcome, text)
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import random
import sys
import time
from pathlib import Path
from types import SimpleNamespace

from learning_result import wilson  # bench/ is on the path when this file runs
from omegaconf import OmegaConf

from spade_ray.config import SftWarmup, validate_learner, validate_validation
from spade_ray.evaluation.humaneval import load_problems
from spade_ray.execution import Sandbox
from spade_ray.learner.learner import Learner
from spade_ray.records import Limits, Role, SamplingParams, TaskFamily
from spade_ray.rollout.actor import make_backend
from spade_ray.rollout.models import resolve_model
from spade_ray.rollout.sampling import TokenMeter
from spade_ray.stages import Generation
from spade_ray.tasks.admission import AdmissionConfig
from spade_ray.tasks.control import ControlConfig, Guidance, level_label, target_pass_rate
from spade_ray.tasks.decontamination import held_out
from spade_ray.tasks.demonstrations import seed_demonstrations
from spade_ray.tasks.prompting import family_schedule, topic_schedule
from spade_ray.tasks.seeds import load_seed_tasks
from spade_ray.tasks.templates import CONF_DIR, load_prompts

TOPICS = ["strings", "lists", "math", "dictionaries", "sorting", "recursion", "searching"]
STOP = ("\n### END", "\n### Topic")
HELD_OUT = held_out(load_problems())  # what a run holds out (app.py)


class DirectEngines:
    """RoleEngines' generate() on a backend in this process (no Ray: one model, one bench)."""

    weights_version = 0

    def __init__(self, backend) -> None:
        self.backend = backend

    def generate(self, prompts, sampling):
        return SimpleNamespace(completions=self.backend.generate(list(prompts), sampling),
                               lost=[])


def measure(label, variants, engines, template, work, seeds, sandbox, limits, dump,
            guidance=Guidance()):
    """Each variant's row: (name, outputs, admitted, tokens per output, seconds, reasons)."""
    rows = []
    for name, (sampling, frame_tokens, shots, admission) in variants.items():
        generation = Generation(engines, template, sampling, shots, 0.8, limits, admission,
                                frame_tokens=frame_tokens, held_out=HELD_OUT)
        meter = TokenMeter("generator")
        started = time.monotonic()
        chunk = generation.generate(work, seeds, random.Random(0), meter, sandbox, guidance)
        seconds = time.monotonic() - started
        outputs = len(chunk.inputs)
        admitted = sum(i.outcome == "admitted" for i in chunk.inputs)
        reasons = collections.Counter(i.outcome for i in chunk.inputs if i.outcome != "admitted")
        if dump:
            with open(dump, "a", encoding="utf-8") as f:
                for i in chunk.inputs:
                    f.write(json.dumps({"variant": name + label, "family": str(i.family),
                                        "outcome": i.outcome,
                                        "text": i.completion.text}) + "\n")
        rows.append((name + label, outputs, admitted, meter.completion_tokens / max(outputs, 1),
                     seconds, reasons.most_common(6)))
        print(f"{name + label}: {admitted}/{outputs} admitted, {seconds:.0f} s", flush=True)
    return rows


def warm_start(model, seeds, epochs, backend, version: int,
               roles: tuple[str, ...] = SftWarmup.roles) -> None:
    """The SFT warm start (learner.sft_warmup with `epochs` and `roles`, make run's few-shot
    counts and seed) on `seeds`, on a learner with conf/learner/dpo.yaml's settings, served by
    `backend`."""
    _, params = validate_learner(OmegaConf.load(CONF_DIR.parent / "learner" / "dpo.yaml"))
    run = OmegaConf.load(CONF_DIR.parent / "experiment" / "cpu_gemma.yaml")  # make run's
    config = SftWarmup(epochs=epochs, roles=roles)
    demonstrations = seed_demonstrations(seeds, load_prompts("fewshot"), run.loop.few_shot,
                                         run.loop.generator_few_shot,
                                         [Role(r) for r in config.roles], run.loop.seed)
    # the held-out texts of make run's log-prob gate: would the run have kept this warm start?
    heldout = [(p.prompt, p.canonical_solution)
               for p in validate_validation(run.validation).load(run.loop.seed)]
    learner = Learner(resolve_model(model), params)
    before = learner.mean_token_logp(heldout)
    stats = learner.sft(demonstrations, config.epochs, config.lr_scale, run.loop.seed)
    after = learner.mean_token_logp(heldout)
    backend.update_weights(learner.policy_state_dict(), version)
    kept = after >= before - config.gate_logp_tolerance
    print(f"sft warm start: {len(demonstrations)} demonstrations, {epochs} epoch(s), "
          f"{int(stats['steps'])} steps, loss {stats.get('loss', float('nan')):.3f}, "
          f"{stats.get('wall_s', 0.0):.0f} s; held-out logp {before:.4f} -> {after:.4f} (the "
          f"run's log-prob gate, tolerance {config.gate_logp_tolerance}, would "
          f"{'keep' if kept else 'reject'} it; its pass@1 gate is not measured here)",
          flush=True)


def load_checkpoint(model, checkpoint: Path, backend, version: int) -> None:
    """Serve a run's learner checkpoint (RUN/checkpoints/step_N) on `backend`, built with that
    run's learner settings (a mismatch is the learner's own clear error)."""
    run_dir = checkpoint.resolve().parents[1]
    _, params = validate_learner(OmegaConf.load(run_dir / ".hydra" / "config.yaml").learner)
    if params is None:
        raise SystemExit(f"{run_dir} ran without a learner: it has no checkpoints")
    learner = Learner(resolve_model(model), params)
    learner.load_checkpoint(checkpoint)
    backend.update_weights(learner.policy_state_dict(), version)
    print(f"serving {checkpoint} (learner step {learner.step})", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gemma3-270m")
    parser.add_argument("--prompts", type=int, default=12, help="x 2 outputs each")
    parser.add_argument("--max-tokens", type=int, default=320)
    parser.add_argument("--only", default="", help="comma-separated variants (default: all)")
    parser.add_argument("--level", type=int, action="append", default=[],
                        help="also measure with the controller's prompts at this level")
    parser.add_argument("--checkpoint", type=Path, action="append", default=[],
                        help="also measure on this learner checkpoint's weights (repeatable)")
    parser.add_argument("--sft-warmup", type=int, default=0, metavar="EPOCHS",
                        help="also measure after an SFT warm start of EPOCHS (0: not)")
    parser.add_argument("--dump", default="", help="write every output to this JSONL file")
    args = parser.parse_args()
    limits = Limits()
    engines = DirectEngines(make_backend("hf", args.model, dtype="auto", max_batch_size=8))
    template = load_prompts("fewshot")["generator"]
    base = SamplingParams(n=2, temperature=0.9, top_p=0.95, max_tokens=args.max_tokens,
                          seed=1234)
    work = list(zip(topic_schedule(TOPICS, args.prompts, 0),
                    family_schedule(list(TaskFamily), args.prompts, 0)))
    framed = dataclasses.replace(base, stop=STOP)
    plain, augmented = AdmissionConfig(augment_inputs=0), AdmissionConfig()  # make run's
    variants = {"no-stop": (dataclasses.replace(base, stop=()), 0, 2, plain),
                "stop": (framed, 0, 2, plain),
                "frame": (framed, 96, 2, plain),
                "frame-t0.6": (dataclasses.replace(framed, temperature=0.6), 96, 2, plain),
                "frame-4shot": (framed, 96, 4, plain),
                "frame-6shot": (framed, 96, 6, plain),
                "frame-4shot-aug": (framed, 96, 4, augmented),
                "frame-4shot-aug-minp": (dataclasses.replace(framed, temperature=1.2, min_p=0.1),
                                         96, 4, augmented)}
    if args.only:
        variants = {k: variants[k] for k in args.only.split(",")}
    with Sandbox("local", limits) as sandbox:
        seeds = load_seed_tasks(sandbox, limits)
        shared = (engines, template, work, seeds, sandbox, limits, args.dump)
        rows = measure("", variants, *shared)
        control = ControlConfig(label_floor=-ControlConfig().max_level)  # the level's own label
        for level in args.level:
            guidance = Guidance(target=target_pass_rate(level, control),
                                difficulty=level_label(level, control))
            rows += measure(f"@level{level}", variants, *shared, guidance)
        for version, checkpoint in enumerate(args.checkpoint, start=1):
            load_checkpoint(args.model, checkpoint, engines.backend, version)
            rows += measure(f"+{checkpoint.name}", variants, *shared)
        if args.sft_warmup:
            warm_start(args.model, seeds, args.sft_warmup, engines.backend,
                       len(args.checkpoint) + 1)
            rows += measure("+sft", variants, *shared)
    print(f"\nmodel {args.model}, {args.prompts} prompts x 2 outputs, temperature 0.9 (unless "
          f"the variant says), max {args.max_tokens} tokens, sampling seed 1234")
    print(f"{'decoding':<28}{'outputs':>8}{'admitted':>9}{'rate':>7}{'95% CI':>16}"
          f"{'tok/out':>9}{'s':>7}  rejections")
    for name, outputs, admitted, tokens, seconds, reasons in rows:
        low, high = wilson(admitted, outputs)
        print(f"{name:<28}{outputs:>8}{admitted:>9}{admitted / outputs:>7.2f}"
              f"   [{low:.2f}, {high:.2f}]{tokens:>9.0f}{seconds:>7.0f}  "
              + ", ".join(f"{r}={n}" for r, n in reasons))
    return 0


if __name__ == "__main__":
    sys.exit(main())
