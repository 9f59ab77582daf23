"""The learner: a policy (LoRA by default), its frozen reference, an engine, a buffer of items;
for PPO also a critic (critic.py).

An update call adds items (PreferencePairs for DPO, CompletionGroups for GRPO and PPO) to the
buffer. Once the buffer holds at least max(min_pairs_per_update, micro_batch_size * grad_accum)
items, it trains on as many whole batches as the buffer allows, each of micro_batch_size *
grad_accum items (the oldest first), and keeps the remainder for the next call; otherwise it
returns None. With `min_version`, items (new or buffered) written by weights older than that
version are dropped first and counted (`stale` in the next stats): a remainder kept from an
earlier call must not outlive the staleness bound the loop trains under (loop.max_staleness).
Each batch's reference terms, then the terms the algorithm freezes before the policy moves
(PPO's old log-probs, values, advantages), are computed first (no grad); then the algorithm's
`epochs` optimizer steps (1 for DPO and GRPO), each one forward + backward per micro-batch. The
reported loss of a step is the mean of its micro-batch losses before the step's update; the
update's figures are the means over its steps.

Weights leave through `policy_state_dict()` (merged, plain HF names: what the rollout engines
load); `save_checkpoint` / `load_checkpoint` hold everything a killed run needs to continue as
if it had not been killed (layout in checkpoint.py).
With several data-parallel ranks (DeepSpeed, started by LearnerGroup) every rank gets the same
items and buffers them alike; an optimizer step takes micro_batch_size * grad_accum items per
rank, each rank trains on its share of them (rank r: items r, r + W, ...), DeepSpeed averages the
gradients and the reported figures are averaged over the ranks, so W ranks step as one rank
with W times the accumulation would.
Non-goals: sampling (the rollout stage's), choosing which pairs to train on (the preferences
stage's).
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from spade_ray.learner.algorithms import DPO, GRPO, SFT, Algorithm, MicroBatch, micro_batches
from spade_ray.learner.checkpoint import (
    atomic_directory,
    read_meta,
    rng_file,
    rng_state,
    set_rng_state,
    write_meta,
)
from spade_ray.learner.critic import add_critic
from spade_ray.learner.engines import (
    DeepSpeedEngine,
    TorchEngine,
    TrainEngine,
    world_size_from_env,
)
from spade_ray.learner.engines import deepspeed_config as ds_config
from spade_ray.learner.logprobs import CausalLM, pad_id, text_logps
from spade_ray.learner.ppo import PPO
from spade_ray.learner.weights import (
    is_lora,
    load_policy,
    merged_state_dict,
    reference_mode,
    trainable_parameters,
)
from spade_ray.records import (
    CompletionGroup,
    Demonstration,
    LearnerParams,
    PreferencePair,
    Role,
    TrainAlgorithm,
    from_dict,
    to_dict,
)
from spade_ray.rollout import bf16_supported


class Learner:
    def __init__(self, model_path: str, params: LearnerParams) -> None:
        """`params`: how to train (records.LearnerParams, checked when it was built)."""
        p = params
        world_size = world_size_from_env()
        if world_size > 1 and not p.deepspeed_config:
            raise ValueError(f"WORLD_SIZE={world_size}: more than one learner rank needs "
                             "deepspeed_config (the plain torch engine trains one rank)")
        from transformers import AutoTokenizer

        self.algorithm_name = p.algorithm
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.algorithm = build_algorithm(p, self.tokenizer)
        self.micro_batch_size = p.micro_batch_size
        self.max_length = p.max_length
        self.identity = {"algorithm": str(p.algorithm), "lora_rank": p.lora_rank,
                         "lora_alpha": p.lora_alpha, "engine": "deepspeed" if p.deepspeed_config
                         else "torch"}
        if p.algorithm is TrainAlgorithm.PPO:
            self.identity["critic"] = str(p.critic)
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.bf16 = bf16_supported(device.type) if p.bf16 is None else p.bf16
        policy, self.reference = load_policy(model_path, p.lora_rank, p.lora_alpha, p.seed,
                                              self.bf16, p.activation_checkpointing)
        if p.algorithm is TrainAlgorithm.PPO:
            add_critic(policy, p.critic)
        params = trainable_parameters(policy)
        self.engine: TrainEngine
        if p.deepspeed_config:
            config = ds_config(p.deepspeed_config, lr=p.lr, weight_decay=p.weight_decay,
                               max_grad_norm=p.max_grad_norm,
                               micro_batch_size=p.micro_batch_size, grad_accum=p.grad_accum,
                               bf16=self.bf16)
            self.engine = DeepSpeedEngine(policy, params, config, p.warmup_steps,
                                          frozen_excluded=p.lora_rank > 0)
        else:
            self.engine = TorchEngine(policy, params, p.lr, p.weight_decay, p.warmup_steps,
                                      p.max_grad_norm, p.grad_accum, self.bf16)
        if self.reference is not None:
            # Same dtype as the policy's compute (DeepSpeed casts the policy to bf16 itself).
            dtype = next(self.engine.module.parameters()).dtype
            self.reference.to(device=self.engine.device, dtype=dtype)
        self.ranks = self.engine.ranks
        self.items_per_step = p.micro_batch_size * p.grad_accum * self.ranks.world_size
        self.min_items = max(p.min_pairs_per_update, self.items_per_step)
        self.policy = CausalLM(self.engine.module, self.engine.forward)
        self.step = 0
        self._buffer: list[Any] = []
        self._stale = 0  # items dropped as stale since the last stats

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    def update(self, items: Sequence[Any], min_version: int | None = None
               ) -> dict[str, float] | None:
        """`dpo_update`, `grpo_update` or `ppo_update`: whichever this learner was built for;
        items written by weights older than `min_version` are dropped (module docstring)."""
        kind = CompletionGroup if self.algorithm_name.on_groups else PreferencePair
        return self._update(items, str(self.algorithm_name), kind, min_version)

    def dpo_update(self, pairs: Sequence[PreferencePair]) -> dict[str, float] | None:
        """Buffer `pairs`; train when enough are buffered (module docstring). Stats or None."""
        return self._update(pairs, "dpo", PreferencePair)

    def grpo_update(self, groups: Sequence[CompletionGroup]) -> dict[str, float] | None:
        return self._update(groups, "grpo", CompletionGroup)

    def ppo_update(self, groups: Sequence[CompletionGroup]) -> dict[str, float] | None:
        return self._update(groups, "ppo", CompletionGroup)

    def _update(self, items: Sequence[Any], algorithm: str, kind: type,
                min_version: int | None = None) -> dict[str, float] | None:
        if algorithm != self.algorithm_name:
            raise ValueError(f"this learner was built for {self.algorithm_name!r}; "
                             f"{algorithm}_update needs LearnerParams(algorithm={algorithm!r})")
        bad = [type(i).__name__ for i in items if not isinstance(i, kind)]
        if bad:
            raise TypeError(f"{algorithm}_update takes {kind.__name__} items, got {bad[:3]}")
        self._buffer.extend(items)
        if min_version is not None:
            fresh = [i for i in self._buffer if not _older(i, min_version)]
            self._stale += len(self._buffer) - len(fresh)
            self._buffer = fresh
        if len(self._buffer) < self.min_items:
            return None
        start = time.perf_counter()
        batches = len(self._buffer) // self.items_per_step
        history = []
        for _ in range(batches):
            batch, self._buffer = (self._buffer[:self.items_per_step],
                                   self._buffer[self.items_per_step:])
            history.extend(self._train_batch(batch[self.ranks.rank::self.ranks.world_size],
                                             self.algorithm))
        return self._summary(history, batches * self.items_per_step, start)

    def sft(self, demonstrations: Sequence[Demonstration], epochs: int, lr_scale: float,
            seed: int = 0) -> dict[str, float]:
        """Supervised fine-tuning on `demonstrations` now (the warm start before round 0),
        outside the buffer: `epochs` passes, each in a fresh order (seeded, the same on every
        rank), in whole batches of micro_batch_size * grad_accum (a pass's remainder waits for
        the next one's order), at the learner's rate times `lr_scale` on the same optimizer."""
        bad = [type(d).__name__ for d in demonstrations if not isinstance(d, Demonstration)]
        if bad:
            raise TypeError(f"sft takes Demonstration items, got {bad[:3]}")
        if len(demonstrations) < self.items_per_step:
            raise ValueError(f"sft needs at least {self.items_per_step} demonstrations (one "
                             f"batch of micro_batch_size * grad_accum * ranks), got "
                             f"{len(demonstrations)}")
        algorithm = SFT(self.tokenizer, self.max_length)
        start, history = time.perf_counter(), []
        with self.engine.lr_scale(lr_scale):
            for epoch in range(epochs):
                order = list(demonstrations)
                random.Random(seed * 1_000_003 + epoch).shuffle(order)
                for first in range(0, len(order) - self.items_per_step + 1, self.items_per_step):
                    batch = order[first:first + self.items_per_step]
                    history.extend(self._train_batch(
                        batch[self.ranks.rank::self.ranks.world_size], algorithm))
        return self._summary(history, len(history) * self.items_per_step, start)

    def _summary(self, history: list[dict[str, float]], items: int, start: float
                 ) -> dict[str, float]:
        stats = {k: sum(h[k] for h in history) / len(history) for k in history[0]}
        stats.update(step=self.step, steps=len(history), items=items,
                     buffered=len(self._buffer), lr=history[-1]["lr"], stale=self._stale,
                     wall_s=time.perf_counter() - start)
        self._stale = 0
        return stats

    def _train_batch(self, items: list[Any], algorithm: Algorithm) -> list[dict[str, float]]:
        """The algorithm's optimizer steps on one batch (this rank's share of it)."""
        encoded = [algorithm.encode(item) for item in items]
        batches = [b.to(self.engine.device) for b in
                   micro_batches(encoded, self.micro_batch_size, pad_id(self.tokenizer))]
        with self.engine.compute(), reference_mode(self.engine.module, self.reference) as ref:
            references = [algorithm.reference(ref, b) for b in batches]
        with self.engine.compute(), torch.no_grad():
            frozen = algorithm.prepare(self.policy, batches, references, self.ranks.mean)
        return [self._optimizer_step(batches, frozen, algorithm) for _ in range(algorithm.epochs)]

    def _optimizer_step(self, batches: list[MicroBatch], frozen: Sequence[Any],
                        algorithm: Algorithm) -> dict[str, float]:
        lr = self.engine.lr()
        totals: dict[str, float] = {}
        grad_norm = None
        for i, (batch, terms) in enumerate(zip(batches, frozen, strict=True)):
            with self.engine.compute():
                loss, stats = algorithm.loss(self.policy, batch, terms)
            grad_norm = self.engine.micro_step(loss, boundary=i == len(batches) - 1)
            for k, v in stats.items():
                totals[k] = totals.get(k, 0.0) + v / len(batches)
        totals = dict(zip(totals, self.ranks.mean(list(totals.values()))))
        self.step += 1
        return {**totals, "lr": lr, "grad_norm": float("nan") if grad_norm is None
                else grad_norm}

    def mean_token_logp(self, texts: Sequence[tuple[str, str]], batch_size: int = 4) -> float:
        """The policy's mean log-prob per completion token over (context, completion) texts.

        The update gate's second signal: on held-out reference solutions (the validation
        problems' canonical ones, never trained on) it moves with every update, also where
        pass@1 sits at 0 and cannot fall, and a harmful update shows as a drop.
        """
        scored = text_logps(self.policy, self.tokenizer, texts, self.max_length, batch_size,
                            self.engine.device, self.engine.compute)
        tokens = sum(count for _, count in scored)
        if not tokens:
            raise ValueError("mean_token_logp needs at least one (context, completion) with a "
                             "completion token")
        return sum(total for total, _ in scored) / tokens

    def policy_state_dict(self) -> dict[str, torch.Tensor]:
        """Merged weights under plain HF names (LoRA folded in; the adapters are untouched)."""
        return merged_state_dict(self.engine.module)

    def save_checkpoint(self, directory: str | Path, merged: bool = False) -> Path:
        """Write a checkpoint atomically (checkpoint.py's layout); `merged` adds merged/."""
        directory = Path(directory)
        with atomic_directory(directory, self.ranks) as tmp:
            self.engine.save(tmp)  # every rank: DeepSpeed writes each one's optimizer partition
            torch.save(rng_state(), tmp / rng_file(self.ranks.rank))
            if self.ranks.rank == 0:  # the rest is the same on every rank
                self.engine.module.save_pretrained(tmp / "policy")
                write_meta(tmp, {**self.identity, "step": self.step,
                                 "world_size": self.ranks.world_size,
                                 "buffer": [_item_to_dict(i) for i in self._buffer]})
                if merged:
                    self._save_merged(tmp / "merged")
        return directory

    def load_checkpoint(self, directory: str | Path) -> None:
        """Restore weights, optimizer, scheduler, step, buffer and RNG from `directory`."""
        directory = Path(directory)
        meta = read_meta(directory, self.identity)
        if meta.get("world_size", 1) != self.ranks.world_size:
            raise ValueError(f"{directory} was written by {meta.get('world_size', 1)} learner "
                             f"ranks, this learner has {self.ranks.world_size}: DeepSpeed's "
                             "optimizer partitions are per rank; resume with the same ranks")
        self.engine.load(directory)
        set_rng_state(torch.load(directory / rng_file(self.ranks.rank), weights_only=False))
        self.step = int(meta["step"])
        self._buffer = [_item_from_dict(d) for d in meta["buffer"]]

    def _save_merged(self, directory: Path) -> None:
        from safetensors.torch import save_file

        directory.mkdir()
        state = self.policy_state_dict()
        seen: set[int] = set()
        unique = {}
        for key, tensor in state.items():  # safetensors refuses shared tensors: HF re-ties them
            if id(tensor) not in seen:
                seen.add(id(tensor))
                unique[key] = tensor.contiguous()
        save_file(unique, str(directory / "model.safetensors"), metadata={"format": "pt"})
        base = self.engine.module.get_base_model() if is_lora(self.engine.module) \
            else self.engine.module
        base.config.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)


