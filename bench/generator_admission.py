"""Generator admission: what decoding does to the share of generator outputs that become tasks.

The same prompts (the run's generator prompt: topic, two few-shot seed programs), the same model
and sampling seeds, three decoding set-ups, measured in one run:
  no-stop   the format's stop strings off: the model writes until max_tokens
  stop      stop at the end of the entry ("### END", "### Topic"), as `make run` samples
  frame     stop, plus continuing outputs that lack their inputs from `Inputs:\\n<function>(`
            (the frame constraint: loop.frame_tokens)
  frame-t0.6  the same at temperature 0.6 instead of 0.9 (fewer broken programs, more copies)
  frame-4shot frame with four few-shot programs instead of two (make run's default)
  frame-6shot frame with six
  frame-4shot-aug  frame-4shot with 8 augmented inputs per proposal (admission.augment_inputs)
For each: outputs, admitted (with a 95% Wilson interval), tokens per output, seconds, and the
most common rejection reasons. Admission is the run's own (tasks/admission.py, local sandbox).

    .venv/bin/python bench/generator_admission.py [--prompts 12] [--only frame,frame-4shot]
        [--dump outputs.jsonl]   (every output's variant, family, outcome and text)
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import random
import sys
import time
from types import SimpleNamespace

from learning_result import wilson  # bench/ is on the path when this file runs

from spade_ray.execution import Sandbox
from spade_ray.records import Limits, SamplingParams, TaskFamily
from spade_ray.rollout.actor import make_backend
from spade_ray.rollout.sampling import TokenMeter
from spade_ray.stages import Generation
from spade_ray.tasks.admission import AdmissionConfig
from spade_ray.tasks.prompting import family_schedule, topic_schedule
from spade_ray.tasks.seeds import load_seed_tasks
from spade_ray.tasks.templates import load_prompts

TOPICS = ["strings", "lists", "math", "dictionaries", "sorting", "recursion", "searching"]
STOP = ("\n### END", "\n### Topic")


class DirectEngines:
    """RoleEngines' generate() on a backend in this process (no Ray: one model, one bench)."""

    weights_version = 0

    def __init__(self, backend) -> None:
        self.backend = backend

    def generate(self, prompts, sampling):
        return SimpleNamespace(completions=self.backend.generate(list(prompts), sampling),
                               lost=[])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gemma3-270m")
    parser.add_argument("--prompts", type=int, default=12, help="x 2 outputs each")
    parser.add_argument("--max-tokens", type=int, default=320)
    parser.add_argument("--only", default="", help="comma-separated variants (default: all)")
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
    plain, augmented = AdmissionConfig(), AdmissionConfig(augment_inputs=8)
    variants = {"no-stop": (dataclasses.replace(base, stop=()), 0, 2, plain),
                "stop": (framed, 0, 2, plain),
                "frame": (framed, 96, 2, plain),
                "frame-t0.6": (dataclasses.replace(framed, temperature=0.6), 96, 2, plain),
                "frame-4shot": (framed, 96, 4, plain),
                "frame-6shot": (framed, 96, 6, plain),
                "frame-4shot-aug": (framed, 96, 4, augmented)}
    if args.only:
        variants = {k: variants[k] for k in args.only.split(",")}
    rows = []
    with Sandbox("local", limits) as sandbox:
        seeds = load_seed_tasks(sandbox, limits)
        for name, (sampling, frame_tokens, shots, admission) in variants.items():
            generation = Generation(engines, template, sampling, shots, 0.8, limits,
                                    admission, frame_tokens=frame_tokens)
            meter = TokenMeter("generator")
            started = time.monotonic()
            chunk = generation.generate(work, seeds, random.Random(0), meter, sandbox)
            seconds = time.monotonic() - started
            outputs = len(chunk.inputs)
            admitted = sum(i.outcome == "admitted" for i in chunk.inputs)
            reasons = collections.Counter(i.outcome for i in chunk.inputs
                                          if i.outcome != "admitted")
            if args.dump:
                with open(args.dump, "a", encoding="utf-8") as f:
                    for i in chunk.inputs:
                        f.write(json.dumps({"variant": name, "family": str(i.family),
                                            "outcome": i.outcome,
                                            "text": i.completion.text}) + "\n")
            rows.append((name, outputs, admitted, meter.completion_tokens / max(outputs, 1),
                         seconds, reasons.most_common(6)))
    print(f"\nmodel {args.model}, {args.prompts} prompts x 2 outputs, temperature 0.9, "
          f"max {args.max_tokens} tokens, sampling seed 1234")
    print(f"{'decoding':<16}{'outputs':>8}{'admitted':>9}{'rate':>7}{'95% CI':>16}"
          f"{'tok/out':>9}{'s':>7}  rejections")
    for name, outputs, admitted, tokens, seconds, reasons in rows:
        low, high = wilson(admitted, outputs)
        print(f"{name:<16}{outputs:>8}{admitted:>9}{admitted / outputs:>7.2f}"
              f"   [{low:.2f}, {high:.2f}]{tokens:>9.0f}{seconds:>7.0f}  "
              + ", ".join(f"{r}={n}" for r, n in reasons))
    return 0


if __name__ == "__main__":
    sys.exit(main())
