"""Learner algorithms behind one seam: items -> token rows -> frozen reference terms -> loss.

`Algorithm` is the seam (DESIGN.md, style 5): the learner encodes each item (a PreferencePair
for DPO, a CompletionGroup for GRPO and PPO) into token rows, sorts a batch's items by length and
cuts them into micro-batches (less padding), computes each micro-batch's reference terms once
with the frozen reference, then `prepare`s the terms the policy itself must give before it moves
(PPO's old log-probs, values and advantages, ppo.py; DPO and GRPO have none), then takes
`epochs` optimizer steps on the batch, each the loss of every micro-batch against those terms.
`SFT` (the warm start's imitation of Demonstrations, Learner.sft) uses the same seam with no
reference terms.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from spade_ray.learner.logprobs import (
    CausalLM,
    TokenBatch,
    collate,
    encode,
    token_logps,
)
from spade_ray.learner.losses import dpo_loss, group_advantages, grpo_loss, nll_per_token
from spade_ray.records import CompletionGroup, Demonstration, PreferencePair
from spade_ray.tasks import split_program

Model = nn.Module | CausalLM  # what token_logps scores with


@dataclasses.dataclass(frozen=True)
class EncodedItem:
    """An item's token rows (prompt ids, completion ids) and one float per row (GRPO's
    advantages; unused by DPO)."""

    rows: tuple[tuple[list[int], list[int]], ...]
    values: tuple[float, ...]

    @property
    def longest(self) -> int:
        return max(len(p) + len(c) for p, c in self.rows)


@dataclasses.dataclass(frozen=True)
class MicroBatch:
    tokens: TokenBatch
    values: Tensor  # [B]
    items: int

    def to(self, device: torch.device) -> MicroBatch:
        return MicroBatch(self.tokens.to(device), self.values.to(device), self.items)


class Algorithm(Protocol):
    epochs: int  # optimizer steps on each batch

    def encode(self, item: Any) -> EncodedItem: ...
    def reference(self, model: Model, batch: MicroBatch) -> Tensor: ...

    def prepare(self, policy: CausalLM, batches: Sequence[MicroBatch],
                references: Sequence[Tensor],
                mean_over_ranks: Callable[[list[float]], list[float]]) -> Sequence[Any]:
        """Each micro-batch's frozen terms for `loss` (no grad, before the batch's first
        step); `mean_over_ranks` averages floats over the data-parallel ranks."""
        ...

    def loss(self, model: Model, batch: MicroBatch, frozen: Any
             ) -> tuple[Tensor, dict[str, float]]: ...


def micro_batches(encoded: Sequence[EncodedItem], size: int, pad_token_id: int
                  ) -> list[MicroBatch]:
    """Items sorted by length and cut into micro-batches of `size` items (whole item rows stay
    together: DPO's chosen+rejected, a group's K). The step's loss is a mean over micro-batches
    of equally many items, so the order changes only padding, not the gradient, unless groups
    differ in K (the pair builder drops candidates that need a re-run; generator and solver
    groups differ): then each micro-batch's rows share its weight."""
    if len(encoded) % size:
        raise ValueError(f"{len(encoded)} items do not split into micro-batches of {size}")
    order = sorted(range(len(encoded)), key=lambda i: encoded[i].longest)
    batches = []
    for start in range(0, len(order), size):
        chunk = [encoded[i] for i in order[start:start + size]]
        # Row layout: the items' first rows, then their second rows, ...: for DPO all chosen,
        # then all rejected; GRPO's and PPO's rows are independent, so any layout would do.
        width = max(len(item.rows) for item in chunk)
        rows = [item.rows[k] for k in range(width) for item in chunk if k < len(item.rows)]
        values = [item.values[k] for k in range(width) for item in chunk
                  if k < len(item.rows)]
        batches.append(MicroBatch(collate(rows, pad_token_id),
                                  torch.tensor(values, dtype=torch.float32), len(chunk)))
    return batches


def per_token_reference(self: Algorithm, model: Model, batch: MicroBatch) -> Tensor:
    """`reference` of the per-token objectives (GRPO, PPO): the frozen model's log-prob of every
    completion token, [B, T]."""
    logps, _ = token_logps(model, batch.tokens)
    return logps.detach()


def references_only(self: Algorithm, policy: CausalLM, batches: Sequence[MicroBatch],
                    references: Sequence[Tensor],
                    mean_over_ranks: Callable[[list[float]], list[float]]) -> Sequence[Tensor]:
    """`prepare` of an algorithm whose only frozen terms are the reference's."""
    return references