def build_algorithm(p: LearnerParams, tokenizer: Any) -> Algorithm:
    """The Algorithm `p.algorithm` names, with its settings from `p`."""
    if p.algorithm is TrainAlgorithm.DPO:
        return DPO(tokenizer, p.max_length, p.beta, p.label_smoothing, p.dpo_loss_type,
                   p.rpo_alpha)
    if p.algorithm is TrainAlgorithm.GRPO:
        return GRPO(tokenizer, p.max_length, p.clip_eps, p.kl_coef)
    return PPO(tokenizer, p.max_length, p.critic, p.ppo_epochs, p.clip_eps, p.value_clip,
               p.vf_coef, p.kl_coef, p.kl_mode, p.gamma, p.gae_lambda)


def _older(item: PreferencePair | CompletionGroup, version: int) -> bool:
    """Whether the weights that wrote `item` are older than `version` (the role's version for a
    pair; a group of unknown version never is)."""
    if isinstance(item, PreferencePair):
        written = item.generator_version if item.role is Role.GENERATOR else item.solver_version
    else:
        written = item.weights_version
    return written is not None and written < version


def _item_to_dict(item: Any) -> dict[str, Any]:
    return {"pair" if isinstance(item, PreferencePair) else "group": to_dict(item)}


def _item_from_dict(data: dict[str, Any]) -> Any:
    if "pair" in data:
        return from_dict(PreferencePair, data["pair"])
    return from_dict(CompletionGroup, data["group"])
