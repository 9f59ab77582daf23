"""Log-probabilities of completions given prompts: what is scored, how it is batched.

What is scored: (context, completion) texts; for a candidate program, tasks.split_program
gives them (the signature moves from the prompt's end to the completion).

Batching. Sequences are prompt ids + completion ids (tokenised separately, as TRL does; the
prompt with the tokenizer's special tokens, the completion without, and no EOS appended: base-
model completions end at stop strings, not at EOS). Rows are right-padded to the batch's
longest, so position ids start at 0 on every row with no position_ids argument. One forward per
batch; the output head runs only at completion positions, in chunks (`token_logps`).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint


@dataclasses.dataclass(frozen=True)
class TokenBatch:
    """Right-padded token ids; completion_mask is 1 where input_ids holds a completion token."""

    input_ids: Tensor  # [B, L] long
    attention_mask: Tensor  # [B, L] long
    completion_mask: Tensor  # [B, L] long

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def to(self, device: torch.device) -> TokenBatch:
        return TokenBatch(self.input_ids.to(device), self.attention_mask.to(device),
                          self.completion_mask.to(device))


def encode(tokenizer: Any, context: str, completion: str, max_length: int
           ) -> tuple[list[int], list[int]]:
    """Prompt and completion ids, truncated to `max_length` tokens together: the completion
    keeps its first max_length - 1 tokens, the prompt its last tokens (TRL's keep_end), at least
    one so that the first completion token has something to be predicted from."""
    if max_length < 2:
        raise ValueError(f"max_length must be >= 2 (a prompt token and a completion token), "
                         f"got {max_length}")
    # split_special_tokens: model text that spells a special token (`<eos>` in a comment) is
    # the characters the model sampled, never the token: parsed, a passing program with
    # `# done<eos>` was trained as a real EOS mid-program (red-team pass 15). The rollout
    # backends tokenize prompts the same way, so the learner sees the ids the model saw.
    prompt_ids = list(tokenizer(context, add_special_tokens=True,
                                split_special_tokens=True)["input_ids"])
    completion_ids = list(tokenizer(completion, add_special_tokens=False,
                                    split_special_tokens=True)["input_ids"])
    if not prompt_ids:
        prompt_ids = [pad_id(tokenizer) if tokenizer.bos_token_id is None
                      else tokenizer.bos_token_id]
    completion_ids = completion_ids[:max_length - 1]
    prompt_ids = prompt_ids[-(max_length - len(completion_ids)):]
    return prompt_ids, completion_ids


def collate(encoded: Sequence[tuple[list[int], list[int]]], pad_token_id: int) -> TokenBatch:
    """Right-pad (prompt ids, completion ids) rows into one TokenBatch."""
    if not encoded:
        raise ValueError("collate needs at least one sequence")
    length = max(len(p) + len(c) for p, c in encoded)
    ids = torch.full((len(encoded), length), pad_token_id, dtype=torch.long)
    attention = torch.zeros((len(encoded), length), dtype=torch.long)
    completion = torch.zeros((len(encoded), length), dtype=torch.long)
    for row, (p, c) in enumerate(encoded):
        ids[row, :len(p) + len(c)] = torch.tensor(p + c, dtype=torch.long)
        attention[row, :len(p) + len(c)] = 1
        completion[row, len(p):len(p) + len(c)] = 1
    return TokenBatch(ids, attention, completion)


@dataclasses.dataclass(frozen=True)
class CausalLM:
    """A causal LM as the log-prob code uses it: the module (for its output head and config) and
    the call that runs it, which a training engine may wrap (None: the module itself)."""

    module: nn.Module
    forward: Callable[..., Any] | None = None


CHUNK_POSITIONS = 128  # positions per head projection: 128 x 262k x (2 + 4) B = 200 MB for Gemma 3
UNSUPPORTED_SCALES = ("logit_scale", "output_multiplier", "lm_head_multiplier", "logits_scaling")


def token_logps(model: nn.Module | CausalLM, batch: TokenBatch) -> tuple[Tensor, Tensor]:
    """Per-token log-probs of the completion tokens, ([B, T], mask [B, T]) over the last T
    positions of the batch (T covers every completion token of every row; 0 where masked).

    The [B, L, vocab] logits are never materialised (262k wide for Gemma 3: they dominated the
    learner's memory, 4.4 GB peak RSS against 2.6 GB for TRL's DPOTrainer, bench/learner_step.py).
    The model runs with one logit kept per row; its last hidden state (`hidden_states[-1]`, the
    normed output for HF language models) is projected through the output head only at the
    completion positions, CHUNK_POSITIONS at a time, each chunk under activation checkpointing
    so that backward recomputes its logits instead of keeping them (TRL's fused LM head does the
    same; Liger's fused linear cross-entropy is Triton, GPU only). Log-probs are float32 whatever
    the model's dtype: a bf16 log-softmax loses ~0.01 nats per token, too much for sums over
    hundreds of tokens.
    """
    scored = scored_hidden(model, batch)
    return scored.rows(scored.logps())


@dataclasses.dataclass(frozen=True)
class ScoredHidden:
    """The last hidden state at each position that predicts a completion token (position j
    predicts the token at j + 1), flattened row by row, and how to put per-position values
    back into [B, T] rows (`rows`)."""

    model: CausalLM
    hidden: Tensor  # [N, H]
    targets: Tensor  # [N] the completion tokens predicted
    scored: Tensor  # [B, L - 1] bool: where the N positions lie
    completion_mask: Tensor  # [B, L]

    def logps(self) -> Tensor:
        """[N] float32 log-probs of the targets (the head projected in chunks, token_logps)."""
        head, softcap = _output_head(self.model.module)
        chunks = []
        for start in range(0, len(self.targets), CHUNK_POSITIONS):
            args = (self.hidden[start:start + CHUNK_POSITIONS],
                    self.targets[start:start + CHUNK_POSITIONS], head, softcap)
            chunks.append(checkpoint(_chunk_logps, *args, use_reentrant=False)
                          if torch.is_grad_enabled() else _chunk_logps(*args))
        return torch.cat(chunks) if chunks else self.hidden.new_zeros(0, dtype=torch.float32)

    def rows(self, flat: Tensor) -> tuple[Tensor, Tensor]:
        """[N] values -> ([B, T] float32, mask [B, T]) over the last T positions of the batch."""
        out = torch.zeros(self.scored.shape, dtype=torch.float32, device=flat.device)
        out = out.masked_scatter(self.scored, flat.float())
        # Trim to the last T positions: from the earliest completion token of any row.
        has_completion = self.completion_mask.any(dim=1)
        starts = self.completion_mask.float().argmax(dim=1)
        first = int(starts[has_completion].min()) if bool(has_completion.any()) else \
            self.completion_mask.shape[1] - 1
        return out[:, first - 1:], self.completion_mask[:, first:]


def scored_hidden(model: nn.Module | CausalLM, batch: TokenBatch) -> ScoredHidden:
    """One forward of `model` on `batch` (one logit kept per row), its last hidden state at the
    positions that predict completion tokens."""
    if isinstance(model, nn.Module):
        model = CausalLM(model)
    out = (model.forward or model.module)(
        input_ids=batch.input_ids, attention_mask=batch.attention_mask, logits_to_keep=1,
        output_hidden_states=True, use_cache=False)
    if not out.hidden_states:
        raise RuntimeError(f"{type(model.module).__name__} returned no hidden states; the "
                           "learner needs output_hidden_states=True to be honoured")
    scored = batch.completion_mask[:, 1:].bool()
    return ScoredHidden(model, out.hidden_states[-1][:, :-1][scored],
                        batch.input_ids[:, 1:][scored], scored, batch.completion_mask)


def _output_head(module: nn.Module) -> tuple[nn.Module, float | None]:
    config = module.config.get_text_config()
    scaled = [name for name in UNSUPPORTED_SCALES if getattr(config, name, None) not in (None, 1)]
    if scaled:
        raise ValueError(f"{config.model_type} scales its logits ({scaled}); the learner's "
                         "log-prob code applies only final_logit_softcapping: add the scale "
                         "to logprobs._chunk_logps")
    head = module.get_output_embeddings()
    if head is None:
        raise ValueError(f"{type(module).__name__} has no output embeddings to score with")
    return head, getattr(config, "final_logit_softcapping", None)


def _chunk_logps(hidden: Tensor, targets: Tensor, head: nn.Module, softcap: float | None
                 ) -> Tensor:
    logits = head(hidden)
    if softcap:  # Gemma 2's tanh soft-capping, as its forward applies it
        logits = torch.tanh(logits / softcap) * softcap
    logits = logits.float()
    return logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, -1)


def sequence_logps(model: nn.Module | CausalLM, batch: TokenBatch) -> tuple[Tensor, Tensor]:
    """Summed completion log-probs [B] and completion token counts [B], one forward."""
    logps, mask = token_logps(model, batch)
    return logps.sum(dim=1), mask.sum(dim=1)


@torch.no_grad()
def text_logps(model: nn.Module | CausalLM, tokenizer: Any, texts: Sequence[tuple[str, str]],
               max_length: int, batch_size: int = 4, device: torch.device | str = "cpu",
               compute: Callable[[], Any] = contextlib.nullcontext) -> list[tuple[float, int]]:
    """(summed completion log-prob, completion tokens) per (context, completion) text, in the
    texts' order; batched by length. `compute`: the engine's autocast context, if any."""
    encoded = [encode(tokenizer, context, completion, max_length)
               for context, completion in texts]
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i][0]) + len(encoded[i][1]))
    out: list[tuple[float, int]] = [(0.0, 0)] * len(encoded)
    for start in range(0, len(order), batch_size):
        rows = order[start:start + batch_size]
        batch = collate([encoded[i] for i in rows], pad_id(tokenizer)).to(device)
        with compute():
            sums, counts = sequence_logps(model, batch)
        for i, total, count in zip(rows, sums.tolist(), counts.tolist()):
            out[i] = (total, int(count))
    return out


def pad_id(tokenizer: Any) -> int:
    """The id right-padding uses (masked out everywhere, so any real id works)."""
    for token_id in (tokenizer.pad_token_id, tokenizer.eos_token_id):
        if token_id is not None:
            return int(token_id)
    raise ValueError("the tokenizer has neither a pad nor an EOS token to pad batches with")