@dataclasses.dataclass(frozen=True)
class DPO:
    """DPO on PreferencePairs: summed completion log-probs (length-averaged for IPO, as TRL)."""

    tokenizer: Any
    max_length: int
    beta: float = 0.1
    label_smoothing: float = 0.0
    loss_type: str = "sigmoid"
    rpo_alpha: float = 0.0  # weight of the chosen completions' NLL per token (RPO); 0 = DPO

    epochs = 1

    def __post_init__(self) -> None:
        if self.rpo_alpha < 0:
            raise ValueError(f"rpo_alpha weighs an NLL term: it must be >= 0, got "
                             f"{self.rpo_alpha}")

    def encode(self, item: PreferencePair) -> EncodedItem:
        rows = []
        for program in (item.chosen, item.rejected):
            context, completion = split_program(item.prompt, program)
            rows.append(encode(self.tokenizer, context, completion, self.max_length))
        return EncodedItem(tuple(rows), (0.0, 0.0))

    def _logps(self, model: Model, batch: MicroBatch) -> tuple[Tensor, Tensor, Tensor]:
        """(what the DPO loss compares, summed log-probs, token counts), each [2 * items]."""
        logps, mask = token_logps(model, batch.tokens)
        total, tokens = logps.sum(dim=1), mask.sum(dim=1)
        if self.loss_type == "ipo":
            return total / tokens.clamp(min=1), total, tokens
        return total, total, tokens

    def reference(self, model: Model, batch: MicroBatch) -> Tensor:
        return self._logps(model, batch)[0].detach()

    prepare = references_only  # DPO's only frozen terms are the reference's

    def loss(self, model: Model, batch: MicroBatch, reference: Tensor
             ) -> tuple[Tensor, dict[str, float]]:
        scores, total, tokens = self._logps(model, batch)
        n = batch.items
        loss, stats = dpo_loss(scores[:n], scores[n:], reference[:n], reference[n:], self.beta,
                               self.label_smoothing, self.loss_type)
        if self.rpo_alpha:
            nll = nll_per_token(total[:n], tokens[:n])
            loss = loss + self.rpo_alpha * nll
            stats.update(dpo_loss=stats["loss"], nll_chosen=nll.item(), loss=loss.item())
        return loss, stats


@dataclasses.dataclass(frozen=True)
class GRPO:
    """GRPO on CompletionGroups, one optimizer step per batch of fresh samples: the sampling
    policy is the current one, so old log-probs are the policy's own, detached (ratio 1 with a
    non-zero gradient; TRL's num_iterations=1). Several steps on one batch would need the log-
    probs from before the first of them, computed once like the reference's."""

    tokenizer: Any
    max_length: int
    clip_eps: float = 0.2
    kl_coef: float = 0.04
    epochs = 1

    def encode(self, item: CompletionGroup) -> EncodedItem:
        rows = tuple(encode(self.tokenizer, item.prompt, c, self.max_length)
                     for c in item.completions)
        advantages = group_advantages(torch.tensor([item.rewards], dtype=torch.float64))[0]
        return EncodedItem(rows, tuple(float(a) for a in advantages))

    reference = per_token_reference
    prepare = references_only  # one step per batch: the old log-probs are the policy's own

    def loss(self, model: Model, batch: MicroBatch, reference: Tensor
             ) -> tuple[Tensor, dict[str, float]]:
        logps, mask = token_logps(model, batch.tokens)
        return grpo_loss(logps, logps.detach(), reference, batch.values, mask, self.clip_eps,
                         self.kl_coef)


@dataclasses.dataclass(frozen=True)
class SFT:
    """Supervised fine-tuning on Demonstrations (the warm start before round 0): the mean NLL
    per completion token, pooled over the micro-batch. No reference terms: a warm start only
    imitates, and its gate (training.Trainer.warm_start) checks what it did to validation."""

    tokenizer: Any
    max_length: int
    epochs = 1

    def encode(self, item: Demonstration) -> EncodedItem:
        context, completion = split_program(item.prompt, item.completion)
        return EncodedItem((encode(self.tokenizer, context, completion, self.max_length),),
                           (0.0,))

    def reference(self, model: Model, batch: MicroBatch) -> Tensor:
        return torch.zeros(0)  # nothing: the reference model is not consulted

    prepare = references_only

    def loss(self, model: Model, batch: MicroBatch, reference: Tensor
             ) -> tuple[Tensor, dict[str, float]]:
        logps, mask = token_logps(model, batch.tokens)
        loss = nll_per_token(logps.sum(dim=1), mask.sum(dim=1))
        return loss, {"loss": loss.item()}
